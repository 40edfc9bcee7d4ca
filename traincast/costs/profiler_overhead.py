"""The profiler's own host cost per recorded event: the model and the shipped table.

A profiled step is slower than the same step without the profiler: every event Kineto
records costs the host thread that recorded it some time, more with ``record_shapes``,
``with_stack`` (one ``python_function`` event per Python call) and the execution-trace
observer. :class:`ProfilerOverhead` holds that cost in ns per host event per setting
(:data:`SETTINGS`, each Kineto plus at most one option); :func:`per_event_ns` gives the cost
of one event of a trace recorded with some settings: Kineto's, plus each option's extra over
Kineto (the extras are taken as additive, never negative).

:func:`overhead_table` reads the table shipped with the package
(``traincast/costs/data/profiler_overhead.toml``: per torch ``major.minor`` and device, with
the machine and date of the measurement), measured with
:func:`traincast.record.overhead.measure_profiler_overhead`, the harness that times a small
torch workload with and without the profiler (its docstring gives the method).

Errors: :class:`~traincast.errors.ParameterError` when the table has no entry for a device.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from traincast.errors import ParameterError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["SETTINGS", "ProfilerOverhead", "overhead_table", "per_event_ns"]

#: the settings measured, each Kineto plus (at most) one option
SETTINGS: tuple[str, ...] = ("kineto", "record_shapes", "with_stack", "execution_trace")


@dataclass
class ProfilerOverhead:
    """Host cost of the profiler per recorded event, in ns, per setting.

    Attributes:
        ns_per_event: setting (:data:`SETTINGS`) -> ns per host event (total, Kineto
            included); for ``with_stack``, ns per ``python_function`` event.
        events_per_op: setting -> host events recorded per iteration of the workload
            (python_function events add to it with ``with_stack``; runtime calls on a GPU).
        baseline_ns_per_op: the unprofiled cost of one iteration of the workload.
        torch, device, date, machine: where and when it was measured.
        workload, n_ops, repeats: what was timed, the loop length and the rounds kept the
            best of.
        source: where the numbers come from (a measurement or the shipped table).
    """

    ns_per_event: dict[str, float]
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
    return ProfilerOverhead(ns_per_event=ns, torch=str(v.get("torch", "")),
                            device=str(v.get("device", "cpu")), date=str(v.get("date", "")),
                            machine=str(v.get("machine", "")),
                            source=f"{_table_path().name} entry {name}, measured on "
                                   f"{v.get('machine', '?')}")
