"""GPT-style transformer training step as a per-rank execution graph.

One pipeline replica is simulated: one rank per pipeline stage stands for its ``tp`` tensor-
parallel peers and its ``dp`` data-parallel replicas, which execute the same ops at the same
times (Megatron's layouts are symmetric; a straggler is not something a plan can know). The
cost of the groups they form appears in the collectives' durations.

**Work per layer and micro-batch** (``b`` sequences of ``s`` tokens, hidden ``h``, ``a``
heads, FFN ``f``, vocabulary ``V``, tensor-parallel degree ``t``; per rank). GEMM FLOPs are
those of Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM" (SC'21), Sec. 5.1 / Appendix: per layer forward ``24 b s h^2 + 4 b s^2 h``
for ``f = 4h`` (QKV ``6bsh^2``, scores ``2bs^2h``, attention over values ``2bs^2h``, projection
``2bsh^2``, MLP ``4bshf``), divided by ``t``; the LM head ``2bshV/t``. The backward pass does
twice the forward GEMM work (input and weight gradients). Elementwise and normalisation ops
are memory-bound: their bytes are the activations they read and write, from Korthikanti et al.,
"Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023), Sec. 4.1 (the
tensors the layer stores), read and written once per op. With sequence parallelism
(Korthikanti Sec. 4.2.2) layernorm/dropout work is divided by ``t``.

**Communication** (per layer, Megatron tensor parallelism, Shoeybi et al. 2019, Fig. 3 and
Korthikanti Sec. 4.2.2): two all_reduce of ``b s h`` activations in the forward and two in
the backward; with sequence parallelism each becomes an all_gather + reduce_scatter pair of
the same size. MoE layers (Fedus et al., "Switch Transformers", JMLR 2022, Sec. 2.2; expert
parallelism as in GShard) route each token to ``top_k`` experts with an all_to_all over the
``ep`` group before and after the experts, forward and backward. Pipeline stages exchange
``b s h / t`` activations and their gradients with blocking send/recv (each tensor-parallel
rank sends its share, Megatron's scatter-gather optimisation), which occupy the sender's
stream as in Megatron's ``send_forward_recv_backward``; the first and last stage all-reduce the
tied word-embedding gradient.
Data-parallel gradients (2 bytes per parameter for 16-bit training, 4 for fp32) are all-reduced
in buckets as the last micro-batch's backward produces them (PyTorch DDP / Megatron's
overlapped grad reduce); with ZeRO-1/2 the all_reduce becomes reduce_scatter + all_gather of
the updated parameters (Rajbhandari et al., SC'20, Sec. 5); ZeRO-3/FSDP also all-gathers each
layer's parameters before its forward and backward.

**Recomputation** (Korthikanti Sec. 4.2): ``full`` re-runs each layer's forward (compute and
its TP collectives) before its backward; ``selective`` re-runs the attention core (scores,
softmax, dropout, attention over values).

**Schedules**: GPipe (all forwards, then all backwards), 1F1B (PipeDream-Flush, Narayanan et
al. SC'21 Sec. 2.2.1) and interleaved 1F1B with ``v`` model chunks per device (Sec. 2.2.2),
ordered exactly as Megatron-LM's ``forward_backward_pipelining_with_interleaving``
(``megatron/core/pipeline_parallel/schedules.py``). The pipeline bubble is not a formula here:
it emerges from the simulated dependencies.

Rank placement follows Megatron's default order (tensor-parallel ranks adjacent, then data
parallel, then pipeline): a group's ranks per node decide intra- vs inter-node links.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from traincast.plan.builder import COMM, COMPUTE, HOST, PlanTimeline
from traincast.plan.costs import PlanCosts
from traincast.plan.spec import Layout, SystemSpec, TransformerSpec
from traincast.plan.template import GraphTemplate, TemplateBuilder
from traincast.simulate.engine import simulate

#: DP gradient bucket size (bytes): PyTorch DDP's default ``bucket_cap_mb=25``
BUCKET_BYTES = 25 * 2**20


@dataclass
class PassCost:
    """Durations (ns) and FLOPs of one chunk pass (forward or backward of ``n`` layers) for one
    micro-batch on one rank: compute, blocking tensor-parallel comm, and the FLOPs."""

    compute_ns: float = 0.0
    tp_comm_ns: float = 0.0
    flops: float = 0.0
    kernels: float = 0.0

    def __iadd__(self, o: PassCost) -> PassCost:
        self.compute_ns += o.compute_ns
        self.tp_comm_ns += o.tp_comm_ns
        self.flops += o.flops
        self.kernels += o.kernels
        return self



def _ranks_per_node(system: SystemSpec, stride: int, group: int) -> int:
    """Ranks of a group with rank stride ``stride`` that share a node."""
    if stride >= system.gpus_per_node:
        return 1
    return max(1, min(group, system.gpus_per_node // stride))


class TransformerCostModel:
    """Per-rank op costs of one layer/micro-batch for a model, layout and system."""

    def __init__(self, model: TransformerSpec, layout: Layout, costs: PlanCosts) -> None:
        self.m, self.l, self.c = model, layout, costs
        sysm = costs.system
        t = layout.tp
        self.tp_rpn = _ranks_per_node(sysm, 1, t)
        self.dp_rpn = _ranks_per_node(sysm, t, layout.dp)
        self.ep_rpn = _ranks_per_node(sysm, t, layout.ep)
        self.pp_inter = t * layout.dp >= sysm.gpus_per_node
        self.e = costs.itemsize

    # ---- building blocks
    def _gemm(self, flops: float, nbytes: float, kernels: int = 1) -> tuple[float, float]:
        return self.c.compute_ns("gemm", flops, nbytes, kernels), flops

    def _tp_coll(self, n: int) -> float:
        """``n`` TP collectives on ``b s h`` activations (all_reduce, or all_gather +
        reduce_scatter with sequence parallelism)."""
        m, lay = self.m, self.l
        if lay.tp == 1:
            return 0.0
        size = lay.micro_batch * m.seq * m.hidden * self.e
        if lay.sequence_parallel:
            one = (self.c.comm_ns("all_gather", size, lay.tp, self.tp_rpn)
                   + self.c.comm_ns("reduce_scatter", size, lay.tp, self.tp_rpn)) / 2
        else:
            one = self.c.comm_ns("all_reduce", size, lay.tp, self.tp_rpn)
        return n * one

    def attention_core(self) -> PassCost:
        """Scores, softmax+dropout and attention over values, forward."""
        m, lay, e = self.m, self.l, self.e
        b, s, h, t = lay.micro_batch, m.seq, m.hidden, lay.tp
        a_t = m.heads / t
        fl = 2 * b * s * s * h / t
        qkv_bytes = e * b * s * h / t
        score_bytes = e * b * a_t * s * s
        bmm1 = self.c.compute_ns("attention", fl, 2 * qkv_bytes + score_bytes)
        # softmax reads/writes the scores, dropout writes the output and a 1-byte mask
        soft = self.c.compute_ns("elementwise", 5 * b * a_t * s * s,
                                 score_bytes * 4 + b * a_t * s * s, 2)
        bmm2 = self.c.compute_ns("attention", fl, score_bytes + 2 * qkv_bytes)
        return PassCost(bmm1 + soft + bmm2, 0.0, 2 * fl, 4)

    def layer_forward(self, moe: bool = False) -> PassCost:
        m, lay, e = self.m, self.l, self.e
        b, s, h, t = lay.micro_batch, m.seq, m.hidden, lay.tp
        sp = t if lay.sequence_parallel else 1
        act = e * b * s * h
        tot = PassCost()
        # two layernorms (read x, write y) and two dropout+residual adds (read 2, write 1,
        # 1-byte mask): memory bound; sequence parallel splits them over t
        ln = self.c.compute_ns("elementwise", 8 * b * s * h / sp, 2 * 2 * act / sp, 2)
        dr = self.c.compute_ns("elementwise", 2 * b * s * h / sp,
                               2 * (3 * act + b * s * h) / sp, 2)
        tot += PassCost(ln + dr, 0.0, 0.0, 4)
        w = e * h * h / t
        ns, fl = self._gemm(6 * b * s * h * h / t, act + 3 * w + 3 * act / t)
        tot += PassCost(ns, 0.0, fl, 1)
        tot += self.attention_core()
        ns, fl = self._gemm(2 * b * s * h * h / t, act / t + w + act)
        tot += PassCost(ns, 0.0, fl, 1)
        if moe:
            k, E = m.top_k, m.experts
            ns, fl = self._gemm(2 * b * s * h * E, act + e * h * E)  # router (replicated)
            tot += PassCost(ns, 0.0, fl, 1)
            tot += self._mlp(k)
            tot += PassCost(0.0, 2 * self._a2a(), 0.0, 2 if self.l.ep > 1 else 0)
        else:
            tot += self._mlp(1)
        tot.tp_comm_ns += self._tp_coll(2)
        tot.kernels += 2 if lay.tp > 1 else 0
        return tot

    def _mlp(self, tokens_factor: int) -> PassCost:
        m, lay, e = self.m, self.l, self.e
        b, s, h, t, f = lay.micro_batch, m.seq, m.hidden, lay.tp, m.ffn_size
        bs = b * s * tokens_factor
        act = e * bs * h
        wf = e * h * f / t
        ns1, fl1 = self._gemm(2 * bs * h * f / t, act + wf + e * bs * f / t)
        gelu = self.c.compute_ns("elementwise", 8 * bs * f / t, 2 * e * bs * f / t)
        ns2, fl2 = self._gemm(2 * bs * h * f / t, e * bs * f / t + wf + act)
        return PassCost(ns1 + gelu + ns2, 0.0, fl1 + fl2, 3)

    def _a2a(self) -> float:
        m, lay = self.m, self.l
        if lay.ep == 1:
            return 0.0
        size = lay.micro_batch * m.seq * m.top_k * m.hidden * self.e / lay.tp
        return self.c.comm_ns("all_to_all", size, lay.ep, self.ep_rpn)

    def layer_backward(self, moe: bool = False) -> PassCost:
        """Backward: twice the forward GEMM/attention work (input and weight gradients), the
        elementwise work twice (read output grad + saved input, write input grad), the same
        TP collectives (the conjugate ``f``/``g`` operators), plus recomputation."""
        fwd = self.layer_forward(moe)
        bwd = PassCost(2 * fwd.compute_ns, fwd.tp_comm_ns, 2 * fwd.flops, 2 * fwd.kernels)
        if self.l.recompute == "full":
            bwd += fwd
        elif self.l.recompute == "selective":
            bwd += self.attention_core()
        return bwd

    def embedding_forward(self) -> PassCost:
        m, lay, e = self.m, self.l, self.e
        b, s, h = lay.micro_batch, m.seq, m.hidden
        ns = self.c.compute_ns("embedding", 0.0, 3 * e * b * s * h, 2)
        return PassCost(ns, self._tp_coll(1), 0.0, 2 + (lay.tp > 1))

    def head_forward(self) -> PassCost:
        """Final layernorm, LM head (``2 b s h V / t``) and cross entropy (fp32 logits)."""
        m, lay, e = self.m, self.l, self.e
        b, s, h, t, V = lay.micro_batch, m.seq, m.hidden, lay.tp, m.vocab
        ln = self.c.compute_ns("elementwise", 8 * b * s * h, 2 * e * b * s * h)
        ns, fl = self._gemm(2 * b * s * h * V / t, e * b * s * h + e * h * V / t
                            + e * b * s * V / t)
        ce = self.c.compute_ns("elementwise", 5 * b * s * V / t, 3 * 4 * b * s * V / t, 3)
        return PassCost(ln + ns + ce, self._tp_coll(1) if lay.tp > 1 else 0.0, fl,
                        5 + (lay.tp > 1))

    def p2p_ns(self) -> float:
        m, lay = self.m, self.l
        if lay.pp == 1:
            return 0.0
        # each tensor-parallel rank sends its 1/t share (Megatron's
        # scatter_gather_tensors_in_pipeline, on by default; native with sequence parallelism)
        size = lay.micro_batch * m.seq * m.hidden * self.e / lay.tp
        return self.c.comm_ns("send", size, 2, 1 if self.pp_inter else 2)


# ------------------------------------------------------------------ schedules


def schedule_order(schedule: str, pp: int, m: int, v: int, rank: int
                   ) -> list[tuple[str, int, int]]:
    """See :func:`_schedule_order` (memoised: every layout of a search with the same
    pipeline shape shares it; the list returned is shared, do not modify it)."""
    return _schedule_order(schedule, pp, m, v, rank)


@functools.lru_cache(maxsize=4096)
def _schedule_order(schedule: str, pp: int, m: int, v: int, rank: int
                    ) -> list[tuple[str, int, int]]:
    """Order of ``(phase, microbatch, chunk)`` passes on pipeline ``rank``; phase ``F``/``B``.

    ``chunk`` is the model chunk on this device (0..v-1): virtual stage ``chunk * pp + rank``.
    The interleaved order is Megatron-LM's (``get_model_chunk_id``; warmup
    ``(pp - rank - 1) * 2 + (v - 1) * pp`` forward passes).
    """
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]
    if v == 1:
        warm = min(pp - rank - 1, m)
        out = [("F", i, 0) for i in range(warm)]
        for i in range(m - warm):
            out += [("F", warm + i, 0), ("B", i, 0)]
        out += [("B", i, 0) for i in range(m - warm, m)]
        return out
    total = m * v
    group = pp * v

    def fwd(k: int) -> tuple[str, int, int]:
        chunk = (k % group) // pp
        mb = (k // group) * pp + (k % pp)
        return ("F", mb, chunk)

    def bwd(k: int) -> tuple[str, int, int]:
        chunk = v - 1 - (k % group) // pp
        mb = (k // group) * pp + (k % pp)
        return ("B", mb, chunk)

    warm = min((pp - rank - 1) * 2 + (v - 1) * pp, total)
    out = [fwd(k) for k in range(warm)]
    for k in range(total - warm):
        out += [fwd(warm + k), bwd(k)]
    out += [bwd(k) for k in range(total - warm, total)]
    return out


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
                 for ph, mb, chunk in orders[r] if ph == "B" and mb == m - 1
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


def build_step_template(sc: StepCosts) -> tuple[GraphTemplate, _Slots]:
    """The graph of one pipeline replica's training step with durations as slots (see the
    module docstring): ops emitted round-robin over ranks, a pass once its upstream pass
    exists."""
    lay = sc.cm.l
    pp, v, m = lay.pp, lay.virtual_stages, lay.micro_batches
    n_chunks = pp * v
    slots = _Slots(sc)
    g = TemplateBuilder()
    op, issued_by = g.op, g.issued_by
    launch = sc.launch_ns > 0
    p2p = bool(sc.p2p)

    def emit_pass(r: int, name: str, base: int, has_tp: bool, phase: str, mb: int,
                  after: list[int]) -> int:
        """Host issue op (kernels x launch overhead) + device compute (+ TP comm) ops."""
        h = op(r, "host", f"issue {name}", base, HOST, "host", mb, after) if launch else -1
        first = op(r, "compute", name, base + 1, COMPUTE, phase, mb, after)
        last = first
        if has_tp:
            last = op(r, "compute", f"{name}.tp", base + 2, COMM, phase, mb)
        if h >= 0:
            issued_by(h, first, last)
        return last

    ends: dict[tuple[str, int, int], int] = {}  # (phase, mb, virtual stage) -> last op id
    orders = sc.orders
    pos = [0] * pp
    grad_ready: list[list[int]] = [[] for _ in range(pp)]
    pass_ends: list[list[int]] = [[] for _ in range(pp)]
    host_wait: list[int | None] = [None] * pp
    z3 = bool(sc.z3_ns)
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            order_r = orders[r]
            while pos[r] < len(order_r):
                ph, mb, chunk = order_r[pos[r]]
                vs = chunk * pp + r
                if ph == "F":
                    dep = ("F", mb, vs - 1) if vs > 0 else None
                else:
                    dep = ("B", mb, vs + 1) if vs < n_chunks - 1 else ("F", mb, vs)
                if dep is not None and dep not in ends:
                    break
                after = [] if dep is None else [ends[dep]]
                base = slots.stage[vs]
                if z3:
                    hist = pass_ends[r]
                    gat = op(r, "zero3", f"all_gather params {vs}", base + 6, COMM, "zero3",
                             -1, [hist[-2]] if len(hist) >= 2 else [])
                    after.append(gat)
                if host_wait[r] is not None:
                    after.append(host_wait[r])  # the host blocked on its last send
                if ph == "F":
                    i = emit_pass(r, f"F{vs}", base, bool(sc.fwd_cost[vs].tp_comm_ns), "fwd",
                                  mb, after)
                    if p2p and vs < n_chunks - 1:
                        i = op(r, "compute", f"send F{vs}", 0, COMM, "p2p", mb)
                    ends[("F", mb, vs)] = i
                else:
                    layers_b = sc.bwd_layers[vs]
                    if mb == m - 1:
                        # per layer, so gradient buckets can start as layers finish
                        i = -1
                        for li in reversed(range(len(layers_b))):
                            first = li == len(layers_b) - 1
                            i = emit_pass(r, f"B{vs}.{li}", base + 7 + 3 * li,
                                          bool(layers_b[li].tp_comm_ns), "bwd", mb,
                                          after if first else [])
                            grad_ready[r].append(i)
                    else:
                        i = emit_pass(r, f"B{vs}", base + 3, bool(sc.bwd_total[vs].tp_comm_ns),
                                      "bwd", mb, after)
                    if p2p and vs > 0:
                        i = op(r, "compute", f"send B{vs}", 0, COMM, "p2p", mb)
                    ends[("B", mb, vs)] = i
                pass_ends[r].append(i)
                host_wait[r] = i if p2p else None
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - schedules above are deadlock-free
            raise RuntimeError("pipeline schedule deadlocked (planner bug)")

    # bucketed DP gradient reduction on a ``dp`` stream, then the optimizer step
    for r in range(pp):
        ready = grad_ready[r]
        base = slots.rank[r]
        last = [ready[-1]] if ready else []
        dp_ops: list[int] = []
        name = "reduce_scatter grads" if lay.zero >= 1 else "all_reduce grads"
        for j, (i, _acc) in enumerate(sc.buckets[r]):
            dep = ready[i] if lay.overlap_grad_reduce else ready[-1]
            dp_ops.append(op(r, "dp", name, base + j, COMM, "dp", -1, [dep]))
        k = base + len(sc.buckets[r])
        if pp > 1 and r in (0, pp - 1):
            # Megatron keeps the tied word embedding on the first and the last stage and
            # all-reduces its gradient between them (``_allreduce_word_embedding_grads``)
            dp_ops.append(op(r, "dp", "all_reduce embedding grads", k, COMM, "dp", -1,
                             last + dp_ops[-1:]))
        o = op(r, "compute", "optimizer", k + 1, COMPUTE, "opt", -1, last + dp_ops)
        if lay.zero >= 1 and lay.dp > 1:
            op(r, "dp", "all_gather params", k + 2, COMM, "dp", -1, [o])
    return g.build(slots.n), slots


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
