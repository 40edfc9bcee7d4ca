"""Interval arithmetic on numpy arrays (unions, coverage), shared by the analyses and the
planner.

Intervals are half-open ``[start, end)``; intervals with ``end <= start`` are empty. Times
are int64 ns, except :func:`union_length`, which keeps the dtype it is given (float ns
holding whole numbers below 2**53 sum exactly, so int and float inputs agree).
"""

from __future__ import annotations

import numpy as np


def _merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`union` in the dtypes given: empty intervals dropped, the rest sorted by start
    (stable) and merged where they overlap or touch."""
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
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
