"""``traincast.plan``: predict one parallel layout of a training step.

The step is a generated execution graph (:mod:`traincast.plan.transformer`,
:mod:`traincast.plan.dlrm`) simulated by the same engine as trace replay; memory comes from
:mod:`traincast.plan.memory`. Metric definitions:

- ``iteration_time_s``: simulated step time (end of the last optimizer step).
- ``tokens_per_s``: ``global_batch * seq / iteration_time`` (samples/s for DLRM).
- ``tflops_per_gpu``: model FLOPs per step / (iteration time * GPUs) / 1e12. Model FLOPs count
  the forward GEMM/attention work three times (forward + 2x backward) and no recomputation:
  Narayanan et al. SC'21 eq. 3 in general form.
- ``mfu_pct`` / ``hfu_pct``: model / hardware FLOP/s utilisation, % of the GPU's catalog peak
  for the dtype; hardware FLOPs include recomputation (Chowdhery et al., "PaLM", 2022, App. B;
  Korthikanti et al. 2023 Sec. 5).
- ``bubble_pct``: mean over pipeline stages of the time the stage's compute stream is idle
  (neither computing, nor in a tensor-parallel collective or a pipeline send) between the step
  start and the end of the pipeline's last backward pass, % of the step (0 without
  pipelining). Emerges from the
  simulated schedule: 1F1B with ``m`` micro-batches on ``p`` stages gives close to
  ``(p-1)/(m+p-1)`` when stages are balanced (Narayanan et al. SC'21 Sec. 2.2.1).
- ``exposed_comm_s``: on the stage that finishes last, time some collective is in flight
  while no compute runs (tensor-parallel collectives are always exposed; overlapped gradient
  buckets only where they outlast the backward pass).
- ``memory_gib_per_gpu`` / ``fits``: the most loaded stage's memory against the catalog
  capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.comm import CommModel
from traincast.plan.builder import COMM, COMPUTE, PlanTimeline
from traincast.plan.costs import PlanCalibration, PlanCosts
from traincast.plan.memory import transformer_memory_cached as transformer_memory
from traincast.plan.spec import Layout, PlanError, SystemSpec, TransformerSpec, check_fit
from traincast.plan.step import build_transformer_graph
from traincast.trace.intervals import union_length
from traincast.util.display import html_scalars

GIB = 2.0**30


@dataclass
class PlanResult:
    """Prediction for one layout. ``to_dict`` is the JSON contract of ``traincast plan``."""

    layout: Layout
    iteration_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    mfu_pct: float
    hfu_pct: float
    bubble_pct: float
    exposed_comm_s: float
    memory_gib_per_gpu: float
    fits: bool | None
    memory: dict[str, float] = field(default_factory=dict)
    breakdown: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    timeline: PlanTimeline | None = field(default=None, repr=False)

    def _repr_html_(self) -> str:
        """Jupyter display: the scalar fields of :meth:`to_dict` as metric/value rows."""
        return html_scalars(type(self).__name__, self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        lay = self.layout
        return {
            "iteration_time_s": self.iteration_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu_pct": self.mfu_pct,
            "hfu_pct": self.hfu_pct,
            "bubble_pct": self.bubble_pct,
            "exposed_comm_s": self.exposed_comm_s,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "fits": self.fits,
            "layout": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp,
                       "micro_batch": lay.micro_batch, "global_batch": lay.global_batch,
                       "micro_batches": lay.micro_batches, "recompute": lay.recompute,
                       "sequence_parallel": lay.sequence_parallel, "zero": lay.zero,
                       "schedule": lay.schedule, "virtual_stages": lay.virtual_stages,
                       "ep": lay.ep},
            "memory_gib": self.memory,
            "breakdown_s": self.breakdown,
            "notes": self.notes,
        }


def _exposed(ops: pd.DataFrame) -> float:
    """Time in comm ops of ``ops`` not covered by its compute ops (ns)."""
    comm = ops[(ops["category"] == COMM) & (ops["dur_ns"] > 0)][["start_ns", "end_ns"]]
    comp = ops[(ops["category"] == COMPUTE) & (ops["dur_ns"] > 0)][["start_ns", "end_ns"]]
    if comm.empty:
        return 0.0
    both = np.vstack([comm.to_numpy(float), comp.to_numpy(float)])
    k = comp.to_numpy(float)
    return float(union_length(both[:, 0], both[:, 1])) - float(union_length(k[:, 0], k[:, 1]))


def plan(model: TransformerSpec, system: SystemSpec, layout: Layout, *,
         calibration: PlanCalibration | None = None, comm: CommModel | None = None,
         keep_timeline: bool = False, costs: PlanCosts | None = None) -> PlanResult:
    """Predict one training step of ``model`` on ``system`` with ``layout``.

    Args:
        model: the workload (a :class:`TransformerSpec`; DLRM: :func:`traincast.plan.dlrm.plan_dlrm`).
        system: GPUs and links.
        layout: the parallel layout; ``global_batch`` None means one micro-batch per step.
        calibration: compute/comm efficiencies (default: the shipped calibration).
        comm: a fitted collective model replacing the link-based one.
        keep_timeline: keep the simulated ops (``PlanResult.timeline``).
        costs: prebuilt :class:`PlanCosts` (search reuses one per system).

    Raises:
        PlanError: the layout does not fit the model/system (``tp*pp*dp`` != GPUs, ``tp``
            not dividing heads...), unknown GPU, absurd sizes.
    """
    if not isinstance(model, TransformerSpec):
        raise PlanError(f"plan() takes a TransformerSpec, got {type(model).__name__}")
    check_fit(model, system, layout)
    pc = costs or PlanCosts.build(system, model.dtype, calibration, comm)
    tg = build_transformer_graph(model, layout, pc)
    tmpl = tg.template
    dur = tmpl.durations(tg.values[None])
    times = tmpl.simulate(dur)  # the search's batched path, with a batch of one
    tl = tmpl.timeline(times[0], tmpl.graph(dur[0])) if keep_timeline else None
    return plan_result(model, system, layout, pc, tg.costs, tmpl.metrics(times, layout.pp)[0],
                       n_ops=tmpl.n_ops, timeline=tl)


def plan_result(model: TransformerSpec, system: SystemSpec, layout: Layout, pc: PlanCosts,
                sc: Any, met: dict[str, float], *, n_ops: int,
                timeline: PlanTimeline | None = None) -> PlanResult:
    """The :class:`PlanResult` of a simulated step from its metrics
    (:meth:`GraphTemplate.metrics <traincast.plan.template.GraphTemplate.metrics>`): one place
    for both the single plan and the batched search."""
    T = met["makespan_ns"] * 1e-9
    gb = layout.global_batch or layout.micro_batch * layout.dp
    peak = pc.peak_flops
    tflops = sc.model_flops / T / system.gpus / 1e12
    hfu = sc.hardware_flops / T / system.gpus / peak * 100
    mems = [transformer_memory(model, layout, pc.hbm_bytes, stage=s)
            for s in sorted({0, layout.pp - 1})]
    worst = max(mems, key=lambda mb: mb.total)
    notes = [f"simulated {n_ops} ops of one pipeline replica ({layout.pp} stage ranks)",
             f"costs: {pc.calibration.source}"]
    return PlanResult(
        layout=layout, iteration_time_s=T, tokens_per_s=gb * model.seq / T,
        tflops_per_gpu=tflops, mfu_pct=tflops * 1e12 / peak * 100, hfu_pct=hfu,
        bubble_pct=met["bubble_frac"] * 100, exposed_comm_s=met["exposed_comm_ns"] * 1e-9,
        memory_gib_per_gpu=worst.total / GIB, fits=worst.fits,
        memory={k: v for k, v in worst.to_gib().items() if k != "fits"},
        breakdown={"compute_s": met["compute_ns"] * 1e-9, "tp_comm_s": met["tp_comm_ns"] * 1e-9,
                   "optimizer_s": met["optimizer_ns"] * 1e-9},
        notes=notes, timeline=timeline)
