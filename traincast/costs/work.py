"""Work of an operator from its input shapes: FLOPs and bytes moved, and per event of a trace.

:func:`op_work` turns one ATen (or fbgemm) operator call, as recorded by the PyTorch profiler
with ``record_shapes=True`` (Kineto ``Input Dims`` / ``Input type``) or by the execution trace
(``input_shapes`` / ``input_types``), into a :class:`Work`: floating-point operations, bytes
read plus written from device (or main) memory, the op family and whether traincast knows the
op at all. :func:`event_work` does it for every event of a
:class:`~traincast.trace.traceset.TraceSet` and hands each GPU kernel the work of the CPU op
that launched it.

Conventions (so that numbers agree with the usual tools):

- One multiply-add is 2 FLOPs; a GEMM ``[M, K] @ [K, N]`` is ``2·M·N·K`` (PyTorch's FLOP
  counter ``torch/utils/flop_counter.py`` ``mm_flop``; Kaplan et al., "Scaling Laws for Neural
  Language Models", arXiv 2001.08361, Sec. 2.1, count ``2·N`` FLOPs per parameter and token for
  the forward pass, the same rule). Bias additions add ``M·N`` (the FLOP counter ignores them).
- Convolutions: ``2·N·Cout·prod(out_spatial)·(Cin/groups)·prod(kernel)``
  (``flop_counter.conv_flop_count``: ``c_in`` there is ``w.shape[1] = Cin/groups``).
- Attention: ``2·B·H·L·S·E + 2·B·H·L·S·Ev`` (= ``4·B·H·L·S·D`` for ``E = Ev = D``) forward,
  causal masks not discounted (``flop_counter.sdpa_flop_count``); backward is the five batched
  GEMMs of ``flop_counter.sdpa_backward_flop_count`` = ``2·B·H·L·S·(3E + 2Ev)``.
- Everything else (elementwise, norms, softmax, reductions, optimizer updates) counts one FLOP
  per arithmetic operation per element, as written below per op; bytes are the tensors read plus
  the tensors written, each once ("one pass"), unless the op needs more passes (noted).
- Views, allocations and metadata ops (``view``, ``t``, ``empty`` ...) do no work: known, zero.
  Composite ops whose work is done by nested ops (``aten::to``, ``aten::clone``,
  ``aten::contiguous``, autograd nodes ``*Backward0``) are *unknown* (``known=False``), so their
  children's work is not counted twice.
- When an input type is missing (Kineto records a ``TensorList`` without element types) the item
  size is taken from the op's other tensor inputs, else 4 bytes (fp32).

Input types: Kineto names (``float``, ``c10::Half``, ``c10::BFloat16``, ``double``,
``long int`` ...) and execution-trace names (``Tensor(float)``,
``GenericList[Tensor(float),Tensor(float)]``) are both understood; ``Scalar``, ``ScalarList``,
``Int``, ``None`` ... are not tensors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from traincast.errors import ParameterError
from traincast.trace.families import classify
from traincast.trace.schema import GPU_WORK_KINDS, OP_FAMILIES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from traincast.trace.traceset import TraceSet

__all__ = ["ITEMSIZE", "Work", "event_work", "op_work", "parse_inputs"]


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes of one operator call.

    Attributes:
        flops: floating-point (or integer arithmetic) operations.
        bytes: bytes read plus written.
        family: one of :data:`~traincast.trace.schema.OP_FAMILIES`.
        known: False when traincast has no formula for the op (then flops = bytes = 0).
        dtype: canonical element type of the op's main operand (``fp32``, ``bf16``, ``fp16``,
            ``fp64``, ``fp8``, ``int64`` ...), ``""`` if unknown; selects the peak FLOP/s.
        op: the op's name (``aten::addmm``) when known, ``""`` otherwise; lets a compute model
            use a curve fitted for that op.

    ``dtype`` and ``op`` describe the work but do not take part in ``==``.
    """

    flops: float
    bytes: float
    family: str
    known: bool
    dtype: str = field(default="", compare=False)
    op: str = field(default="", compare=False)


#: Item size in bytes and canonical name of each recorded element type.
ITEMSIZE: dict[str, tuple[int, str]] = {
    "float": (4, "fp32"),
    "double": (8, "fp64"),
    "c10::Half": (2, "fp16"),
    "Half": (2, "fp16"),
    "c10::BFloat16": (2, "bf16"),
    "BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"),
    "c10::Float8_e5m2": (1, "fp8"),
    "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"),
    "c10::Float8_e8m0fnu": (1, "fp8"),
    "c10::complex<float>": (8, "complex64"),
    "c10::complex<double>": (16, "complex128"),
    "c10::complex<c10::Half>": (4, "complex32"),
    "long int": (8, "int64"),
    "long": (8, "int64"),
    "long long": (8, "int64"),
    "int64_t": (8, "int64"),
    "int": (4, "int32"),
    "short int": (2, "int16"),
    "short": (2, "int16"),
    "signed char": (1, "int8"),
    "unsigned char": (1, "uint8"),
    "bool": (1, "bool"),
}

_DEFAULT_ITEMSIZE = (4, "fp32")


@dataclass(frozen=True)
class _T:
    """One tensor argument: shape, item size (None if the type was not recorded), dtype."""

    shape: tuple[int, ...]
    itemsize: int | None
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


_Arg = Any  # _T, list[_T] (tensor list) or None (not a tensor)


def _tensor_type(t: str) -> tuple[int, str] | None:
    t = t.strip()
    if t.startswith("Tensor(") and t.endswith(")"):
        t = t[7:-1]
    return ITEMSIZE.get(t)


def _is_shape(d: Any) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) for x in d)


def _split_generic(t: str) -> list[str]:
    inner = t[len("GenericList["):-1]
    out, depth, cur = [], 0, []
    for ch in inner:
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def parse_inputs(input_dims: Sequence[Any], input_types: Sequence[Any]) -> list[_Arg]:
    """Arguments of one op call: a tensor, a list of tensors, or None (not a tensor).

    ``input_dims`` and ``input_types`` are the parsed JSON lists the profiler records.
    """
    args: list[_Arg] = []
    types = list(input_types) + [""] * max(0, len(input_dims) - len(input_types))
    for d, t in zip(input_dims, types, strict=False):
        t = t if isinstance(t, str) else ""
        if t.startswith("GenericList[") and t.endswith("]"):
            elems = _split_generic(t)
            if isinstance(d, list) and d and all(_is_shape(x) for x in d):
                ts = []
                for i, shp in enumerate(d):
                    info = _tensor_type(elems[i]) if i < len(elems) else None
                    ts.append(_T(tuple(shp), info[0] if info else None, info[1] if info else ""))
                if any(_tensor_type(e) for e in elems):
                    args.append(ts)
                    continue
            args.append(None)
            continue
        if t == "TensorList":
            if isinstance(d, list) and d and all(_is_shape(x) for x in d):
                args.append([_T(tuple(x), None, "") for x in d])
            else:
                args.append([])  # a tensor list whose shapes were not recorded
            continue
        info = _tensor_type(t)
        if info is not None and _is_shape(d):
            args.append(_T(tuple(d), info[0], info[1]))
        else:
            args.append(None)
    return args


# ---------------------------------------------------------------------------------------------
# helpers


class _Unknown(Exception):
    """Shapes do not fit the formula (raised inside handlers, turned into known=False)."""


def _t(args: list[_Arg], i: int) -> _T:
    if i < len(args) and isinstance(args[i], _T):
        return args[i]
    raise _Unknown


def _opt_t(args: list[_Arg], i: int) -> _T | None:
    return args[i] if i < len(args) and isinstance(args[i], _T) else None


def _tl(args: list[_Arg], i: int) -> list[_T]:
    if i < len(args) and isinstance(args[i], list):
        return args[i]
    raise _Unknown


def _all_tensors(args: list[_Arg]) -> list[_T]:
    out: list[_T] = []
    for a in args:
        if isinstance(a, _T):
            out.append(a)
        elif isinstance(a, list):
            out.extend(a)
    return out


def _size_of(t: _T, fallback: int) -> int:
    return t.itemsize if t.itemsize is not None else fallback


def _nbytes(ts: Sequence[_T], fallback: int) -> float:
    return float(sum(t.numel * _size_of(t, fallback) for t in ts))


_FLOAT_DTYPES = frozenset({"fp32", "fp64", "fp16", "bf16", "fp8", "complex32", "complex64",
                           "complex128"})


def _main(args: list[_Arg]) -> tuple[int, str]:
    """Item size and dtype of the op's result: its first floating-point tensor (``where(cond,
    x, y)`` computes in ``x``'s type, not the mask's), else its first typed tensor, else fp32."""
    typed = [t for t in _all_tensors(args) if t.itemsize is not None]
    for t in typed:
        if t.dtype in _FLOAT_DTYPES:
            return _size_of(t, 4), t.dtype
    if typed:
        return _size_of(typed[0], 4), typed[0].dtype
    return _DEFAULT_ITEMSIZE


def _conc(concrete: Sequence[Any] | None, i: int) -> Any:
    if concrete is None or i >= len(concrete):
        return None
    v = concrete[i]
    return None if v in ("", None) else v


def _ints(v: Any, n: int, default: int) -> tuple[int, ...]:
    """A stride/padding/dilation argument (int or list) as ``n`` ints."""
    if v is None:
        return (default,) * n
    if isinstance(v, str):
        try:
            v = orjson.loads(v)
        except orjson.JSONDecodeError:
            return (default,) * n
    if isinstance(v, (int, float)):
        return (int(v),) * n
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
        vals = [int(x) for x in v]
        return tuple(vals) if len(vals) == n else (vals[0],) * n
    return (default,) * n


def _bool(v: Any, default: bool) -> bool:
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1")
    return bool(v)


# ---------------------------------------------------------------------------------------------
# GEMM


def _gemm(flops: float, ins: list[_T], out_numel: float, args: list[_Arg]) -> Work:
    size, dtype = _main(args)
    return Work(float(flops), _nbytes(ins, size) + out_numel * size, "gemm", True, dtype)


def _mm(name: str, args: list[_Arg], concrete: Any) -> Work:
    a, b = _t(args, 0), _t(args, 1)
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise _Unknown
    m, k = a.shape
    n = b.shape[1]
    return _gemm(2.0 * m * n * k, [a, b], m * n, args)


def _addmm(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``addmm(bias, a, b)``: ``2MNK`` + ``MN`` for adding the (broadcast) bias."""
    bias, a, b = _t(args, 0), _t(args, 1), _t(args, 2)
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise _Unknown
    m, k = a.shape
    n = b.shape[1]
    return _gemm(2.0 * m * n * k + m * n, [bias, a, b], m * n, args)


def _bmm(name: str, args: list[_Arg], concrete: Any) -> Work:
    a, b = _t(args, 0), _t(args, 1)
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[2] != b.shape[1]:
        raise _Unknown
    bs, m, k = a.shape
    n = b.shape[2]
    return _gemm(2.0 * bs * m * n * k, [a, b], bs * m * n, args)


def _baddbmm(name: str, args: list[_Arg], concrete: Any) -> Work:
    bias, a, b = _t(args, 0), _t(args, 1), _t(args, 2)
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[2] != b.shape[1]:
        raise _Unknown
    bs, m, k = a.shape
    n = b.shape[2]
    return _gemm(2.0 * bs * m * n * k + bs * m * n, [bias, a, b], bs * m * n, args)


def _matmul_dims(sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of ``torch.matmul`` with broadcasting (1-D operands promoted)."""
    if not sa or not sb:
        raise _Unknown
    a = (1,) + sa if len(sa) == 1 else sa
    b = sb + (1,) if len(sb) == 1 else sb
    if a[-1] != b[-2]:
        raise _Unknown
    try:
        batch = math.prod(np.broadcast_shapes(a[:-2], b[:-2]))
    except ValueError:
        raise _Unknown from None
    return batch, a[-2], b[-1], a[-1]


def _matmul(name: str, args: list[_Arg], concrete: Any) -> Work:
    a, b = _t(args, 0), _t(args, 1)
    bs, m, n, k = _matmul_dims(a.shape, b.shape)
    return _gemm(2.0 * bs * m * n * k, [a, b], bs * m * n, args)


def _linear(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``linear(x[..., K], w[N, K], bias[N]?)``: ``2·M·N·K`` (+ ``M·N`` with bias)."""
    x, w = _t(args, 0), _t(args, 1)
    bias = _opt_t(args, 2)
    if not x.shape or len(w.shape) not in (1, 2) or x.shape[-1] != w.shape[-1]:
        raise _Unknown
    m = math.prod(x.shape[:-1])
    n = w.shape[0] if len(w.shape) == 2 else 1
    k = x.shape[-1]
    flops = 2.0 * m * n * k + (m * n if bias is not None else 0)
    ins = [x, w] + ([bias] if bias is not None else [])
    return _gemm(flops, ins, m * n, args)


def _scaled_mm(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``_scaled_mm(a, b, scale_a, scale_b, bias?, ...)`` (FP8 GEMM): ``2MNK``."""
    a, b = _t(args, 0), _t(args, 1)
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise _Unknown
    m, k = a.shape
    n = b.shape[1]
    ins = [t for t in args[:5] if isinstance(t, _T)]
    out_size = 2  # bf16/fp16 output in practice
    return Work(2.0 * m * n * k, _nbytes(ins, 1) + m * n * out_size, "gemm", True, a.dtype)


def _mv(name: str, args: list[_Arg], concrete: Any) -> Work:
    off = 1 if name in ("addmv",) else 0
    a, v = _t(args, off), _t(args, off + 1)
    if len(a.shape) != 2 or len(v.shape) != 1 or a.shape[1] != v.shape[0]:
        raise _Unknown
    m, k = a.shape
    ins = [a, v] + ([args[0]] if off and isinstance(args[0], _T) else [])
    return _gemm(2.0 * m * k, ins, m, args)


def _dot(name: str, args: list[_Arg], concrete: Any) -> Work:
    a, b = _t(args, 0), _t(args, 1)
    return _gemm(2.0 * a.numel, [a, b], 1, args)


# ---------------------------------------------------------------------------------------------
# convolution

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
            raise _Unknown
        out.append(o)
    return tuple(out)


def _padding(v: Any, nd: int) -> tuple[int, ...] | None:
    """Padding argument: ints, or None for "same" / unknown (then "same" is assumed)."""
    if v is None:
        return None
    if isinstance(v, str) and v.strip().strip("'\"").lower() in ("same", "valid"):
        return None if "same" in v.lower() else (0,) * nd
    return _ints(v, nd, 0)


def _conv(name: str, args: list[_Arg], concrete: Any) -> Work:
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
    x, w = _t(args, 0), _t(args, 1)
    nd = len(x.shape) - 2
    if nd < 1 or len(w.shape) != nd + 2:
        raise _Unknown
    i_bias, i_stride, i_pad, i_dil, i_tr, i_groups = _CONV_ARGS.get(name, (2, 3, 4, 5, 6, 8))
    if name in ("cudnn_convolution", "cudnn_convolution_transpose") and _opt_t(args, 2):
        # old signature with a bias third: every later argument moves one place
        i_bias = 2
        i_stride, i_pad, i_dil, i_groups = (None if i is None else i + 1
                                             for i in (i_stride, i_pad, i_dil, i_groups))

    def arg(i: int | None) -> Any:
        return _conc(concrete, i) if i is not None else None

    stride = _ints(arg(i_stride), nd, 1)
    pad = _padding(arg(i_pad), nd)
    dil = _ints(arg(i_dil), nd, 1)
    transposed = "transpose" in name
    if i_tr is not None:
        transposed = _bool(arg(i_tr), transposed)
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
    bias = _opt_t(args, i_bias) if i_bias is not None else None
    if transposed:
        flops = 2.0 * n * math.prod(x.shape[2:]) * cin * (cout // groups) * math.prod(k_sp)
    else:
        flops = 2.0 * n * math.prod(out_sp) * cout * (cin // groups) * math.prod(k_sp)
    out_numel = n * cout * math.prod(out_sp)
    if bias is not None:
        flops += out_numel
    size, dtype = _main(args)
    ins = [x, w] + ([bias] if bias is not None else [])
    return Work(flops, _nbytes(ins, size) + out_numel * size, "conv", True, dtype)


def _conv_backward(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``convolution_backward(grad_out, input, weight, ...)``: grad-input plus grad-weight.

    Each is a convolution of the forward's size (``flop_counter.conv_backward_flop``), so
    FLOPs are ``2 ×`` the forward's, computed from the recorded ``grad_out`` spatial size
    (exact, no padding assumption). ``output_mask`` (from ``concrete``) drops either half.
    Bytes: read grad_out, input, weight; write grad_input and grad_weight.
    """
    g, x, w = _t(args, 0), _t(args, 1), _t(args, 2)
    nd = len(x.shape) - 2
    if nd < 1 or len(w.shape) != nd + 2 or len(g.shape) != nd + 2:
        raise _Unknown
    transposed = _bool(_conc(concrete, 7), False)
    n, cin = x.shape[0], x.shape[1]
    if transposed:
        fwd = 2.0 * n * math.prod(x.shape[2:]) * math.prod(w.shape)
    else:
        fwd = 2.0 * n * math.prod(g.shape[2:]) * math.prod(w.shape)
    mask = _conc(concrete, 10)
    if isinstance(mask, str):
        try:
            mask = orjson.loads(mask.lower())
        except orjson.JSONDecodeError:
            mask = None
    m = [bool(v) for v in mask] if isinstance(mask, list) and len(mask) >= 2 else [True, True]
    flops = fwd * (int(m[0]) + int(m[1]))
    size, dtype = _main(args)
    read = _nbytes([g, x, w], size)
    write = (x.numel if m[0] else 0) * size + (w.numel if m[1] else 0) * size
    del cin
    return Work(flops, read + write, "conv", True, dtype)


# ---------------------------------------------------------------------------------------------
# attention


def _attn_flops(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], blhd: bool
                ) -> tuple[int, int, int, int, int, int]:
    """(B, Hq, L, S, E, Ev) from query/key/value shapes ([B, H, L, E] or [B, L, H, E])."""
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise _Unknown
    if blhd:
        b, l_, h, e = q
        s, ev = k[1], v[3]
    else:
        b, h, l_, e = q
        s, ev = k[2], v[3]
    return b, h, l_, s, e, ev


def _sdpa(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Attention forward ``2·B·H·L·S·(E + Ev)``; bytes q, k, v read and output written.

    ``scaled_dot_product_attention`` and ``_scaled_dot_product_*_attention`` take
    ``[B, H, L, E]``; ``_flash_attention_forward`` / ``_efficient_attention_forward`` take
    ``[B, L, H, E]`` (the FLOP counter passes those shapes through unchanged; we transpose).
    Causal masking is not discounted (as in ``flop_counter.sdpa_flop``).
    """
    q, k, v = _t(args, 0), _t(args, 1), _t(args, 2)
    blhd = name in ("_flash_attention_forward", "_efficient_attention_forward")
    b, h, l_, s, e, ev = _attn_flops(q.shape, k.shape, v.shape, blhd)
    flops = 2.0 * b * h * l_ * s * (e + ev)
    size, dtype = _main(args)
    out = b * h * l_ * ev * size
    return Work(flops, _nbytes([q, k, v], size) + out, "attention", True, dtype)


def _sdpa_backward(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Attention backward: ``2·B·H·L·S·(3E + 2Ev)`` (``flop_counter.sdpa_backward_flop_count``:
    recompute scores, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q).

    Arguments ``(grad_out, q, k, v, out, ...)``; bytes read grad_out, q, k, v, out and write
    dq, dk, dv.
    """
    g, q, k, v = _t(args, 0), _t(args, 1), _t(args, 2), _t(args, 3)
    blhd = name in ("_flash_attention_backward", "_efficient_attention_backward")
    b, h, l_, s, e, ev = _attn_flops(q.shape, k.shape, v.shape, blhd)
    flops = 2.0 * b * h * l_ * s * (3 * e + 2 * ev)
    size, dtype = _main(args)
    out = _opt_t(args, 4) if name != "_efficient_attention_backward" else _opt_t(args, 5)
    read = _nbytes([g, q, k, v] + ([out] if out is not None else []), size)
    write = _nbytes([q, k, v], size)
    return Work(flops, read + write, "attention", True, dtype)


# ---------------------------------------------------------------------------------------------
# embeddings and gathers


def _embedding(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``embedding(weight[V, D], indices)``: gather ``n`` rows: bytes ``2·n·D·s`` + indices."""
    w, idx = _t(args, 0), _t(args, 1)
    if len(w.shape) != 2:
        raise _Unknown
    n, d = idx.numel, w.shape[1]
    size = _size_of(w, 4)
    return Work(0.0, 2.0 * n * d * size + _nbytes([idx], 8), "embedding", True, w.dtype)


def _embedding_bag(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``embedding_bag(weight[V, D], indices, offsets, ..., per_sample_weights, include_last_offset)``.

    ``N`` looked-up rows pooled into ``B`` bags (pooling factor ``L = N/B``): 1-D indices with
    ``offsets[B]`` (``B-1`` bags with ``include_last_offset``), or 2-D indices ``[B, L]``.
    FLOPs ``N·D`` (the pooling sum; ``2·N·D`` with per-sample weights); bytes: the pooled rows
    ``N·D·s`` + output ``B·D·s`` + indices, offsets (and weights).
    """
    w, idx = _t(args, 0), _t(args, 1)
    if len(w.shape) != 2:
        raise _Unknown
    d = w.shape[1]
    offsets = _opt_t(args, 2)
    n = idx.numel
    if len(idx.shape) == 2:
        bags = idx.shape[0]
    elif offsets is not None:
        bags = offsets.numel - (1 if _bool(_conc(concrete, 7), False) else 0)
    else:
        raise _Unknown
    bags = max(bags, 1)
    psw = _opt_t(args, 6)
    size = _size_of(w, 4)
    flops = n * d * (2.0 if psw is not None else 1.0)
    extra = [t for t in (idx, offsets, psw) if t is not None]
    nbytes = n * d * size + bags * d * size + _nbytes(extra, 8)
    return Work(float(flops), float(nbytes), "embedding", True, w.dtype)


def _embedding_backward(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Embedding (bag) backward ``(grad[..., D], indices, ...)``: scatter-add ``n`` rows.

    FLOPs ``n·D``; bytes: read ``n`` gradient rows, write ``n`` weight-gradient rows, indices.
    """
    g, idx = _t(args, 0), _t(args, 1)
    if not g.shape:
        raise _Unknown
    d = g.shape[-1]
    n = idx.numel
    size = _size_of(g, 4)
    return Work(float(n * d), 2.0 * n * d * size + _nbytes([idx], 8), "embedding", True, g.dtype)


def _index_select(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``index_select(self, dim, index[n])``: copy ``n`` slices (dim from ``concrete``, else 0)."""
    x, idx = _t(args, 0), _t(args, 2)
    dim = _conc(concrete, 1)
    dim = int(dim) if isinstance(dim, (int, float)) else 0
    if not x.shape:
        raise _Unknown
    dim = dim % len(x.shape)
    row = x.numel // max(x.shape[dim], 1)
    size = _size_of(x, 4)
    return Work(0.0, 2.0 * idx.numel * row * size + _nbytes([idx], 8), "embedding", True,
                x.dtype)


def _gather(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``gather(self, dim, index)``: read and write ``numel(index)`` elements + the index."""
    x, idx = _t(args, 0), _t(args, 2)
    size = _size_of(x, 4)
    return Work(0.0, 2.0 * idx.numel * size + _nbytes([idx], 8), "embedding", True, x.dtype)


def _fbgemm_lookup(name: str, args: list[_Arg], concrete: Any) -> Work:
    """fbgemm TBE ``split_embedding_codegen_lookup_*_function`` (and the dense variant).

    Arguments as in fbgemm_gpu's generated lookup: ``dev_weights`` (1), ``D_offsets`` (6,
    ``T+1`` entries), ``total_D`` (7, a scalar), ``indices`` (11), ``offsets`` (12, ``B·T+1``).
    The dimension needs ``total_D``, which only ``concrete`` carries; without it the op is
    unknown. Pooled embedding bag: ``N`` rows of mean width ``D = total_D/T``: FLOPs ``N·D``,
    bytes ``N·D·s`` (rows) + ``B·total_D·s`` (output) + indices and offsets.
    """
    total_d = _conc(concrete, 7)
    if not isinstance(total_d, (int, float)) or total_d <= 0:
        raise _Unknown
    w, d_off, idx, off = _t(args, 1), _t(args, 6), _t(args, 11), _t(args, 12)
    tables = max(d_off.numel - 1, 1)
    d = float(total_d) / tables
    bags = max(off.numel - 1, 1) / tables
    size = _size_of(w, 4)
    n = idx.numel
    nbytes = n * d * size + bags * float(total_d) * size + _nbytes([idx, off], 8)
    return Work(float(n * d), float(nbytes), "embedding", True, w.dtype)


# ---------------------------------------------------------------------------------------------
# elementwise, reductions, softmax, norms

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


def _broadcast_numel(ts: list[_T]) -> int:
    try:
        return math.prod(np.broadcast_shapes(*(t.shape for t in ts)))
    except ValueError:
        return max(t.numel for t in ts)


def _elementwise(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Pointwise op: FLOPs = ``k × numel(out)`` (k = 1 unless listed in ``_EW_FLOPS``);
    bytes = every tensor input read once + the output written once (in-place ops write
    ``self``). Output numel is the broadcast of the inputs; comparisons write bools."""
    ts = [a for a in args if isinstance(a, _T)]
    if not ts:
        raise _Unknown
    base = name.rstrip("_")
    n = _broadcast_numel(ts)
    size, dtype = _main(args)
    out_size = 1 if base in _BOOL_OUT else size
    flops = float(_EW_FLOPS.get(base, 1) * n)
    return Work(flops, _nbytes(ts, size) + n * out_size, "elementwise", True, dtype)


def _write_only(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``fill_``/``zero_``/``*_like``/RNG fills: write ``numel`` elements (RNG: a few FLOPs)."""
    x = _t(args, 0)
    base = name.rstrip("_")
    size = _size_of(x, 4)
    return Work(float(_WRITE_ONLY.get(base, 0) * x.numel), float(x.numel * size),
                "elementwise", True, x.dtype)


def _reduction(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Reduction: FLOPs ``k × numel(in)``; bytes = input read (the output, at most as large and
    usually far smaller, is not counted: its size needs the reduced dims, not recorded)."""
    x = _t(args, 0)
    size = _size_of(x, 4)
    return Work(float(_REDUCE.get(name, 1) * x.numel), float(x.numel * size), "elementwise",
                True, x.dtype)


def _scan(name: str, args: list[_Arg], concrete: Any) -> Work:
    x = _t(args, 0)
    size = _size_of(x, 4)
    return Work(float(x.numel), 2.0 * x.numel * size, "elementwise", True, x.dtype)


def _softmax(name: str, args: list[_Arg], concrete: Any) -> Work:
    """(log-)softmax over one dim: max, subtract, exp, sum, divide = ``5·n`` FLOPs; one read and
    one write (fused online-softmax kernels; rows that spill read twice)."""
    x = _t(args, 0)
    size = _size_of(x, 4)
    return Work(5.0 * x.numel, 2.0 * x.numel * size, "elementwise", True, x.dtype)


def _softmax_backward(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``_(log_)softmax_backward_data(grad, out, ...)``: ``dx = y·(g − Σ g·y)``: ``4·n`` FLOPs,
    read grad and output, write grad-input (3 passes)."""
    g, y = _t(args, 0), _t(args, 1)
    size = _size_of(g, 4)
    return Work(4.0 * g.numel, float((g.numel + y.numel + g.numel) * size), "elementwise", True,
                g.dtype)


def _nll_loss(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``nll_loss_forward(self[N, C], target[N])`` / backward: touch ``N`` elements of
    ``self`` (or grad-input) and read ``N`` targets; ``N`` FLOPs."""
    off = 1 if "backward" in name else 0
    x, tgt = _t(args, off), _t(args, off + 1)
    n = tgt.numel
    size = _size_of(x, 4)
    return Work(float(n), float(n * size + n * _size_of(tgt, 8)), "elementwise", True, x.dtype)


def _cat(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``cat``/``stack(tensors, dim)``: read every input and write the output (``2×`` bytes)."""
    ts = _tl(args, 0)
    if not ts:
        raise _Unknown
    size, dtype = _main(args)
    return Work(0.0, 2.0 * _nbytes(ts, size), "elementwise", True, dtype)


def _layer_norm(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``(native_)layer_norm(x, normalized_shape, weight, bias, ...)``: ``~5·n`` FLOPs (mean,
    variance, subtract, scale, affine); bytes: one read and one write of ``x`` (a row is
    normalised on-chip: 2 passes) + weight/bias + per-row mean and rstd (fp32)."""
    x = _t(args, 0)
    size = _size_of(x, 4)
    params = [t for t in args[1:4] if isinstance(t, _T)]
    c = params[0].numel if params else (x.shape[-1] if x.shape else 1)
    rows = x.numel // max(c, 1)
    nbytes = 2.0 * x.numel * size + _nbytes(params, size) + 2.0 * rows * 4
    return Work(5.0 * x.numel, nbytes, "norm", True, x.dtype)


def _layer_norm_backward(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``native_layer_norm_backward(grad, x, shape, mean, rstd, weight, bias, mask)``: ``~10·n``
    FLOPs (twice the forward); bytes: read grad and ``x``, write grad-input (3 passes), plus
    weight and the weight/bias gradients."""
    g, x = _t(args, 0), _t(args, 1)
    size = _size_of(x, 4)
    params = [t for t in args[3:7] if isinstance(t, _T)]
    w = _opt_t(args, 5)
    nbytes = 3.0 * x.numel * size + _nbytes(params, size) + (2 * w.numel * size if w else 0)
    del g
    return Work(10.0 * x.numel, float(nbytes), "norm", True, x.dtype)


def _batch_norm(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Batch/group norm forward ``(x, weight, bias, running_mean, running_var, training, ...)``:
    ``~5·n`` FLOPs; bytes 3 passes over ``x`` in training (statistics read, normalise read +
    write), 2 in inference (``training`` from ``concrete`` when known, else training)."""
    x = _t(args, 0)
    size = _size_of(x, 4)
    training = ("no_training" not in name
                and (_bool(_conc(concrete, 5), True) if "batch_norm" in name else True))
    passes = 3.0 if training else 2.0
    params = [t for t in args[1:5] if isinstance(t, _T)]
    return Work(5.0 * x.numel, passes * x.numel * size + _nbytes(params, size), "norm", True,
                x.dtype)


def _batch_norm_backward(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Batch/group norm backward ``(grad, x, ...)``: ``~10·n`` FLOPs; bytes 5 passes (reduce
    pass reads grad and ``x``; the grad-input pass reads both again and writes)."""
    g, x = _t(args, 0), _t(args, 1)
    size = _size_of(x, 4)
    params = [t for t in args[2:] if isinstance(t, _T)]
    del g
    return Work(10.0 * x.numel, 5.0 * x.numel * size + _nbytes(params, size), "norm", True,
                x.dtype)


def _rms_norm(name: str, args: list[_Arg], concrete: Any) -> Work:
    """RMSNorm ``(x, [residual,] weight, eps)``: ``4·n`` FLOPs (square, sum, scale, weight);
    bytes one read and one write of ``x``; the fused add variant also reads and writes the
    residual (``5·n`` FLOPs, 4 passes)."""
    x = _t(args, 0)
    size = _size_of(x, 4)
    fused = "add" in name
    w = [t for t in args[1:] if isinstance(t, _T) and t.numel < x.numel]
    passes = 4.0 if fused else 2.0
    return Work((5.0 if fused else 4.0) * x.numel, passes * x.numel * size + _nbytes(w, size),
                "norm", True, x.dtype)


# ---------------------------------------------------------------------------------------------
# optimizer steps

# _foreach_<op>: FLOPs per element of ``self``.
_FOREACH_FLOPS = {"addcmul": 3, "addcdiv": 3, "lerp": 3, "zero": 0, "copy": 0, "norm": 2,
                  "sqrt": 1, "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "maximum": 1,
                  "minimum": 1, "exp": 1, "reciprocal": 1, "sign": 1, "abs": 1, "pow": 1,
                  "clamp_min": 1, "clamp_max": 1}


def _foreach(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``_foreach_<op>(_)(self: TensorList, other: TensorList | Scalar(s) ...)``.

    The per-tensor loop of ``torch/optim`` ``_multi_tensor_*`` steps: one elementwise op over
    every tensor of ``self``. ``n`` = total elements of ``self``; FLOPs ``k·n`` (k from
    ``_FOREACH_FLOPS``, 1 if unlisted); bytes: each tensor-list argument read once and the
    result written once (``(lists + 1)·n·s``; ``zero_`` only writes, ``norm`` only reads,
    ``copy_`` reads the source and writes ``self``).
    """
    lists = [a for a in args if isinstance(a, list) and a]
    if not lists or not isinstance(args[0], list) or not args[0]:
        raise _Unknown
    op = name[len("_foreach_"):].rstrip("_")
    selfs = lists[0]
    size, dtype = _main(args)
    n = sum(t.numel for t in selfs)
    width = sum(_nbytes(lst, size) for lst in lists)
    own = _nbytes(selfs, size)
    if op == "zero":
        nbytes = own  # write only
    elif op in ("norm", "copy"):
        nbytes = width  # norm reads only; copy reads src and writes self
    else:
        nbytes = width + own
    return Work(float(_FOREACH_FLOPS.get(op, 1) * n), float(nbytes), "optimizer", True, dtype)


def _fused_optimizer(name: str, args: list[_Arg], concrete: Any) -> Work:
    """Fused optimizer kernels (``_fused_adam(w)_``, ``_fused_sgd_``, ``_fused_adagrad_``).

    Per parameter element, following ``torch/optim/adam.py`` ``_single_tensor_adam`` (which the
    fused CUDA kernel ``ATen/native/cuda/fused_adam_utils.cuh`` implements in one pass):
    ``exp_avg.lerp_(grad, 1-β1)`` (3), ``exp_avg_sq.mul_(β2).addcmul_(grad, grad, 1-β2)`` (4),
    ``denom = sqrt(exp_avg_sq)/bc2 + eps`` (3), ``param.addcdiv_(exp_avg, denom, -step)`` (3):
    **13 FLOPs**; bytes: read param, grad, exp_avg, exp_avg_sq, write param, exp_avg,
    exp_avg_sq: **7·s** (amsgrad: +1 FLOP and +2·s). Weight decay (+2 FLOPs) is not counted:
    its value is a scalar the trace does not keep.
    SGD (``torch/optim/sgd.py`` ``_single_tensor_sgd``) with momentum buffers:
    ``buf.mul_(m).add_(grad)`` (2) and ``param.add_(buf, -lr)`` (2): 4 FLOPs, 5·s bytes;
    without: 2 FLOPs, 3·s. Adagrad (``torch/optim/adagrad.py``): ``state_sum.addcmul_(g, g)``
    (2), ``param.addcdiv_(g, sqrt(state_sum) + eps, -clr)`` (5): 7 FLOPs, 5·s bytes.
    """
    params = _tl(args, 0)
    if not params:
        raise _Unknown
    size, dtype = _main(args)
    n = float(sum(t.numel for t in params))
    if "adam" in name:
        amsgrad = len(args) > 4 and isinstance(args[4], list) and len(args[4]) > 0
        flops, passes = (14.0, 9.0) if amsgrad else (13.0, 7.0)
    elif "sgd" in name:
        has_buf = len(args) > 2 and isinstance(args[2], list) and len(args[2]) > 0
        flops, passes = (4.0, 5.0) if has_buf else (2.0, 3.0)
    elif "adagrad" in name:
        flops, passes = 7.0, 5.0
    else:
        raise _Unknown
    return Work(flops * n, passes * n * size, "optimizer", True, dtype)


# ---------------------------------------------------------------------------------------------
# copies


def _copy(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``copy_(self, src)``: bytes only, read ``src`` + write ``self`` (item sizes may differ)."""
    dst, src = _t(args, 0), _t(args, 1)
    n = max(dst.numel, src.numel)
    nbytes = n * _size_of(dst, 4) + src.numel * _size_of(src, 4)
    return Work(0.0, float(nbytes), "memcpy", True, dst.dtype)


def _item(name: str, args: list[_Arg], concrete: Any) -> Work:
    """``item``/``_local_scalar_dense``: one element copied to the host."""
    x = _t(args, 0)
    return Work(0.0, float(_size_of(x, 4)), "memcpy", True, x.dtype)


# ---------------------------------------------------------------------------------------------
# registry

_ZERO_WORK = frozenset("""
view view_as reshape _reshape_alias _unsafe_view t transpose permute expand expand_as as_strided
slice select narrow squeeze unsqueeze detach detach_ alias flatten unflatten split
split_with_sizes chunk unbind movedim unfold diagonal _reshape_copy empty empty_like
empty_strided new_empty new_empty_strided resize_ set_ record_stream is_pinned result_type
lift_fresh numpy_T resolve_conj resolve_neg _version is_same_size is_nonzero size stride
_has_compatible_shallow_copy_type _make_per_tensor_quantized_tensor broadcast_tensors
""".split())

_COMPOSITE = frozenset("""
to _to_copy clone contiguous copy pin_memory _pin_memory cross_entropy_loss nll_loss nll_loss_nd
binary_cross_entropy_with_logits zeros ones full zeros_like ones_like full_like new_zeros
new_ones new_full dropout feature_dropout alpha_dropout
""".split())

_Handler = Callable[[str, list[_Arg], Any], Work]

_HANDLERS: dict[str, _Handler] = {
    "mm": _mm, "addmm": _addmm, "bmm": _bmm, "baddbmm": _baddbmm, "matmul": _matmul,
    "linear": _linear, "_scaled_mm": _scaled_mm, "mv": _mv, "addmv": _mv, "dot": _dot,
    "vdot": _dot,
    "convolution_backward": _conv_backward,
    "scaled_dot_product_attention": _sdpa,
    "_scaled_dot_product_flash_attention": _sdpa,
    "_scaled_dot_product_efficient_attention": _sdpa,
    "_scaled_dot_product_cudnn_attention": _sdpa,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa,
    "_flash_attention_forward": _sdpa,
    "_efficient_attention_forward": _sdpa,
    "_scaled_dot_product_flash_attention_backward": _sdpa_backward,
    "_scaled_dot_product_efficient_attention_backward": _sdpa_backward,
    "_scaled_dot_product_cudnn_attention_backward": _sdpa_backward,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_backward,
    "_flash_attention_backward": _sdpa_backward,
    "_efficient_attention_backward": _sdpa_backward,
    "embedding": _embedding,
    "embedding_bag": _embedding_bag, "_embedding_bag": _embedding_bag,
    "_embedding_bag_forward_only": _embedding_bag,
    "embedding_backward": _embedding_backward, "embedding_dense_backward": _embedding_backward,
    "_embedding_bag_backward": _embedding_backward,
    "_embedding_bag_dense_backward": _embedding_backward,
    "embedding_sparse_backward": _embedding_backward,
    "index_select": _index_select, "gather": _gather,
    "softmax": _softmax, "_softmax": _softmax, "log_softmax": _softmax,
    "_log_softmax": _softmax, "_safe_softmax": _softmax,
    "_softmax_backward_data": _softmax_backward, "_log_softmax_backward_data": _softmax_backward,
    "nll_loss_forward": _nll_loss, "nll_loss_backward": _nll_loss,
    "nll_loss2d_forward": _nll_loss, "nll_loss2d_backward": _nll_loss,
    "cat": _cat, "stack": _cat, "_cat": _cat,
    "layer_norm": _layer_norm, "native_layer_norm": _layer_norm,
    "native_layer_norm_backward": _layer_norm_backward,
    "batch_norm": _batch_norm, "native_batch_norm": _batch_norm,
    "_native_batch_norm_legit": _batch_norm, "_native_batch_norm_legit_no_training": _batch_norm,
    "cudnn_batch_norm": _batch_norm, "miopen_batch_norm": _batch_norm,
    "_batch_norm_impl_index": _batch_norm,
    "group_norm": _batch_norm, "native_group_norm": _batch_norm,
    "native_batch_norm_backward": _batch_norm_backward,
    "cudnn_batch_norm_backward": _batch_norm_backward,
    "miopen_batch_norm_backward": _batch_norm_backward,
    "native_group_norm_backward": _batch_norm_backward,
    "rms_norm": _rms_norm, "_fused_rms_norm": _rms_norm, "fused_add_rms_norm": _rms_norm,
    "_fused_adam_": _fused_optimizer, "_fused_adamw_": _fused_optimizer,
    "_fused_adam": _fused_optimizer, "_fused_adamw": _fused_optimizer,
    "_fused_sgd_": _fused_optimizer, "_fused_sgd": _fused_optimizer,
    "_fused_adagrad_": _fused_optimizer, "_fused_adagrad": _fused_optimizer,
    "copy_": _copy, "_copy_from": _copy, "_copy_from_and_resize": _copy,
    "item": _item, "_local_scalar_dense": _item,
}
for _n in _CONV_ARGS:
    _HANDLERS[_n] = _conv

_NAMESPACE = re.compile(r"^(aten|_C|vllm|fbgemm|fb|torch_ext|prims)::")


def _handler(name: str) -> tuple[str, _Handler | None, str]:
    """(base name, handler or None, what None means: ``zero`` / ``composite`` / ``unknown``)."""
    ns_match = _NAMESPACE.match(name)
    ns = ns_match.group(1) if ns_match else ""
    base = name[ns_match.end():] if ns_match else name
    if ns in ("fbgemm", "fb"):
        if base.startswith(("split_embedding_codegen_lookup", "dense_embedding_codegen_lookup")):
            return base, _fbgemm_lookup, ""
        return base, None, "unknown"
    if ns not in ("aten", "_C", "prims"):
        return base, None, "unknown"
    if base in _HANDLERS:
        return base, _HANDLERS[base], ""
    if base.startswith("_foreach_"):
        return base, _foreach, ""
    if base in _ZERO_WORK:
        return base, None, "zero"
    if base in _COMPOSITE:
        return base, None, "composite"
    stem = base.rstrip("_")
    if stem in _WRITE_ONLY:
        return base, _write_only, ""
    if stem in _EW_NAMES:
        return base, _elementwise, ""
    if stem in _REDUCE:
        return base, _reduction, ""
    if stem in _SCAN:
        return base, _scan, ""
    return base, None, "unknown"


def _family(name: str) -> str:
    fam = classify(name)
    return fam if fam in OP_FAMILIES else "other"


def op_work(name: str, input_dims: list, input_types: list,
            concrete: list | None = None) -> Work:
    """FLOPs and bytes of one op call from its recorded input shapes and types.

    Args:
        name: the op name as recorded (``aten::addmm``, ``fbgemm::...``).
        input_dims: ``Input Dims`` (parsed JSON): one shape per argument (``[]`` for scalars;
            a list of shapes for a tensor list).
        input_types: ``Input type`` (Kineto: ``float``, ``c10::Half``, ``Scalar``...; execution
            trace: ``Tensor(float)``, ``GenericList[...]``, ``Int``...).
        concrete: ``Concrete Inputs`` when recorded (scalar arguments such as a
            convolution's stride and padding, ``total_D`` of an fbgemm lookup), else None.

    Returns:
        :class:`Work`; ``known=False`` (and zero FLOPs/bytes) when the op has no formula here or
        its shapes do not fit one. Views/allocations are known with zero work.

    Raises:
        ParameterError: ``name`` is not a string, or ``input_dims``/``input_types``/``concrete``
            are not lists.
    """
    if not isinstance(name, str) or not name:
        raise ParameterError(f"op_work: the op name must be a non-empty string, got {name!r}")
    if not isinstance(input_dims, (list, tuple)) or not isinstance(input_types, (list, tuple)):
        raise ParameterError(
            f"op_work({name!r}): input_dims and input_types must be lists, got "
            f"{type(input_dims).__name__} and {type(input_types).__name__}")
    if concrete is not None and not isinstance(concrete, (list, tuple)):
        raise ParameterError(f"op_work({name!r}): concrete must be a list or None")
    return _op_work(name, input_dims, input_types, concrete)


def _op_work(name: str, input_dims: Sequence[Any], input_types: Sequence[Any],
             concrete: Sequence[Any] | None) -> Work:
    base, handler, why = _handler(name)
    if handler is None:
        if why == "zero":
            return Work(0.0, 0.0, "other", True, "", name)
        return Work(0.0, 0.0, _family(name), False, "", name)
    try:
        args = parse_inputs(input_dims, input_types)
        w = handler(base, args, concrete)
    except (_Unknown, TypeError, ValueError, IndexError, ZeroDivisionError):
        return Work(0.0, 0.0, _family(name), False, "", name)
    if not (math.isfinite(w.flops) and math.isfinite(w.bytes)) or w.flops < 0 or w.bytes < 0:
        return Work(0.0, 0.0, w.family, False, "", name)
    return replace(w, op=name)


# ---------------------------------------------------------------------------------------------
# per event


def _innermost(starts: np.ndarray, ends: np.ndarray, parent: np.ndarray,
               t: np.ndarray) -> np.ndarray:
    """Index of the innermost interval containing each ``t`` (-1 if none).

    Intervals are sorted by start and properly nested; ``parent`` is each one's enclosing
    interval (-1 for roots).
    """
    pos = np.searchsorted(starts, t, "right") - 1
    while True:
        ok = pos >= 0
        bad = np.zeros(pos.shape, bool)
        bad[ok] = ends[pos[ok]] < t[ok]
        if not bad.any():
            return pos
        pos[bad] = parent[pos[bad]]


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Enclosing interval of each interval (sorted by start, ties longest first), -1 for roots."""
    parent = np.full(starts.size, -1, np.int64)
    stack: list[int] = []
    ends_l = ends.tolist()
    for i, s in enumerate(starts.tolist()):
        while stack and ends_l[stack[-1]] < s:
            stack.pop()
        if stack and ends_l[i] <= ends_l[stack[-1]]:
            parent[i] = stack[-1]
        elif stack:  # overlaps without nesting (clock jitter): treat as a sibling
            while stack and ends_l[stack[-1]] < ends_l[i]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


@dataclass
class _Nesting:
    """Shaped cpu ops grouped per host thread: rows, and for each the enclosing shaped op."""

    rows: np.ndarray  # event rows of shaped cpu ops, grouped by thread, sorted by start
    parent: np.ndarray  # index into ``rows`` of the enclosing shaped op, -1 if none
    group_of: dict[tuple[int, int, int], tuple[int, int]]  # (rank, pid, tid) -> [lo, hi)


def _nesting(rows: np.ndarray, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray,
             ts: np.ndarray, dur: np.ndarray) -> _Nesting:
    order = np.lexsort((-dur[rows], ts[rows], tid[rows], pid[rows], rank[rows]))
    rows = rows[order]
    parent = np.full(rows.size, -1, np.int64)
    group_of: dict[tuple[int, int, int], tuple[int, int]] = {}
    if rows.size:
        key = np.stack([rank[rows], pid[rows], tid[rows]], axis=1)
        change = np.ones(rows.size, bool)
        change[1:] = (key[1:] != key[:-1]).any(axis=1)
        bounds = np.flatnonzero(change).tolist() + [rows.size]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            r = rows[lo:hi]
            p = _parents(ts[r], ts[r] + dur[r])
            parent[lo:hi] = np.where(p >= 0, p + lo, -1)
            group_of[(int(rank[r[0]]), int(pid[r[0]]), int(tid[r[0]]))] = (lo, hi)
    return _Nesting(rows, parent, group_of)


def _nested(nest: _Nesting, s_index: np.ndarray, shaped: dict[str, np.ndarray],
            dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per shaped op (in ``shaped`` order): ``leaf`` (no shaped op nested in it has known,
    nonzero work: in ``aten::linear`` > ``aten::matmul`` > ``aten::mm`` only ``mm`` is a leaf)
    and ``nested_dur``, the summed duration of the outermost such nested ops (ns)."""
    n = nest.rows.size
    pos = s_index[nest.rows]  # nesting order -> shaped order
    work = (shaped["flops"][pos] + shaped["bytes"][pos] > 0) & shaped["known"][pos]
    # nearest ancestor with known work of every op with known work
    members = np.flatnonzero(work)
    anc = nest.parent[members].copy()
    todo = anc >= 0
    todo[todo] = ~work[anc[todo]]
    while todo.any():
        anc[todo] = nest.parent[anc[todo]]
        todo &= anc >= 0
        todo[todo] = ~work[anc[todo]]
    has = anc >= 0
    nested = np.zeros(n)
    np.add.at(nested, anc[has], dur[nest.rows[members[has]]].astype(np.float64))
    leaf = np.ones(n, bool)
    leaf[pos] = ~(nested > 0) & ~np.isin(np.arange(n), anc[has])
    nested_out = np.zeros(n)
    nested_out[pos] = nested
    return leaf, nested_out


def _col(ts: TraceSet, name: str) -> np.ndarray:
    from traincast.trace.arrow import to_numpy

    return to_numpy(ts.events.column(name))


def _shaped_work(ts: TraceSet, cpu_rows: np.ndarray, name_idx: np.ndarray,
                 name_dict: list[str]) -> dict[str, np.ndarray]:
    """Work of the cpu ops in ``cpu_rows`` that have shapes (deduplicated by call signature)."""
    from traincast.trace.arrow import to_numpy

    sh = ts.shapes
    ev_rows = to_numpy(sh.column("event")).astype(np.int64)
    keep = np.isin(ev_rows, cpu_rows)
    pos = np.flatnonzero(keep)
    dims = sh.column("input_dims").to_pylist()
    types = sh.column("input_types").to_pylist()
    conc = (sh.column("concrete_inputs").to_pylist()
            if "concrete_inputs" in sh.column_names else None)
    n = pos.size
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    known = np.zeros(n, bool)
    fam = np.empty(n, object)
    dtype = np.empty(n, object)
    cache: dict[tuple, Work] = {}
    rows = ev_rows[pos]
    names = name_idx[rows]
    for j, (i, code) in enumerate(zip(pos.tolist(), names.tolist(), strict=True)):
        c = conc[i] if conc is not None else None
        key = (code, dims[i], types[i], c)
        w = cache.get(key)
        if w is None:
            try:
                d = orjson.loads(dims[i]) if dims[i] else []
                t = orjson.loads(types[i]) if types[i] else []
                cc = orjson.loads(c) if c else None
            except orjson.JSONDecodeError:
                d, t, cc = None, None, None
            if isinstance(d, list) and isinstance(t, list):
                w = _op_work(name_dict[code], d, t, cc if isinstance(cc, list) else None)
            else:
                w = Work(0.0, 0.0, _family(name_dict[code]), False, "")
            cache[key] = w
        flops[j], nbytes[j], known[j], fam[j], dtype[j] = (w.flops, w.bytes, w.known, w.family,
                                                           w.dtype)
    return {"event": rows, "flops": flops, "bytes": nbytes, "known": known, "family": fam,
            "dtype": dtype}


def event_work(ts: TraceSet) -> pd.DataFrame:
    """Work of every cpu op with shapes and every device op (kernel, memcpy, memset) of ``ts``.

    Returns one row per such event, sorted by ``event`` (row of ``ts.events``), with columns
    ``event``, ``rank``, ``family``, ``flops``, ``bytes``, ``known``, ``source_event``,
    ``dtype``, ``leaf`` and ``nested_dur``:

    - a cpu op with recorded shapes (``ts.shapes``: record_shapes or the linked execution
      trace) gets its own :func:`op_work`; ``source_event`` is its own row. On CPU-only traces
      these are the ops that run.
    - a device op inherits the work of the cpu op that launched it: kernel -> ``correlation``
      -> the runtime call (``cudaLaunchKernel``...) -> the innermost cpu op with shapes on the
      runtime call's host thread that encloses the call's midpoint (``source_event``). When that
      op launched several device ops, its FLOPs and bytes are split among them in proportion to
      their measured durations (equal shares if all durations are 0), so the sums over a source
      op's device ops equal the op's work and the device ops' throughputs equal the op's. A
      memcpy/memset takes its bytes from the event itself when the reader kept them (an events
      column ``bytes``), else its share of the source op's. ``family`` is the source op's
      family when its work is known, except that memcpy/memset events are ``memcpy`` and a
      kernel launched by a copy op (a cast or strided copy run on the SMs) is
      ``elementwise``; when the work is unknown it is the event's own ``op_family``.
      ``source_event`` is -1 when no shaped op encloses the launch.

    Unknown ops have ``known=False`` and zero work. CPU ops nest (``aten::linear`` holds
    ``aten::addmm``; both carry the GEMM's work), so sum over device ops, or over cpu-op rows
    with ``leaf`` true (no nested shaped op with known nonzero work; always true for device
    ops), never over all rows. ``nested_dur`` (ns) is the time spent in the outermost nested
    ops with known work (0 for leaves), so ``dur - nested_dur`` is an op's own time.
    """
    import pandas as pd

    from traincast.trace import arrow as A

    ev = ts.events
    n_ev = ev.num_rows
    kind_idx, kind_dict = A.dictionary_parts(ev.column("kind"))
    name_idx, name_dict = A.dictionary_parts(ev.column("name"))
    fam_idx, fam_dict = A.dictionary_parts(ev.column("op_family"))
    rank = _col(ts, "rank").astype(np.int64)
    t0 = _col(ts, "ts")
    dur = _col(ts, "dur")
    pid = _col(ts, "pid")
    tid = _col(ts, "tid")
    corr = _col(ts, "correlation")

    def code(k: str) -> int:
        return kind_dict.index(k) if k in kind_dict else -99

    cpu_mask = kind_idx == code("cpu_op")
    cpu_rows = np.flatnonzero(cpu_mask)
    shaped = _shaped_work(ts, cpu_rows, name_idx, name_dict)
    s_rows = shaped["event"]
    order = np.argsort(s_rows, kind="stable")
    for k in shaped:
        shaped[k] = shaped[k][order]
    s_rows = shaped["event"]
    # row -> index into ``shaped`` (dense map; -1 where the event is not a shaped cpu op)
    s_index = np.full(n_ev, -1, np.int64)
    s_index[s_rows] = np.arange(s_rows.size)

    dev_mask = np.zeros(n_ev, bool)
    for k in GPU_WORK_KINDS:
        dev_mask |= kind_idx == code(k)
    dev_rows = np.flatnonzero(dev_mask)
    source = np.full(dev_rows.size, -1, np.int64)
    nest = _nesting(s_rows, rank, pid, tid, t0, dur)
    leaf, nested_dur = _nested(nest, s_index, shaped, dur)
    if dev_rows.size and s_rows.size:
        rt_rows = np.flatnonzero((kind_idx == code("runtime")) & (corr >= 0))
        if rt_rows.size:
            rt_key = (rank[rt_rows] << 42) | corr[rt_rows]
            o = np.argsort(rt_key, kind="stable")
            rt_key, rt_rows = rt_key[o], rt_rows[o]
            d_key = (rank[dev_rows] << 42) | np.maximum(corr[dev_rows], 0)
            p = np.searchsorted(rt_key, d_key)
            p_ok = p < rt_key.size
            hit = np.zeros(dev_rows.size, bool)
            hit[p_ok] = rt_key[p[p_ok]] == d_key[p_ok]
            hit &= corr[dev_rows] >= 0
            launch = np.full(dev_rows.size, -1, np.int64)
            launch[hit] = rt_rows[p[hit]]
            lrows = launch[hit]
            src_hit = np.full(lrows.size, -1, np.int64)
            gkey = np.stack([rank[lrows], pid[lrows], tid[lrows]], axis=1)
            if lrows.size:
                uniq, inv = np.unique(gkey, axis=0, return_inverse=True)
                inv = inv.reshape(-1)
                for gi, (r_, p_, t_) in enumerate(uniq.tolist()):
                    span = nest.group_of.get((r_, p_, t_))
                    if span is None:
                        continue
                    lo, hi = span
                    sel = np.flatnonzero(inv == gi)
                    q = lrows[sel]
                    g_rows = nest.rows[lo:hi]
                    mid = t0[q] + dur[q] // 2
                    idx = _innermost(t0[g_rows], t0[g_rows] + dur[g_rows],
                                     np.where(nest.parent[lo:hi] >= 0,
                                              nest.parent[lo:hi] - lo, -1), mid)
                    src_hit[sel] = np.where(idx >= 0, g_rows[np.maximum(idx, 0)], -1)
            source[hit] = src_hit

    # split each source op's work over its device ops by duration
    d_flops = np.zeros(dev_rows.size)
    d_bytes = np.zeros(dev_rows.size)
    d_known = np.zeros(dev_rows.size, bool)
    d_fam = np.array([fam_dict[i] for i in fam_idx[dev_rows]], dtype=object)
    d_dtype = np.full(dev_rows.size, "", dtype=object)
    has = source >= 0
    if has.any():
        si = s_index[source[has]]
        w_dur = dur[dev_rows[has]].astype(np.float64)
        _, inv = np.unique(source[has], return_inverse=True)
        tot = np.bincount(inv, weights=w_dur)
        cnt = np.bincount(inv)
        share = np.where(tot[inv] > 0, w_dur / np.where(tot[inv] > 0, tot[inv], 1.0),
                         1.0 / cnt[inv])
        kn = shaped["known"][si]
        d_flops[has] = shaped["flops"][si] * share
        d_bytes[has] = shaped["bytes"][si] * share
        d_known[has] = kn
        src_fam = shaped["family"][si]
        cur = d_fam[has]
        d_fam[has] = np.where(kn, src_fam, cur)
        d_dtype[has] = shaped["dtype"][si]
    copy_kind = (kind_idx[dev_rows] == code("memcpy")) | (kind_idx[dev_rows] == code("memset"))
    # a copy op's kernel (a cast or strided copy on the SMs) is an elementwise kernel; only
    # the copy engines' memcpy/memset are "memcpy"
    d_fam[~copy_kind & d_known & (d_fam == "memcpy")] = "elementwise"
    d_fam[copy_kind] = "memcpy"
    d_flops[copy_kind & d_known] = 0.0
    if "bytes" in ev.column_names:
        ev_bytes = _col(ts, "bytes")[dev_rows]
        use = copy_kind & (ev_bytes >= 0)
        d_bytes[use] = ev_bytes[use]
        d_known[use] = True
        d_flops[use] = 0.0

    event = np.concatenate([s_rows, dev_rows])
    out = pd.DataFrame({
        "event": event.astype(np.int64),
        "rank": rank[event].astype(np.int32),
        "family": np.concatenate([shaped["family"], d_fam]),
        "flops": np.concatenate([shaped["flops"], d_flops]),
        "bytes": np.concatenate([shaped["bytes"], d_bytes]),
        "known": np.concatenate([shaped["known"], d_known]),
        "source_event": np.concatenate([s_rows, source]).astype(np.int64),
        "dtype": np.concatenate([shaped["dtype"], d_dtype]),
        "leaf": np.concatenate([leaf, np.ones(dev_rows.size, bool)]),
        "nested_dur": np.concatenate([nested_dur, np.zeros(dev_rows.size)]),
    })
    out = out.sort_values("event", kind="stable").reset_index(drop=True)
    out["family"] = pd.Categorical(out["family"], categories=list(OP_FAMILIES))
    return out
