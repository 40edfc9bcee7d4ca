"""What the planner is asked about: a workload, a system and a parallel layout.

Plain frozen dataclasses with validation; every check raises :class:`PlanError` (a
:class:`~traincast.errors.ParameterError`) with one line naming the bad field. Sizes are
counts (layers, hidden units, tokens) or bytes; bandwidths are Gb/s (gigabits per second, as
network links are quoted and as ``--what-if inter_node_gbps`` takes them).

Terms follow Megatron-LM (Shoeybi et al. 2019; Narayanan et al., SC'21) and Korthikanti et
al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023): ``tp`` tensor
parallel, ``pp`` pipeline parallel, ``dp`` data parallel degree; a *micro-batch* of ``b``
sequences; a global batch of ``B = b * dp * m`` sequences (``m`` micro-batches per step, i.e.
gradient accumulation steps); ``v`` virtual stages (model chunks) per device in the
interleaved schedule.

Valid ranges (:data:`LIMITS`; checked here, so the CLI and the API refuse the same values):

=====================================================  =======================================
field                                                  range
=====================================================  =======================================
layers, moe_every                                      1 .. 4,096
hidden                                                 1 .. 2^20
heads, experts (0 ..), dim (DLRM)                      1 .. 2^16
seq, vocab                                             1 .. 2^24
ffn                                                    1 .. 2^22
top_k                                                  1 .. 1,024
gpus, tp, pp, dp, ep, micro_batch, dense_features,     1 .. 2^20
MLP widths
gpus_per_node, virtual_stages                          1 .. 1,024
global_batch, DLRM batch                               1 .. 2^31
DLRM tables                                            1 .. 100,000 tables of 1 .. 2^40 rows
pooling                                                > 0 .. 10^6
intra_node_gbps, inter_node_gbps                       10^-3 .. 10^6 Gb/s (1 Mb/s .. 1 Pb/s)
layers x micro-batches of one step                     <= 2^21 (the size of the simulated graph)
=====================================================  =======================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from traincast.errors import ParameterError


class PlanError(ParameterError):
    """A workload, system or layout that cannot be planned (one line naming the field)."""


RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "interleaved", "gpipe")
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
SHARDINGS = ("table", "row", "column", "data")


#: largest value of each field (module docstring); the smallest is 1 (0 where noted)
LIMITS: dict[str, float] = {
    "layers": 4096, "moe_every": 4096, "hidden": 2**20, "heads": 2**16, "experts": 2**16,
    "dim": 2**16, "seq": 2**24, "vocab": 2**24, "ffn": 2**22, "top_k": 1024,
    "gpus": 2**20, "tp": 2**20, "pp": 2**20, "dp": 2**20, "ep": 2**20, "micro_batch": 2**20,
    "dense_features": 2**20, "width": 2**20, "gpus_per_node": 1024, "virtual_stages": 1024,
    "global_batch": 2**31, "batch": 2**31, "tables": 100_000, "rows": 2**40, "pooling": 1e6,
    "gbps_min": 1e-3, "gbps": 1e6, "layer_passes": 2**21,
}


def _limit(name: str) -> float | None:
    for key in reversed(name.split()):  # "table rows" -> rows, "bottom_mlp width" -> width
        if key in LIMITS:
            return LIMITS[key]
    return None


def _pos_int(name: str, v: Any, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or (
            isinstance(v, float) and not math.isfinite(v)) or v != int(v) or int(v) < minimum:
        raise PlanError(f"{name} must be an integer >= {minimum}, got {v!r}")
    top = _limit(name)
    if top is not None and int(v) > top:
        raise PlanError(f"{name} must be at most {int(top):,}, got {v!r}")
    return int(v)


def _pos_float(name: str, v: Any, allow_zero: bool = False) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        raise PlanError(f"{name} must be a number, got {v!r}") from None
    if not math.isfinite(f) or f < 0 or (f == 0 and not allow_zero):
        raise PlanError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")
    if name.endswith("_gbps") and not LIMITS["gbps_min"] <= f <= LIMITS["gbps"]:
        raise PlanError(f"{name} must be between {LIMITS['gbps_min']:g} and "
                        f"{LIMITS['gbps']:g} Gb/s, got {v!r}")
    top = _limit(name)
    if top is not None and f > top:
        raise PlanError(f"{name} must be at most {top:g}, got {v!r}")
    return f


# ------------------------------------------------------------------ workloads


@dataclass(frozen=True)
class TransformerSpec:
    """A GPT-style decoder-only transformer.

    Attributes:
        layers: transformer layers ``L``.
        hidden: hidden size ``h``.
        heads: attention heads ``a`` (must divide ``hidden``).
        seq: sequence length ``s`` (tokens).
        vocab: vocabulary size ``V``.
        ffn: feed-forward inner size (default ``4 h``).
        experts: MoE experts per MoE layer (0 = dense model).
        top_k: experts each token is routed to.
        moe_every: every ``moe_every``-th layer is an MoE layer (1 = all).
        dtype: training dtype of the matmuls (``bf16``, ``fp16``, ``fp32``...).
        name: label.
    """

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int = 51200
    ffn: int | None = None
    experts: int = 0
    top_k: int = 1
    moe_every: int = 1
    dtype: str = "bf16"
    name: str = "gpt"

    def __post_init__(self) -> None:
        for k in ("layers", "hidden", "heads", "seq", "vocab"):
            _pos_int(k, getattr(self, k))
        if self.ffn is not None:
            _pos_int("ffn", self.ffn)
        _pos_int("experts", self.experts, 0)
        _pos_int("top_k", self.top_k)
        _pos_int("moe_every", self.moe_every)
        if self.hidden % self.heads:
            raise PlanError(f"heads ({self.heads}) must divide hidden ({self.hidden})")
        if self.experts and self.top_k > self.experts:
            raise PlanError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        if self.dtype not in DTYPE_BYTES:
            raise PlanError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")

    @property
    def ffn_size(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def moe_layers(self) -> int:
        """Number of MoE layers (layers ``moe_every-1, 2*moe_every-1, ...``)."""
        return self.layers // self.moe_every if self.experts else 0

    def layer_params(self, moe: bool = False) -> int:
        """Parameters of one layer: QKV + output projection with biases, two layernorms, and
        the MLP (one per expert for an MoE layer, plus the router)."""
        h, f = self.hidden, self.ffn_size
        attn = 4 * h * h + 4 * h
        mlp = 2 * h * f + f + h
        norms = 4 * h
        if moe:
            return attn + norms + self.experts * mlp + h * self.experts
        return attn + norms + mlp

    @property
    def embedding_params(self) -> int:
        """Token embedding (tied with the LM head) + learned positions."""
        return self.vocab * self.hidden + self.seq * self.hidden

    @property
    def params(self) -> int:
        """Total parameters (embeddings tied with the output layer, final layernorm)."""
        n_moe = self.moe_layers
        return (n_moe * self.layer_params(True) + (self.layers - n_moe) * self.layer_params()
                + self.embedding_params + 2 * self.hidden)

    def is_moe_layer(self, i: int) -> bool:
        return bool(self.experts) and (i + 1) % self.moe_every == 0


@dataclass(frozen=True)
class EmbeddingTable:
    """One DLRM embedding table: ``rows`` x ``dim``, ``pooling`` lookups per sample (the
    pooling factor, mean indices per bag)."""

    rows: int
    dim: int
    pooling: float = 1.0

    def __post_init__(self) -> None:
        _pos_int("table rows", self.rows)
        _pos_int("table dim", self.dim)
        _pos_float("table pooling factor", self.pooling)


@dataclass(frozen=True)
class DLRMSpec:
    """A DLRM (Naumov et al. 2019): embedding tables, bottom MLP over the dense features,
    pairwise dot interaction, top MLP.

    Attributes:
        tables: the embedding tables.
        dense_features: inputs of the bottom MLP.
        bottom_mlp: layer widths of the bottom MLP (last = embedding dim).
        top_mlp: layer widths of the top MLP (last usually 1).
        dtype: dtype of the MLPs and embeddings.
        index_distribution: ``uniform`` or ``zipf`` (for unique-row estimates).
        zipf_alpha: exponent when ``zipf``.
    """

    tables: tuple[EmbeddingTable, ...]
    dense_features: int = 13
    bottom_mlp: tuple[int, ...] = (512, 256, 64)
    top_mlp: tuple[int, ...] = (512, 256, 1)
    dtype: str = "fp32"
    index_distribution: str = "uniform"
    zipf_alpha: float | None = None
    name: str = "dlrm"

    def __post_init__(self) -> None:
        if not self.tables:
            raise PlanError("a DLRM needs at least one embedding table")
        if len(self.tables) > LIMITS["tables"]:
            raise PlanError(f"a DLRM of {len(self.tables):,} tables; at most "
                            f"{int(LIMITS['tables']):,}")
        _pos_int("dense_features", self.dense_features)
        for k in ("bottom_mlp", "top_mlp"):
            widths = getattr(self, k)
            if not widths:
                raise PlanError(f"{k} needs at least one layer")
            for w in widths:
                _pos_int(f"{k} width", w)
        if self.dtype not in DTYPE_BYTES:
            raise PlanError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.index_distribution not in ("uniform", "zipf"):
            raise PlanError("index_distribution must be uniform or zipf")


# ------------------------------------------------------------------ system


@dataclass(frozen=True)
class SystemSpec:
    """GPUs and network.

    Attributes:
        gpu: catalog GPU name (``A100-SXM4-80GB``, ``H100``...).
        gpus: total GPUs.
        gpus_per_node: GPUs sharing the intra-node link.
        intra_node_gbps: per-GPU intra-node bandwidth per direction, Gb/s.
        inter_node_gbps: per-node inter-node bandwidth per direction, Gb/s (all NICs).
        node: catalog node preset the numbers came from (label only).
    """

    gpu: str
    gpus: int
    gpus_per_node: int = 8
    intra_node_gbps: float = 2400.0
    inter_node_gbps: float = 1600.0
    node: str = ""

    def __post_init__(self) -> None:
        _pos_int("gpus", self.gpus)
        _pos_int("gpus_per_node", self.gpus_per_node)
        _pos_float("intra_node_gbps", self.intra_node_gbps)
        _pos_float("inter_node_gbps", self.inter_node_gbps)
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise PlanError(f"gpus ({self.gpus}) is not a whole number of nodes of "
                            f"{self.gpus_per_node} GPUs")

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    @classmethod
    def from_catalog(cls, gpus: int, node: str | None = None, gpu: str | None = None,
                     **overrides: Any) -> SystemSpec:
        """A system of ``gpus`` GPUs built from a catalog node preset (``DGX-A100``...) and/or
        GPU. Link numbers come from the preset's links (NVLink per GPU, NICs per node);
        ``overrides`` replace any field.

        Raises:
            PlanError: unknown node or GPU name.
        """
        # lazy: the hardware catalog (yaml) would add ~13 ms to every CLI start, which loads
        # this module (traincast.cli.plan)
        from traincast.costs.hardware import load_catalog

        cat = load_catalog()
        fields: dict[str, Any] = {"gpus": gpus}
        try:
            if node:
                nd = cat.node(node)
                fields.update(gpu=nd.gpu.name, gpus_per_node=nd.gpus_per_node,
                              intra_node_gbps=nd.intra_gbps_per_gpu * 8.0,
                              inter_node_gbps=nd.inter_gbps_per_node * 8.0, node=nd.name)
            if gpu:
                fields["gpu"] = cat.gpu(gpu).name
        except KeyError as exc:
            raise PlanError(str(exc).strip("'\"")) from None
        except ParameterError as exc:
            raise PlanError(str(exc)) from None
        if "gpu" not in fields and "gpu" not in overrides:
            raise PlanError("give a GPU (--gpu) or a node preset (--node)")
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**fields)


# ------------------------------------------------------------------ layout


@dataclass(frozen=True)
class Layout:
    """A parallel layout of one training step.

    Attributes:
        tp, pp, dp: tensor, pipeline and data parallel degrees (``tp * pp * dp`` GPUs;
            with MoE, ``ep`` divides ``dp``: experts are sharded over ``ep`` of the DP ranks).
        micro_batch: sequences (samples) per micro-batch ``b``.
        global_batch: sequences (samples) per step ``B`` (a multiple of ``b * dp``).
        recompute: activation recomputation ``none``, ``selective`` (attention core, as in
            Korthikanti et al. Sec. 4.2) or ``full`` (whole layers).
        sequence_parallel: Megatron sequence parallelism (needs ``tp > 1`` to matter).
        zero: ZeRO stage 0-3 over the DP group (3 = FSDP full sharding).
        schedule: pipeline schedule ``1f1b``, ``interleaved`` (needs ``virtual_stages >
            1``) or ``gpipe``.
        virtual_stages: model chunks per pipeline rank ``v``.
        ep: expert-parallel degree.
        sharding: DLRM only: per-table sharding (``table``/``row``/``column``/``data``); one
            value for all tables or one per table.
        overlap_grad_reduce: all-reduce gradient buckets while the backward pass runs
            (PyTorch DDP, Megatron ``--overlap-grad-reduce``); False: after it ends.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    global_batch: int | None = None
    recompute: str = "none"
    sequence_parallel: bool = False
    zero: int = 0
    schedule: str = "1f1b"
    virtual_stages: int = 1
    ep: int = 1
    sharding: tuple[str, ...] = field(default=())
    overlap_grad_reduce: bool = True

    def __post_init__(self) -> None:
        for k in ("tp", "pp", "dp", "micro_batch", "virtual_stages", "ep"):
            _pos_int(k, getattr(self, k))
        if self.global_batch is not None:
            _pos_int("global_batch", self.global_batch)
            if self.global_batch % (self.micro_batch * self.dp):
                raise PlanError(f"global_batch ({self.global_batch}) must be a multiple of "
                                f"micro_batch * dp ({self.micro_batch * self.dp})")
        if self.recompute not in RECOMPUTE:
            raise PlanError(f"recompute must be one of {', '.join(RECOMPUTE)}, "
                            f"got {self.recompute!r}")
        if self.schedule not in SCHEDULES:
            raise PlanError(f"schedule must be one of {', '.join(SCHEDULES)}, "
                            f"got {self.schedule!r}")
        if self.zero not in (0, 1, 2, 3):
            raise PlanError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.schedule == "interleaved" and self.virtual_stages < 2:
            raise PlanError("the interleaved schedule needs virtual_stages >= 2")
        if self.schedule != "interleaved" and self.virtual_stages != 1:
            raise PlanError("virtual_stages > 1 needs --schedule interleaved")
        if self.dp % self.ep:
            raise PlanError(f"ep ({self.ep}) must divide dp ({self.dp})")
        for s in self.sharding:
            if s not in SHARDINGS:
                raise PlanError(f"sharding must be one of {', '.join(SHARDINGS)}, got {s!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step per pipeline ``m = B / (b * dp)`` (1 without a global
        batch)."""
        if self.global_batch is None:
            return 1
        return self.global_batch // (self.micro_batch * self.dp)

    def replace(self, **kw: Any) -> Layout:
        return replace(self, **kw)

    def describe(self) -> str:
        parts = [f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}", f"mb={self.micro_batch}"]
        if self.schedule == "interleaved":
            parts.append(f"v={self.virtual_stages}")
        if self.recompute != "none":
            parts.append(f"recompute={self.recompute}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.zero:
            parts.append(f"zero={self.zero}")
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        return " ".join(parts)


def check_fit(model: TransformerSpec, system: SystemSpec, layout: Layout) -> None:
    """Raise :class:`PlanError` unless ``layout`` can run ``model`` on ``system``:
    ``tp*pp*dp == gpus``, ``tp`` divides heads (and the FFN size), ``pp * v`` divides layers,
    ``m`` (micro-batches) >= ``pp`` for interleaving, experts divisible by ``ep``."""
    if layout.gpus != system.gpus:
        raise PlanError(f"tp*pp*dp = {layout.tp}*{layout.pp}*{layout.dp} = {layout.gpus} "
                        f"does not equal the {system.gpus} GPUs")
    check_layout(model, layout)


def check_layout(model: TransformerSpec, layout: Layout) -> None:
    """Raise :class:`PlanError` unless ``layout`` can run ``model`` whatever the system:
    :func:`check_fit` without the GPU count (``tp`` divides heads and the FFN size, ``pp * v``
    divides layers, interleaving needs ``m`` a multiple of ``pp``, sequence parallelism needs
    ``tp | seq``, ``ep`` divides experts, the layer passes stay within the simulated limit)."""
    if model.heads % layout.tp:
        raise PlanError(f"tp ({layout.tp}) must divide heads ({model.heads})")
    if model.ffn_size % layout.tp:
        raise PlanError(f"tp ({layout.tp}) must divide the FFN size ({model.ffn_size})")
    chunks = layout.pp * layout.virtual_stages
    if model.layers % chunks:
        raise PlanError(f"pp * virtual_stages ({chunks}) must divide layers ({model.layers})")
    if layout.schedule == "interleaved" and layout.micro_batches % layout.pp:
        raise PlanError(f"the interleaved schedule needs micro-batches "
                        f"({layout.micro_batches}) to be a multiple of pp ({layout.pp})")
    if layout.sequence_parallel and model.seq % layout.tp:
        raise PlanError(f"sequence parallelism needs tp ({layout.tp}) to divide seq "
                        f"({model.seq})")
    if model.experts and model.experts % layout.ep:
        raise PlanError(f"ep ({layout.ep}) must divide experts ({model.experts})")
    passes = model.layers * layout.micro_batches
    if passes > LIMITS["layer_passes"]:
        raise PlanError(f"layers x micro-batches = {passes:,} layer passes per step; at most "
                        f"{int(LIMITS['layer_passes']):,} are simulated (fewer micro-batches: a "
                        "larger --micro-batch)")
    if layout.ep > 1 and not model.experts:
        raise PlanError("ep > 1 needs an MoE model (experts > 0)")
