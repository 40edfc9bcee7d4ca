"""The GPU side of an execution graph: launches, stream order and waits across streams.

For the GPU ops of all ranks (rows of a TraceSet's events, times in ns aligned across ranks):

* **Launches** (``LAUNCH``): a runtime call and the GPU op with its correlation id, per rank
  (the lowest row among duplicates).
* **Streams** (``STREAM``): ops of one (device, stream) run in FIFO order, by start.
* **Cross-stream waits** (``CROSS_STREAM``): an op that started long after both its launch and
  its stream predecessor waited for an op on another stream (``cudaStreamWaitEvent``): the op
  on the same device that ended last before it, within :data:`CROSS_STREAM_NS`, or the one an
  explicit "Stream Wait Event" record names (:func:`explicit_stream_waits`).
* **Anchors**: an op whose launch is not in the trace cannot start before its measured
  start, except the backlog the profiling window opened on (an op with a stream predecessor,
  ahead of the first op of its stream whose launch the trace holds: launched before the
  window): it follows its predecessor with the measured gap, so a faster GPU drains it faster.
* **Execution** (``EXEC``): an op's start to its end (collectives in matched groups get theirs
  from :func:`traincast.graph.build.build_graph`).

Lags follow :mod:`traincast.graph.build`: exact (measured) and structural (typical).
"""

from __future__ import annotations

import numpy as np

from traincast.graph.edge_lists import EdgeLists, PointWrites
from traincast.graph.grouped import group_median, lexsort, search_in_blocks
from traincast.graph.model import EdgeKind
from traincast.trace.traceset import TraceSet

_US = 1000  # ns per µs
STREAM_BOUND_NS = 1 * _US  # an op starting within 1 µs of its predecessor's end queued behind it
LAUNCH_BOUND_NS = 50 * _US  # an op starting within 50 µs of its launch was launch-bound
CROSS_STREAM_NS = 10 * _US  # an unexplained start within 10 µs of another stream's op end


def gpu_edges(g: np.ndarray, rank: np.ndarray, rt: np.ndarray, corr: np.ndarray,
         device: np.ndarray, stream: np.ndarray, t0: np.ndarray, t1: np.ndarray,
         coll_exec: np.ndarray, edges: EdgeLists, anchor: np.ndarray | PointWrites,
         explicit: dict[int, int]
         ) -> np.ndarray:
    """LAUNCH, STREAM, CROSS_STREAM and EXEC edges of the GPU ops ``g`` (rows, ascending, all
    ranks at once); ``rt`` the host runtime calls with a correlation id; ``anchor`` takes
    the ops' anchors as ``anchor[points] = times``. Returns the row of the runtime call that
    launched each op of ``g`` (-1: not in the trace).

    Per rank: launches are matched by correlation id (the lowest row among duplicates); the
    typical launch latency is the median over launch-bound ops (5 µs without any); a stream
    predecessor is the op before on the same (device, stream) by start; an op no launch or
    predecessor explains waited for the op on another stream of its device that ended last
    before it (lowest stream among equal ends, then the highest row), within
    :data:`CROSS_STREAM_NS`, or for an explicit stream wait event.
    """
    if g.size == 0:
        return g
    g_rank = rank[g].astype(np.int64)
    # the ops' columns, gathered once
    g_t0, g_t1, g_corr, g_dev, g_st = t0[g], t1[g], corr[g], device[g], stream[g]
    # exec edges (collectives in matched groups get their transfer time later)
    ce = coll_exec[g]
    plain = g[~ce]
    edges.add(2 * plain, 2 * plain + 1, (g_t1 - g_t0)[~ce], EdgeKind.EXEC)
    # launches by (rank, correlation id)
    launch = np.full(g.size, -1, np.int64)
    if rt.size:
        o = lexsort((corr[rt], rank[rt]))  # stable: ties keep ``rt``'s ascending rows
        rts = rt[o]
        k_rt_rank = rank[rts].astype(np.int64)
        k_rt_corr = corr[rts].astype(np.int64)
        pos = search_in_blocks(k_rt_rank, k_rt_corr, g_rank, g_corr.astype(np.int64), "left")
        pos = np.clip(pos, 0, rts.size - 1)
        hit = (k_rt_corr[pos] == g_corr) & (k_rt_rank[pos] == g_rank) & (g_corr >= 0)
        launch[hit] = rts[pos[hit]]
    launch_t0 = t0[np.clip(launch, 0, None)]
    slack_launch = np.where(launch >= 0, g_t0 - launch_t0, -1)
    lb = (launch >= 0) & (slack_launch >= 0) & (slack_launch <= LAUNCH_BOUND_NS)
    typical = group_median(g_rank, slack_launch, lb, 5 * _US)
    # stream predecessors: by (rank, device, stream, start)
    # stable: ties keep ``g``'s ascending rows
    o = lexsort((g_t0, g_st, g_dev, g_rank))
    gs = g[o]
    o_rank, o_dev, o_st = g_rank[o], g_dev[o], g_st[o]
    same = np.flatnonzero((o_rank[1:] == o_rank[:-1]) & (o_dev[1:] == o_dev[:-1])
                          & (o_st[1:] == o_st[:-1])) + 1
    del o_rank, o_dev, o_st
    prev = np.full(g.size, -1, np.int64)
    prev_sorted = np.full(gs.size, -1, np.int64)
    prev_sorted[same] = gs[same - 1]
    prev[o] = prev_sorted
    has_prev = prev >= 0
    prev_t1 = t1[np.clip(prev, 0, None)]
    slack_stream = np.where(has_prev, g_t0 - prev_t1, -1)
    has_launch = launch >= 0
    stream_bound = has_prev & (slack_stream <= STREAM_BOUND_NS)
    launch_bound = ~stream_bound & has_launch & (slack_launch >= 0) & (
        slack_launch <= LAUNCH_BOUND_NS)
    unexplained = ~stream_bound & ~launch_bound
    dep = _cross_stream_blocks(g, g_rank, np.flatnonzero(unexplained), device, stream, t0,
                               t1, has_prev, prev)
    if explicit:
        for i in np.flatnonzero(np.isin(g, np.fromiter(explicit, np.int64))).tolist():
            src_row = explicit[int(g[i])]
            if t1[src_row] <= t0[g[i]]:
                dep[i] = src_row
                unexplained[i] = False
    has_dep = dep >= 0
    # a delay no dependency explains (an event recorded on an idle stream, a wait the trace
    # does not show) is kept as measured rather than dropped, after the later of the launch
    # and the stream predecessor's end (whichever the op could have started after)
    lost = unexplained & ~has_dep
    prev_end = np.where(has_prev, prev_t1, np.iinfo(np.int64).min)
    launch_ts = np.where(has_launch, launch_t0, np.iinfo(np.int64).min)
    after_launch = lost & has_launch & (~has_prev | (launch_ts >= prev_end))
    after_prev = lost & ~after_launch & has_prev
    # exact: LAUNCH measured when launch-bound, else the typical latency (never above
    # measured); structural: one launch latency per rank, FIFO streams without gaps, waits
    # on other streams without extra latency
    lag_launch = np.where(launch_bound, slack_launch, np.minimum(slack_launch, typical))
    lag_stream = np.where(stream_bound, slack_stream, 0)
    lag_cross = g_t0[has_dep] - t1[dep[has_dep]]
    st_launch = typical.copy()
    st_stream = np.zeros(g.size, np.int64)
    lag_launch = np.where(after_launch, slack_launch, lag_launch)
    st_launch = np.where(after_launch, slack_launch, st_launch)
    lag_stream = np.where(after_prev, slack_stream, lag_stream)
    st_stream = np.where(after_prev, slack_stream, st_stream)
    # the backlog the window opened on (see the anchors below) keeps its measured gaps
    backlog = ~has_launch & has_prev & _before_first_launched(o, g_rank, device, stream,
                                                              g, has_launch)
    lag_stream = np.where(backlog, slack_stream, lag_stream)
    st_stream = np.where(backlog, slack_stream, st_stream)
    m = has_launch & (slack_launch >= 0)
    edges.add(2 * launch[m], 2 * g[m], lag_launch[m], EdgeKind.LAUNCH, st_launch[m])
    edges.add(2 * prev[has_prev] + 1, 2 * g[has_prev], lag_stream[has_prev], EdgeKind.STREAM,
              st_stream[has_prev])
    edges.add(2 * dep[has_dep] + 1, 2 * g[has_dep], lag_cross, EdgeKind.CROSS_STREAM,
              np.zeros(lag_cross.size, np.int64))
    # ops whose launch is not in the trace (launched before the profiling window, or from an
    # untraced thread) cannot start before they were measured to start; except the backlog
    # the window opened on: an op with a stream predecessor that comes ahead
    # of the first op of its stream whose launch the trace holds was launched before that
    # launch, by the window's start: it may start as soon as its predecessor ends
    free = ~has_launch & ~backlog
    anchor[2 * g[free]] = g_t0[free]
    return launch


def _before_first_launched(o: np.ndarray, g_rank: np.ndarray, device: np.ndarray,
                           stream: np.ndarray, g: np.ndarray, has_launch: np.ndarray
                           ) -> np.ndarray:
    """bool[len(g)]: the op comes, in its (rank, device, stream)'s order ``o`` (by start),
    before the first op of that stream whose launch the trace holds (False on a stream with
    none)."""
    gs = g[o]
    key_new = np.r_[True, (g_rank[o][1:] != g_rank[o][:-1]) | (device[gs][1:] != device[gs][:-1])
                    | (stream[gs][1:] != stream[gs][:-1])] if gs.size else np.empty(0, bool)
    key_id = np.cumsum(key_new) - 1
    # launched ops seen so far on the stream, in order: 0 before its first launched op
    seen = np.cumsum(has_launch[o])
    base = (seen - has_launch[o])[np.flatnonzero(key_new)][key_id]
    before_sorted = (seen - base) == 0
    any_launched = np.bincount(key_id, weights=has_launch[o].astype(np.float64)) > 0
    before_sorted &= any_launched[key_id]
    out = np.zeros(g.size, bool)
    out[o] = before_sorted
    return out


#: GPU ops per pass of :func:`_cross_stream_blocks` (whole ranks: at least one)
CROSS_BLOCK = 1 << 16


def _cross_stream_blocks(g: np.ndarray, g_rank: np.ndarray, cand: np.ndarray,
                         device: np.ndarray, stream: np.ndarray, t0: np.ndarray,
                         t1: np.ndarray, has_prev: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """:func:`cross_stream_deps` a block of whole ranks at a time (about
    :data:`CROSS_BLOCK` ops, ``g_rank`` ascending): ops of two ranks never meet in it (its
    blocks are a rank's and device's), so the result is the same with the temporaries of
    a block of ranks, not of the whole job. Ranks not ascending: one pass."""
    if g.size <= CROSS_BLOCK or not bool(np.all(g_rank[1:] >= g_rank[:-1])):
        return cross_stream_deps(g, g_rank, cand, device, stream, t0, t1, has_prev, prev)
    dep = np.full(g.size, -1, np.int64)
    a = 0
    while a < g.size:
        b = min(a + CROSS_BLOCK, g.size)
        if b < g.size:  # to the end of the rank of op b - 1
            b = int(np.searchsorted(g_rank, g_rank[b - 1], "right"))
        c0, c1 = np.searchsorted(cand, [a, b])
        dep[a:b] = cross_stream_deps(g[a:b], g_rank[a:b], cand[c0:c1] - a, device, stream,
                                     t0, t1, has_prev[a:b], prev[a:b])
        a = b
    return dep


def cross_stream_deps(g: np.ndarray, g_rank: np.ndarray, cand: np.ndarray, device: np.ndarray,
                  stream: np.ndarray, t0: np.ndarray, t1: np.ndarray, has_prev: np.ndarray,
                  prev: np.ndarray) -> np.ndarray:
    """int64[len(g)]: for the ops ``g[cand]``, the op on another stream of the same rank and
    device that ended last at or before its start (lowest stream among equal ends, then the
    highest row), when it ended within :data:`CROSS_STREAM_NS` and not before the stream
    predecessor; -1 elsewhere.

    All ops sorted by (rank, device, end, stream descending, row): the last one ending by
    the start is the answer when on another stream, else the last op before its run of
    same-stream ops."""
    dep = np.full(g.size, -1, np.int64)
    if cand.size == 0:
        return dep
    dev = device[g].astype(np.int64)
    st = stream[g].astype(np.int64) & 0xFFFFFFFF  # the stream order of the graph's keys
    g_t1 = t1[g]
    o = lexsort((-st, g_t1, dev, g_rank))  # stable: ties keep ``g``'s ascending rows
    rs, r_rank, r_dev, r_st, r_end = g[o], g_rank[o], dev[o], st[o], g_t1[o]
    blk_new = np.r_[True, (r_rank[1:] != r_rank[:-1]) | (r_dev[1:] != r_dev[:-1])]
    blk_start = np.maximum.accumulate(np.where(blk_new, np.arange(rs.size), 0))
    run_new = blk_new | np.r_[True, r_st[1:] != r_st[:-1]]
    run_start = np.maximum.accumulate(np.where(run_new, np.arange(rs.size), 0))
    c_rows = g[cand]
    # last op of the candidate's (rank, device) block ending at or before its start
    blk_id = np.cumsum(blk_new) - 1
    sorted_pos = np.empty(o.size, np.int64)
    sorted_pos[o] = np.arange(o.size)
    c_blk = blk_id[sorted_pos[cand]]  # the candidate is in its own block
    j = search_in_blocks(blk_id, r_end, c_blk, t0[c_rows], "right") - 1
    p = np.where((j >= 0) & (blk_id[np.clip(j, 0, None)] == c_blk), j, -1)
    ok = p >= 0
    pp = np.clip(p, 0, None)
    own = ok & (r_st[pp] == st[cand])
    alt = run_start[pp] - 1
    p = np.where(own, np.where(alt >= blk_start[pp], alt, -1), p)
    ok = p >= 0
    pp = np.clip(p, 0, None)
    best_end = np.where(ok, r_end[pp], -1)
    ok &= best_end >= 0
    prev_end = np.where(has_prev[cand], t1[np.clip(prev[cand], 0, None)], -1)
    ok &= (t0[c_rows] - best_end <= CROSS_STREAM_NS) & (best_end >= prev_end)
    dep[cand[ok]] = rs[pp[ok]]
    return dep


def explicit_stream_waits(ts: TraceSet, lo: int, hi: int, gpu_op: np.ndarray,
                           kind_idx: np.ndarray, corr: np.ndarray, device: np.ndarray,
                           stream: np.ndarray, t0: np.ndarray, k: dict[str, int]
                           ) -> dict[int, int]:
    """GPU op -> op it waits for, from ``cuda_sync`` "Stream Wait Event" records.

    A record names the waiting stream (``args.stream``), the stream the event was recorded
    on (``wait_on_stream``) and the cudaEventRecord call (``wait_on_cuda_event_record_corr_id``);
    Kineto >= PyTorch 2.3 (``libkineto/src/CuptiActivity.cpp``, CUPTI synchronization
    activities). The event completes with the last op launched on the recorded stream before
    the record call; the first op launched on the waiting stream after the wait call may not
    start earlier.
    """
    sw = ts.stream_waits
    if sw is None or sw.num_rows == 0:
        return {}
    ev_rows = sw.column("event").to_numpy()
    sel = (ev_rows >= lo) & (ev_rows < hi)
    if not sel.any():
        return {}
    rows = np.arange(lo, hi)
    rt = rows[(kind_idx[rows] == k["runtime"]) & (corr[rows] >= 0)]
    rt_ts = dict(zip(corr[rt].tolist(), t0[rt].tolist(), strict=False))
    g = rows[gpu_op[rows]]
    launch_ts = np.array([rt_ts.get(int(c), -1) for c in corr[g]], np.int64)
    out: dict[int, int] = {}
    for row, on_stream, rec in zip(ev_rows[sel].tolist(),
                                   sw.column("wait_on_stream").to_numpy()[sel].tolist(),
                                   sw.column("record_correlation").to_numpy()[sel].tolist(),
                                   strict=True):
        waiting = int(stream[row])
        t_rec = rt_ts.get(int(rec))
        t_wait = rt_ts.get(int(corr[row]))
        if waiting < 0 or t_rec is None or t_wait is None:
            continue
        dev = device[row]
        before = (stream[g] == on_stream) & (device[g] == dev) & (launch_ts >= 0) & (
            launch_ts <= t_rec)
        after = (stream[g] == waiting) & (device[g] == dev) & (launch_ts >= t_wait)
        if before.any() and after.any():
            src = g[before][np.argmax(launch_ts[before])]
            dst = g[after][np.argmin(launch_ts[after])]
            out.setdefault(int(dst), int(src))
    return out
