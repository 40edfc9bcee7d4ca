"""A process group on this machine: the rendezvous, the timed blocks of steps and their
result, shared by the recorders that spawn ranks (:mod:`traincast.record.comm_bench`, and the
benchmark harnesses ``benchmarks/harness/ddp.py`` and ``benchmarks/harness/sharded_dlrm.py``).

torch is optional and slow to import: each function that needs it imports it when called."""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["free_port", "join_group", "report_and_leave", "slowest_rank_steps",
           "spawn_group", "timed_blocks"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_group(fn: Callable[..., None], args: Callable[[int], tuple[Any, ...]],
                nprocs: int, attempts: int = 2) -> None:
    """``torch.multiprocessing.spawn(fn, args(port), nprocs)`` on a fresh free port, once
    more (``attempts`` in all) when a rank died by a signal: gloo aborts the process
    (``std::terminate``, SIGABRT) when a loopback connection of its mesh fails, which a
    busy machine does now and then (seen in CI). A rank that raised a Python exception is
    not retried: its error is re-raised at once."""
    import torch.multiprocessing as mp  # torch: optional and slow to import
    from torch.multiprocessing import ProcessExitedException

    for attempt in range(attempts):
        try:
            mp.spawn(fn, args=args(free_port()), nprocs=nprocs, join=True)
            return
        except ProcessExitedException:
            if attempt == attempts - 1:
                raise


def join_group(rank: int, world: int, port: int, backend: str = "gloo") -> None:
    """Join the ``world``-rank process group rendezvousing on ``127.0.0.1:port``."""
    import torch.distributed as dist  # torch: optional and slow to import

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world)


def timed_blocks(step: Callable[[int], None], warmup: int, steps: int,
                 repeats: int) -> list[float]:
    """On a rank of the group: ``warmup`` untimed steps, then ``repeats`` blocks of ``steps``
    timed steps, each block started together (a barrier); the median step of each block,
    ns. ``step(i)`` runs step ``i``."""
    import torch.distributed as dist  # torch: optional and slow to import

    for i in range(warmup):
        step(i)
    medians = []
    for _ in range(repeats):
        dist.barrier()
        ts = []
        for i in range(steps):
            t0 = time.perf_counter_ns()
            step(i)
            ts.append(time.perf_counter_ns() - t0)
        medians.append(statistics.median(ts))
    return medians


def report_and_leave(out_dir: str, rank: int, medians: list[float]) -> None:
    """Write this rank's block medians to ``out_dir/rank<r>.txt`` and leave the group, after
    a barrier (nobody tears the store down while a peer still talks to it)."""
    import torch.distributed as dist  # torch: optional and slow to import

    Path(out_dir, f"rank{rank}.txt").write_text(" ".join(str(int(m)) for m in medians))
    dist.barrier()
    dist.destroy_process_group()


def slowest_rank_steps(out_dir: str, world: int) -> dict[str, Any]:
    """The result of :func:`report_and_leave` on every rank: ``step_ns`` (median over the
    blocks of the slowest rank's block median, int ns), ``repeats_ns`` (per block) and
    ``noise`` (max/min - 1 of the blocks)."""
    per_rank = [[int(v) for v in Path(out_dir, f"rank{r}.txt").read_text().split()]
                for r in range(world)]
    slowest = [max(vals) for vals in zip(*per_rank, strict=True)]
    return {"step_ns": int(statistics.median(slowest)), "repeats_ns": slowest,
            "noise": max(slowest) / min(slowest) - 1 if min(slowest) > 0 else 0.0}
