"""The op registry: an op name as recorded -> its family's handler -> :class:`Work`.

:func:`op_work` strips the namespace (``aten::``, ``_C::``, ``prims::``; ``fbgemm::``/``fb::``
only for the table-batched embedding lookups), then looks the base name up: exact names of
every family (:data:`HANDLERS`, from the modules of :mod:`traincast.costs.ops`), the
``_foreach_`` prefix (optimizer), views and allocations (known, zero work), composite ops whose
work their nested ops do (unknown, so it is not counted twice), then name stems of elementwise
ops, reductions and scans. Anything else is unknown (``known=False``, zero work).

Each family module maps op base names to handlers in its ``HANDLERS``; a handler
(:data:`~traincast.costs.ops.base.Handler`) takes ``(base_name, args, concrete)`` (``args``
from :func:`~traincast.costs.ops.base.parse_inputs`) and returns a :class:`Work`, or raises
:class:`~traincast.costs.ops.base.Unknown` when the shapes do not fit its formula; the
registry turns that (and malformed arguments) into ``known=False``. A family module's
docstring says only what that family counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from traincast.costs.ops import (
    attention,
    conv,
    copy,
    elementwise,
    embedding,
    gemm,
    norm,
    optimizer,
)
from traincast.costs.ops.base import Handler, Unknown, Work, parse_inputs
from traincast.errors import ParameterError
from traincast.trace.families import classify
from traincast.trace.schema import OP_FAMILIES

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

#: base op name -> handler, over all op families (the registry; TraceLens maps op names to
#: classes the same way).
HANDLERS: dict[str, Handler] = {
    **gemm.HANDLERS, **conv.HANDLERS, **attention.HANDLERS, **embedding.HANDLERS,
    **elementwise.HANDLERS, **norm.HANDLERS, **optimizer.HANDLERS, **copy.HANDLERS,
}

_NAMESPACE = re.compile(r"^(aten|_C|vllm|fbgemm|fb|torch_ext|prims)::")


def _handler(name: str) -> tuple[str, Handler | None, str]:
    """(base name, handler or None, what None means: ``zero`` / ``composite`` / ``unknown``)."""
    ns_match = _NAMESPACE.match(name)
    ns = ns_match.group(1) if ns_match else ""
    base = name[ns_match.end():] if ns_match else name
    if ns in ("fbgemm", "fb"):
        if base.startswith(embedding.FBGEMM_PREFIXES):
            return base, embedding.fbgemm_lookup, ""
        return base, None, "unknown"
    if ns not in ("aten", "_C", "prims"):
        return base, None, "unknown"
    if base in HANDLERS:
        return base, HANDLERS[base], ""
    if base.startswith(optimizer.FOREACH_PREFIX):
        return base, optimizer.foreach, ""
    if base in _ZERO_WORK:
        return base, None, "zero"
    if base in _COMPOSITE:
        return base, None, "composite"
    handler = elementwise.by_stem(base.rstrip("_"))
    if handler is not None:
        return base, handler, ""
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
    except (Unknown, TypeError, ValueError, IndexError, ZeroDivisionError):
        return Work(0.0, 0.0, _family(name), False, "", name)
    if not (math.isfinite(w.flops) and math.isfinite(w.bytes)) or w.flops < 0 or w.bytes < 0:
        return Work(0.0, 0.0, w.family, False, "", name)
    return replace(w, op=name)
