"""A table-wise sharded DLRM trained for real on 2+ CPU ranks (gloo), to time sharding plans.

Each rank holds the embedding tables a placement gives it (``table -> rank``) and a replica of
the bottom and top MLPs. A step, as in DLRM's model-parallel embeddings (Naumov et al., "Deep
Learning Recommendation Model for Personalization and Recommendation Systems", 2019, Sec. 4):

1. every rank looks up its own tables for the whole global batch (``EmbeddingBag``, sum);
2. ``all_to_all_single`` sends each rank its batch slice of every table's pooled embeddings
   (autograd-aware: :func:`torch.distributed.nn.functional.all_to_all_single`);
3. bottom MLP on the rank's dense features, concat with the embeddings, top MLP, BCE loss;
4. backward (the all_to_all's backward returns the embedding gradients to their owners),
   ``all_reduce`` (average) of the MLP gradients, plain SGD on every parameter (dense
   embedding gradients, so a table's update touches all its rows).

:func:`time_placement` spawns the ranks (one torch thread each), times ``steps`` steps after
``warmup`` in ``repeats`` blocks and returns the median step (ns) of the slowest rank.
"""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

from traincast.record.local_group import (
    join_group,
    report_and_leave,
    slowest_rank_steps,
    spawn_group,
    timed_blocks,
)


def _worker(rank: int, world: int, cfg: dict[str, Any], placement: dict[int, int], port: int,
            warmup: int, steps: int, repeats: int, out_dir: str) -> None:  # pragma: no cover
    import torch  # optional (traincast[record]) and slow to import: only in the spawned rank
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_to_all_single

    warnings.filterwarnings("ignore", category=FutureWarning)  # its autograd variant moved

    torch.set_num_threads(1)
    join_group(rank, world, port)
    torch.manual_seed(int(cfg.get("seed", 0)))
    dim = int(cfg["dim"])
    gb = int(cfg["batch"])
    b = gb // world
    tables = cfg["tables"]
    mine = [t for t in range(len(tables)) if placement[t] == rank]
    counts = [sum(1 for t in range(len(tables)) if placement[t] == r) for r in range(world)]
    embs = {t: torch.nn.EmbeddingBag(int(tables[t]["rows"]), dim, mode="sum")
            for t in mine}
    gen = torch.Generator().manual_seed(1000 + rank)
    idx, off = {}, {}
    for t in mine:
        pooling = int(tables[t]["pooling"])
        idx[t] = torch.randint(0, int(tables[t]["rows"]), (gb * pooling,), generator=gen)
        off[t] = torch.arange(0, gb * pooling, pooling)

    def mlp(sizes: list[int]) -> torch.nn.Sequential:
        layers: list[torch.nn.Module] = []
        for a, c in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [torch.nn.Linear(a, c), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    torch.manual_seed(7)  # identical MLP replicas on every rank
    bottom = mlp([int(cfg["dense"]), *cfg["bottom_mlp"], dim])
    top = mlp([dim * (1 + len(tables)), *cfg["top_mlp"], 1])
    x = torch.randn(b, int(cfg["dense"]), generator=gen)
    y = torch.rand(b, 1, generator=gen)
    dense = [*bottom.parameters(), *top.parameters()]
    params = dense + [p for e in embs.values() for p in e.parameters()]
    lr = 0.01

    def step() -> None:
        for p in params:
            p.grad = None
        if mine:
            local = torch.cat([embs[t](idx[t], off[t]) for t in mine], 1)  # [gb, n*dim]
        else:
            local = torch.zeros(gb, 0, requires_grad=True)
        send = local.view(world, b, -1).contiguous().view(-1)
        recv_sizes = [b * c * dim for c in counts]
        recv = torch.empty(sum(recv_sizes))
        got = all_to_all_single(recv, send, output_split_sizes=recv_sizes,
                                input_split_sizes=[b * len(mine) * dim] * world)
        parts = [p.view(b, -1) for p in torch.split(got, recv_sizes) if p.numel()]
        z = torch.cat([bottom(x), *parts], 1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(top(z), y)
        loss.backward()
        for p in dense:
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-lr)

    report_and_leave(out_dir, rank, timed_blocks(lambda i: step(), warmup, steps, repeats))


def time_placement(cfg: dict[str, Any], placement: dict[int, int], *, world: int = 2,
                   warmup: int = 5, steps: int = 20, repeats: int = 3) -> dict[str, Any]:
    """Train ``cfg`` (``tables`` [{rows, pooling}], ``dim``, ``dense``, ``bottom_mlp``,
    ``top_mlp``, global ``batch``, ``seed``) with ``placement`` on ``world`` gloo ranks.

    Returns ``step_ns`` (median over the repeats of the slowest rank's per-repeat median
    step, int ns), ``repeats_ns`` (those per-repeat values) and ``noise`` (max/min - 1 of
    them).
    """

    if int(cfg["batch"]) % world:
        raise ValueError(f"batch {cfg['batch']} is not a multiple of {world} ranks")
    with tempfile.TemporaryDirectory() as tmp:
        spawn_group(_worker, lambda port: (world, cfg, placement, port, warmup, steps,
                                           repeats, tmp), world)
        return slowest_rank_steps(tmp, world)
