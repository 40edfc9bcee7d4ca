"""The times of an execution graph's points, read where they are stored.

A built graph keeps its measured times compactly (:class:`traincast.graph.model.
MeasuredPoints`: the events' own ``ts`` and ``dur`` columns, the ranks' clock offsets and the
barrier times); reading :attr:`ExecutionGraph.measured` lays them out as a fresh int64[2N + B]
array (16 bytes per event). :class:`PointTimes` gives the same values (int64 ns, rank clocks
aligned to rank 0) without laying them out: gathered from the columns for a set of points,
and handed to the compiled walk of the idle causes
(:func:`traincast.analysis.numba_kernels.gap_chains`) as the columns themselves, read point
by point. It wraps an int64[P] array just as well (a replay's times, or a measured column
already laid out), so callers have one way to read either.

The compact form reads event point ``2i`` as ``ts[i] - off(i)`` and ``2i + 1`` as that plus
``dur[i]``, where ``off(i)`` is the clock offset of the row's segment: the rows are cut into
segments ``[seg_lo[s], seg_lo[s + 1])`` (int64[S + 1], ascending, ``seg_lo[0] = 0``,
``seg_lo[S] = N``) of one offset ``seg_off[s]`` each (int64[S]; 0 between the ranks with an
offset); barrier point ``2N + b`` is ``barrier[b]``. These are the very operations (int64)
by which :meth:`MeasuredPoints.array` lays the column out, so every value is identical.
A column whose offset ranges are not ascending, disjoint row ranges (the builder makes no
such column) is laid out instead, as is a graph that stores its times as an array. Point ids
are ``0 <= p < P`` (P = 2N + B), event rows ``0 <= r < N``; nothing is checked or raised.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traincast.graph.jit import read_only
from traincast.graph.model import ExecutionGraph, MeasuredPoints, _alive

_EMPTY = np.empty(0, np.int64)


class PointTimes:
    """int64 ns per point (``size`` points): an int64 array (``array``), or a graph's compact
    measured column (``compact``, with its row segments: see the module docstring), read as
    the array once :meth:`laid` has laid it out."""

    def __init__(self, array: np.ndarray | None = None, compact: MeasuredPoints | None = None,
                 segments: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self._array = array
        self.compact = compact
        if compact is not None:
            self.seg_lo, self.seg_off = segments if segments is not None else _segments(compact)

    @classmethod
    def of_graph(cls, graph: ExecutionGraph) -> PointTimes:
        """The measured times of ``graph``: its compact column where it is stored so (and
        no array of it is alive: that one is read instead), else ``graph.measured``."""
        stored = _alive(graph.__dict__.get("_measured"))
        if isinstance(stored, MeasuredPoints):
            segments = _segments(stored)
            if segments is not None:
                return cls(compact=stored, segments=segments)
        return cls(array=graph.measured)

    @property
    def size(self) -> int:
        """The points: 2N + B."""
        return int(self._array.size if self._array is not None else self.compact.size)

    def laid(self) -> np.ndarray:
        """int64[P]: the times as an array (the compact column laid out, once: kept)."""
        if self._array is None:
            self._array = self.compact.laid()
        return self._array

    def at(self, points: Any) -> np.ndarray:
        """int64: the times of ``points`` (point ids, 1-D)."""
        if self._array is not None:
            return self._array[points]
        p = np.asarray(points, np.int64)
        m = self.compact
        n2 = 2 * int(m.start.size)
        ev = p < n2
        if ev.all():
            return self._events(p)
        out = np.empty(p.shape, np.int64)
        out[ev] = self._events(p[ev])
        out[~ev] = m.barrier[p[~ev] - n2]
        return out

    def start_end(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(int64, int64): the start and end times of the event ``rows``."""
        if self._array is not None:
            rows = np.asarray(rows, np.int64)
            return self._array[2 * rows], self._array[2 * rows + 1]
        start = self._starts(rows)
        end = self.compact.dur[rows]
        end += start
        return start, end

    def kernel_columns(self) -> tuple[np.ndarray, ...]:
        """``(times, ev_ts, ev_dur, seg_lo, seg_off, barrier)`` as :func:`traincast.analysis.
        numba_kernels.gap_chains` reads them (read-only int64 arrays; ``times`` empty for
        the compact form, the others empty for an array)."""
        if self._array is not None:
            return read_only(self._array.astype(np.int64, copy=False), *(_EMPTY,) * 5)
        m = self.compact
        return read_only(_EMPTY, m.start, m.dur, self.seg_lo, self.seg_off, m.barrier)

    def _events(self, p: np.ndarray) -> np.ndarray:
        """int64: the times of the event points ``p`` (few temporaries: written in place)."""
        rows = p >> 1
        out = self._starts(rows)
        odd = np.flatnonzero(p & 1)
        out[odd] += self.compact.dur[rows[odd]]
        return out

    def _starts(self, rows: np.ndarray) -> np.ndarray:
        """int64: a fresh array of the aligned starts of the event ``rows``."""
        out = self.compact.start[rows]
        if self.seg_lo.size <= 2:
            out -= self.seg_off[0]
        else:
            k = np.searchsorted(self.seg_lo, rows, "right")
            k -= 1
            out -= self.seg_off[k]
        return out


def _segments(m: MeasuredPoints) -> Any:
    """(seg_lo, seg_off) of the compact column ``m`` (see the module docstring), or None
    where its offset ranges are not ascending, disjoint row ranges (the column is then
    laid out instead); a compact column given without them must have such ranges."""
    n = int(m.start.size)
    lo, hi = np.asarray(m.lo, np.int64), np.asarray(m.hi, np.int64)
    off = np.asarray(m.offset, np.int64)
    if not lo.size == hi.size == off.size:
        return None
    keep = hi > lo
    lo, hi, off = lo[keep], hi[keep], off[keep]
    if lo.size and (lo[0] < 0 or hi[-1] > n or bool((lo[1:] < hi[:-1]).any())):
        return None
    bounds = np.empty(2 * lo.size + 2, np.int64)  # [0, lo0, hi0, lo1, hi1, ..., n]
    bounds[0], bounds[-1] = 0, n
    bounds[1:-1:2], bounds[2:-1:2] = lo, hi
    offs = np.zeros(2 * lo.size + 1, np.int64)
    offs[1::2] = off
    full = bounds[1:] > bounds[:-1]  # the segments with rows
    if not full.any():
        return np.array([0, n], np.int64), np.zeros(1, np.int64)
    return np.append(bounds[:-1][full], n), offs[full]
