"""Data-parallel training of a random configuration, timed for real on local CPU ranks.

The ground truth of ``predict --from-et ET --world-size N``: the configuration of
:mod:`harness.random_models` (DLRM or Transformer, the same model, loss and SGD as its
single-rank recording) wrapped in :class:`torch.nn.parallel.DistributedDataParallel` (gloo,
default buckets) on ``world`` processes of one thread each, every rank on its own batches of
the configuration's (per-rank) batch size. :func:`time_ddp` times ``steps`` steps after
``warmup`` in ``repeats`` blocks and returns the median over blocks of the slowest rank's
median step, as the single-rank recording does, with no profiler attached.
"""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

from traincast.errors import ParameterError
from traincast.record.local_group import (
    join_group,
    report_and_leave,
    slowest_rank_steps,
    spawn_group,
    timed_blocks,
)

from .random_models import build_dlrm, build_transformer, sgd_step_fn

__all__ = ["time_ddp"]


def _worker(rank: int, world: int, port: int, cfg: dict[str, Any], warmup: int, steps: int,
            repeats: int, threads: int, out_dir: str) -> None:  # pragma: no cover - spawned
    import torch  # optional (traincast[record]) and slow to import: only in the spawned rank
    from torch.nn.parallel import DistributedDataParallel as DDP

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    join_group(rank, world, port)
    build = build_dlrm if cfg["kind"] == "dlrm" else build_transformer
    # each rank its own batches; DDP broadcasts rank 0's weights at construction
    net, loss_fn, _, batches = build({**cfg, "seed": int(cfg.get("seed", 0)) + 1000 * rank})
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    medians = timed_blocks(sgd_step_fn(model, loss_fn, opt, batches), warmup, steps, repeats)
    model = None  # its reducer holds the process group: let it go first
    report_and_leave(out_dir, rank, medians)


def time_ddp(cfg: dict[str, Any], *, world: int = 2, warmup: int = 5, steps: int = 20,
             repeats: int = 3, threads: int = 1) -> dict[str, Any]:
    """Train ``cfg`` (a :mod:`harness.random_models` configuration; ``batch`` is per
    rank) with DDP on ``world`` local gloo ranks.

    Returns ``step_ns`` (median over the blocks of the slowest rank's median step, int ns),
    ``repeats_ns`` (per block) and ``noise`` (max/min - 1 of the blocks).

    Raises:
        ParameterError: ``world`` < 2 or a configuration of an unknown kind.
    """

    if world < 2:
        raise ParameterError(f"data parallelism needs >= 2 ranks, got {world}")
    if cfg.get("kind") not in ("dlrm", "transformer"):
        raise ParameterError(f"unknown configuration kind {cfg.get('kind')!r}")
    with tempfile.TemporaryDirectory() as tmp:
        spawn_group(_worker, lambda port: (world, port, cfg, warmup, steps, repeats, threads,
                                           tmp), world)
        return slowest_rank_steps(tmp, world)
