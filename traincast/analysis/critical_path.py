"""The multi-rank critical path of one training step: the chain of dependencies that sets it.

Definition
----------
The execution graph (:mod:`traincast.graph.model`) gives every event a start point ``2i`` and
an end point ``2i + 1``; the simulator (:mod:`traincast.simulate.engine`) gives every point
the time ``t[p] = max(anchor[p], max over edges e into p of t[src_e] + lag_e)``. An edge is
*binding* when ``t[src] + lag == t[dst]``: it is the constraint that set the time of its
destination. The critical path of a step is found by walking back from the end point of the
step marker (``ProfilerStep#N`` of the chosen rank) along binding edges until the step's start
point is reached (or a point that no edge explains). Every edge on it has zero slack, so
lengthening any of its segments lengthens the step by the same amount, and shortening one
shortens the step by at most that amount (a tied or nearly tied path may take over), while a
segment off the path can grow by its slack without moving the step. This is the classic
longest (zero-slack) path of an activity network evaluated with the max-plus recurrence (the
replay's own times, so it is the path of the replay, measured or what-if), as in Lin et al.,
"Towards Universal
Performance Modeling for ML Training on Multi-GPU Platforms" (arXiv 2404.12674, Sec. 5,
critical path through CPU threads, GPU streams and communication), and HTA's critical path
analysis (facebookresearch/HolisticTraceAnalysis, ``hta/analyzers/critical_path_analysis.py``,
docs "Critical Path Analysis"), with two differences from HTA:

* **Across ranks.** HTA builds one graph per rank, so a collective's waiting for a slow peer
  looks like communication time. Here a collective's end depends on every member's arrival
  (``ARRIVE`` edges into the collective's barrier point, a ``COLLECTIVE`` edge from it to each
  member's end); when a peer arrived last, its arrival binds and the walk continues on that
  peer, through whatever made it late. The path shows the pair as one ``COLLECTIVE`` segment
  from the peer's start to the member's end (the ``ARRIVE`` part has no duration). Waiting
  for a peer therefore never appears on the path: what the waiting rank waited *for* does.
* **Time-tight.** HTA takes the longest path by weight, in which the gaps between top-level
  CPU operators, sync edges and blocking calls weigh zero; here every segment weighs exactly
  the time between its two points in the replay, so the segments add up to the step time.

Tie rule
--------
Binding edges come from :func:`traincast.graph.binding.binding_edges` (one vectorised sort
of the tight edges; the same definition the idle analysis uses). When several edges into a
point bind, the walk follows the first in :data:`TIE_ORDER`: ``EXEC`` before ``COLLECTIVE``
(the only two kinds that meet, at a collective's end: a member that itself arrived last is
bound by its own transfer), then ``SYNC``, ``WAIT``, ``DATA``, ``CROSS_STREAM`` (a cause on
another thread or stream) before ``ISSUE``, ``LAUNCH`` and last ``STREAM`` and ``THREAD``
(the resource's own order), and among edges of one kind the one added first (lowest edge
index) -- deterministic for a given graph. A binding edge is preferred over an anchor that
gives the same time.

Segments and attribution
------------------------
Each row of :attr:`CriticalPath.path` is one edge ``src -> dst``; ``dur_ns = t[dst] - t[src]``
(ns), ``start_ns``/``end_ns`` are ``t[src]``/``t[dst]`` on the replay's aligned clock.
The segment is attributed to one event (``event``, a row of ``TraceSet.events``):

* ``THREAD`` (CPU time on a host thread between consecutive points): the innermost event
  active on that thread during the segment: the event whose start is ``src`` (start -> child
  start, or start -> own end), else the event whose end is ``dst`` (child end -> parent end),
  else (child end -> next child start) the parent of both, i.e. the parent's self time; -1
  when no event is open. Nesting is the one the graph builder used (the THREAD chain).
  This is HTA's edge attribution (``CPGraph._attribute_edge``, cases 1-4).
* ``EXEC``: the GPU op (or host collective) itself; ``COLLECTIVE``: the collective whose end
  it is (on that collective's rank), the segment being the transfer after the last arrival.
* latencies -- ``LAUNCH``, ``SYNC``, ``WAIT``, ``ISSUE``, ``STREAM``, ``CROSS_STREAM``,
  ``DATA``: the event whose point the latency delays (``dst``).

``category`` (the key of ``by_family``) is the event's ``op_family`` for work segments
(``THREAD``, ``EXEC``, ``COLLECTIVE``), with these exceptions and latency categories:

* ``host_untraced``: a ``THREAD`` segment outside every traced operator: no event open, or
  only an annotation of family ``other`` (``ProfilerStep#N``, user ranges): Python or
  framework time the profiler did not break down;
* ``comm_unmatched``: ``EXEC`` of a collective whose peers' traces are absent (replayed with
  its measured duration, transfer and waiting for peers together);
* ``launch_latency`` (LAUNCH), ``sync_wakeup`` (SYNC), ``wait_wakeup`` (WAIT: a host thread
  resuming after a collective it waited for), ``issue_latency`` (ISSUE), ``stream_gap``
  (STREAM: a gap kept between FIFO ops), ``cross_stream_wait`` (CROSS_STREAM),
  ``data_dependency`` (DATA);
* ``anchored``: time before a point of the chosen rank that no edge explains (an ANCHOR row);
  ``late_start``: the same on another rank reached through a collective, where that point is
  at or before the first op of the peer's step (the peer entered the step late: it was not
  waiting, the chosen rank's collective waited for it to start); ``waiting_for_peer``: such
  a point later in the peer's step (an untraced delay inside the peer's step). Waiting that the trace explains never appears as a
  category: the path goes through the peer's work instead.

Exactness at the ends: the walk stops at the step's start point, or at the first point whose
time is at or before the step start (a segment that began earlier, e.g. a kernel launched in
the previous step or a peer's work, is clipped to the window: ``start_ns`` is the step start
and ``dur_ns`` only the part inside), or at a point no edge explains (its time comes from its
anchor: the first event of a host thread, or a GPU op whose launch is outside the trace);
then one ``ANCHOR`` row covers the step start up to that point. Hence ``path.dur_ns.sum()``
equals the predicted step time exactly, always.

Iteration and rank defaults: the last *complete* iteration (present with a step marker on
every rank; the only iteration when the files have no markers and the whole file is one
iteration), and the rank whose predicted step is longest in it (the rank that sets the step
time; ties: lowest rank). Without step markers the walk starts at the rank's latest point and
the window is [earliest, latest] point of the rank, as in the predicted timeline.

Cost: the preparation is vectorised (binding edges: one sort of the binding edges by
destination and tie rank; thread nesting: pointer jumping over the THREAD chains), then a
Python loop runs over the path only. :func:`critical_path_family_columns` gives ``by_family``
as numpy columns from the same walk, without importing pandas (the verdict's shares).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from traincast.errors import ParameterError
from traincast.graph.binding import PRIORITY, binding_edges
from traincast.graph.model import EdgeKind, ExecutionGraph, NodeRange
from traincast.graph.nesting import thread_parents
from traincast.simulate.replay import Replay
from traincast.trace import arrow as A
from traincast.util.allocator import release_memory

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Preference among binding edges into one point, first wins (see the module docstring);
#: the order of :data:`traincast.graph.binding.PRIORITY`, shared with the idle analysis.
TIE_ORDER: tuple[EdgeKind, ...] = tuple(sorted(PRIORITY, key=PRIORITY.__getitem__))

#: Category of a latency segment, by edge kind (work segments take the event's op_family).
LATENCY_CATEGORY: dict[EdgeKind, str] = {
    EdgeKind.LAUNCH: "launch_latency",
    EdgeKind.SYNC: "sync_wakeup",
    EdgeKind.QUEUE: "launch_queue_wait",
    EdgeKind.WAIT: "wait_wakeup",
    EdgeKind.ISSUE: "issue_latency",
    EdgeKind.STREAM: "stream_gap",
    EdgeKind.CROSS_STREAM: "cross_stream_wait",
    EdgeKind.DATA: "data_dependency",
}

#: ``edge_kind`` of the row covering the time before an anchored first point.
ANCHOR = "ANCHOR"

PATH_COLUMNS = ["order", "rank", "event", "name", "kind", "op_family", "edge_kind",
                "category", "start_ns", "end_ns", "dur_ns", "edge", "src_point", "dst_point"]


@dataclass
class CriticalPath:
    """Critical path of one step (see the module docstring for definitions).

    Attributes:
        rank, iteration: the step whose end the walk starts from.
        start_ns, end_ns: predicted step window (ns, replay clock).
        path: one row per segment in time order: ``order``, ``rank``, ``event`` (row of
            ``TraceSet.events``, -1 for untraced host time), ``name``, ``kind``,
            ``op_family`` (of the event), ``edge_kind`` (``EdgeKind`` name or ``ANCHOR``),
            ``category`` (op family or latency kind), ``start_ns``, ``end_ns``, ``dur_ns``
            (ns), ``edge`` (graph edge index, -1 for ANCHOR), ``src_point``, ``dst_point``.
        by_family, by_rank, by_kind: time on the path per ``category`` / ``rank`` /
            ``edge_kind``: ``time_ns`` and ``share_pct`` (of the step time), largest first.
        point_events: sorted rows of the events whose start or end point the path passes
            through (HTA's ``critical_path_events_set``).
        reached_start: the walk reached the step start by binding edges (no ANCHOR row).
    """

    rank: int
    iteration: int
    start_ns: int
    end_ns: int
    path: pd.DataFrame
    by_family: pd.DataFrame
    by_rank: pd.DataFrame
    by_kind: pd.DataFrame
    point_events: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    reached_start: bool = True

    @property
    def duration_ns(self) -> int:
        """Predicted step time of the chosen rank (ns) = ``path.dur_ns.sum()``."""
        return self.end_ns - self.start_ns

    @property
    def events(self) -> np.ndarray:
        """Every event on the path: segments' events and point owners, sorted rows."""
        ev = self.path["event"].to_numpy(np.int64)
        return np.union1d(ev[ev >= 0], self.point_events).astype(np.int64)


def _select(replay: Replay, rank: int | None, iteration: int | None
            ) -> tuple[int, int, int, int, int, int]:
    """(rank, iteration, start point, end point, start_ns, end_ns) of the step to walk."""
    t = replay.result.times
    it = replay.measured.iterations
    # read from the buffers: Arrow's to_numpy imports pandas on first use
    r = A.to_numpy(it.column("rank")).astype(np.int64)
    n = A.to_numpy(it.column("iteration")).astype(np.int64)
    mk = A.to_numpy(it.column("marker_event")).astype(np.int64)
    if r.size == 0:
        raise ParameterError("the trace has no iteration")
    ranks = np.unique(r)
    g = replay.graph
    node_rank = g.node_rank
    node_of = _node_of(g, mk)
    start = np.full(r.size, -1, np.int64)
    end = np.full(r.size, -1, np.int64)
    p_start = np.full(r.size, -1, np.int64)
    p_end = np.full(r.size, -1, np.int64)
    for i in range(r.size):
        if mk[i] >= 0 and node_of[i] >= 0:
            p_start[i], p_end[i] = 2 * node_of[i], 2 * node_of[i] + 1
        else:  # the whole file is one iteration: the rank's earliest and latest points
            pts = np.flatnonzero(np.repeat(node_rank == r[i], 2) & (t[:2 * g.n_nodes] >= 0))
            if pts.size:
                p_start[i] = pts[np.argmin(t[pts])]
                late = pts[t[pts] == t[pts].max()]  # prefer an end point on ties
                p_end[i] = late[late % 2 == 1][-1] if (late % 2 == 1).any() else late[-1]
        if p_start[i] >= 0:
            start[i], end[i] = t[p_start[i]], t[p_end[i]]
    valid = (start >= 0) & (end >= start)
    if iteration is None:
        full = [k for k in np.unique(n[valid]).tolist()
                if np.array_equal(np.unique(r[valid & (n == k)]), ranks)]
        if not full:
            full = np.unique(n[valid]).tolist()
        if not full:
            where = replay.measured.where
            raise ParameterError(f"{where + ': ' if where else ''}no iteration has a replayed "
                                 "step")
        iteration = int(full[-1])
    sel = valid & (n == iteration)
    if rank is not None:
        sel &= r == rank
    if not sel.any():
        what = f"iteration {iteration}" + (f" on rank {rank}" if rank is not None else "")
        raise ParameterError(f"{what} is not in the trace (or was not replayed)")
    cand = np.flatnonzero(sel)
    i = int(cand[np.argmax(end[cand] - start[cand])])  # first max: lowest rank on ties
    return (int(r[i]), int(iteration), int(p_start[i]), int(p_end[i]), int(start[i]),
            int(end[i]))


def _events_of(g: ExecutionGraph, nodes: np.ndarray) -> np.ndarray:
    """``g.node_event[nodes]``, without laying out a graph's :class:`~traincast.graph.
    model.NodeRange` column (node ``i`` is event row ``i``: the nodes themselves)."""
    if isinstance(vars(g).get("_node_event"), NodeRange):
        return np.array(nodes, copy=True)
    return g.node_event[nodes]


def _node_of(g: ExecutionGraph, events: np.ndarray) -> np.ndarray:
    """int64 per entry of ``events``: the node of that event (-1: none or a negative
    entry); by a search when the nodes' events ascend (the builder's), without an inverse
    of every node."""
    ev = np.asarray(events, np.int64)
    stored = vars(g).get("_node_event")
    if isinstance(stored, NodeRange):  # node i is event row i: nothing laid out
        return np.where((ev >= 0) & (ev < stored.size), ev, -1).astype(np.int64)
    ne = g.node_event
    if ne.size and ev.size and ev.max() <= ne[-1] and bool(np.all(ne[1:] > ne[:-1])):
        # keys in the nodes' type (<= its last value): no cast of the whole column
        at = np.minimum(np.searchsorted(ne, np.maximum(ev, 0).astype(ne.dtype)), ne.size - 1)
        return np.where((ev >= 0) & (ne[at] == ev), at, -1).astype(np.int64)
    node_of = np.full(int(ne.max(initial=-1)) + 1, -1, np.int64)
    node_of[ne] = np.arange(g.n_nodes)
    return np.where(ev >= 0, node_of[np.maximum(ev, 0)], -1)


def critical_path(replay: Replay, rank: int | None = None, iteration: int | None = None
                  ) -> CriticalPath:
    """The critical path of one step of a replay (see the module docstring).

    Args:
        replay: a replay (:func:`traincast.simulate.replay.replay`: structural latencies;
            ``replay(ts, exact=True)``: measured latencies; a ``traincast.predict(ts)``
            prediction is one); the path is of the simulated times ``replay.result.times``.
        rank: rank whose step end the walk starts from; default: the rank with the longest
            predicted step in ``iteration``.
        iteration: step number (``ProfilerStep#N``); default: the last iteration present on
            every rank.

    Returns:
        :class:`CriticalPath`; ``path.dur_ns.sum() == end_ns - start_ns`` (ns).

    Raises:
        ParameterError: the iteration or rank is not in the trace.
    """
    import pandas as pd  # lazy: the family shares (critical_path_family_columns) skip it

    w = _walk(replay, rank, iteration)
    cols = _path_columns(replay, w)
    path = pd.DataFrame(cols)
    g = replay.graph
    t = np.asarray(replay.result.times, np.int64)
    s_pt, d_pt = w.src_point, w.dst_point
    on_path = np.concatenate([s_pt[s_pt >= 0], d_pt, [w.end_point]]).astype(np.int64)
    point_events = np.unique(_events_of(g, on_path[t[on_path] >= w.start_ns] // 2)
                             ).astype(np.int64)
    total = w.end_ns - w.start_ns
    return CriticalPath(
        rank=w.rank, iteration=w.iteration, start_ns=w.start_ns, end_ns=w.end_ns, path=path,
        by_family=pd.DataFrame(_share(cols["category"], cols["dur_ns"], "family", total)),
        by_rank=pd.DataFrame(_share(cols["rank"], cols["dur_ns"], "rank", total)),
        by_kind=pd.DataFrame(_share(cols["edge_kind"], cols["dur_ns"], "edge_kind", total)),
        point_events=point_events, reached_start=w.reached,
    )


def critical_path_family_columns(replay: Replay, rank: int | None = None,
                                 iteration: int | None = None) -> dict[str, np.ndarray]:
    """``critical_path(replay, rank, iteration).by_family`` as numpy columns, without pandas.

    Args:
        replay, rank, iteration: as for :func:`critical_path` (same defaults).

    Returns:
        ``family`` (object: the segment categories), ``time_ns`` (int64, ns on the path),
        ``share_pct`` (float64, % of the step time; 0.0 when the step takes no time): one row
        per category, largest time first (ties: family ascending) -- the names, dtypes and
        rows of ``by_family``.

    Raises:
        ParameterError: the iteration or rank is not in the trace.
    """
    w = _walk(replay, rank, iteration)
    cols = _path_columns(replay, w, names=False)
    return _share(cols["category"], cols["dur_ns"], "family", w.end_ns - w.start_ns)


@dataclass
class _Walk:
    """The segments of a critical path, before their description (points, ns, edge rows).

    ``node`` (int64, -1: no event open), ``edge_kind`` (int64: an :class:`EdgeKind` value,
    ``len(EdgeKind)`` for the ANCHOR row), ``start``/``end`` (int64 ns, clipped to the step),
    ``edge`` (-1 for ANCHOR), ``src_point`` (-1 for ANCHOR) and ``dst_point``, one entry per
    segment in time order; ``late_start``: the ANCHOR row is a peer's late start.
    """

    rank: int
    iteration: int
    start_ns: int
    end_ns: int
    end_point: int
    reached: bool
    late_start: bool
    node: np.ndarray
    edge_kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    edge: np.ndarray
    src_point: np.ndarray
    dst_point: np.ndarray


def _walk(replay: Replay, rank: int | None, iteration: int | None) -> _Walk:
    """Walk back from the chosen step's end along binding edges (see the module docstring).

    Raises:
        ParameterError: the iteration or rank is not in the trace.
    """
    g = replay.graph
    t = np.asarray(replay.result.times, np.int64)
    rank, iteration, p0, p1, t0, t1 = _select(replay, rank, iteration)
    best = binding_edges(g, t, narrow=True)  # a few read by the walk: int32 (half the pages)
    src = g.src
    # the walk: a Python loop over the path only, indexing the arrays point by point
    # (converting whole arrays to lists would cost more than the walk at thousands of ranks)
    edges: list[int] = []
    p = p1
    while p != p0 and t[p] > t0:
        e = int(best[p])
        if e < 0:
            break
        edges.append(e)
        p = int(src[e])
    reached = p == p0 or t[p] <= t0
    edges.reverse()
    e_arr = np.asarray(edges, np.int64)
    s_pt, d_pt = g.src[e_arr], g.dst[e_arr]
    # a barrier point (last arrival of a collective) is not an event: fold each ARRIVE edge
    # (lag 0) into the COLLECTIVE edge after it, which then starts at the arriving peer
    n_ev_pts = g.n_event_points
    via = s_pt >= n_ev_pts
    if via.any():
        s_pt = s_pt.copy()
        s_pt[via] = g.src[best[s_pt[via]]]
        keep = d_pt < n_ev_pts
        e_arr, s_pt, d_pt = e_arr[keep], s_pt[keep], d_pt[keep]
    del best  # before the path's description
    release_memory()  # its pages (freed on the heap, often), back before the description
    ek = g.kind[e_arr].astype(np.int64)
    # attribution to nodes (see the module docstring)
    node = d_pt // 2
    thread = ek == int(EdgeKind.THREAD)
    if thread.any():
        parent = thread_parents(g)
        from_start = s_pt % 2 == 0
        to_end = d_pt % 2 == 1
        node = np.where(thread & from_start, s_pt // 2, node)
        node = np.where(thread & ~from_start & ~to_end, parent[d_pt // 2], node)
    node = np.where(ek == int(EdgeKind.EXEC), s_pt // 2, node)
    s_t = np.maximum(t[s_pt], t0)  # a segment that began before the step is clipped
    d_t = t[d_pt]
    if not reached:  # the walk ended at a point whose time is its anchor: one ANCHOR row
        s_pt = np.concatenate([[-1], s_pt])
        d_pt = np.concatenate([[p], d_pt])
        e_arr = np.concatenate([[-1], e_arr])
        ek = np.concatenate([[len(EdgeKind)], ek])
        node = np.concatenate([[p // 2], node])
        s_t = np.concatenate([[t0], s_t])
        d_t = np.concatenate([[int(t[p])], d_t])
    late = (not reached and int(g.node_rank[p // 2]) != rank
            and _starts_step(replay, t, p, iteration))
    return _Walk(rank=rank, iteration=iteration, start_ns=t0, end_ns=t1, end_point=p1,
                 reached=bool(reached), late_start=bool(late), node=node, edge_kind=ek,
                 start=s_t, end=d_t, edge=e_arr, src_point=s_pt, dst_point=d_pt)


def _starts_step(replay: Replay, t: np.ndarray, p: int, iteration: int) -> bool:
    """Whether point ``p`` is at or before the first op of its rank's step ``iteration``:
    the rank had not begun the step (its step marker's start, or no op of the step of that
    rank started earlier)."""
    g = replay.graph
    r = int(g.node_rank[p // 2])
    col = A.combined(replay.measured.events.column("iteration"))  # buffers, not to_numpy
    nodes = np.flatnonzero(g.node_rank == r)  # the rank's nodes, then their iteration
    evs = _events_of(g, nodes)
    same = A.filled(col, -1)[evs] == iteration
    valid = A.valid_mask(col)  # a null iteration is no step's
    if valid is not None:
        same &= valid[evs]
    nodes = nodes[same]
    starts = t[2 * nodes]
    starts = starts[starts >= 0]
    return bool(starts.size == 0 or t[p] <= starts.min())


def _path_columns(replay: Replay, w: _Walk, *, names: bool = True) -> dict[str, np.ndarray]:
    """The path table as columns (:data:`PATH_COLUMNS`, in order; ``name`` left out when
    ``names`` is False): segment nodes -> event rows, names, kinds, families, categories."""
    g = replay.graph
    ev_tbl = replay.measured.events
    node = w.node
    has = node >= 0
    nd = np.clip(node, 0, None)
    ev = np.where(has, _events_of(g, nd), -1).astype(np.int64)
    # a segment without an event (untraced host time) is on the rank of its thread
    rank = np.where(has, g.node_rank[nd], g.node_rank[w.dst_point // 2]).astype(np.int64)
    out: dict[str, np.ndarray] = {"order": np.arange(node.size, dtype=np.int64), "rank": rank,
                                  "event": ev}
    idx = np.clip(ev, 0, None)
    for col in ("name", "kind", "op_family") if names else ("kind", "op_family"):
        codes, values = A.dictionary_parts(ev_tbl.column(col))  # one chunk: not copied
        vals = np.asarray(values + [""], object)
        out[col] = vals[np.where(has, codes[idx] if codes.size else 0, len(vals) - 1)]
    kind_names = np.array([k.name for k in EdgeKind] + [ANCHOR], object)
    ek = kind_names[w.edge_kind]
    out["edge_kind"] = ek
    cat = out["op_family"].copy()
    for k, name in LATENCY_CATEGORY.items():
        cat[ek == k.name] = name
    untraced = ~has | ((out["kind"] == "annotation") & (out["op_family"] == "other"))
    cat[(ek == EdgeKind.THREAD.name) & untraced] = "host_untraced"
    unmatched = has & np.isin(nd, g.unmatched_collectives)
    cat[(ek == EdgeKind.EXEC.name) & unmatched] = "comm_unmatched"
    anchor = ek == ANCHOR
    cat[anchor] = np.where(rank[anchor] == w.rank, "anchored", "waiting_for_peer")
    if w.late_start:  # the ANCHOR row (the first) is a peer that entered the step late
        cat[0] = "late_start"
    out["category"] = cat
    out["start_ns"] = np.asarray(w.start, np.int64)
    out["end_ns"] = np.asarray(w.end, np.int64)
    out["dur_ns"] = out["end_ns"] - out["start_ns"]
    out["edge"] = np.asarray(w.edge, np.int64)
    out["src_point"] = np.asarray(w.src_point, np.int64)
    out["dst_point"] = np.asarray(w.dst_point, np.int64)
    return {c: out[c] for c in PATH_COLUMNS if c in out}


def _share(keys: np.ndarray, dur_ns: np.ndarray, name: str, total: int
           ) -> dict[str, np.ndarray]:
    """Time per value of ``keys`` (one per segment; ``dur_ns`` int64 ns): ``name`` (the
    values, their dtype), ``time_ns`` (int64) and ``share_pct`` (float64, % of ``total``; 0.0
    when ``total <= 0``), largest time first, ties by value ascending (a pandas groupby-sum
    sorted by time descending then value, as columns)."""
    values, inverse = np.unique(keys, return_inverse=True)
    time_ns = np.zeros(values.size, np.int64)
    np.add.at(time_ns, inverse.reshape(-1), np.asarray(dur_ns, np.int64))
    order = np.argsort(-time_ns, kind="stable")  # values ascend: ties keep them in order
    time_ns = time_ns[order]
    share = 100.0 * time_ns / total if total > 0 else np.zeros(time_ns.size, np.float64)
    return {name: values[order], "time_ns": time_ns, "share_pct": share}
