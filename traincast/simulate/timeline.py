"""Predicted timelines: simulated point times -> events in the canonical schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traincast.graph.model import ExecutionGraph
from traincast.simulate.engine import SimResult
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet


def predicted_traceset(measured: TraceSet, graph: ExecutionGraph, result: SimResult) -> TraceSet:
    """A TraceSet whose events carry the simulated times.

    Events the graph does not simulate (GPU-side annotations, cuda_sync records) are dropped;
    the collectives and shapes tables are carried over with their event rows renumbered.
    Times are on the aligned clock of the simulation, in ns; ``iterations`` holds the
    predicted step windows (from the step markers' simulated start and end).
    """
    n_pts = graph.n_event_points  # collective barrier points follow the events' points
    start = result.times[0:n_pts:2]
    end = result.times[1:n_pts:2]
    keep = (start >= 0) & (end >= start)
    rows = np.flatnonzero(keep)
    # every row kept (the usual replay): the other columns are shared, not copied
    ev = measured.events if rows.size == keep.size else measured.events.take(pa.array(rows))
    ev = ev.set_column(ev.schema.get_field_index("ts"), "ts", A.from_numpy(start[rows]))
    ev = ev.set_column(ev.schema.get_field_index("dur"), "dur",
                       A.from_numpy(end[rows] - start[rows]))
    it = measured.iterations.to_pandas()
    mk = it["marker_event"].to_numpy()
    has = mk >= 0
    p_start, p_end = step_windows(measured, graph, result.times)
    new_index = np.full(keep.size, -1, np.int64)
    new_index[rows] = np.arange(rows.size)
    iters = pa.Table.from_arrays(
        [A.from_numpy(it["rank"].to_numpy(np.int32)), A.from_numpy(it["iteration"].to_numpy(
            np.int32)), A.from_numpy(p_start.astype(np.int64)),
         A.from_numpy(p_end.astype(np.int64)), A.from_numpy((p_end - p_start).astype(np.int64)),
         A.from_numpy(np.where(has, new_index[np.clip(mk, 0, None)], -1).astype(np.int64))],
        names=["rank", "iteration", "start", "end", "dur", "marker_event"],
    )
    coll = measured.collectives
    for col in ("event", "kernel_event", "issue_event"):
        old = A.to_numpy(coll.column(col))
        new = np.where(old >= 0, new_index[np.clip(old, 0, None)], -1)
        coll = coll.set_column(coll.schema.get_field_index(col), col, A.from_numpy(new))
    kept = A.to_numpy(coll.column("event")) >= 0
    if not kept.all():
        coll = coll.filter(pa.array(kept))
    shp = measured.shapes
    if shp.num_rows:
        old = A.to_numpy(shp.column("event"))
        new = new_index[old]
        shp = shp.set_column(0, "event", A.from_numpy(new))
        if (new < 0).any():
            shp = shp.filter(pa.array(new >= 0))
    return TraceSet(events=ev, collectives=coll, shapes=shp, iterations=iters,
                    ranks=measured.ranks, source="predicted",
                    member_lists=measured.member_lists)


def step_windows(measured: TraceSet, graph: ExecutionGraph, times: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """int64 (start, end) per row of ``measured.iterations``: the simulated start and end of
    its step marker (``ProfilerStep#N``), or, for a step without a marker, of the earliest
    and latest simulated event of its rank (0, 0 when it has none); ``times`` are simulated
    point times (ns). What :func:`predicted_traceset` puts in ``iterations`` without
    building the predicted events."""
    n_pts = graph.n_event_points
    start = times[0:n_pts:2]
    end = times[1:n_pts:2]
    it = measured.iterations
    mk = A.to_numpy(it.column("marker_event")).astype(np.int64)
    has = mk >= 0
    p_start = np.where(has, start[np.clip(mk, 0, None)], 0).astype(np.int64)
    p_end = np.where(has, end[np.clip(mk, 0, None)], 0).astype(np.int64)
    if not has.all():
        keep = (start >= 0) & (end >= start)
        rank_col = measured.events.column("rank").to_numpy()
        it_rank = A.to_numpy(it.column("rank"))
        for i in np.flatnonzero(~has):
            sel = (rank_col == it_rank[i]) & keep
            p_start[i] = start[sel].min() if sel.any() else 0
            p_end[i] = end[sel].max() if sel.any() else 0
    return p_start, p_end
