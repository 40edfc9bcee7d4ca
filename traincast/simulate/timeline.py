"""Predicted timelines: simulated point times -> events in the canonical schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traincast.graph.jit import kernel as load_kernel
from traincast.graph.jit import worth_compiling
from traincast.graph.model import EdgeKind, ExecutionGraph, MeasuredPoints
from traincast.simulate.engine import SimResult
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet
from traincast.util.distinct import sorted_distinct


def predicted_traceset(measured: TraceSet, graph: ExecutionGraph, result: SimResult) -> TraceSet:
    """A TraceSet whose events carry the simulated times.

    Events the graph does not simulate (GPU-side annotations, cuda_sync records) are dropped;
    the collectives and shapes tables are carried over with their event rows renumbered.
    Times are on the aligned clock of the simulation, in ns; ``iterations`` holds the
    predicted step windows (:func:`step_windows`).
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
    """int64 (start, end) per row of ``measured.iterations``; ``times`` are simulated point
    times (ns). What :func:`predicted_traceset` puts in ``iterations`` without building the
    predicted events.

    A step with a marker (``ProfilerStep#N``) starts at the marker's simulated start and ends
    at the later of the marker's simulated end and ``D - S``, where ``D`` is the simulated
    end of the work the step contains (:func:`step_work`: the host ops of the marker's thread
    that start inside the marker's measured window and the device work launched inside it) and ``S`` the
    step's *measured spill*, how far that work ran past the marker in the measurement
    (``max(0, D_measured - marker end_measured)``). So a predicted step always covers the
    work it launched, less the overlap with the next step's host work that the measured
    steady state already shows: the next step's host work may overlap the tail by as much as
    it did when measured; a longer tail lengthens the step and delays the next step's start,
    so it is counted in this step only (below). With the trace's own durations ``D - S`` is at
    most the marker's end up to the replay's error, so a replay's steps are the markers'
    windows.

    Consecutive marked steps of a rank tile as in a steady state: a step starts at the later
    of its marker's simulated start and the previous step's end, but no later than its end
    less its marker's simulated length (a step is never shorter than its own marker).
    When the host runs ahead of a GPU-bound device, the markers start at the host's pace
    while each step's work ends at the device's: the steps are then the device's periods,
    not the growing distance from a marker to its queued work.

    A step without a marker spans the earliest to the latest simulated event of its rank
    (0, 0 when it has none), which holds its device work already.
    """
    n_pts = graph.n_event_points
    start = times[0:n_pts:2]
    end = times[1:n_pts:2]
    it = measured.iterations
    mk = A.to_numpy(it.column("marker_event")).astype(np.int64)
    has = mk >= 0
    m = np.clip(mk, 0, None)
    tail = None
    if has.any():
        node, row, head = step_groups(measured, graph)
        if node.size:
            tail = np.full(mk.size, np.iinfo(np.int64).min, np.int64)
            tail[row] = _group_max(end, node, head)
    p_start, p_end = marked_windows(measured, graph, start[m], end[m], tail)
    if not has.all():
        keep = (start >= 0) & (end >= start)
        rank_col = A.to_numpy(measured.events.column("rank"))  # (no pandas: see trace/arrow)
        it_rank = A.to_numpy(it.column("rank"))
        for i in np.flatnonzero(~has):
            sel = (rank_col == it_rank[i]) & keep
            p_start[i] = start[sel].min() if sel.any() else 0
            p_end[i] = end[sel].max() if sel.any() else 0
    return p_start, p_end


#: nodes per block of :func:`_group_max` (a block's temporaries: a few MiB)
_BLOCK = 1 << 18


def _group_max(end: np.ndarray, node: np.ndarray, head: np.ndarray) -> np.ndarray:
    """int64 per group: the latest ``end[n]`` >= 0 over the group's nodes ``n`` (groups:
    ``node[head[g]:head[g + 1]]``, each non-empty, the last to the end of ``node``), the
    int64 minimum where none; whole groups of about :data:`_BLOCK` nodes at a time (no
    whole-size gather of the ends)."""
    out = np.empty(head.size, np.int64)
    bounds = np.append(head, node.size).astype(np.int64)
    g0 = 0
    while g0 < head.size:
        g1 = int(np.searchsorted(bounds, bounds[g0] + _BLOCK, "right")) - 1
        g1 = min(max(g1, g0 + 1), head.size)
        a, b = int(bounds[g0]), int(bounds[g1])
        d_end = end[node[a:b]]
        d_end[d_end < 0] = np.iinfo(np.int64).min  # not simulated: no end
        out[g0:g1] = np.maximum.reduceat(d_end, bounds[g0:g1] - a)
        g0 = g1
    return out


def marked_windows(measured: TraceSet, graph: ExecutionGraph, m_start: np.ndarray,
                   m_end: np.ndarray, tail: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The windows :func:`step_windows` gives the marked steps (0, 0 for the others), from
    the simulated start and end of each row's marker (``m_start``, ``m_end``: int64 per row
    of ``measured.iterations``, any value where it has none) and the simulated end of each
    marked step's work (``tail``: the latest end >= 0 over its :func:`step_groups` nodes,
    the int64 minimum where none; None when no marked step has work)."""
    mk = A.to_numpy(measured.iterations.column("marker_event")).astype(np.int64)
    has = mk >= 0
    p_start = np.where(has, m_start, 0).astype(np.int64)
    p_end = np.where(has, m_end, 0).astype(np.int64)
    if tail is not None:
        spill = measured_spill(measured, graph)
        p_end = np.where(has & (tail > np.iinfo(np.int64).min),
                         np.maximum(p_end, tail - spill), p_end)
        # consecutive marked steps of a rank tile: a step starts once the previous
        # one's work is done (a tail beyond the measured spill is counted once)
        it_rank = A.to_numpy(measured.iterations.column("rank")).astype(np.int64)
        m = np.flatnonzero(has)
        m = m[np.lexsort((graph.measured_at(2 * mk[m]), it_rank[m]))]
        same = it_rank[m[1:]] == it_rank[m[:-1]]
        prev, cur = m[:-1][same], m[1:][same]
        own = m_end[cur] - m_start[cur]  # the marker's simulated length
        p_start[cur] = np.minimum(np.maximum(p_start[cur], p_end[prev]), p_end[cur] - own)
    return p_start, p_end


def step_groups(measured: TraceSet, graph: ExecutionGraph
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The work of the marked steps (:func:`step_work`) grouped by step: (nodes sorted by
    their ``measured.iterations`` row, each group's row, each group's first position in the
    nodes), int32 when the ids fit; computed once per graph structure."""
    return _cached(measured, graph, "step_groups", lambda: _step_groups(measured, graph))


def _step_groups(measured: TraceSet, graph: ExecutionGraph
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    fast = _compiled_groups(measured, graph)
    if fast is not None:
        return fast
    rows = step_work(measured, graph)
    mk = A.to_numpy(measured.iterations.column("marker_event"))
    it = np.int32 if rows.size < (1 << 31) - 1 else np.int64
    node = np.flatnonzero(rows >= 0)
    node = node[mk[rows[node]] >= 0]
    key = rows[node]
    if mk.size <= np.iinfo(np.int16).max:  # few steps: a radix sort of 16-bit rows
        key = key.astype(np.int16)
    node = node[np.argsort(key, kind="stable")].astype(it)
    del key
    row = rows[node]
    head = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if row.size else node[:0]
    return node, row[head].astype(it), head.astype(it)


def _compiled_groups(measured: TraceSet, graph: ExecutionGraph
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`_step_groups` in one compiled pass (:func:`traincast.simulate.numba_kernels.
    marked_step_work`), without the per-node rows of :func:`step_work`; the measured spill
    (:func:`measured_spill`) is kept beside it. The measured times are read from the
    graph's compact column (:class:`~traincast.graph.model.MeasuredPoints`: the events'
    starts and durations with the ranks' clock offsets, :func:`_measured_columns`) unless
    an array of it is alive: the int64[2N + B] points are not laid out for it. None (the
    numpy path) for a graph too small for the compiled kernels, ids or columns of other
    types, or a rank with several marked steps (:func:`_one_marker_a_rank`)."""
    n_nodes = graph.n_nodes
    ev = measured.events
    if n_nodes == 0 or ev.num_rows != n_nodes or graph.n_edges >= (1 << 31) - 1:
        return None
    kern = _group_kernel(graph.n_points)
    if kern is None:
        return None
    it = measured.iterations
    mk = A.to_numpy(it.column("marker_event")).astype(np.int64)
    it_rank = A.to_numpy(it.column("rank")).astype(np.int64)
    node_rank = graph.node_rank
    cols = [A.to_numpy(ev.column(c)) for c in ("pid", "tid", "device")]
    if (node_rank.dtype != np.int32 or graph.src.dtype != np.int32
            or graph.dst.dtype != np.int32 or graph.kind.dtype != np.int8
            or any(c.dtype != np.int32 for c in cols) or node_rank.min() < 0
            or (mk >= n_nodes).any() or it_rank.size == 0 or it_rank.min() < 0):
        return None
    n_r = int(max(it_rank.max(), node_rank.max())) + 1
    row_of = np.full(n_r, -1, np.int64)
    lo_of = np.zeros(n_r, np.int64)
    width = np.zeros(n_r, np.int64)  # 0: no window (nothing is inside)
    rows = np.flatnonzero(mk >= 0)
    points, columns = _measured_columns(graph)
    m_rank = ms = None
    if rows.size:
        m_rank = it_rank[rows]
        ms, me = graph.measured_at(2 * mk[rows]), graph.measured_at(2 * mk[rows] + 1)
        # (whether each rank has one marker window is checked after the pass, which finds
        # the earliest measured start: a pass done for nothing where it is not)
        row_of[m_rank] = rows
        lo_of[m_rank] = ms
        width[m_rank] = np.maximum(me - ms, 0)
    # a rank recorded as one step without a marker: all its events are that step's
    loose_of = np.full(n_r, -1, np.int64)
    loose = np.flatnonzero(mk < 0)
    if loose.size:
        ranks, n_rows = np.unique(it_rank, return_counts=True)
        single = np.isin(it_rank[loose], ranks[n_rows == 1])
        loose_of[it_rank[loose[single]]] = loose[single]
    codes, kinds = A.dictionary_parts(ev.column("kind"))
    python = kinds.index("python") if "python" in kinds else -1
    work = np.empty(n_nodes, np.int32)
    count = np.zeros(mk.size, np.int64)
    last = np.full(mk.size, np.iinfo(np.int64).min, np.int64)
    earliest = np.empty(1, np.int64)
    node = kern(points, *columns, node_rank, codes, python, *cols, graph.src, graph.dst,
                graph.kind, int(EdgeKind.LAUNCH), int(EdgeKind.EXEC), row_of, lo_of, width,
                loose_of, mk, work, count, last, earliest)
    del work, points, columns
    if node is None:  # a launch from a launched op: the numpy path
        return None
    lo = int(earliest[0]) if earliest[0] != np.iinfo(np.int64).max else 0
    if m_rank is not None and not _one_marker_a_rank(m_rank, ms, lo, node_rank):
        return None
    row = np.flatnonzero(count).astype(np.int32)
    head = (np.cumsum(count) - count)[row].astype(np.int32)
    spill = np.zeros(mk.size, np.int64)
    spill[row] = np.maximum(last[row] - graph.measured_at(2 * mk[row] + 1), 0)
    spill.flags.writeable = False
    graph.structure["measured_spill"] = (_key(measured, graph), spill)
    return node, row, head


def _measured_columns(graph: ExecutionGraph) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """``graph``'s measured times as :func:`traincast.simulate.numba_kernels.
    marked_step_work` reads them: (int64[2N + B] laid out, five empty arrays) where the
    column is an array or one laid out from it is alive; else (an empty array, the compact
    column's ``start``, ``dur`` (int64[N], ns) and its row ranges ``lo``, ``hi`` with
    their clock offsets ``offset`` (int64, ns)): the 2N + B points never laid out."""
    value = vars(graph)["_measured"]
    ref = value.__dict__.get("_laid") if isinstance(value, MeasuredPoints) else None
    if isinstance(value, MeasuredPoints) and (ref is None or ref() is None):
        i64 = np.int64
        return np.empty(0, i64), (
            np.ascontiguousarray(value.start, i64), np.ascontiguousarray(value.dur, i64),
            *(np.ascontiguousarray(a, i64) for a in (value.lo, value.hi, value.offset)))
    empty = np.empty(0, np.int64)
    return np.ascontiguousarray(graph.measured, np.int64), (empty,) * 5


_GROUP_KERNEL: list = []


def _group_kernel(size: int):  # type: ignore[no-untyped-def]
    """:func:`traincast.simulate.numba_kernels.marked_step_work`, or None
    (:func:`traincast.graph.jit.kernel`: numba missing, or ``size`` points too few)."""
    if not worth_compiling(size):
        return None
    if not _GROUP_KERNEL:
        _GROUP_KERNEL.append(load_kernel("traincast.simulate.numba_kernels",
                                         "marked_step_work"))
    return _GROUP_KERNEL[0]


def measured_spill(measured: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    """int64 per row of ``measured.iterations``: how far the work of the marked step
    (:func:`step_work`) ran past its marker's end in the measurement (ns, >= 0; 0 for steps
    without a marker)."""
    return _cached(measured, graph, "measured_spill", lambda: _measured_spill(measured, graph))


def _measured_spill(measured: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    mk = A.to_numpy(measured.iterations.column("marker_event")).astype(np.int64)
    spill = np.zeros(mk.size, np.int64)
    node, row, head = step_groups(measured, graph)
    if node.size:
        last = np.maximum.reduceat(graph.measured[2 * node.astype(np.int64) + 1], head)
        spill[row] = np.maximum(last - graph.measured_at(2 * mk[row] + 1), 0)
    return spill


def step_rows(measured: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    """int64[N]: per node, the row of ``measured.iterations`` whose marker's measured window
    ``[start, end)`` holds the node's measured start on the node's rank, or the row of the
    node's rank when that rank was recorded as one step without a marker; -1 for the rest.
    Measured times are the graph's aligned ones (``graph.measured``); a rank's markers do
    not overlap. Computed once per graph structure (the array is read-only)."""
    return _cached(measured, graph, "step_rows", lambda: _step_rows(measured, graph))


def _step_rows(measured: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    it = measured.iterations
    mk = A.to_numpy(it.column("marker_event")).astype(np.int64)
    rows = np.flatnonzero(mk >= 0)
    out = np.full(graph.n_nodes, -1, np.int64)
    if rows.size:
        t = graph.measured_starts()  # (half the laid-out column)
        valid = t >= 0
        if valid.any():
            lo = int(np.min(t, where=valid, initial=np.iinfo(np.int64).max))
        else:
            lo = 0
        it_rank = A.to_numpy(it.column("rank")).astype(np.int64)[rows]
        ms, me = graph.measured_at(2 * mk[rows]), graph.measured_at(2 * mk[rows] + 1)
        if _one_marker_a_rank(it_rank, ms, lo, graph.node_rank):
            _rank_windows(out, rows, it_rank, ms, me, t, valid, graph.node_rank)
        else:
            _sorted_windows(out, rows, it_rank, ms, me, t, valid, lo, graph.node_rank)
    # a rank recorded as one step without a marker: all its events are that step's
    loose = np.flatnonzero(mk < 0)
    if loose.size:
        it_rank = A.to_numpy(it.column("rank")).astype(np.int64)
        ranks, n_rows = np.unique(it_rank, return_counts=True)
        single = np.isin(it_rank[loose], ranks[n_rows == 1])
        if single.any():
            of_rank = np.full(int(max(it_rank.max(), graph.node_rank.max(initial=0))) + 1, -1,
                              np.int64)
            of_rank[it_rank[loose[single]]] = loose[single]
            valid = graph.measured_starts() >= 0
            out = np.where((out < 0) & valid, of_rank[graph.node_rank], out)
    return out


def _sorted_windows(out: np.ndarray, rows: np.ndarray, m_rank: np.ndarray,
                    m_start: np.ndarray, m_end: np.ndarray, t: np.ndarray, valid: np.ndarray,
                    lo: int, node_rank: np.ndarray) -> None:
    """``out[node]`` = the row of ``rows`` whose window ``[m_start, m_end)`` on rank
    ``m_rank`` holds the node's start ``t`` (``valid`` ones) on its rank, by a search on one
    sorted axis: rank-major, then time (no rank's times reach the next rank's)."""
    span = int(max(t.max(), m_end.max())) - lo + 1
    # built in place (one array of the nodes' size)
    key = node_rank.astype(np.int64)
    key *= span
    key += t
    key -= lo
    m_start = m_rank * span + (m_start - lo)
    m_end = m_rank * span + (m_end - lo)
    order = np.argsort(m_start, kind="stable")
    k = np.searchsorted(m_start[order], key, side="right")
    k -= 1
    inside = valid & (k >= 0)
    np.maximum(k, 0, out=k)
    kk = order[k]
    del k
    inside &= key < m_end[kk]
    out[inside] = rows[kk[inside]]


def _rank_windows(out: np.ndarray, rows: np.ndarray, m_rank: np.ndarray,
                  m_start: np.ndarray, m_end: np.ndarray, t: np.ndarray, valid: np.ndarray,
                  node_rank: np.ndarray) -> None:
    """:func:`_sorted_windows` when each rank has one window (:func:`_one_marker_a_rank`):
    each node's start compared with its own rank's window, no search."""
    n_r = int(max(m_rank.max(), node_rank.max(initial=0))) + 1
    row_of = np.full(n_r, -1, np.int64)
    row_of[m_rank] = rows
    lo_of = np.zeros(n_r, np.int64)
    lo_of[m_rank] = m_start
    width = np.zeros(n_r, np.int64)  # 0: no window (nothing is inside)
    width[m_rank] = np.maximum(m_end - m_start, 0)
    # lo <= t < lo + width as one unsigned test of t - lo (a start before lo wraps above)
    d = t - lo_of[node_rank]
    inside = d.view(np.uint64) < width.view(np.uint64)[node_rank]
    del d
    inside &= valid
    hit = np.flatnonzero(inside)
    out[hit] = row_of[node_rank[hit]]


def _one_marker_a_rank(m_rank: np.ndarray, m_start: np.ndarray, lo: int,
                       node_rank: np.ndarray) -> bool:
    """True when the marked steps ``m_rank`` (their ranks) are one a rank, every marker
    starts at or after ``lo`` (the earliest measured start) and no rank id is negative: a
    node is then inside its rank's only window or none (what the sorted search finds)."""
    return bool(m_rank.size and m_rank.min() >= 0 and m_start.min() >= lo
                and sorted_distinct(m_rank).size == m_rank.size and node_rank.min(initial=0) >= 0)


def _cached(measured: TraceSet, graph: ExecutionGraph, name: str, compute):  # noqa: ANN001, ANN202
    """``compute()``, kept in ``graph.structure`` (shared by the graph's copies, as
    :func:`step_rows` keeps its rows) while the edges, the measured times and the iterations
    it was computed from are the same objects; the arrays are made read-only."""
    key = _key(measured, graph)
    hit = graph.structure.get(name)
    if hit is not None and all(a is b for a, b in zip(hit[0], key, strict=True)):
        return hit[1]
    out = compute()
    for a in out if isinstance(out, tuple) else (out,):
        a.flags.writeable = False
    graph.structure[name] = (key, out)
    return out


def _key(measured: TraceSet, graph: ExecutionGraph) -> tuple:
    """What :func:`_cached` results are computed from (the measured column as stored: a
    compact one is not laid out, nor kept alive as an array)."""
    return (graph.src, graph.kind, vars(graph)["_measured"], measured.iterations)


def step_work(measured: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    """int64[N]: per node, the row of ``measured.iterations`` of the marked step that holds
    it (-1: none): a host op of the marker's thread (pid, tid), or a GPU op without a
    recorded launch, by its measured start (:func:`step_rows`); a launched GPU op by its
    launch (:func:`launched_work`), whichever thread launched it. Host ops of other threads
    (a watchdog's polls, a data loader) and Python frames (kind ``python``: they shadow the
    ops' own thread time) belong to no marked step. Computed once per graph structure."""
    return _cached(measured, graph, "step_work", lambda: _step_work(measured, graph))


def _step_work(measured: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    # the step rows are not kept: they serve the step's work (this) and its launches only
    by_start = _step_rows(measured, graph)
    rows = by_start.copy()
    ev = measured.events
    kind = ev.column("kind")
    # the Python frames (``python_function``) are a second view of the ops' thread time (a
    # chain of their own, replayed as measured: traincast.graph.build), not more work
    codes, kinds = A.dictionary_parts(kind)
    python = codes == kinds.index("python") if "python" in kinds else np.zeros(codes.size, bool)
    rows[python[:rows.size]] = -1
    # host ops of other threads (a watchdog's polls, a data loader) are not the step's
    # work: they count through the device work they launch
    mk = A.to_numpy(measured.iterations.column("marker_event")).astype(np.int64)
    pid = A.to_numpy(ev.column("pid"))[:rows.size]
    tid = A.to_numpy(ev.column("tid"))[:rows.size]
    node = np.flatnonzero(rows >= 0)
    row = rows[node]
    # each row's marker thread, compared with each node's thread (no marker: no thread)
    has = mk >= 0
    m = np.clip(mk, 0, None)
    m_pid, m_tid = pid[m], tid[m]
    other = has[row] & ((pid[node] != m_pid[row]) | (tid[node] != m_tid[row]))
    rows[node[other]] = -1
    del node, row, other
    dev, row = _cached(measured, graph, "launched_work",
                       lambda: _launched_work(measured, graph, by_start))
    rows[dev] = row
    return rows


def launched_work(measured: TraceSet, graph: ExecutionGraph) -> tuple[np.ndarray, np.ndarray]:
    """int64 (device node, iterations row): the device work of each marked step. A GPU op at
    the end of a ``LAUNCH`` edge belongs to the step whose marker holds its launching host
    op's measured start (:func:`step_rows`); a GPU op whose launch is not in the trace (no
    ``LAUNCH`` edge: e.g. a runtime call the profiler dropped) to the step whose marker holds
    its own measured start. Ops outside every marked step are left out."""
    return _cached(measured, graph, "launched_work",
                   lambda: _launched_work(measured, graph, _step_rows(measured, graph)))


def _launched_work(measured: TraceSet, graph: ExecutionGraph, rows: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`launched_work` from the nodes' :func:`step_rows` ``rows``."""
    e = graph.edges_of_kind(EdgeKind.LAUNCH)
    host = graph.src[e] // 2
    dev = graph.dst[e] // 2
    row = rows[host]
    device = A.to_numpy(measured.events.column("device"))
    unlaunched = (device >= 0) & (rows >= 0)
    unlaunched[dev] = False
    unlaunched[graph.exec_edge_of_node() < 0] = False  # host-side collectives, annotations
    extra = np.flatnonzero(unlaunched)
    dev = np.concatenate([dev, extra])
    row = np.concatenate([row, rows[extra]])
    sel = row >= 0
    return dev[sel], row[sel]
