"""Temporal breakdown: where each step's (or the whole trace's) device time goes.

Definitions follow HTA (HolisticTraceAnalysis 0.5, ``hta/analyzers/breakdown_analysis.py``
``get_temporal_breakdown`` and ``communication_analysis.py`` ``get_comm_comp_overlap``):

* device ops are the events on a GPU stream: kernels, memcpy, memset, NCCL kernels;
* *communication* = NCCL/RCCL kernels (kind ``collective``), *memory* = memcpy/memset,
  *compute* = every other kernel;
* within a window, ``compute_ns`` is the length of the union of compute kernels, ``idle_ns``
  the time no device op runs, ``non_compute_ns = window - compute - idle`` (communication and
  memory not hidden behind compute);
* ``comm_overlapped_ns`` is the part of the union of communication kernels during which a
  compute kernel also runs, ``comm_exposed_ns`` the rest; ``overlap_pct = overlapped / comm``.

Windows: ``per="iteration"`` uses each step (``ProfilerStep#N``) on each rank and attributes
time by intersection with the step; ``per="rank"`` uses, like HTA, the span from the first to
the last device op of the rank, over the ops launched before the start of the last step
(``include_last_step=False``, HTA's default: device ops whose launching runtime call is in
the trace and starts before the last step; ops still running from before the profiling
window, whose launch is not recorded, are left out as HTA does) — the mode the HTA
cross-check uses.

On CPU-only ranks (no device op at all) the host plays the device: ``compute`` is the union of
``cpu_op``/``python`` events on threads that run no collective, ``comm`` the gloo collectives
(which run on their own worker threads), and ``idle`` the rest. A thread whose collectives run
inside its own ops (MPI calls made from the program's functions, as OTF2 traces record them)
counts its ops' time outside the library calls as ``compute``, its collectives as ``comm``,
and its other library calls (``runtime``: ``MPI_Init``, ``MPI_Comm_rank``...) as ``other``.

The same code runs on measured TraceSets and on predicted timelines.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from traincast.analysis import job_intervals as J
from traincast.errors import ParameterError
from traincast.trace import arrow as A
from traincast.trace.intervals import clip, coverage, subtract, union
from traincast.trace.traceset import TraceSet
from traincast.util.distinct import sorted_distinct

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: column order of :func:`temporal_breakdown`
COLUMNS = ["rank", "iteration", "start", "end", "window_ns", "compute_ns", "comm_ns",
           "comm_overlapped_ns", "comm_exposed_ns", "memory_ns", "non_compute_ns", "idle_ns",
           "compute_pct", "non_compute_pct", "idle_pct", "overlap_pct", "source"]

CATEGORIES = ("compute", "exposed_comm", "other", "idle")


def window_breakdown(lo: int, hi: int, intervals: dict[str, tuple[np.ndarray, np.ndarray]]
                     ) -> dict[str, int]:
    """Attribute [lo, hi) ns to compute / comm / memory / idle.

    ``intervals`` maps ``compute``, ``comm``, ``other`` (memory) to (starts, ends) arrays.
    Returns ns per key: ``compute`` (union of compute), ``comm`` (union of comm),
    ``comm_overlapped`` (comm under compute), ``exposed_comm`` (comm not under compute),
    ``other`` (memory under neither), ``idle`` (nothing). compute + exposed_comm + other +
    idle == hi - lo.
    """
    clipped = {}
    pts = [np.array([lo, hi], np.int64)]
    for key in ("compute", "comm", "other"):
        s, e = intervals.get(key, (np.empty(0, np.int64), np.empty(0, np.int64)))
        s, e = clip(np.asarray(s, np.int64), np.asarray(e, np.int64), lo, hi)
        clipped[key] = (s, e)
        pts += [s, e]
    grid = sorted_distinct(np.concatenate(pts))
    seg = np.diff(grid)
    comp = coverage(*clipped["compute"], grid)
    comm_all = coverage(*clipped["comm"], grid)
    comm = comm_all & ~comp
    other = coverage(*clipped["other"], grid) & ~comp & ~comm_all
    idle = ~(comp | comm_all | other)
    return {"compute": int(seg[comp].sum()), "comm": int(seg[comm_all].sum()),
            "comm_overlapped": int(seg[comm_all & comp].sum()),
            "exposed_comm": int(seg[comm].sum()), "other": int(seg[other].sum()),
            "idle": int(seg[idle].sum())}


def _is_kind(kind: pd.Series, *names: str) -> np.ndarray:
    """bool per row: the event's kind is one of ``names`` (on the categorical codes: no
    per-row string conversion)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    if isinstance(kind.dtype, pd.CategoricalDtype):
        return _coded_kind(kind.cat.codes.to_numpy(), kind.cat.categories, *names)
    return np.isin(kind.astype(str).to_numpy(), names)


def _coded_kind(codes: np.ndarray, categories: Sequence[str], *names: str) -> np.ndarray:
    """bool per row of dictionary ``codes`` into ``categories``: the kind is one of
    ``names`` (code -1, missing, is False)."""
    wanted = np.append(np.isin(np.asarray(categories, object), names), False)
    return wanted[codes]


@dataclass
class EventArrays:
    """The columns the breakdowns need, as numpy arrays over all events (built once; ranks
    are then index arrays into them, not pandas groups)."""

    rank: np.ndarray
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    on_gpu: np.ndarray
    tid: np.ndarray
    kernel: np.ndarray  # bool masks by kind
    collective: np.ndarray
    memory: np.ndarray  # memcpy, memset
    host_work: np.ndarray  # cpu_op, python
    runtime: np.ndarray
    corr: np.ndarray | None = None
    iteration: np.ndarray | None = None

    @classmethod
    def of(cls, ev: pd.DataFrame) -> EventArrays:
        """From a frame with rank, kind, ts, dur, device, tid (and optionally correlation,
        iteration) columns."""
        kind = ev["kind"]
        s = ev["ts"].to_numpy(np.int64)
        return cls(
            rank=ev["rank"].to_numpy(), start=s, end=s + ev["dur"].to_numpy(np.int64),
            on_gpu=ev["device"].to_numpy() >= 0, tid=ev["tid"].to_numpy(),
            kernel=_is_kind(kind, "kernel"), collective=_is_kind(kind, "collective"),
            memory=_is_kind(kind, "memcpy", "memset"),
            host_work=_is_kind(kind, "cpu_op", "python"), runtime=_is_kind(kind, "runtime"),
            corr=ev["correlation"].to_numpy() if "correlation" in ev else None,
            iteration=ev["iteration"].to_numpy() if "iteration" in ev else None)

    @classmethod
    def of_events(cls, events: pa.Table, start: np.ndarray | None = None,
                  end: np.ndarray | None = None) -> EventArrays:
        """From the events table itself (no pandas frame of 2.5M rows at 1,024 ranks), with
        ``start`` / ``end`` (int64 ns per row, e.g. a simulated timeline's; default the
        table's ``ts`` and ``ts + dur``); ``corr`` and ``iteration`` when the table has
        them."""
        kind_idx, kinds = A.dictionary_parts(events.column("kind"))

        def is_kind(*wanted: str) -> np.ndarray:
            return _coded_kind(kind_idx, kinds, *wanted)

        if start is None or end is None:
            start = A.to_numpy(events.column("ts")).astype(np.int64, copy=False)
            end = start + A.to_numpy(events.column("dur")).astype(np.int64, copy=False)
        cols = events.column_names
        return cls(
            rank=A.to_numpy(events.column("rank")), start=start, end=end,
            on_gpu=A.to_numpy(events.column("device")) >= 0,
            tid=A.to_numpy(events.column("tid")),
            kernel=is_kind("kernel"), collective=is_kind("collective"),
            memory=is_kind("memcpy", "memset"), host_work=is_kind("cpu_op", "python"),
            runtime=is_kind("runtime"),
            corr=A.to_numpy(events.column("correlation")) if "correlation" in cols else None,
            iteration=A.to_numpy(events.column("iteration")) if "iteration" in cols else None)

    def take(self, keep: np.ndarray) -> EventArrays:
        """The rows where the bool mask ``keep`` is True (self when it keeps every row)."""
        if keep.all():
            return self
        return EventArrays(**{f.name: None if (v := getattr(self, f.name)) is None else v[keep]
                              for f in fields(self)})

    def by_rank(self) -> list[tuple[int, np.ndarray]]:
        """(rank, row indices) per rank, ascending."""
        order = np.argsort(self.rank, kind="stable")
        r = self.rank[order]
        cuts = np.flatnonzero(r[1:] != r[:-1]) + 1
        return [(int(part[0]), idx) for part, idx in zip(np.split(r, cuts),
                                                         np.split(order, cuts), strict=True)
                if part.size]


def _intervals(a: EventArrays, idx: np.ndarray
               ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str, np.ndarray]:
    """Busy intervals of the events ``idx`` (one rank), the source ("device"/"host") and the
    mask (over ``idx``) of the ops measured."""
    s, e, on_gpu = a.start[idx], a.end[idx], a.on_gpu[idx]
    coll = a.collective[idx]
    kern, mem = a.kernel[idx], a.memory[idx]
    ops = on_gpu & (kern | mem | coll)
    if ops.any():
        comp, comm, mem = ops & kern, ops & coll, ops & mem
        return ({"compute": (s[comp], e[comp]), "comm": (s[comm], e[comm]),
                 "other": (s[mem], e[mem])}, "device", ops)
    tid = a.tid[idx]
    coll = coll & ~on_gpu
    host_work = ~on_gpu & a.host_work[idx]
    coll_tids = np.unique(tid[coll])
    inline = [t for t in coll_tids.tolist() if _calls_inline(s, e, host_work & (tid == t),
                                                             coll & (tid == t))]
    work = host_work & ~np.isin(tid, coll_tids)
    comp_s, comp_e = [s[work]], [e[work]]
    other_s, other_e = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for t in inline:  # MPI: the thread's own ops minus the library calls inside them
        on_t = tid == t
        rt = on_t & a.runtime[idx] & ~on_gpu
        calls = (on_t & coll) | rt
        cs, ce = subtract(s[on_t & host_work], e[on_t & host_work], s[calls], e[calls])
        comp_s.append(cs)
        comp_e.append(ce)
        other_s.append(s[rt])
        other_e.append(e[rt])
        work = work | (on_t & (host_work | rt))
    return ({"compute": (np.concatenate(comp_s), np.concatenate(comp_e)),
             "comm": (s[coll], e[coll]),
             "other": (np.concatenate(other_s), np.concatenate(other_e))},
            "host", work | coll)


def _calls_inline(s: np.ndarray, e: np.ndarray, work: np.ndarray, coll: np.ndarray) -> bool:
    """Whether a thread's collectives run inside its own host ops (MPI called from the
    program's functions) rather than on a worker thread of their own (gloo): the middle of
    most of its collectives lies within its host ops."""
    if not work.any() or not coll.any():
        return False
    ws, we = union(s[work], e[work])
    mid = (s[coll] + e[coll]) // 2
    j = np.searchsorted(ws, mid, "right") - 1
    inside = (j >= 0) & (mid < we[np.clip(j, 0, None)])
    return bool(inside.mean() > 0.5)


def _launched_before(a: EventArrays, idx: np.ndarray, cutoff: int) -> np.ndarray:
    """bool per event of ``idx`` (one rank): a device op whose launching runtime call is in
    the trace and starts before ``cutoff``; host events are True (HTA's
    ``_filter_irrelevant_gpu_kernels``)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    corr = a.corr[idx]
    ts = a.start[idx]
    on_gpu = a.on_gpu[idx]
    rt = a.runtime[idx] & ~on_gpu & (corr >= 0)
    launch_ts = pd.Series(ts[rt], index=corr[rt])
    launch_ts = launch_ts[~launch_ts.index.duplicated()]
    t = launch_ts.reindex(corr[on_gpu]).to_numpy()
    keep = np.ones(idx.size, bool)
    keep[on_gpu] = ~np.isnan(t) & (t < cutoff)
    return keep


def temporal_breakdown(ts: TraceSet, *, per: str = "iteration",
                       include_last_step: bool = False) -> pd.DataFrame:
    """Compute / communication (overlapped, exposed) / memory / idle time per window.

    Args:
        ts: measured TraceSet or predicted timeline.
        per: ``"iteration"`` (one row per rank and step) or ``"rank"`` (one row per rank,
            HTA's whole-trace window).
        include_last_step: with ``per="rank"``, keep the ops launched in the last step (HTA
            drops them by default).

    Returns:
        DataFrame with :data:`COLUMNS`: times in ns, percentages of ``window_ns``;
        ``iteration`` is -1 for ``per="rank"``; ``source`` says whether the device or (on
        CPU-only ranks) the host was measured. The frame of :func:`breakdown_columns`.

    The table is memoised on ``ts`` (the straggler report reuses the breakdown); each call
    returns its own copy.

    Raises:
        ParameterError: unknown ``per``.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    return pd.DataFrame(_memo_columns(ts, per, include_last_step), copy=True)


def breakdown_columns(ts: TraceSet, *, per: str = "iteration",
                      include_last_step: bool = False) -> dict[str, np.ndarray]:
    """:func:`temporal_breakdown` as numpy columns, without pandas on the whole-job path.

    Args:
        ts: measured TraceSet or predicted timeline.
        per: ``"iteration"`` or ``"rank"`` (as :func:`temporal_breakdown`).
        include_last_step: as :func:`temporal_breakdown`.

    Returns:
        {column: 1-D array} in :data:`COLUMNS` order, one value per row of
        :func:`temporal_breakdown`'s frame, with its dtypes (int64 ns, float64 percentages
        with NaN where the window or the communication is empty, ``source`` an object array
        of str). Shares the memo of :func:`temporal_breakdown`; each call returns its own
        copies.

    Raises:
        ParameterError: unknown ``per``.
    """
    return {k: v.copy() for k, v in _memo_columns(ts, per, include_last_step).items()}


def _memo_columns(ts: TraceSet, per: str, include_last_step: bool) -> dict[str, np.ndarray]:
    """The memoised columns of the breakdown (shared: callers copy them)."""
    if per not in ("iteration", "rank"):
        raise ParameterError(f"per must be 'iteration' or 'rank', got {per!r}")
    memo_key = f"temporal_breakdown:{per}:{bool(include_last_step)}"
    ids = (id(ts.events), id(ts.iterations))
    hit = ts.memo.get(memo_key)
    if hit is not None and hit[0] == ids:
        return hit[1]
    cols = _breakdown_columns(ts, per, include_last_step)
    ts.memo[memo_key] = (ids, cols)
    return cols


def _frame_columns(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns of a breakdown frame (a fallback's) as numpy arrays."""
    return {c: df[c].to_numpy() for c in COLUMNS}


def _temporal_breakdown(ts: TraceSet, per: str, include_last_step: bool) -> pd.DataFrame:
    """The frame of :func:`_breakdown_columns` (not memoised)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    return pd.DataFrame(_breakdown_columns(ts, per, include_last_step))


def _breakdown_columns(ts: TraceSet, per: str, include_last_step: bool
                       ) -> dict[str, np.ndarray]:
    """:func:`breakdown_columns` in whole-job passes over the device ops of all ranks
    (:mod:`traincast.analysis.job_intervals`); ranks without device ops (host-measured) and
    odd windows go through the per-rank code."""
    ev = ts.events
    classes, ops = _job_ops(ts)
    iters = ts.iterations
    it_rank = A.to_numpy(iters.column("rank")).astype(np.int64)
    it_num = A.to_numpy(iters.column("iteration")).astype(np.int64)
    it_start = A.to_numpy(iters.column("start")).astype(np.int64)
    it_end = A.to_numpy(iters.column("end")).astype(np.int64)
    ranks = J.ranks_present(A.to_numpy(ev.column("rank")))
    dev_ranks = J.ranks_present(ops.rank) if ops.rank.size else ops.rank
    line = J.RankLine.of(ranks, ops.start, ops.end, it_start, it_end)
    if line is None or not ops.well_formed():
        return _frame_columns(_breakdown_loop(ts, per, include_last_step))
    on_dev = np.isin(ranks, dev_ranks)
    host = _HostRanks(ts, ranks[~on_dev])
    o = np.argsort(it_rank, kind="stable")  # each rank's iterations in table order
    o = o[np.isin(it_rank[o], ranks)]
    if per == "iteration":
        w_rank, w_it, lo, hi = it_rank[o], it_num[o], it_start[o], it_end[o]
        w_ops = ops
    else:
        n_it = np.bincount(np.searchsorted(ranks, it_rank[o]), minlength=ranks.size)
        cut_rank = ranks[on_dev & (n_it > 1)] if not include_last_step else ranks[:0]
        if cut_rank.size:
            cutoff = np.full(ranks.size, np.iinfo(np.int64).min, np.int64)
            np.maximum.at(cutoff, np.searchsorted(ranks, it_rank[o]), it_start[o])
            keep = J.launched_before(ev, classes, ops, cut_rank,
                                     cutoff[np.searchsorted(ranks, cut_rank)])
            if keep is None:
                return _frame_columns(_breakdown_loop(ts, per, include_last_step))
            w_ops = ops.take(keep)
        else:
            w_ops = ops
        left = np.setdiff1d(dev_ranks, w_ops.rank)  # every op filtered out: the host path
        host.add_filtered(left, cut_rank)
        w_rank = J.ranks_present(w_ops.rank) if w_ops.rank.size else w_ops.rank
        pos = np.searchsorted(w_rank, w_ops.rank)
        lo = np.full(w_rank.size, np.iinfo(np.int64).max, np.int64)
        hi = np.full(w_rank.size, np.iinfo(np.int64).min, np.int64)
        np.minimum.at(lo, pos, w_ops.start)
        np.maximum.at(hi, pos, w_ops.end)
        w_it = np.full(w_rank.size, -1, np.int64)
    unions = _shared_unions(ts, line, ops) if w_ops is ops else None
    vals = J.window_lengths(line, w_ops, w_rank, lo, hi, unions).breakdown(hi - lo)
    vals = {k: np.asarray(v, np.int64).copy() for k, v in vals.items()}
    dev_win = np.isin(w_rank, dev_ranks) if per == "iteration" else np.ones(w_rank.size, bool)
    for w in np.flatnonzero(dev_win & (hi < lo)).tolist():  # inverted: the per-rank grid
        b = window_breakdown(int(lo[w]), int(hi[w]), _rank_iv(w_ops, int(w_rank[w])))
        for k in vals:
            vals[k][w] = b[k]
    cols = {"rank": w_rank, "iteration": w_it, "start": lo, "end": hi, "window_ns": hi - lo,
            "compute_ns": vals["compute"], "comm_ns": vals["comm"],
            "comm_overlapped_ns": vals["comm_overlapped"],
            "comm_exposed_ns": vals["exposed_comm"], "memory_ns": vals["other"],
            "non_compute_ns": vals["exposed_comm"] + vals["other"], "idle_ns": vals["idle"]}
    out = {k: np.asarray(v, np.int64)[dev_win] for k, v in cols.items()}
    out["source"] = np.full(int(np.count_nonzero(dev_win)), "device", object)
    extra = host.rows(per, include_last_step, it_rank[o], it_num[o], it_start[o], it_end[o])
    if extra:  # the host rows after the device rows, then a stable sort by rank
        names = list(out)
        for j, c in enumerate(names):
            add = [row[j] for row in extra]
            out[c] = np.concatenate([out[c], np.asarray(add, object if c == "source"
                                                        else np.int64)])
        order = np.argsort(out["rank"], kind="stable")
        out = {c: v[order] for c, v in out.items()}
    if out["rank"].size == 0:
        return _frame_columns(_breakdown_loop(ts, per, include_last_step))
    return _finish_columns(out)


_OPS_MEMO = "breakdown:device_ops"


def _job_ops(ts: TraceSet) -> tuple[np.ndarray, J.DeviceOps]:
    """(:func:`~traincast.analysis.job_intervals.kind_classes`, device ops) of ``ts``'s
    events, shared between the breakdowns run inside :func:`sharing_device_ops`."""
    hit = ts.memo.get(_OPS_MEMO)
    if hit is not None and hit[0] is ts.events:
        return hit[1], hit[2]
    classes = J.kind_classes(ts.events)
    ops = J.DeviceOps.of(ts.events, classes)
    if hit is not None:  # inside sharing_device_ops: kept for the next breakdown
        ts.memo[_OPS_MEMO] = (ts.events, classes, ops, None)
    return classes, ops


def _shared_unions(ts: TraceSet, line: J.RankLine, ops: J.DeviceOps
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`~traincast.analysis.job_intervals.category_unions` of all of ``ts``'s device
    ops, shared like them (the line of both breakdowns is the same: same ranks, ops and
    steps)."""
    hit = ts.memo.get(_OPS_MEMO)
    if hit is not None and hit[2] is ops and hit[3] is not None and hit[3][0] == (
            line.keys.tolist(), line.t0, line.span):
        return hit[3][1]
    unions = J.category_unions(line, ops)
    if hit is not None and hit[2] is ops:
        ts.memo[_OPS_MEMO] = (*hit[:3], ((line.keys.tolist(), line.t0, line.span), unions))
    return unions


@contextmanager
def sharing_device_ops(ts: TraceSet) -> Iterator[None]:
    """Within the block, the breakdowns of ``ts`` gather its device ops once (dropped at
    its end)."""
    ts.memo[_OPS_MEMO] = (None, None, None, None)
    try:
        yield
    finally:
        ts.memo.pop(_OPS_MEMO, None)


def _rank_iv(ops: J.DeviceOps, rank: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The ``_intervals`` of one device rank, from the job's device ops."""
    m = ops.rank == rank
    out = {}
    for key, c in (("compute", J.KERNEL), ("comm", J.COLLECTIVE), ("other", J.MEMORY)):
        mc = m & (ops.cls == c)
        out[key] = (ops.start[mc], ops.end[mc])
    return out


class _HostRanks:
    """The rows of the ranks measured on the host, by the per-rank code."""

    def __init__(self, ts: TraceSet, ranks: np.ndarray) -> None:
        self.ts = ts
        self.ranks = ranks
        self.filtered = ranks[:0]  # device ranks whose ops the last-step filter removed
        self.cut = ranks[:0]

    def add_filtered(self, ranks: np.ndarray, cut: np.ndarray) -> None:
        self.filtered, self.cut = ranks, cut

    def rows(self, per: str, include_last_step: bool, it_rank: np.ndarray,
             it_num: np.ndarray, it_start: np.ndarray, it_end: np.ndarray) -> list[list]:
        """Rows (lists in the frame's column order, less the percentages) of these ranks."""
        todo = np.union1d(self.ranks, self.filtered)
        if todo.size == 0:
            return []
        a = EventArrays.of_events(self.ts.events)
        out = []
        for rank, idx in a.by_rank():
            if rank not in todo:
                continue
            mine = np.flatnonzero(it_rank == rank)
            iv, source, ops = _intervals(a, idx)
            if per == "iteration":
                windows = [(int(it_num[i]), int(it_start[i]), int(it_end[i])) for i in mine]
            else:
                if not include_last_step and mine.size > 1:
                    if source == "device":
                        idx = idx[_launched_before(a, idx, int(it_start[mine].max()))]
                    else:
                        idx = idx[a.iteration[idx] < it_num[mine].max()]
                    iv, source, ops = _intervals(a, idx)
                if not ops.any():
                    continue
                windows = [(-1, int(a.start[idx][ops].min()), int(a.end[idx][ops].max()))]
            for it_no, lo, hi in windows:
                b = window_breakdown(lo, hi, iv)
                out.append([int(rank), it_no, lo, hi, hi - lo, b["compute"], b["comm"],
                            b["comm_overlapped"], b["exposed_comm"], b["other"],
                            b["exposed_comm"] + b["other"], b["idle"], source])
        return out


def _breakdown_loop(ts: TraceSet, per: str, include_last_step: bool) -> pd.DataFrame:
    """:func:`temporal_breakdown`, one rank and one window at a time (the reference the
    whole-job passes of :func:`_temporal_breakdown` equal; used where they do not apply)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    a = EventArrays.of_events(ts.events)
    rows = []
    iters = ts.iterations.to_pandas()
    it_rank = iters["rank"].to_numpy()
    it_num, it_start = iters["iteration"].to_numpy(), iters["start"].to_numpy()
    it_end = iters["end"].to_numpy()
    o = np.argsort(it_rank, kind="stable")  # each rank's iterations in table order
    u, first = np.unique(it_rank[o], return_index=True)
    it_bounds = {int(r): part for r, part in zip(u, np.split(o, first[1:]), strict=True)}
    empty = np.empty(0, np.int64)
    for rank, idx in a.by_rank():
        mine = it_bounds.get(rank, empty)
        iv, source, ops = _intervals(a, idx)
        if per == "iteration":
            windows = [(int(it_num[i]), int(it_start[i]), int(it_end[i])) for i in mine]
        else:
            if not include_last_step and mine.size > 1:
                last_start = int(it_start[mine].max())
                if source == "device":
                    # HTA: device ops launched (launch in the trace) before the last step
                    idx = idx[_launched_before(a, idx, last_start)]
                else:
                    idx = idx[a.iteration[idx] < it_num[mine].max()]
                iv, source, ops = _intervals(a, idx)
            if not ops.any():
                continue
            s = a.start[idx][ops]
            e = a.end[idx][ops]
            windows = [(-1, int(s.min()), int(e.max()))]
        for it_no, lo, hi in windows:
            b = window_breakdown(lo, hi, iv)
            win = hi - lo
            rows.append({
                "rank": int(rank), "iteration": it_no, "start": lo, "end": hi,
                "window_ns": win, "compute_ns": b["compute"], "comm_ns": b["comm"],
                "comm_overlapped_ns": b["comm_overlapped"],
                "comm_exposed_ns": b["exposed_comm"], "memory_ns": b["other"],
                "non_compute_ns": b["exposed_comm"] + b["other"], "idle_ns": b["idle"],
                "source": source,
            })
    return _finish(pd.DataFrame(rows, columns=[c for c in COLUMNS if not c.endswith("_pct")]))


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """The percentage columns, and the columns in :data:`COLUMNS` order."""
    w = df["window_ns"].where(df["window_ns"] > 0)
    df["compute_pct"] = 100.0 * df["compute_ns"] / w
    df["non_compute_pct"] = 100.0 * df["non_compute_ns"] / w
    df["idle_pct"] = 100.0 * df["idle_ns"] / w
    df["overlap_pct"] = 100.0 * df["comm_overlapped_ns"] / df["comm_ns"].where(df["comm_ns"] > 0)
    return df[COLUMNS]


def _finish_columns(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:func:`_finish` on int64 columns: the float64 percentage columns (NaN where the
    window, or for ``overlap_pct`` the communication, is not positive), :data:`COLUMNS`
    order."""
    def pct(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        d = np.where(den > 0, den.astype(np.float64), np.nan)
        return 100.0 * num.astype(np.float64) / d

    w = cols["window_ns"]
    out = dict(cols)
    out["compute_pct"] = pct(cols["compute_ns"], w)
    out["non_compute_pct"] = pct(cols["non_compute_ns"], w)
    out["idle_pct"] = pct(cols["idle_ns"], w)
    out["overlap_pct"] = pct(cols["comm_overlapped_ns"], cols["comm_ns"])
    return {c: out[c] for c in COLUMNS}


def iteration_breakdown(events: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Prediction-report breakdown: compute, exposed_comm, other, idle (ns) per window.

    Args:
        events: columns rank, kind, ts, dur, device, tid (ns), measured or predicted.
        windows: columns rank, iteration, start, end (ns).

    Returns:
        ``windows`` with columns compute, exposed_comm, other, idle (ns) added; they add up
        to ``end - start``.
    """
    out = windows.copy()
    vals = window_totals(EventArrays.of(events), out["rank"].to_numpy(),
                         out["start"].to_numpy(np.int64), out["end"].to_numpy(np.int64))
    for j, c in enumerate(CATEGORIES):
        out[c] = vals[:, j]
    return out


def window_totals(a: EventArrays, w_rank: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray
                  ) -> np.ndarray:
    """:func:`iteration_breakdown` on arrays: int64[windows, len(CATEGORIES)], ns of each
    :data:`CATEGORIES` entry in window ``[w_lo, w_hi)`` (int64 ns) of rank ``w_rank``, from
    the events ``a`` (:func:`window_breakdown` of each rank's busy intervals); a window of a
    rank without events is all 0."""
    vals = np.zeros((len(w_rank), len(CATEGORIES)), np.int64)
    for rank, idx in a.by_rank():
        iv, _, _ = _intervals(a, idx)
        for w in np.flatnonzero(w_rank == rank).tolist():
            b = window_breakdown(int(w_lo[w]), int(w_hi[w]), iv)
            vals[w] = [b[key] for key in CATEGORIES]
    return vals
