"""A synthetic single-GPU Kineto trace with a known launch queue, and its ground truth.

The trace is produced by a small discrete-event simulation of one host thread launching
kernels onto one CUDA stream, written independently of traincast's graph so that it can
check it (issue 12, physics tests):

* the host thread runs, per step, ``ops`` CPU ops (``aten::mul``); each does ``pre_ns`` of
  work, calls ``cudaLaunchKernel`` and does ``post_ns`` after it returns; ``gap_ns`` lies
  between ops;
* a launch costs ``launch_ns`` of host time, but returns only when the stream's queue holds
  fewer than ``depth`` entries: launch ``i`` returns at
  ``max(start + launch_ns, end of kernel i - depth + wake_ns)`` (the CUDA behaviour HTA
  describes for its queue-length counter: a full queue stalls the CPU until the stream
  drains);
* kernel ``i`` starts at ``max(launch start + latency_ns, end of kernel i - 1)`` and runs
  ``kernel_ns[i]`` (a fixed pseudo-random mix around ``kernel_mean_ns``);
* optionally each step ends with a ``cudaStreamSynchronize`` (the loss ``.item()``) that
  returns at ``max(start + sync_ns, end of the step's last kernel + wake_ns)``;
* with ``drain`` > 0, a launch that finds the queue full (entry ``i - depth`` not yet
  complete) returns only after entry ``i - depth + drain`` completes: the driver frees queue
  space in batches, so a few launches block for several kernels and the next ones return at
  once (median launch short, mean long: the pattern of real GPU-bound steps);
* optionally every ``copy_every``-th op also copies its result to pageable host memory
  (``cudaMemcpyAsync``, ``Memcpy DtoH (Device -> Pageable)``): the copy runs ``copy_ns`` on the
  stream after the kernels before it, and the call returns only at
  ``max(start + copy_call_ns, end of the copy + wake_ns)`` (a copy to pageable memory is
  synchronous whatever the API's name says);
* ``ProfilerStep#N`` annotations mark the steps.

:func:`simulate` returns the event times for a kernel-time multiplier ``k``, so a test can
compare traincast's what-if (``speedup=kind:device=1/k``) with the ground truth: the same
program run with kernels ``k`` times longer.

Run ``python benchmarks/make_queue_trace.py OUT.json`` to write a trace.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Params:
    steps: int = 8
    ops: int = 600
    depth: int = 256
    pre_ns: int = 6_000
    post_ns: int = 3_000
    gap_ns: int = 2_000
    launch_ns: int = 4_000
    latency_ns: int = 5_000
    wake_ns: int = 2_000
    kernel_mean_ns: int = 30_000
    sync: bool = True
    sync_ns: int = 6_000
    seed: int = 1
    #: every ``hidden_every``-th op also enqueues an entry the trace does not show (an event
    #: record: it takes a queue slot and completes with the kernel before it); 0: none
    hidden_every: int = 0
    #: every ``copy_every``-th op ends with a blocking copy to pageable memory; 0: none
    copy_every: int = 0
    copy_ns: int = 3_000
    copy_call_ns: int = 4_000
    #: the first ``unrecorded`` steps run but are not written (the profiler's warm-up: the
    #: queue is already full when the trace begins)
    unrecorded: int = 0
    #: a launch that finds the queue full waits until ``drain`` more entries have completed
    #: (the driver frees push-buffer space in batches: a few launches block for several
    #: kernels, the next ones return at once); 0: it waits for one entry
    drain: int = 0


def gpu_bound(**kw: object) -> Params:
    """A GPU-bound step in which nearly every host runtime call waits (the pattern of a real
    V100 step, issue 27): kernels longer than the host's work per op, a queue
    that stays full, and every eighth op copying to pageable memory."""
    base: dict[str, object] = {"ops": 300, "depth": 64, "kernel_mean_ns": 60_000,
                               "pre_ns": 5_000, "post_ns": 3_000, "gap_ns": 2_000, "unrecorded": 2,
                               "launch_ns": 4_000, "copy_every": 8}
    base.update(kw)
    return Params(**base)  # type: ignore[arg-type]


def kernel_durations(p: Params) -> np.ndarray:
    """int64[steps * ops] kernel durations (ns): a lognormal mix around the mean."""
    rng = np.random.default_rng(p.seed)
    d = rng.lognormal(np.log(p.kernel_mean_ns), 0.6, p.steps * p.ops)
    return np.maximum(np.rint(d * p.kernel_mean_ns / d.mean()), 1_000).astype(np.int64)


def simulate(p: Params, k: float = 1.0) -> dict[str, np.ndarray]:
    """Event times (ns) of the program with kernel durations multiplied by ``k``.

    Returns arrays: op_start/op_end, launch_start/launch_end, kernel_start/kernel_end (one
    per op), step_start/step_end (one per step), sync_start/sync_end (one per step, -1
    without syncs).
    """
    dur = np.rint(kernel_durations(p) * k).astype(np.int64)
    n = dur.size
    op_s = np.zeros(n, np.int64)
    op_e = np.zeros(n, np.int64)
    l_s = np.zeros(n, np.int64)
    l_e = np.zeros(n, np.int64)
    k_s = np.zeros(n, np.int64)
    k_e = np.zeros(n, np.int64)
    st_s = np.zeros(p.steps, np.int64)
    st_e = np.zeros(p.steps, np.int64)
    sy_s = np.full(p.steps, -1, np.int64)
    sy_e = np.full(p.steps, -1, np.int64)
    c_s = np.full(n, -1, np.int64)  # copy call start/end, copy op start/end (-1: none)
    c_e = np.full(n, -1, np.int64)
    cp_s = np.full(n, -1, np.int64)
    cp_e = np.full(n, -1, np.int64)
    last = 0  # end of the stream's last entry
    t = 1_000_000
    done: list[int] = []  # completion time of every queue entry, hidden ones included
    for s in range(p.steps):
        st_s[s] = t
        for j in range(p.ops):
            i = s * p.ops + j
            op_s[i] = t
            l_s[i] = t + p.pre_ns
            ret = l_s[i] + p.launch_ns
            e = len(done)  # this kernel's queue entry
            if e >= p.depth:
                j = e - p.depth
                if p.drain and done[j] > ret:  # full: wait for ``drain`` more entries
                    j = min(j + p.drain, e - 1)
                ret = max(ret, done[j] + p.wake_ns)
            l_e[i] = ret
            k_s[i] = max(l_s[i] + p.latency_ns, last)
            k_e[i] = last = k_s[i] + dur[i]
            done.append(int(k_e[i]))
            op_e[i] = l_e[i] + p.post_ns
            if p.copy_every and i % p.copy_every == p.copy_every - 1:
                c_s[i] = l_e[i] + p.post_ns
                cp_s[i] = max(c_s[i] + p.latency_ns, last)
                cp_e[i] = last = cp_s[i] + round(p.copy_ns * k)
                done.append(int(cp_e[i]))
                c_e[i] = max(c_s[i] + p.copy_call_ns, cp_e[i] + p.wake_ns)
                op_e[i] = c_e[i] + p.post_ns
            if p.hidden_every and i % p.hidden_every == 0:
                # the hidden entry's enqueue call is part of the op's post-launch work, and
                # blocks like a launch when the queue is full
                e = len(done)
                if e >= p.depth:
                    op_e[i] = max(op_e[i], done[e - p.depth] + p.wake_ns + p.post_ns)
                done.append(int(k_e[i]))
            t = op_e[i] + p.gap_ns
        if p.sync:
            sy_s[s] = t
            sy_e[s] = max(t + p.sync_ns, last + p.wake_ns)
            t = sy_e[s] + p.gap_ns
        st_e[s] = t
        t += 1_000
    return {"op_start": op_s, "op_end": op_e, "launch_start": l_s, "launch_end": l_e,
            "kernel_start": k_s, "kernel_end": k_e, "step_start": st_s, "step_end": st_e,
            "sync_start": sy_s, "sync_end": sy_e, "copy_call_start": c_s, "copy_call_end": c_e,
            "copy_start": cp_s, "copy_end": cp_e}


def steps_ns(p: Params, k: float = 1.0) -> np.ndarray:
    """int64[steps]: the ground-truth step durations (ns) for kernel multiplier ``k``."""
    sim = simulate(p, k)
    return sim["step_end"] - sim["step_start"]


def trace(p: Params) -> dict:
    """The Kineto JSON document of the program (k = 1)."""
    sim = simulate(p)
    dur = kernel_durations(p)
    pid, tid = 4242, 4242
    evs: list[dict] = []

    def x(name: str, cat: str, t0: int, t1: int, pid_: int, tid_: int, **args: object) -> None:
        evs.append({"ph": "X", "cat": cat, "name": name, "pid": pid_, "tid": tid_,
                    "ts": t0 / 1e3, "dur": (t1 - t0) / 1e3, "args": args})

    corr = 1
    for s in range(p.steps):
        if s < p.unrecorded:
            continue
        x(f"ProfilerStep#{s}", "user_annotation", int(sim["step_start"][s]),
          int(sim["step_end"][s]), pid, tid)
        for j in range(p.ops):
            i = s * p.ops + j
            x("aten::mul", "cpu_op", int(sim["op_start"][i]), int(sim["op_end"][i]), pid, tid)
            x("cudaLaunchKernel", "cuda_runtime", int(sim["launch_start"][i]),
              int(sim["launch_end"][i]), pid, tid, correlation=corr)
            x("void at::native::vectorized_elementwise_kernel<4, mul>", "kernel",
              int(sim["kernel_start"][i]), int(sim["kernel_start"][i] + dur[i]), 0, 7,
              correlation=corr, stream=7, device=0)
            corr += 1
            if sim["copy_call_start"][i] >= 0:
                x("cudaMemcpyAsync", "cuda_runtime", int(sim["copy_call_start"][i]),
                  int(sim["copy_call_end"][i]), pid, tid, correlation=corr)
                x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", int(sim["copy_start"][i]),
                  int(sim["copy_end"][i]), 0, 7, correlation=corr, stream=7, device=0)
                corr += 1
        if p.sync:
            x("cudaStreamSynchronize", "cuda_runtime", int(sim["sync_start"][s]),
              int(sim["sync_end"][s]), pid, tid, correlation=corr)
            corr += 1
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132,
                                  "totalGlobalMem": 85028224512}],
            "traceEvents": evs, "displayTimeUnit": "ms"}


def write(path: str | Path, p: Params | None = None) -> Path:
    """Write the trace of ``p`` (defaults) as JSON; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(trace(p or Params())))
    return path


if __name__ == "__main__":
    out = write(sys.argv[1] if len(sys.argv) > 1 else "queue_trace.json")
    print(out)
