"""Operator families (``op_family`` column) from event names.

The families follow the per-op model split of Lin et al., "Towards Universal Performance
Modeling for ML Training on Multi-GPU Platforms" (arXiv 2404.12674, Sec. 4): GEMM, conv,
embedding lookup, elementwise, plus attention, normalisation, optimizer, communication and
memory copies. Rules are ordered regular expressions over lower-cased names; the first match
wins. They are applied once per distinct name (the dictionary), not per event.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from traincast.trace.schema import OP_FAMILIES

_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("comm", re.compile(
        r"nccl|rccl|gloo|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|"
        r"broadcast|record_param_comms|c10d::|send|recv|barrier"
    )),
    ("memcpy", re.compile(r"memcpy|memset|aten::copy_|aten::to\b|aten::_to_copy|cudamemcpy")),
    ("attention", re.compile(
        r"flash|fmha|attention|sdpa|scaled_dot_product|softmax_warp|mha"
    )),
    ("embedding", re.compile(
        r"embedding|embbag|emb_bag|split_embedding|lookup|index_select|gather_kernel|"
        r"indexing_backward|embedding_backward"
    )),
    ("conv", re.compile(r"conv|winograd|implicit_gemm|implicit_convolve|cudnn::.*(fprop|dgrad|wgrad)")),
    ("gemm", re.compile(
        r"gemm|gemv|matmul|aten::mm\b|aten::bmm|aten::addmm|aten::linear|aten::baddbmm|"
        r"cutlass|xmma|cublas|sgemm|hgemm|wgmma|_mm\b|sm\d+_.*(tn|nt|nn|tt)|ampere_.*(tn|nt|nn)|"
        r"volta_.*(tn|nt|nn)|turing_.*(tn|nt|nn)|nvjet"
    )),
    ("norm", re.compile(r"norm|bn_fw|bn_bw|batch_norm|layer_norm|rms")),
    ("optimizer", re.compile(
        r"optim|adam|sgd|multi_tensor_apply|fused_adam|(?<![a-z])lamb(?![a-z])|adagrad|zero_grad|clip_grad"
    )),
    ("elementwise", re.compile(
        r"elementwise|vectorized|unrolled|pointwise|aten::(add|mul|sub|div|relu|gelu|silu|"
        r"sigmoid|tanh|exp|log|pow|sqrt|rsqrt|neg|abs|clamp|where|fill_|zero_|cat|"
        r"threshold|dropout|masked_fill|sum|mean|softmax|_log_softmax|nll_loss|mse_loss)|"
        r"reduce_kernel|fill|activation|relu|gelu|triton_(poi|red|per)"
    )),
]

_FAMILY_INDEX = {f: i for i, f in enumerate(OP_FAMILIES)}


@functools.lru_cache(maxsize=1 << 16)
def classify(name: str) -> str:
    """Return the op family of one event name (``"other"`` when no rule matches).

    Memoised: the ranks of one job repeat the same few hundred names, so a whole job costs
    the regexes once per distinct name, not once per name per file."""
    low = name.lower()
    for fam, rx in _RULES:
        if rx.search(low):
            return fam
    return "other"


def classify_families(names: list[str]) -> np.ndarray:
    """Family index (into :data:`~traincast.trace.schema.OP_FAMILIES`) for each name.

    Returns an int32 array of ``len(names)``.
    """
    return np.fromiter(
        (_FAMILY_INDEX[classify(n)] for n in names), dtype=np.int32, count=len(names)
    )
