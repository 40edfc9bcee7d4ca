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

from traincast.plan.costs import PlanCosts
from traincast.plan.spec import Layout, SystemSpec, TransformerSpec

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
