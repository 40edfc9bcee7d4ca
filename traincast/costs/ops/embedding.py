"""Embedding lookups and gathers (``embedding``, ``embedding_bag`` and their backwards,
``index_select``, ``gather``, fbgemm's table-batched ``*_embedding_codegen_lookup*``): bytes
of the rows read and written, one FLOP per pooled element.
"""

from __future__ import annotations

from typing import Any

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Unknown, Work


def _embedding(name: str, args: list[Arg], concrete: Any) -> Work:
    """``embedding(weight[V, D], indices)``: gather ``n`` rows: bytes ``2·n·D·s`` + indices."""
    w, idx = ops.tensor(args, 0), ops.tensor(args, 1)
    if len(w.shape) != 2:
        raise Unknown
    n, d = idx.numel, w.shape[1]
    size = ops.size_of(w, 4)
    return Work(0.0, 2.0 * n * d * size + ops.nbytes([idx], 8), "embedding", True, w.dtype)


def _embedding_bag(name: str, args: list[Arg], concrete: Any) -> Work:
    """``embedding_bag(weight[V, D], indices, offsets, ..., per_sample_weights, include_last_offset)``.

    ``N`` looked-up rows pooled into ``B`` bags (pooling factor ``L = N/B``): 1-D indices with
    ``offsets[B]`` (``B-1`` bags with ``include_last_offset``), or 2-D indices ``[B, L]``.
    FLOPs ``N·D`` (the pooling sum; ``2·N·D`` with per-sample weights); bytes: the pooled rows
    ``N·D·s`` + output ``B·D·s`` + indices, offsets (and weights).
    """
    w, idx = ops.tensor(args, 0), ops.tensor(args, 1)
    if len(w.shape) != 2:
        raise Unknown
    d = w.shape[1]
    offsets = ops.opt_tensor(args, 2)
    n = idx.numel
    if len(idx.shape) == 2:
        bags = idx.shape[0]
    elif offsets is not None:
        bags = offsets.numel - (1 if ops.as_bool(ops.concrete_at(concrete, 7), False) else 0)
    else:
        raise Unknown
    bags = max(bags, 1)
    psw = ops.opt_tensor(args, 6)
    size = ops.size_of(w, 4)
    flops = n * d * (2.0 if psw is not None else 1.0)
    extra = [t for t in (idx, offsets, psw) if t is not None]
    nbytes = n * d * size + bags * d * size + ops.nbytes(extra, 8)
    return Work(float(flops), float(nbytes), "embedding", True, w.dtype)


def _embedding_backward(name: str, args: list[Arg], concrete: Any) -> Work:
    """Embedding (bag) backward ``(grad[..., D], indices, ...)``: scatter-add ``n`` rows.

    FLOPs ``n·D``; bytes: read ``n`` gradient rows, write ``n`` weight-gradient rows, indices.
    """
    g, idx = ops.tensor(args, 0), ops.tensor(args, 1)
    if not g.shape:
        raise Unknown
    d = g.shape[-1]
    n = idx.numel
    size = ops.size_of(g, 4)
    return Work(float(n * d), 2.0 * n * d * size + ops.nbytes([idx], 8), "embedding", True, g.dtype)


def _index_select(name: str, args: list[Arg], concrete: Any) -> Work:
    """``index_select(self, dim, index[n])``: copy ``n`` slices (dim from ``concrete``, else 0)."""
    x, idx = ops.tensor(args, 0), ops.tensor(args, 2)
    dim = ops.concrete_at(concrete, 1)
    dim = int(dim) if isinstance(dim, (int, float)) else 0
    if not x.shape:
        raise Unknown
    dim = dim % len(x.shape)
    row = x.numel // max(x.shape[dim], 1)
    size = ops.size_of(x, 4)
    return Work(0.0, 2.0 * idx.numel * row * size + ops.nbytes([idx], 8), "embedding", True,
                x.dtype)


def _gather(name: str, args: list[Arg], concrete: Any) -> Work:
    """``gather(self, dim, index)``: read and write ``numel(index)`` elements + the index."""
    x, idx = ops.tensor(args, 0), ops.tensor(args, 2)
    size = ops.size_of(x, 4)
    return Work(0.0, 2.0 * idx.numel * size + ops.nbytes([idx], 8), "embedding", True, x.dtype)


def _fbgemm_lookup(name: str, args: list[Arg], concrete: Any) -> Work:
    """fbgemm TBE ``split_embedding_codegen_lookup_*_function`` (and the dense variant).

    Arguments as in fbgemm_gpu's generated lookup: ``dev_weights`` (1), ``D_offsets`` (6,
    ``T+1`` entries), ``total_D`` (7, a scalar), ``indices`` (11), ``offsets`` (12, ``B·T+1``).
    The dimension needs ``total_D``, which only ``concrete`` carries; without it the op is
    unknown. Pooled embedding bag: ``N`` rows of mean width ``D = total_D/T``: FLOPs ``N·D``,
    bytes ``N·D·s`` (rows) + ``B·total_D·s`` (output) + indices and offsets.
    """
    total_d = ops.concrete_at(concrete, 7)
    if not isinstance(total_d, (int, float)) or total_d <= 0:
        raise Unknown
    w, d_off = ops.tensor(args, 1), ops.tensor(args, 6)
    idx, off = ops.tensor(args, 11), ops.tensor(args, 12)
    tables = max(d_off.numel - 1, 1)
    d = float(total_d) / tables
    bags = max(off.numel - 1, 1) / tables
    size = ops.size_of(w, 4)
    n = idx.numel
    nbytes = n * d * size + bags * float(total_d) * size + ops.nbytes([idx, off], 8)
    return Work(float(n * d), float(nbytes), "embedding", True, w.dtype)


HANDLERS: dict[str, Handler] = {
    "embedding": _embedding,
    "embedding_bag": _embedding_bag, "_embedding_bag": _embedding_bag,
    "_embedding_bag_forward_only": _embedding_bag,
    "embedding_backward": _embedding_backward, "embedding_dense_backward": _embedding_backward,
    "_embedding_bag_backward": _embedding_backward,
    "_embedding_bag_dense_backward": _embedding_backward,
    "embedding_sparse_backward": _embedding_backward,
    "index_select": _index_select, "gather": _gather,
}

#: fbgemm ops (namespaces ``fbgemm::``/``fb::``) handled, by name prefix.
FBGEMM_PREFIXES = ("split_embedding_codegen_lookup", "dense_embedding_codegen_lookup")
fbgemm_lookup = _fbgemm_lookup
