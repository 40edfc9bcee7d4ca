"""Copies: ``copy_`` (bytes of ``src`` read and ``self`` written, no FLOPs) and ``item``
(one element to the host).
"""

from __future__ import annotations

from typing import Any

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Work


def _copy(name: str, args: list[Arg], concrete: Any) -> Work:
    """``copy_(self, src)``: bytes only, read ``src`` + write ``self`` (item sizes may differ)."""
    dst, src = ops.tensor(args, 0), ops.tensor(args, 1)
    n = max(dst.numel, src.numel)
    nbytes = n * ops.size_of(dst, 4) + src.numel * ops.size_of(src, 4)
    return Work(0.0, float(nbytes), "memcpy", True, dst.dtype)


def _item(name: str, args: list[Arg], concrete: Any) -> Work:
    """``item``/``_local_scalar_dense``: one element copied to the host."""
    x = ops.tensor(args, 0)
    return Work(0.0, float(ops.size_of(x, 4)), "memcpy", True, x.dtype)


HANDLERS: dict[str, Handler] = {
    "copy_": _copy, "_copy_from": _copy, "_copy_from_and_resize": _copy,
    "item": _item, "_local_scalar_dense": _item,
}
