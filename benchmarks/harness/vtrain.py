"""The vTrain measurements (Bang et al., "vTrain", MICRO'24; VIA-Research/vTrain) as plan cases.

``vtrain_ground_truth_{single,multi}_a100.csv`` (``../shared/data/measurements/vtrain``) give
measured iteration times of GPT training with Megatron-DeepSpeed on A100s. The run settings
not in the CSV are vTrain's validation configs (``config/validation/{single,multi}/*.json``
at commit f8dda84): ``use_checkpoint: true`` (full activation recomputation),
``use_gradient_bucket: false`` (gradients all-reduced after the backward pass, not
overlapped), ``pipeline_scheduling: 1f1b``, 8 GPUs per node, intra-node 150 GB/s and
inter-node 800 Gb/s per node. Vocabulary: Megatron's GPT-2 BPE (50,257 tokens) padded to
51,200 (a multiple of ``128 * tp`` for tp <= 8, Megatron's ``--make-vocab-size-divisible-by``);
fp16 mixed precision (A100 fp16 and bf16 peaks are equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from traincast.plan.spec import Layout, PlanError, SystemSpec, TransformerSpec

VOCAB = 51200
GPUS_PER_NODE = 8
#: vTrain's configs: intra_node_bandwidth 150 (GB/s, one direction per GPU) -> Gb/s
INTRA_GBPS = 150 * 8.0
#: inter_node_bandwidth 800 (Gb/s per node)
INTER_GBPS = 800.0
GPU = "A100-SXM4-80GB"
_COLS = ("num_gpus", "global_batch", "micro_batch", "hidden_size", "attention_heads",
         "num_layers", "seq_len", "tp", "dp", "pp", "iter_time_ms")


@dataclass(frozen=True)
class Case:
    """One measured configuration."""

    model: TransformerSpec
    system: SystemSpec
    layout: Layout
    measured_s: float
    label: str


def read_vtrain(path: str | Path) -> pd.DataFrame:
    """Read a vTrain ground-truth CSV (first line a ``# source`` comment).

    Raises:
        PlanError: unreadable file or missing columns (the message names the file).
    """
    p = Path(path)
    try:
        df = pd.read_csv(p, comment="#")
    except (OSError, ValueError) as exc:
        raise PlanError(f"{p}: cannot read vTrain CSV: {exc}") from None
    missing = [c for c in _COLS if c not in df.columns]
    if missing:
        raise PlanError(f"{p}: missing columns {', '.join(missing)}")
    return df


def cases(df: pd.DataFrame, recompute: str = "full") -> list[Case]:
    """Plan cases of a vTrain table (rows the planner cannot express raise PlanError)."""
    out = []
    for r in df.itertuples(index=False):
        model = TransformerSpec(layers=int(r.num_layers), hidden=int(r.hidden_size),
                                heads=int(r.attention_heads), seq=int(r.seq_len),
                                vocab=VOCAB, dtype="fp16", name="gpt")
        system = SystemSpec(gpu=GPU, gpus=int(r.num_gpus), gpus_per_node=GPUS_PER_NODE,
                            intra_node_gbps=INTRA_GBPS, inter_node_gbps=INTER_GBPS,
                            node="vTrain A100 cluster")
        layout = Layout(tp=int(r.tp), pp=int(r.pp), dp=int(r.dp),
                        micro_batch=int(r.micro_batch), global_batch=int(r.global_batch),
                        recompute=recompute, overlap_grad_reduce=False)
        label = (f"{model.layers}L h{model.hidden} s{model.seq} gpus{system.gpus} "
                 f"{layout.describe()} gb{layout.global_batch}")
        out.append(Case(model, system, layout, float(r.iter_time_ms) / 1e3, label))
    return out
