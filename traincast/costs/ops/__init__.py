"""Work of operators: FLOPs and bytes moved, per op call and per event of a trace.

:func:`op_work` turns one ATen (or fbgemm) operator call, as recorded by the PyTorch profiler
with ``record_shapes=True`` (Kineto ``Input Dims`` / ``Input type``) or by the execution trace
(``input_shapes`` / ``input_types``), into a :class:`Work`: floating-point operations, bytes
read plus written from device (or main) memory, the op family and whether traincast knows the
op at all. :func:`event_work` does it for every event of a
:class:`~traincast.trace.traceset.TraceSet` and hands each GPU kernel the work of the CPU op
that launched it.

Layout: :mod:`~traincast.costs.ops.base` (``Work``, parsing recorded inputs),
one module per op family with its formulas and a ``HANDLERS`` table
(:mod:`~traincast.costs.ops.gemm`, :mod:`~traincast.costs.ops.conv`,
:mod:`~traincast.costs.ops.attention`, :mod:`~traincast.costs.ops.embedding`,
:mod:`~traincast.costs.ops.elementwise`, :mod:`~traincast.costs.ops.norm`,
:mod:`~traincast.costs.ops.optimizer`, :mod:`~traincast.costs.ops.copy`), the registry that
maps op names to them (:mod:`~traincast.costs.ops.registry`) and the joining with a trace
(:mod:`~traincast.costs.ops.join`).

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
  per arithmetic operation per element, as written per op; bytes are the tensors read plus
  the tensors written, each once ("one pass"), unless the op needs more passes (noted).
- Views, allocations and metadata ops (``view``, ``t``, ``empty`` ...) do no work: known, zero.
  Composite ops whose work is done by nested ops (``aten::to``, ``aten::clone``,
  ``aten::contiguous``, autograd nodes ``*Backward0``) are *unknown* (``known=False``), so their
  children's work is not counted twice.
- When an input type is missing (Kineto records a ``TensorList`` without element types) the item
  size is taken from the op's other tensor inputs, else 4 bytes (fp32).
"""

from __future__ import annotations

from traincast.costs.ops.base import ITEMSIZE, Work, parse_inputs
from traincast.costs.ops.join import event_work
from traincast.costs.ops.registry import HANDLERS, op_work

__all__ = ["HANDLERS", "ITEMSIZE", "Work", "event_work", "op_work", "parse_inputs"]
