"""Elementwise ops, reductions, scans, softmax, NLL loss and concatenation: FLOPs per
output element as listed (``_EW_FLOPS``, 1 otherwise), bytes = tensors read + written once.
Ops are recognised by their name stem (``add``, ``add_``) in the name sets of this module.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Tensor, Unknown, Work

# FLOPs per output element; ops not listed count 1.
_EW_FLOPS = {
    "addcmul": 3, "addcdiv": 3, "lerp": 3, "threshold_backward": 1, "where": 1,
    "sigmoid_backward": 2, "tanh_backward": 2, "gelu_backward": 8, "silu_backward": 4,
    "hardtanh_backward": 1, "mse_loss": 3, "smooth_l1_loss": 4, "l1_loss": 2,
    "native_dropout": 2, "native_dropout_backward": 2,
}
_EW_NAMES = frozenset("""
add sub mul div neg abs relu relu6 gelu silu sigmoid tanh exp exp2 expm1 log log2 log10 log1p
pow sqrt rsqrt reciprocal sign sgn clamp clamp_min clamp_max clip maximum minimum fmax fmin
where threshold threshold_backward masked_fill addcmul addcdiv lerp floor ceil round trunc frac
remainder fmod erf erfc erfinv sin cos tan asin acos atan atan2 sinh cosh hardtanh
hardtanh_backward leaky_relu leaky_relu_backward elu elu_backward softplus softplus_backward
hardswish hardsigmoid mish gelu_backward silu_backward sigmoid_backward tanh_backward
nan_to_num rsub square bitwise_and bitwise_or bitwise_xor bitwise_not logical_and logical_or
logical_not logical_xor eq ne lt le gt ge isnan isinf isfinite copysign hypot xlogy
native_dropout native_dropout_backward mse_loss l1_loss smooth_l1_loss true_divide
floor_divide mul_out
""".split())
_BOOL_OUT = frozenset("eq ne lt le gt ge logical_and logical_or logical_not logical_xor isnan "
                      "isinf isfinite".split())
_WRITE_ONLY = {"fill": 0, "zero": 0, "normal": 2, "uniform": 2, "bernoulli": 2, "random": 1,
               "exponential": 3}
_REDUCE = {"sum": 1, "mean": 1, "prod": 1, "amax": 1, "amin": 1, "max": 1, "min": 1,
           "argmax": 1, "argmin": 1, "norm": 2, "linalg_vector_norm": 2, "var": 3, "std": 3,
           "var_mean": 3, "std_mean": 3, "all": 1, "any": 1, "logsumexp": 3,
           "count_nonzero": 1, "nansum": 1, "aminmax": 2}
_SCAN = {"cumsum": 1, "cumprod": 1, "cummax": 1, "cummin": 1}


def _broadcast_numel(ts: list[Tensor]) -> int:
    try:
        return math.prod(np.broadcast_shapes(*(t.shape for t in ts)))
    except ValueError:
        return max(t.numel for t in ts)


def _elementwise(name: str, args: list[Arg], concrete: Any) -> Work:
    """Pointwise op: FLOPs = ``k × numel(out)`` (k = 1 unless listed in ``_EW_FLOPS``);
    bytes = every tensor input read once + the output written once (in-place ops write
    ``self``). Output numel is the broadcast of the inputs; comparisons write bools."""
    ts = [a for a in args if isinstance(a, Tensor)]
    if not ts:
        raise Unknown
    base = name.rstrip("_")
    n = _broadcast_numel(ts)
    size, dtype = ops.main_size_dtype(args)
    out_size = 1 if base in _BOOL_OUT else size
    flops = float(_EW_FLOPS.get(base, 1) * n)
    return Work(flops, ops.nbytes(ts, size) + n * out_size, "elementwise", True, dtype)


def _write_only(name: str, args: list[Arg], concrete: Any) -> Work:
    """``fill_``/``zero_``/``*_like``/RNG fills: write ``numel`` elements (RNG: a few FLOPs)."""
    x = ops.tensor(args, 0)
    base = name.rstrip("_")
    size = ops.size_of(x, 4)
    return Work(float(_WRITE_ONLY.get(base, 0) * x.numel), float(x.numel * size),
                "elementwise", True, x.dtype)


def _reduction(name: str, args: list[Arg], concrete: Any) -> Work:
    """Reduction: FLOPs ``k × numel(in)``; bytes = input read (the output, at most as large and
    usually far smaller, is not counted: its size needs the reduced dims, not recorded)."""
    x = ops.tensor(args, 0)
    size = ops.size_of(x, 4)
    return Work(float(_REDUCE.get(name, 1) * x.numel), float(x.numel * size), "elementwise",
                True, x.dtype)


def _scan(name: str, args: list[Arg], concrete: Any) -> Work:
    x = ops.tensor(args, 0)
    size = ops.size_of(x, 4)
    return Work(float(x.numel), 2.0 * x.numel * size, "elementwise", True, x.dtype)


def _softmax(name: str, args: list[Arg], concrete: Any) -> Work:
    """(log-)softmax over one dim: max, subtract, exp, sum, divide = ``5·n`` FLOPs; one read and
    one write (fused online-softmax kernels; rows that spill read twice)."""
    x = ops.tensor(args, 0)
    size = ops.size_of(x, 4)
    return Work(5.0 * x.numel, 2.0 * x.numel * size, "elementwise", True, x.dtype)


def _softmax_backward(name: str, args: list[Arg], concrete: Any) -> Work:
    """``_(log_)softmax_backward_data(grad, out, ...)``: ``dx = y·(g − Σ g·y)``: ``4·n`` FLOPs,
    read grad and output, write grad-input (3 passes)."""
    g, y = ops.tensor(args, 0), ops.tensor(args, 1)
    size = ops.size_of(g, 4)
    return Work(4.0 * g.numel, float((g.numel + y.numel + g.numel) * size), "elementwise", True,
                g.dtype)


def _nll_loss(name: str, args: list[Arg], concrete: Any) -> Work:
    """``nll_loss_forward(self[N, C], target[N])`` / backward: touch ``N`` elements of
    ``self`` (or grad-input) and read ``N`` targets; ``N`` FLOPs."""
    off = 1 if "backward" in name else 0
    x, tgt = ops.tensor(args, off), ops.tensor(args, off + 1)
    n = tgt.numel
    size = ops.size_of(x, 4)
    return Work(float(n), float(n * size + n * ops.size_of(tgt, 8)), "elementwise", True, x.dtype)


def _cat(name: str, args: list[Arg], concrete: Any) -> Work:
    """``cat``/``stack(tensors, dim)``: read every input and write the output (``2×`` bytes)."""
    ts = ops.tensor_list(args, 0)
    if not ts:
        raise Unknown
    size, dtype = ops.main_size_dtype(args)
    return Work(0.0, 2.0 * ops.nbytes(ts, size), "elementwise", True, dtype)


HANDLERS: dict[str, Handler] = {
    "softmax": _softmax, "_softmax": _softmax, "log_softmax": _softmax,
    "_log_softmax": _softmax, "_safe_softmax": _softmax,
    "_softmax_backward_data": _softmax_backward, "_log_softmax_backward_data": _softmax_backward,
    "nll_loss_forward": _nll_loss, "nll_loss_backward": _nll_loss,
    "nll_loss2d_forward": _nll_loss, "nll_loss2d_backward": _nll_loss,
    "cat": _cat, "stack": _cat, "_cat": _cat,
}


def by_stem(stem: str) -> Handler | None:
    """The handler of an op recognised by its name stem (trailing ``_`` removed), in this
    order: write-only, elementwise, reduction, scan; None when none fits."""
    if stem in _WRITE_ONLY:
        return _write_only
    if stem in _EW_NAMES:
        return _elementwise
    if stem in _REDUCE:
        return _reduction
    if stem in _SCAN:
        return _scan
    return None
