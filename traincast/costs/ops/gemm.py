"""GEMM-like ops (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``,
``_scaled_mm``, ``mv``, ``dot``): ``2·M·N·K`` FLOPs (one multiply-add = 2 FLOPs; PyTorch
``torch/utils/flop_counter.py`` ``mm_flop``), ``M·N`` more for a bias; bytes = inputs read +
output written once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Tensor, Unknown, Work


def _gemm(flops: float, ins: list[Tensor], out_numel: float, args: list[Arg]) -> Work:
    size, dtype = ops.main_size_dtype(args)
    return Work(float(flops), ops.nbytes(ins, size) + out_numel * size, "gemm", True, dtype)


def _dims(a: Tensor, b: Tensor, rank: int) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of ``a[(B,) M, K] @ b[(B,) K, N]``, both ``rank``-D (2 or 3; batch 1
    for 2-D); :class:`Unknown` when the shapes do not fit."""
    if len(a.shape) != rank or len(b.shape) != rank or a.shape[-1] != b.shape[-2]:
        raise Unknown
    return (a.shape[0] if rank == 3 else 1), a.shape[-2], b.shape[-1], a.shape[-1]


def _mm(name: str, args: list[Arg], concrete: Any) -> Work:
    a, b = ops.tensor(args, 0), ops.tensor(args, 1)
    _, m, n, k = _dims(a, b, 2)
    return _gemm(2.0 * m * n * k, [a, b], m * n, args)


def _addmm(name: str, args: list[Arg], concrete: Any) -> Work:
    """``addmm(bias, a, b)``: ``2MNK`` + ``MN`` for adding the (broadcast) bias."""
    bias, a, b = ops.tensor(args, 0), ops.tensor(args, 1), ops.tensor(args, 2)
    _, m, n, k = _dims(a, b, 2)
    return _gemm(2.0 * m * n * k + m * n, [bias, a, b], m * n, args)


def _bmm(name: str, args: list[Arg], concrete: Any) -> Work:
    a, b = ops.tensor(args, 0), ops.tensor(args, 1)
    bs, m, n, k = _dims(a, b, 3)
    return _gemm(2.0 * bs * m * n * k, [a, b], bs * m * n, args)


def _baddbmm(name: str, args: list[Arg], concrete: Any) -> Work:
    bias, a, b = ops.tensor(args, 0), ops.tensor(args, 1), ops.tensor(args, 2)
    bs, m, n, k = _dims(a, b, 3)
    return _gemm(2.0 * bs * m * n * k + bs * m * n, [bias, a, b], bs * m * n, args)


def _matmul_dims(sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of ``torch.matmul`` with broadcasting (1-D operands promoted)."""
    if not sa or not sb:
        raise Unknown
    a = (1,) + sa if len(sa) == 1 else sa
    b = sb + (1,) if len(sb) == 1 else sb
    if a[-1] != b[-2]:
        raise Unknown
    try:
        batch = math.prod(np.broadcast_shapes(a[:-2], b[:-2]))
    except ValueError:
        raise Unknown from None
    return batch, a[-2], b[-1], a[-1]


def _matmul(name: str, args: list[Arg], concrete: Any) -> Work:
    a, b = ops.tensor(args, 0), ops.tensor(args, 1)
    bs, m, n, k = _matmul_dims(a.shape, b.shape)
    return _gemm(2.0 * bs * m * n * k, [a, b], bs * m * n, args)


def _linear(name: str, args: list[Arg], concrete: Any) -> Work:
    """``linear(x[..., K], w[N, K], bias[N]?)``: ``2·M·N·K`` (+ ``M·N`` with bias)."""
    x, w = ops.tensor(args, 0), ops.tensor(args, 1)
    bias = ops.opt_tensor(args, 2)
    if not x.shape or len(w.shape) not in (1, 2) or x.shape[-1] != w.shape[-1]:
        raise Unknown
    m = math.prod(x.shape[:-1])
    n = w.shape[0] if len(w.shape) == 2 else 1
    k = x.shape[-1]
    flops = 2.0 * m * n * k + (m * n if bias is not None else 0)
    ins = [x, w] + ([bias] if bias is not None else [])
    return _gemm(flops, ins, m * n, args)


def _scaled_mm(name: str, args: list[Arg], concrete: Any) -> Work:
    """``_scaled_mm(a, b, scale_a, scale_b, bias?, ...)`` (FP8 GEMM): ``2MNK``."""
    a, b = ops.tensor(args, 0), ops.tensor(args, 1)
    _, m, n, k = _dims(a, b, 2)
    ins = [t for t in args[:5] if isinstance(t, Tensor)]
    out_size = 2  # bf16/fp16 output in practice
    return Work(2.0 * m * n * k, ops.nbytes(ins, 1) + m * n * out_size, "gemm", True, a.dtype)


def _mv(name: str, args: list[Arg], concrete: Any) -> Work:
    off = 1 if name in ("addmv",) else 0
    a, v = ops.tensor(args, off), ops.tensor(args, off + 1)
    if len(a.shape) != 2 or len(v.shape) != 1 or a.shape[1] != v.shape[0]:
        raise Unknown
    m, k = a.shape
    ins = [a, v] + ([args[0]] if off and isinstance(args[0], Tensor) else [])
    return _gemm(2.0 * m * k, ins, m, args)


def _dot(name: str, args: list[Arg], concrete: Any) -> Work:
    a, b = ops.tensor(args, 0), ops.tensor(args, 1)
    return _gemm(2.0 * a.numel, [a, b], 1, args)


HANDLERS: dict[str, Handler] = {
    "mm": _mm, "addmm": _addmm, "bmm": _bmm, "baddbmm": _baddbmm, "matmul": _matmul,
    "linear": _linear, "_scaled_mm": _scaled_mm, "mv": _mv, "addmv": _mv, "dot": _dot,
    "vdot": _dot,
}
