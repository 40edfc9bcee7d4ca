"""Convolutions, forward and backward: ``2·N·Cout·prod(out_spatial)·(Cin/groups)·prod(kernel)``
FLOPs (``torch/utils/flop_counter.py`` ``conv_flop_count``); stride, padding, dilation, groups
and transposition from the recorded arguments (positions per op in ``_CONV_ARGS``).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Unknown, Work

# Index of (bias, stride, padding, dilation, transposed, groups) among each op's arguments;
# None when the op has no such argument (groups then come from the shapes, transposed from the
# name).
_Idx = tuple[int | None, int | None, int | None, int | None, int | None, int | None]
_CONV_ARGS: dict[str, _Idx] = {
    "convolution": (2, 3, 4, 5, 6, 8),
    "_convolution": (2, 3, 4, 5, 6, 8),
    "convolution_overrideable": (2, 3, 4, 5, 6, 8),
    "conv1d": (2, 3, 4, 5, None, 6),
    "conv2d": (2, 3, 4, 5, None, 6),
    "conv3d": (2, 3, 4, 5, None, 6),
    # (self, weight, padding, stride, dilation, groups, ...); before PyTorch 1.13 a bias came
    # third: detected from the recorded types (see _conv)
    "cudnn_convolution": (None, 3, 2, 4, None, 5),
    # (self, weight, padding, output_padding, stride, dilation, groups, ...)
    "cudnn_convolution_transpose": (None, 4, 2, 5, None, 6),
    "mkldnn_convolution": (2, 4, 3, 5, None, 6),  # (self, weight, bias, padding, stride, ...)
    "miopen_convolution": (2, 4, 3, 5, None, 6),
    "_slow_conv2d_forward": (3, 4, 5, None, None, None),  # (self, weight, kernel, bias, ...)
    "thnn_conv2d": (3, 4, 5, None, None, None),
    "conv_transpose1d": (2, 3, 4, 7, None, 6),  # (in, w, bias, stride, pad, out_pad, groups, dil)
    "conv_transpose2d": (2, 3, 4, 7, None, 6),
    "conv_transpose3d": (2, 3, 4, 7, None, 6),
}


def _conv_out(x_sp: tuple[int, ...], k_sp: tuple[int, ...], stride: tuple[int, ...],
              pad: tuple[int, ...] | None, dil: tuple[int, ...], transposed: bool
              ) -> tuple[int, ...]:
    out = []
    for i, (h, k) in enumerate(zip(x_sp, k_sp, strict=True)):
        s, d = stride[i], dil[i]
        p = pad[i] if pad is not None else d * (k - 1) // 2  # "same" padding when unknown
        if transposed:
            o = (h - 1) * s - 2 * p + d * (k - 1) + 1
        else:
            o = (h + 2 * p - d * (k - 1) - 1) // s + 1
        if o <= 0:
            raise Unknown
        out.append(o)
    return tuple(out)


def _padding(v: Any, nd: int) -> tuple[int, ...] | None:
    """Padding argument: ints, or None for "same" / unknown (then "same" is assumed)."""
    if v is None:
        return None
    if isinstance(v, str) and v.strip().strip("'\"").lower() in ("same", "valid"):
        return None if "same" in v.lower() else (0,) * nd
    return ops.ints(v, nd, 0)


def _conv(name: str, args: list[Arg], concrete: Any) -> Work:
    """Forward convolution, input ``[N, Cin, *S]``, weight ``[Cout, Cin/groups, *k]``.

    FLOPs ``2·N·Cout·prod(out)·(Cin/groups)·prod(k)`` (+ ``N·Cout·prod(out)`` with bias); bytes
    input + weight + bias + output. The output size needs stride/padding/dilation, which
    record_shapes does not keep: they are read from ``concrete`` (the profiler's ``Concrete
    Inputs``) when given, else stride 1, dilation 1 and "same" padding ``d·(k-1)//2`` are
    assumed, i.e. the output keeps the input's spatial size (exact for the 3x3/1x1 stride-1
    convolutions that dominate CNNs, an overestimate by ``stride^2`` for strided ones).
    Transposed convolutions (``transposed`` true or a ``*_transpose*`` op) have weight
    ``[Cin, Cout/groups, *k]`` and count FLOPs over the input positions
    (``flop_counter.conv_flop_count``).
    """
    x, w = ops.tensor(args, 0), ops.tensor(args, 1)
    nd = len(x.shape) - 2
    if nd < 1 or len(w.shape) != nd + 2:
        raise Unknown
    i_bias, i_stride, i_pad, i_dil, i_tr, i_groups = _CONV_ARGS.get(name, (2, 3, 4, 5, 6, 8))
    if name in ("cudnn_convolution", "cudnn_convolution_transpose") and ops.opt_tensor(args, 2):
        # old signature with a bias third: every later argument moves one place
        i_bias = 2
        i_stride, i_pad, i_dil, i_groups = (None if i is None else i + 1
                                             for i in (i_stride, i_pad, i_dil, i_groups))

    def arg(i: int | None) -> Any:
        return ops.concrete_at(concrete, i) if i is not None else None

    stride = ops.ints(arg(i_stride), nd, 1)
    pad = _padding(arg(i_pad), nd)
    dil = ops.ints(arg(i_dil), nd, 1)
    transposed = "transpose" in name
    if i_tr is not None:
        transposed = ops.as_bool(arg(i_tr), transposed)
    n, cin = x.shape[0], x.shape[1]
    k_sp = w.shape[2:]
    if transposed:
        groups = max(1, cin // w.shape[0]) if w.shape[0] else 1
    else:
        groups = max(1, cin // w.shape[1]) if w.shape[1] else 1
    g_arg = arg(i_groups)
    if isinstance(g_arg, (int, float)) and not isinstance(g_arg, bool) and g_arg >= 1:
        groups = int(g_arg)
    cout = w.shape[1] * groups if transposed else w.shape[0]
    out_sp = _conv_out(x.shape[2:], k_sp, stride, pad, dil, transposed)
    bias = ops.opt_tensor(args, i_bias) if i_bias is not None else None
    if transposed:
        flops = 2.0 * n * math.prod(x.shape[2:]) * cin * (cout // groups) * math.prod(k_sp)
    else:
        flops = 2.0 * n * math.prod(out_sp) * cout * (cin // groups) * math.prod(k_sp)
    out_numel = n * cout * math.prod(out_sp)
    if bias is not None:
        flops += out_numel
    size, dtype = ops.main_size_dtype(args)
    ins = [x, w] + ([bias] if bias is not None else [])
    return Work(flops, ops.nbytes(ins, size) + out_numel * size, "conv", True, dtype)


def _conv_backward(name: str, args: list[Arg], concrete: Any) -> Work:
    """``convolution_backward(grad_out, input, weight, ...)``: grad-input plus grad-weight.

    Each is a convolution of the forward's size (``flop_counter.conv_backward_flop``), so
    FLOPs are ``2 ×`` the forward's, computed from the recorded ``grad_out`` spatial size
    (exact, no padding assumption). ``output_mask`` (from ``concrete``) drops either half.
    Bytes: read grad_out, input, weight; write grad_input and grad_weight.
    """
    g, x, w = ops.tensor(args, 0), ops.tensor(args, 1), ops.tensor(args, 2)
    nd = len(x.shape) - 2
    if nd < 1 or len(w.shape) != nd + 2 or len(g.shape) != nd + 2:
        raise Unknown
    transposed = ops.as_bool(ops.concrete_at(concrete, 7), False)
    n, cin = x.shape[0], x.shape[1]
    if transposed:
        fwd = 2.0 * n * math.prod(x.shape[2:]) * math.prod(w.shape)
    else:
        fwd = 2.0 * n * math.prod(g.shape[2:]) * math.prod(w.shape)
    mask = ops.concrete_at(concrete, 10)
    if isinstance(mask, str):
        try:
            mask = orjson.loads(mask.lower())
        except orjson.JSONDecodeError:
            mask = None
    m = [bool(v) for v in mask] if isinstance(mask, list) and len(mask) >= 2 else [True, True]
    flops = fwd * (int(m[0]) + int(m[1]))
    size, dtype = ops.main_size_dtype(args)
    read = ops.nbytes([g, x, w], size)
    write = (x.numel if m[0] else 0) * size + (w.numel if m[1] else 0) * size
    del cin
    return Work(flops, read + write, "conv", True, dtype)


HANDLERS: dict[str, Handler] = {
    "convolution_backward": _conv_backward,
    **dict.fromkeys(_CONV_ARGS, _conv),
}
