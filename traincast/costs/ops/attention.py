"""Scaled dot-product attention (math, flash, efficient, cuDNN kernels), forward
``2·B·H·L·S·E + 2·B·H·L·S·Ev`` and backward ``2·B·H·L·S·(3E + 2Ev)`` FLOPs, causal masks not
discounted (``torch/utils/flop_counter.py`` ``sdpa_flop_count``/``sdpa_backward_flop_count``).

Each op family module maps op base names to handlers in ``HANDLERS``
(:mod:`traincast.costs.ops.registry` looks names up); a handler
``(base_name, args, concrete) -> Work`` raises ``_Unknown`` when the shapes do not fit.
"""

from __future__ import annotations

from typing import Any

from traincast.costs.ops.base import Handler, Work, _Arg, _main, _nbytes, _opt_t, _t, _Unknown


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
