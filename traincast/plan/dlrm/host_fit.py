"""Host time per kernel launch measured on a trace (:func:`fit_host_overhead`), the
``launch_overhead_us`` of the DLRM (and transformer) host model; its re-expression per kernel
of the model (:func:`per_modelled_kernel`, :func:`fit_to_model`) and a plan calibration that
carries it (:func:`calibration_with`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traincast.plan.costs import PlanCalibration, default_calibration
from traincast.plan.dlrm.result import DLRMPlanResult
from traincast.plan.dlrm.step_model import plan_dlrm
from traincast.plan.spec import DLRMSpec, Layout, PlanError, SystemSpec
from traincast.trace.intervals import union_length
from traincast.trace.schema import DEVICE_KINDS
from traincast.trace.traceset import TraceSet

# ------------------------------------------------------------------ host overhead from a trace

#: host calls that block until the device has caught up; a ``cudaMemcpy*`` call whose copy is
#: device-to-host blocks too (pageable destination: the call returns once the copy, and all
#: work queued before it on the stream, is done)
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


@dataclass
class HostFit:
    """Host time per kernel launch measured on a trace (:func:`fit_host_overhead`).

    ``per_step``: one row per (rank, step): ``rank, iteration, step_us`` (the step's
    duration), ``blocked_us`` (union of the blocking calls' intervals), ``host_us =
    step_us - blocked_us``, ``launches`` (host runtime calls of the step that enqueued a
    kernel, collective, memcpy or memset), ``us_per_launch``, and the blocking points:
    ``stream_syncs``, ``device_syncs``, ``event_syncs``, ``dtoh_copies`` (blocking
    device-to-host copies), ``items`` (``aten::item`` calls) and ``items_blocking`` (those
    enclosing a blocking call: a ``.item()`` of a device tensor).
    """

    launch_overhead_us: float
    per_step: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"launch_overhead_us": self.launch_overhead_us,
                "per_step": [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                             for r in self.per_step.to_dict(orient="records")],
                "notes": self.notes}


def per_modelled_kernel(fit: HostFit, probe: DLRMPlanResult) -> HostFit:
    """``fit`` re-expressed per kernel *of the model*: the median host time per step of the
    trace (``per_step.host_us``) divided by the median number of kernels per rank that
    ``probe`` (a :func:`plan_dlrm` result of the trace's configuration) launches per step.

    The trace's launches (e.g. 262 per step on the 8xV100 DLRM: fbgemm helpers, the
    optimizer's per-parameter kernels, TorchRec's pipeline) outnumber the model's coarser
    kernels (79); charging the per-launch time to the model's kernels would drop most of the
    host time. Raises PlanError when the model launches no kernels.
    """
    kernels = [int(k) for k in probe.per_rank["kernels"]]
    k = float(np.median(kernels)) if kernels else 0.0
    if k <= 0:
        raise PlanError("the model launches no kernels: cannot spread the host time over them")
    ok = fit.per_step["launches"] > 0
    host_us = float(np.median(fit.per_step.loc[ok, "host_us"]))
    us = host_us / k
    launches = int(np.median(fit.per_step.loc[ok, "launches"]))
    note = (f"host time {host_us / 1e3:.3g} ms per step measured on the trace (median over "
            f"{int(ok.sum())} rank-steps of step - blocked host time), spread over the "
            f"model's {k:g} kernels per step: {us:.3g} us per modelled kernel (the trace "
            f"launches {launches}); in-sample when predicting this trace")
    return HostFit(us, fit.per_step, [note])


def fit_host_overhead(ts: TraceSet) -> HostFit:
    """Host time per launched kernel of a trace: the ``launch_overhead_us`` that makes the
    host model of :func:`plan_dlrm` (and of the transformer planner) describe that run.

    Estimator, per rank and step: ``(step duration - time blocked) / launches``, the median
    over all (rank, step) pairs.

    - *time blocked*: the union of the intervals of the host's blocking calls
      (:data:`SYNC_CALLS`, and ``cudaMemcpy*`` calls whose copy is device-to-host), on any
      host thread. The rest of the step the host is issuing work: Python, framework dispatch,
      kernel launches, and whatever else the step runs on the host (data loading, the next
      batch's input distribution in TorchRec's pipeline). All of it is charged to the
      launches: the host model has no other host cost. Python time *between* top-level ops is
      included on purpose: it is host time the GPU waits for in eager PyTorch; counting only
      top-level op durations would drop it (on the 8xV100 DLRM trace ~4.4 of ~12.4 ms).
      Assumes one host thread issues at a time (true of eager training: the autograd thread
      runs while the main thread waits in ``backward()``).
    - *launches*: host runtime calls in the step whose correlation id matches a kernel,
      collective, memcpy or memset of the rank (``cudaLaunchKernel``, ``cudaMemcpyAsync``...).

    The median is robust to a rank whose step includes an unusual stall. Using it to predict
    the same trace is in-sample.

    Raises:
        PlanError: the trace has no steps or no launches.
    """
    it = ts.iterations.to_pandas()
    if it.empty:
        raise PlanError("the trace has no iterations")
    ev = ts.events.to_pandas()
    kind = ev["kind"].astype(str).to_numpy()
    names = ev["name"].astype(str)
    name = names.to_numpy()
    is_dtoh_copy = (kind == "memcpy") & names.str.contains("DtoH", regex=False).to_numpy()
    is_memcpy_call = (kind == "runtime") & names.str.startswith("cudaMemcpy").to_numpy()
    rank = ev["rank"].to_numpy()
    iteration = ev["iteration"].to_numpy()
    rows = []
    for r in sorted(int(x) for x in it["rank"].unique()):
        on_r = rank == r
        dev = on_r & np.isin(kind, DEVICE_KINDS)
        dev_corr = set(ev["correlation"].to_numpy()[dev].tolist()) - {-1}
        dtoh_corr = set(ev["correlation"].to_numpy()[on_r & is_dtoh_copy].tolist()) - {-1}
        for _, step in it[it["rank"] == r].iterrows():
            sel = on_r & (iteration == int(step["iteration"]))
            e = ev[sel]
            en = name[sel]
            ek = kind[sel]
            rt = ek == "runtime"
            corr = e["correlation"].to_numpy()
            launches = int(np.sum(rt & np.isin(corr, list(dev_corr))))
            is_dtoh = is_memcpy_call[sel] & np.isin(corr, list(dtoh_corr))
            blocking = (rt & np.isin(en, SYNC_CALLS)) | is_dtoh
            t0, t1 = int(step["start"]), int(step["end"])
            ts_ = e["ts"].to_numpy()
            te = ts_ + e["dur"].to_numpy()
            iv = np.stack([np.clip(ts_[blocking], t0, t1), np.clip(te[blocking], t0, t1)],
                          axis=1).astype(float)
            blocked = float(union_length(iv[:, 0], iv[:, 1])) if len(iv) else 0.0
            items = (ek == "cpu_op") & (en == "aten::item")
            tid = e["tid"].to_numpy()
            n_block_items = 0
            for j in np.flatnonzero(items):
                n_block_items += bool(np.any(blocking & (tid == tid[j]) & (ts_ >= ts_[j])
                                             & (te <= te[j])))
            step_ns = float(step["dur"])
            host = step_ns - blocked
            rows.append({
                "rank": r, "iteration": int(step["iteration"]), "step_us": step_ns / 1e3,
                "blocked_us": blocked / 1e3, "host_us": host / 1e3, "launches": launches,
                "us_per_launch": host / 1e3 / launches if launches else float("nan"),
                "stream_syncs": int(np.sum(rt & (en == "cudaStreamSynchronize"))),
                "device_syncs": int(np.sum(rt & (en == "cudaDeviceSynchronize"))),
                "event_syncs": int(np.sum(rt & (en == "cudaEventSynchronize"))),
                "dtoh_copies": int(np.sum(is_dtoh)),
                "items": int(np.sum(items)), "items_blocking": n_block_items,
            })
    df = pd.DataFrame(rows)
    ok = df["launches"] > 0
    if not ok.any():
        raise PlanError("the trace's steps launch no kernels: cannot fit the host overhead")
    us = float(np.median(df.loc[ok, "us_per_launch"]))
    notes = [f"launch overhead {us:.3g} us/kernel fitted on this trace: median over "
             f"{int(ok.sum())} rank-steps of (step - blocked host time) / launches "
             f"(host {df['host_us'].median() / 1e3:.3g} ms, "
             f"{int(df['launches'].median())} launches per step); in-sample when predicting "
             f"this trace"]
    return HostFit(us, df, notes)


def fit_to_model(fit: HostFit, model: DLRMSpec, system: SystemSpec, sharding: tuple[str, ...],
                 batch: int, **plan_kw: Any) -> HostFit:
    """``fit`` per kernel of the model of this plan: count the same thing on both sides, the
    trace's host time per step over the kernels *the model* launches per step (not the
    trace's launches: the model enumerates fewer, coarser kernels than a real step's
    fbgemm/optimizer/pipeline launches). ``plan_kw``: the other arguments of
    :func:`plan_dlrm` (calibration, comm, embedding_model, placement, optimizers)."""
    probe = plan_dlrm(model, system, Layout(dp=system.gpus, sharding=sharding), batch,
                      launch_overhead_us=1.0, **plan_kw)
    return per_modelled_kernel(fit, probe)


def calibration_with(fit: HostFit, calibration: PlanCalibration | None) -> PlanCalibration:
    """``calibration`` (default: the shipped one) with the launch overhead of ``fit``, its
    source naming the fit."""
    base = calibration or default_calibration()
    return dataclasses.replace(base, launch_overhead_us=fit.launch_overhead_us,
                               source=f"{base.source}; {fit.notes[0]}")
