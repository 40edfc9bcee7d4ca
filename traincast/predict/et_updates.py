"""Parameter updates of an execution trace, as the from-ET predictor times them.

* **In place.** ``torch.optim`` on a CPU updates each parameter with in-place elementwise ops
  (SGD: ``param.add_(grad, alpha=-lr)``; Adam: ``lerp_``, ``mul_``, ``addcmul_``,
  ``addcdiv_``): no tensor is allocated, unlike the out-of-place ``torch.add`` that the
  ``elementwise`` family measures (whose fresh output of a large tensor is faulted in page by
  page). An in-place binary op (:data:`INPLACE_BINARY`) of the optimizer step on a tensor of
  :data:`UPDATE_MIN_BYTES` or more is timed by the ``update`` family (``n`` = elements of
  ``self``) when the models have one; smaller ones stay ``elementwise``.
* **Sparse.** With ``nn.EmbeddingBag(sparse=True)`` the table's gradient is a sparse COO
  tensor and SGD's ``add_`` touches only the looked-up rows. The ET records that ``add_``
  with the table's dense shape on both inputs; what tells it apart are the sparse queries
  the op makes (:data:`SPARSE_CHILDREN`, among its children and theirs). Its rows: the indices of the table's sparse
  backward (``_embedding_bag_sparse_backward`` / ``embedding_sparse_backward``, input 1),
  carried to the ``AccumulateGrad`` of the same ``(rows, dim)`` parameter that follows it and
  from there, first in first out per shape, to the update, timed by the ``sparse_update``
  family (``E`` rows, ``N`` looked-up rows, width ``D``). The sparse
  backward itself (``_embedding_bag_backward`` calling ``_embedding_bag_sparse_backward``)
  makes no dense gradient: it gathers the ``N`` looked-up rows of the output gradient into
  the COO values, timed as a ``movement`` ``index_select`` of ``N`` rows of width ``D``
  (not as the dense backward, which zeroes a whole table-sized gradient).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

#: in-place binary elementwise ops (``self`` updated)
INPLACE_BINARY = frozenset({"aten::add_", "aten::sub_", "aten::mul_", "aten::div_",
                            "aten::addcmul_", "aten::addcdiv_", "aten::lerp_"})
#: ops a dense-sparse ``add_`` calls on its sparse operand (absent for dense operands)
SPARSE_CHILDREN = frozenset({"aten::sparse_dim", "aten::is_coalesced", "aten::_nnz",
                             "aten::_values", "aten::_indices", "aten::coalesce",
                             "aten::_coalesce"})
#: smallest tensor (float32 bytes) whose in-place update is timed cold: a per-core L2 (1 MiB on
#: current server cores) holds a smaller one from the backward that wrote its gradient, and
#: there the warm elementwise measurement (dispatch-dominated) fits better
UPDATE_MIN_BYTES = 2**20
_SPARSE_BWD = frozenset({"aten::_embedding_bag_sparse_backward",
                         "aten::embedding_sparse_backward"})


def shape_list(text: str) -> list[Any]:
    """The list of shapes in an ET shapes field (JSON text); [] when it is not one."""
    try:
        v = json.loads(text) if text else []
    except ValueError:
        return []
    return v if isinstance(v, list) else []


def is_dims(s: Any, n: int | None = None) -> bool:
    """Whether ``s`` is a tensor's dimensions: a non-empty list of positive ints (``n`` of
    them when given)."""
    return (isinstance(s, list) and len(s) > 0 and all(isinstance(x, int) and x > 0 for x in s)
            and (n is None or len(s) == n))


def sparse_updates(df: pd.DataFrame, children: dict[int, list[int]], ids: list[int]
                   ) -> dict[int, tuple[str, str, dict[str, Any]]]:
    """``{node id: (family, direction, parameters)}`` of the sparse embedding gradients and
    updates among ``ids`` (node ids in order; see the module docstring): every sparse
    ``_embedding_bag_backward`` and every dense-sparse ``add_``/``sub_`` whose rows are
    found (the others are left to the caller's usual mapping)."""
    pending: int | None = None
    nnz_by_shape: dict[tuple[int, int], list[int]] = {}
    out: dict[int, tuple[str, str, dict[str, Any]]] = {}
    for i in ids:
        name = df.at[i, "name"]
        if name == "aten::_embedding_bag_backward":
            kids = {df.at[c, "name"] for c in children.get(i, [])}
            sh = shape_list(df.at[i, "input_shapes"])
            if kids & _SPARSE_BWD and len(sh) > 1 and is_dims(sh[0], 2) and is_dims(sh[1], 1):
                out[i] = ("movement", "fwd", {"rows": sh[1][0], "cols": sh[0][1],
                                              "op": "index_select", "dtype": "float32"})
        elif name in _SPARSE_BWD:
            sh = shape_list(df.at[i, "input_shapes"])
            if len(sh) > 1 and is_dims(sh[1], 1):
                pending = sh[1][0]
        elif name == "torch::autograd::AccumulateGrad" and pending is not None:
            sh = shape_list(df.at[i, "input_shapes"])
            if sh and is_dims(sh[0], 2):
                nnz_by_shape.setdefault((sh[0][0], sh[0][1]), []).append(pending)
                pending = None
        elif name in ("aten::add_", "aten::sub_"):
            kids = [c for k in children.get(i, []) for c in (k, *children.get(k, []))]
            if not {df.at[c, "name"] for c in kids} & SPARSE_CHILDREN:
                continue
            sh = shape_list(df.at[i, "input_shapes"])
            if not sh or not is_dims(sh[0], 2):
                continue
            queue = nnz_by_shape.get((sh[0][0], sh[0][1]))
            if queue:
                out[i] = ("sparse_update", "fwd", {"E": sh[0][0], "N": queue.pop(0),
                                                   "D": sh[0][1], "dtype": "float32"})
    return out


def inplace_update(name: str, fam: tuple[str, str, dict[str, Any]] | None, have_update: bool
                   ) -> tuple[str, str, dict[str, Any]] | None:
    """The ``update`` family for an in-place binary op mapped to ``elementwise`` on a tensor
    of at least :data:`UPDATE_MIN_BYTES` (``have_update``: the models include it); ``fam``
    unchanged otherwise."""
    if not have_update or fam is None or name not in INPLACE_BINARY or fam[0] != "elementwise":
        return fam
    p = fam[2]
    if p["n"] * 4 < UPDATE_MIN_BYTES:
        return fam
    return "update", "fwd", {"n": p["n"], "dtype": "float32"}
