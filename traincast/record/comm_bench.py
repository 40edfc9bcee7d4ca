"""Collective microbenchmarks recorded as profiler traces, for ``traincast calibrate comm``.

:func:`record_collectives` spawns ``world`` ranks of a process group on this machine (gloo on
CPU; NCCL when ``device="cuda"``, one GPU per rank), runs each collective over a range of
message sizes, several times, under the PyTorch profiler, and writes one Kineto trace per rank
(``rank-<r>.json``), one ``ProfilerStep#<i>`` per repetition. The traces are what a user's own
training run would give: :func:`traincast.costs.comm.samples_from_trace` takes each call's
transfer time (end minus the last member's arrival, so the ranks' skew is not counted) and
:meth:`traincast.costs.comm.CommModel.fit` fits the bus-bandwidth curves (``traincast bench
--collective-ranks N`` does both and writes ``comm.json``).

On one CPU host gloo moves data over loopback: the model describes *this* machine's
collectives (what a data-parallel run on it pays), not a network. Sizes follow nccl-tests'
convention (``size_bytes`` is the buffer each rank passes; busbw as nccl-tests defines it).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from traincast.costs.comm import CommModel, samples_from_trace
from traincast.errors import ParameterError
from traincast.record.local_group import join_group, spawn_group
from traincast.record.quiet import quiet_fds
from traincast.trace.load import load

__all__ = ["DEFAULT_SIZES", "record_collectives"]

#: message sizes, bytes: 4 KiB .. 64 MiB, x4 steps (float32 buffers)
DEFAULT_SIZES = tuple(4096 * 4**k for k in range(8))
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def _worker(rank: int, world: int, port: int, out_dir: str, sizes: tuple[int, ...],
            collectives: tuple[str, ...], iters: int, threads: int,
            device: str) -> None:  # pragma: no cover - runs in spawned processes
    import warnings

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    gpu = device in ("cuda", "rocm")  # ROCm builds of torch use the cuda API and RCCL
    if gpu:
        torch.cuda.set_device(rank)
    join_group(rank, world, port, "nccl" if gpu else "gloo")
    dev = torch.device(f"cuda:{rank}" if gpu else "cpu")
    bufs = {}
    for s in sizes:
        n = max(world, s // 4 // world * world)  # divisible by the ranks, float32
        bufs[s] = (torch.ones(n, device=dev), torch.empty(n * world, device=dev),
                   torch.empty(n // world, device=dev), torch.empty(n, device=dev))

    def one(coll: str, s: int) -> None:
        x, gathered, part, out = bufs[s]
        if coll == "all_reduce":
            dist.all_reduce(x)
        elif coll == "all_gather":
            dist.all_gather_into_tensor(gathered, x)
        elif coll == "reduce_scatter":
            dist.reduce_scatter_tensor(part, x)
        elif coll == "all_to_all":
            dist.all_to_all_single(out, x)
        elif coll == "broadcast":
            dist.broadcast(x, 0)

    for coll in collectives:  # warm-up: connections, buffers
        for s in sizes[:2]:
            one(coll, s)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=acts, record_shapes=True) as prof:
        for i in range(iters):
            with record_function(f"ProfilerStep#{i}"):
                for coll in collectives:
                    for s in sizes:
                        one(coll, s)
                if gpu:
                    torch.cuda.synchronize()
    prof.export_chrome_trace(str(Path(out_dir, f"rank-{rank}.json")))
    dist.barrier()
    dist.destroy_process_group()


def record_collectives(out_dir: str | Path, *, world: int = 2,
                       sizes: tuple[int, ...] = DEFAULT_SIZES,
                       collectives: tuple[str, ...] = ("all_reduce",), iters: int = 5,
                       threads: int = 1, device: str = "cpu") -> Path:
    """Record ``collectives`` at ``sizes`` (bytes per rank) on ``world`` local ranks, ``iters``
    repetitions, one Kineto trace per rank in ``out_dir`` (created; existing ``rank-*.json``
    are replaced). Returns ``out_dir``.

    Raises:
        ParameterError: ``world`` < 2, an unknown collective, an empty or non-positive size
            list, ``iters`` < 1, or ``device="cuda"`` with fewer GPUs than ranks.
    """
    if world < 2:
        raise ParameterError(f"collectives need at least 2 ranks, got {world}")
    bad = [c for c in collectives if c not in COLLECTIVE_OPS]
    if bad or not collectives:
        raise ParameterError(f"unknown collective(s) {bad}; known: {', '.join(COLLECTIVE_OPS)}")
    if not sizes or any(int(s) < 4 for s in sizes):
        raise ParameterError("sizes must be a non-empty list of byte counts >= 4")
    if iters < 1:
        raise ParameterError(f"iters must be >= 1, got {iters}")
    import torch

    if device not in ("cpu", "cuda", "rocm"):
        raise ParameterError(f"device must be cpu, cuda or rocm, got {device!r}")
    if device != "cpu" and torch.cuda.device_count() < world:
        raise ParameterError(f"{world} ranks need {world} GPUs; torch sees "
                             f"{torch.cuda.device_count()}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(dir=out) as tmp, quiet_fds():
        spawn_group(_worker, lambda port: (world, port, tmp, tuple(int(s) for s in sizes),
                                           tuple(collectives), int(iters), int(threads),
                                           device), world)
        for r in range(world):
            os.replace(Path(tmp, f"rank-{r}.json"), out / f"rank-{r}.json")
    return out


def fit_comm_model(trace_dir: str | Path) -> Any:
    """The :class:`traincast.costs.comm.CommModel` fitted on the traces of
    :func:`record_collectives` (sigmoid bus-bandwidth curve per collective)."""
    samples = samples_from_trace(load(trace_dir, cache=False))
    if samples.empty:
        raise ParameterError(f"{trace_dir}: no collective call could be timed")
    return CommModel.fit(samples)


def _corun_worker(rank: int, seconds: float, out_dir: str, threads: int
                  ) -> None:  # pragma: no cover - runs in spawned processes
    import time

    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(512, 512), torch.randn(512, 512)  # compute-bound: 268 MFLOP per call
    x, y = torch.randn(8 << 20), torch.randn(8 << 20)  # memory-bound: 96 MiB moved per call
    rates = []
    for fn in (lambda: a @ b, lambda: x.add_(y)):
        for _ in range(3):
            fn()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            fn()
            n += 1
        rates.append(n / (time.perf_counter() - t0))
    Path(out_dir, f"corun{rank}.txt").write_text(" ".join(f"{r:.6g}" for r in rates))


def measure_corun(world: int, *, seconds: float = 2.0, threads: int = 1) -> dict[str, Any]:
    """How much slower each of ``world`` ranks computes when they run at once on this host
    than one alone: a single-thread 512x512 GEMM loop (compute-bound) and a 32 MiB-vector add
    (memory-bound), timed for ``seconds`` alone, then in ``world`` concurrent processes.
    Ranks that share a host share its cores, caches and memory bandwidth (on a 2-vCPU VM two
    ranks may even share one physical core); a kernel model measured alone does not see it.

    Returns ``{"world", "compute_slowdown", "memory_slowdown", "threads", "seconds"}``
    (slowdown = rate alone / mean rate together, >= ~1).
    """
    import torch.multiprocessing as mp

    if world < 1:
        raise ParameterError(f"world must be >= 1, got {world}")

    rates = []
    with tempfile.TemporaryDirectory() as tmp, quiet_fds():
        for n in (1, world):
            mp.spawn(_corun_worker, args=(seconds, tmp, threads), nprocs=n, join=True)
            rates.append([[float(v) for v in Path(tmp, f"corun{r}.txt").read_text().split()]
                          for r in range(n)])
    alone, together = rates[0][0], [sum(r[k] for r in rates[1]) / world for k in (0, 1)]
    return {"world": world, "compute_slowdown": alone[0] / together[0],
            "memory_slowdown": alone[1] / together[1], "threads": threads,
            "seconds": seconds}
