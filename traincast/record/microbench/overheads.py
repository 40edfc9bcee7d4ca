"""Host overheads (Python loop, call, dispatch, and the profiled T1-T5 of Lin et al.,
arXiv:2404.12674): :func:`measure_overheads`, written to ``overheads.json``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

import numpy as np

from traincast.record.microbench.store import OVERHEADS_SCHEMA, _now
from traincast.record.microbench.timing import _import_torch, _resolve_device


def _loop_ns(fn: Callable[[], Any] | None, n: int, repeats: int) -> list[float]:
    out = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        if fn is None:
            t0 = clock()
            for _ in range(n):
                pass
            out.append((clock() - t0) / n)
        else:
            t0 = clock()
            for _ in range(n):
                fn()
            out.append((clock() - t0) / n)
    return out


def _summ(values: Iterable[float], method: str) -> dict[str, Any]:
    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        return {"median_ns": None, "iqr_ns": None, "n": 0, "method": method}
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_ns": float(med), "iqr_ns": float(q3 - q1), "n": int(a.size),
            "method": method}


def measure_overheads(device: str = "cpu", *, threads: int = 1, iterations: int = 2000,
                      repeats: int = 11) -> dict[str, Any]:
    """Host overheads in ns, in the terms of Lin et al., "Towards Universal Performance
    Modeling for Machine Learning Training on Multi-GPU Platforms" (arXiv:2404.12674, Sec. 4,
    overheads T1-T5), plus un-profiled loop timings.

    Returns the ``overheads.json`` object: ``schema`` (``traincast.overheads/1``), ``device``,
    ``device_name``, ``torch``, ``threads``, ``date``, ``units`` (``"ns"``) and

    - ``python_loop_iter`` -- one iteration of an empty Python ``for`` loop (un-profiled).
    - ``python_call`` -- calling a no-op Python function (loop time subtracted).
    - ``dispatch_tiny_op`` -- ``torch.add`` of two 1-element tensors on ``device``, per call,
      loop time subtracted (un-profiled): Python binding + dispatcher + the op (+ on a GPU the
      kernel launch, asynchronous).
    - ``T1_between_ops`` .. ``T5_between_launches`` -- from a torch-profiler trace of a loop of
      tiny ops (add, mul, relu, sum, layer_norm, softmax on 1x8 tensors): T1 the gap between
      consecutive top-level ``aten::`` ops on the thread; T2 op start to its first launch
      (``cudaLaunchKernel``/``hipLaunchKernel``); T3 end of its last launch to op end; T4 a
      launch call's duration; T5 the gap between consecutive launches inside one op. On CPU
      T2-T5 are null (no launches) with a ``reason``. Profiled values include the profiler's
      own overhead (as in the paper, whose numbers come from profiled traces).
    - ``cpu_op_tiny`` -- the profiled duration of the tiny top-level ops.

    Each entry: ``median_ns``, ``iqr_ns``, ``n`` (samples), ``method``; null ``median_ns``
    when not measurable.
    """
    torch = _import_torch()
    dev, dev_name = _resolve_device(torch, device)
    torch.set_num_threads(threads)
    gpu = dev.type == "cuda"
    out: dict[str, Any] = {"schema": OVERHEADS_SCHEMA, "device": device, "device_name": dev_name,
                           "torch": torch.__version__, "threads": threads, "date": _now(),
                           "units": "ns",
                           "source": "Lin et al., arXiv:2404.12674, host overheads T1-T5"}
    empty = _loop_ns(None, iterations, repeats)
    out["python_loop_iter"] = _summ(empty, f"empty for-loop, {iterations} iterations x "
                                           f"{repeats} repeats")
    base = statistics.median(empty)

    def noop() -> None:
        return None

    out["python_call"] = _summ([v - base for v in _loop_ns(noop, iterations, repeats)],
                               "no-op Python call in a loop, minus the empty loop")
    a = torch.ones(1, device=dev)
    b = torch.ones(1, device=dev)
    add = torch.add
    with torch.no_grad():
        for _ in range(100):
            add(a, b)
        times = _loop_ns(lambda: add(a, b), iterations, repeats)
        if gpu:  # pragma: no cover
            torch.cuda.synchronize()
    out["dispatch_tiny_op"] = _summ([v - base for v in times],
                                    "torch.add on 1-element tensors in a loop, minus the "
                                    "empty loop")

    from torch.profiler import ProfilerActivity, profile  # lazy: torch is optional

    F = torch.nn.functional
    x = torch.randn(1, 8, device=dev)
    ops = [lambda: torch.add(x, x), lambda: torch.mul(x, x), lambda: torch.relu(x),
           lambda: x.sum(), lambda: F.layer_norm(x, (8,)), lambda: torch.softmax(x, -1)]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch.no_grad():
        for f in ops:
            f()
        with profile(activities=acts) as prof:
            for _ in range(max(20, iterations // 40)):
                for f in ops:
                    f()
            if gpu:  # pragma: no cover
                torch.cuda.synchronize()
    evs = prof.profiler.kineto_results.events()
    cpu_ops, launches = [], []
    for e in evs:
        name = e.name()
        if "LaunchKernel" in name:
            launches.append((e.start_ns(), e.end_ns()))
        elif name.startswith("aten::") and str(e.device_type()).endswith("CPU"):
            cpu_ops.append((e.start_ns(), e.end_ns(), e.start_thread_id()))
    cpu_ops.sort()
    top: list[tuple[int, int]] = []
    for s, e, _tid in cpu_ops:  # one thread runs the loop: nesting = containment in time
        if top and s < top[-1][1]:
            continue
        top.append((s, e))
    out["T1_between_ops"] = _summ([s2 - e1 for (_, e1), (s2, _) in pairwise(top)],
                                  "profiled gap between consecutive top-level aten ops")
    out["cpu_op_tiny"] = _summ([e - s for s, e in top], "profiled duration of tiny "
                                                        "top-level aten ops")
    if not launches:
        for k in ("T2_op_to_first_launch", "T3_last_launch_to_op_end", "T4_launch",
                  "T5_between_launches"):
            out[k] = {"median_ns": None, "iqr_ns": None, "n": 0,
                      "method": "profiled launches",
                      "reason": "no kernel launches on this device (CPU)"}
        return out
    launches.sort()  # pragma: no cover - GPU only below
    t2, t3, t5 = [], [], []
    li = 0
    for s, e in top:
        while li < len(launches) and launches[li][0] < s:
            li += 1
        inside = []
        j = li
        while j < len(launches) and launches[j][1] <= e:
            inside.append(launches[j])
            j += 1
        if inside:
            t2.append(inside[0][0] - s)
            t3.append(e - inside[-1][1])
            t5 += [b0 - a1 for (_, a1), (b0, _) in pairwise(inside)]
    out["T2_op_to_first_launch"] = _summ(t2, "profiled op start to its first launch")
    out["T3_last_launch_to_op_end"] = _summ(t3, "profiled end of last launch to op end")
    out["T4_launch"] = _summ([e - s for s, e in launches], "profiled launch call duration")
    out["T5_between_launches"] = _summ(t5, "profiled gap between launches inside one op")
    return out
