"""Interval arithmetic on numpy arrays (unions, coverage), shared by the analyses and the
planner.

Intervals are half-open ``[start, end)``; intervals with ``end <= start`` are empty. Times
are int64 ns, except :func:`union_length`, which keeps the dtype it is given (float ns
holding whole numbers below 2**53 sum exactly, so int and float inputs agree).

Many ranks at once: :class:`RankLine` lays the ranks' time axes end to end on one int64 axis
(rank-major, each rank's span apart), so that :func:`union`, :func:`clipped_lengths` and
:func:`gaps` over the mapped coordinates treat every rank's intervals in one pass, as if each
rank had been treated alone (intervals of different ranks never overlap or touch there).
"""

from __future__ import annotations

import numpy as np


def _merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`union` in the dtypes given: empty intervals dropped, the rest sorted by start
    (stable) and merged where they overlap or touch."""
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    if s.size > 1 and not (s[1:] >= s[:-1]).all():  # sorted already: the sort is the identity
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(run_end, idx)


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint, sorted ones. Returns (starts, ends)."""
    return _merge(np.asarray(starts, np.int64), np.asarray(ends, np.int64))


def union_length(starts: np.ndarray, ends: np.ndarray) -> np.integer | np.floating:
    """Total length of the union of intervals, as a numpy scalar of the inputs' dtype
    (0 for none)."""
    s, e = _merge(np.asarray(starts), np.asarray(ends))
    if s.size == 0:
        return np.result_type(s, e).type(0)
    return (e - s).sum()


def length(starts: np.ndarray, ends: np.ndarray, lo: int | None = None,
           hi: int | None = None) -> int:
    """Total length of the union of intervals, clipped to [lo, hi) when given."""
    s, e = union(starts, ends)
    if lo is not None:
        s = np.maximum(s, lo)
    if hi is not None:
        e = np.minimum(e, hi)
    return int(np.clip(e - s, 0, None).sum())


def coverage(starts: np.ndarray, ends: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """bool[len(grid)-1]: whether each elementary segment of the sorted ``grid`` is covered.

    ``grid`` must contain every start and end (clipped) of the intervals.
    """
    if starts.size == 0:
        return np.zeros(max(grid.size - 1, 0), bool)
    delta = np.zeros(grid.size, np.int64)
    np.add.at(delta, np.searchsorted(grid, starts), 1)
    np.add.at(delta, np.searchsorted(grid, ends), -1)
    return np.cumsum(delta)[:-1] > 0


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int
         ) -> tuple[np.ndarray, np.ndarray]:
    """Intervals intersecting [lo, hi), clipped to it."""
    m = (ends > lo) & (starts < hi)
    return np.clip(starts[m], lo, hi), np.clip(ends[m], lo, hi)


def subtract(starts: np.ndarray, ends: np.ndarray, cut_starts: np.ndarray,
             cut_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[starts, ends)`` minus the union of ``[cut_starts, cut_ends)``, as
    disjoint, sorted intervals. Returns (starts, ends)."""
    s, e = union(starts, ends)
    cs, ce = union(cut_starts, cut_ends)
    if s.size == 0 or cs.size == 0:
        return s, e
    grid = np.unique(np.concatenate([s, e, cs, ce]))
    keep = coverage(s, e, grid) & ~coverage(cs, ce, grid)
    return union(grid[:-1][keep], grid[1:][keep])


class RankLine:
    """(rank, t ns) -> one int64 coordinate ``pos(rank) * span + (t - t0)``, ``pos`` the
    rank's index in ``keys`` (sorted, unique). Built with :meth:`of`, which returns None when
    the axis would not fit in int64 (a span times the ranks of more than 2**62 ns)."""

    def __init__(self, keys: np.ndarray, t0: int, span: int) -> None:
        self.keys = np.asarray(keys, np.int64)
        self.t0 = int(t0)
        self.span = int(span)

    @classmethod
    def of(cls, keys: np.ndarray, *times: np.ndarray) -> RankLine | None:
        """A line for the ranks ``keys`` over every time in ``times`` (any number of int
        arrays; a time of a rank outside them maps out of that rank's stretch)."""
        keys = np.unique(np.asarray(keys, np.int64))
        lo = min((int(t.min()) for t in times if t.size), default=0)
        hi = max((int(t.max()) for t in times if t.size), default=0)
        span = hi - lo + 1
        if max(keys.size, 1) * span >= 2**62:
            return None
        return cls(keys, lo, span)

    def base(self, key: np.ndarray) -> np.ndarray:
        """int64 per element: the coordinate of ``t = 0`` on rank ``key`` (coordinate = base
        + t); ``key`` must be in :attr:`keys`."""
        return np.searchsorted(self.keys, key) * self.span - self.t0

    def at(self, key: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Coordinates of times ``t`` on ranks ``key`` (equal lengths)."""
        c = self.base(key)
        c += t
        return c

    def key_of(self, c: np.ndarray) -> np.ndarray:
        """The rank of each coordinate."""
        return self.keys[c // self.span]


def clipped_lengths(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray
                    ) -> np.ndarray:
    """int64 per window ``[lo, hi)``: the length of the disjoint, sorted intervals ``[s, e)``
    (as :func:`union` returns them) within it; 0 for a window with ``hi <= lo``."""
    lo = np.asarray(lo, np.int64)
    hi = np.maximum(np.asarray(hi, np.int64), lo)
    if s.size == 0:
        return np.zeros(lo.size, np.int64)
    ln = e - s
    cum = np.concatenate([[0], np.cumsum(ln)])

    def below(x: np.ndarray) -> np.ndarray:  # covered length before x
        k = np.searchsorted(s, x, "right")
        prev = np.clip(k - 1, 0, None)
        part = np.where(k > 0, np.clip(x - s[prev], 0, ln[prev]), 0)
        return cum[prev] + part

    return below(hi) - below(lo)


def gaps(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray,
         chunk: int = 1 << 16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The uncovered parts of windows ``[lo, hi)`` (``hi >= lo``) given disjoint, sorted
    intervals ``[s, e)``: (window index, gap start, gap end), by window then time. Windows
    are taken a block at a time, each block's candidate gaps (its intervals) about
    ``chunk`` at most (one window's may be more): the temporaries are a block's."""
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    a = np.searchsorted(e, lo, "right")  # first interval ending after lo
    b = np.maximum(np.searchsorted(s, hi, "left"), a)  # first starting at or after hi
    count = b - a + 1
    cum = np.cumsum(count)
    if lo.size == 0 or int(cum[-1]) <= chunk:
        return _gaps_of(s, e, lo, hi, a, b, 0)
    parts = []
    w0 = 0
    while w0 < lo.size:
        done = int(cum[w0 - 1]) if w0 else 0
        w1 = max(int(np.searchsorted(cum, done + chunk, "right")), w0 + 1)
        parts.append(_gaps_of(s, e, lo[w0:w1], hi[w0:w1], a[w0:w1], b[w0:w1], w0))
        w0 = w1
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]


def _gaps_of(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray, a: np.ndarray,
             b: np.ndarray, w0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`gaps` of the windows ``w0 + i`` (``a``, ``b``: their first interval ending
    after ``lo`` and first starting at or after ``hi``)."""
    count = b - a + 1
    first = np.cumsum(count) - count
    win = np.repeat(np.arange(lo.size, dtype=np.int64), count)
    j = np.arange(win.size, dtype=np.int64) - first[win]  # gap j of its window
    n_iv = (b - a)[win]
    lo_w, hi_w = lo[win], hi[win]
    k = a[win] + j
    prev = np.clip(k - 1, 0, max(e.size - 1, 0))
    nxt = np.clip(k, 0, max(s.size - 1, 0))
    g0 = np.where(j == 0, lo_w, np.clip(e[prev], lo_w, hi_w) if e.size else lo_w)
    g1 = np.where(j == n_iv, hi_w, np.clip(s[nxt], lo_w, hi_w) if s.size else hi_w)
    keep = g1 > g0
    win = win[keep]
    if w0:
        win += w0
    return win, g0[keep], g1[keep]
