"""Build the :class:`ExecutionGraph` of a measured run from its TraceSet.

Dependencies, per rank (section numbers refer to Lin et al., arXiv 2404.12674, Sec. 5, whose
critical-path model this follows, extended to every host thread and stream):

* **Host threads.** The starts and ends of a thread's events, in nesting order
  (:mod:`traincast.graph.nesting`), form a chain; each link carries the measured CPU time
  between the two points (``THREAD``).
* **Launches, streams, cross-stream waits** (:mod:`traincast.graph.gpu_edges`).
  A runtime call and the GPU op with its correlation id (``LAUNCH``).
* **Streams.** GPU ops of one (device, stream) run in FIFO order (``STREAM``).
* **Cross-stream waits.** A GPU op that started long after both its launch and its stream
  predecessor waited for an op on another stream (cudaStreamWaitEvent); the op on the same
  device that ended last before it is taken as the one waited for (``CROSS_STREAM``).
* **Host waits** (:mod:`traincast.graph.waits`). A blocking copy or sync ends when the GPU
  op it waits for ends, plus a wake-up latency (``SYNC``); a launch ends after the launch
  queue has room (``QUEUE``); a polling loop ends when the op it polls ends. A call that
  waited keeps only its intrinsic cost on its thread.
* **Collectives.** Matched across ranks by process group and order; a collective ends
  ``transfer`` after the last member arrives, where ``transfer = end - last arrival`` as
  measured, not the kernel duration that includes waiting for peers (``COLLECTIVE``). gloo
  collectives run on worker threads: they start when enqueued (``ISSUE``), and a host thread
  that idled until one finished waits for it (``WAIT``).

Edge lags are chosen so that the binding constraint of every point reproduces its measured
time and no constraint exceeds it: replaying the unchanged graph reproduces the measurement,
and changing a duration moves everything that depends on it.
"""

from __future__ import annotations

import re

import numpy as np

from traincast.graph import waits
from traincast.graph.chain_times import ChainTimes, Ends, EventPoints
from traincast.graph.collectives import MatchedCollectives, clock_offsets, match_collectives
from traincast.graph.edge_lists import Deferred, EdgeLists, PointWrites
from traincast.graph.edge_lists import edges_into as _edges_into
from traincast.graph.gpu_edges import explicit_stream_waits, gpu_edges
from traincast.graph.grouped import search_in_blocks
from traincast.graph.jit import kernel, worth_compiling
from traincast.graph.model import EdgeKind, ExecutionGraph, LagPatch, NodeRange, SparsePoints
from traincast.graph.model import MeasuredPoints as Measured
from traincast.graph.model import compact_lags as narrow
from traincast.graph.nesting import clipped_times, link_positions, thread_chains, thread_links_from
from traincast.graph.waits.common import ops_by_end
from traincast.trace.arrow import to_numpy
from traincast.trace.schema import KINDS
from traincast.trace.traceset import TraceSet

#: Host calls that block until GPU work completes (CUDA runtime/driver and HIP spellings).
BLOCKING_CALL = re.compile(
    r"(cuda|hip|cu)(Device|Stream|Event|Ctx)Synchronize|^(cuda|hip)Memcpy(2D|3D)?$|"
    r"^(cuda|hip)Memcpy(2D|3D)?(Async)?(WithStream)?$|^cuMemcpyDtoH|^cudaFree$|^hipFree$"
)

_US = 1000  # ns per µs
HOST_WAIT_NS = 300 * _US  # a host thread resuming within 300 µs of a collective end waited
_INT32_LIMIT = np.iinfo(np.int32).max  # graphs with fewer points keep int32 point ids


def build_graph(ts: TraceSet, matched: MatchedCollectives | None = None, *,
                exact: bool = False, model_waits: bool = True) -> ExecutionGraph:
    """The execution graph of a measured TraceSet (see the module docstring).

    With ``exact=False`` (the default) latencies are structural: one launch latency per rank
    (the median over launch-bound ops), zero-gap FIFO streams, median wake-up latencies of
    syncs and waits; what cannot be explained by a dependency is not forced, so replay error
    measures how completely the graph explains the trace. ``exact=True`` calibrates every
    latency to its measured value, so the unchanged graph reproduces the measurement exactly
    (a baseline for what-if deltas). ``model_waits=False`` leaves out the host-wait models
    of :mod:`traincast.graph.waits` (launch queue, blocking copies and syncs, polling): only
    the syncs the measured run visibly waited for get a SYNC edge
    (:func:`~traincast.graph.waits.legacy_syncs`), every other host call keeps its measured
    duration (waiting replayed as work); the model before the wait models, for comparison.

    Raises:
        CollectiveMismatchError: collectives cannot be matched across ranks.
    """
    kinds = list(KINDS)
    ev = ts.events
    kind_idx = to_numpy(ev.column("kind").combine_chunks().indices)
    name_col = ev.column("name").combine_chunks()
    name_idx = to_numpy(name_col.indices)
    name_dict = name_col.dictionary.to_pylist()
    rank = to_numpy(ev.column("rank"))
    device = to_numpy(ev.column("device"))
    stream = to_numpy(ev.column("stream"))
    pid = to_numpy(ev.column("pid"))
    tid = to_numpy(ev.column("tid"))
    corr = to_numpy(ev.column("correlation"))

    k = {name: kinds.index(name) for name in kinds}
    on_gpu = device >= 0
    gpu_op = _of_kinds(kind_idx, [k["kernel"], k["memcpy"], k["memset"], k["collective"]],
                       len(kinds)) & on_gpu
    host_ev = _of_kinds(kind_idx, [k["cpu_op"], k["annotation"], k["python"], k["runtime"],
                                   k["collective"]], len(kinds)) & ~on_gpu
    del on_gpu
    # every event row is a node; excluded rows get no edges (GPU annotations, cuda_sync)
    n = ev.num_rows
    if matched is None:
        matched = match_collectives(ts)

    # the measured time of every point: the event points' (start ``2i``, end ``2i + 1``),
    # then one barrier point per matched collective (its last arrival, set below); the
    # starts and ends the builder reads are views of it (no per-event copies)
    measured = np.empty(2 * n + len(matched.groups), np.int64)
    t0 = measured[0:2 * n:2]
    t1 = measured[1:2 * n:2]
    ts_col, dur_col = to_numpy(ev.column("ts")), to_numpy(ev.column("dur"))
    t0[:] = ts_col
    # clock alignment: median offset of collective ends against the lowest rank (starts
    # aligned in place, rank slice by rank: no whole-job offset column)
    offsets = clock_offsets(ts, matched)
    shifted = [(r, o) for r, o in offsets.items() if o]
    lo = hi = np.empty(0, np.int64)  # (searchsorted's type)
    if shifted:  # every rank's rows at once (the rank column is sorted)
        keys = np.array([r for r, _ in shifted], rank.dtype)
        lo, hi = np.searchsorted(rank, keys, "left"), np.searchsorted(rank, keys, "right")
        for a, b, (_, o) in zip(lo.tolist(), hi.tolist(), shifted, strict=True):
            t0[a:b] -= o
    np.add(t0, dur_col, out=t1)
    kept_measured = (ts_col, dur_col, lo, hi, np.array([o for _, o in shifted], np.int64))
    # the point columns (measured times, anchors) are laid out at the end, at their final
    # size: the anchors, a few per thread and stream, are collected as writes until then
    anchor = PointWrites()
    # point ids (2N + one barrier per matched group) fit int32 up to ~1e9 events: half the
    # memory of the largest columns while building and in the graph, faster sorts later
    ids = np.int32 if 2 * n + len(matched.groups) < _INT32_LIMIT else np.int64
    parent = np.full(n, -1, ids)  # enclosing host event on its thread
    _load_walk(rank, pid, tid, t0, t1, parent)
    edges = EdgeLists(ids)

    blocking_name = np.array([bool(BLOCKING_CALL.search(s)) for s in name_dict] or [False])
    coll_exec = np.zeros(n, bool)
    for g in matched.groups:
        coll_exec[g] = True
    host_coll = np.zeros(n, bool)  # gloo-style collectives executing on host threads
    ex = matched.columns["exec_event"]
    host_coll[ex[device[ex] < 0]] = True

    wait_edges = waits.WaitEdges()
    g_all = np.flatnonzero(gpu_op)
    rt_all = np.flatnonzero(host_ev & (kind_idx == k["runtime"]) & (corr >= 0))
    explicit: dict[int, int] = {}
    if ts.stream_waits is not None and ts.stream_waits.num_rows:
        for r in np.unique(rank[to_numpy(ts.stream_waits.column("event"))]).tolist():
            lo, hi = ts.rank_slice(int(r))
            explicit.update(explicit_stream_waits(ts, lo, hi, gpu_op, kind_idx, corr, device,
                                                   stream, t0, k))
    launch_all = gpu_edges(g_all, rank, rt_all, corr, device, stream, t0, t1, coll_exec, edges,
                      anchor, explicit)
    host_rt_all = np.flatnonzero(host_ev & (kind_idx == k["runtime"]))
    if model_waits:  # the launch-queue and sync models of all ranks at once
        ranks = [int(r) for r in ts.rank_ids]
        waits.launch_queue(ranks, rank, g_all, launch_all, device, stream, t0, t1,
                               name_idx, wait_edges)
        by_end = ops_by_end(rank, g_all, t1)  # once for both models
        waits.syncs(rank, host_rt_all, g_all, launch_all, blocking_name, name_idx,
                    name_dict, device, stream, pid, tid, t0, t1, wait_edges, by_end)
        waits.polls(rank, host_rt_all, g_all, name_idx, name_dict, pid, tid, t0, t1,
                    wait_edges, by_end)
        del by_end
    for r in ts.rank_ids if not model_waits else []:
        lo, hi = ts.rank_slice(r)
        g0, g1 = np.searchsorted(g_all, [lo, hi])
        h0, h1 = np.searchsorted(host_rt_all, [lo, hi])
        waits.legacy_syncs(host_rt_all[h0:h1], g_all[g0:g1], blocking_name, name_idx, t0,
                           t1, wait_edges)
    # the host threads in nesting order, then the handoffs between them (autograd engine)
    is_python = kind_idx == k["python"]  # once: per rank it was ranks x events work
    host_rows = np.flatnonzero(host_ev).astype(ids, copy=False)  # (the walked rows: ids)
    chains = _thread_walk(host_rows, rank, pid, tid, t0, t1, is_python, parent)
    del host_rows  # (``rs``: the same rows)
    if chains is not None:  # the walk's times: the measured ones but at the clipped ends
        rs, bounds, p, at, val, steps, parents, first = chains  # (points: the ids' type)
        tm = ChainTimes(p, at, val, measured, (waits.HANDOFF_MIN_GAP_NS, steps))
        if model_waits:
            waits.handoffs(rank, pid, tid, name_idx, name_dict, rs, bounds, parents, p, tm,
                           ~is_python[rs[bounds[:-1]]], wait_edges, t0, t1)
        chains = (rs, bounds, p, tm, parents, first)  # (held until the THREAD edges)
        del rs, bounds, p, at, val, steps, parents, first, tm
    order = {int(r): i for i, r in enumerate(ts.rank_ids)}  # summary rows rank by rank,
    cause = {"launch_queue": 0, "sync": 1, "poll": 2, "handoff": 3}  # causes in model order
    wait_edges.summary.sort(key=lambda row: (order.get(row[0], -1), cause.get(row[1], 4)))
    # THREAD chains, with the segment into each point the wait models name lowered to the
    # call's intrinsic cost (one batch: edges [thread_lo, thread_hi) of the graph)
    thread_lo, thread_hi = _host_threads(chains, rank, t1, host_coll, edges, anchor,
                                         _thread_caps(wait_edges),
                                         EventPoints(ts_col, dur_col, rank, shifted))
    del chains  # (the THREAD batch holds the walk's points and clipped times)
    for free in wait_edges.free:  # first points a wait edge places
        anchor[free] = -1
    # once over all ranks (per rank it re-took medians of medians, ranks x edges work)
    _to_median(edges, EdgeKind.WAIT)
    barrier_time = _collective_edges(matched, t0, t1, edges)
    _gloo_edges(matched, t0, edges)
    _ddp_finalize_edges(ts, matched, t0, t1, tid, name_idx, name_dict, edges)
    _data_edges(ts, host_ev, pid, tid, t0, t1, edges)
    for a, b, ex, st, q in zip(wait_edges.src, wait_edges.dst, wait_edges.exact,
                               wait_edges.structural, wait_edges.queue, strict=True):
        edges.add(a, b, ex, EdgeKind.QUEUE if q else EdgeKind.SYNC, st)
    summary = wait_edges.summary
    measured[2 * n:] = barrier_time  # the barrier points: each group's last arrival
    # the graph keeps the measured times compactly: the events' own columns (shared with
    # the table), the ranks' offsets and the barrier times (the THREAD batch reads them)
    measured = Measured.of(measured, *kept_measured)
    # the per-event columns and the walk are done with: free them before the edge columns
    # are joined (the peak of the build)
    del wait_edges, t0, t1, g_all, rt_all, host_rt_all
    del launch_all, is_python, gpu_op, host_ev, coll_exec, host_coll
    patch = None
    if exact:  # (the structural lags are not kept)
        src, dst, lag, _, kind = edges.take()
    else:  # the calibrated lags differ from the structural ones on a few percent of the
        # edges: kept as a patch on them (ExecutionGraph.exact_lag gives the array when read)
        src, dst, lag, *patch, kind = edges.take_patched()
    # the THREAD edge into a point that now has a WAIT/SYNC edge must not also pin it:
    host_exec = kind == int(EdgeKind.EXEC)
    host_exec[host_exec] = device[src[host_exec] // 2] < 0
    relaxed = _relax_waits(dst, lag, kind, host_exec, thread_lo, thread_hi, patch)
    del host_exec
    # int32 when every lag fits (half the column; a what-if widens its copy's as it writes)
    lag = narrow(lag)
    lag.flags.writeable = False  # change lags on a copy (ExecutionGraph.copy)
    kept_exact = lag if exact else LagPatch(lag, *relaxed)
    return ExecutionGraph(
        node_event=NodeRange(n, ids),  # node i is event row i: laid out when read
        # the rank column itself where it is the schema's int32 (read-only: no copy)
        node_rank=rank if rank.dtype == np.int32 else rank.astype(np.int32),
        measured=measured, src=src, dst=dst, lag=lag, kind=kind,
        anchor=SparsePoints(measured.size, *anchor.sparse()),
        collective_groups=matched.groups, unmatched_collectives=matched.unmatched,
        clock_offset=offsets, thread_parent=parent, exact_lag=kept_exact,
        host_waits=summary,
    )


def _of_kinds(kind_idx: np.ndarray, wanted: list[int], n_kinds: int) -> np.ndarray:
    """bool per row: its kind id is one of ``wanted`` (a table lookup, not a search)."""
    if kind_idx.dtype.kind not in "iu":  # pragma: no cover - ids with nulls come as floats
        return np.isin(kind_idx, wanted)
    table = np.zeros(max(n_kinds, int(kind_idx.max()) + 1 if kind_idx.size else 0), bool)
    table[wanted] = True
    return table[kind_idx]


def _thread_walk(rows: np.ndarray, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                 t0: np.ndarray, t1: np.ndarray, python: np.ndarray,
                 parent: np.ndarray | None = None, min_step: int = waits.HANDOFF_MIN_GAP_NS
                 ) -> tuple[np.ndarray, ...] | None:
    """The host threads' chains, one per (rank, pid, tid), all ranks at once, with the
    ``python_function`` events of a thread in a chain of their own: the Python call stack
    (``with_stack``) does not nest with the op tree (``ProfilerStep#N`` starts inside
    ``_record_function_enter_new`` and outlives it), and clipping the op to the Python frame
    would cut the step. The ops' chain keeps the Python time between ops as its gaps.

    ``rows``: the host event rows, ascending. A thread's events are sorted by (start,
    -duration) and walked in nesting order (:func:`traincast.graph.nesting.thread_chains`).
    Returns ``(rs, bounds, points, at, val, steps, parents, first)`` (the rows in walk
    order, each chain's bounds in ``rs``, and what ``thread_chains`` returns with its times
    as the positions ``at`` (ascending, int64) whose time is not the point's measured one,
    an end clipped, and those times ``val`` (int64), and ``steps``, the long steps of the
    times, :func:`~traincast.graph.waits.handoff.long_steps` for ``min_step``; ``points``
    and ``parents`` in the type of ``parent``, int64 without it), or None without rows. ``parent`` (int per event row, -1
    where not written) gets the enclosing row of each walked row.

    A large job whose rows are in start order, with the schema's column types, is grouped
    and walked in one compiled pass (:func:`traincast.graph.numba_kernels.thread_walk`):
    the same arrays without the whole-job intermediates of the numpy steps.
    """
    if rows.size == 0:
        return None
    walked = _walk_compiled(rows, rank, pid, tid, t0, t1, python, parent, min_step)
    if walked is not None:
        return walked
    r_of = rank[rows]
    s, d = t0[rows], t1[rows]
    d -= s  # durations
    if _in_start_order(r_of, s, d):
        rs, bounds = _group_threads(rows, r_of, pid[rows], tid[rows], python[rows])
    else:
        rs, bounds = _sort_threads(rows, r_of, rank, pid, tid, python, t0, t1)
    del r_of, s, d
    pts, times, parents, first = thread_chains(rs, bounds, t0, t1)
    at, val = clipped_times(pts, times, Ends(t0, t1))
    steps = waits.handoff.long_steps(times, bounds, min_step)
    del times
    if parent is not None:
        parent[rs] = parents
        pts, parents = pts.astype(parent.dtype, copy=False), parents.astype(parent.dtype,
                                                                             copy=False)
    return rs, bounds, pts, at, val, steps, parents, first


#: threads of one rank beyond which the compiled walk leaves the grouping to numpy
_WALK_MAX_THREADS = 256


def _walk_compiled(rows: np.ndarray, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                   t0: np.ndarray, t1: np.ndarray, python: np.ndarray,
                   parent: np.ndarray | None, min_step: int = waits.HANDOFF_MIN_GAP_NS
                   ) -> tuple[np.ndarray, ...] | None:
    """:func:`_thread_walk` in one compiled pass, or None: numba unavailable, the job
    small, the columns of other types than the schema's (one compiled signature), or the
    rows not in (rank, start, -duration) order. ``rs`` comes in the rows' type."""
    if not (rows.dtype in (np.int32, np.int64) and t0.dtype == t1.dtype == np.int64 and
            python.dtype == bool and rank.dtype == pid.dtype == tid.dtype == np.int32):
        return None
    ids = np.int64 if parent is None else parent.dtype
    if ids not in (np.int32, np.int64):
        return None
    walk = _walk_kernel(2 * t0.size)
    if walk is None:
        return None
    if parent is None:
        parent = np.full(t0.size, -1, ids)
    rs = np.empty_like(rows)
    pts = np.empty(2 * rows.size, ids)
    parents = np.empty(rows.size, ids)
    bounds, at, val, steps = walk(rows, rank, pid, tid, python, t0, t1, rs, pts, parents,
                                  parent, _WALK_MAX_THREADS, int(min_step))
    if bounds.size == 0:  # out of order (``parent`` untouched): the numpy steps
        return None
    o = np.argsort(at, kind="stable")  # (found thread by thread)
    return rs, bounds, pts, at[o], val[o], steps, parents, 2 * bounds[:-1]


def _load_walk(rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, t0: np.ndarray,
               t1: np.ndarray, parent: np.ndarray) -> None:
    """Load :func:`_walk_compiled`'s kernel now (on no rows, the later call's types): the
    transient pages of a first kernel load (numba's, LLVM's: tens of MiB) then come before
    the build's large arrays, not on top of them."""
    walk = _walk_kernel(2 * t0.size) if t0.size > 1 and t0.dtype == t1.dtype == np.int64 \
        and rank.dtype == pid.dtype == tid.dtype == np.int32 else None
    if walk is not None:
        no_ids = np.empty(0, parent.dtype)  # (rows, as the build's, in the ids' type)
        walk(no_ids, rank, pid, tid, np.zeros(0, bool), t0[:2], t1[:2], no_ids, no_ids,
             no_ids, parent, _WALK_MAX_THREADS, int(waits.HANDOFF_MIN_GAP_NS))


def _in_start_order(r_of: np.ndarray, start: np.ndarray, dur: np.ndarray) -> bool:
    """Whether rows with ranks ``r_of`` (contiguous), starts and durations are sorted by
    (start, -duration) within each rank, as :class:`~traincast.trace.traceset.TraceSet`
    keeps its events (by rank, ts, -dur; clock alignment shifts a rank's starts together)."""
    if start.size < 2:
        return True
    same = r_of[1:] == r_of[:-1]
    later = start[1:] > start[:-1]
    tie = (start[1:] == start[:-1]) & (dur[1:] <= dur[:-1])
    return bool((later | tie | ~same).all())


def _group_threads(rows: np.ndarray, r_of: np.ndarray, p_of: np.ndarray, t_of: np.ndarray,
                   py_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_sort_threads` of rows already in (start, -duration) order within each rank:
    one stable sort by a dense thread id (numbered in (rank, pid, tid, python) order over
    the runs of equal keys; a small integer type makes it a radix sort)."""
    new = np.ones(rows.size, bool)
    for c in (r_of, p_of, t_of, py_of):
        new[1:] &= c[1:] == c[:-1]
    np.logical_not(new, out=new)  # the first row of each run of one thread
    new[:1] = True
    head = np.flatnonzero(new)
    del new
    keys = (r_of[head], p_of[head], t_of[head], py_of[head])
    o = np.lexsort(keys[::-1])
    first = np.ones(head.size, bool)
    for c in keys:
        cs = c[o]
        first[1:] &= cs[1:] == cs[:-1]
    n_threads = head.size - int(first.sum()) + 1 if head.size else 0
    np.logical_not(first, out=first)
    first[:1] = True
    ids = np.int16 if n_threads <= np.iinfo(np.int16).max else np.int64
    run_id = np.empty(head.size, ids)
    run_id[o] = np.cumsum(first) - 1
    row_id = np.repeat(run_id, np.diff(np.r_[head, rows.size]))
    order = np.argsort(row_id, kind="stable")
    rs = rows[order]
    counts = np.bincount(row_id, minlength=n_threads)
    bounds = np.r_[0, np.cumsum(counts)].astype(np.int64)
    return rs, bounds


def _sort_threads(rows: np.ndarray, r_of: np.ndarray, rank: np.ndarray, pid: np.ndarray,
                  tid: np.ndarray, python: np.ndarray, t0: np.ndarray, t1: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The host ``rows`` (ascending) by thread (rank, pid, tid, python), then (start,
    -duration, row): ``(rs, bounds)``, each thread ``rs[bounds[i]:bounds[i + 1]]``. Sorted
    rank by rank (the rows of a rank are contiguous): small sorts stay in cache, one sort of
    all rows is slower."""
    cuts = np.r_[0, np.flatnonzero(r_of[1:] != r_of[:-1]) + 1, rows.size]
    rs = np.empty_like(rows)
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        x = rows[a:b]  # ascending: the stable sort keeps row order among ties
        s = t0[x]
        rs[a:b] = x[np.lexsort((s - t1[x], s, python[x], tid[x], pid[x]))]
    new = np.zeros(rs.size, bool)  # first event of each thread
    new[:1] = True
    for col in (rank, pid, tid, python):
        c = col[rs]
        new[1:] |= c[1:] != c[:-1]
    bounds = np.r_[np.flatnonzero(new), rs.size].astype(np.int64)
    return rs, bounds


def _host_threads(chains: tuple | None, rank: np.ndarray, t1: np.ndarray,
                  host_coll: np.ndarray, edges: EdgeLists, anchor: PointWrites,
                  cap: tuple[np.ndarray, np.ndarray] | None, points_of: EventPoints | Ends
                  ) -> tuple[int, int]:
    """THREAD chains of the walked threads (:func:`_thread_walk`, its times a
    :class:`~traincast.graph.chain_times.ChainTimes`): each point but a thread's last links
    to the next with the time between them; a thread resuming after a gap of more than 20
    µs shortly after a host collective (gloo) of its rank on another thread ended gets a
    WAIT edge from its end. ``cap`` (points, ascending, and costs: :func:`_thread_caps`)
    lowers the THREAD segment into a point to a call's intrinsic cost. One batch: returns
    where it lies among the edges (``(lo, hi)``; empty: none), written when the batches are
    joined (:class:`~traincast.graph.edge_lists.Deferred`: the walk's points and clipped
    times kept until then, the other times read from the events' columns, ``points_of``).
    """
    lo = edges.size()
    if chains is None:
        return lo, lo
    rs, bounds, p, tm, parents, first = chains
    anchor[p[first]] = tm[first]
    wait = _host_waits(rs, bounds, p, tm, rank, t1, host_coll)
    clipped = (tm.at, tm.val)

    def fill(src: np.ndarray, dst: np.ndarray, lag: np.ndarray) -> None:
        """The chain links, written into the graph's columns when they are joined: every
        point but a thread's last links to the next; a call that waited keeps only its
        intrinsic cost on its thread (``cap``, a few points)."""
        thread_links_from(p, clipped, points_of, bounds, src, dst, lag)
        if cap is not None:
            at = _edges_into(dst, 0, cap[0])
            hit = at >= 0
            lag[at[hit]] = np.minimum(lag[at[hit]], cap[1][hit])
        np.maximum(lag, 0, out=lag)

    # a link's lag: the difference of two event-point or clipped times (int32: span fits)
    times = [a for a in (tm.points_of[:2 * t1.size], tm.val) if a.size]
    fits32 = bool(times) and int(max(a.max() for a in times)) - int(
        min(a.min() for a in times)) < 1 << 31
    edges.add_deferred(Deferred(p.size - (bounds.size - 1) if p.size else 0, fill,
                                narrow=fits32), EdgeKind.THREAD)
    hi = edges.size()
    if wait is not None:
        edges.add(*wait, EdgeKind.WAIT)
    return lo, hi


def _host_waits(rs: np.ndarray, bounds: np.ndarray, p: np.ndarray, tm: ChainTimes,
                rank: np.ndarray, t1: np.ndarray, host_coll: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """WAIT edges ``(src, dst, lag)`` of the walked threads (:func:`_host_threads`): a
    thread resuming after a gap of more than 20 µs at most :data:`HOST_WAIT_NS` after a host
    collective (gloo) of its rank on another thread ended waited for it; None without."""
    coll_rows = np.sort(rs[host_coll[rs]])  # host collective ends (gloo), for WAIT inference
    if coll_rows.size == 0:
        return None
    link = link_positions(p.size, bounds)
    gap = tm[link + 1] - tm[link]
    starts = link[(p[link + 1] % 2 == 0) & (gap > 20 * _US)] + 1  # resumed after a gap
    if starts.size == 0:
        return None
    co = np.lexsort((t1[coll_rows], rank[coll_rows]))
    c_rows = coll_rows[co]
    c_rank = rank[c_rows].astype(np.int64)
    c_end = t1[c_rows]
    row_s = p[starts] // 2
    q_rank = rank[row_s].astype(np.int64)
    tt = tm[starts]
    # the rank's collective that ended last at or before tt
    j = search_in_blocks(c_rank, c_end, q_rank, tt, "right") - 1
    jj = np.clip(j, 0, None)
    ok = (j >= 0) & (c_rank[jj] == q_rank)
    ok &= (tt - c_end[jj] <= HOST_WAIT_NS) & (c_end[jj] >= tm[starts - 1])
    dep = c_rows[jj[ok]]
    tgt = starts[ok]
    # a collective on the resuming thread itself is no wait for another thread
    seg_of = np.repeat(np.arange(bounds.size - 1, dtype=np.int64), np.diff(bounds))
    same = seg_of[_position(rs, dep)] == seg_of[tgt // 2]
    dep, tgt = dep[~same], tgt[~same]
    return 2 * dep + 1, p[tgt], tm[tgt] - t1[dep]


def _position(sorted_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions of ``rows`` in ``sorted_rows`` (a permutation containing them)."""
    inv = np.empty(int(sorted_rows.max()) + 1 if sorted_rows.size else 0, np.int64)
    inv[sorted_rows] = np.arange(sorted_rows.size)
    return inv[rows]


def _collective_edges(matched: MatchedCollectives, t0: np.ndarray, t1: np.ndarray,
                      edges: EdgeLists) -> np.ndarray:
    """EXEC, ARRIVE and COLLECTIVE edges of the matched collectives (vectorised over all
    groups); returns int64[G], the measured last arrival of each group (its barrier point
    ``2N + k``). A member's end waits ``transfer = end - last arrival`` after the barrier."""
    groups = matched.groups
    n_pts = 2 * t0.size
    if not groups:
        return np.empty(0, np.int64)
    sizes = np.fromiter((g.size for g in groups), np.int64, len(groups))
    members = np.concatenate(groups).astype(np.int64)
    gid = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
    arrival = np.full(len(groups), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(arrival, gid, t0[members])
    transfer = np.maximum(t1[members] - arrival[gid], 0)
    barrier = n_pts + gid
    edges.add(2 * members, 2 * members + 1, transfer, EdgeKind.EXEC)
    edges.add(2 * members, barrier, np.zeros(members.size, np.int64), EdgeKind.ARRIVE)
    edges.add(barrier, 2 * members + 1, transfer, EdgeKind.COLLECTIVE)
    return arrival


def _gloo_edges(matched: MatchedCollectives, t0: np.ndarray, edges: EdgeLists) -> None:
    cols = matched.columns
    sel = cols["issue_event"] >= 0
    if not sel.any():
        return
    ex, iss = cols["exec_event"][sel], cols["issue_event"][sel]
    lag = t0[ex] - t0[iss]
    typical = np.full(lag.size, int(np.median(lag)) if lag.size else 0, np.int64)
    edges.add(2 * iss, 2 * ex, lag, EdgeKind.ISSUE, typical)


def _ddp_finalize_edges(ts: TraceSet, matched: MatchedCollectives, t0: np.ndarray,
                        t1: np.ndarray, tid: np.ndarray, name_idx: np.ndarray,
                        name_dict: list[str], edges: EdgeLists) -> None:
    """DDP's reducer waits for every bucket's all_reduce before copying the buckets back to
    the gradients (``finalize_backward`` in ``torch/csrc/distributed/c10d/reducer.cpp``:
    ``work->wait()`` then ``copy_bucket_to_grad``). For collectives that run on a backend
    worker thread (gloo), the first ``copy_bucket_to_grad`` on the issuing thread after an
    all_reduce was issued depends on its end — also when the measured run never had to wait
    (so a longer collective in a what-if delays the step)."""
    cols = matched.columns
    sel = cols["issue_event"] >= 0
    if not sel.any():
        return
    is_copy = np.array(["copy_bucket_to_grad" in n for n in name_dict] or [False], bool)
    copies = np.flatnonzero(is_copy[name_idx])
    if copies.size == 0:
        return
    ex, iss = cols["exec_event"][sel], cols["issue_event"][sel]
    src, dst = [], []
    for t in np.unique(tid[iss]).tolist():
        c = copies[tid[copies] == t]
        if c.size == 0:
            continue
        c = c[np.argsort(t0[c], kind="stable")]
        mine = tid[iss] == t
        k = np.searchsorted(t0[c], t0[iss[mine]], "right")
        ok = k < c.size
        src.append(ex[mine][ok])
        dst.append(c[k[ok]])
    if not src:
        return
    a, b = np.concatenate(src), np.concatenate(dst)
    gap = t0[b] - t1[a]
    keep = gap >= 0  # a copy that started before the collective ended is not its consumer
    a, b, gap = a[keep], b[keep], gap[keep]
    edges.add(2 * a + 1, 2 * b, gap, EdgeKind.DATA, np.zeros(a.size, np.int64))


def _data_edges(ts: TraceSet, host_ev: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                t0: np.ndarray, t1: np.ndarray, edges: EdgeLists) -> None:
    """Tensor dependencies from execution traces between ops on different host threads.

    An op on one thread that reads a tensor another thread's op wrote cannot start before
    that op ends (PyTorch ET ``inputs``/``outputs`` tensor ids; see
    :mod:`traincast.trace.readers.et`). Same-thread dependencies are already implied by the
    thread chain. Pairs whose measured order contradicts the dependency are skipped.
    """
    links = ts.et_links
    if links is None or links.num_rows == 0:
        return
    l_rank = to_numpy(links.column("rank"))
    l_node = to_numpy(links.column("node_id"))
    l_event = to_numpy(links.column("event"))
    for rank, et in ts.et_nodes.items():
        sel = l_rank == rank
        if not sel.any() or et.data_deps.num_rows == 0:
            continue
        o = np.argsort(l_node[sel], kind="stable")
        nodes, events = l_node[sel][o], l_event[sel][o]
        src = to_numpy(et.data_deps.column("src"))
        dst = to_numpy(et.data_deps.column("dst"))

        def to_event(ids: np.ndarray, nodes: np.ndarray = nodes,
                     events: np.ndarray = events) -> np.ndarray:
            pos = np.clip(np.searchsorted(nodes, ids), 0, max(nodes.size - 1, 0))
            return np.where(nodes[pos] == ids, events[pos], -1)

        a, b = to_event(src), to_event(dst)
        ok = (a >= 0) & (b >= 0)
        a, b = a[ok], b[ok]
        cross = host_ev[a] & host_ev[b] & ((tid[a] != tid[b]) | (pid[a] != pid[b])) & (
            t0[b] >= t1[a])
        a, b = a[cross], b[cross]
        edges.add(2 * a + 1, 2 * b, t0[b] - t1[a], EdgeKind.DATA, np.zeros(a.size, np.int64))


def _to_median(edges: EdgeLists, kind: EdgeKind) -> None:
    """Set the structural lags of the edges of ``kind`` added so far to the median of their
    measured lags."""
    parts = [i for i, kk in enumerate(edges.kind) if kk == int(kind)]
    if not parts:
        return
    med = int(np.median(np.concatenate([edges.lag[i] for i in parts])))
    for i in parts:
        edges.structural[i] = np.full(edges.lag[i].size, med, np.int64)


def _thread_caps(w: waits.WaitEdges) -> tuple[np.ndarray, np.ndarray] | None:
    """The intrinsic costs the wait models lower the THREAD segment into a point to:
    ``(points, costs)``, points ascending and unique, the smallest cost where several name a
    point (int64); None when no model names a point."""
    if not w.relax_point:
        return None
    pts = np.concatenate(w.relax_point)
    lag = np.concatenate(w.relax_lag)
    o = np.lexsort((lag, pts))  # by point, the smallest cost first
    pts, lag = pts[o], lag[o]
    first = np.r_[True, pts[1:] != pts[:-1]]
    return pts[first], lag[first]


def _relax_waits(dst: np.ndarray, lag: np.ndarray, kind: np.ndarray, host_exec: np.ndarray,
                 thread_lo: int, thread_hi: int, patch: list[np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Let a point with a WAIT/ISSUE/SYNC edge move when what it waited for moves (in place
    on ``lag``; the THREAD edges are ``[thread_lo, thread_hi)``, each into its own point).

    The THREAD edge into such a point held the measured gap (waiting time); it becomes zero
    (ISSUE/WAIT: the thread was idle) or the call's own minimum time (SYNC: the wake-up
    latency, already on the SYNC edge; a gloo collective's transfer time, on its EXEC edge),
    so the dependency edge alone sets the time.

    ``patch`` (``[index, values]``, int64, index ascending): a second lag column given as
    the edges where it differs from ``lag``, relaxed likewise; returns it relaxed, as
    ``(index, values)`` with ``index`` int32 when the edge ids fit (empty without
    ``patch``).
    """
    waiting = (kind == int(EdgeKind.WAIT)) | (kind == int(EdgeKind.ISSUE))
    steps = []
    for mask, floor_from_dep in ((waiting, False), (host_exec, True)):
        if not mask.any() or thread_hi <= thread_lo:
            continue
        m = np.flatnonzero(mask)
        e = _edges_into(dst[thread_lo:thread_hi], thread_lo, dst[m])
        hit = e >= 0
        steps.append((m[hit], e[hit], floor_from_dep))
    p_idx, p_val = patch if patch is not None else (np.empty(0, np.int64),) * 2
    x = touched = None
    if patch is not None and steps:  # the patched column at the edges the steps touch
        touched = np.unique(np.concatenate([np.r_[m, e] for m, e, _ in steps]))
        x = lag[touched].astype(np.int64)  # (a copy; int64 as the patch's values)
        at = np.clip(np.searchsorted(p_idx, touched), 0, max(p_idx.size - 1, 0))
        on = p_idx[at] == touched if p_idx.size else np.zeros(touched.size, bool)
        x[on] = p_val[at[on]]
    for m, e, floor_from_dep in steps:
        lag[e] = np.minimum(lag[e], lag[m]) if floor_from_dep else 0
        if x is not None:
            em, mm = np.searchsorted(touched, e), np.searchsorted(touched, m)
            x[em] = np.minimum(x[em], x[mm]) if floor_from_dep else 0
    if x is not None:  # the patch off the touched edges, plus those that now differ
        keep = ~np.isin(p_idx, touched)
        diff = x != lag[touched]
        p_idx = np.concatenate([p_idx[keep], touched[diff]])
        p_val = np.concatenate([p_val[keep], x[diff]])
        o = np.argsort(p_idx, kind="stable")
        p_idx, p_val = p_idx[o], p_val[o]
    if lag.size < _INT32_LIMIT:
        p_idx = p_idx.astype(np.int32)
    return p_idx, p_val


_WALK: list = []


def _walk_kernel(size: int):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.thread_walk`, or None
    (:func:`traincast.graph.jit.kernel`: numba missing, ``TRAINCAST_NO_NUMBA`` set, or
    ``size`` points too few to pay for loading it)."""
    if not worth_compiling(size):
        return None
    if not _WALK:
        _WALK.append(kernel("traincast.graph.numba_kernels", "thread_walk"))
    return _WALK[0]
