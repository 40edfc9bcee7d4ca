"""A DLRM step from fitted kernel models (``traincast fit``), per rank, for a table-wise placement.

The seed's way of predicting a configuration that never ran (Lin et al., arXiv 2404.12674,
Sec. 4-5): every kernel of the step is priced by a model fitted on microbenchmarks of the
target device (:class:`traincast.costs.kernel_models.KernelModels`), never by a trace of the
workload. Here the kernels are the ones a DLRM step launches (Naumov et al. 2019; the model of
:class:`traincast.plan.spec.DLRMSpec`):

* per table on its owner rank, over the **global** batch (table-wise model parallelism, DLRM
  Sec. 4): ``embedding_bag`` forward and backward (``B`` = global batch, ``E`` = rows, ``T`` = 1,
  ``L`` = pooling factor rounded, ``D`` = dim) and the SGD update of the dense table gradient
  (``elementwise`` add over ``rows * dim``);
* per rank over its **local** batch ``b = batch / ranks`` (data parallel): each MLP layer
  ``i -> o`` as ``gemm`` (op ``linear``, ``M = b``, ``N = o``, ``K = i``) forward and backward
  and its ReLU (``elementwise`` relu over ``b * o``, forward; its backward as an elementwise mul
  of the same size); the dot interaction of ``F = tables + 1`` features of width ``d`` as
  ``gemm`` (op ``bmm``, ``B = b``, ``M = N = F``, ``K = d``) forward and backward; the
  optimizer step over the MLP parameters (``optimizer`` sgd, ``n`` parameters in
  ``2 * layers`` tensors).

Collectives (the pooled-embedding all_to_all, the MLP gradients' all_reduce) and host overheads
are not in the kernel models and are left out: they are the same for every placement of tables
of one dim up to the per-rank split of the exchange, so the slowest rank's compute ranks
table-wise placements (what :func:`traincast.plan.sharders.pick_with_models` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pandas as pd

from traincast.plan.spec import LIMITS, DLRMSpec, PlanError

__all__ = ["ModelPredictor", "dense_ns", "model_step", "table_ns"]

#: plan dtype names -> the kernel benchmarks' dtype names
_DTYPE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16"}


class ModelPredictor(Protocol):
    """What is used of :class:`traincast.costs.kernel_models.KernelModels`."""

    def predict_ns(self, family_name: str, direction: str = "fwd", **sizes: Any) -> float: ...


def _dtype(model: DLRMSpec) -> str:
    try:
        return _DTYPE[model.dtype]
    except KeyError:
        raise PlanError(f"the kernel models have no dtype for {model.dtype!r}; use one of "
                        f"{', '.join(_DTYPE)}") from None


def table_ns(rows: int, dim: int, pooling: float, batch: int, models: ModelPredictor
             ) -> dict[str, float]:
    """One table's work in one step on its owner rank, ns: ``fwd``, ``bwd`` (embedding-bag
    forward and backward over the global ``batch``) and ``update`` (SGD over the dense
    ``rows x dim`` gradient). ``pooling`` is rounded to a whole number of lookups (>= 1)."""
    sizes = {"B": int(batch), "E": int(rows), "T": 1, "L": max(1, round(float(pooling))),
             "D": int(dim)}
    return {"fwd": models.predict_ns("embedding_bag", "fwd", **sizes),
            "bwd": models.predict_ns("embedding_bag", "bwd", **sizes),
            "update": models.predict_ns("elementwise", "fwd", n=int(rows) * int(dim),
                                        op="add")}


def _layers(widths: tuple[int, ...], inputs: int) -> list[tuple[int, int]]:
    out, prev = [], inputs
    for w in widths:
        out.append((prev, int(w)))
        prev = int(w)
    return out


def dense_ns(model: DLRMSpec, local_batch: int, models: ModelPredictor) -> dict[str, float]:
    """The data-parallel part of one rank's step, ns: ``mlp_fwd``, ``mlp_bwd`` (bottom and top
    MLPs with their ReLUs), ``interaction_fwd``, ``interaction_bwd`` (dot interaction as a
    batched GEMM) and ``optimizer`` (SGD over the MLP parameters); module docstring.

    Raises:
        PlanError: a dtype the kernel models do not cover; ``local_batch`` < 1.
        traincast.errors.ParameterError: the models lack a family/direction used here.
    """
    if local_batch < 1:
        raise PlanError(f"local batch must be >= 1, got {local_batch}")
    dt = _dtype(model)
    b = int(local_batch)
    d = int(model.bottom_mlp[-1])
    F = len(model.tables) + 1
    layers = (_layers(model.bottom_mlp, model.dense_features)
              + _layers(model.top_mlp, d + F * (F - 1) // 2))
    out = {"mlp_fwd": 0.0, "mlp_bwd": 0.0}
    for i, o in layers:
        g = {"B": 1, "M": b, "N": o, "K": i, "op": "linear", "dtype": dt}
        out["mlp_fwd"] += (models.predict_ns("gemm", "fwd", **g)
                           + models.predict_ns("elementwise", "fwd", n=b * o, op="relu",
                                               dtype=dt))
        out["mlp_bwd"] += (models.predict_ns("gemm", "bwd", **g)
                           + models.predict_ns("elementwise", "fwd", n=b * o, op="mul",
                                               dtype=dt))
    bm = {"B": b, "M": F, "N": F, "K": d, "op": "bmm", "dtype": dt}
    out["interaction_fwd"] = models.predict_ns("gemm", "fwd", **bm)
    out["interaction_bwd"] = models.predict_ns("gemm", "bwd", **bm)
    params = sum(i * o + o for i, o in layers)
    out["optimizer"] = models.predict_ns("optimizer", "fwd", n=params, tensors=2 * len(layers),
                                         op="sgd")
    return out


def model_step(model: DLRMSpec, ranks: int, batch: int, placement: Mapping[int, int],
               models: ModelPredictor) -> pd.DataFrame:
    """Per rank, the kernel models' compute of one training step under a table-wise
    ``placement`` (table index -> rank) of ``model`` on ``ranks`` ranks with global ``batch``.

    Returns one row per rank: ``rank``, ``tables`` (count), ``lookups_ns`` (its tables'
    forward + backward), ``update_ns`` (their SGD updates), ``dense_ns`` (MLPs, interaction,
    optimizer on the local batch), ``compute_ns`` (the sum). Units: ns.

    Raises:
        PlanError: ``ranks`` < 1, a batch that does not split over the ranks, a placement that
            misses a table or names a rank outside ``0..ranks-1``.
    """
    if not 1 <= ranks <= LIMITS["gpus"]:
        raise PlanError(f"ranks must be between 1 and {int(LIMITS['gpus']):,}, got {ranks}")
    if batch > LIMITS["batch"]:
        raise PlanError(f"batch must be at most {int(LIMITS['batch']):,}, got {batch}")
    if batch < ranks or batch % ranks:
        raise PlanError(f"global batch {batch} does not split over {ranks} ranks")
    n = len(model.tables)
    if set(placement) != set(range(n)):
        raise PlanError(f"placement must give a rank for each of the {n} tables")
    if any(not 0 <= int(r) < ranks for r in placement.values()):
        raise PlanError(f"placement names a rank outside 0..{ranks - 1}")
    dense = sum(dense_ns(model, batch // ranks, models).values())
    rows = [{"rank": r, "tables": 0, "lookups_ns": 0.0, "update_ns": 0.0, "dense_ns": dense}
            for r in range(ranks)]
    for t, spec in enumerate(model.tables):
        c = table_ns(spec.rows, spec.dim, spec.pooling, batch, models)
        row = rows[int(placement[t])]
        row["tables"] += 1
        row["lookups_ns"] += c["fwd"] + c["bwd"]
        row["update_ns"] += c["update"]
    df = pd.DataFrame(rows)
    df["compute_ns"] = df["lookups_ns"] + df["update_ns"] + df["dense_ns"]
    return df
