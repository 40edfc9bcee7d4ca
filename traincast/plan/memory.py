"""Per-GPU memory of one training step: weights, gradients, optimizer state and activations.

Closed-form estimates, every term from a published formula (sources below and in each
docstring). All sizes are **bytes per GPU**; :meth:`MemoryBreakdown.to_gib` converts to GiB
(2**30 bytes).

Sources:

* Activations: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  Models", MLSys 2023 (arXiv:2205.05198) -- "K" below. Sec. 4.1 (one layer), Sec. 4.2.1
  (tensor parallel), Sec. 4.2.2 (sequence parallel), Sec. 4.2.3 (pipeline parallel), Sec. 4.3
  (embeddings and output layer), Sec. 5 (selective recomputation) and the summary of Table 2.
  The pipeline and output-layer terms are cross-checked against NVIDIA's implementation of the
  same paper, Megatron-LM ``megatron/training/theoretical_memory_usage.py``
  (``compute_activation_memory``).
* Weights, gradients, optimizer state: Rajbhandari et al., "ZeRO: Memory Optimizations Toward
  Training Trillion Parameter Models", SC'20 -- "ZeRO" below. Sec. 3.1 (mixed-precision Adam:
  2 + 2 + 12 = 16 bytes per parameter) and Sec. 5 (stages 1-3 partition optimizer state,
  gradients and parameters over the data-parallel group).
* Parameter placement: Megatron-LM (Shoeybi et al. 2019; Narayanan et al., SC'21): column /
  row parallel linear layers, vocabulary-parallel embedding, the tied embedding held by both the
  first and the last pipeline stage.
* GPU capacity: the hardware catalog (:mod:`traincast.costs.hardware`), see
  :func:`gpu_capacity_bytes`.

Not modelled (no derivable size): the CUDA context and library workspaces (cuBLAS, NCCL
buffers), allocator fragmentation, communication buffers (e.g. the all-gathered sequence-parallel
input inside a layer, data-parallel gradient buckets), fused-kernel variants (FlashAttention does
not store the ``a s^2 b`` softmax terms). ``fits`` therefore means "the modelled terms fit", a
necessary, not a sufficient, condition.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass
from typing import Any

from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.plan.spec import (
    DTYPE_BYTES,
    RECOMPUTE,
    DLRMSpec,
    Layout,
    PlanError,
    TransformerSpec,
    check_layout,
)

__all__ = [
    "GIB",
    "MemoryBreakdown",
    "activation_bytes_per_layer",
    "dlrm_memory",
    "gpu_capacity_bytes",
    "parameter_bytes",
    "transformer_memory",
]

#: bytes in one GiB (``to_gib`` divides by this).
GIB = 2**30

#: Bytes of the fp32 Adam state per parameter. Mixed precision (ZeRO Sec. 3.1): fp32 master
#: weights + momentum + variance = 4 + 4 + 4. Pure fp32 training: momentum + variance only
#: (the weights themselves are the fp32 copy).
_ADAM_MIXED, _ADAM_FP32 = 12, 8

#: Bytes of the fp32 logits per element kept by the cross entropy (K Sec. 4.3: ``4 s b V / t``).
_LOGIT_BYTES = 4

#: Bytes of one dropout-mask element (K Sec. 4.1 counts masks at 1 byte per element).
_MASK_BYTES = 1

#: DLRM embedding optimizer state, fp32, as fbgemm's fused TBE optimizers keep it (same
#: convention as :mod:`traincast.costs.embedding`): per row or per element.
_EMB_OPT = {"sgd": (0, 0), "rowwise_adagrad": (4, 0), "adagrad": (0, 4)}
#: DLRM dense (MLP) optimizer state, fp32 bytes per parameter: SGD none, Adagrad one
#: accumulator, Adam momentum + variance.
_DENSE_OPT = {"sgd": 0, "adagrad": 4, "adam": 8}


# ------------------------------------------------------------------ result


@dataclass
class MemoryBreakdown:
    """Memory of one GPU during a training step, in bytes.

    Attributes:
        weights: parameters held by the GPU (after tensor/pipeline/expert sharding and ZeRO-3).
        gradients: parameter gradients (after ZeRO-2 sharding).
        optimizer: optimizer state (after ZeRO-1 sharding).
        activations: activations stored for the backward pass at the peak of the schedule
            (all in-flight micro-batches), including the embedding / output-layer terms.
        other: transient buffers derivable from the model: for a transformer, the activations
            of one layer re-materialised by recomputation during its backward pass
            (see :func:`transformer_memory`); 0 without recomputation.
        capacity: device memory in bytes, ``None`` when unknown.
    """

    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float = 0.0
    capacity: float | None = None

    @property
    def total(self) -> float:
        """Sum of the modelled terms, bytes."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.other

    @property
    def fits(self) -> bool | None:
        """``total <= capacity``; ``None`` when the capacity is unknown."""
        if self.capacity is None:
            return None
        return self.total <= self.capacity

    def to_gib(self) -> dict[str, Any]:
        """Every byte field, plus ``total``, in GiB (2**30 bytes); ``capacity`` is ``None``
        when unknown and ``fits`` is the verdict of :attr:`fits`."""
        out: dict[str, Any] = {k: getattr(self, k) / GIB for k in
                               ("weights", "gradients", "optimizer", "activations", "other")}
        out["capacity"] = None if self.capacity is None else self.capacity / GIB
        out["total"] = self.total / GIB
        out["fits"] = self.fits
        return out


# ------------------------------------------------------------------ helpers


def gpu_capacity_bytes(name: str) -> float:
    """Device memory of catalog GPU ``name`` (name or alias), bytes.

    ``hbm_gb`` is the capacity as the vendor datasheet quotes it ("80 GB" for the A100 80GB);
    it is converted with 1 GB = 10**9 bytes, the catalog's convention for its other GB figures.
    That is the conservative reading: the CUDA-reported ``totalGlobalMem`` of the recorded
    traces in ``../shared/data`` is slightly above it (A100-SXM4-80GB 84,990,623,744 B,
    V100-SXM2-32GB 34,079,899,648 B, RTX 2080 Ti 11,554,586,624 B), while the binary reading
    (80 GiB = 85,899,345,920 B) would exceed what CUDA reports.

    Raises:
        PlanError: unknown GPU name.
    """
    try:
        return float(load_catalog().gpu(name).hbm_gb) * 1e9
    except ParameterError as exc:
        raise PlanError(str(exc)) from None


def _capacity(capacity: float | str | None) -> float | None:
    if capacity is None:
        return None
    if isinstance(capacity, str):
        return gpu_capacity_bytes(capacity)
    if isinstance(capacity, bool):
        raise PlanError(f"capacity_bytes must be a number of bytes or a GPU name, got {capacity!r}")
    try:
        cap = float(capacity)
    except (TypeError, ValueError):
        raise PlanError(f"capacity_bytes must be a number of bytes or a GPU name, "
                        f"got {capacity!r}") from None
    if not math.isfinite(cap) or cap <= 0:
        raise PlanError(f"capacity_bytes must be > 0, got {capacity!r}")
    return cap


def _activation_elem_bytes(dtype: str) -> int:
    """Bytes of a stored activation element: K assumes 16-bit activations (2 bytes); fp32/tf32
    training stores 4. fp8 counts as 16-bit (activations kept for backward outside the GEMMs --
    layernorm, GeLU, softmax inputs -- stay in 16 bits), an upper bound for fp8 recipes."""
    return 4 if DTYPE_BYTES[dtype] == 4 else 2


def _param_elem_bytes(dtype: str) -> int:
    """Bytes of a stored weight / gradient element: the training dtype; fp8 is a GEMM input
    format, the parameters and gradients stay 16-bit (counted as 2 bytes)."""
    return max(DTYPE_BYTES[dtype], 2)


def _check_model(model: Any) -> TransformerSpec:
    if not isinstance(model, TransformerSpec):
        raise PlanError(f"model must be a TransformerSpec, got {type(model).__name__}")
    return model


def _check_layout(layout: Any) -> Layout:
    if not isinstance(layout, Layout):
        raise PlanError(f"layout must be a Layout, got {type(layout).__name__}")
    return layout


# ------------------------------------------------------------------ activations


def activation_bytes_per_layer(model: TransformerSpec, micro_batch: int, tp: int,
                               sequence_parallel: bool, recompute: str, *,
                               moe: bool = False) -> float:
    """Activation bytes one transformer layer stores for its backward pass, per GPU, for one
    micro-batch.

    With ``s`` = seq, ``b`` = micro_batch, ``h`` = hidden, ``a`` = heads, ``f`` = FFN size,
    ``t`` = tp and 16-bit activations, Korthikanti et al. (MLSys 2023, arXiv:2205.05198),
    Sec. 4.1 counts per layer (dropout masks at 1 byte per element, as the paper does):

    * attention block ``11 s b h + 5 a s^2 b``: QKV input 2sbh, Q and K 4sbh, softmax output
      2as^2b, softmax dropout mask as^2b, dropout output 2as^2b, V 2sbh, output-projection
      input 2sbh, output dropout mask sbh;
    * MLP ``3 s b h + 4 s b f``: first linear input 2sbh, GeLU input 2sbf, second linear input
      2sbf, dropout mask sbh (``19 s b h`` for ``f = 4h``, the paper's case);
    * two layernorm inputs ``4 s b h``.

    The layer total is ``sbh (34 + 5as/h)`` for ``f = 4h``. Of it, Sec. 4.2.1 splits over the
    ``t`` tensor-parallel ranks everything except ``10 s b h`` (layernorm inputs, the QKV and
    first-MLP inputs and the two dropout masks after the row-parallel layers); Sec. 4.2.2
    (sequence parallelism) splits those too; Sec. 5 (selective recomputation) drops the
    ``5 a s^2 b`` attention core. This gives, for ``f = 4h`` (Table 2)::

        no parallelism                        sbh (34 + 5as/h)
        tensor parallel                       sbh (10 + 24/t + 5as/(h t))
        tensor + sequence parallel            sbh/t (34 + 5as/h)
        tensor parallel + selective           sbh (10 + 24/t)
        tensor + sequence parallel + selective  sbh 34/t

    and in general ``sbh (10 + (8 + 4f/h)/t)`` etc. With ``recompute="full"`` only the layer
    input is kept: ``2 s b h`` (Table 2), ``/t`` with sequence parallelism (the checkpointed
    input is then the sequence-sharded tensor).

    fp32/tf32 models store 4-byte activations: every 2-byte term above doubles (masks stay 1
    byte). For an MoE layer (``moe=True``) each token's MLP activations are stored once per
    routed expert: the MLP input and the ``4 s b f`` term are multiplied by ``top_k`` (balanced
    routing assumed; router logits and dispatch buffers are not counted).

    Args:
        model: the transformer (``dtype`` sets the activation element size).
        micro_batch: sequences per micro-batch ``b``.
        tp: tensor-parallel degree ``t``.
        sequence_parallel: Megatron sequence parallelism.
        recompute: ``none``, ``selective`` or ``full``.
        moe: count an MoE layer.

    Returns:
        Bytes per GPU.

    Raises:
        PlanError: non-positive ``micro_batch``/``tp``, ``tp`` not dividing heads, unknown
            ``recompute``.
    """
    model = _check_model(model)
    b, t = _int_arg("micro_batch", micro_batch), _int_arg("tp", tp)
    if model.heads % t:
        raise PlanError(f"tp ({t}) must divide heads ({model.heads})")
    if recompute not in RECOMPUTE:
        raise PlanError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    e = _activation_elem_bytes(model.dtype)
    k = model.top_k if moe and model.experts else 1
    s, h, a, f = model.seq, model.hidden, model.heads, model.ffn_size
    sbh = s * b * h
    if recompute == "full":
        kept = e * sbh
        return kept / t if sequence_parallel else float(kept)
    # K Sec. 4.2.1: not split by tensor parallelism (10 sbh at 2 bytes): the two layernorm
    # inputs (2e), the QKV input (e), the attention output dropout mask (1), the MLP input
    # (e, once per routed expert) and the MLP output dropout mask (1).
    replicated = (3 * e + _MASK_BYTES) * sbh + (k * e + _MASK_BYTES) * sbh
    # split by tensor parallelism: Q, K, V and the output-projection input (4e sbh, 8 sbh at
    # 2 bytes) and the GeLU + second-linear inputs (2e sbf, 16 sbh for f = 4h at 2 bytes)
    split = 4 * e * sbh + k * 2 * e * s * b * f
    # attention core: softmax output (e), its dropout mask (1) and dropout output (e), per head
    core = (2 * e + _MASK_BYTES) * a * s * s * b if recompute == "none" else 0
    if sequence_parallel:
        return (replicated + split + core) / t
    return (replicated * t + split + core) / t


def _int_arg(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise PlanError(f"{name} must be an integer >= 1, got {v!r}")
    return v


def _stage_layers(model: TransformerSpec, layout: Layout, stage: int) -> list[int]:
    """Indices of the layers held by pipeline rank ``stage``: with ``v`` virtual stages, model
    chunks ``stage, stage + pp, ...`` of ``layers / (pp v)`` consecutive layers each
    (Narayanan et al., SC'21, Sec. 2.2.2)."""
    p, v = layout.pp, layout.virtual_stages
    per_chunk = model.layers // (p * v)
    out: list[int] = []
    for j in range(v):
        c = stage + j * p
        out.extend(range(c * per_chunk, (c + 1) * per_chunk))
    return out


def _in_flight(layout: Layout, stage: int) -> float:
    """Micro-batches whose activations rank ``stage`` holds at its peak, in units of the
    rank's whole share of layers.

    * 1F1B: ``min(pp - stage, m)`` -- the warm-up forwards plus one (K Sec. 4.2.3: the first
      stage holds ``pp`` micro-batches).
    * interleaved: Megatron's warm-up of ``2 (pp - stage - 1) + (v - 1) pp`` model-chunk
      forwards plus one, capped by the ``m v`` chunk forwards of a step, divided by ``v``
      chunks. For stage 0 and ``m > pp`` this is ``pp (1 + (pp - 1)/(pp v))``, K Sec. 4.2.3's
      interleaving penalty.
    * GPipe: all ``m`` micro-batches (all forwards before any backward).

    ``m`` is :attr:`Layout.micro_batches` (1 when the layout has no global batch).
    """
    p, m, k = layout.pp, layout.micro_batches, stage
    if layout.schedule == "gpipe":
        return float(m)
    if layout.schedule == "interleaved":
        v = layout.virtual_stages
        chunks = min(2 * (p - k - 1) + (v - 1) * p + 1, m * v)
        return chunks / v
    return float(min(p - k, m))


# ------------------------------------------------------------------ parameters


def _split_params(model: TransformerSpec, layout: Layout, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters held by one GPU of pipeline rank ``stage``.

    Megatron tensor parallelism splits the QKV and output-projection weights, the QKV bias and
    both MLP weights and the first MLP bias over ``tp``; the layernorms (4h), the bias of each
    row-parallel layer (output projection, second MLP linear: h each) and the MoE router (h E)
    are replicated. Per GPU, a dense layer holds ``(4h^2 + 3h + 2hf + f)/tp + 6h``. An MoE
    layer's ``E`` experts are split over ``ep`` and each expert over ``tp``:
    ``(E/ep) ((2hf + f)/tp + h)`` expert parameters. The word embedding ``V h`` is split over
    ``tp`` (vocabulary parallel) and held by the first stage and, as the tied output layer, by
    the last (one copy when ``pp = 1``); the learned positions ``s h`` (replicated over tp) sit
    on the first stage, the final layernorm ``2h`` on the last. Summed over all GPUs of one
    pipeline with ``tp = 1`` this is :attr:`TransformerSpec.params` plus the extra tied copy
    when ``pp > 1``.
    """
    h, f, t = model.hidden, model.ffn_size, layout.tp
    layers = _stage_layers(model, layout, stage)
    n_moe = sum(1 for i in layers if model.is_moe_layer(i))
    n_dense = len(layers) - n_moe
    attn_norms = (4 * h * h + 3 * h) / t + h + 4 * h
    mlp = (2 * h * f + f) / t + h
    dense = n_dense * (attn_norms + mlp) + n_moe * (attn_norms + h * model.experts)
    expert = n_moe * (model.experts / layout.ep) * mlp
    if stage == 0:
        dense += model.vocab * h / t + model.seq * h
    if stage == layout.pp - 1:
        dense += 2 * h
        if layout.pp > 1:
            dense += model.vocab * h / t
    return dense, expert


def parameter_bytes(params: float, dtype: str, dp: int, zero: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of ``params`` parameters on one GPU trained with
    Adam, ZeRO stage ``zero`` over ``dp`` data-parallel ranks.

    Mixed precision (bf16/fp16; fp8 recipes keep 16-bit parameters): 2 bytes weights + 2 bytes
    gradients + 12 bytes fp32 optimizer state (master weights, momentum, variance) = 16 bytes per
    parameter (ZeRO, Rajbhandari et al. SC'20, Sec. 3.1). fp32/tf32: 4 + 4 + 8 (momentum,
    variance; no separate master copy). ZeRO (Sec. 5): stage >= 1 divides the optimizer state,
    stage >= 2 also the gradients, stage 3 (FSDP) also the weights by ``dp``.

    Raises:
        PlanError: unknown dtype, ``dp < 1`` or ``zero`` not in 0-3.
    """
    if dtype not in DTYPE_BYTES:
        raise PlanError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    dp = _int_arg("dp", dp)
    if zero not in (0, 1, 2, 3) or isinstance(zero, bool):
        raise PlanError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    pb = _param_elem_bytes(dtype)
    ob = _ADAM_FP32 if pb == 4 else _ADAM_MIXED
    w = params * pb / (dp if zero >= 3 else 1)
    g = params * pb / (dp if zero >= 2 else 1)
    o = params * ob / (dp if zero >= 1 else 1)
    return w, g, o


# ------------------------------------------------------------------ transformer


def _check_transformer_layout(model: TransformerSpec, layout: Layout) -> None:
    """The layout checks of :func:`~traincast.plan.spec.check_layout` (this module has no
    ``SystemSpec``; a derived system would be held to the limits of typed input)."""
    check_layout(model, layout)


def transformer_memory(model: TransformerSpec, layout: Layout,
                       capacity_bytes: float | str | None = None,
                       stage: int = 0) -> MemoryBreakdown:
    """Per-GPU memory of pipeline rank ``stage`` training ``model`` with ``layout``, bytes.

    * ``weights`` / ``gradients`` / ``optimizer``: the rank's parameters (see the placement rules
      below) times 2 / 2 / 12 bytes (mixed-precision Adam; 4 / 4 / 8 for fp32), ZeRO-sharded
      (:func:`parameter_bytes`; ZeRO, SC'20, Sec. 3.1 and 5). Dense parameters are ZeRO-sharded
      over ``dp``, expert parameters over the expert data-parallel group ``dp / ep``.
      Placement (Megatron): per layer ``(4h^2 + 3h + 2hf + f)/tp + 6h`` (layernorms and the
      row-parallel biases replicated over tp); MoE layers ``(E/ep)((2hf + f)/tp + h)`` expert
      parameters plus a replicated router ``hE``; the vocabulary-parallel embedding ``Vh/tp``
      and the positions ``sh`` on the first stage; the tied output embedding ``Vh/tp`` (when
      ``pp > 1``) and the final layernorm ``2h`` on the last stage.
    * ``activations``: :func:`activation_bytes_per_layer` summed over the rank's layers, times
      the micro-batches in flight at the rank's peak (1F1B ``min(pp - stage, m)``; interleaved
      ``min(2(pp - stage - 1) + (v-1)pp + 1, m v) / v``, which is K Sec. 4.2.3's
      ``pp (1 + (pp-1)/(pp v))`` on stage 0; GPipe ``m``; with ``m`` =
      :attr:`Layout.micro_batches`, 1 when the layout has no global batch -- give
      ``global_batch`` to model a full pipeline). So stage 0 of a full 1F1B pipeline holds
      ``layers * per_layer`` bytes, independent of pp (K Sec. 4.2.3). Plus K Sec. 4.3:
      the first stage's embedding dropout mask ``s b h`` bytes per in-flight micro-batch, and
      the last stage's final layernorm input and output-layer input (``2 s b h`` bytes each at
      16 bits) and the fp32 logits of the vocabulary-parallel cross entropy ``4 s b V / t``,
      for the one micro-batch in flight at the last stage (``m`` with GPipe) -- for ``pp = 1``
      this is K's ``4 sbh/t (1 + V/h)`` with sequence parallelism; without it the two ``2 s b
      h`` terms are replicated over tp (as the layernorm inputs in K Sec. 4.2.1).
    * ``other``: with recomputation, the backward pass of a layer re-materialises what was not
      stored: one layer's ``activation_bytes_per_layer(recompute="none")`` minus what the
      chosen mode keeps (the largest layer of the rank); 0 without recomputation.

    Args:
        model: the transformer.
        layout: the parallel layout.
        capacity_bytes: device memory in bytes, a catalog GPU name (see
            :func:`gpu_capacity_bytes`), or ``None`` (unknown: ``fits`` is ``None``).
        stage: pipeline rank, ``0 <= stage < pp``.

    Raises:
        PlanError: a layout that cannot run the model (as :func:`traincast.plan.spec.check_layout`,
            without the GPU count), a stage out of range, a bad capacity or unknown GPU name.
    """
    model, layout = _check_model(model), _check_layout(layout)
    _check_transformer_layout(model, layout)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < layout.pp:
        raise PlanError(f"stage must be an integer in [0, {layout.pp}), got {stage!r}")
    cap = _capacity(capacity_bytes)

    dense, expert = _split_params(model, layout, stage)
    w, g, o = parameter_bytes(dense, model.dtype, layout.dp, layout.zero)
    if expert:
        ew, eg, eo = parameter_bytes(expert, model.dtype, layout.dp // layout.ep, layout.zero)
        w, g, o = w + ew, g + eg, o + eo

    b, t, sp, rc = layout.micro_batch, layout.tp, layout.sequence_parallel, layout.recompute
    layers = _stage_layers(model, layout, stage)
    n_moe = sum(1 for i in layers if model.is_moe_layer(i))
    n_dense = len(layers) - n_moe
    per_dense = activation_bytes_per_layer(model, b, t, sp, rc)
    per_moe = activation_bytes_per_layer(model, b, t, sp, rc, moe=True) if n_moe else 0.0
    in_flight = _in_flight(layout, stage)
    acts = (n_dense * per_dense + n_moe * per_moe) * in_flight

    e = _activation_elem_bytes(model.dtype)
    sbh = model.seq * b * model.hidden
    shard = t if sp else 1  # sequence parallelism splits the tensors outside the TP regions
    if stage == 0:  # K Sec. 4.3: dropout mask of the input embeddings
        acts += _MASK_BYTES * sbh / shard * in_flight
    if stage == layout.pp - 1:  # K Sec. 4.3: final layernorm + output layer + cross entropy
        last_in_flight = layout.micro_batches if layout.schedule == "gpipe" else 1
        out = 2 * e * sbh / shard + _LOGIT_BYTES * model.seq * b * model.vocab / t
        acts += out * last_in_flight

    other = 0.0
    if rc != "none":
        kinds = [moe for moe, n in ((False, n_dense), (True, n_moe)) if n]
        other = max(activation_bytes_per_layer(model, b, t, sp, "none", moe=moe)
                    - activation_bytes_per_layer(model, b, t, sp, rc, moe=moe) for moe in kinds)
    return MemoryBreakdown(weights=w, gradients=g, optimizer=o, activations=acts, other=other,
                           capacity=cap)


# ------------------------------------------------------------------ DLRM


def _mlp_params(widths: tuple[int, ...], inputs: int) -> int:
    n, prev = 0, inputs
    for w in widths:
        n += prev * w + w
        prev = w
    return n


def dlrm_memory(model: DLRMSpec, layout: Layout, capacity_bytes: float | str | None = None, *,
                optimizer: str = "sgd", dense_optimizer: str = "sgd") -> MemoryBreakdown:
    """Per-GPU memory of the most loaded GPU of a DLRM, bytes (weights, gradients and
    optimizer state only; ``activations`` and ``other`` are 0, not modelled).

    Embedding tables (``rows * dim * dtype bytes`` each) are sharded over all ``G =
    layout.gpus`` GPUs according to ``layout.sharding`` (one value for all tables or one per
    table; empty = ``table``):

    * ``table``: a whole table on one GPU; tables are placed largest first on the least loaded
      GPU (greedy LPT), the reported GPU is the most loaded one;
    * ``row``: ``ceil(rows / G)`` rows on every GPU; ``column``: ``ceil(dim / G)`` columns of
      every row on every GPU;
    * ``data``: replicated on every GPU.

    Model-parallel tables use fbgemm's fused backward (the optimizer update is applied inside
    the backward kernel, no gradient tensor is kept) with ``optimizer`` state in fp32: ``sgd``
    none, ``rowwise_adagrad`` 4 bytes per row, ``adagrad`` 4 bytes per element (as
    :mod:`traincast.costs.embedding`). ``data`` tables and the MLPs are data parallel: weights
    + gradients in the model dtype + ``dense_optimizer`` state (fp32: ``sgd`` 0, ``adagrad`` 4,
    ``adam`` 8 bytes per parameter; plus a 4-byte fp32 master copy for 16-bit models, ZeRO
    Sec. 3.1), ZeRO-sharded over ``dp`` like :func:`parameter_bytes`. MLP parameters: the
    bottom MLP on ``dense_features`` inputs and the top MLP on the dot interaction of
    ``T + 1`` features (``(T+1) T / 2`` pairs, no self-interaction) concatenated with the
    bottom output (Naumov et al. 2019; facebookresearch/dlrm ``dlrm_s_pytorch.py``), weights
    plus biases.

    Raises:
        PlanError: a ``sharding`` tuple whose length is neither 1 nor the number of tables,
            an unknown optimizer, a bad capacity or unknown GPU name.
    """
    if not isinstance(model, DLRMSpec):
        raise PlanError(f"model must be a DLRMSpec, got {type(model).__name__}")
    layout = _check_layout(layout)
    if optimizer not in _EMB_OPT:
        raise PlanError(f"optimizer must be one of {', '.join(_EMB_OPT)}, got {optimizer!r}")
    if dense_optimizer not in _DENSE_OPT:
        raise PlanError(f"dense_optimizer must be one of {', '.join(_DENSE_OPT)}, "
                        f"got {dense_optimizer!r}")
    cap = _capacity(capacity_bytes)
    n_tab = len(model.tables)
    shard = layout.sharding or ("table",)
    if len(shard) == 1:
        shard = shard * n_tab
    if len(shard) != n_tab:
        raise PlanError(f"sharding has {len(shard)} values for {n_tab} tables "
                        f"(give one, or one per table)")
    G = layout.gpus
    eb = DTYPE_BYTES[model.dtype]
    pb = _param_elem_bytes(model.dtype)
    row_state, elem_state = _EMB_OPT[optimizer]
    dense_state = _DENSE_OPT[dense_optimizer] + (4 if pb == 2 else 0)

    weights = [0.0] * G
    optim = [0.0] * G
    replicated = 0.0  # data-parallel parameters (data tables + MLPs)
    whole: list[tuple[float, float]] = []
    for tab, how in zip(model.tables, shard, strict=True):
        if how == "data":
            replicated += tab.rows * tab.dim
            continue
        if how == "table":
            whole.append((tab.rows * tab.dim * eb, tab.rows * (row_state + tab.dim * elem_state)))
            continue
        rows, dim = tab.rows, tab.dim
        if how == "row":
            rows = math.ceil(rows / G)
        else:
            dim = math.ceil(dim / G)
        for r in range(G):
            weights[r] += rows * dim * eb
            optim[r] += rows * (row_state + dim * elem_state)
    heap = [(weights[r] + optim[r], r) for r in range(G)]
    heapq.heapify(heap)
    for wb, ob in sorted(whole, key=lambda x: -(x[0] + x[1])):
        _, r = heapq.heappop(heap)
        weights[r] += wb
        optim[r] += ob
        heapq.heappush(heap, (weights[r] + optim[r], r))
    top = max(range(G), key=lambda r: weights[r] + optim[r])

    d = model.bottom_mlp[-1]
    n_feat = n_tab + 1
    replicated += _mlp_params(model.bottom_mlp, model.dense_features)
    replicated += _mlp_params(model.top_mlp, n_feat * (n_feat - 1) // 2 + d)
    z, dp = layout.zero, layout.dp
    w = weights[top] + replicated * pb / (dp if z >= 3 else 1)
    g = replicated * pb / (dp if z >= 2 else 1)
    o = optim[top] + replicated * dense_state / (dp if z >= 1 else 1)
    return MemoryBreakdown(weights=w, gradients=g, optimizer=o, activations=0.0, other=0.0,
                           capacity=cap)


@functools.lru_cache(maxsize=1 << 16)
def transformer_memory_cached(model: TransformerSpec, layout: Layout,
                              capacity_bytes: float | str | None = None,
                              stage: int = 0) -> MemoryBreakdown:
    """:func:`transformer_memory`, memoised (a search asks each layout twice: to prune it,
    then for its result). The breakdown returned is shared: do not modify it."""
    return transformer_memory(model, layout, capacity_bytes, stage)
