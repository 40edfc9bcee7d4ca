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
* ``par[i] = max{k < i : cb[k] > i}``: the innermost event still open when ``i`` starts,
  the stack's top (found by binary lifting over a sparse table of ``cb``'s range maxima);
* the points: each start at its own position, each end just before the start at ``cb``,
  ends popped together innermost first.

This is the walk's result exactly when no event must be clipped, ``e0[i] <= e0[par[i]]`` for
every event with a parent: by induction over the positions, the stack then holds the open
events with their ends non-increasing toward its top, so the walk pops exactly those whose
``cb`` is the next start, and never clips. A thread where that fails is walked by
:func:`~traincast.graph.nesting.nest_walk` (its result spliced in): the answer is the walk's
either way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["nest_segments"]

Walk = Callable[[list[int], list[int]], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _innermost_open(cb: np.ndarray) -> np.ndarray:
    """int64[n]: for each position ``i`` the largest ``k < i`` with ``cb[k] > i``, else -1
    (binary lifting: the run of positions left of ``i`` whose ``cb`` is at most ``i`` is
    measured in powers of two over a sparse table of ``cb``'s maxima)."""
    n = cb.size
    table = [cb]
    w = 1
    while 2 * w <= n:
        prev = table[-1]
        table.append(np.maximum(prev[:-w], prev[w:]))
        w *= 2
    pos = np.arange(n, dtype=np.int64)
    p = pos.copy()
    for j in range(len(table) - 1, -1, -1):
        w = 1 << j
        cand = p - w
        ok = cand >= 0
        if not ok.any():
            continue
        block = np.zeros(n, dtype=np.int64)
        block[ok] = table[j][cand[ok]]
        p = np.where(ok & (block <= pos), cand, p)
    k = p - 1
    found = k >= 0
    found[found] = cb[k[found]] > pos[found]
    return np.where(found, k, -1)


def nest_segments(rows: np.ndarray, t0: np.ndarray, t1: np.ndarray, bounds: np.ndarray,
                  walk: Walk) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`traincast.graph.numba_kernels.nest_walk_segments` in numpy: ``(points, times,
    parents)`` of the segments ``rows[bounds[s]:bounds[s + 1]]`` (threads, each sorted by
    (start, -duration); ``t0``/``t1`` int64 indexed by row), the threads that need clipping
    walked by ``walk`` (:func:`~traincast.graph.nesting.nest_walk`). None when the times
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
    par = _innermost_open(cb)
    has = par >= 0
    clip = np.zeros(n, bool)
    clip[has] = e0[has] > e0[par[has]]
    order = np.lexsort((np.concatenate((np.zeros(n, np.int64), -pos)),
                        np.concatenate((np.ones(n, np.int64), np.zeros(n, np.int64))),
                        np.concatenate((pos, cb))))
    is_end = order >= n
    at = np.where(is_end, order - n, order)
    points = 2 * rows[at] + is_end
    times = np.where(is_end, e0[at], a[at])
    parents = np.where(has, rows[np.maximum(par, 0)], -1)
    for s in np.unique(seg[clip]).tolist():  # threads the walk clips: walked
        i, j = int(bounds[s]), int(bounds[s + 1])
        o, eff, p = walk(a[i:j].tolist(), b[i:j].tolist())
        local = o >> 1
        end = (o & 1).astype(bool)
        points[2 * i:2 * j] = 2 * rows[i:j][local] + end
        times[2 * i:2 * j] = np.where(end, eff[local], a[i:j][local])
        parents[i:j] = np.where(p >= 0, rows[i:j][np.maximum(p, 0)], -1)
    return points, times, parents
