"""Device busy intervals of every rank at once, for the breakdown and the idle attribution.

The per-rank definitions are those of :mod:`traincast.analysis.breakdown` (``_intervals``: a
rank with device ops is measured on its device ops; compute = kernels, comm = collectives,
other = memcpy/memset). This module computes them for all ranks in whole-job numpy passes:
the device ops are gathered once, mapped onto one int64 axis with
:class:`traincast.trace.intervals.RankLine` (rank-major), and the unions and per-window
lengths are then single sorted passes (:func:`traincast.trace.intervals.union`,
:func:`~traincast.trace.intervals.clipped_lengths`). Ranks without device ops (CPU-only
ranks, measured on the host) are left to the per-rank code.

Times are int64 ns; lengths are exact integers, equal to the per-rank computation's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A
from traincast.trace.intervals import RankLine, clipped_lengths, union

if TYPE_CHECKING:  # pragma: no cover
    pass

#: class codes of :func:`kind_classes`
NONE, KERNEL, COLLECTIVE, MEMORY, RUNTIME = range(5)
_CLASS_OF = {"kernel": KERNEL, "collective": COLLECTIVE, "memcpy": MEMORY, "memset": MEMORY,
             "runtime": RUNTIME}


def kind_classes(events: pa.Table) -> np.ndarray:
    """int8 per event row: its class code (:data:`KERNEL`, :data:`COLLECTIVE`,
    :data:`MEMORY` for memcpy/memset, :data:`RUNTIME`, else :data:`NONE`)."""
    codes, kinds = A.dictionary_parts(events.column("kind"))
    lut = np.array([_CLASS_OF.get(k, NONE) for k in kinds] + [NONE], np.int8)
    return lut[codes]


def ranks_present(rank: np.ndarray) -> np.ndarray:
    """The distinct values of a rank column, ascending (no sort when it is sorted)."""
    if rank.size and np.all(rank[1:] >= rank[:-1]):
        return rank[np.r_[0, np.flatnonzero(rank[1:] != rank[:-1]) + 1]]
    return np.unique(rank)


@dataclass
class DeviceOps:
    """The device ops (kernels, collectives, copies on a GPU stream) of all ranks, in row
    order: ``row`` (event row), ``rank``, ``start``/``end`` (int64 ns) and ``cls`` (class
    code)."""

    row: np.ndarray
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray

    @classmethod
    def of(cls, events: pa.Table, classes: np.ndarray, start: np.ndarray | None = None,
           end: np.ndarray | None = None, keep: np.ndarray | None = None) -> DeviceOps:
        """From the events table, its :func:`kind_classes`, per-row start/end (default the
        table's ``ts`` and ``ts + dur``) and an optional mask of the rows to consider."""
        on_gpu = A.to_numpy(events.column("device")) >= 0
        ops = on_gpu & (classes >= KERNEL) & (classes <= MEMORY)
        del on_gpu
        if keep is not None:
            ops &= keep
        row = np.flatnonzero(ops)
        del ops
        if start is None or end is None:
            s = A.to_numpy(events.column("ts"))[row].astype(np.int64, copy=False)
            e = s + A.to_numpy(events.column("dur"))[row]
        else:
            s = np.asarray(start[row], np.int64)
            e = np.asarray(end[row], np.int64)
        return cls(row=row, rank=A.to_numpy(events.column("rank"))[row].astype(np.int64),
                   start=s, end=e, cls=classes[row])

    def take(self, mask: np.ndarray) -> DeviceOps:
        """The ops where ``mask`` holds."""
        return DeviceOps(self.row[mask], self.rank[mask], self.start[mask], self.end[mask],
                         self.cls[mask])

    def well_formed(self) -> bool:
        """No op ends before it starts (the per-window grid of the per-rank code counts
        such an op negatively; the whole-job passes drop it, so callers fall back)."""
        return bool(np.all(self.end >= self.start))


@dataclass
class WindowLengths:
    """Per window (int64 ns): the lengths within it of the union of compute, of comm, of
    compute or comm, and of every device op."""

    compute: np.ndarray
    comm: np.ndarray
    compute_or_comm: np.ndarray
    busy: np.ndarray

    def breakdown(self, window: np.ndarray) -> dict[str, np.ndarray]:
        """The keys of :func:`traincast.analysis.breakdown.window_breakdown`, per window
        (``window``: its length, ``hi - lo >= 0``)."""
        overlapped = self.compute + self.comm - self.compute_or_comm
        return {"compute": self.compute, "comm": self.comm, "comm_overlapped": overlapped,
                "exposed_comm": self.compute_or_comm - self.compute,
                "other": self.busy - self.compute_or_comm, "idle": window - self.busy}


def window_lengths(line: RankLine, ops: DeviceOps, w_rank: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray, unions: list[tuple[np.ndarray, np.ndarray]] | None = None
                   ) -> WindowLengths:
    """:class:`WindowLengths` of windows ``[lo, hi)`` on ranks ``w_rank`` (in ``line``);
    ``unions``: :func:`category_unions` of the same ``line`` and ``ops``, when at hand."""
    base = line.base(w_rank)
    c_lo, c_hi = base + lo, base + hi
    comp, comm, both, busy = unions if unions is not None else category_unions(line, ops)
    return WindowLengths(compute=clipped_lengths(*comp, c_lo, c_hi),
                         comm=clipped_lengths(*comm, c_lo, c_hi),
                         compute_or_comm=clipped_lengths(*both, c_lo, c_hi),
                         busy=clipped_lengths(*busy, c_lo, c_hi))


def category_unions(line: RankLine, ops: DeviceOps) -> list[tuple[np.ndarray, np.ndarray]]:
    """The per-rank unions, as disjoint sorted coordinates of ``line`` (starts, ends), of
    the kernels, the collectives, both, and all ``ops``."""
    base = line.base(ops.rank)
    o = np.argsort(base + ops.start, kind="stable")  # once: the unions below re-sort sorted
    c_s, c_e = base[o] + ops.start[o], base[o] + ops.end[o]
    del base
    c = ops.cls[o]
    del o
    return [union(c_s[c == KERNEL], c_e[c == KERNEL]),
            union(c_s[c == COLLECTIVE], c_e[c == COLLECTIVE]),
            union(c_s[c != MEMORY], c_e[c != MEMORY]), union(c_s, c_e)]


def busy_union(line: RankLine, ops: DeviceOps) -> tuple[np.ndarray, np.ndarray]:
    """The union, per rank, of all of ``ops``, as disjoint sorted coordinates of ``line``
    (starts, ends)."""
    base = line.base(ops.rank)
    return union(base + ops.start, base + ops.end)


def launched_before(events: pa.Table, classes: np.ndarray, ops: DeviceOps, cut_rank: np.ndarray, cutoff: np.ndarray
                    ) -> np.ndarray | None:
    """bool per op of ``ops``: on the ranks ``cut_rank`` (sorted), whether the op's launching
    runtime call (same rank and correlation id, the first in row order) is in the trace and
    starts (``ts``) before the rank's ``cutoff``; True on other ranks. None when (rank, correlation)
    do not pack into one int64 key.

    As the per-rank ``breakdown._launched_before`` compares them: exactly, or as float64 on a
    rank where some device event's launch is missing (pandas' reindex turns the launch times
    of such a rank into float64)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    rank = A.to_numpy(events.column("rank"))
    corr = A.to_numpy(events.column("correlation"))
    start = A.to_numpy(events.column("ts"))
    on_gpu = A.to_numpy(events.column("device")) >= 0
    in_r = np.isin(rank, cut_rank)
    rt_rows = np.flatnonzero(in_r & ~on_gpu & (classes == RUNTIME) & (corr >= 0))
    g_rows = np.flatnonzero(in_r & on_gpu)
    del in_r
    c_rt, c_g = corr[rt_rows].astype(np.int64), corr[g_rows].astype(np.int64)
    c_lo = int(c_rt.min()) if c_rt.size else 0
    c_bits = (int(c_rt.max()) - c_lo if c_rt.size else 0).bit_length()
    if c_bits + int(cut_rank.size).bit_length() > 62:
        return None
    p_rt = np.searchsorted(cut_rank, rank[rt_rows]).astype(np.int64)
    p_g = np.searchsorted(cut_rank, rank[g_rows]).astype(np.int64)
    k_rt = (p_rt << c_bits) | (c_rt - c_lo)
    valid = (c_g >= c_lo) & (c_g - c_lo < (1 << c_bits))
    k_g = np.where(valid, (p_g << c_bits) | np.where(valid, c_g - c_lo, 0), -1)
    idx = pd.Index(k_rt)
    first = ~idx.duplicated()
    j = pd.Index(k_rt[first]).get_indexer(k_g)
    found = j >= 0
    t = start[rt_rows[first]][np.clip(j, 0, None)] if rt_rows.size else np.zeros(j.size,
                                                                                  np.int64)
    missing = np.bincount(p_g[~found], minlength=cut_rank.size) > 0
    cut = np.asarray(cutoff, np.int64)[p_g]
    as_float = missing[p_g]
    before = np.where(as_float, t.astype(np.float64) < cut.astype(np.float64), t < cut)
    keep = np.ones(rank.size, bool)
    keep[g_rows] = found & before
    return keep[ops.row]
