"""What every op family shares: :class:`Work`, recorded input types and shapes, helpers.

:func:`parse_inputs` turns the recorded ``Input Dims``/``Input type`` (Kineto) or
``input_shapes``/``input_types`` (execution trace) into one entry per argument: a tensor
(shape, item size, canonical dtype), a tensor list, or None (not a tensor). Kineto type names
(``float``, ``c10::Half``, ``long int`` ...) and execution-trace names (``Tensor(float)``,
``GenericList[Tensor(float),Tensor(float)]``) are both understood. When a type is missing the
item size is taken from the op's other tensor inputs, else 4 bytes (fp32) (see
:data:`ITEMSIZE`).

Handlers (``Handler``) take ``(base_name, args, concrete)`` and return a :class:`Work`; they
raise ``Unknown`` when the shapes do not fit their formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["ITEMSIZE", "Arg", "Handler", "Tensor", "Unknown", "Work", "as_bool", "concrete_at",
           "ints", "main_size_dtype", "nbytes", "opt_tensor", "parse_inputs", "size_of", "tensor",
           "tensor_list"]


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
class Tensor:
    """One tensor argument: shape, item size (None if the type was not recorded), dtype."""

    shape: tuple[int, ...]
    itemsize: int | None
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


Arg = Any  # Tensor, list[Tensor] (tensor list) or None (not a tensor)


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


def parse_inputs(input_dims: Sequence[Any], input_types: Sequence[Any]) -> list[Arg]:
    """Arguments of one op call: a tensor, a list of tensors, or None (not a tensor).

    ``input_dims`` and ``input_types`` are the parsed JSON lists the profiler records.
    """
    args: list[Arg] = []
    types = list(input_types) + [""] * max(0, len(input_dims) - len(input_types))
    for d, t in zip(input_dims, types, strict=False):
        t = t if isinstance(t, str) else ""
        if t.startswith("GenericList[") and t.endswith("]"):
            elems = _split_generic(t)
            if isinstance(d, list) and d and all(_is_shape(x) for x in d):
                ts = []
                for i, shp in enumerate(d):
                    info = _tensor_type(elems[i]) if i < len(elems) else None
                    ts.append(Tensor(tuple(shp), info[0] if info else None,
                                     info[1] if info else ""))
                if any(_tensor_type(e) for e in elems):
                    args.append(ts)
                    continue
            args.append(None)
            continue
        if t == "TensorList":
            if isinstance(d, list) and d and all(_is_shape(x) for x in d):
                args.append([Tensor(tuple(x), None, "") for x in d])
            else:
                args.append([])  # a tensor list whose shapes were not recorded
            continue
        info = _tensor_type(t)
        if info is not None and _is_shape(d):
            args.append(Tensor(tuple(d), info[0], info[1]))
        else:
            args.append(None)
    return args


# ---------------------------------------------------------------------------------------------
# helpers of the handlers (shared by the family modules)


class Unknown(Exception):
    """Shapes do not fit the formula (raised inside handlers, turned into known=False)."""


def tensor(args: list[Arg], i: int) -> Tensor:
    """Argument ``i`` as a tensor; :class:`Unknown` if it is missing or not a tensor."""
    if i < len(args) and isinstance(args[i], Tensor):
        return args[i]
    raise Unknown


def opt_tensor(args: list[Arg], i: int) -> Tensor | None:
    """Argument ``i`` if it is a tensor, else None (optional arguments: bias, weight ...)."""
    return args[i] if i < len(args) and isinstance(args[i], Tensor) else None


def tensor_list(args: list[Arg], i: int) -> list[Tensor]:
    """Argument ``i`` as a tensor list; :class:`Unknown` if it is missing or not a list."""
    if i < len(args) and isinstance(args[i], list):
        return args[i]
    raise Unknown


def _all_tensors(args: list[Arg]) -> list[Tensor]:
    out: list[Tensor] = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, list):
            out.extend(a)
    return out


def size_of(t: Tensor, fallback: int) -> int:
    """Item size of ``t`` in bytes, ``fallback`` when its type was not recorded."""
    return t.itemsize if t.itemsize is not None else fallback


def nbytes(ts: Sequence[Tensor], fallback: int) -> float:
    """Bytes of the tensors ``ts`` (untyped ones at ``fallback`` bytes an element)."""
    return float(sum(t.numel * size_of(t, fallback) for t in ts))


_FLOAT_DTYPES = frozenset({"fp32", "fp64", "fp16", "bf16", "fp8", "complex32", "complex64",
                           "complex128"})


def main_size_dtype(args: list[Arg]) -> tuple[int, str]:
    """Item size and dtype of the op's result: its first floating-point tensor (``where(cond,
    x, y)`` computes in ``x``'s type, not the mask's), else its first typed tensor, else fp32."""
    typed = [t for t in _all_tensors(args) if t.itemsize is not None]
    for t in typed:
        if t.dtype in _FLOAT_DTYPES:
            return size_of(t, 4), t.dtype
    if typed:
        return size_of(typed[0], 4), typed[0].dtype
    return _DEFAULT_ITEMSIZE


def concrete_at(concrete: Sequence[Any] | None, i: int) -> Any:
    """Recorded concrete value of argument ``i`` (``Concrete Inputs``), None if not recorded."""
    if concrete is None or i >= len(concrete):
        return None
    v = concrete[i]
    return None if v in ("", None) else v


def ints(v: Any, n: int, default: int) -> tuple[int, ...]:
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


def as_bool(v: Any, default: bool) -> bool:
    """A recorded boolean argument (``"True"``, ``1`` ...), ``default`` when not recorded."""
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1")
    return bool(v)


Handler = Callable[[str, list[Arg], Any], Work]
