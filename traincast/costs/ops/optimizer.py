"""Optimizer steps: ``_foreach_<op>`` (FLOPs per element of ``self``, ``_FOREACH_FLOPS``)
and the fused Adam/AdamW/SGD/Adagrad kernels (``_fused_*``).
"""

from __future__ import annotations

from typing import Any

from traincast.costs.ops import base as ops
from traincast.costs.ops.base import Arg, Handler, Unknown, Work

# _foreach_<op>: FLOPs per element of ``self``.
_FOREACH_FLOPS = {"addcmul": 3, "addcdiv": 3, "lerp": 3, "zero": 0, "copy": 0, "norm": 2,
                  "sqrt": 1, "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "maximum": 1,
                  "minimum": 1, "exp": 1, "reciprocal": 1, "sign": 1, "abs": 1, "pow": 1,
                  "clamp_min": 1, "clamp_max": 1}


def _foreach(name: str, args: list[Arg], concrete: Any) -> Work:
    """``_foreach_<op>(_)(self: TensorList, other: TensorList | Scalar(s) ...)``.

    The per-tensor loop of ``torch/optim`` ``_multi_tensor_*`` steps: one elementwise op over
    every tensor of ``self``. ``n`` = total elements of ``self``; FLOPs ``k·n`` (k from
    ``_FOREACH_FLOPS``, 1 if unlisted); bytes: each tensor-list argument read once and the
    result written once (``(lists + 1)·n·s``; ``zero_`` only writes, ``norm`` only reads,
    ``copy_`` reads the source and writes ``self``).
    """
    lists = [a for a in args if isinstance(a, list) and a]
    if not lists or not isinstance(args[0], list) or not args[0]:
        raise Unknown
    op = name[len("_foreach_"):].rstrip("_")
    selfs = lists[0]
    size, dtype = ops.main_size_dtype(args)
    n = sum(t.numel for t in selfs)
    width = sum(ops.nbytes(lst, size) for lst in lists)
    own = ops.nbytes(selfs, size)
    if op == "zero":
        nbytes = own  # write only
    elif op in ("norm", "copy"):
        nbytes = width  # norm reads only; copy reads src and writes self
    else:
        nbytes = width + own
    return Work(float(_FOREACH_FLOPS.get(op, 1) * n), float(nbytes), "optimizer", True, dtype)


def _fused_optimizer(name: str, args: list[Arg], concrete: Any) -> Work:
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
    params = ops.tensor_list(args, 0)
    if not params:
        raise Unknown
    size, dtype = ops.main_size_dtype(args)
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
        raise Unknown
    return Work(flops * n, passes * n * size, "optimizer", True, dtype)


HANDLERS: dict[str, Handler] = {
    "_fused_adam_": _fused_optimizer, "_fused_adamw_": _fused_optimizer,
    "_fused_adam": _fused_optimizer, "_fused_adamw": _fused_optimizer,
    "_fused_sgd_": _fused_optimizer, "_fused_sgd": _fused_optimizer,
    "_fused_adagrad_": _fused_optimizer, "_fused_adagrad": _fused_optimizer,
}

#: ``_foreach_<op>`` ops, by name prefix.
FOREACH_PREFIX = "_foreach_"
foreach = _foreach
