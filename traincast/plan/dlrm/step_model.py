"""DLRM training step as a per-rank execution graph (:func:`plan_dlrm`).

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

Shards and their placement: :mod:`traincast.plan.dlrm.sharding`.

**Uneven all_to_all.** Rank ``r`` sends ``(g-1) b W_r`` pooled values (``W_r`` = width of its
table/column shards) and receives ``b (W - W_r)``. NCCL's all_to_all is a grouped send/recv in
which every rank exchanges a chunk with every other, so no rank completes before the heaviest
sender's (or receiver's) traffic is through: each member's transfer is the group's
``max_r t(max(send_r, recv_r))`` and all ranks end together (passed per member to
:meth:`GraphBuilder.collective`). ``t`` is the collective model's all_to_all time for a buffer
whose off-rank part is that volume (``S = v g / (g-1)``, nccl-tests' convention). The per-rank
table reports each rank's own ``t`` so the bottleneck is visible.

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traincast.costs.comm import CommModel
from traincast.costs.embedding import EmbeddingModel
from traincast.errors import ParameterError
from traincast.plan.api import _exposed
from traincast.plan.builder import COMM, HOST, GraphBuilder
from traincast.plan.costs import PlanCalibration, PlanCosts
from traincast.plan.dlrm.result import DLRMPlanResult
from traincast.plan.dlrm.sharding import (
    Shard,
    check_plan_inputs,
    lookup_bytes,
    on_gpu,
    place_shards,
    resolve_sharding,
)
from traincast.plan.memory import _DENSE_OPT, _EMB_OPT, _param_elem_bytes
from traincast.plan.spec import DTYPE_BYTES, DLRMSpec, Layout, PlanError, SystemSpec

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

    b = check_plan_inputs(model, system, layout, batch)
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
    em = on_gpu(embedding_model, system.gpu)
    e = DTYPE_BYTES[model.dtype]
    dist, alpha = model.index_distribution, model.zipf_alpha
    if dist == "zipf" and alpha is None:
        raise PlanError("index_distribution zipf needs zipf_alpha")

    def shard_bytes(s: Shard, backward: bool) -> float:
        opt = ("none" if s.how == "data" else optimizer) if backward else "sgd"
        return lookup_bytes(int(s.batch), float(s.pooling), float(s.dim), int(s.rows), e,
                             float(em.l2_bytes), dist, alpha if dist == "zipf" else None,
                             backward, opt)

    bw = em.device_bw_gbps

    def cost(s: Shard) -> float:  # ns, bytes-bound part of fwd + bwd (placement heuristic)
        return (shard_bytes(s, False) / (bw * em.eff["forward"])
                + shard_bytes(s, True) / (bw * em.eff["backward"]))

    try:
        shards, placed = place_shards(model, sharding, g, int(batch), dict(placement or {}),
                                      cost)
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

    def exchanges(steps: Sequence[tuple[bool, str, float]], after: list[int], phase: str
                  ) -> list[list[int]]:
        """Per rank, the ids of the collectives ``steps`` (``(enabled, name, time)``, in
        order; each after ``after[rank]``) that are enabled."""
        out: list[list[int]] = [[] for _ in range(g)]
        for enabled, name, t in steps:
            if enabled:
                ids = coll(name, t, [[after[r]] for r in range(g)], phase)
                for r in range(g):
                    out[r].append(ids[r])
        return out

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
    waits = exchanges([(multi and W > 0, "pooled all_to_all fwd", a2a_T),
                       (multi and bool(D_rw), "pooled reduce_scatter fwd", rs_T)], emb_f, "fwd")
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
    gwaits = exchanges([(multi and W > 0, "pooled all_to_all bwd", a2a_T),
                        (multi and bool(D_rw), "pooled all_gather bwd", ag_T)], inter_done, "bwd")
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
