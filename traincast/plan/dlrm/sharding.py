"""DLRM embedding sharding: per-table shards, their placement on ranks, and the lookup model.

**Sharding** (per table, ``Layout.sharding``; names as TorchRec's ``ShardingType``):

- ``table``: the whole table on one rank, which looks up all ``B`` samples (``pooling``
  rows per bag) and sends each other rank its ``b`` pooled rows by all_to_all.
- ``row``: ``g`` blocks of ``ceil(rows / g)`` rows, one per rank. Indices are bucketised by
  block, so every rank looks up all ``B`` samples with ``pooling / g`` rows per bag on average
  (ids assumed hashed: popularity spread evenly over the blocks) and produces ``B`` *partial*
  sums of full width, which a **reduce_scatter** sums and splits by sample: TorchRec's
  ``RwPooledEmbeddingDist`` ("Redistributes pooled embedding tensor in RW fashion by
  performing a reduce-scatter operation", ``torchrec/distributed/sharding/rw_sharding.py``).
  Its backward is the all_gather of the output gradients.
- ``column``: ``k = min(g, dim)`` shards of ``dim / k`` columns on ``k`` ranks, each looking
  up all ``B`` samples at full pooling; the pooled column blocks are exchanged by the same
  all_to_all as table-wise shards and concatenated (TorchRec's ``CwPooledEmbeddingSharding``
  derives from the table-wise sharding).
- ``data``: replicated; each rank looks up its ``b`` samples locally (no all_to_all), the dense
  gradient of the *whole table* is all-reduced with the MLP gradients and the dense
  optimizer updates every row: costly for big tables.

**Table placement** (``table`` shards): unless a ``placement`` is given, greedy
longest-processing-time: tables sorted by predicted lookup cost (forward + backward, batch
``B``), largest first, each onto the rank with the least load so far; uniform shards (row,
column, data) are placed first. This is TorchRec's ``GreedyPerfPartitioner``
(``torchrec/distributed/planner/partitioners.py``: "Sort sharding options by storage or perf
in descending order (i.e., large tables will be placed first)", each shard onto the device at
the top of a min-heap of total perf) with ``SortBy.PERF``, and Graham's LPT rule (1969).

Lookup bytes: :func:`traincast.costs.embedding.embedding_bytes` (data-distribution-aware DRAM
bytes, Lin et al., arXiv:2404.12674); without a fitted model, the catalog GPU's bandwidth and
L2 (:func:`catalog_embedding_model`, a lower bound).
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from traincast.costs.embedding import EmbeddingModel, embedding_bytes
from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.plan.spec import LIMITS, DLRMSpec, Layout, PlanError, SystemSpec

# ------------------------------------------------------------------ embedding model


def catalog_embedding_model(gpu: str) -> EmbeddingModel:
    """The un-fitted lookup model of catalog GPU ``gpu``: its HBM bandwidth and L2 size,
    ``eff`` 1, no latency (a lower bound on lookup time).

    Raises:
        PlanError: unknown GPU.
    """
    try:
        g = load_catalog().gpu(gpu)
    except (KeyError, ParameterError) as exc:
        raise PlanError(f"unknown GPU {gpu!r}: {str(exc).strip(chr(39))}") from None
    m = EmbeddingModel(float(g.hbm_gbps), float((g.l2_mb or 0.0) * 2**20))
    m.notes.append(f"not fitted: {g.name} catalog bandwidth {g.hbm_gbps:g} GB/s, eff 1, "
                   f"no latency")
    return m


def on_gpu(model: EmbeddingModel | None, gpu: str) -> EmbeddingModel:
    """``model`` (fitted efficiencies and latencies) moved to ``gpu``'s bandwidth and L2."""
    base = catalog_embedding_model(gpu)
    if model is None:
        return base
    if not isinstance(model, EmbeddingModel):
        raise PlanError(f"embedding_model must be an EmbeddingModel, got {type(model).__name__}")
    out = EmbeddingModel(base.device_bw_gbps, base.l2_bytes, dict(model.eff),
                         dict(model.latency_ns), dict(model.cv_mape), dict(model.fit_mape),
                         dict(model.n_obs), dict(model.n_groups), list(model.notes))
    if not math.isclose(model.device_bw_gbps, base.device_bw_gbps):
        out.notes.append(f"efficiency fitted at {model.device_bw_gbps:g} GB/s applied to "
                         f"{base.device_bw_gbps:g} GB/s")
    return out


@functools.lru_cache(maxsize=65536)
def lookup_bytes(batch: int, pooling: float, dim: float, rows: int, itemsize: int,
                  l2: float, dist: str, alpha: float | None, backward: bool,
                  optimizer: str) -> float:
    """DRAM bytes of one shard's lookup (cached: Zipf unique-row sums are not free)."""
    return embedding_bytes(batch, 1, pooling, dim, rows, itemsize, l2, dist, alpha,
                           backward, optimizer)


# ------------------------------------------------------------------ sharding / placement


@dataclass(frozen=True)
class Shard:
    """One table shard on one rank: ``batch`` samples looked up with ``pooling`` rows per
    bag from ``rows`` rows of width ``dim``."""

    table: int
    how: str
    rank: int
    rows: int
    dim: float
    pooling: float
    batch: int


def resolve_sharding(model: DLRMSpec, layout: Layout) -> tuple[str, ...]:
    """Per-table sharding from ``layout.sharding`` (empty: ``table``; one value: all tables).

    Raises:
        PlanError: a tuple whose length is neither 1 nor the number of tables.
    """
    n = len(model.tables)
    s = tuple(layout.sharding) or ("table",)
    if len(s) == 1:
        s = s * n
    if len(s) != n:
        raise PlanError(f"sharding has {len(s)} values for {n} tables "
                        f"(give one, or one per table)")
    return s


def check_plan_inputs(model: DLRMSpec, system: SystemSpec, layout: Layout, batch: int) -> int:
    """The local batch ``batch / gpus`` of a valid DLRM plan; :class:`PlanError` naming the
    first bad argument (types, batch, ``tp``/``pp``/``dp``, table dims vs the bottom MLP)."""
    if not isinstance(model, DLRMSpec):
        raise PlanError(f"plan_dlrm() takes a DLRMSpec, got {type(model).__name__}")
    if not isinstance(system, SystemSpec):
        raise PlanError(f"system must be a SystemSpec, got {type(system).__name__}")
    if not isinstance(layout, Layout):
        raise PlanError(f"layout must be a Layout, got {type(layout).__name__}")
    if isinstance(batch, bool) or not isinstance(batch, int | np.integer) or batch < 1:
        raise PlanError(f"batch must be an integer >= 1, got {batch!r}")
    if batch > LIMITS["batch"]:
        raise PlanError(f"batch must be at most {int(LIMITS['batch']):,}, got {batch!r}")
    g = system.gpus
    if layout.tp != 1 or layout.pp != 1:
        raise PlanError("a DLRM plan is data parallel with sharded embeddings: tp and pp "
                        "must be 1")
    if layout.dp not in (1, g):
        raise PlanError(f"layout dp ({layout.dp}) must equal the {g} GPUs (or be left at 1)")
    if layout.global_batch is not None and layout.global_batch != batch:
        raise PlanError(f"layout global_batch ({layout.global_batch}) differs from batch "
                        f"({batch})")
    if batch % g:
        raise PlanError(f"batch ({batch}) must be a multiple of the {g} GPUs")
    d = model.bottom_mlp[-1]
    bad = [i for i, t in enumerate(model.tables) if t.dim != d]
    if bad:
        raise PlanError(f"the dot interaction needs every table dim to equal the bottom MLP "
                        f"output ({d}); table {bad[0]} has dim {model.tables[bad[0]].dim}")
    return int(batch) // g


def place_shards(model: DLRMSpec, sharding: tuple[str, ...], g: int, batch: int,
            placement: Mapping[int, int], cost: Any) -> tuple[list[Shard], dict[int, int]]:
    """All shards with their ranks; table-wise tables placed greedily (see module doc)."""
    b = batch // g
    shards: list[Shard] = []
    col_next = 0
    for i, (t, how) in enumerate(zip(model.tables, sharding, strict=True)):
        if how == "row":
            rows = max(1, math.ceil(t.rows / g))
            shards += [Shard(i, how, r, rows, t.dim, t.pooling / g, batch) for r in range(g)]
        elif how == "column":
            k = min(g, t.dim)
            shards += [Shard(i, how, (col_next + j) % g, t.rows, t.dim / k, t.pooling, batch)
                       for j in range(k)]
            col_next = (col_next + k) % g
        elif how == "data":
            shards += [Shard(i, how, r, t.rows, t.dim, t.pooling, b) for r in range(g)]
    load = [0.0] * g
    for s in shards:
        load[s.rank] += cost(s)
    tw = [i for i, how in enumerate(sharding) if how == "table"]
    for i, r in placement.items():
        if i not in tw:
            raise PlanError(f"placement of table {i}: only table-wise tables are placed "
                            f"(it is {sharding[i] if 0 <= i < len(sharding) else 'unknown'})")
        if isinstance(r, bool) or not isinstance(r, int | np.integer) or not 0 <= r < g:
            raise PlanError(f"placement of table {i}: rank must be in 0..{g - 1}, got {r!r}")
    placed: dict[int, int] = {}
    todo = []
    for i in tw:
        t = model.tables[i]
        s = Shard(i, "table", -1, t.rows, t.dim, t.pooling, batch)
        if i in placement:
            r = int(placement[i])
            placed[i] = r
            shards.append(Shard(i, "table", r, t.rows, t.dim, t.pooling, batch))
            load[r] += cost(s)
        else:
            todo.append((cost(s), i, s))
    heap = [(load[r], r) for r in range(g)]
    heapq.heapify(heap)
    for c, i, s in sorted(todo, key=lambda x: (-x[0], x[1])):
        lr, r = heapq.heappop(heap)
        placed[i] = r
        shards.append(Shard(i, "table", r, s.rows, s.dim, s.pooling, batch))
        heapq.heappush(heap, (lr + c, r))
    return shards, dict(sorted(placed.items()))
