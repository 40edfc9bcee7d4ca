"""The nesting walk of host threads (``overlap="clip"``) in numpy, for threads whose events
nest without clipping: every thread at once, no loop over events.

:func:`traincast.graph.nesting.nest_walk` walks one thread's events (sorted by (start,
-duration)) with a stack. Where no event outlives the event that encloses it (what a
profiler records, but for clock jitter), the walk has a closed form, found here for every
thread at once:

* ``e0 = max(t1, t0)``: each event's end as the walk keeps it;
* ``cb[i]``: the position of the first later event of the thread that starts at or after
  ``e0[i]`` (the thread's end when none): the walk pops ``i`` just before that event starts
  (touching is sequence), or at the thread's end;
* the points: each start at its own position, each end just before the start at ``cb``,
  ends popped together innermost first; ``par[i]``: the last start before ``i``'s one
  level shallower (the stack's top when ``i`` starts).

This is the walk's result exactly when (a) the points nest: each end leaves one level less
than its start reached (then each end closes the innermost open event: by induction over
the ends, the open events' levels are their places on the stack), and (b) no event must be
clipped, ``e0[i] <= e0[par[i]]`` for every event with a parent (then the stack's ends never
increase toward its top, so the walk pops exactly the open events whose ``cb`` is the next
start, and never clips). Both are checked in one pass; a thread where either fails is walked
by :func:`~traincast.graph.nesting.nest_walk` (its result spliced in): the answer is the
walk's either way. Memory: a few int64 arrays of the events' size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["nest_segments"]

Walk = Callable[[list[int], list[int]], tuple[np.ndarray, np.ndarray, np.ndarray]]


def nest_segments(rows: np.ndarray, t0: np.ndarray, t1: np.ndarray, bounds: np.ndarray,
                  walk: Walk) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`traincast.graph.numba_kernels.nest_walk_segments` in numpy: ``(points, times,
    parents)`` of the segments ``rows[bounds[s]:bounds[s + 1]]`` (threads, each sorted by
    (start, -duration); ``t0``/``t1`` int64 indexed by row), the threads the closed form does
    not hold for (module docstring) walked by ``walk``
    (:func:`~traincast.graph.nesting.nest_walk`). None when the times
    cannot be laid on one int64 axis (negative, or spans past 2**62 ns together): the
    caller walks every thread."""
    rows = np.asarray(rows, np.int64)
    n = rows.size
    bounds = np.asarray(bounds, np.int64)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    a, b = t0[rows].astype(np.int64), t1[rows].astype(np.int64)
    sizes = np.diff(bounds)
    seg = np.repeat(np.arange(sizes.size), sizes)
    seg_end = bounds[1:][seg]
    lo = np.minimum.reduceat(a, bounds[:-1][sizes > 0])
    hi = np.maximum.reduceat(a, bounds[:-1][sizes > 0])
    if lo.min() < 0 or int((hi - lo + 1).sum()) >= 1 << 62:
        return None
    seg_lo = np.zeros(sizes.size, np.int64)
    span = np.zeros(sizes.size, np.int64)
    seg_lo[sizes > 0], span[sizes > 0] = lo, hi - lo + 1
    base = np.concatenate(([0], np.cumsum(span)[:-1]))
    key = a - seg_lo[seg] + base[seg]  # one non-decreasing axis, thread after thread
    e0 = np.maximum(b, a)
    q = np.minimum(e0 - seg_lo[seg], span[seg]) + base[seg]
    pos = np.arange(n, dtype=np.int64)
    cb = np.minimum(np.maximum(np.searchsorted(key, q, "left"), pos + 1), seg_end)
    order = np.lexsort((np.concatenate((np.zeros(n, np.int64), -pos)),
                        np.concatenate((np.ones(n, np.int64), np.zeros(n, np.int64))),
                        np.concatenate((pos, cb))))
    is_end = order >= n
    at = np.where(is_end, order - n, order)
    level = np.cumsum(np.where(is_end, -1, 1))  # open events after each point
    opened, closed = np.empty(n, np.int64), np.empty(n, np.int64)
    opened[at[~is_end]] = level[~is_end]
    closed[at[is_end]] = level[is_end]
    # the last start before each one level shallower: its parent (starts come in position
    # order; a thread's levels start from 0, so the search stays in the thread)
    by_level = opened * (n + 1) + pos
    srt = np.argsort(by_level, kind="stable")
    below = np.searchsorted(by_level[srt], by_level - (n + 1)) - 1
    par = srt[np.maximum(below, 0)]
    has = (opened > 1) & (below >= 0)
    has[has] = opened[par[has]] == opened[has] - 1
    par = np.where(has, par, -1)
    bad = closed != opened - 1  # (a) an end that does not close the innermost open event
    bad[has] |= e0[has] > e0[par[has]]  # (b) an event the walk clips
    points = 2 * rows[at] + is_end
    times = np.where(is_end, e0[at], a[at])
    parents = np.where(has, rows[np.maximum(par, 0)], -1)
    for s in np.unique(seg[bad]).tolist():  # threads the closed form does not hold for
        i, j = int(bounds[s]), int(bounds[s + 1])
        o, eff, p = walk(a[i:j].tolist(), b[i:j].tolist())
        local = o >> 1
        end = (o & 1).astype(bool)
        points[2 * i:2 * j] = 2 * rows[i:j][local] + end
        times[2 * i:2 * j] = np.where(end, eff[local], a[i:j][local])
        parents[i:j] = np.where(p >= 0, rows[i:j][np.maximum(p, 0)], -1)
    return points, times, parents
