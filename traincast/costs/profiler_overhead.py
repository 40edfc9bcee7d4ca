"""The profiler's own host cost per recorded event: the model and the shipped table.

A profiled step is slower than the same step without the profiler: every event Kineto
records costs the host thread that recorded it some time, more with ``record_shapes``,
``with_stack`` (one ``python_function`` event per Python call) and the execution-trace
observer. Two forms of that cost:

* **per event kind** (:data:`PARTS`, ``ProfilerOverhead.per_kind``): each setting's cost is
  a sum over the host events it records, in ns per *op* event (``cpu_op`` and
  ``user_annotation``: one RecordFunction each), per *runtime* call (``cuda_runtime``/
  ``cuda_driver``: CUPTI's callbacks around it), per *python* frame (``python_function``) and
  per *input* of an op (the shapes Kineto or the execution-trace observer records). Kineto's
  part covers ``op`` and ``runtime``; each option adds its own part on top
  (``record_shapes``: ``op`` and ``input``; ``with_stack``: ``op`` and ``python``;
  ``execution_trace``: ``op`` and ``input``). The coefficients are fitted by non-negative
  least squares (:func:`fit_profiler_cost`; Lawson and Hanson, *Solving Least Squares
  Problems*, 1974, ch. 23, as ``scipy.optimize.nnls``) on programs recorded with no profiler
  and with each setting in interleaved rounds (``benchmarks/record_profiler_cost.py``), the
  extra step time of a setting over its base against the events its trace holds per step;
  :func:`kind_costs` combines the parts of the settings a trace was recorded with.
* **per event** (``ProfilerOverhead.ns_per_event``): one figure per setting
  (:data:`SETTINGS`), what :func:`traincast.record.overhead.measure_profiler_overhead`
  measures on a small workload; :func:`per_event_ns` gives the cost of one event of a trace
  recorded with some settings: Kineto's, plus each option's extra over Kineto (the extras are
  taken as additive, never negative). Used when no per-kind table applies.

:func:`overhead_table` reads the table shipped with the package
(``traincast/costs/data/profiler_overhead.toml``: per torch ``major.minor`` and device, with
the machine, date and recording of the measurement).

Errors: :class:`~traincast.errors.ParameterError` when the table has no entry for a device.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from traincast.errors import ParameterError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["FEATURES", "HOST_SCALE_RANGE", "PARTS", "SETTINGS", "ProfilerOverhead",
           "dominant_setting", "fit_profiler_cost", "host_scale", "kind_costs",
           "overhead_table", "per_event_ns"]

#: the settings measured, each Kineto plus (at most) one option
SETTINGS: tuple[str, ...] = ("kineto", "record_shapes", "with_stack", "execution_trace")

#: what a host event of a trace costs the profiler, counted per step: op events (cpu_op and
#: user_annotation), runtime calls, Python frames, inputs of op events
FEATURES: tuple[str, ...] = ("op", "runtime", "python", "input")

#: each setting's part of the cost and the features it is fitted on (ns per feature unit)
PARTS: dict[str, tuple[str, ...]] = {
    "kineto": ("op", "runtime"),
    "record_shapes": ("op", "input"),
    "with_stack": ("op", "python"),
    "execution_trace": ("op", "input"),
}


@dataclass
class ProfilerOverhead:
    """Host cost of the profiler per recorded event, in ns, per setting.

    Attributes:
        ns_per_event: setting (:data:`SETTINGS`) -> ns per host event (total, Kineto
            included); for ``with_stack``, ns per ``python_function`` event.
        per_kind: setting -> feature (:data:`PARTS`) -> ns; used in place of
            ``ns_per_event`` when present (:func:`kind_costs`).
        inputs_per_op: mean inputs per op event of the fitted programs.
        view_op_ns: median view-like op duration per setting in the fitted programs.
        events_per_op: setting -> host events recorded per iteration of the workload
            (python_function events add to it with ``with_stack``; runtime calls on a GPU).
        baseline_ns_per_op: the unprofiled cost of one iteration of the workload.
        torch, device, date, machine: where and when it was measured.
        workload, n_ops, repeats: what was timed, the loop length and the rounds kept the
            best of.
        source: where the numbers come from (a measurement or the shipped table).
    """

    ns_per_event: dict[str, float]
    #: setting (:data:`PARTS`) -> feature -> ns per unit (per op event, runtime call, Python
    #: frame, op input); empty when only the per-event figures are known
    per_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    #: mean inputs per op event of the programs fitted (for traces whose shapes are unknown)
    inputs_per_op: float = 0.0
    #: setting (:data:`SETTINGS`, the one that dominates a trace's cost) -> median duration
    #: (ns) of view-like ops in the fitted programs' traces: the host-speed reference of
    #: :func:`host_scale`
    view_op_ns: dict[str, float] = field(default_factory=dict)
    events_per_op: dict[str, float] = field(default_factory=dict)
    baseline_ns_per_op: float = 0.0
    torch: str = ""
    device: str = "cpu"
    date: str = ""
    machine: str = ""
    workload: str = ""
    n_ops: int = 0
    repeats: int = 0
    source: str = "measured"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def per_event_ns(self, *, record_shapes: bool = False, execution_trace: bool = False,
                     python: bool = False) -> float:
        """ns per host event of a trace recorded with these settings (see
        :func:`per_event_ns`)."""
        return per_event_ns(self.ns_per_event, record_shapes=record_shapes,
                            execution_trace=execution_trace, python=python)


def kind_costs(per_kind: Mapping[str, Mapping[str, float]], *, record_shapes: bool = False,
               with_stack: bool = False, execution_trace: bool = False) -> dict[str, float]:
    """ns per unit of each feature (:data:`FEATURES`) for a trace recorded with these
    settings: Kineto's part plus the part of each option that was on (parts are additive,
    coefficients never negative)."""
    on = {"kineto": True, "record_shapes": record_shapes, "with_stack": with_stack,
          "execution_trace": execution_trace}
    out = dict.fromkeys(FEATURES, 0.0)
    for part, feats in per_kind.items():
        if on.get(part):
            for f, v in feats.items():
                if f in out:
                    out[f] += max(float(v), 0.0)
    return out


def fit_profiler_cost(samples: Sequence[Mapping[str, Any]]) -> tuple[
        dict[str, dict[str, float]], list[dict[str, Any]]]:
    """Fit the per-kind cost (:data:`PARTS`) by non-negative least squares.

    Args:
        samples: one per (program, part): ``part`` (a key of :data:`PARTS`), ``extra_ns``
            (the step time with the setting minus its base, ns per step: no profiler for
            ``kineto``, Kineto alone for an option), ``features`` (:data:`FEATURES` -> count
            per step in the trace recorded with that setting) and ``program``.

    Returns:
        ``(per_kind, report)``: part -> feature -> ns, and per sample the fitted extra and the
        extra predicted when the sample's program is left out of the fit (``loo_ns``; None
        when too few programs remain).

    Raises:
        ParameterError: an unknown part, or a part with no samples.
    """
    from scipy.optimize import nnls  # only a fit needs scipy.optimize (~0.2 s to import)

    per_kind: dict[str, dict[str, float]] = {}
    report: list[dict[str, Any]] = []
    for part, feats in PARTS.items():
        rows = [s for s in samples if s["part"] == part]
        if not rows:
            raise ParameterError(f"no samples for the profiler setting {part!r}")
        x = np.array([[float(r["features"].get(f, 0.0)) for f in feats] for r in rows])
        y = np.array([float(r["extra_ns"]) for r in rows])
        coef, _ = nnls(x, y)
        per_kind[part] = {f: round(float(c), 1) for f, c in zip(feats, coef, strict=True)}
        programs = [str(r.get("program", i)) for i, r in enumerate(rows)]
        for i in range(len(rows)):
            keep = [j for j, p in enumerate(programs) if p != programs[i]]
            loo = None
            if len(keep) >= len(feats):
                c_loo, _ = nnls(x[keep], y[keep])
                loo = float(x[i] @ c_loo)
            report.append({"program": programs[i], "part": part, "extra_ns": float(y[i]),
                           "fitted_ns": float(x[i] @ coef), "loo_ns": loo,
                           **{f: float(v) for f, v in zip(feats, x[i], strict=True)}})
    unknown = {s["part"] for s in samples} - set(PARTS)
    if unknown:
        raise ParameterError(f"unknown profiler setting(s) {sorted(unknown)}; expected "
                             f"{sorted(PARTS)}")
    return per_kind, report


#: the host-speed factor of :func:`host_scale` is kept within these bounds
HOST_SCALE_RANGE: tuple[float, float] = (0.25, 4.0)


def dominant_setting(*, record_shapes: bool = False, with_stack: bool = False,
                     execution_trace: bool = False) -> str:
    """The setting whose cost dominates a trace recorded with these options (the execution
    trace, then shapes, then stacks, else Kineto alone): the key of ``view_op_ns``."""
    if execution_trace:
        return "execution_trace"
    if record_shapes:
        return "record_shapes"
    return "with_stack" if with_stack else "kineto"


def host_scale(view_op_ns: Mapping[str, float], setting: str, trace_view_ns: float | None
               ) -> float:
    """How much slower (> 1) or faster the trace's host recorded than the fitted one.

    The profiler's per-event cost is host work (callbacks, copies of shapes, the ET's
    writes), so it scales with the host's speed; a view-like op does no data work, so its
    recorded duration under the same setting is mostly that cost and the dispatcher's, and
    the ratio of the trace's median to the fitted programs' median is the factor (the same
    reasoning as scaling a kernel model by a measured reference: Habitat, Yu et al., USENIX
    ATC 2021, Sec. 3). 1.0 when either median is missing; kept within
    :data:`HOST_SCALE_RANGE`.
    """
    ref = view_op_ns.get(setting)
    if not ref or trace_view_ns is None or not math.isfinite(trace_view_ns) or ref <= 0:
        return 1.0
    lo, hi = HOST_SCALE_RANGE
    return float(min(max(trace_view_ns / ref, lo), hi))


def per_event_ns(ns_per_event: dict[str, float], *, record_shapes: bool = False,
                 execution_trace: bool = False, python: bool = False) -> float:
    """The profiler's cost of one host event of a trace recorded with these settings.

    A ``python_function`` event (``python=True``; only ``with_stack`` records them) costs the
    ``with_stack`` figure. Any other host event costs Kineto's figure plus the extra of each
    option over Kineto (``record_shapes``, ``execution_trace``; the extras are taken as
    additive and never negative).
    """
    if python:
        return max(float(ns_per_event.get("with_stack", 0.0)), 0.0)
    base = max(float(ns_per_event.get("kineto", 0.0)), 0.0)
    total = base
    for on, key in ((record_shapes, "record_shapes"), (execution_trace, "execution_trace")):
        if on and key in ns_per_event:
            total += max(float(ns_per_event[key]) - base, 0.0)
    return total


def _table_path() -> Path:
    return Path(str(resources.files("traincast.costs").joinpath("data",
                                                                "profiler_overhead.toml")))


def overhead_table(torch_version: str | None = None, device: str = "cpu") -> ProfilerOverhead:
    """The shipped overhead table for ``torch_version`` (its ``major.minor``; the newest
    entry for ``device`` when there is no such entry or no version is given).

    Raises:
        ParameterError: the table holds no entry for ``device``.
    """
    data = tomllib.loads(_table_path().read_text(encoding="utf-8"))
    entries = [(k, v) for k, v in data.get("overhead", {}).items()
               if v.get("device", "cpu") == device]
    if not entries:
        raise ParameterError(f"no profiler overhead entry for device {device!r}")

    def key(version: str) -> tuple[int, ...]:
        out = []
        for part in version.split("+")[0].split(".")[:2]:
            out.append(int(part) if part.isdigit() else 0)
        return tuple(out)

    entries.sort(key=lambda kv: key(str(kv[1].get("torch", "0.0"))))
    chosen = entries[-1]
    if torch_version:
        want = key(torch_version)
        same = [kv for kv in entries if key(str(kv[1].get("torch", "0.0"))) == want]
        if same:
            chosen = same[-1]
    name, v = chosen
    ns = {s: float(v[s]) for s in SETTINGS if s in v and math.isfinite(float(v[s]))}
    per_kind = {part: {f: float(c) for f, c in feats.items() if f in PARTS[part]}
                for part, feats in v.get("per_kind", {}).items() if part in PARTS}
    return ProfilerOverhead(ns_per_event=ns, per_kind=per_kind,
                            inputs_per_op=float(v.get("inputs_per_op", 0.0)),
                            view_op_ns={k: float(x) for k, x in v.get("view_op_ns", {}).items()
                                        if k in SETTINGS},
                            torch=str(v.get("torch", "")),
                            device=str(v.get("device", "cpu")), date=str(v.get("date", "")),
                            machine=str(v.get("machine", "")),
                            source=f"{_table_path().name} entry {name}, measured on "
                                   f"{v.get('machine', '?')}")
