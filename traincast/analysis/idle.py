"""Idle-time attribution: why the device sat idle, from the execution graph.

HTA classifies each idle gap on a stream by its length and by whether the next kernel's
launch came after the previous kernel ended ("host wait", "kernel wait", "other";
``hta/analyzers/breakdown_analysis.py`` ``get_idle_time_breakdown``). traincast asks the
execution graph instead: a gap ends when some op starts, and the binding dependencies of that
start inside the gap (:mod:`traincast.graph.binding`) say what the device waited for:

* ``host_ns``: the op's launch came late, the host was busy with other work (launch-bound,
  Python overhead, a sync's wake-up) — the chain inside the gap runs through LAUNCH/THREAD
  (or SYNC) edges only;
* ``data_loading_ns``: same, but the launching thread was inside a data-loader op at the end
  of the gap (``DataLoader``, ``_next_data``, ``__next__`` of a loader, ``data_loading``);
* ``peer_wait_ns``: the chain inside the gap crosses a COLLECTIVE edge — the device (or the
  host that feeds it) waited for a late rank (or, on CPU ranks, a WAIT on a collective);
* ``stream_dep_ns``: the op waited for an op on another stream (CROSS_STREAM), or, launched
  long before on an idle stream, for an event the trace does not name;
* ``other_ns``: anything else (unexplained delays kept as measured, ops without a launch).

The device is the union of the GPU streams of a rank (on CPU-only ranks, the host's compute
threads plus collective threads, as in :mod:`traincast.analysis.breakdown`). Additionally,
``comm_wait_ns`` is the time collectives spent waiting for their last member to arrive while
no compute ran: the device was busy with a communication kernel doing nothing useful.

Times are int64 ns. A measured TraceSet's times are read from its graph's compact column
(:class:`~traincast.analysis.point_times.PointTimes`), not laid out as int64[2N + B]; the
compiled walk holds one int32 (int64 past 2**31 edges) per point, its binding edge.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import numpy as np

from traincast.analysis import job_intervals as J
from traincast.analysis.breakdown import EventArrays, _intervals
from traincast.analysis.point_times import PointTimes
from traincast.graph.binding import PRIORITY, binding_edges
from traincast.graph.build import build_graph
from traincast.graph.jit import kernel, load_on_empty, read_only, worth_compiling
from traincast.graph.model import EdgeKind, ExecutionGraph, LagPatch
from traincast.simulate.replay import Replay
from traincast.trace import arrow as A
from traincast.trace.intervals import clipped_lengths, gaps, union
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

COLUMNS = ["rank", "iteration", "idle_ns", "host_ns", "data_loading_ns", "peer_wait_ns",
           "stream_dep_ns", "other_ns", "comm_wait_ns", "gaps"]

DATA_LOADER = re.compile(r"dataloader|_next_data|data_loading|enumerate\(.*loader", re.I)


def idle_attribution(source: TraceSet | Replay, *, graph: ExecutionGraph | None = None
                     ) -> pd.DataFrame:
    """Idle time per rank and step, split by cause (ns; see the module docstring).

    Args:
        source: a measured TraceSet (its graph is built with calibrated latencies so that the
            measured times satisfy it) or a :class:`~traincast.simulate.replay.Replay` (a
            ``traincast.predict`` prediction is one: the predicted timeline is analysed with
            the replay's graph).
        graph: for a TraceSet, a graph already built from it (the graph of a plain replay,
            :attr:`Replay.plain`): its measurement-calibrated lags (``exact_lag``) are used
            instead of building the graph a second time.

    Returns:
        DataFrame with :data:`COLUMNS`; ``idle_ns`` equals the sum of the five causes.

    Raises:
        TypeError: ``source`` is neither a TraceSet nor a Replay.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that the columns' readers skip

    return pd.DataFrame(idle_columns(source, graph=graph))


def idle_columns(source: TraceSet | Replay, *, graph: ExecutionGraph | None = None
                 ) -> dict[str, np.ndarray]:
    """:func:`idle_attribution` as numpy columns: the same names (:data:`COLUMNS`, in order),
    dtypes (int64; object where the table has no rows and no pass applied) and rows, without
    importing pandas on the whole-job path.

    Args:
        source: a measured TraceSet or a :class:`~traincast.simulate.replay.Replay`.
        graph: for a TraceSet, a graph already built from it (see :func:`idle_attribution`).

    Returns:
        column name -> 1-D array, one row per (rank, step) window (ns, counts).

    Raises:
        TypeError: ``source`` is neither a TraceSet nor a Replay.
    """
    if isinstance(source, Replay):
        ts, graph = source.measured, source.graph
        times = PointTimes(source.result.times)
        windows = _replay_windows(source)
    elif isinstance(source, TraceSet):
        ts = source
        patch = _exact_patch(graph) if graph is not None else None
        if graph is None or graph.n_nodes != ts.events.num_rows or (
                patch is None and graph.exact_lag is None):
            graph, patch = build_graph(ts, exact=True), None
        elif patch is not None and _chains_kernel(graph.n_points) is not None:
            pass  # compiled: the binding edges chosen with the patched lags, never laid out
        elif graph.lag is not graph.exact_lag:
            # a view with the calibrated lags, read only here: no copy of any column
            graph, patch = dataclasses.replace(graph, lag=graph.exact_lag), None
        # the measured times read from the graph's compact column, not laid out (their
        # int64 per point would be the largest array of this function)
        times = PointTimes.of_graph(graph)
        windows = _table_windows(ts.iterations)
        off = np.fromiter((graph.clock_offset.get(int(r), 0) for r in windows["rank"]),
                          np.int64, windows["rank"].size)
        windows["start"] = windows["start"].astype(np.int64) - off
        windows["end"] = windows["end"].astype(np.int64) - off
    else:
        raise TypeError("idle_attribution takes a TraceSet or a Replay")
    if isinstance(source, Replay):
        patch = None
    return _attribute(ts, graph, times, windows, patch)


#: the columns of a step-window table that the attribution reads
_WINDOW_COLUMNS = ("rank", "iteration", "start", "end")


def _table_windows(iterations) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """rank, iteration, start, end (ns) per row of an ``iterations`` table (Arrow), read
    from its buffers (no pandas)."""
    return {k: A.to_numpy(iterations.column(k)) for k in _WINDOW_COLUMNS}


def _replay_windows(source: Replay) -> dict[str, np.ndarray]:
    """The predicted step windows of ``source`` (the rows of its timeline's ``iterations``):
    read from the timeline when it is built, else computed without building it."""
    if "timeline" in vars(source):  # (a cached property: built already)
        return _table_windows(source.timeline.iterations)
    it = source.measured.iterations
    start, end = source.step_windows()
    return {"rank": A.to_numpy(it.column("rank")),
            "iteration": A.to_numpy(it.column("iteration")),
            "start": start.astype(np.int64), "end": end.astype(np.int64)}


def _exact_patch(graph: ExecutionGraph) -> LagPatch | None:
    """The graph's calibrated lags as stored by the builder, a :class:`~traincast.graph.
    model.LagPatch` on its ``lag`` (read without laying them out: an int64 per edge), or
    None when they are stored otherwise."""
    stored = vars(graph).get("_exact")  # the compact column behind ``graph.exact_lag``
    if isinstance(stored, LagPatch) and stored.base is graph.lag:
        return stored
    return None


def _with_exact_lags(graph: ExecutionGraph, patch: LagPatch | None) -> ExecutionGraph:
    """``graph`` with its calibrated lags as ``lag`` (laid out) when ``patch`` holds them."""
    return graph if patch is None else dataclasses.replace(graph, lag=graph.exact_lag)


#: cause codes of :func:`_causes`, in the order of the output columns
CAUSES = ("host", "data_loading", "peer_wait", "stream_dep", "other")
_HOST, _DATA, _PEER, _STREAM, _OTHER = range(len(CAUSES))
#: most binding edges followed back from one gap's end
MAX_STEPS = 10_000


def _attribute(ts: TraceSet, graph: ExecutionGraph, times: PointTimes,
               windows: dict[str, np.ndarray], patch: LagPatch | None = None
               ) -> dict[str, np.ndarray]:
    """The attribution table, in whole-job passes (every rank's busy intervals, gaps and
    waits on one :class:`~traincast.trace.intervals.RankLine`); ranks without device ops
    are measured by the per-rank code. Equal to :func:`_attribute_loop`, which is used
    where the passes do not apply. ``patch``: the lags to choose binding edges with are
    ``graph.lag`` patched by it (:func:`_exact_patch`; the compiled walk reads them so),
    else ``graph.lag``."""
    n_pts = graph.n_event_points
    # first, while little else is held: its pass over every edge is the peak of this
    # function (with a patch, the compiled walk finds the binding edges itself, later)
    binding = binding_edges(graph, times.laid()) if patch is None else None
    _preload_chains(graph, times, patch)
    ev = ts.events
    ops = _device_ops(ev, J.kind_classes(ev), times)
    ev_rank = A.to_numpy(ev.column("rank"))
    ranks = J.ranks_present(ev_rank)
    host_ranks = np.setdiff1d(ranks, ops.rank)
    w_rank = windows["rank"].astype(np.int64)
    keep_w = np.isin(w_rank, ranks)
    o = np.argsort(w_rank[keep_w], kind="stable")  # by rank, each rank's in table order
    w_sel = np.flatnonzero(keep_w)[o]
    w_rank = w_rank[w_sel]
    w_iter = windows["iteration"][w_sel].astype(np.int64)
    w_lo = windows["start"][w_sel].astype(np.int64)
    w_hi = windows["end"][w_sel].astype(np.int64)
    if w_rank.size == 0:
        return _attribute_loop(ts, graph, times, windows, patch)
    # host-measured ranks: their intervals and ops by the per-rank code
    extra = _host_parts(ts, times, n_pts, host_ranks)
    x_op_start = times.at(2 * extra.op_row)
    ld_row = np.flatnonzero(_loader_rows(ev) & ~(A.to_numpy(ev.column("device")) >= 0))
    ld_row, ld_s, ld_e = _simulated(ld_row, times)
    ld_rank = ev_rank[ld_row].astype(np.int64)
    wt_rank, wt_s, wt_e = _comm_wait_arrays(graph, times)
    known = np.isin(wt_rank, ranks)  # (every member is an event of a rank present)
    wt_rank, wt_s, wt_e = wt_rank[known], wt_s[known], wt_e[known]
    line = J.RankLine.of(ranks, ops.start, ops.end, w_lo, w_hi, ld_s, ld_e, wt_s, wt_e,
                         *extra.times(), x_op_start)
    if line is None or not ops.well_formed():
        return _attribute_loop(ts, graph, times, windows, patch)
    w_base = line.base(w_rank)
    c_lo = w_base + w_lo
    c_hi = w_base + np.maximum(w_hi, w_lo)
    n_w = w_rank.size
    acc = np.zeros((n_w, len(CAUSES)), np.int64)
    n_gaps = np.zeros(n_w, np.int64)
    comm = np.zeros(n_w, np.int64)
    parts: tuple[list[np.ndarray], ...] = ([], [], [], [])  # the gaps' columns by block
    # a block of ranks at a time: no two ranks' intervals meet on the line, so each block's
    # unions, gaps and ops are the whole job's restricted to its ranks (same order)
    for p0, p1 in _rank_blocks(line.keys, ops.rank):
        blk = _Block(line, ops, extra, w_rank, wt_rank, p0, p1)
        for part, col in zip(parts, _block_gaps(blk, ops, extra, line, x_op_start, w_base,
                                                c_lo, c_hi, acc, n_gaps), strict=True):
            part.append(col)
        _block_comm(blk, ops, extra, line, wt_s, wt_e, c_lo, c_hi, comm)
        del blk
    # the ops, host parts and waits are read: not held under the gaps' columns (joined
    # one at a time, each column's blocks dropped once joined) nor the chains' buffers
    del ops, extra, x_op_start, wt_rank, wt_s, wt_e, c_lo, c_hi
    win, g_len, g_row, g_start = (_joined(part) for part in parts)
    del parts
    if win.size:
        cause, first_t = _causes(graph, binding, times, g_row, g_start, patch)
        host = np.flatnonzero(cause == _HOST)
        if host.size and ld_row.size:  # data loading: the chain began in a loader op
            ld_base = line.base(ld_rank)
            ls, le = union(ld_base + ld_s, ld_base + ld_e)
            t = first_t[host]
            valid = (t >= line.t0) & (t < line.t0 + line.span)
            c = w_base[win[host]] + np.where(valid, t, line.t0)
            k = np.searchsorted(ls, c, "right") - 1
            inside = valid & (k >= 0) & (le[np.clip(k, 0, None)] >= c)
            cause[host[inside]] = _DATA
        np.add.at(acc, (win, cause), g_len)
    return {"rank": w_rank, "iteration": w_iter, "idle_ns": acc.sum(axis=1),
            "host_ns": acc[:, _HOST], "data_loading_ns": acc[:, _DATA],
            "peer_wait_ns": acc[:, _PEER], "stream_dep_ns": acc[:, _STREAM],
            "other_ns": acc[:, _OTHER], "comm_wait_ns": comm, "gaps": n_gaps.astype(np.int64)}


def _joined(blocks: list[np.ndarray]) -> np.ndarray:
    """The arrays ``blocks`` concatenated; the list is emptied (its arrays dropped)."""
    out = np.concatenate(blocks)
    blocks.clear()
    return out


#: device ops per block of ranks of :func:`_attribute` (a block's temporaries: a few MiB)
_BLOCK_OPS = 1 << 16


def _rank_blocks(keys: np.ndarray, op_rank: np.ndarray) -> list[tuple[int, int]]:
    """Blocks ``[p0, p1)`` of positions in the sorted rank ``keys``, each with about
    :data:`_BLOCK_OPS` device ops (ranks ``op_rank``) or one rank; one block for all when
    the ops are not sorted by rank."""
    if op_rank.size > 1 and not (op_rank[1:] >= op_rank[:-1]).all():
        return [(0, keys.size)]
    upto = np.searchsorted(op_rank, keys, "right")  # ops of the ranks up to each key
    blocks, p0, done = [], 0, 0
    while p0 < keys.size:
        p1 = min(max(int(np.searchsorted(upto, done + _BLOCK_OPS, "right")), p0 + 1),
                 keys.size)
        blocks.append((p0, p1))
        done, p0 = int(upto[p1 - 1]), p1
    return blocks


class _Block:
    """The parts of one block of ranks (``keys[p0:p1]``): slices of the device ops
    (``a:b``, sorted by rank unless the block is all ranks) and of the windows
    (``wa:wb``, sorted by rank), masks of the host-measured parts and of the waits."""

    def __init__(self, line: J.RankLine, ops: J.DeviceOps, extra: _HostParts,
                 w_rank: np.ndarray, wt_rank: np.ndarray, p0: int, p1: int) -> None:
        lo, hi = line.keys[p0], line.keys[p1 - 1]
        whole = p0 == 0 and p1 == line.keys.size
        self.a, self.b = ((0, ops.rank.size) if whole else
                          (int(np.searchsorted(ops.rank, lo, "left")),
                           int(np.searchsorted(ops.rank, hi, "right"))))
        self.wa = int(np.searchsorted(w_rank, lo, "left"))
        self.wb = int(np.searchsorted(w_rank, hi, "right"))
        self.x_op = (extra.op_rank >= lo) & (extra.op_rank <= hi)
        self.x = (extra.rank >= lo) & (extra.rank <= hi)
        self.xc = (extra.c_rank >= lo) & (extra.c_rank <= hi)
        self.wt = (wt_rank >= lo) & (wt_rank <= hi)
        self.wt_rank = wt_rank[self.wt]
        self.base = line.base(ops.rank[self.a:self.b])  # each device op's rank's base


def _block_gaps(blk: _Block, ops: J.DeviceOps, extra: _HostParts, line: J.RankLine,
                x_op_start: np.ndarray, w_base: np.ndarray, c_lo: np.ndarray,
                c_hi: np.ndarray, acc: np.ndarray, n_gaps: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The gaps of the block's windows (outside the busy union of its ranks) that an op
    ends: (window, length, the op's row, start within the window); the others are added
    to ``acc``'s other column, every gap to ``n_gaps``. ``x_op_start``: the start of each
    host-measured op (``extra.op_row``)."""
    a, b = blk.a, blk.b
    # the block's ops by start (ties: row order), and the busy union
    op_row = np.concatenate([ops.row[a:b], extra.op_row[blk.x_op]])
    op_c = np.concatenate([blk.base, line.base(extra.op_rank[blk.x_op])])
    op_c[:b - a] += ops.start[a:b]
    op_c[b - a:] += x_op_start[blk.x_op]
    order = np.lexsort((op_row, op_c))
    op_row, op_c = op_row[order], op_c[order]
    del order
    x_base = line.base(extra.rank[blk.x])
    busy_s, busy_e = union(
        _concat_sum(blk.base, ops.start[a:b], None, x_base, extra.start[blk.x]),
        _concat_sum(blk.base, ops.end[a:b], None, x_base, extra.end[blk.x]))
    # gaps: the windows' stretches outside the busy union, and the op that ends each
    win, g0, g1 = gaps(busy_s, busy_e, c_lo[blk.wa:blk.wb], c_hi[blk.wa:blk.wb])
    del busy_s, busy_e
    win += blk.wa
    j = np.searchsorted(op_c, g1, "left")
    at_op = j < op_c.size
    at_op[at_op] = op_c[j[at_op]] == g1[at_op]
    g_len = g1 - g0
    np.add.at(acc[:, _OTHER], win[~at_op], g_len[~at_op])  # the window ended, or no op
    n_gaps += np.bincount(win, minlength=n_gaps.size)
    win, g_len, g_row = win[at_op], g_len[at_op], op_row[j[at_op]]
    # (window ids and lengths narrow where they fit: held under the chains' buffers)
    return (win.astype(np.int32) if n_gaps.size < 2**31 else win), \
        (g_len.astype(np.int32) if g_len.size and g_len.max() < 2**31 else g_len), g_row, \
        g0[at_op] - w_base[win]


def _block_comm(blk: _Block, ops: J.DeviceOps, extra: _HostParts, line: J.RankLine,
                wt_s: np.ndarray, wt_e: np.ndarray, c_lo: np.ndarray, c_hi: np.ndarray,
                comm: np.ndarray) -> None:
    """``comm`` of the block's windows: waiting outside compute, |W n (waits u compute)|
    - |W n compute| (the union of compute and waits from compute's union: the same set,
    fewer intervals)."""
    a, b, wa, wb = blk.a, blk.b, blk.wa, blk.wb
    kern = np.flatnonzero(ops.cls[a:b] == J.KERNEL)
    c_base = line.base(extra.c_rank[blk.xc])
    comp = union(_concat_sum(blk.base, ops.start[a:b], kern, c_base, extra.c_start[blk.xc]),
                 _concat_sum(blk.base, ops.end[a:b], kern, c_base, extra.c_end[blk.xc]))
    del kern
    wt_base = line.base(blk.wt_rank)
    both = union(np.concatenate([comp[0], wt_base + wt_s[blk.wt]]),
                 np.concatenate([comp[1], wt_base + wt_e[blk.wt]]))
    comm[wa:wb] = (clipped_lengths(*both, c_lo[wa:wb], c_hi[wa:wb])
                   - clipped_lengths(*comp, c_lo[wa:wb], c_hi[wa:wb]))


def _loader_rows(ev) -> np.ndarray:  # type: ignore[no-untyped-def]
    """bool per event: its name is a data loader's (one regex test per distinct name)."""
    name_idx, names = A.dictionary_parts(ev.column("name"))
    is_loader = np.array([bool(DATA_LOADER.search(str(n))) for n in names] or [False], bool)
    return is_loader[name_idx]


def _device_ops(ev, classes: np.ndarray, times: PointTimes  # type: ignore[no-untyped-def]
                ) -> J.DeviceOps:
    """The device ops (:meth:`~traincast.analysis.job_intervals.DeviceOps.of`) with the
    points' times, those with a time only (start >= 0, end >= start)."""
    ops = J.DeviceOps.of(ev, classes)  # (their times: the table's, replaced below)
    start, end = times.start_end(ops.row)
    ok = (start >= 0) & (end >= start)
    if ok.all():
        return J.DeviceOps(ops.row, ops.rank, start, end, ops.cls)
    return J.DeviceOps(ops.row[ok], ops.rank[ok], start[ok], end[ok], ops.cls[ok])


def _simulated(rows: np.ndarray, times: PointTimes
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, start, end) of the event ``rows`` with a time: start >= 0, end >= start."""
    start, end = times.start_end(rows)
    ok = (start >= 0) & (end >= start)
    if ok.all():
        return rows, start, end
    return rows[ok], start[ok], end[ok]


class _HostParts:
    """Busy intervals (``rank``, ``start``, ``end``), compute intervals (``c_*``) and ops
    (``op_rank``, ``op_row``) of the host-measured ranks, from the per-rank code."""

    def __init__(self) -> None:
        z = np.empty(0, np.int64)
        self.rank, self.start, self.end = z, z, z
        self.c_rank, self.c_start, self.c_end = z, z, z
        self.op_rank, self.op_row = z, z

    def times(self) -> tuple[np.ndarray, ...]:
        return (self.start, self.end, self.c_start, self.c_end)


def _host_parts(ts: TraceSet, times: PointTimes, n_pts: int, ranks: np.ndarray
                ) -> _HostParts:
    out = _HostParts()
    if ranks.size == 0:
        return out
    laid = times.laid()  # (ranks without device ops: every event row of theirs is read)
    start, end = laid[0:n_pts:2], laid[1:n_pts:2]
    simulated = (start >= 0) & (end >= start)
    arrays = EventArrays.of_events(ts.events, start, end)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in vars(out)}
    for rank, idx in arrays.by_rank():
        if rank not in ranks:
            continue
        idx = idx[simulated[idx]]
        iv, _, ops = _intervals(arrays, idx)
        s = np.concatenate([v[0] for v in iv.values()])
        parts["rank"].append(np.full(s.size, rank, np.int64))
        parts["start"].append(s.astype(np.int64))
        parts["end"].append(np.concatenate([v[1] for v in iv.values()]).astype(np.int64))
        cs, ce = union(*iv["compute"])
        parts["c_rank"].append(np.full(cs.size, rank, np.int64))
        parts["c_start"].append(cs)
        parts["c_end"].append(ce)
        parts["op_row"].append(idx[ops].astype(np.int64))
        parts["op_rank"].append(np.full(int(ops.sum()), rank, np.int64))
    for k, v in parts.items():
        if v:
            setattr(out, k, np.concatenate(v))
    return out


def _attribute_loop(ts: TraceSet, graph: ExecutionGraph, point_times: PointTimes,
                    windows: dict[str, np.ndarray], patch: LagPatch | None = None
                    ) -> dict[str, np.ndarray]:
    """:func:`_attribute`, one rank and one window at a time (the reference:
    :func:`traincast.analysis.idle_per_rank.attribute_per_rank`)."""
    # (imported on use: the per-rank module imports this one)
    from traincast.analysis.idle_per_rank import attribute_per_rank

    return attribute_per_rank(ts, graph, point_times, windows, patch)


_WALK: list = []


def _walk_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.binding_walk`, or None (:func:`traincast.graph.jit.
    kernel`; ``size``: the graph's points)."""
    if not worth_compiling(size):
        return None
    if not _WALK:
        _WALK.append(kernel("traincast.graph.numba_kernels", "binding_walk"))
    return _WALK[0]


def _chains_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.analysis.numba_kernels.gap_chains`, or None (:func:`traincast.graph.
    jit.kernel`; ``size``: the graph's points)."""
    if not worth_compiling(size):
        return None
    if not _CHAINS:
        _CHAINS.append(kernel("traincast.analysis.numba_kernels", "gap_chains"))
    return _CHAINS[0]


_CHAINS: list = []
#: tie rank per edge kind (:data:`traincast.graph.binding.PRIORITY`), indexed by kind
_PRIO = np.array([PRIORITY[EdgeKind(k)] for k in range(len(EdgeKind))], np.int64)


def _causes(graph: ExecutionGraph, binding: np.ndarray | None, times: PointTimes,
            rows: np.ndarray, g0: np.ndarray, patch: LagPatch | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Cause code (:data:`CAUSES`) of each gap [g0, start of op ``rows``): the binding chain
    into the op's start, followed back (binding edge by binding edge, all gaps at once) until
    a point at or before the gap's start or a point no edge binds, and its edge kinds;
    and the time of the chain's first cause (the source of its newest edge), by which
    :func:`~traincast.analysis.idle_per_rank.split_data_loading` tells data loading from
    other host work.

    * peer_wait: the chain crosses a COLLECTIVE or WAIT edge;
    * stream_dep: its newest edge is CROSS_STREAM, or a STREAM edge carrying a gap (a wait
      the trace does not name, kept as measured by the graph);
    * host: its newest edge is LAUNCH, or it has THREAD/SYNC/ISSUE edges;
    * other: no chain, or none of the above.

    ``rows`` is consumed (int64: its values are overwritten).
    ``binding``: the binding edges of the points, or None with a ``patch`` (the lags are
    ``graph.lag`` patched by it): the compiled :func:`~traincast.analysis.numba_kernels.
    gap_chains` then finds them and walks.
    """
    n = rows.size
    cur = np.asarray(rows, np.int64)  # the chains' points, walked in place
    cur = np.multiply(cur, 2, out=cur if cur is rows and cur.flags.writeable else None)
    lagged = None  # (per chain: the first edge's lag is positive)
    chains = _chains_kernel(times.size) if patch is not None else None
    walk = _walk_kernel(times.size) if binding is not None else None
    if binding is None and chains is None:  # (not reached: idle_attribution checks it)
        graph = _with_exact_lags(graph, patch)
        binding = binding_edges(graph, times.laid())
        walk = _walk_kernel(times.size)
    if chains is not None:  # binding edges with the patched lags, then the walk (compiled)
        ids = np.int32 if graph.src.size < 2**31 else np.int64
        src, dst, lag, p_index, p_values, kind, prio = read_only(
            graph.src, graph.dst, graph.lag, patch.index, patch.values, graph.kind, _PRIO)
        # (one compiled variant, however the graph's arrays were made; the times read from
        # the compact column or from an array, see PointTimes.kernel_columns)
        t = times.kernel_columns()
        # the kernel's load before the binding edges: its transient pages not on top
        load_on_empty(chains, src, dst, lag, p_index, p_values, kind, prio, *t,
                      np.empty(0, ids), *read_only(cur, np.asarray(g0, np.int64)), MAX_STEPS)
        release_memory()  # the gaps' freed temporaries, back before the points' buffer
        into = np.full(times.size, -1, ids)
        first, seen, lagged = chains(src, dst, lag, p_index, p_values, kind, prio, *t,
                                     into, *read_only(cur, np.asarray(g0, np.int64)),
                                     MAX_STEPS)
        del into
        release_memory()  # its pages (from the heap), before the comm waits' unions
    elif walk is not None:  # the same walk, one gap at a time, compiled (graph/numba_kernels.py)
        first, seen = walk(cur, np.asarray(g0, np.int64), binding, times.laid(),
                           graph.src, graph.kind, MAX_STEPS)
    else:
        first = np.full(n, -1, np.int64)  # newest edge of each chain
        seen = np.zeros(n, np.int64)  # bit k: an edge of kind k is on the chain
        active = np.arange(n, dtype=np.int64)
        laid = times.laid()
        for _ in range(MAX_STEPS):
            if active.size == 0:
                break
            p = cur[active]
            e = binding[p]
            go = (e >= 0) & (laid[p] > g0[active])
            active, e = active[go], e[go]
            new = first[active] < 0
            first[active[new]] = e[new]
            seen[active] |= np.left_shift(1, graph.kind[e].astype(np.int64))
            cur[active] = graph.src[e]
    out = np.full(n, _OTHER, np.int8)
    has = first >= 0
    fk = np.where(has, graph.kind[np.clip(first, 0, None)], -1)

    def bit(*kinds: EdgeKind) -> int:
        return sum(1 << int(k) for k in kinds)

    peer = has & ((seen & bit(EdgeKind.COLLECTIVE, EdgeKind.WAIT)) != 0)
    if lagged is None:
        lagged = graph.lag[np.clip(first, 0, None)] > 0
    stream = has & ~peer & ((fk == int(EdgeKind.CROSS_STREAM)) | (
        (fk == int(EdgeKind.STREAM)) & lagged))
    host = has & ~peer & ~stream & ((fk == int(EdgeKind.LAUNCH)) | (
        (seen & bit(EdgeKind.THREAD, EdgeKind.SYNC, EdgeKind.ISSUE, EdgeKind.QUEUE)) != 0))
    out[peer] = _PEER
    out[stream] = _STREAM
    out[host] = _HOST
    first_t = np.where(has, times.at(graph.src[np.clip(first, 0, None)]), -1)
    return out, first_t


def _preload_chains(graph: ExecutionGraph, times: PointTimes, patch: LagPatch | None
                    ) -> None:
    """Load the machine code of :func:`~traincast.analysis.numba_kernels.gap_chains` for
    the types :func:`_causes` calls it with, now, while little is held: the load's
    transient pages are then not on top of the gaps' arrays. Nothing where it does not
    apply (no patch, no compiled kernel)."""
    chains = _chains_kernel(times.size) if patch is not None else None
    if chains is None:
        return
    ids = np.int32 if graph.src.size < 2**31 else np.int64
    none = np.empty(0, np.int64)
    load_on_empty(chains, *read_only(graph.src, graph.dst, graph.lag, patch.index,
                                     patch.values, graph.kind, _PRIO),
                  *times.kernel_columns(), np.empty(0, ids), *read_only(none, none), MAX_STEPS)


def _concat_sum(base: np.ndarray, t: np.ndarray, rows: np.ndarray | None,
                x_base: np.ndarray, x_t: np.ndarray) -> np.ndarray:
    """``np.concatenate([base[rows] + t[rows], x_base + x_t])`` (``rows`` None: all) written
    into one array (no whole-size temporaries beside it)."""
    n = base.size if rows is None else rows.size
    out = np.empty(n + x_t.size, np.int64)
    if rows is None:
        np.add(base, t, out=out[:n])
    else:
        np.take(base, rows, out=out[:n])
        out[:n] += t[rows]
    np.add(x_base, x_t, out=out[n:])
    return out


def _comm_wait_arrays(graph: ExecutionGraph, times: PointTimes
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, start, end) of the time each collective call waited for its last member (from
    its own arrival to the last arrival, clipped to its end), all groups at once; calls
    that did not wait are left out."""
    groups = graph.collective_groups
    if not groups:
        return (np.empty(0, np.int64),) * 3
    sizes = np.fromiter((g.size for g in groups), np.int64, len(groups))
    members = np.concatenate(groups).astype(np.int64)
    gid = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
    start = times.at(2 * members)
    last = np.full(len(groups), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(last, gid, start)
    waited = last[gid] > start
    members, start = members[waited], start[waited]
    end = np.minimum(last[gid[waited]], times.at(2 * members + 1))
    return graph.node_rank[members].astype(np.int64), start, end
