"""Nesting of host events on their threads: which event encloses which. The one home of it.

Two entry points, one walk:

* From time intervals (:func:`nest_walk`, :func:`nest_parents`, :func:`thread_chains`): one
  thread's events sorted by (start, -duration), walked with a stack of open events. The walk
  gives each event its enclosing event (-1 at top level) and the thread's start/end points in
  nesting order. Two documented policies for what the trace does not nest properly
  (``overlap``):

  - ``"clip"`` (the graph builder, :mod:`traincast.graph.build`): an event that starts at
    or after the open event's end is not inside it (touching is sequence); an event that
    outlives its enclosing event is clipped to that event's end (so the chain of points is
    monotone). The compiled twin (:func:`traincast.graph.numba_kernels.nest_walk`, numba when
    importable) follows this policy, and so does its closed form in numpy for threads that
    nest without clipping (:mod:`traincast.graph.nesting_np`: every thread of a small job
    at once, the threads that clip walked).
  - ``"sibling"`` (operator work, :mod:`traincast.costs.ops.join`): an event that starts at
    the open event's end instant is still inside it; one that overlaps without nesting
    (clock jitter) is a sibling: its parent is the innermost open event that ends no earlier
    than it does. Ends are never clipped.

* From a built graph (:func:`thread_parents`, :func:`thread_edge_owner`): the nesting read back
  off the graph's THREAD chains (pointer jumping, vectorised) when the graph does not carry
  the builder's record of it.

Times are int64 ns; rows/points follow :mod:`traincast.graph.model` (point ``2 * row`` is an
event's start, ``2 * row + 1`` its end).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from traincast.graph.jit import kernel, worth_compiling
from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.graph.nesting_np import nest_segments

Overlap = Literal["clip", "sibling"]


def nest_walk(t0: list[int], t1: list[int], overlap: Overlap = "clip"
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One thread's events (starts ``t0``, ends ``t1``, plain lists sorted by (start,
    -duration)) in nesting order: ``(order, eff, par)``, int64 arrays, with ``order`` the local
    points (``2i`` start, ``2i + 1`` end of position ``i``), ``eff`` each event's end as the
    walk used it (clipped to its parent's with ``overlap="clip"``, never below its start;
    as given with ``"sibling"``) and ``par`` its enclosing position (-1 at top level). See the
    module docstring for the two ``overlap`` policies; with ``"clip"`` this is what
    :func:`traincast.graph.numba_kernels.nest_walk` computes."""
    clip = overlap == "clip"
    if not clip and overlap != "sibling":
        raise ValueError(f"overlap must be 'clip' or 'sibling', got {overlap!r}")
    n = len(t0)
    eff = [0] * n  # effective end of each position
    par = [-1] * n
    order: list[int] = []  # 2*i: start of position i, 2*i + 1: its end
    push_pt = order.append
    stack: list[int] = []
    for i in range(n):
        t = t0[i]
        if clip:
            while stack and eff[stack[-1]] <= t:
                push_pt(2 * stack.pop() + 1)
        else:
            while stack and eff[stack[-1]] < t:
                push_pt(2 * stack.pop() + 1)
        e = t1[i]
        if stack:
            top = stack[-1]
            if e <= eff[top]:
                par[i] = top
            elif clip:
                par[i] = top
                e = eff[top]
            else:  # overlaps without nesting: a sibling, inside what encloses both
                while stack and eff[stack[-1]] < e:
                    push_pt(2 * stack.pop() + 1)
                par[i] = stack[-1] if stack else -1
        eff[i] = e if (e > t or not clip) else t
        push_pt(2 * i)
        stack.append(i)
    while stack:
        push_pt(2 * stack.pop() + 1)
    return (np.asarray(order, np.int64), np.asarray(eff, np.int64),
            np.asarray(par, np.int64))


def nest_parents(starts: np.ndarray, ends: np.ndarray, overlap: Overlap = "clip"
                 ) -> np.ndarray:
    """int64[n]: the enclosing position of each of one thread's events (``starts``/``ends``
    sorted by (start, -duration)), -1 at top level; :func:`nest_walk`'s ``par``."""
    return nest_walk(starts.tolist(), ends.tolist(), overlap)[2]


def thread_chain(rows: np.ndarray, ts: np.ndarray, end: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points of one host thread in nesting order (``overlap="clip"``), with their times.

    ``rows`` are node ids sorted by (start, -duration); ``ts``/``end`` are indexed by row.
    Returns (points, times, parents) as int64 arrays: ``parents[i]`` is the enclosing event
    of ``rows[i]`` (-1 at top level); an event that outlives its parent is clipped to the
    parent's end. The walk is compiled when numba is (:func:`_nest_walk_kernel`), else
    :func:`nest_walk`; points, times and parents are then mapped back to node ids in numpy.
    """
    walk = _nest_walk_kernel(2 * ts.size)
    if walk is not None:  # the same walk, compiled (traincast.graph.numba_kernels)
        local, eff_a, par_a = walk(np.ascontiguousarray(ts[rows], np.int64),
                                   np.ascontiguousarray(end[rows], np.int64))
    else:
        local, eff_a, par_a = nest_walk(ts[rows].tolist(), end[rows].tolist())
    pos = local >> 1
    is_end = (local & 1).astype(bool)
    times = np.where(is_end, eff_a[pos], ts[rows][pos])
    pts = 2 * rows[pos] + is_end
    parents = np.where(par_a >= 0, rows[np.clip(par_a, 0, None)], -1)
    return pts, times, parents


def thread_chains(rs: np.ndarray, bounds: np.ndarray, t0: np.ndarray, t1: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`thread_chain` of every segment ``rs[bounds[i]:bounds[i + 1]]`` (threads,
    each sorted by (start, -duration)): (points, times, parents, first point position of
    each segment); points of a segment follow the previous segment's."""
    walk = _segments_kernel(2 * t0.size)
    if walk is not None:
        pts, times, parents = walk(np.asarray(rs, np.int64), np.asarray(t0, np.int64),
                                   np.asarray(t1, np.int64), bounds)
        return pts, times, parents, 2 * bounds[:-1]
    # every thread at once in numpy where it nests without clipping, the others walked
    got = nest_segments(rs, t0, t1, bounds, nest_walk)
    if got is not None:
        return (*got, 2 * bounds[:-1])
    parts = [thread_chain(rs[a:b], t0, t1) for a, b in zip(bounds[:-1].tolist(),
                                                           bounds[1:].tolist(), strict=True)]
    return (np.concatenate([x[0] for x in parts]), np.concatenate([x[1] for x in parts]),
            np.concatenate([x[2] for x in parts]), 2 * bounds[:-1])


def link_positions(n_points: int, bounds: np.ndarray) -> np.ndarray:
    """Positions ``i`` of the chain points whose successor ``i + 1`` is on the same thread
    (every point but each thread's last; a thread's points are ``[2 bounds[s], 2 bounds[s +
    1])``)."""
    last = np.zeros(n_points, bool)
    last[2 * bounds[1:] - 1] = True
    return np.flatnonzero(~last[:-1])


def thread_links(pts: np.ndarray, times: np.ndarray, bounds: np.ndarray, cap: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """THREAD edges ``(src, dst, lag)`` of the chains :func:`thread_chains` gives: each point
    but a thread's last links to the next, lag = the time between them, at most ``cap[dst]``
    when ``cap`` is not empty. Compiled when numba is
    (:func:`traincast.graph.numba_kernels.thread_links`)."""
    compiled = _links_kernel(max(pts.size, cap.size))
    if compiled is not None:
        return compiled(pts, times, bounds, cap)
    link = link_positions(pts.size, bounds)
    lag = times[link + 1] - times[link]
    if cap.size:
        lag = np.minimum(lag, cap[pts[link + 1]])
    return pts[link], pts[link + 1], lag


_WALK: list = []
_SEG_WALK: list = []
_LINKS: list = []
_INTO: list = []


def thread_links_into(pts: np.ndarray, times: np.ndarray, bounds: np.ndarray,
                      src: np.ndarray, dst: np.ndarray, lag: np.ndarray) -> None:
    """:func:`thread_links` without a cap, written into ``src``/``dst``/``lag`` (each of
    ``pts.size - (bounds.size - 1)`` edges): no arrays of their own. ``lag`` is int64, or
    int32 when the caller knows every difference of ``times`` fits it. Compiled when numba
    is (:func:`traincast.graph.numba_kernels.thread_links_into`)."""
    if _links_kernel(pts.size) is not None and times.dtype == np.int64 and \
            lag.dtype in (np.int32, np.int64) and src.dtype == dst.dtype == pts.dtype:
        if not _INTO:
            _INTO.append(kernel("traincast.graph.numba_kernels", "thread_links_into"))
        if _INTO[0] is not None:
            _INTO[0](pts, times, bounds, src, dst, lag)
            return
    src[:], dst[:], lag[:] = thread_links(pts, times, bounds, np.empty(0, np.int64))


#: chain points per slice of :func:`clipped_times` and :func:`thread_links_from`
_SLICE = 1 << 20


def clipped_times(pts: np.ndarray, times: np.ndarray, measured: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The chain points whose walk time (:func:`thread_chains`) is not their measured time
    (``measured[point]``: an end clipped to its parent's): ``(positions ascending,
    times)``, int64; found a slice of the points at a time."""
    at, val = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for a in range(0, pts.size, _SLICE):
        b = min(a + _SLICE, pts.size)
        d = np.flatnonzero(times[a:b] != measured[pts[a:b]])
        at.append(d + a)
        val.append(np.asarray(times[a:b][d], np.int64))
    return np.concatenate(at), np.concatenate(val)


def thread_links_from(pts: np.ndarray, clipped: tuple[np.ndarray, np.ndarray],
                      measured: np.ndarray, bounds: np.ndarray, src: np.ndarray,
                      dst: np.ndarray, lag: np.ndarray) -> None:
    """:func:`thread_links_into` with the points' times made again from ``measured`` and
    the ``clipped`` ones (:func:`clipped_times`), a slice of whole chains at a time: the
    walk's times need not be kept until the links are written."""
    at, val = clipped
    n_chains = bounds.size - 1
    s0 = k = 0
    while s0 < n_chains:
        # whole chains [s0, s1), about _SLICE points (at least one chain)
        s1 = int(np.searchsorted(bounds, bounds[s0] + _SLICE // 2, side="right")) - 1
        s1 = min(max(s1, s0 + 1), n_chains)
        a, b = 2 * int(bounds[s0]), 2 * int(bounds[s1])
        part = pts[a:b]
        times = measured[part]
        lo, hi = np.searchsorted(at, [a, b])
        times[at[lo:hi] - a] = val[lo:hi]
        n_e = (b - a) - (s1 - s0)
        thread_links_into(part, times, bounds[s0:s1 + 1] - bounds[s0], src[k:k + n_e],
                          dst[k:k + n_e], lag[k:k + n_e])
        k += n_e
        s0 = s1


def _nest_walk_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.nest_walk`, or None (:func:`traincast.graph.jit.
    kernel`: numba missing, ``TRAINCAST_NO_NUMBA`` set, or ``size`` points too few to pay for
    loading it). Loaded on first use: importing numba and its compiled cache is a start-up
    cost."""
    if not worth_compiling(size):
        return None
    if not _WALK:
        _WALK.append(kernel("traincast.graph.numba_kernels", "nest_walk"))
    return _WALK[0]


def _links_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.thread_links`, or None (numba missing, ``size``
    too small, or the compiled nesting walk switched off)."""
    if not worth_compiling(size):
        return None
    if not _LINKS:
        _LINKS.append(kernel("traincast.graph.numba_kernels", "thread_links"))
    return _LINKS[0] if _nest_walk_kernel() is not None else None


def _segments_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.nest_walk_segments`, or None (numba missing,
    ``size`` too small, or the compiled nesting walk switched off: ``_WALK`` holds None)."""
    if not worth_compiling(size):
        return None
    if not _SEG_WALK:
        _SEG_WALK.append(kernel("traincast.graph.numba_kernels", "nest_walk_segments"))
    return _SEG_WALK[0] if _nest_walk_kernel() is not None else None


def thread_parents(graph: ExecutionGraph) -> np.ndarray:
    """int64[N]: the enclosing event of each host event on its thread (-1: top level or
    not a host event), from the nesting of the graph's THREAD chains (vectorised); the one
    the graph builder recorded when it has it (the same nesting, no recomputation)."""
    if graph.thread_parent is not None:
        return graph.thread_parent
    n = graph.n_nodes
    parent = np.full(n, -1, np.int64)
    th = graph.edges_of_kind(EdgeKind.THREAD)
    if th.size == 0:
        return parent
    n_pts = 2 * n
    prv = np.full(n_pts, -1, np.int64)
    prv[graph.dst[th]] = graph.src[th]
    on = np.zeros(n_pts, bool)
    on[graph.src[th]] = True
    on[graph.dst[th]] = True
    pts = np.flatnonzero(on)
    # list ranking by pointer jumping (synchronous updates, log2(chain length) rounds):
    # distance to the chain head, and depth = prefix sum of +1 (start) / -1 (end)
    jump = prv.copy()
    dist = (prv >= 0).astype(np.int64)
    depth = np.where(np.arange(n_pts) % 2 == 0, 1, -1).astype(np.int64)
    active = pts[jump[pts] >= 0]
    while active.size:
        j = jump[active]
        dist[active] += dist[j]
        depth[active] += depth[j]
        jump[active] = jump[j]
        active = active[jump[active] >= 0]
    head = np.where(prv >= 0, prv, np.arange(n_pts))
    active = pts[prv[pts] >= 0]
    while active.size:
        head[active] = head[head[active]]
        active = active[prv[head[active]] >= 0]
    head_of = head[pts]
    o = np.lexsort((dist[pts], head_of))
    seq = pts[o]  # all chain points, chains contiguous, each in chain order
    starts = seq[seq % 2 == 0]
    pos = np.flatnonzero(seq % 2 == 0)
    level = depth[starts]  # 1 = top level
    m = np.int64(seq.size + 1)
    keys = level * m + pos
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    inner = level > 1
    q = (level[inner] - 1) * m + pos[inner]
    idx = np.searchsorted(skeys, q, "left") - 1
    ok = idx >= 0
    ok[ok] = skeys[idx[ok]] // m == level[inner][ok] - 1
    parent[starts[inner][ok] // 2] = starts[order[idx[ok]]] // 2
    return parent


def point_owner(graph: ExecutionGraph, parent: np.ndarray | None = None) -> np.ndarray:
    """int64[2N]: for each event point, the innermost host event open just after it on its
    thread: the event itself after its start, its parent after its end (-1 at top level;
    meaningful for host events). ``parent``: :func:`thread_parents` of ``graph`` if None."""
    parent = thread_parents(graph) if parent is None else parent
    n = graph.n_nodes
    pts = np.arange(2 * n, dtype=np.int64)
    node = pts // 2
    return np.where(pts % 2 == 0, node, parent[node])


def thread_edge_owner(graph: ExecutionGraph, parent: np.ndarray | None = None) -> np.ndarray:
    """int64[E]: for each THREAD edge, the innermost host event open during it (-1 for other
    edges and for gaps between top-level events).

    A segment that starts at an event's start lies inside that event; one that starts at a
    child's end lies in the child's parent (the parent's self time): :func:`point_owner` of
    the edge's source.
    """
    owner = np.full(graph.n_edges, -1, np.int64)
    th = graph.edges_of_kind(EdgeKind.THREAD)
    owner[th] = point_owner(graph, parent)[graph.src[th]]
    return owner


def self_times(ts_ns: np.ndarray, dur_ns: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Exclusive time (ns) of each interval: its duration minus its direct children's.

    Args:
        ts_ns, dur_ns: start and duration (int64 ns) of each interval.
        thread: an integer id of the thread each interval ran on; nesting is only looked for
            among intervals of one thread.

    A child is an interval that starts inside its parent; the direct parent of an interval is
    the last interval of the same thread, in (ts, -dur) order, one nesting level up (the
    nesting depth is the number of earlier intervals still open at its start). A child's
    contribution is clipped to its parent's end, so clock-rounding overlaps never give
    negative self times. Zero-length intervals have self time 0 and nest nothing.
    Vectorised over whole jobs: O(n log n), no per-interval Python work (the kernels
    analysis' host self times). On properly nested intervals the parents are those of
    :func:`nest_walk` (either overlap policy); where intervals overlap partially or touch, the
    parent is chosen by nesting depth as above, which can differ from the stack walk's.
    """
    ts_ns = np.asarray(ts_ns, np.int64)
    dur_ns = np.asarray(dur_ns, np.int64)
    thread = np.asarray(thread, np.int64)
    n = ts_ns.size
    out = np.zeros(n, np.int64)
    pos_idx = np.flatnonzero(dur_ns > 0)
    if pos_idx.size == 0:
        return out
    order = pos_idx[np.lexsort((-dur_ns[pos_idx], ts_ns[pos_idx], thread[pos_idx]))]
    s = ts_ns[order]
    d = dur_ns[order]
    e = s + d
    _, g = np.unique(thread[order], return_inverse=True)
    g = g.astype(np.int64)
    m = s.size
    gstart = np.searchsorted(g, g, "left")  # first position of each interval's thread
    # times of all starts and ends, densely ranked, so (thread, time) fits one int64 key
    times = np.unique(np.concatenate([s, e]))
    t_rank = np.int64(times.size + 1)
    key_e = np.sort(g * t_rank + np.searchsorted(times, e))
    key_s = g * t_rank + np.searchsorted(times, s)
    # earlier intervals of the thread that ended at or before this start; later ones end after
    closed = np.searchsorted(key_e, key_s, "right") - np.searchsorted(key_e, g * t_rank, "left")
    depth = (np.arange(m) - gstart) - closed
    depth = np.maximum(depth, 0)
    levels = np.int64(depth.max() + 2)
    pos = np.arange(m, dtype=np.int64)
    key = (g * levels + depth) * m + pos  # unique; sorted within (thread, depth) by position
    skey = np.sort(key)
    child = np.flatnonzero(depth > 0)
    q = (g[child] * levels + depth[child] - 1) * m + pos[child]
    j = np.searchsorted(skey, q, "left") - 1
    ok = j >= 0
    jj = np.where(ok, j, 0)
    ok &= skey[jj] // m == g[child] * levels + depth[child] - 1
    child, parent = child[ok], skey[jj[ok]] % m
    overlap = np.clip(np.minimum(e[child], e[parent]) - s[child], 0, None)
    covered = np.bincount(parent, weights=overlap, minlength=m).astype(np.int64)
    out[order] = np.clip(d - covered, 0, None)
    return out
