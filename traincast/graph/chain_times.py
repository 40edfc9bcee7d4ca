"""Times of points read from their parts while a graph is built, without an int64 per point.

* :class:`EventPoints`: the measured time of event points (point ``2i``: row ``i``'s start
  less its rank's clock offset; ``2i + 1``: that plus its duration; the point column of
  :mod:`traincast.graph.model`) gathered from the events' own ``ts``/``dur`` columns, the
  rank column and one offset per rank: ``points_of[pts]`` as a laid-out column's
  ``measured[pts]`` gives it (the same integers, int64), the column never laid out.
* :class:`Ends`: the same from separate start and end columns (``t0``/``t1`` per row).
* :class:`ChainTimes`: the times of the host threads' chain points in walk order (the
  nesting walk, :func:`traincast.graph.build._thread_walk`: chain ``s`` at positions ``[2
  bounds[s], 2 bounds[s + 1])`` of ``pts``): each point's measured time but at the
  ``clipped`` positions (ascending, int64; ends the walk clipped to their enclosing event's
  end or raised to their start: few), read for positions (``chain_times[positions]``) or a
  slice of whole chains at a time (:meth:`ChainTimes.slices`).

Times are int64 ns.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from traincast.graph.jit import kernel, worth_compiling

#: chain points per slice of :meth:`ChainTimes.slices` (whole chains: about this many)
SLICE = 1 << 20


class EventPoints:
    """Measured times of event points from the events' columns (module docstring).

    ``start``/``dur``: int per event row (ns); ``rank``: int per row, its rank id;
    ``shifted``: ``(rank id, clock offset)`` of every rank whose offset is not 0.
    """

    def __init__(self, start: np.ndarray, dur: np.ndarray, rank: np.ndarray,
                 shifted: list[tuple[int, int]]) -> None:
        self.start, self.dur, self.rank = start, dur, rank
        self.table: np.ndarray | None = None  # offset per rank id (None: all 0)
        self.base = 0
        if shifted and rank.size:
            ids = np.array([r for r, _ in shifted], np.int64)
            lo, hi = int(min(ids.min(), rank.min())), int(max(ids.max(), rank.max()))
            self.base = lo
            self.table = np.zeros(hi - lo + 1, np.int64)
            self.table[ids - lo] = [o for _, o in shifted]

    def __getitem__(self, points: np.ndarray) -> np.ndarray:
        """int64: the times of event ``points`` (an integer array)."""
        fill = _points_kernel(self.start.size)
        if fill is not None and points.ndim == 1 and points.flags.c_contiguous and \
                points.dtype in (np.int32, np.int64) and self.rank.dtype == np.int32 and \
                self.start.dtype == self.dur.dtype == np.int64:
            out = np.empty(points.size, np.int64)
            table = self.table if self.table is not None else _NO_OFFSETS
            fill(points, self.start, self.dur, self.rank, table, self.base, out)
            return out
        row = points >> 1
        out = self.start[row].astype(np.int64, copy=False)
        if self.table is not None:
            r = self.rank[row]
            if self.base:
                r = r - self.base
            out -= self.table[r]
        np.add(out, self.dur[row], out=out, where=(points & 1).astype(bool))
        return out


_NO_OFFSETS = np.zeros(0, np.int64)
_POINTS: list = []


def _points_kernel(size: int):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.event_point_times`, or None
    (:func:`traincast.graph.jit.kernel`: numba missing, ``TRAINCAST_NO_NUMBA`` set, or
    ``size`` rows too few to pay for loading it)."""
    if not worth_compiling(2 * size):
        return None
    if not _POINTS:
        _POINTS.append(kernel("traincast.graph.numba_kernels", "event_point_times"))
    return _POINTS[0]


class Ends:
    """Measured times of event points from per-row start and end columns (int64 ns)."""

    def __init__(self, t0: np.ndarray, t1: np.ndarray) -> None:
        self.t0, self.t1 = t0, t1

    def __getitem__(self, points: np.ndarray) -> np.ndarray:
        """int64: the times of event ``points``."""
        row = points >> 1
        return np.where(points & 1, self.t1[row], self.t0[row])


class ChainTimes:
    """The chain points' times in walk order (module docstring): ``pts`` the points,
    ``at``/``val`` the clipped positions (ascending) and their times, ``points_of`` the
    points' measured times (an int64 point column, or :class:`EventPoints`/:class:`Ends`);
    ``steps``: ``(min_step, positions)``, the positions (int64, ascending) whose successor
    on the same chain comes at least ``min_step`` ns later, when the walk found them."""

    def __init__(self, pts: np.ndarray, at: np.ndarray, val: np.ndarray,
                 points_of: np.ndarray | EventPoints | Ends,
                 steps: tuple[int, np.ndarray] | None = None) -> None:
        self.pts, self.at, self.val, self.points_of = pts, at, val, points_of
        self.steps = steps

    @property
    def size(self) -> int:
        """The chain points."""
        return int(self.pts.size)

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        """int64: the times at ``positions`` (an integer array)."""
        out = self.points_of[self.pts[positions]]
        if self.at.size:
            j = np.clip(np.searchsorted(self.at, positions), 0, self.at.size - 1)
            hit = self.at[j] == positions
            out[hit] = self.val[j[hit]]
        return out

    def slices(self, bounds: np.ndarray, size: int = SLICE
               ) -> Iterator[tuple[int, int, int, np.ndarray]]:
        """Whole chains ``[s0, s1)`` of about ``size`` points at a time (at least one
        chain): ``(s0, s1, a, times)``, ``times`` those of positions ``[a, 2 bounds[s1])``
        with ``a = 2 bounds[s0]``."""
        n_chains = bounds.size - 1
        s0 = 0
        while s0 < n_chains:
            s1 = int(np.searchsorted(bounds, bounds[s0] + size // 2, side="right")) - 1
            s1 = min(max(s1, s0 + 1), n_chains)
            a, b = 2 * int(bounds[s0]), 2 * int(bounds[s1])
            times = self.points_of[self.pts[a:b]]
            lo, hi = np.searchsorted(self.at, [a, b])
            times[self.at[lo:hi] - a] = self.val[lo:hi]
            yield s0, s1, a, times
            s0 = s1
