"""A DLRM rebuilt from its trace (:func:`dlrm_spec_from_trace`): tables, pooling, placement,
MLP widths, batch and the measured step, to predict that run and compare.

:func:`load_dlrm_trace` finds the Kineto and execution-trace folders of a DLRM run
(:func:`trace_folders`), loads them and rebuilds the model; :func:`traced_gpu` names the
catalog GPU the run recorded. Errors are :class:`~traincast.plan.spec.PlanError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from traincast.costs.embedding import (
    EmbeddingModel,
    EmbeddingParams,
    embedding_calls,
    embedding_observations,
)
from traincast.costs.hardware import load_catalog
from traincast.plan.spec import DLRMSpec, EmbeddingTable, PlanError
from traincast.trace.load import load
from traincast.trace.traceset import TraceSet

# ------------------------------------------------------------------ from a trace


class TraceDLRM(NamedTuple):
    """What :func:`dlrm_spec_from_trace` recovers (unpacks as a 4-tuple)."""

    spec: DLRMSpec
    batch: int
    placement: dict[int, int]
    measured_step_s: float

    @property
    def sharding(self) -> tuple[str, ...]:
        """``table`` for placed tables, ``data`` for the replicated ones."""
        return tuple("table" if i in self.placement else "data"
                     for i in range(len(self.spec.tables)))


def _linear_shapes(ts: TraceSet, rank: int, iteration: int) -> tuple[list[tuple[int, int, int]],
                                                                      int | None]:
    """``(rows, in, out)`` of the forward ``aten::addmm`` ops of one rank/iteration in time
    order, and the index of the first one after the interaction ``aten::bmm``."""
    if ts.shapes is None or len(ts.shapes) == 0:
        raise PlanError("the trace has no op shapes (record_shapes or an execution trace "
                        "is needed to recover the MLP widths)")
    ev = ts.events.to_pandas()
    sel = ev[(ev["rank"] == rank) & (ev["iteration"] == iteration)
             & (ev["kind"].astype(str) == "cpu_op")]
    names = sel["name"].astype(str)
    sel = sel[names.isin(["aten::addmm", "aten::bmm"])].sort_values("ts")
    shp = ts.shapes.to_pandas().set_index("event")["input_dims"]
    out: list[tuple[int, int, int]] = []
    split = None
    for idx, row in sel.iterrows():
        name = str(row["name"])
        if name == "aten::bmm":
            if out and split is None:
                split = len(out)
            continue
        if idx not in shp.index:
            continue
        dims = json.loads(shp.loc[idx] if not isinstance(shp.loc[idx], pd.Series)
                          else shp.loc[idx].iloc[0])
        if len(dims) >= 3 and len(dims[1]) == 2 and len(dims[2]) == 2:
            out.append((int(dims[1][0]), int(dims[1][1]), int(dims[2][1])))
    return out, split


def dlrm_spec_from_trace(ts: TraceSet) -> TraceDLRM:
    """Rebuild the DLRM of a trace (Kineto + execution trace, every rank).

    - tables and pooling: :func:`~traincast.costs.embedding.embedding_calls` per rank; a
      ``split`` (model-parallel) TBE call of ``k`` tables gives ``k`` tables of its mean rows
      and pooling (the ET records the call, not each table), placed on that rank; the
      ``dense`` (data-parallel) call of rank 0 gives the replicated tables;
    - MLP widths: the forward ``aten::addmm`` shapes (``[bias], [rows, in], [in, out]``) of
      rank 0, bottom MLP before the interaction ``aten::bmm``, top MLP after it (or, without a
      bmm, split where a layer's input width breaks the chain);
    - batch: per-rank rows of those GEMMs times the ranks; checked against the split TBE
      batch (the global batch, indices arrive by all_to_all);
    - measured step: the median of ``ts.iterations`` durations (every rank, s).

    Raises:
        PlanError: no embedding calls with ET shapes, no MLP shapes, inconsistent batch.
    """
    it = ts.iterations.to_pandas()
    if it.empty:
        raise PlanError("the trace has no iterations")
    calls = [c for c in embedding_calls(ts) if c.params is not None]
    if not calls:
        raise PlanError("the trace has no fbgemm embedding calls with execution-trace shapes")
    # one iteration: the first with calls on rank 0's side
    iteration = min(c.iteration for c in calls)
    calls = [c for c in calls if c.iteration == iteration]
    ranks = sorted(int(r) for r in it["rank"].unique())
    tables: list[EmbeddingTable] = []
    placement: dict[int, int] = {}
    mp_batch: set[int] = set()
    for r in ranks:
        for c in calls:
            if c.rank == r and c.kind == "split":
                p = c.params
                assert p is not None
                rows = p.rows if p.rows is not None else 1
                for _ in range(p.tables):
                    placement[len(tables)] = r
                    tables.append(EmbeddingTable(int(rows), int(round(p.dim)), float(p.pooling)))
                mp_batch.add(p.batch)
    dense = [c for c in calls if c.kind == "dense" and c.rank == ranks[0]]
    for c in dense:
        p = c.params
        assert p is not None
        for _ in range(p.tables):
            tables.append(EmbeddingTable(int(p.rows or 1), int(round(p.dim)), float(p.pooling)))
    lin, split = _linear_shapes(ts, ranks[0], iteration)
    if not lin:
        raise PlanError("no aten::addmm shapes in the trace: cannot recover the MLP widths")
    if split is None:
        split = next((j for j in range(1, len(lin)) if lin[j][1] != lin[j - 1][2]), len(lin))
    bottom, topl = lin[:split], lin[split:]
    if not bottom or not topl:
        raise PlanError("cannot tell the bottom from the top MLP in the trace's GEMMs")
    local = bottom[0][0]
    batch = local * len(ranks)
    if mp_batch and mp_batch != {batch}:
        raise PlanError(f"the embedding lookups' batch {sorted(mp_batch)} differs from "
                        f"ranks x MLP rows ({len(ranks)} x {local})")
    spec = DLRMSpec(tables=tuple(tables), dense_features=bottom[0][1],
                    bottom_mlp=tuple(o for _, _, o in bottom),
                    top_mlp=tuple(o for _, _, o in topl), dtype="fp32",
                    name=f"dlrm from trace ({len(ranks)} ranks)")
    step = float(np.median(it["dur"].to_numpy(np.float64))) * 1e-9
    return TraceDLRM(spec, int(batch), placement, step)


def lookup_gap_note(ts: TraceSet, model: EmbeddingModel) -> str | None:
    """How far ``model`` (the lookup model the plan uses) is from the trace's own fbgemm
    lookup kernels: per direction, the median measured kernel time (us) against the model's
    median prediction for the same calls (:func:`~traincast.costs.embedding.
    embedding_observations`; uniform indices); None when the trace has no such kernels."""
    obs = embedding_observations(ts)
    if obs.empty:
        return None
    parts = []
    for direction, bwd in (("forward", False), ("backward", True)):
        sub = obs[obs["backward"] == bwd]
        if sub.empty:
            continue
        pred = np.array([model.predict_ns(EmbeddingParams(
            batch=int(r.batch), tables=int(r.tables), pooling=float(r.pooling),
            dim=float(r.dim), rows=None if r.rows != r.rows else int(r.rows),
            itemsize=int(r.itemsize)), backward=bwd, optimizer=str(r.optimizer))
            for r in sub.itertuples()])
        meas = sub["dur_ns"].to_numpy(float)
        parts.append(f"{direction} {np.median(meas) / 1e3:.2f} us measured vs "
                     f"{np.median(pred) / 1e3:.2f} us modelled (median of {len(sub)} calls, "
                     f"{np.median(meas / np.maximum(pred, 1e-9)):.3g}x)")
    return ("lookups: the trace's own embedding kernels take " + "; ".join(parts)
            + " (per call, on the trace's shapes)")


def trace_folders(path: Path, et_dir: Path | None) -> tuple[Path, Path | None, list[Path]]:
    """(Kineto folder, execution-trace folder or None, folders looked in for ETs).

    ``DIR`` of Kineto traces, or ``DIR/kineto``; the execution traces are ``et_dir``, else
    the first of ``DIR/et`` and, when ``DIR`` is itself a Kineto folder, its sibling
    ``DIR/../et`` that holds ``*.et.json[.gz]`` files (the layout of
    ``../shared/data/traces/dlrm_8xv100``). Raises :class:`PlanError` when ``path`` is not a
    folder."""
    if not path.is_dir():
        raise PlanError(f"--from-trace {path}: not a folder")
    kdir = path / "kineto" if (path / "kineto").is_dir() else path
    if et_dir is not None:
        return kdir, et_dir, [et_dir]
    looked = [path / "et"] + ([path.parent / "et"] if kdir == path else [])
    for d in looked:
        if d.is_dir() and any(d.glob("*.et.json*")):
            return kdir, d, looked
    return kdir, None, looked


def load_dlrm_trace(path: Path, et_dir: Path | None = None) -> tuple[TraceSet, TraceDLRM]:
    """Load the DLRM run in folder ``path`` (:func:`trace_folders`) and rebuild its model
    (:func:`dlrm_spec_from_trace`). Raises :class:`PlanError` naming the folder and where
    execution traces were looked for when the model cannot be rebuilt."""
    kdir, edir, looked = trace_folders(path, et_dir)
    ts = load(kdir, et_dir=edir)
    try:
        got = dlrm_spec_from_trace(ts)
    except PlanError as exc:
        where = ", ".join(str(d) for d in looked)
        found = f"execution traces from {edir}" if edir else f"no execution traces in {where}"
        raise PlanError(f"--from-trace {path}: {exc} ({found}; give --et-dir)") from None
    return ts, got


def traced_gpu(ts: TraceSet) -> str | None:
    """The catalog name of the GPU the trace's ranks recorded (first match), or None."""
    m = load_catalog().match_first(p for info in ts.ranks.values()
                                   for p in info.device_properties)
    return m.name if m is not None else None
