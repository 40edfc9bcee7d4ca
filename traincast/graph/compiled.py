"""The graph builder's nesting walk compiled with numba (imported only when numba is).

:func:`traincast.graph.build._thread_chain` calls :func:`nest_walk` when this module imports;
its Python loop gives the same result without it.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
    best_v = np.empty(n, np.int64)
    best_p = np.empty(n, np.int64)
    for e in range(src.size):
        ts = times[src[e]]
        if ts < 0:
            continue
        d = dst[e]
        v = ts + lag[e]
        if v < times[d]:
            continue
        p = prio[kind[e]]
        if out[d] < 0 or v > best_v[d] or (v == best_v[d] and p < best_p[d]):
            out[d] = e
            best_v[d] = v
            best_p[d] = p
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
def nest_walk_segments(t0: np.ndarray, t1: np.ndarray, bounds: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """:func:`nest_walk` over consecutive segments (``bounds``: int64[S + 1] start
    positions, the last one the length): each segment is one thread, walked on its own;
    positions in the results are global (a segment's points follow the previous one's)."""
    n = t0.size
    order = np.empty(2 * n, np.int64)
    eff = np.empty(n, np.int64)
    par = np.empty(n, np.int64)
    for s in range(bounds.size - 1):
        a, b = bounds[s], bounds[s + 1]
        o, e, p = nest_walk(t0[a:b], t1[a:b])
        order[2 * a:2 * b] = o + 2 * a
        eff[a:b] = e
        for i in range(b - a):
            par[a + i] = p[i] + a if p[i] >= 0 else -1
    return order, eff, par


@njit(cache=True, nogil=True)
def thread_cost_removed(src: np.ndarray, dst: np.ndarray, kind: np.ndarray, lag: np.ndarray,
                        half: np.ndarray, thread_kind: int, n_event_points: int
                        ) -> None:  # pragma: no cover - compiled
    """In place on ``lag``: each THREAD edge (``kind == thread_kind``) loses ``half[node]``
    of the node whose start it leaves and of the node whose end it enters (rounded to the
    nearest ns, half to even, as ``np.rint``), never below 0.
    :func:`traincast.whatif.unprofiled.remove_overhead` in one pass."""
    for e in range(src.size):
        if kind[e] != thread_kind:
            continue
        red = 0.0
        s = src[e]
        if s < n_event_points and s % 2 == 0:
            red += half[s // 2]
        d = dst[e]
        if d < n_event_points and d % 2 == 1:
            red += half[d // 2]
        v = lag[e] - np.int64(np.rint(red))
        lag[e] = v if v > 0 else 0
