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

The result is a :class:`traincast.costs.profiler_overhead.ProfilerOverhead`; the table
shipped with the package (``traincast/costs/data/profiler_overhead.toml``, read by
:func:`traincast.costs.profiler_overhead.overhead_table`) was measured with this module.

torch (optional) is imported only when measuring.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from traincast.costs.profiler_overhead import SETTINGS, ProfilerOverhead
from traincast.errors import ParameterError

__all__ = ["cpu_name", "measure_profiler_overhead"]


#: Chrome-trace categories counted as host events (what the profiler records on host threads)
_HOST_CATS = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver",
              "gpu_user_annotation_host", "runtime"}


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
    try:  # torch: an optional dependency, imported only when measuring
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
    import torch  # optional dependency, imported only when measuring
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
            import torch  # optional dependency, imported only when measuring

            cpu += f", {torch.cuda.get_device_name()}"
        except Exception:  # pragma: no cover - informational only
            pass
    return cpu


