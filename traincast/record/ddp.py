"""Data-parallel training of a random configuration, timed for real on local CPU ranks.

The ground truth of ``predict --from-et ET --world-size N``: the configuration of
:mod:`traincast.record.random_models` (DLRM or Transformer, the same model, loss and SGD as its
single-rank recording) wrapped in :class:`torch.nn.parallel.DistributedDataParallel` (gloo,
default buckets) on ``world`` processes of one thread each, every rank on its own batches of
the configuration's (per-rank) batch size. :func:`time_ddp` times ``steps`` steps after
``warmup`` in ``repeats`` blocks and returns the median over blocks of the slowest rank's
median step, as the single-rank recording does, with no profiler attached.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from traincast.errors import ParameterError
from traincast.record.local_group import free_port, join_group

__all__ = ["time_ddp"]


def _worker(rank: int, world: int, port: int, cfg: dict[str, Any], warmup: int, steps: int,
            repeats: int, threads: int, out_dir: str) -> None:  # pragma: no cover - spawned
    import warnings

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from traincast.record.random_models import build_dlrm, build_transformer

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    join_group(rank, world, port)
    build = build_dlrm if cfg["kind"] == "dlrm" else build_transformer
    # each rank its own batches; DDP broadcasts rank 0's weights at construction
    net, loss_fn, _, batches = build({**cfg, "seed": int(cfg.get("seed", 0)) + 1000 * rank})
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(i: int) -> None:
        inputs, target = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(*inputs), target).backward()
        opt.step()

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
    Path(out_dir, f"rank{rank}.txt").write_text(" ".join(str(int(m)) for m in medians))
    model = None  # its reducer holds the process group: let it go first
    dist.barrier()  # nobody tears the store down while a peer still talks to it
    dist.destroy_process_group()


def time_ddp(cfg: dict[str, Any], *, world: int = 2, warmup: int = 5, steps: int = 20,
             repeats: int = 3, threads: int = 1) -> dict[str, Any]:
    """Train ``cfg`` (a :mod:`traincast.record.random_models` configuration; ``batch`` is per
    rank) with DDP on ``world`` local gloo ranks.

    Returns ``step_ns`` (median over the blocks of the slowest rank's median step, int ns),
    ``repeats_ns`` (per block) and ``noise`` (max/min - 1 of the blocks).

    Raises:
        ParameterError: ``world`` < 2 or a configuration of an unknown kind.
    """
    import torch.multiprocessing as mp

    if world < 2:
        raise ParameterError(f"data parallelism needs >= 2 ranks, got {world}")
    if cfg.get("kind") not in ("dlrm", "transformer"):
        raise ParameterError(f"unknown configuration kind {cfg.get('kind')!r}")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world, free_port(), cfg, warmup, steps, repeats, threads, tmp),
                 nprocs=world, join=True)
        per_rank = [[int(v) for v in Path(tmp, f"rank{r}.txt").read_text().split()]
                    for r in range(world)]
    slowest = [max(vals) for vals in zip(*per_rank, strict=True)]
    return {"step_ns": int(np.median(slowest)), "repeats_ns": slowest,
            "noise": max(slowest) / min(slowest) - 1 if min(slowest) > 0 else 0.0}
