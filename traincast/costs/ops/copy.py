"""Copies: ``copy_`` (bytes of ``src`` read and ``self`` written, no FLOPs) and ``item``
(one element to the host).

Each op family module maps op base names to handlers in ``HANDLERS``
(:mod:`traincast.costs.ops.registry` looks names up); a handler
``(base_name, args, concrete) -> Work`` raises ``_Unknown`` when the shapes do not fit.
"""

from __future__ import annotations

from typing import Any

from traincast.costs.ops.base import Handler, Work, _Arg, _size_of, _t


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


HANDLERS: dict[str, Handler] = {
    "copy_": _copy, "_copy_from": _copy, "_copy_from_and_resize": _copy,
    "item": _item, "_local_scalar_dense": _item,
}
