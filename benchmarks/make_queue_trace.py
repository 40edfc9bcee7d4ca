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
                ret = max(ret, done[e - p.depth] + p.wake_ns)
            l_e[i] = ret
            k_s[i] = max(l_s[i] + p.latency_ns, k_e[i - 1] if i else 0)
            k_e[i] = k_s[i] + dur[i]
            done.append(int(k_e[i]))
            op_e[i] = l_e[i] + p.post_ns
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
            sy_e[s] = max(t + p.sync_ns, k_e[s * p.ops + p.ops - 1] + p.wake_ns)
            t = sy_e[s] + p.gap_ns
        st_e[s] = t
        t += 1_000
    return {"op_start": op_s, "op_end": op_e, "launch_start": l_s, "launch_end": l_e,
            "kernel_start": k_s, "kernel_end": k_e, "step_start": st_s, "step_end": st_e,
            "sync_start": sy_s, "sync_end": sy_e}


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
