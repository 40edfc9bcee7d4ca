"""DLRM planning: a training step of a sharded DLRM predicted as per-rank execution graphs.

DLRM as in Naumov et al. (arXiv:1906.00091) and ``facebookresearch/dlrm``, distributed as in
TorchRec (MLPs data parallel, embedding tables model parallel or replicated). One module per
concept:

- :mod:`~traincast.plan.dlrm.sharding`: shards of each table (table, row, column, data),
  their greedy placement on ranks, the lookup-cost model (:func:`resolve_sharding`,
  :func:`catalog_embedding_model`);
- :mod:`~traincast.plan.dlrm.step_model`: the step as a graph per rank, simulated
  (:func:`plan_dlrm`), its result :class:`DLRMPlanResult` (:mod:`~traincast.plan.dlrm.result`);
- :mod:`~traincast.plan.dlrm.sharding_search`: sharding plans ranked by simulated step
  (:func:`search_sharding`, :func:`default_candidates`, :func:`why_best`);
- :mod:`~traincast.plan.dlrm.from_trace`: the model, batch and placement of a traced run
  (:func:`dlrm_spec_from_trace`, :func:`load_dlrm_trace`, :func:`traced_gpu`);
- :mod:`~traincast.plan.dlrm.host_fit`: host time per kernel launch measured on a trace
  (:func:`fit_host_overhead`, :class:`HostFit`, :func:`fit_to_model`, :func:`calibration_with`).

Every name below is importable from ``traincast.plan.dlrm``.
"""

from __future__ import annotations

from traincast.plan.dlrm.from_trace import (
    TraceDLRM,
    dlrm_spec_from_trace,
    load_dlrm_trace,
    lookup_gap_note,
    trace_folders,
    traced_gpu,
)
from traincast.plan.dlrm.host_fit import (
    HostFit,
    calibration_with,
    fit_host_overhead,
    fit_to_model,
    per_modelled_kernel,
)
from traincast.plan.dlrm.result import DLRMPlanResult
from traincast.plan.dlrm.sharding import catalog_embedding_model, on_gpu, resolve_sharding
from traincast.plan.dlrm.sharding_search import default_candidates, search_sharding, why_best
from traincast.plan.dlrm.step_model import plan_dlrm

__all__ = [
    "DLRMPlanResult",
    "HostFit",
    "TraceDLRM",
    "calibration_with",
    "catalog_embedding_model",
    "default_candidates",
    "dlrm_spec_from_trace",
    "fit_host_overhead",
    "fit_to_model",
    "load_dlrm_trace",
    "lookup_gap_note",
    "on_gpu",
    "per_modelled_kernel",
    "plan_dlrm",
    "resolve_sharding",
    "search_sharding",
    "trace_folders",
    "traced_gpu",
    "why_best",
]
