"""The result of one DLRM plan (:func:`traincast.plan.dlrm.plan_dlrm`): the JSON contract of
``traincast plan dlrm``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from traincast.plan.builder import PlanTimeline
from traincast.util.display import html_scalars

# ------------------------------------------------------------------ result


@dataclass
class DLRMPlanResult:
    """Prediction of one DLRM sharding plan. ``to_dict`` is the JSON contract of
    ``traincast plan dlrm``.

    Metrics: ``iteration_time_s`` the simulated step (end of the last rank's optimizer);
    ``samples_per_s = batch / iteration_time_s``; ``exposed_comm_s`` the largest, over ranks,
    time some collective of the rank is in flight while its compute stream is idle;
    ``memory_gib_per_gpu`` the most loaded rank (weights, gradients, optimizer state; no
    activations) and ``fits`` against the catalog capacity. ``placement``: table -> rank of
    the table-wise tables. ``breakdown``: collective durations (the group's), the slowest
    rank's lookups, per-rank dense work.

    ``per_rank``: one row per rank: ``rank, tables`` (shards owned, ``t3`` table-wise, ``t3r``
    row block, ``t3c`` column block, ``t3d`` replica), ``shards``, ``lookup_fwd_ns`` /
    ``lookup_bwd_ns`` (the rank's TBE calls), ``a2a_fwd_ns`` / ``a2a_bwd_ns`` (time of the
    rank's own pooled-embedding all_to_all traffic; the collective lasts the group's max),
    ``a2a_send_bytes`` / ``a2a_recv_bytes`` (forward), ``kernels`` (launches per step, see
    :mod:`traincast.plan.dlrm.step_model`), ``host_issue_ns`` (their issue time; 0 without a
    launch overhead), ``memory_gib``. ``kernels``: host phase -> kernels per rank. ``breakdown`` also holds
    ``host_issue_max_s``, the largest per-rank issue time.
    """

    sharding: tuple[str, ...]
    placement: dict[int, int]
    batch: int
    iteration_time_s: float
    samples_per_s: float
    exposed_comm_s: float
    memory_gib_per_gpu: float
    fits: bool | None
    per_rank: pd.DataFrame
    breakdown: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kernels: dict[str, list[int]] = field(default_factory=dict)
    timeline: PlanTimeline | None = field(default=None, repr=False)

    def _repr_html_(self) -> str:
        """Jupyter display: the scalar fields of :meth:`to_dict` as metric/value rows."""
        return html_scalars(type(self).__name__, self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        pr = self.per_rank.copy()
        return {
            "iteration_time_s": self.iteration_time_s,
            "samples_per_s": self.samples_per_s,
            "exposed_comm_s": self.exposed_comm_s,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "fits": self.fits,
            "batch": self.batch,
            "sharding": list(self.sharding),
            "placement": {str(k): v for k, v in self.placement.items()},
            "per_rank": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                         for row in pr.to_dict(orient="records")],
            "breakdown_s": self.breakdown,
            "kernels": self.kernels,
            "notes": self.notes,
        }
