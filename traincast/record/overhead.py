"""The profiler's own host cost per recorded event, measured on this machine.

A profiled step is slower than the same step without the profiler: every event Kineto
records costs the host thread that recorded it some time (the RecordFunction callbacks,
taking timestamps, storing the event), more with ``record_shapes`` (input shapes and
types), ``with_stack`` (the Python tracer records every Python call) and the
:class:`~torch.profiler.ExecutionTraceObserver` (an execution-trace node, its inputs and
outputs, written as JSON while the step runs). Lin et al. (arXiv 2404.12674, Sec. 6) remove
the profiler's own cost, about 2 us per CPU event in their setup, to predict the unprofiled
step.

:func:`measure_profiler_overhead` measures that cost here: it times a loop of a small
workload without the profiler and under each setting, interleaving the settings over
``repeats`` rounds and keeping the fastest round of each (the least disturbed by other work
on the machine), and divides the extra time by the number of host events the profiler
recorded in the exported trace. Two workloads:

* ``"step"`` (default): training steps of a tiny MLP (3 linear layers of width 32, batch 8,
  MSE loss, SGD): nested ops, autograd and optimizer ops with their real inputs, ~170 host
  events per step, host-bound;
* ``"add"``: ``torch.add`` of two 4-element tensors, one event per op. It gives about half
  the per-event cost of ``"step"`` on the same machine (a hot loop of one op keeps the
  profiler's code and data in cache; benchmarks/README.md, "Unprofiled step time"), and real
  models cost more than either.

Settings:

* ``kineto``: ``torch.profiler.profile(activities=[CPU])`` (plus ``CUDA`` on a GPU): ns per
  host event;
* ``record_shapes``, ``execution_trace``: Kineto plus that option, ns per host event (Kineto's
  cost included);
* ``with_stack``: Kineto plus the Python tracer, ns per ``python_function`` event it adds (the
  extra time beyond Kineto's cost for the other events, divided by the Python events: with
  ``with_stack`` every Python call is an event, about one per op in the loop).

:func:`overhead_table` gives the table shipped with the package
(``traincast/costs/data/profiler_overhead.toml``, measured with this module) for a torch
version, and :func:`per_event_ns` the cost per event of a trace recorded with some settings:
Kineto's, plus each option's extra over Kineto (the extras are taken as additive).

torch is imported only inside :func:`measure_profiler_overhead`.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from traincast.errors import ParameterError

__all__ = ["SETTINGS", "ProfilerOverhead", "measure_profiler_overhead", "overhead_table",
           "per_event_ns"]

#: the settings measured, each Kineto plus (at most) one option
SETTINGS: tuple[str, ...] = ("kineto", "record_shapes", "with_stack", "execution_trace")

#: Chrome-trace categories counted as host events (what the profiler records on host threads)
_HOST_CATS = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver",
              "gpu_user_annotation_host", "runtime"}


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


def _host_events(path: Path) -> tuple[int, int]:
    """(host events other than Python calls, python_function events) in an exported Chrome
    trace (complete events of host categories)."""
    with open(path, "rb") as fh:
        doc = json.load(fh)
    cats = [e.get("cat") for e in doc.get("traceEvents", []) if e.get("ph") == "X"]
    py = sum(1 for c in cats if c == "python_function")
    return sum(1 for c in cats if c in _HOST_CATS) - py, py


def measure_profiler_overhead(device: str = "cpu", *, workload: str = "step",
                              n_ops: int | None = None, repeats: int = 5,
                              settings: tuple[str, ...] = SETTINGS,
                              threads: int = 1) -> ProfilerOverhead:
    """Measure the profiler's host cost per recorded event on this machine.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (the workload runs there; on CUDA the profiler also
            records CUDA activity and the runtime calls count as host events).
        workload: ``"step"`` (tiny MLP training steps) or ``"add"`` (tiny ``torch.add``
            ops); see the module docstring.
        n_ops: iterations of the workload per timed loop (default 100 steps, or 3,000 adds
            of ~2 us each on a CPU).
        repeats: rounds; each setting's fastest round is kept.
        settings: which of :data:`SETTINGS` to measure (``kineto`` is always measured).
        threads: ``torch.set_num_threads`` while measuring (restored afterwards).

    Returns:
        A :class:`ProfilerOverhead`; ``ns_per_event`` may be 0 for a setting whose cost
        is below the noise of the machine (it is clipped at 0).

    Raises:
        ParameterError: bad arguments or an unknown setting.
    """
    if workload not in ("step", "add"):
        raise ParameterError(f"workload must be 'step' or 'add', got {workload!r}")
    if n_ops is None:
        n_ops = 100 if workload == "step" else 3000
    if not isinstance(n_ops, int) or n_ops < 10:
        raise ParameterError(f"n_ops must be an integer >= 10, got {n_ops!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ParameterError(f"repeats must be an integer >= 1, got {repeats!r}")
    bad = [s for s in settings if s not in SETTINGS]
    if bad:
        raise ParameterError(f"unknown profiler setting(s) {bad}; expected {SETTINGS}")
    try:
        import torch
        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile
    except ImportError as exc:  # pragma: no cover - torch is optional
        raise ParameterError("measuring the profiler needs torch") from exc
    if device not in ("cpu", "cuda"):
        raise ParameterError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ParameterError("device='cuda' but torch sees no GPU")
    todo = ["kineto"] + [s for s in settings if s != "kineto"]
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    work = _workload(workload, device)

    def loop() -> int:
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(n_ops):
            work()
        sync()
        return time.perf_counter_ns() - t0

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    best: dict[str, int] = {}
    events: dict[str, tuple[int, int]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="traincast-overhead-"))
    try:
        loop()  # warm up (allocator, dispatcher caches)
        for _ in range(repeats):
            t = loop()
            best["none"] = min(best.get("none", t), t)
            for s in todo:
                et = None
                if s == "execution_trace":
                    et = ExecutionTraceObserver().register_callback(str(tmp / "et.json"))
                with profile(activities=activities, record_shapes=s == "record_shapes",
                             with_stack=s == "with_stack", execution_trace_observer=et) as prof:
                    t = loop()
                if et is not None:
                    et.unregister_callback()
                best[s] = min(best.get(s, t), t)
                if s not in events:
                    trace = tmp / "kineto.json"
                    prof.export_chrome_trace(str(trace))
                    events[s] = _host_events(trace)
                    trace.unlink(missing_ok=True)
    finally:
        torch.set_num_threads(old_threads)
        for f in tmp.iterdir():
            f.unlink(missing_ok=True)
        os.rmdir(tmp)
    ns = {}
    per_op = {}
    for s in todo:
        n_host, n_py = events.get(s, (0, 0))
        extra = max(best[s] - best["none"], 0)
        per_op[s] = round((n_host + n_py) / n_ops, 3)
        if s == "with_stack":  # the rest beyond Kineto's cost, per Python event
            extra = max(extra - n_host * ns["kineto"], 0)
            ns[s] = round(extra / max(n_py, 1), 1)
        else:
            ns[s] = round(extra / max(n_host + n_py, 1), 1)
    return ProfilerOverhead(
        ns_per_event=ns, events_per_op=per_op,
        baseline_ns_per_op=round(best["none"] / n_ops, 1), torch=str(torch.__version__),
        device=device, date=datetime.date.today().isoformat(), machine=_machine(device),
        workload=workload, n_ops=n_ops, repeats=repeats)


def _workload(name: str, device: str) -> Any:
    """The function one iteration of the workload calls (see the module docstring)."""
    import torch
    from torch import nn

    if name == "add":
        a = torch.ones(4, device=device)
        b = torch.ones(4, device=device)
        add = torch.add
        return lambda: add(a, b)
    gen = torch.Generator().manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                        nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x = torch.randn(8, 32, generator=gen).to(device)
    y = torch.randn(8, 1, generator=gen).to(device)
    mse = nn.functional.mse_loss

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        mse(net(x), y).backward()
        opt.step()

    return step


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _machine(device: str) -> str:
    cpu = cpu_name()
    if device == "cuda":
        try:
            import torch

            cpu += f", {torch.cuda.get_device_name()}"
        except Exception:  # pragma: no cover - informational only
            pass
    return cpu


# ----------------------------------------------------------------- the shipped table


def _table_path() -> Path:
    return Path(str(resources.files("traincast.costs").joinpath("data",
                                                                "profiler_overhead.toml")))


def overhead_table(torch_version: str | None = None, device: str = "cpu") -> ProfilerOverhead:
    """The shipped overhead table for ``torch_version`` (its ``major.minor``; the newest
    entry for ``device`` when there is no such entry or no version is given).

    Raises:
        ParameterError: the table holds no entry for ``device``.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]

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
