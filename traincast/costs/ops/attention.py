"""Scaled dot-product attention (math, flash, efficient, cuDNN kernels), forward
``2·B·H·L·S·E + 2·B·H·L·S·Ev`` and backward ``2·B·H·L·S·(3E + 2Ev)`` FLOPs, causal masks not
discounted (``torch/utils/flop_counter.py`` ``sdpa_flop_count``/``sdpa_backward_flop_count``).
"""

from __future__ import annotations

from typing import Any

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Unknown, Work


def _attn_flops(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], blhd: bool
                ) -> tuple[int, int, int, int, int, int]:
    """(B, Hq, L, S, E, Ev) from query/key/value shapes ([B, H, L, E] or [B, L, H, E])."""
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise Unknown
    if blhd:
        b, l_, h, e = q
        s, ev = k[1], v[3]
    else:
        b, h, l_, e = q
        s, ev = k[2], v[3]
    return b, h, l_, s, e, ev


def _sdpa(name: str, args: list[Arg], concrete: Any) -> Work:
    """Attention forward ``2·B·H·L·S·(E + Ev)``; bytes q, k, v read and output written.

    ``scaled_dot_product_attention`` and ``_scaled_dot_product_*_attention`` take
    ``[B, H, L, E]``; ``_flash_attention_forward`` / ``_efficient_attention_forward`` take
    ``[B, L, H, E]`` (the FLOP counter passes those shapes through unchanged; we transpose).
    Causal masking is not discounted (as in ``flop_counter.sdpa_flop``).
    """
    q, k, v = ops.tensor(args, 0), ops.tensor(args, 1), ops.tensor(args, 2)
    blhd = name in ("_flash_attention_forward", "_efficient_attention_forward")
    b, h, l_, s, e, ev = _attn_flops(q.shape, k.shape, v.shape, blhd)
    flops = 2.0 * b * h * l_ * s * (e + ev)
    size, dtype = ops.main_size_dtype(args)
    out = b * h * l_ * ev * size
    return Work(flops, ops.nbytes([q, k, v], size) + out, "attention", True, dtype)


def _sdpa_backward(name: str, args: list[Arg], concrete: Any) -> Work:
    """Attention backward: ``2·B·H·L·S·(3E + 2Ev)`` (``flop_counter.sdpa_backward_flop_count``:
    recompute scores, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q).

    Arguments ``(grad_out, q, k, v, out, ...)``; bytes read grad_out, q, k, v, out and write
    dq, dk, dv.
    """
    g, q, k, v = ops.tensor(args, 0), ops.tensor(args, 1), ops.tensor(args, 2), ops.tensor(args, 3)
    blhd = name in ("_flash_attention_backward", "_efficient_attention_backward")
    b, h, l_, s, e, ev = _attn_flops(q.shape, k.shape, v.shape, blhd)
    flops = 2.0 * b * h * l_ * s * (3 * e + 2 * ev)
    size, dtype = ops.main_size_dtype(args)
    out = ops.opt_tensor(args, 5 if name == "_efficient_attention_backward" else 4)
    read = ops.nbytes([g, q, k, v] + ([out] if out is not None else []), size)
    write = ops.nbytes([q, k, v], size)
    return Work(flops, read + write, "attention", True, dtype)


HANDLERS: dict[str, Handler] = {
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
}
