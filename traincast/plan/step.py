"""One training step of a transformer layout as a graph: costs, shape and durations.

:func:`step_costs` prices every pass of one pipeline replica (the per-layer work of
:class:`~traincast.plan.transformer.TransformerCostModel`), :func:`build_step_template` builds
the step's graph with numpy from the schedule's pass orders, its op durations left as slots
(:class:`~traincast.plan.template.GraphTemplate`), and ``_Slots.values`` fills them for a layout.
Layouts with the same :meth:`StepCosts.signature` share the graph: the planner's search
simulates them together (:mod:`traincast.plan.search`); :func:`build_transformer_graph` is
one layout. The model (what each pass costs and which dependencies the schedule has) is
described in :mod:`traincast.plan.transformer`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from traincast.graph.model import EdgeKind
from traincast.plan.builder import COMM, COMPUTE, HOST, PlanTimeline
from traincast.plan.costs import PlanCosts
from traincast.plan.spec import Layout, TransformerSpec
from traincast.plan.template import CATEGORIES, PHASES, STREAMS, GraphTemplate
from traincast.plan.transformer import (
    BUCKET_BYTES,
    PassCost,
    TransformerCostModel,
    schedule_order,
)
from traincast.simulate.engine import simulate


@dataclass
class StepCosts:
    """Everything one layout's step costs, ahead of its graph: per virtual stage the forward
    pass, the backward pass (whole, and per layer for the last micro-batch, whose gradients
    feed the DP buckets), the parameters, and the pass orders, p2p, ZeRO-3 gathers, DP
    buckets and optimizer of each pipeline rank."""

    cm: TransformerCostModel
    fwd_cost: list[PassCost]
    bwd_layers: list[list[PassCost]]
    bwd_total: list[PassCost]
    params_chunk: list[float]
    orders: list[list[tuple[str, int, int]]]
    p2p: float
    launch_ns: float
    z3_ns: list[float]
    #: per rank: (index into the rank's gradient-ready passes, bytes) of each DP bucket
    buckets: list[list[tuple[int, float]]]
    model_flops: float
    hardware_flops: float

    def signature(self) -> tuple:
        """What decides the graph's shape (two layouts with equal signatures have the same
        ops and edges; only durations differ)."""
        lay = self.cm.l
        tp_on = tuple((bool(f.tp_comm_ns), bool(b.tp_comm_ns),
                       tuple(bool(x.tp_comm_ns) for x in bl))
                      for f, b, bl in zip(self.fwd_cost, self.bwd_total, self.bwd_layers,
                                          strict=True))
        return (lay.pp, lay.virtual_stages, lay.micro_batches, lay.schedule,
                self.launch_ns > 0, bool(self.p2p), bool(self.z3_ns), tp_on, lay.dp > 1,
                lay.zero >= 1, lay.overlap_grad_reduce,
                tuple(tuple(i for i, _ in b) for b in self.buckets))


def step_costs(model: TransformerSpec, layout: Layout, costs: PlanCosts) -> StepCosts:
    """The costs of one training step of ``model`` with ``layout`` (see the module
    docstring); layers of the same kind (dense or MoE) are costed once."""
    cm = TransformerCostModel(model, layout, costs)
    pp, v, m = layout.pp, layout.virtual_stages, layout.micro_batches
    n_chunks = pp * v
    per_chunk = model.layers // n_chunks
    fwd_of: dict[bool, PassCost] = {}
    bwd_of: dict[bool, PassCost] = {}
    fwd_cost: list[PassCost] = []
    bwd_layers: list[list[PassCost]] = []
    params_chunk: list[float] = []
    for k in range(n_chunks):
        f = PassCost()
        bl = []
        pc = 0.0
        for i in range(k * per_chunk, (k + 1) * per_chunk):
            moe = model.is_moe_layer(i)
            if moe not in fwd_of:
                fwd_of[moe] = cm.layer_forward(moe)
                bwd_of[moe] = cm.layer_backward(moe)
            f += fwd_of[moe]
            b = bwd_of[moe]
            bl.append(PassCost(b.compute_ns, b.tp_comm_ns, b.flops, b.kernels))
            lp = model.layer_params(moe)
            if moe:
                lp -= (model.experts - model.experts / layout.ep) * (
                    model.layer_params(True) - model.layer_params(False)) / model.experts
            pc += lp / layout.tp
        if k == 0:
            e = cm.embedding_forward()
            f += e
            bl.insert(0, PassCost(2 * e.compute_ns, e.tp_comm_ns, 0.0, 2 * e.kernels))
            pc += model.embedding_params / layout.tp
        if k == n_chunks - 1:
            hd = cm.head_forward()
            f += hd
            bl.append(PassCost(2 * hd.compute_ns, hd.tp_comm_ns, 2 * hd.flops, 2 * hd.kernels))
            if n_chunks > 1:
                pc += model.vocab * model.hidden / layout.tp  # tied copy on the last stage
        f.compute_ns += costs.calibration.pass_overhead_us * 1e3
        bl[-1] = PassCost(bl[-1].compute_ns + costs.calibration.pass_overhead_us * 1e3,
                          bl[-1].tp_comm_ns, bl[-1].flops, bl[-1].kernels)
        fwd_cost.append(f)
        bwd_layers.append(bl)
        params_chunk.append(pc)
    bwd_total = []
    for bl in bwd_layers:
        tot = PassCost()
        for c in bl:
            tot += c
        bwd_total.append(tot)
    orders = [schedule_order(layout.schedule, pp, m, v, r) for r in range(pp)]
    z3 = layout.zero == 3 and layout.dp > 1
    z3_ns = [costs.comm_ns("all_gather", pc * costs.itemsize, layout.dp, cm.dp_rpn)
             for pc in params_chunk] if z3 else []
    gbytes = 4 if cm.e >= 4 else 2
    buckets: list[list[tuple[int, float]]] = []
    for r in range(pp):
        ready = [params_chunk[chunk * pp + r] / len(bwd_layers[chunk * pp + r])
                 for chunk in _last_backward_chunks(layout.schedule, pp, m, v, r)
                 for _li in range(len(bwd_layers[chunk * pp + r]))]
        out: list[tuple[int, float]] = []
        if layout.dp > 1:
            acc = 0.0
            for i, n_params in enumerate(ready):
                acc += n_params * gbytes
                if acc >= BUCKET_BYTES or i == len(ready) - 1:
                    out.append((i, acc))
                    acc = 0.0
        buckets.append(out)
    fwd_flops = sum(c.flops for c in fwd_cost)
    bwd_flops = sum(sum(c.flops for c in bl) for bl in bwd_layers)
    replicas = layout.dp * layout.tp
    return StepCosts(cm, fwd_cost, bwd_layers, bwd_total, params_chunk, orders, cm.p2p_ns(),
                     costs.calibration.launch_overhead_us * 1e3, z3_ns, buckets,
                     3 * fwd_flops * m * replicas, (fwd_flops + bwd_flops) * m * replicas)


@functools.lru_cache(maxsize=1024)
def _pass_arrays(schedule: str, pp: int, m: int, v: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every rank's passes in schedule order, rank after rank, as arrays: rank, backward?,
    micro-batch, chunk (shared between calls: read-only)."""
    orders = [schedule_order(schedule, pp, m, v, r) for r in range(pp)]
    flat = [x for o in orders for x in o]
    out = (np.concatenate([np.full(len(o), r, np.int64) for r, o in enumerate(orders)]),
           np.array([ph == "B" for ph, _, _ in flat], bool),
           np.array([mb for _, mb, _ in flat], np.int64),
           np.array([ch for _, _, ch in flat], np.int64))
    for a in out:
        a.setflags(write=False)
    return out


@functools.lru_cache(maxsize=4096)
def _last_backward_chunks(schedule: str, pp: int, m: int, v: int, rank: int) -> tuple[int, ...]:
    """The chunks of the last micro-batch's backward passes on ``rank``, in schedule order
    (their layers' gradients fill the DP buckets)."""
    return tuple(chunk for ph, mb, chunk in schedule_order(schedule, pp, m, v, rank)
                 if ph == "B" and mb == m - 1)


class _Slots:
    """Slot numbers of a step's durations, a function of its shape only: 0 the p2p send;
    per virtual stage its forward (host, compute, TP comm), whole backward (same), ZeRO-3
    gather and per-layer backward (same three each); per rank its DP buckets, embedding
    all_reduce, optimizer and ZeRO parameter all_gather."""

    def __init__(self, sc: StepCosts) -> None:
        n = 1
        self.stage: list[int] = []
        for bl in sc.bwd_layers:
            self.stage.append(n)
            n += 7 + 3 * len(bl)
        self.rank: list[int] = []
        for b in sc.buckets:
            self.rank.append(n)
            n += len(b) + 3
        self.n = n

    def values(self, sc: StepCosts) -> np.ndarray:
        """float64[n] durations (ns) of ``sc`` in slot order."""
        out = np.zeros(self.n)
        out[0] = sc.p2p
        launch = sc.launch_ns
        for vs, base in enumerate(self.stage):
            f, b = sc.fwd_cost[vs], sc.bwd_total[vs]
            out[base:base + 6] = [f.kernels * launch, f.compute_ns, f.tp_comm_ns,
                                  b.kernels * launch, b.compute_ns, b.tp_comm_ns]
            out[base + 6] = sc.z3_ns[vs] if sc.z3_ns else 0.0
            for li, c in enumerate(sc.bwd_layers[vs]):
                out[base + 7 + 3 * li:base + 10 + 3 * li] = [c.kernels * launch, c.compute_ns,
                                                            c.tp_comm_ns]
        cm = sc.cm
        lay, c = cm.l, cm.c
        gbytes = 4 if cm.e >= 4 else 2
        for r, base in enumerate(self.rank):
            for j, (_i, acc) in enumerate(sc.buckets[r]):
                coll = "reduce_scatter" if lay.zero >= 1 else "all_reduce"
                out[base + j] = c.comm_ns(coll, acc, lay.dp, cm.dp_rpn)
            k = base + len(sc.buckets[r])
            if lay.pp > 1 and r in (0, lay.pp - 1):
                size = cm.m.vocab * cm.m.hidden / lay.tp * gbytes
                out[k] = c.comm_ns("all_reduce", size, 2, 1 if cm.pp_inter else 2)
            params_rank = sum(sc.params_chunk[q * lay.pp + r] for q in range(lay.virtual_stages))
            n_opt = params_rank / (lay.dp if lay.zero >= 1 else 1)
            # Adam: read/write fp32 master weights, m, v (24 B), read the grad, write the weight
            out[k + 1] = (c.compute_ns("optimizer", 10 * n_opt, n_opt * (24 + gbytes + cm.e), 1)
                          + c.calibration.step_overhead_us * 1e3)
            if lay.zero >= 1 and lay.dp > 1:
                out[k + 2] = c.comm_ns("all_gather", params_rank * cm.e, lay.dp, cm.dp_rpn)
        return out


_S_HOST, _S_COMPUTE, _S_ZERO3, _S_DP = (STREAMS.index(x) for x in ("host", "compute", "zero3",
                                                                     "dp"))
_C_HOST, _C_COMPUTE, _C_COMM = (CATEGORIES.index(x) for x in (HOST, COMPUTE, COMM))
_P = {x: PHASES.index(x) for x in PHASES}
#: op roles (for names): z3 gather, host issue, compute, TP comm, send, DP bucket,
#: embedding all_reduce, optimizer, ZeRO parameter all_gather
_ROLES = ("z3", "host", "compute", "tp", "send", "bucket", "emb", "opt", "zag")
_R = {x: i for i, x in enumerate(_ROLES)}
_EXEC, _STREAM, _CROSS, _LAUNCH = (int(EdgeKind.EXEC), int(EdgeKind.STREAM),
                                   int(EdgeKind.CROSS_STREAM), int(EdgeKind.LAUNCH))


def build_step_template(sc: StepCosts) -> tuple[GraphTemplate, _Slots]:
    """The graph of one pipeline replica's training step with durations as slots (see the
    module docstring), built with numpy from the pass orders.

    Per pass: a ZeRO-3 parameter all_gather on its own stream (prefetched one pass ahead),
    then per sub-pass (the whole pass, or each layer for the last micro-batch's backward,
    so gradient buckets can start as layers finish) a host issue op (kernels x launch
    overhead; launch edges to the device ops it issues), the compute op and its blocking TP
    collective, then the p2p send on the compute stream. A pass starts after its upstream
    pass (the previous virtual stage's forward, the next one's backward), its gather and,
    with p2p, its rank's previous pass (the host blocked on its send). Then per rank the
    DP buckets (after the layer that completes them), the tied-embedding all_reduce, the
    optimizer and the ZeRO parameter all_gather. Ops are numbered rank by rank; which rank
    runs what, and when, does not depend on the numbering.
    """
    lay = sc.cm.l
    pp, v, m = lay.pp, lay.virtual_stages, lay.micro_batches
    n_chunks = pp * v
    slots = _Slots(sc)
    launch = int(sc.launch_ns > 0)
    p2p = bool(sc.p2p)
    z3 = int(bool(sc.z3_ns))
    n_layers = np.array([len(bl) for bl in sc.bwd_layers], np.int64)
    layer_off = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(n_layers, out=layer_off[1:])
    tp_f = np.array([bool(c.tp_comm_ns) for c in sc.fwd_cost], np.int64)
    tp_b = np.array([bool(c.tp_comm_ns) for c in sc.bwd_total], np.int64)
    tp_l = np.array([bool(c.tp_comm_ns) for bl in sc.bwd_layers for c in bl], np.int64)
    stage_base = np.asarray(slots.stage, np.int64)

    # passes, rank by rank in schedule order
    p_rank, p_b, p_mb, p_chunk = _pass_arrays(lay.schedule, pp, m, v)
    p_vs = p_chunk * pp + p_rank
    n_pass = p_vs.size
    layered = p_b & (p_mb == m - 1)
    n_sub = np.where(layered, n_layers[p_vs], 1)
    send = (np.where(p_b, p_vs > 0, p_vs < n_chunks - 1) if p2p
            else np.zeros(n_pass, bool)).astype(np.int64)
    # sub-passes: kind 0 forward, 1 whole backward, 2 one layer's backward (layers reversed)
    s_pass = np.repeat(np.arange(n_pass), n_sub)
    s_first = np.r_[0, np.cumsum(n_sub)[:-1]]
    s_k = np.arange(s_pass.size) - np.repeat(s_first, n_sub)  # position within the pass
    s_kind = np.where(p_b[s_pass], np.where(layered[s_pass], 2, 1), 0)
    s_vs = p_vs[s_pass]
    s_li = np.where(s_kind == 2, n_layers[s_vs] - 1 - s_k, -1)
    s_tp = np.where(s_kind == 0, tp_f[s_vs], np.where(s_kind == 1, tp_b[s_vs],
                    tp_l[np.clip(layer_off[s_vs] + s_li, 0, max(tp_l.size - 1, 0))]
                    if tp_l.size else 0))
    s_slot = stage_base[s_vs] + np.where(s_kind == 0, 0, np.where(s_kind == 1, 3,
                                                                 7 + 3 * s_li))
    s_nops = launch + 1 + s_tp
    # op ids: per pass [z3] + sub-pass ops + [send]
    per_pass = np.bincount(s_pass, weights=s_nops, minlength=n_pass).astype(np.int64)
    p_nops = z3 + per_pass + send
    p_start = np.r_[0, np.cumsum(p_nops)[:-1]].astype(np.int64)
    n_pass_ops = int(p_nops.sum())
    excl = np.cumsum(s_nops) - s_nops  # sub-pass ops before this sub-pass, all passes
    s_start = p_start[s_pass] + z3 + excl - excl[s_first[s_pass]]
    s_host = np.where(launch, s_start, -1)
    s_comp = s_start + launch
    s_last = s_comp + s_tp  # the TP op when there is one
    p_end = np.where(send > 0, p_start + p_nops - 1, 0)
    last_sub = np.r_[s_first[1:], s_pass.size] - 1
    p_end = np.where(send > 0, p_end, s_last[last_sub])

    n_ops = n_pass_ops
    rank = np.empty(n_ops, np.int64)
    stream = np.empty(n_ops, np.int8)
    cat = np.empty(n_ops, np.int8)
    phase = np.empty(n_ops, np.int8)
    mbs = np.empty(n_ops, np.int64)
    slot = np.empty(n_ops, np.int64)
    role = np.empty(n_ops, np.int8)
    vs_of = np.empty(n_ops, np.int64)
    li_of = np.full(n_ops, -1, np.int64)
    b_of = np.zeros(n_ops, bool)  # a backward pass's op (for names)

    def put(ids: np.ndarray, r: np.ndarray, st: int, c: int, ph: np.ndarray | int,
            mb: np.ndarray | int, sl: np.ndarray | int, ro: int, vs: np.ndarray,
            li: np.ndarray | int, is_b: np.ndarray) -> None:
        rank[ids], stream[ids], cat[ids], phase[ids] = r, st, c, ph
        mbs[ids], slot[ids], role[ids], vs_of[ids], li_of[ids] = mb, sl, ro, vs, li
        b_of[ids] = is_b

    s_phase = np.where(s_kind == 0, _P["fwd"], _P["bwd"])
    s_b = p_b[s_pass]
    if z3:
        put(p_start, p_rank, _S_ZERO3, _C_COMM, _P["zero3"], -1, stage_base[p_vs] + 6,
            _R["z3"], p_vs, -1, p_b)
    if launch:
        put(s_host, p_rank[s_pass], _S_HOST, _C_HOST, _P["host"], p_mb[s_pass], s_slot,
            _R["host"], s_vs, s_li, s_b)
    put(s_comp, p_rank[s_pass], _S_COMPUTE, _C_COMPUTE, s_phase, p_mb[s_pass], s_slot + 1,
        _R["compute"], s_vs, s_li, s_b)
    t = s_tp > 0
    put(s_last[t], p_rank[s_pass][t], _S_COMPUTE, _C_COMM, s_phase[t], p_mb[s_pass][t],
        s_slot[t] + 2, _R["tp"], s_vs[t], s_li[t], s_b[t])
    sd = send > 0
    put(p_end[sd], p_rank[sd], _S_COMPUTE, _C_COMM, _P["p2p"], p_mb[sd], 0, _R["send"],
        p_vs[sd], -1, p_b[sd])

    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    kind: list[np.ndarray] = []

    def edges(a: np.ndarray, b: np.ndarray, k: int) -> None:
        src.append(np.asarray(a, np.int64))
        dst.append(np.asarray(b, np.int64))
        kind.append(np.full(np.size(a), k, np.int8))

    # the pass each pass waits for: forward of the previous virtual stage, backward of the
    # next (the last stage's backward: its own forward)
    ends = np.full((2, m, n_chunks), -1, np.int64)
    ends[p_b.astype(np.int64), p_mb, p_vs] = p_end
    dep = np.where(p_b, np.where(p_vs < n_chunks - 1, ends[1, p_mb, np.minimum(
        p_vs + 1, n_chunks - 1)], ends[0, p_mb, p_vs]),
        np.where(p_vs > 0, ends[0, p_mb, np.maximum(p_vs - 1, 0)], -1))
    first_sub = s_first  # the pass's first sub-pass gets its dependencies
    targets = [s_comp[first_sub]] + ([s_host[first_sub]] if launch else [])
    prev_same_rank = np.r_[False, p_rank[1:] == p_rank[:-1]]
    prev_end = np.r_[-1, p_end[:-1]]
    for tgt in targets:
        has = dep >= 0
        edges(2 * dep[has] + 1, 2 * tgt[has], _CROSS)
        if z3:
            edges(2 * p_start + 1, 2 * tgt, _CROSS)
        if p2p:
            w = prev_same_rank
            edges(2 * prev_end[w] + 1, 2 * tgt[w], _CROSS)
    if z3:  # prefetched one pass ahead: after the rank's pass before the previous one
        two_back = np.r_[-1, -1, p_end[:-2]]
        ok = np.r_[False, False, p_rank[2:] == p_rank[:-2]]
        edges(2 * two_back[ok] + 1, 2 * p_start[ok], _CROSS)
    if launch:
        edges(2 * s_host, 2 * s_comp, _LAUNCH)
        edges(2 * s_host + 1, 2 * s_last + 1, _LAUNCH)

    # DP buckets, tied-embedding all_reduce, optimizer, ZeRO all_gather (per rank)
    ready_all = s_last[(s_kind == 2)]
    ready_rank = p_rank[s_pass][s_kind == 2]
    extra: list[tuple[int, int, int, int, int, int, list[int]]] = []  # rank, stream, cat,
    nxt = n_ops                                                       # phase, slot, role, after
    for r in range(pp):
        ready = ready_all[ready_rank == r].tolist()
        base = slots.rank[r]
        last = [ready[-1]] if ready else []
        dp_ops: list[int] = []
        for j, (i, _acc) in enumerate(sc.buckets[r]):
            d = ready[i] if lay.overlap_grad_reduce else ready[-1]
            extra.append((r, _S_DP, _C_COMM, _P["dp"], base + j, _R["bucket"], [d]))
            dp_ops.append(nxt)
            nxt += 1
        k = base + len(sc.buckets[r])
        if pp > 1 and r in (0, pp - 1):
            extra.append((r, _S_DP, _C_COMM, _P["dp"], k, _R["emb"], last + dp_ops[-1:]))
            dp_ops.append(nxt)
            nxt += 1
        extra.append((r, _S_COMPUTE, _C_COMPUTE, _P["opt"], k + 1, _R["opt"], last + dp_ops))
        o = nxt
        nxt += 1
        if lay.zero >= 1 and lay.dp > 1:
            extra.append((r, _S_DP, _C_COMM, _P["dp"], k + 2, _R["zag"], [o]))
            nxt += 1
    if extra:
        ex = np.array([e[:6] for e in extra], np.int64)
        rank = np.r_[rank, ex[:, 0]]
        stream = np.r_[stream, ex[:, 1].astype(np.int8)]
        cat = np.r_[cat, ex[:, 2].astype(np.int8)]
        phase = np.r_[phase, ex[:, 3].astype(np.int8)]
        slot = np.r_[slot, ex[:, 4]]
        role = np.r_[role, ex[:, 5].astype(np.int8)]
        mbs = np.r_[mbs, np.full(len(extra), -1, np.int64)]
        vs_of = np.r_[vs_of, np.full(len(extra), -1, np.int64)]
        li_of = np.r_[li_of, np.full(len(extra), -1, np.int64)]
        b_of = np.r_[b_of, np.zeros(len(extra), bool)]
        a = [(d, n_ops + q) for q, e in enumerate(extra) for d in e[6]]
        if a:
            aa = np.array(a, np.int64)
            edges(2 * aa[:, 0] + 1, 2 * aa[:, 1], _CROSS)
    n_all = rank.size
    ids = np.arange(n_all, dtype=np.int64)
    # FIFO streams: consecutive ops of one (rank, stream), in id order
    o = np.lexsort((ids, stream, rank))
    same = (rank[o][1:] == rank[o][:-1]) & (stream[o][1:] == stream[o][:-1])
    edges(2 * o[:-1][same] + 1, 2 * o[1:][same], _STREAM)
    edges(2 * ids, 2 * ids + 1, _EXEC)
    src_a, dst_a, kind_a = np.concatenate(src), np.concatenate(dst), np.concatenate(kind)
    by_src = np.argsort(src_a, kind="stable")  # the simulator's CSR order: no re-sort per batch
    src_a, dst_a, kind_a = src_a[by_src], dst_a[by_src], kind_a[by_src]

    template = GraphTemplate(
        rank=rank.astype(np.int32), stream_code=stream, category_code=cat,
        phase_code=phase, microbatch=mbs.astype(np.int32), slot=slot, src=src_a, dst=dst_a,
        kind=kind_a, exec_op=np.where(kind_a == _EXEC, src_a // 2, -1), n_slots=slots.n,
        names=lambda: _names(role, b_of, vs_of, li_of, lay.zero))
    return template, slots


def _names(role: np.ndarray, is_b: np.ndarray, vs: np.ndarray, li: np.ndarray,
           zero: int) -> list[str]:
    """Op names as the planner shows them (``F3``, ``issue B2.7``, ``send F0``...)."""
    out = []
    for ro, b, v, i in zip(role.tolist(), is_b.tolist(), vs.tolist(), li.tolist(),
                           strict=True):
        r = _ROLES[ro]
        p = "B" if b else "F"
        if r == "z3":
            out.append(f"all_gather params {v}")
        elif r in ("host", "compute", "tp"):
            base = f"{p}{v}" + (f".{i}" if i >= 0 else "")
            out.append({"host": f"issue {base}", "compute": base, "tp": f"{base}.tp"}[r])
        elif r == "send":
            out.append(f"send {p}{v}")
        elif r == "bucket":
            out.append("reduce_scatter grads" if zero >= 1 else "all_reduce grads")
        else:
            out.append({"emb": "all_reduce embedding grads", "opt": "optimizer",
                        "zag": "all_gather params"}[r])
    return out


@dataclass
class TransformerStep:
    """One layout's step: its costs, the graph template of its shape and its slot values."""

    costs: StepCosts
    template: GraphTemplate
    values: np.ndarray

    @property
    def model_flops(self) -> float:
        return self.costs.model_flops

    @property
    def hardware_flops(self) -> float:
        return self.costs.hardware_flops

    def run(self) -> PlanTimeline:
        """Simulate the step (one layout) and return its timeline."""
        dur = self.template.durations(self.values)
        g = self.template.graph(dur)
        return self.template.timeline(simulate(g).times, g)


def build_transformer_graph(model: TransformerSpec, layout: Layout, costs: PlanCosts
                            ) -> TransformerStep:
    """Emit one pipeline replica's ops for one training step (see module docstring)."""
    sc = step_costs(model, layout, costs)
    template, slots = build_step_template(sc)
    return TransformerStep(sc, template, slots.values(sc))
