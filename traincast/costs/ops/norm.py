"""Normalisations (layer, batch, group, RMS norm, forward and backward): FLOPs per element
as written per op, bytes = the passes over the input plus the affine parameters.
"""

from __future__ import annotations

from typing import Any

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Tensor, Work


def _layer_norm(name: str, args: list[Arg], concrete: Any) -> Work:
    """``(native_)layer_norm(x, normalized_shape, weight, bias, ...)``: ``~5·n`` FLOPs (mean,
    variance, subtract, scale, affine); bytes: one read and one write of ``x`` (a row is
    normalised on-chip: 2 passes) + weight/bias + per-row mean and rstd (fp32)."""
    x = ops.tensor(args, 0)
    size = ops.size_of(x, 4)
    params = [t for t in args[1:4] if isinstance(t, Tensor)]
    c = params[0].numel if params else (x.shape[-1] if x.shape else 1)
    rows = x.numel // max(c, 1)
    nbytes = 2.0 * x.numel * size + ops.nbytes(params, size) + 2.0 * rows * 4
    return Work(5.0 * x.numel, nbytes, "norm", True, x.dtype)


def _layer_norm_backward(name: str, args: list[Arg], concrete: Any) -> Work:
    """``native_layer_norm_backward(grad, x, shape, mean, rstd, weight, bias, mask)``: ``~10·n``
    FLOPs (twice the forward); bytes: read grad and ``x``, write grad-input (3 passes), plus
    weight and the weight/bias gradients."""
    g, x = ops.tensor(args, 0), ops.tensor(args, 1)
    size = ops.size_of(x, 4)
    params = [t for t in args[3:7] if isinstance(t, Tensor)]
    w = ops.opt_tensor(args, 5)
    nbytes = 3.0 * x.numel * size + ops.nbytes(params, size) + (2 * w.numel * size if w else 0)
    del g
    return Work(10.0 * x.numel, float(nbytes), "norm", True, x.dtype)


def _batch_norm(name: str, args: list[Arg], concrete: Any) -> Work:
    """Batch/group norm forward ``(x, weight, bias, running_mean, running_var, training, ...)``:
    ``~5·n`` FLOPs; bytes 3 passes over ``x`` in training (statistics read, normalise read +
    write), 2 in inference (``training`` from ``concrete`` when known, else training)."""
    x = ops.tensor(args, 0)
    size = ops.size_of(x, 4)
    training = ("no_training" not in name
                and (ops.as_bool(ops.concrete_at(concrete, 5), True) if "batch_norm" in name
                     else True))
    passes = 3.0 if training else 2.0
    params = [t for t in args[1:5] if isinstance(t, Tensor)]
    return Work(5.0 * x.numel, passes * x.numel * size + ops.nbytes(params, size), "norm", True,
                x.dtype)


def _batch_norm_backward(name: str, args: list[Arg], concrete: Any) -> Work:
    """Batch/group norm backward ``(grad, x, ...)``: ``~10·n`` FLOPs; bytes 5 passes (reduce
    pass reads grad and ``x``; the grad-input pass reads both again and writes)."""
    g, x = ops.tensor(args, 0), ops.tensor(args, 1)
    size = ops.size_of(x, 4)
    params = [t for t in args[2:] if isinstance(t, Tensor)]
    del g
    return Work(10.0 * x.numel, 5.0 * x.numel * size + ops.nbytes(params, size), "norm", True,
                x.dtype)


def _rms_norm(name: str, args: list[Arg], concrete: Any) -> Work:
    """RMSNorm ``(x, [residual,] weight, eps)``: ``4·n`` FLOPs (square, sum, scale, weight);
    bytes one read and one write of ``x``; the fused add variant also reads and writes the
    residual (``5·n`` FLOPs, 4 passes)."""
    x = ops.tensor(args, 0)
    size = ops.size_of(x, 4)
    fused = "add" in name
    w = [t for t in args[1:] if isinstance(t, Tensor) and t.numel < x.numel]
    passes = 4.0 if fused else 2.0
    return Work((5.0 if fused else 4.0) * x.numel, passes * x.numel * size + ops.nbytes(w, size),
                "norm", True, x.dtype)


HANDLERS: dict[str, Handler] = {
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
}
