"""DLRM training step as a per-rank execution graph: embedding sharding, placement, search.

The model is DLRM as in Naumov et al., "Deep Learning Recommendation Model for Personalization
and Recommendation Systems" (arXiv:1906.00091, 2019) and ``facebookresearch/dlrm``
(``dlrm_s_pytorch.py``): a bottom MLP over the dense features, one pooled embedding-bag lookup
per sparse feature (table), a pairwise dot interaction of the ``F = T + 1`` feature vectors
(``T`` tables and the bottom-MLP output; the strictly lower triangle, ``F(F-1)/2`` values,
concatenated with the bottom output), a top MLP and a sigmoid + binary cross-entropy loss.
Distributed as in the reference workload (the 8xV100 DLRM traces of ``../shared/data``) and in
TorchRec: MLPs data parallel, embedding tables model parallel (or replicated), hybrid.

**Every rank is simulated** (the ranks are *not* symmetric: each owns other tables). Per rank,
with ``g`` GPUs, global batch ``B`` and local batch ``b = B / g``, in stream order:

- ``comm`` stream: the *input distribution* (TorchRec's ``KJTAllToAll``): every rank sends the
  indices (int64) and lengths (int32) of its ``b`` samples to the ranks owning each table's
  shards (row-wise: bucketised by row block; column-wise: a copy per column shard).
- ``compute`` stream: bottom MLP forward (``b`` rows), embedding lookups of the rank's shards
  (one fused TBE call for the model-parallel shards with the *global* batch ``B``, whose
  indices arrived by all_to_all, and one for the data-parallel tables with the local batch
  ``b``), interaction (waits for the pooled embeddings), top MLP, loss; backward: loss and top
  MLP (input and weight gradient GEMMs, twice the forward GEMM FLOPs), interaction backward,
  bottom MLP backward, data-parallel table backward (dense gradient), model-parallel
  embedding backward fused with the optimizer (fbgemm's ``split_embedding_backward_codegen_
  <optimizer>``; waits for the embedding gradients), then the dense optimizer step.
- ``comm`` stream, one FIFO per rank like the NCCL stream of the traces: pooled-embedding
  all_to_all forward (table/column-wise), reduce_scatter forward (row-wise), the all_reduce
  of the top-MLP gradients once the top MLP's backward ends (DDP buckets launch as they fill,
  PyTorch DDP ``bucket_cap_mb=25``), the backward all_to_all / all_gather of the embedding
  gradients, the all_reduce of the bottom-MLP and data-parallel-table gradients.

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

**Uneven all_to_all.** Rank ``r`` sends ``(g-1) b W_r`` pooled values (``W_r`` = width of its
table/column shards) and receives ``b (W - W_r)``. NCCL's all_to_all is a grouped send/recv in
which every rank exchanges a chunk with every other, so no rank completes before the heaviest
sender's (or receiver's) traffic is through: each member's transfer is the group's
``max_r t(max(send_r, recv_r))`` and all ranks end together (passed per member to
:meth:`GraphBuilder.collective`). ``t`` is the collective model's all_to_all time for a buffer
whose off-rank part is that volume (``S = v g / (g-1)``, nccl-tests' convention). The per-rank
table reports each rank's own ``t`` so the bottleneck is visible.

**Table placement** (``table`` shards): unless a ``placement`` is given, greedy
longest-processing-time: tables sorted by predicted lookup cost (forward + backward, batch
``B``), largest first, each onto the rank with the least load so far; uniform shards (row,
column, data) are placed first. This is TorchRec's ``GreedyPerfPartitioner``
(``torchrec/distributed/planner/partitioners.py``: "Sort sharding options by storage or perf
in descending order (i.e., large tables will be placed first)", each shard onto the device at
the top of a min-heap of total perf) with ``SortBy.PERF``, and Graham's LPT rule (1969).

**Costs.** Embedding lookups: :mod:`traincast.costs.embedding` (Lin et al., arXiv:2404.12674,
data-distribution-aware DRAM bytes, unique rows from the index distribution); each rank's
shards form one fused TBE call: ``latency + sum(bytes) / (bw * eff)``. Without an
``embedding_model`` the catalog GPU's HBM bandwidth and L2 size are used with ``eff = 1`` and
no latency (a lower bound). A fitted model (:func:`~traincast.costs.embedding.
fit_embedding_efficiency`) keeps its efficiency and latency and takes the planned GPU's
bandwidth and L2 (efficiencies are fractions of a GPU's own peak, as in
:mod:`traincast.plan.costs`). GEMMs, elementwise ops and the optimizer: the roofline with the
plan calibration (:class:`~traincast.plan.costs.PlanCosts`); collectives: its comm model.

**Host.** Eager PyTorch issues every kernel from the host, and small DLRMs are host bound (the
8xV100 reference trace: ~262 launches of ~4 µs kernels per rank and step, GPU busy 2.7-12.3 ms
of a 12.5-19.9 ms step). As in :mod:`traincast.plan.transformer`, each rank has a ``host``
stream of issue ops, one per phase, lasting ``kernels x launch overhead`` and bound to the
device ops they issue with :meth:`GraphBuilder.issued_by` (a phase takes max(host, device)).
Kernels are counted from the graph's own ops: each costed GEMM, elementwise kernel, TBE call
and collective launch (a bucketed all_reduce: one per bucket) is one kernel, i.e. the
``kernels`` argument of each :meth:`PlanCosts.compute_ns` call. Phases and kernels: bottom MLP
forward (2 per layer), input distribution (1), embedding forward (one per TBE call + the
pooled all_to_all / reduce_scatter), interaction forward (4), top MLP forward + loss (2 per
layer + 2), loss + top MLP backward (2 + per layer 2 GEMMs + 2, + the top-MLP all_reduce
buckets), interaction backward (5 + the backward exchange), bottom MLP + embedding backward
(per layer 2 GEMMs, 1 for the first, + 2; one per TBE call; the remaining all_reduce buckets)
and the dense optimizer (``DENSE_KERNELS`` per parameter tensor). The reference trace launches
about twice as many (its loss: 15 kernels, each fbgemm TBE backward ~15, DDP's
``AccumulateGrad`` 18, TorchRec's KJT permutes and cumsums ~30), so with a per-launch overhead
measured on it the host time is underestimated by about that factor.

The host blocks (waits for device ops, a dependency of its next issue op) where the reference
trace shows synchronising calls (10 ``cudaStreamSynchronize`` and 2 blocking device-to-host
copies per rank and step; its 57 ``aten::item`` are of CPU tensors and do not sync):

1. the input distribution: TorchRec's ``KJTAllToAll`` exchanges the splits first and copies
   them to the host (``Memcpy DtoH``: ``cudaMemcpyAsync`` blocks 0.02-0.97 ms on the trace)
   before it can size the lengths/values exchange; modelled as the lookups' issue waiting for
   the (single, combined) input all_to_all;
2. the interaction forward: facebookresearch/dlrm gathers the lower triangle with index
   tensors built on the CPU (``Z[:, li, lj]``), whose pageable copy synchronises the compute
   stream; that stream waits for the pooled-embedding exchange, so the host waits for it (the
   longest wait on the trace: ``cudaStreamSynchronize`` of 0.008-6.6 ms in ``aten::index``);
   modelled as the interaction's issue waiting for the lookups and the exchange;
3. the interaction backward (``IndexBackward0``'s ``index_put_`` with the same CPU indices):
   its issue waits for the top MLP backward.

The launch overhead is the calibration's ``launch_overhead_us`` (the shipped calibration is
fitted on Megatron-DeepSpeed GPT runs on A100: another framework and workload), a given value,
or one measured on a trace with :func:`fit_host_overhead` (in-sample when predicting that
trace). 0 (an uncalibrated default) leaves the host out: GPU time only.

Not modelled: activations in the memory figure (as :func:`traincast.plan.memory.
dlrm_memory`), the index sort of the embedding backward, TorchRec's pipelining of the next
batch's input distribution, and host work other than kernel issue (data loading is charged
to the launches by :func:`fit_host_overhead`).
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from traincast.costs.comm import CommModel
from traincast.costs.embedding import EmbeddingModel, embedding_bytes
from traincast.errors import ParameterError
from traincast.plan.builder import COMM, HOST, GraphBuilder, PlanTimeline
from traincast.plan.costs import PlanCalibration, PlanCosts
from traincast.plan.spec import (
    DTYPE_BYTES,
    LIMITS,
    SHARDINGS,
    DLRMSpec,
    EmbeddingTable,
    Layout,
    PlanError,
    SystemSpec,
)
from traincast.trace.intervals import union_length
from traincast.trace.schema import DEVICE_KINDS

if TYPE_CHECKING:  # pragma: no cover
    from traincast.trace.traceset import TraceSet

__all__ = [
    "DLRMPlanResult",
    "HostFit",
    "TraceDLRM",
    "catalog_embedding_model",
    "default_candidates",
    "dlrm_spec_from_trace",
    "fit_host_overhead",
    "plan_dlrm",
    "resolve_sharding",
    "search_sharding",
    "why_best",
]

GIB = 2.0**30
#: stream of the host (issue) ops of each rank, as in :mod:`traincast.plan.transformer`
HOST_STREAM = "host"
#: DDP gradient bucket (bytes): PyTorch DDP's default ``bucket_cap_mb=25``
BUCKET_BYTES = 25 * 2**20
#: bytes of one index (fbgemm TBE takes int64 indices/offsets) and of one length (int32 KJT)
INDEX_BYTES, LENGTH_BYTES = 8, 4
#: embedding optimizers (fused TBE backward) and dense optimizers (fp32 state bytes/param)
EMB_OPTIMIZERS = ("sgd", "rowwise_adagrad", "adagrad")
DENSE_STATE = {"sgd": 0, "adagrad": 4, "adam": 8}
#: elementwise kernels per parameter tensor of PyTorch's per-tensor (non-foreach) optimizers,
#: as in the reference trace (Adagrad: addcmul, sqrt, add, addcdiv)
DENSE_KERNELS = {"sgd": 1, "adagrad": 4, "adam": 5}


# ------------------------------------------------------------------ embedding model


def catalog_embedding_model(gpu: str) -> EmbeddingModel:
    """The un-fitted lookup model of catalog GPU ``gpu``: its HBM bandwidth and L2 size,
    ``eff`` 1, no latency (a lower bound on lookup time).

    Raises:
        PlanError: unknown GPU.
    """
    from traincast.costs.hardware import load_catalog

    try:
        g = load_catalog().gpu(gpu)
    except (KeyError, ParameterError) as exc:
        raise PlanError(f"unknown GPU {gpu!r}: {str(exc).strip(chr(39))}") from None
    m = EmbeddingModel(float(g.hbm_gbps), float((g.l2_mb or 0.0) * 2**20))
    m.notes.append(f"not fitted: {g.name} catalog bandwidth {g.hbm_gbps:g} GB/s, eff 1, "
                   f"no latency")
    return m


def _on_gpu(model: EmbeddingModel | None, gpu: str) -> EmbeddingModel:
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
def _lookup_bytes(batch: int, pooling: float, dim: float, rows: int, itemsize: int,
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


def _check(model: DLRMSpec, system: SystemSpec, layout: Layout, batch: int) -> int:
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


def _shards(model: DLRMSpec, sharding: tuple[str, ...], g: int, batch: int,
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


# ------------------------------------------------------------------ result


@dataclass
class DLRMPlanResult:
    """Prediction of one DLRM sharding plan. ``to_dict`` is the JSON contract of
    ``traincast plan dlrm``.

    Metrics: ``iteration_time_s`` the simulated step (end of the last rank's optimizer);
    ``samples_per_s = batch / iteration_time_s``; ``exposed_comm_s`` the largest, over ranks,
    time some collective of the rank is in flight while its compute stream is idle;
    ``memory_gib_per_gpu`` the most loaded rank (weights, gradients, optimizer state; no
    activations) and ``fits`` against the catalog capacity. ``placement``: table -> rank of
    the table-wise tables. ``breakdown``: collective durations (the group's), the slowest
    rank's lookups, per-rank dense work.

    ``per_rank``: one row per rank: ``rank, tables`` (shards owned, ``t3`` table-wise, ``t3r``
    row block, ``t3c`` column block, ``t3d`` replica), ``shards``, ``lookup_fwd_ns`` /
    ``lookup_bwd_ns`` (the rank's TBE calls), ``a2a_fwd_ns`` / ``a2a_bwd_ns`` (time of the
    rank's own pooled-embedding all_to_all traffic; the collective lasts the group's max),
    ``a2a_send_bytes`` / ``a2a_recv_bytes`` (forward), ``kernels`` (launches per step, see
    the module doc), ``host_issue_ns`` (their issue time; 0 without a launch overhead),
    ``memory_gib``. ``kernels``: host phase -> kernels per rank. ``breakdown`` also holds
    ``host_issue_max_s``, the largest per-rank issue time.
    """

    sharding: tuple[str, ...]
    placement: dict[int, int]
    batch: int
    iteration_time_s: float
    samples_per_s: float
    exposed_comm_s: float
    memory_gib_per_gpu: float
    fits: bool | None
    per_rank: pd.DataFrame
    breakdown: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kernels: dict[str, list[int]] = field(default_factory=dict)
    timeline: PlanTimeline | None = field(default=None, repr=False)

    def _repr_html_(self) -> str:
        """Jupyter display: the scalar fields of :meth:`to_dict` as metric/value rows."""
        import pandas as pd

        from traincast.util.display import html_table

        rows = [{"metric": k, "value": v} for k, v in self.to_dict().items()
                if isinstance(v, int | float | str | bool) or v is None]
        return html_table(type(self).__name__, pd.DataFrame(rows, columns=["metric", "value"]))

    def to_dict(self) -> dict[str, Any]:
        pr = self.per_rank.copy()
        return {
            "iteration_time_s": self.iteration_time_s,
            "samples_per_s": self.samples_per_s,
            "exposed_comm_s": self.exposed_comm_s,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "fits": self.fits,
            "batch": self.batch,
            "sharding": list(self.sharding),
            "placement": {str(k): v for k, v in self.placement.items()},
            "per_rank": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                         for row in pr.to_dict(orient="records")],
            "breakdown_s": self.breakdown,
            "kernels": self.kernels,
            "notes": self.notes,
        }


# ------------------------------------------------------------------ the graph


def _mlp(widths: Sequence[int], inputs: int) -> list[tuple[int, int]]:
    out, prev = [], inputs
    for w in widths:
        out.append((prev, w))
        prev = w
    return out


def _mlp_ns(pc: PlanCosts, layers: list[tuple[int, int]], n: int, backward: bool,
            first_needs_dx: bool = True) -> tuple[float, int]:
    """One MLP forward (GEMM + bias/ReLU per layer) or backward (dX and dW GEMMs, bias grad
    and ReLU backward) on ``n`` rows. Returns (ns, kernels): the kernels are the ones costed
    (forward 2 per layer; backward 2 GEMMs, 1 for a first layer without dX, + 2)."""
    e = pc.itemsize
    t = 0.0
    kernels = 0
    for j, (i, o) in enumerate(layers):
        fl = 2.0 * n * i * o
        by = e * (n * i + i * o + n * o)
        if not backward:
            t += pc.compute_ns("gemm", fl, by) + pc.compute_ns("elementwise", n * o, 2 * e * n * o)
            kernels += 2
        else:
            k = 2 if (j > 0 or first_needs_dx) else 1
            t += pc.compute_ns("gemm", k * fl, k * by, k)
            t += pc.compute_ns("elementwise", 2 * n * o, 3 * e * n * o + e * o, 2)
            kernels += k + 2
    return t, kernels


def _interaction_ns(pc: PlanCosts, n: int, F: int, d: int, backward: bool) -> tuple[float, int]:
    """Dot interaction of ``F`` features of width ``d`` on ``n`` samples: concatenate, batched
    ``Z Z^T`` (``2 n F^2 d`` FLOPs), gather the lower triangle and concatenate with the bottom
    output (facebookresearch/dlrm ``interact_features``). Backward: two batched GEMMs and the
    scatter/split back. Returns (ns, kernels): forward 1 GEMM + 3 copies, backward 2 + 3."""
    e = pc.itemsize
    P = F * (F - 1) // 2
    fl = 2.0 * n * F * F * d
    k = 2 if backward else 1
    t = pc.compute_ns("gemm", k * fl, k * e * (2 * n * F * d + n * F * F), k)
    t += pc.compute_ns("elementwise", 0.0, e * (2 * n * F * d + n * F * F + 2 * n * (P + d)), 3)
    return t, k + 3


@dataclass
class _RankWork:
    shards: list[Shard] = field(default_factory=list)
    fwd_bytes: float = 0.0  # model-parallel TBE
    bwd_bytes: float = 0.0
    dp_fwd_bytes: float = 0.0  # data-parallel TBE
    dp_bwd_bytes: float = 0.0
    width_a2a: float = 0.0  # pooled width sent by all_to_all (table/column shards)


def _a2a_ns(pc: PlanCosts, send: Sequence[float], recv: Sequence[float], rpn: int
            ) -> list[float]:
    """Per-rank time of its own all_to_all traffic (see module doc)."""
    g = len(send)
    if g <= 1:
        return [0.0] * g
    return [pc.comm_ns("all_to_all", max(s, r) * g / (g - 1), g, rpn) if max(s, r) > 0 else 0.0
            for s, r in zip(send, recv, strict=True)]


def _bucketed_ar_ns(pc: PlanCosts, nbytes: float, g: int, rpn: int) -> tuple[float, int]:
    """DDP's gradient all_reduce of ``nbytes`` in ``BUCKET_BYTES`` buckets: (ns, launches)."""
    if nbytes <= 0 or g <= 1:
        return 0.0, 0
    n = max(1, math.ceil(nbytes / BUCKET_BYTES))
    return n * pc.comm_ns("all_reduce", nbytes / n, g, rpn), n


def plan_dlrm(model: DLRMSpec, system: SystemSpec, layout: Layout, batch: int, *,
              calibration: PlanCalibration | None = None, comm: CommModel | None = None,
              embedding_model: EmbeddingModel | None = None,
              placement: Mapping[int, int] | None = None, optimizer: str = "sgd",
              dense_optimizer: str = "sgd", keep_timeline: bool = False,
              costs: PlanCosts | None = None,
              launch_overhead_us: float | None = None) -> DLRMPlanResult:
    """Predict one training step of a DLRM on ``system`` with ``layout.sharding``.

    Args:
        model: the DLRM.
        system: GPUs and links (every GPU is one data-parallel rank).
        layout: ``sharding`` per table (``table``/``row``/``column``/``data``; one value for
            all tables or one per table; empty = ``table``); ``tp = pp = 1``, ``dp`` 1 or the
            GPU count.
        batch: global batch (samples per step, a multiple of the GPUs).
        calibration: compute/comm efficiencies (default: the shipped plan calibration).
        comm: a fitted collective model replacing the link-based one.
        embedding_model: fitted lookup model (default: the catalog GPU's bandwidth, eff 1).
        placement: table index -> rank for table-wise tables (others placed greedily).
        optimizer: embedding optimizer fused in the TBE backward (``sgd``,
            ``rowwise_adagrad``, ``adagrad``).
        dense_optimizer: MLP / data-parallel table optimizer (``sgd``, ``adagrad``, ``adam``).
        keep_timeline: keep the simulated ops (``result.timeline``).
        costs: prebuilt :class:`PlanCosts` (search reuses one).
        launch_overhead_us: host time per kernel launch, µs (default: the calibration's
            ``launch_overhead_us``; e.g. :func:`fit_host_overhead` of a trace). 0 leaves the
            host out (GPU time only).

    Raises:
        PlanError: bad sizes, sharding, placement, GPU or optimizer names; table dims that
            differ from the bottom-MLP output (the dot interaction needs them equal); a
            negative launch overhead.
    """
    from traincast.plan.memory import _DENSE_OPT, _EMB_OPT, _param_elem_bytes

    b = _check(model, system, layout, batch)
    if optimizer not in EMB_OPTIMIZERS:
        raise PlanError(f"optimizer must be one of {', '.join(EMB_OPTIMIZERS)}, "
                        f"got {optimizer!r}")
    if dense_optimizer not in DENSE_STATE:
        raise PlanError(f"dense_optimizer must be one of {', '.join(DENSE_STATE)}, "
                        f"got {dense_optimizer!r}")
    sharding = resolve_sharding(model, layout)
    g = system.gpus
    rpn = min(g, system.gpus_per_node)
    pc = costs or PlanCosts.build(system, model.dtype, calibration, comm)
    launch_us = (pc.calibration.launch_overhead_us if launch_overhead_us is None
                 else launch_overhead_us)
    if isinstance(launch_us, bool) or not isinstance(launch_us, int | float | np.number) \
            or not math.isfinite(launch_us) or launch_us < 0:
        raise PlanError(f"launch_overhead_us must be a number >= 0, got {launch_us!r}")
    launch_ns = float(launch_us) * 1e3
    em = _on_gpu(embedding_model, system.gpu)
    e = DTYPE_BYTES[model.dtype]
    dist, alpha = model.index_distribution, model.zipf_alpha
    if dist == "zipf" and alpha is None:
        raise PlanError("index_distribution zipf needs zipf_alpha")

    def shard_bytes(s: Shard, backward: bool) -> float:
        opt = ("none" if s.how == "data" else optimizer) if backward else "sgd"
        return _lookup_bytes(int(s.batch), float(s.pooling), float(s.dim), int(s.rows), e,
                             float(em.l2_bytes), dist, alpha if dist == "zipf" else None,
                             backward, opt)

    bw = em.device_bw_gbps

    def cost(s: Shard) -> float:  # ns, bytes-bound part of fwd + bwd (placement heuristic)
        return (shard_bytes(s, False) / (bw * em.eff["forward"])
                + shard_bytes(s, True) / (bw * em.eff["backward"]))

    try:
        shards, placed = _shards(model, sharding, g, int(batch), dict(placement or {}), cost)
    except ParameterError as exc:
        raise PlanError(str(exc)) from None

    work = [_RankWork() for _ in range(g)]
    for s in shards:
        w = work[s.rank]
        w.shards.append(s)
        if s.how == "data":
            w.dp_fwd_bytes += shard_bytes(s, False)
            w.dp_bwd_bytes += shard_bytes(s, True)
        else:
            w.fwd_bytes += shard_bytes(s, False)
            w.bwd_bytes += shard_bytes(s, True)
            if s.how in ("table", "column"):
                w.width_a2a += s.dim

    def tbe_ns(nbytes: float, direction: str) -> float:
        if nbytes <= 0:
            return 0.0
        return em.latency_ns[direction] + nbytes / (bw * em.eff[direction])

    lk_f = [tbe_ns(w.fwd_bytes, "forward") for w in work]
    lk_b = [tbe_ns(w.bwd_bytes, "backward") for w in work]
    dp_f = [tbe_ns(w.dp_fwd_bytes, "forward") for w in work]
    dp_b = [tbe_ns(w.dp_bwd_bytes, "backward") for w in work]

    # ---- communication volumes
    W = sum(w.width_a2a for w in work)
    a2a_send = [(g - 1) * b * w.width_a2a * e for w in work]
    a2a_recv = [b * (W - w.width_a2a) * e for w in work]
    a2a_own = _a2a_ns(pc, a2a_send, a2a_recv, rpn)
    a2a_T = max(a2a_own) if g > 1 else 0.0
    # input distribution: indices of the local batch to every shard owner
    in_send = [0.0] * g
    for s in shards:
        if s.how == "data":
            continue
        per_src = b * (s.pooling * INDEX_BYTES + LENGTH_BYTES)  # from each rank to s.rank
        for r in range(g):
            if r != s.rank:
                in_send[r] += per_src
    in_recv = [0.0] * g
    for s in shards:
        if s.how != "data":
            in_recv[s.rank] += (g - 1) * b * (s.pooling * INDEX_BYTES + LENGTH_BYTES)
    in_T = max(_a2a_ns(pc, in_send, in_recv, rpn)) if g > 1 else 0.0
    D_rw = sum(t.dim for t, how in zip(model.tables, sharding, strict=True) if how == "row")
    rs_T = pc.comm_ns("reduce_scatter", batch * D_rw * e, g, rpn) if D_rw else 0.0
    ag_T = pc.comm_ns("all_gather", batch * D_rw * e, g, rpn) if D_rw else 0.0

    # ---- dense work
    d = model.bottom_mlp[-1]
    T = len(model.tables)
    F = T + 1
    bot = _mlp(model.bottom_mlp, model.dense_features)
    top = _mlp(model.top_mlp, d + F * (F - 1) // 2)
    bot_params = sum(i * o + o for i, o in bot)
    top_params = sum(i * o + o for i, o in top)
    pb = _param_elem_bytes(model.dtype)
    dp_params = sum(t.rows * t.dim for t, how in zip(model.tables, sharding, strict=True)
                    if how == "data")
    bot_f, k_bot_f = _mlp_ns(pc, bot, b, False)
    bot_b, k_bot_b = _mlp_ns(pc, bot, b, True, first_needs_dx=False)
    top_f, k_top_f = _mlp_ns(pc, top, b, False)
    top_b, k_top_b = _mlp_ns(pc, top, b, True)
    inter_f, k_inter_f = _interaction_ns(pc, b, F, d, False)
    inter_b, k_inter_b = _interaction_ns(pc, b, F, d, True)
    # sigmoid + binary cross entropy (+ mean), forward and backward: 2 kernels each
    loss_f = pc.compute_ns("elementwise", 10 * b, 3 * 4 * b, 2)
    loss_b = pc.compute_ns("elementwise", 10 * b, 3 * 4 * b, 2)
    k_loss = 2
    ar_top, k_ar_top = _bucketed_ar_ns(pc, top_params * pb, g, rpn)
    ar_rest, k_ar_rest = _bucketed_ar_ns(pc, (bot_params + dp_params) * pb, g, rpn)
    n_dense = bot_params + top_params + dp_params
    st = DENSE_STATE[dense_optimizer]
    n_tensors = 2 * (len(bot) + len(top)) + sum(1 for h in sharding if h == "data")
    k_opt = n_tensors * DENSE_KERNELS[dense_optimizer]
    # read weight + gradient, write weight, zero the gradient; read + write the state
    opt_ns = (pc.compute_ns("optimizer", 4.0 * n_dense, n_dense * (4 * pb + 2 * st), k_opt)
              + pc.calibration.step_overhead_us * 1e3)
    pass_ns = pc.calibration.pass_overhead_us * 1e3

    # ---- emit
    gb = GraphBuilder()
    C, M = "compute", "comm"
    kernels: dict[str, list[int]] = {}  # host phase -> kernels issued, per rank
    host_ids: list[list[int]] = [[] for _ in range(g)]

    def issue(r: int, phase: str, k: int, groups: Sequence[tuple[int, int]],
              wait: Sequence[int] = ()) -> None:
        """Host op of rank ``r`` issuing ``k`` kernels (the device ops ``first..last`` of
        each group) after the device ops ``wait`` have ended (a blocking host call)."""
        kernels.setdefault(phase, [0] * g)[r] += k
        if launch_ns <= 0 or k <= 0:
            return
        h = gb.op(r, HOST_STREAM, f"issue {phase}", k * launch_ns, category=HOST,
                  phase="host", after=list(wait))
        host_ids[r].append(h)
        for first, last in groups:
            gb.issued_by(h, first, last)

    def coll(name: str, t: float, afters: list[list[int]], phase: str) -> list[int]:
        ids = [gb.op(r, M, name, 0.0, category=COMM, phase=phase, after=afters[r])
               for r in range(g)]
        gb.collective(ids, [t] * g)
        return ids

    def one(i: int) -> tuple[int, int]:
        return (i, i)

    multi = g > 1
    inp = coll("input_dist all_to_all", in_T, [[] for _ in range(g)], "fwd") \
        if multi and any(in_send) else None
    bf = [gb.op(r, C, "bottom_mlp fwd", bot_f + pass_ns, phase="fwd") for r in range(g)]
    for r in range(g):
        issue(r, "bottom_mlp fwd", k_bot_f, [one(bf[r])])
        if inp is not None:
            issue(r, "input_dist", 1, [one(inp[r])])
    emb_f: list[int] = []
    lookups_f: list[list[int]] = []
    for r in range(g):
        last = bf[r]
        ids = []
        if dp_f[r]:
            last = gb.op(r, C, "embedding fwd (data parallel)", dp_f[r], phase="fwd")
            ids.append(last)
        if lk_f[r] or inp is not None:
            last = gb.op(r, C, "embedding fwd", lk_f[r], phase="fwd",
                         after=[inp[r]] if inp is not None else [])
            ids.append(last)
        emb_f.append(last)
        lookups_f.append(ids)
    n_tbe_f = [(1 if dp_f[r] else 0) + (1 if lk_f[r] else 0) for r in range(g)]
    waits: list[list[int]] = [[] for _ in range(g)]
    if multi and W > 0:
        ids = coll("pooled all_to_all fwd", a2a_T, [[emb_f[r]] for r in range(g)], "fwd")
        for r in range(g):
            waits[r].append(ids[r])
    if multi and D_rw:
        ids = coll("pooled reduce_scatter fwd", rs_T, [[emb_f[r]] for r in range(g)], "fwd")
        for r in range(g):
            waits[r].append(ids[r])
    for r in range(g):
        # host wait 1: the input distribution's splits are copied to the host
        grp = ([(lookups_f[r][0], lookups_f[r][-1])] if lookups_f[r] else []) \
            + [one(i) for i in waits[r]]
        issue(r, "embedding fwd", n_tbe_f[r] + len(waits[r]), grp,
              wait=[inp[r]] if inp is not None else [])
    inter_fwd, top_fwd, top_done = [], [], []
    for r in range(g):
        inter_fwd.append(gb.op(r, C, "interaction fwd", inter_f, phase="fwd", after=waits[r]))
        top_fwd.append(gb.op(r, C, "top_mlp fwd + loss", top_f + loss_f, phase="fwd"))
        top_done.append(gb.op(r, C, "loss + top_mlp bwd", loss_b + top_b + pass_ns,
                              phase="bwd"))
    ar1 = coll("all_reduce grads (top MLP)", ar_top, [[top_done[r]] for r in range(g)], "dp") \
        if multi else None
    for r in range(g):
        # host wait 2: the interaction's CPU index tensors synchronise the compute stream,
        # which waits for the pooled-embedding exchange
        issue(r, "interaction fwd", k_inter_f, [one(inter_fwd[r])],
              wait=[emb_f[r], *waits[r]])
        issue(r, "top_mlp fwd + loss", k_top_f + k_loss, [one(top_fwd[r])])
        issue(r, "loss + top_mlp bwd", k_loss + k_top_b + (k_ar_top if ar1 else 0),
              [one(top_done[r])] + ([one(ar1[r])] if ar1 and k_ar_top else []))
    inter_done = [gb.op(r, C, "interaction bwd", inter_b, phase="bwd") for r in range(g)]
    gwaits: list[list[int]] = [[] for _ in range(g)]
    if multi and W > 0:
        ids = coll("pooled all_to_all bwd", a2a_T, [[inter_done[r]] for r in range(g)], "bwd")
        for r in range(g):
            gwaits[r].append(ids[r])
    if multi and D_rw:
        ids = coll("pooled all_gather bwd", ag_T, [[inter_done[r]] for r in range(g)], "bwd")
        for r in range(g):
            gwaits[r].append(ids[r])
    for r in range(g):
        # host wait 3: the interaction backward's index_put synchronises the compute stream
        issue(r, "interaction bwd", k_inter_b + len(gwaits[r]),
              [one(inter_done[r])] + [one(i) for i in gwaits[r]], wait=[top_done[r]])
    rest_ready, emb_done, bot_bwd = [], [], []
    for r in range(g):
        last = gb.op(r, C, "bottom_mlp bwd", bot_b, phase="bwd")
        bot_bwd.append(last)
        if dp_b[r]:
            last = gb.op(r, C, "embedding bwd (data parallel)", dp_b[r], phase="bwd")
        rest_ready.append(last)
        if lk_b[r] or gwaits[r]:
            last = gb.op(r, C, "embedding bwd + optimizer", lk_b[r], phase="bwd",
                         after=gwaits[r])
        emb_done.append(last)
    ar2 = coll("all_reduce grads (bottom MLP, data-parallel tables)", ar_rest,
               [[rest_ready[r]] for r in range(g)], "dp") if multi else None
    opt = []
    for r in range(g):
        k = k_bot_b + (1 if dp_b[r] else 0) + (1 if lk_b[r] else 0)
        issue(r, "bottom_mlp bwd + embedding bwd", k + (k_ar_rest if ar2 else 0),
              [(bot_bwd[r], emb_done[r])] + ([one(ar2[r])] if ar2 and k_ar_rest else []))
        after = [emb_done[r]] + ([ar1[r]] if ar1 else []) + ([ar2[r]] if ar2 else [])
        opt.append(gb.op(r, C, "optimizer (dense)", opt_ns, phase="opt", after=after))
        issue(r, "optimizer", k_opt, [one(opt[r])])
    tl = gb.run()

    # ---- metrics
    from traincast.plan.api import _exposed

    ops = tl.ops
    Tns = float(tl.makespan_ns)
    exposed = max(_exposed(o) for _, o in ops.groupby("rank", observed=True))
    mems = _rank_memory(model, sharding, work, g, e, pb, optimizer, dense_optimizer,
                        _EMB_OPT, _DENSE_OPT, bot_params + top_params + dp_params)
    cap = pc.hbm_bytes
    k_rank = [sum(v[r] for v in kernels.values()) for r in range(g)]
    host_ns = [sum(gb.dur[i] for i in host_ids[r]) for r in range(g)]
    per_rank = pd.DataFrame({
        "rank": np.arange(g),
        "tables": [" ".join(f"t{s.table}{_SUFFIX[s.how]}" for s in sorted(
            w.shards, key=lambda s: s.table)) for w in work],
        "shards": [len(w.shards) for w in work],
        "lookup_fwd_ns": [lk_f[r] + dp_f[r] for r in range(g)],
        "lookup_bwd_ns": [lk_b[r] + dp_b[r] for r in range(g)],
        "a2a_fwd_ns": a2a_own,
        "a2a_bwd_ns": a2a_own,  # the backward exchange is the transpose: same volumes
        "a2a_send_bytes": a2a_send,
        "a2a_recv_bytes": a2a_recv,
        "kernels": k_rank,
        "host_issue_ns": [float(x) for x in host_ns],
        "memory_gib": [m / GIB for m in mems],
    })
    worst = max(mems)
    per_op = ops.groupby("name")["dur_ns"].max()

    def dur(name: str) -> float:
        return float(per_op.get(name, 0.0)) * 1e-9

    breakdown = {
        "input_dist_s": in_T * 1e-9 if multi else 0.0,
        "a2a_fwd_s": a2a_T * 1e-9 if W > 0 else 0.0,
        "a2a_bwd_s": a2a_T * 1e-9 if W > 0 else 0.0,
        "reduce_scatter_fwd_s": rs_T * 1e-9,
        "all_gather_bwd_s": ag_T * 1e-9,
        "all_reduce_s": (ar_top + ar_rest) * 1e-9 if multi else 0.0,
        "lookup_fwd_max_s": max(per_rank["lookup_fwd_ns"]) * 1e-9,
        "lookup_bwd_max_s": max(per_rank["lookup_bwd_ns"]) * 1e-9,
        "mlp_s": (bot_f + bot_b + top_f + top_b) * 1e-9,
        "interaction_s": (inter_f + inter_b) * 1e-9,
        "optimizer_s": dur("optimizer (dense)"),
        "host_issue_max_s": max(host_ns) * 1e-9,
    }
    fitted = ", ".join(f"{k} eff {em.eff[k]:.3g} latency {em.latency_ns[k] / 1e3:.3g} us"
                       for k in ("forward", "backward"))
    notes = [f"simulated {len(ops)} ops on {g} ranks (every rank: tables differ per rank)",
             f"costs: {pc.calibration.source}",
             f"embeddings: {em.device_bw_gbps:g} GB/s, {fitted}"
             + (f" ({'; '.join(em.notes)})" if em.notes else "")]
    per_phase = ", ".join(f"{p} {min(v)}" + (f"-{max(v)}" if max(v) != min(v) else "")
                          for p, v in kernels.items())
    if launch_ns > 0:
        src = ("given" if launch_overhead_us is not None else
               f"plan calibration: {pc.calibration.source}"
               + (" - Megatron-DeepSpeed GPT runs on A100, another framework and workload"
                  if "vtrain" in pc.calibration.source.lower() else ""))
        notes += [f"host: {launch_ns / 1e3:.4g} us per kernel ({src}) x kernels per step "
                  f"{min(k_rank)}-{max(k_rank)} per rank ({per_phase}); the host waits for the "
                  f"input all_to_all (splits) and, before the interaction forward and "
                  f"backward, for the compute stream (dlrm's CPU index tensors)",
                  "activations are not modelled"]
    else:
        notes.append(f"GPU time only: launch overhead 0, host issue time not modelled "
                     f"({min(k_rank)}-{max(k_rank)} kernels per rank); activations are "
                     f"not modelled")
    return DLRMPlanResult(
        sharding=sharding, placement=placed, batch=int(batch), iteration_time_s=Tns * 1e-9,
        samples_per_s=batch / (Tns * 1e-9) if Tns > 0 else float("inf"),
        exposed_comm_s=exposed * 1e-9, memory_gib_per_gpu=worst / GIB, fits=worst <= cap,
        per_rank=per_rank, breakdown=breakdown, notes=notes, kernels=kernels,
        timeline=tl if keep_timeline else None)


_SUFFIX = {"table": "", "row": "r", "column": "c", "data": "d"}


def _rank_memory(model: DLRMSpec, sharding: tuple[str, ...], work: list[_RankWork], g: int,
                 e: int, pb: int, optimizer: str, dense_optimizer: str,
                 emb_opt: dict[str, tuple[int, int]], dense_opt: dict[str, int],
                 replicated_params: float) -> list[float]:
    """Bytes per rank: its model-parallel shards (weights + fused-optimizer state, no
    gradient kept) plus the replicated MLPs and data-parallel tables (weights, gradients,
    dense optimizer state, fp32 master copy for 16-bit models), as
    :func:`traincast.plan.memory.dlrm_memory` counts them, for this placement."""
    row_state, elem_state = emb_opt[optimizer]
    dense_state = dense_opt[dense_optimizer] + (4 if pb == 2 else 0)
    repl = replicated_params * (2 * pb + dense_state)
    out = []
    for w in work:
        own = sum(s.rows * (s.dim * e + row_state + s.dim * elem_state)
                  for s in w.shards if s.how != "data")
        out.append(float(own + repl))
    return out


# ------------------------------------------------------------------ search


def _evaluate(args: tuple[Any, ...]) -> dict[str, Any]:
    """Simulate one sharding plan (module level for process pools)."""
    (model, system, batch, name, sharding, calibration, comm, emb_model, optimizer,
     dense_optimizer) = args
    r = plan_dlrm(model, system, Layout(sharding=sharding), batch, calibration=calibration,
                  comm=comm, embedding_model=emb_model, optimizer=optimizer,
                  dense_optimizer=dense_optimizer)
    pr = r.per_rank
    return {
        "plan": name,
        "sharding": _describe(sharding),
        "iteration_time_s": r.iteration_time_s,
        "samples_per_s": r.samples_per_s,
        "exposed_comm_s": r.exposed_comm_s,
        "memory_gib_per_gpu": r.memory_gib_per_gpu,
        "fits": r.fits,
        "lookup_max_ms": float((pr["lookup_fwd_ns"] + pr["lookup_bwd_ns"]).max()) * 1e-6,
        "lookup_mean_ms": float((pr["lookup_fwd_ns"] + pr["lookup_bwd_ns"]).mean()) * 1e-6,
        "a2a_ms": (r.breakdown["a2a_fwd_s"] + r.breakdown["a2a_bwd_s"]
                   + r.breakdown["reduce_scatter_fwd_s"] + r.breakdown["all_gather_bwd_s"]
                   + r.breakdown["input_dist_s"]) * 1e3,
        "all_reduce_ms": r.breakdown["all_reduce_s"] * 1e3,
        "lookup_fwd_ns": [float(x) for x in pr["lookup_fwd_ns"]],
        "lookup_bwd_ns": [float(x) for x in pr["lookup_bwd_ns"]],
        "a2a_fwd_ns": [float(x) for x in pr["a2a_fwd_ns"]],
        "a2a_bwd_ns": [float(x) for x in pr["a2a_bwd_ns"]],
        "_sharding": tuple(sharding),
    }


def _describe(sharding: Sequence[str]) -> str:
    """``table`` when uniform, else ``data:5 table:21`` counts."""
    kinds = [k for k in SHARDINGS if k in sharding]
    if len(kinds) == 1:
        return kinds[0]
    return " ".join(f"{k}:{sum(1 for s in sharding if s == k)}" for k in kinds)


def default_candidates(model: DLRMSpec, thresholds: Sequence[float] = (2**20, 2**26)
                       ) -> list[tuple[str, tuple[str, ...]]]:
    """The uniform plans (all table/row/column/data-parallel) and mixes: tables under each
    size ``threshold`` (bytes, ``rows * dim * itemsize``) data parallel, the rest
    table-, row- or column-wise. Duplicates are dropped."""
    n = len(model.tables)
    e = DTYPE_BYTES[model.dtype]
    out: list[tuple[str, tuple[str, ...]]] = [(f"all-{k}", (k,) * n) for k in SHARDINGS]
    for th in thresholds:
        small = [t.rows * t.dim * e < th for t in model.tables]
        if not any(small) or all(small):
            continue
        for rest in ("table", "row", "column"):
            s = tuple("data" if sm else rest for sm in small)
            out.append((f"data<{_size(th)}+{rest}", s))
    seen: set[tuple[str, ...]] = set()
    uniq = []
    for name, s in out:
        if s not in seen:
            seen.add(s)
            uniq.append((name, s))
    return uniq


def _size(nbytes: float) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= k:
            return f"{nbytes / k:g}{unit}"
    return f"{nbytes:g}B"


def search_sharding(model: DLRMSpec, system: SystemSpec, batch: int, *,
                    candidates: Sequence[Sequence[str] | str] | Mapping[str, Sequence[str]]
                    | None = None, top_k: int | None = None, refine: bool = True,
                    executor: str = "process", workers: int | None = None,
                    calibration: PlanCalibration | None = None, comm: CommModel | None = None,
                    embedding_model: EmbeddingModel | None = None, optimizer: str = "sgd",
                    dense_optimizer: str = "sgd", address: str | None = None) -> pd.DataFrame:
    """Rank sharding plans of ``model`` on ``system`` by simulated step time.

    Candidates (default :func:`default_candidates`: all-table, all-row, all-column,
    all-data-parallel, and small-tables-data-parallel mixes) are simulated in parallel with
    :func:`traincast.util.executor.map_tasks` (``executor``, ``workers``, and ``address`` for a
    Ray cluster). With ``refine``, a greedy per-table improvement
    starts from the best fitting candidate: tables in decreasing size, each tries the other
    three shardings (simulated in parallel) and keeps the best if the step gets faster
    (``greedy`` row).

    Returns:
        One row per plan, fastest fitting plan first (plans that do not fit in memory
        last): ``plan, sharding, iteration_time_s, samples_per_s, exposed_comm_s,
        memory_gib_per_gpu, fits``, the per-rank lists ``lookup_fwd_ns, lookup_bwd_ns,
        a2a_fwd_ns, a2a_bwd_ns`` and their summaries ``lookup_max_ms, lookup_mean_ms,
        a2a_ms`` (all pooled-embedding and index exchanges), ``all_reduce_ms``; ``top_k``
        rows if given; ``per_table`` is the plan's sharding of each table.

    Raises:
        PlanError: bad model/system/batch, empty or malformed candidates.
        ExecutorError: the executor failed.
    """
    from traincast.util.executor import map_tasks

    n = len(model.tables)
    if candidates is None:
        cands = default_candidates(model)
    else:
        items = candidates.items() if isinstance(candidates, Mapping) else (
            (None, c) for c in candidates)
        cands = []
        for name, c in items:
            s = (c,) if isinstance(c, str) else tuple(c)
            if len(s) == 1:
                s = s * n
            if len(s) != n or any(x not in SHARDINGS for x in s):
                raise PlanError(f"candidate {c!r}: give one of {', '.join(SHARDINGS)} or one "
                                f"per table ({n})")
            cands.append((str(name) if name is not None else _describe(s), s))
    if not cands:
        raise PlanError("no sharding candidates to search")
    # validate once, cheaply, in this process (errors name the bad field)
    plan_dlrm(model, system, Layout(sharding=cands[0][1]), batch, calibration=calibration,
              comm=comm, embedding_model=embedding_model, optimizer=optimizer,
              dense_optimizer=dense_optimizer)
    common = (calibration, comm, embedding_model, optimizer, dense_optimizer)

    def run(named: list[tuple[str, tuple[str, ...]]]) -> list[dict[str, Any]]:
        return map_tasks(_evaluate, [(model, system, batch, nm, s, *common) for nm, s in named],
                         executor=executor, workers=workers, address=address)

    rows = run(cands)
    if refine and rows:
        fitting = [r for r in rows if r["fits"] is not False] or rows
        best = min(fitting, key=lambda r: r["iteration_time_s"])
        cur, cur_t = list(best["_sharding"]), best["iteration_time_s"]
        e = DTYPE_BYTES[model.dtype]
        order = sorted(range(n), key=lambda i: -model.tables[i].rows * model.tables[i].dim * e)
        changed = False
        for i in order:
            alts = []
            for k in SHARDINGS:
                if k != cur[i]:
                    s = list(cur)
                    s[i] = k
                    alts.append((f"greedy t{i}={k}", tuple(s)))
            res = [r for r in run(alts) if r["fits"] is not False]
            if res:
                r = min(res, key=lambda x: x["iteration_time_s"])
                if r["iteration_time_s"] < cur_t * (1 - 1e-9):
                    cur, cur_t, changed = list(r["_sharding"]), r["iteration_time_s"], True
        if changed and tuple(cur) not in {r["_sharding"] for r in rows}:
            rows += run([("greedy", tuple(cur))])
    df = pd.DataFrame(rows)
    df["_oom"] = df["fits"].eq(False)
    df = df.sort_values(["_oom", "iteration_time_s", "memory_gib_per_gpu"],
                        kind="stable").reset_index(drop=True)
    df = df.drop(columns=["_oom"]).rename(columns={"_sharding": "per_table"})
    df["per_table"] = [list(s) for s in df["per_table"]]
    if top_k is not None:
        df = df.head(int(top_k))
    return df


def why_best(table: pd.DataFrame) -> list[str]:
    """One line per runner-up: how the best plan's lookup balance and exchanges compare."""
    if table.empty:
        return []
    b = table.iloc[0]
    out = [f"best: {b['plan']} ({b['sharding']}): {b['iteration_time_s'] * 1e3:.3f} ms/step, "
           f"lookup max/mean {b['lookup_max_ms']:.3f}/{b['lookup_mean_ms']:.3f} ms, "
           f"exchanges {b['a2a_ms']:.3f} ms, all_reduce {b['all_reduce_ms']:.3f} ms, "
           f"{b['memory_gib_per_gpu']:.2f} GiB/GPU"]
    for _, o in table.iloc[1:4].iterrows():
        diffs = []
        for col, label in (("lookup_max_ms", "slowest rank's lookups ms"),
                           ("a2a_ms", "embedding exchanges ms"),
                           ("all_reduce_ms", "gradient all_reduce ms")):
            x, y = float(b[col]), float(o[col])
            if y - x > 0.02 * max(abs(y), 1e-9) and y - x > 1e-4:
                diffs.append(f"{label} {x:.3g} vs {y:.3g}")
        why = "; ".join(diffs) if diffs else "no single component dominates"
        fit = "" if o["fits"] is not False else " (does not fit)"
        out.append(f"vs {o['plan']}{fit} ({o['iteration_time_s'] * 1e3:.3f} ms, "
                   f"+{(o['iteration_time_s'] / b['iteration_time_s'] - 1) * 100:.1f}%): {why}")
    return out


# ------------------------------------------------------------------ from a trace


class TraceDLRM(NamedTuple):
    """What :func:`dlrm_spec_from_trace` recovers (unpacks as a 4-tuple)."""

    spec: DLRMSpec
    batch: int
    placement: dict[int, int]
    measured_step_s: float

    @property
    def sharding(self) -> tuple[str, ...]:
        """``table`` for placed tables, ``data`` for the replicated ones."""
        return tuple("table" if i in self.placement else "data"
                     for i in range(len(self.spec.tables)))


def _linear_shapes(ts: TraceSet, rank: int, iteration: int) -> tuple[list[tuple[int, int, int]],
                                                                      int | None]:
    """``(rows, in, out)`` of the forward ``aten::addmm`` ops of one rank/iteration in time
    order, and the index of the first one after the interaction ``aten::bmm``."""
    import json

    if ts.shapes is None or len(ts.shapes) == 0:
        raise PlanError("the trace has no op shapes (record_shapes or an execution trace "
                        "is needed to recover the MLP widths)")
    ev = ts.events.to_pandas()
    sel = ev[(ev["rank"] == rank) & (ev["iteration"] == iteration)
             & (ev["kind"].astype(str) == "cpu_op")]
    names = sel["name"].astype(str)
    sel = sel[names.isin(["aten::addmm", "aten::bmm"])].sort_values("ts")
    shp = ts.shapes.to_pandas().set_index("event")["input_dims"]
    out: list[tuple[int, int, int]] = []
    split = None
    for idx, row in sel.iterrows():
        name = str(row["name"])
        if name == "aten::bmm":
            if out and split is None:
                split = len(out)
            continue
        if idx not in shp.index:
            continue
        dims = json.loads(shp.loc[idx] if not isinstance(shp.loc[idx], pd.Series)
                          else shp.loc[idx].iloc[0])
        if len(dims) >= 3 and len(dims[1]) == 2 and len(dims[2]) == 2:
            out.append((int(dims[1][0]), int(dims[1][1]), int(dims[2][1])))
    return out, split


def dlrm_spec_from_trace(ts: TraceSet) -> TraceDLRM:
    """Rebuild the DLRM of a trace (Kineto + execution trace, every rank).

    - tables and pooling: :func:`~traincast.costs.embedding.embedding_calls` per rank; a
      ``split`` (model-parallel) TBE call of ``k`` tables gives ``k`` tables of its mean rows
      and pooling (the ET records the call, not each table), placed on that rank; the
      ``dense`` (data-parallel) call of rank 0 gives the replicated tables;
    - MLP widths: the forward ``aten::addmm`` shapes (``[bias], [rows, in], [in, out]``) of
      rank 0, bottom MLP before the interaction ``aten::bmm``, top MLP after it (or, without a
      bmm, split where a layer's input width breaks the chain);
    - batch: per-rank rows of those GEMMs times the ranks; checked against the split TBE
      batch (the global batch, indices arrive by all_to_all);
    - measured step: the median of ``ts.iterations`` durations (every rank, s).

    Raises:
        PlanError: no embedding calls with ET shapes, no MLP shapes, inconsistent batch.
    """
    from traincast.costs.embedding import embedding_calls

    it = ts.iterations.to_pandas()
    if it.empty:
        raise PlanError("the trace has no iterations")
    calls = [c for c in embedding_calls(ts) if c.params is not None]
    if not calls:
        raise PlanError("the trace has no fbgemm embedding calls with execution-trace shapes")
    # one iteration: the first with calls on rank 0's side
    iteration = min(c.iteration for c in calls)
    calls = [c for c in calls if c.iteration == iteration]
    ranks = sorted(int(r) for r in it["rank"].unique())
    tables: list[EmbeddingTable] = []
    placement: dict[int, int] = {}
    mp_batch: set[int] = set()
    for r in ranks:
        for c in calls:
            if c.rank == r and c.kind == "split":
                p = c.params
                assert p is not None
                rows = p.rows if p.rows is not None else 1
                for _ in range(p.tables):
                    placement[len(tables)] = r
                    tables.append(EmbeddingTable(int(rows), int(round(p.dim)), float(p.pooling)))
                mp_batch.add(p.batch)
    dense = [c for c in calls if c.kind == "dense" and c.rank == ranks[0]]
    for c in dense:
        p = c.params
        assert p is not None
        for _ in range(p.tables):
            tables.append(EmbeddingTable(int(p.rows or 1), int(round(p.dim)), float(p.pooling)))
    lin, split = _linear_shapes(ts, ranks[0], iteration)
    if not lin:
        raise PlanError("no aten::addmm shapes in the trace: cannot recover the MLP widths")
    if split is None:
        split = next((j for j in range(1, len(lin)) if lin[j][1] != lin[j - 1][2]), len(lin))
    bottom, topl = lin[:split], lin[split:]
    if not bottom or not topl:
        raise PlanError("cannot tell the bottom from the top MLP in the trace's GEMMs")
    local = bottom[0][0]
    batch = local * len(ranks)
    if mp_batch and mp_batch != {batch}:
        raise PlanError(f"the embedding lookups' batch {sorted(mp_batch)} differs from "
                        f"ranks x MLP rows ({len(ranks)} x {local})")
    spec = DLRMSpec(tables=tuple(tables), dense_features=bottom[0][1],
                    bottom_mlp=tuple(o for _, _, o in bottom),
                    top_mlp=tuple(o for _, _, o in topl), dtype="fp32",
                    name=f"dlrm from trace ({len(ranks)} ranks)")
    step = float(np.median(it["dur"].to_numpy(np.float64))) * 1e-9
    return TraceDLRM(spec, int(batch), placement, step)


# ------------------------------------------------------------------ host overhead from a trace

#: host calls that block until the device has caught up; a ``cudaMemcpy*`` call whose copy is
#: device-to-host blocks too (pageable destination: the call returns once the copy, and all
#: work queued before it on the stream, is done)
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


@dataclass
class HostFit:
    """Host time per kernel launch measured on a trace (:func:`fit_host_overhead`).

    ``per_step``: one row per (rank, step): ``rank, iteration, step_us`` (the step's
    duration), ``blocked_us`` (union of the blocking calls' intervals), ``host_us =
    step_us - blocked_us``, ``launches`` (host runtime calls of the step that enqueued a
    kernel, collective, memcpy or memset), ``us_per_launch``, and the blocking points:
    ``stream_syncs``, ``device_syncs``, ``event_syncs``, ``dtoh_copies`` (blocking
    device-to-host copies), ``items`` (``aten::item`` calls) and ``items_blocking`` (those
    enclosing a blocking call: a ``.item()`` of a device tensor).
    """

    launch_overhead_us: float
    per_step: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"launch_overhead_us": self.launch_overhead_us,
                "per_step": [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                             for r in self.per_step.to_dict(orient="records")],
                "notes": self.notes}


def per_modelled_kernel(fit: HostFit, probe: DLRMPlanResult) -> HostFit:
    """``fit`` re-expressed per kernel *of the model*: the median host time per step of the
    trace (``per_step.host_us``) divided by the median number of kernels per rank that
    ``probe`` (a :func:`plan_dlrm` result of the trace's configuration) launches per step.

    The trace's launches (e.g. 262 per step on the 8xV100 DLRM: fbgemm helpers, the
    optimizer's per-parameter kernels, TorchRec's pipeline) outnumber the model's coarser
    kernels (79); charging the per-launch time to the model's kernels would drop most of the
    host time. Raises PlanError when the model launches no kernels.
    """
    kernels = [int(k) for k in probe.per_rank["kernels"]]
    k = float(np.median(kernels)) if kernels else 0.0
    if k <= 0:
        raise PlanError("the model launches no kernels: cannot spread the host time over them")
    ok = fit.per_step["launches"] > 0
    host_us = float(np.median(fit.per_step.loc[ok, "host_us"]))
    us = host_us / k
    launches = int(np.median(fit.per_step.loc[ok, "launches"]))
    note = (f"host time {host_us / 1e3:.3g} ms per step measured on the trace (median over "
            f"{int(ok.sum())} rank-steps of step - blocked host time), spread over the "
            f"model's {k:g} kernels per step: {us:.3g} us per modelled kernel (the trace "
            f"launches {launches}); in-sample when predicting this trace")
    return HostFit(us, fit.per_step, [note])


def fit_host_overhead(ts: TraceSet) -> HostFit:
    """Host time per launched kernel of a trace: the ``launch_overhead_us`` that makes the
    host model of :func:`plan_dlrm` (and of the transformer planner) describe that run.

    Estimator, per rank and step: ``(step duration - time blocked) / launches``, the median
    over all (rank, step) pairs.

    - *time blocked*: the union of the intervals of the host's blocking calls
      (:data:`SYNC_CALLS`, and ``cudaMemcpy*`` calls whose copy is device-to-host), on any
      host thread. The rest of the step the host is issuing work: Python, framework dispatch,
      kernel launches, and whatever else the step runs on the host (data loading, the next
      batch's input distribution in TorchRec's pipeline). All of it is charged to the
      launches: the host model has no other host cost. Python time *between* top-level ops is
      included on purpose: it is host time the GPU waits for in eager PyTorch; counting only
      top-level op durations would drop it (on the 8xV100 DLRM trace ~4.4 of ~12.4 ms).
      Assumes one host thread issues at a time (true of eager training: the autograd thread
      runs while the main thread waits in ``backward()``).
    - *launches*: host runtime calls in the step whose correlation id matches a kernel,
      collective, memcpy or memset of the rank (``cudaLaunchKernel``, ``cudaMemcpyAsync``...).

    The median is robust to a rank whose step includes an unusual stall. Using it to predict
    the same trace is in-sample.

    Raises:
        PlanError: the trace has no steps or no launches.
    """

    it = ts.iterations.to_pandas()
    if it.empty:
        raise PlanError("the trace has no iterations")
    ev = ts.events.to_pandas()
    kind = ev["kind"].astype(str).to_numpy()
    names = ev["name"].astype(str)
    name = names.to_numpy()
    is_dtoh_copy = (kind == "memcpy") & names.str.contains("DtoH", regex=False).to_numpy()
    is_memcpy_call = (kind == "runtime") & names.str.startswith("cudaMemcpy").to_numpy()
    rank = ev["rank"].to_numpy()
    iteration = ev["iteration"].to_numpy()
    rows = []
    for r in sorted(int(x) for x in it["rank"].unique()):
        on_r = rank == r
        dev = on_r & np.isin(kind, DEVICE_KINDS)
        dev_corr = set(ev["correlation"].to_numpy()[dev].tolist()) - {-1}
        dtoh_corr = set(ev["correlation"].to_numpy()[on_r & is_dtoh_copy].tolist()) - {-1}
        for _, step in it[it["rank"] == r].iterrows():
            sel = on_r & (iteration == int(step["iteration"]))
            e = ev[sel]
            en = name[sel]
            ek = kind[sel]
            rt = ek == "runtime"
            corr = e["correlation"].to_numpy()
            launches = int(np.sum(rt & np.isin(corr, list(dev_corr))))
            is_dtoh = is_memcpy_call[sel] & np.isin(corr, list(dtoh_corr))
            blocking = (rt & np.isin(en, SYNC_CALLS)) | is_dtoh
            t0, t1 = int(step["start"]), int(step["end"])
            ts_ = e["ts"].to_numpy()
            te = ts_ + e["dur"].to_numpy()
            iv = np.stack([np.clip(ts_[blocking], t0, t1), np.clip(te[blocking], t0, t1)],
                          axis=1).astype(float)
            blocked = float(union_length(iv[:, 0], iv[:, 1])) if len(iv) else 0.0
            items = (ek == "cpu_op") & (en == "aten::item")
            tid = e["tid"].to_numpy()
            n_block_items = 0
            for j in np.flatnonzero(items):
                n_block_items += bool(np.any(blocking & (tid == tid[j]) & (ts_ >= ts_[j])
                                             & (te <= te[j])))
            step_ns = float(step["dur"])
            host = step_ns - blocked
            rows.append({
                "rank": r, "iteration": int(step["iteration"]), "step_us": step_ns / 1e3,
                "blocked_us": blocked / 1e3, "host_us": host / 1e3, "launches": launches,
                "us_per_launch": host / 1e3 / launches if launches else float("nan"),
                "stream_syncs": int(np.sum(rt & (en == "cudaStreamSynchronize"))),
                "device_syncs": int(np.sum(rt & (en == "cudaDeviceSynchronize"))),
                "event_syncs": int(np.sum(rt & (en == "cudaEventSynchronize"))),
                "dtoh_copies": int(np.sum(is_dtoh)),
                "items": int(np.sum(items)), "items_blocking": n_block_items,
            })
    df = pd.DataFrame(rows)
    ok = df["launches"] > 0
    if not ok.any():
        raise PlanError("the trace's steps launch no kernels: cannot fit the host overhead")
    us = float(np.median(df.loc[ok, "us_per_launch"]))
    notes = [f"launch overhead {us:.3g} us/kernel fitted on this trace: median over "
             f"{int(ok.sum())} rank-steps of (step - blocked host time) / launches "
             f"(host {df['host_us'].median() / 1e3:.3g} ms, "
             f"{int(df['launches'].median())} launches per step); in-sample when predicting "
             f"this trace"]
    return HostFit(us, df, notes)
