"""The graph builder's nesting walk compiled with numba (imported only when numba is).

:func:`traincast.graph.nesting.thread_chain` calls :func:`nest_walk` when this module imports;
its Python loop gives the same result without it.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads


@njit(cache=True, nogil=True)
def nest_walk(t0: np.ndarray, t1: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """One host thread's events (int64 starts ``t0`` and ends ``t1``, sorted by (start,
    -duration)) in nesting order: ``(order, eff, par)`` with ``order`` the local points
    (``2i`` start, ``2i + 1`` end of position ``i``), ``eff`` each event's end clipped to its
    parent's, ``par`` its enclosing position (-1 at top level)."""
    n = t0.size
    eff = np.empty(n, np.int64)
    par = np.full(n, -1, np.int64)
    order = np.empty(2 * n, np.int64)
    stack = np.empty(n, np.int64)
    k = 0
    top = 0
    for i in range(n):
        t = t0[i]
        while top > 0 and eff[stack[top - 1]] <= t:
            top -= 1
            order[k] = 2 * stack[top] + 1
            k += 1
        e = t1[i]
        if top > 0:
            p = stack[top - 1]
            par[i] = p
            if e > eff[p]:
                e = eff[p]
        eff[i] = e if e > t else t
        order[k] = 2 * i
        k += 1
        stack[top] = i
        top += 1
    while top > 0:
        top -= 1
        order[k] = 2 * stack[top] + 1
        k += 1
    return order, eff, par


@njit(cache=True, nogil=True)
def binding(src: np.ndarray, dst: np.ndarray, lag: np.ndarray, kind: np.ndarray,
            prio: np.ndarray, times: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`traincast.graph.binding.binding_edges` in one pass over the edges: per
    destination point, the tight edge (``times[src] >= 0`` and ``times[src] + lag >=
    times[dst]``) with the largest value, then the lowest ``prio[kind]`` (tie rank per edge kind), then the lowest
    index; -1 where none is tight."""
    n = times.size
    out = np.full(n, -1, np.int64)
    for e in range(src.size):  # the best edge so far is re-read, not kept beside (memory)
        ts = times[src[e]]
        if ts < 0:
            continue
        d = dst[e]
        v = ts + lag[e]
        if v < times[d]:
            continue
        b = out[d]
        if b < 0:
            out[d] = e
            continue
        bv = times[src[b]] + lag[b]
        if v > bv or (v == bv and prio[kind[e]] < prio[kind[b]]):
            out[d] = e
    return out


@njit(cache=True, nogil=True)
def binding_walk(start: np.ndarray, stop: np.ndarray, binding: np.ndarray, times: np.ndarray,
                 src: np.ndarray, kind: np.ndarray, max_steps: int
                 ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per chain ``i``: follow binding edges back from point ``start[i]`` while the point
    has one and its time is after ``stop[i]`` (at most ``max_steps`` edges); returns
    ``(first, seen)``: the first edge followed (-1: none) and a bit mask of the edge kinds
    met (bit ``k`` for kind ``k``). :func:`traincast.analysis.idle._causes`' walk."""
    n = start.size
    first = np.full(n, -1, np.int64)
    seen = np.zeros(n, np.int64)
    for i in range(n):
        p = start[i]
        for _ in range(max_steps):
            e = binding[p]
            if e < 0 or times[p] <= stop[i]:
                break
            if first[i] < 0:
                first[i] = e
            seen[i] |= np.int64(1) << np.int64(kind[e])
            p = src[e]
    return first, seen


@njit(cache=True, nogil=True)
def nest_walk_segments(rows: np.ndarray, t0: np.ndarray, t1: np.ndarray, bounds: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """:func:`nest_walk` over consecutive segments of event ``rows`` (``bounds``:
    int64[S + 1] start positions, the last one the length; each segment one thread sorted by
    (start, -duration)), each walked on its own, mapped to the graph: ``(points, times,
    parents)`` with ``points`` the global point ids in nesting order (``2 * row`` start,
    ``2 * row + 1`` end; a segment's follow the previous one's), ``times`` their times (an
    end clipped to its parent's) and ``parents[i]`` the enclosing row of ``rows[i]`` (-1 at
    top level); ``t0``/``t1`` are indexed by row."""
    n = rows.size
    pts = np.empty(2 * n, np.int64)
    times = np.empty(2 * n, np.int64)
    parents = np.empty(n, np.int64)
    for s in range(bounds.size - 1):
        a, b = bounds[s], bounds[s + 1]
        seg = rows[a:b]
        o, e, p = nest_walk(t0[seg], t1[seg])
        for k in range(2 * (b - a)):
            i = o[k] >> 1
            if o[k] & 1:
                pts[2 * a + k] = 2 * seg[i] + 1
                times[2 * a + k] = e[i]
            else:
                pts[2 * a + k] = 2 * seg[i]
                times[2 * a + k] = t0[seg[i]]
        for i in range(b - a):
            parents[a + i] = seg[p[i]] if p[i] >= 0 else -1
    return pts, times, parents


@njit(cache=True, nogil=True)
def thread_cost_spread(src: np.ndarray, dst: np.ndarray, kind: np.ndarray, lag: np.ndarray,
                       cost: np.ndarray, thread_kind: int, n_event_points: int) -> int:
    """In place on ``lag``: each node ``i`` with ``cost[i] > 0`` (in node order) takes its
    cost (ns, rounded to the nearest) off the THREAD segments around it: half from the one
    leaving its start, the rest from the one entering its end, what these cannot hold
    (never below 0) from the one leaving its start again, then the one entering its start
    and the one leaving its end. Returns the ns that found no room.
    :func:`traincast.whatif.unprofiled.remove_overhead` in one pass."""
    out_e = np.full(n_event_points, -1, np.int64)
    in_e = np.full(n_event_points, -1, np.int64)
    for e in range(src.size):
        if kind[e] != thread_kind:
            continue
        if src[e] < n_event_points:
            out_e[src[e]] = e
        if dst[e] < n_event_points:
            in_e[dst[e]] = e
    lost = 0
    for i in range(cost.size):
        rem = np.int64(np.rint(cost[i]))
        if rem <= 0:
            continue
        s, t = 2 * i, 2 * i + 1
        if t >= n_event_points:
            continue
        order = (out_e[s], in_e[t], out_e[s], in_e[s], out_e[t])
        for k in range(5):
            e = order[k]
            if e < 0 or rem <= 0:
                continue
            want = (rem + 1) // 2 if k == 0 else rem
            take = want if want < lag[e] else lag[e]
            if take > 0:
                lag[e] -= take
                rem -= take
        lost += rem
    return lost


@njit(cache=True, nogil=True)
def thread_links(pts: np.ndarray, times: np.ndarray, bounds: np.ndarray, cap: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """THREAD edges of the chains :func:`nest_walk_segments` gives (points of segment ``s``
    at ``[2 bounds[s], 2 bounds[s + 1])``): each point but a segment's last links to the
    next, lag = the time between them, at most ``cap[dst]`` when ``cap`` is not empty (the
    intrinsic costs of :func:`traincast.graph.build._thread_caps`); ``src``/``dst`` in the
    type of ``pts``, ``lag`` int64."""
    n_seg = bounds.size - 1
    m = pts.size - n_seg if pts.size else 0
    src = np.empty(m, pts.dtype)  # point ids in the chain's integer type
    dst = np.empty(m, pts.dtype)
    lag = np.empty(m, np.int64)
    k = 0
    use_cap = cap.size > 0
    for s in range(n_seg):
        for i in range(2 * bounds[s], 2 * bounds[s + 1] - 1):
            d = pts[i + 1]
            v = times[i + 1] - times[i]
            if use_cap and cap[d] < v:
                v = cap[d]
            src[k] = pts[i]
            dst[k] = d
            lag[k] = v
            k += 1
    return src[:k], dst[:k], lag[:k]


@njit(cache=True, nogil=True)
def thread_by_dst(dst: np.ndarray, kind: np.ndarray, thread_kind: int,
                  into: np.ndarray) -> None:  # pragma: no cover - compiled
    """In place on ``into`` (filled with -1, one per point): the lowest edge id of kind
    ``thread_kind`` into each point. :func:`traincast.graph.build._thread_by_dst` in one
    pass."""
    for e in range(dst.size):
        if kind[e] == thread_kind and into[dst[e]] < 0:
            into[dst[e]] = e


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
