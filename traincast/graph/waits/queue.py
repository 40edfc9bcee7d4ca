"""Launch-queue back-pressure (``QUEUE`` edges; the model is described in
:mod:`traincast.graph.waits`): launch ``i`` on a stream ends after entry ``i - Q`` of that
stream completes.

:func:`launch_queue` models every rank at once with the default depth; a rank whose launches
visibly fill the queue (outstanding entries reach :data:`~traincast.graph.waits.common.
MIN_FITTED_DEPTH`) has its depth fitted, a search over depths, rank by rank
(:func:`fitted_launch_queue`). Edges into one point keep the order the per-rank model gives
them (ties between edges of one kind are broken by edge order, :mod:`traincast.graph.binding`).
"""

from __future__ import annotations

import numpy as np

from traincast.graph.grouped import (
    group_median,
    group_percentile10,
    lexsort,
    runs,
    search_in_blocks,
)
from traincast.graph.waits.common import (
    DEFAULT_QUEUE_DEPTH,
    FIT_WINDOW,
    MIN_BLOCKED,
    MIN_FITTED_DEPTH,
    QUEUE_WAKE_NS,
    WaitEdges,
    intrinsic,
)


def launch_queue(ranks: list[int], rank: np.ndarray, g: np.ndarray, launch: np.ndarray,
                 device: np.ndarray, stream: np.ndarray, t0: np.ndarray, t1: np.ndarray,
                 name_idx: np.ndarray, out: WaitEdges) -> None:
    """QUEUE edges of every rank's launches (the model in the module docstring).

    Args:
        ranks: the ranks to model, in order; rank: rank per event row; g: GPU op rows
            (ascending), launch: the runtime call that launched each (-1: none).
    """
    ok = launch >= 0
    gl, ll = g[ok], launch[ok]
    if gl.size:
        r_of = rank[gl].astype(np.int64)
        dev = device[gl].astype(np.int64)
        st = stream[gl].astype(np.int64) & 0xFFFFFFFF
        # one queue entry per (rank, stream, launch call); it completes with its last op
        # (latest end; among equal ends the later op row)
        o = lexsort((t1[gl], ll, st, dev, r_of))  # stable: ``gl`` ascending breaks ties
        last = np.r_[runs(r_of[o], dev[o], st[o], ll[o])[1:], True]
        e = o[last]
        e_rank, e_dev, e_st, calls, best = r_of[e], dev[e], st[e], ll[e], gl[e]
        # per stream, entries in launch order (start, then row)
        o = lexsort((calls, t0[calls], e_st, e_dev, e_rank))
        e_rank, e_dev, e_st, calls, best = (a[o] for a in (e_rank, e_dev, e_st, calls, best))
        key_new = runs(e_rank, e_dev, e_st)
        key_id = np.cumsum(key_new) - 1
        key_head = np.flatnonzero(key_new)
        pos = np.arange(calls.size) - key_head[key_id]
        ends = t1[calls]
        launched = search_in_blocks(key_id, t0[calls], key_id, ends) - key_head[key_id]
        ob = lexsort((t1[best], key_id))
        completed = (search_in_blocks(key_id[ob], t1[best][ob], key_id, ends)
                     - key_head[key_id])
        outstanding = launched - completed
        ranks_here, r_first = np.unique(e_rank, return_index=True)
        max_out = np.maximum(np.maximum.reduceat(outstanding, r_first), 0)
        max_of = dict(zip(ranks_here.tolist(), max_out.tolist(), strict=True))
        fitted = {r for r, m in max_of.items() if m >= MIN_FITTED_DEPTH}
        depth_of = {r: max(DEFAULT_QUEUE_DEPTH, m + 1) for r, m in max_of.items()}
        mine = ~np.isin(e_rank, list(fitted)) if fitted else np.ones(e_rank.size, bool)
        # intrinsic cost per (rank, API name): launches whose queue was at most half full
        e_ri = np.searchsorted(ranks_here, e_rank)  # each entry's rank, as an index
        m_r = max_out[e_ri]
        calm = outstanding <= np.maximum(m_r // 2, 1)
        call_dur = t1[calls] - t0[calls]
        p10 = group_percentile10(e_rank[mine], call_dur[mine]) if mine.any() else {}
        fallback = np.array([p10.get(r, 0) for r in ranks_here.tolist()], np.int64)[e_ri]
        n_names = int(name_idx.max()) + 1 if name_idx.size else 1
        intr = group_median(e_rank * n_names + name_idx[calls], call_dur, calm & mine, -1)
        intr = np.where(intr < 0, fallback, intr)
        # launch i of a stream waits for entry i - depth of the same stream
        d_r = np.maximum(DEFAULT_QUEUE_DEPTH, max_out + 1)[e_ri]
        pair = mine & (pos >= d_r)
        c_i = np.flatnonzero(pair)
        src_op, c = best[c_i - d_r[c_i]], calls[c_i]
        slack = t1[c] - t1[src_op]
        keep = slack >= 0
        c_i, src_op, c, slack = c_i[keep], src_op[keep], c[keep], slack[keep]
        p_rank = e_rank[c_i]
        intr_c = intr[c_i]
        blocked = _blocked(src_op, c, slack, intr_c, t0, t1)
        typical = group_median(p_rank, slack, blocked, 0)
        out.add(2 * src_op + 1, 2 * c + 1, np.where(blocked, slack, np.minimum(slack, typical)),
                np.minimum(slack, typical), True)
        out.relax(2 * c[blocked] + 1, intr_c[blocked])
        n_calls = np.bincount(e_ri, minlength=ranks_here.size)
        bi = np.searchsorted(ranks_here, p_rank[blocked])
        n_blocked = np.bincount(bi, minlength=ranks_here.size)
        waited = np.bincount(bi, weights=(t1[c] - t0[c] - intr_c)[blocked].astype(np.float64),
                             minlength=ranks_here.size)
        for i, r in enumerate(ranks_here.tolist()):
            if r in fitted:
                continue
            out.summary.append((r, "launch_queue", int(n_calls[i]), int(n_blocked[i]),
                                int(waited[i]), f"depth {depth_of[r]} assumed (CUDA default "
                                "per stream, HTA; never full here)"))
        for r in ranks:  # queues that fill: the depth is fitted, rank by rank
            if r in fitted:
                sel = rank[g] == r
                fitted_launch_queue(r, g[sel], launch[sel], device, stream, t0, t1, name_idx, out)



def fitted_launch_queue(rank: int, g: np.ndarray, launch: np.ndarray, device: np.ndarray,
                 stream: np.ndarray, t0: np.ndarray, t1: np.ndarray, name_idx: np.ndarray,
                 out: WaitEdges) -> None:
    """QUEUE edges of one rank's launches, the depth fitted (see the module docstring).

    Args:
        g: int64[G] GPU op rows; launch: int64[G] row of the runtime call that launched each
            (-1: not in the trace); t0/t1: aligned start/end (ns) of every row.
    """
    ok = launch >= 0
    if not ok.any():
        return
    gl, ll = g[ok], launch[ok]
    key = device[gl].astype(np.int64) * (1 << 32) + (stream[gl].astype(np.int64) & 0xFFFFFFFF)
    # one queue entry per (stream, launch call); it completes with its last op
    per: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (calls, done op, outstanding)
    max_out = 0
    for k in np.unique(key).tolist():
        sel = key == k
        calls, inv = np.unique(ll[sel], return_inverse=True)
        ops = gl[sel]
        best = np.full(calls.size, -1, np.int64)
        order = np.argsort(t1[ops], kind="stable")  # last write wins: the latest end
        best[inv[order]] = ops[order]
        o = lexsort((calls, t0[calls]))
        calls, best = calls[o], best[o]
        ends = t1[calls]
        launched = np.searchsorted(np.sort(t0[calls]), ends, "right")
        completed = np.searchsorted(np.sort(t1[best]), ends, "right")
        outstanding = launched - completed
        max_out = max(max_out, int(outstanding.max()))
        per.append((calls, best, outstanding))
    # every array here is the rank's: no work proportional to the whole job's events
    all_calls = np.concatenate([p[0] for p in per])
    call_dur = t1[all_calls] - t0[all_calls]
    # intrinsic cost per API: launches whose queue was at most half full
    out_all = np.concatenate([p[2] for p in per])
    calm = out_all <= max(max_out // 2, 1)
    intrinsic_all = intrinsic(all_calls, ~calm, call_dur, name_idx,
                               int(np.percentile(call_dur, 10)))
    o = np.argsort(all_calls, kind="stable")
    intrinsic_of = (all_calls[o], intrinsic_all[o])  # call row -> intrinsic cost
    # the depth is fitted when launches visibly block: among the depths up to the largest
    # outstanding count (a deeper queue would contradict the trace), the one at which the
    # most launches were woken by the completion of the entry ``depth`` places before them
    # (entries the profiler does not show, e.g. event records, take slots too, and not
    # always the same number of them)
    best = (-1, max_out)
    for d in range(max_out, max(max_out - FIT_WINDOW, MIN_FITTED_DEPTH) - 1, -1):
        n_blocked = int(_queue_pairs(per, d, t0, t1, intrinsic_of)[4].sum())
        if n_blocked > best[0]:
            best = (n_blocked, d)
    depth = best[1]
    src_op, c, slack, intr, blocked = _queue_pairs(per, depth, t0, t1, intrinsic_of)
    fitted = max_out >= MIN_FITTED_DEPTH and int(blocked.sum()) >= MIN_BLOCKED
    if not fitted:
        depth = max(DEFAULT_QUEUE_DEPTH, max_out + 1)
        src_op, c, slack, intr, blocked = _queue_pairs(per, depth, t0, t1, intrinsic_of)
    typical = int(np.median(slack[blocked])) if blocked.any() else 0
    exact = np.where(blocked, slack, np.minimum(slack, typical))
    structural = np.minimum(slack, typical)
    out.add(2 * src_op + 1, 2 * c + 1, exact, structural, True)
    out.relax(2 * c[blocked] + 1, intr[blocked])
    waited_ns = int((t1[c[blocked]] - t0[c[blocked]] - intr[blocked]).sum())
    how = (f"depth {depth} fitted (launches blocked until the entry {depth} before completed)"
           if fitted
           else f"depth {depth} assumed (CUDA default per stream, HTA; never full here)")
    out.summary.append((rank, "launch_queue", int(all_calls.size), int(blocked.sum()),
                        waited_ns, how))


def _queue_pairs(per: list[tuple[np.ndarray, np.ndarray, np.ndarray]], depth: int,
                 t0: np.ndarray, t1: np.ndarray,
                 intrinsic_of: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(freeing op, launch call, slack, intrinsic cost, blocked) for queue depth ``depth``:
    launch ``i`` of a stream waits for entry ``i - depth`` of the same stream."""
    srcs, dsts = [], []
    for calls, best, _ in per:
        if calls.size <= depth:
            continue
        i = np.arange(depth, calls.size)
        src = best[i - depth]
        c = calls[i]
        # a launch that found the queue full and returned long after entry i - depth
        # completed waited for a batch of entries to drain: its freeing entry is the last of
        # the stream's entries that completed before it returned (between i - depth and i)
        ob = np.argsort(t1[best], kind="stable")
        j = ob[np.maximum(np.searchsorted(t1[best][ob], t1[c], "right") - 1, 0)]
        drained = ((t1[src] > t0[c]) & (t1[c] - t1[src] > QUEUE_WAKE_NS) & (j > i - depth)
                   & (j < i) & (t1[best[j]] > t0[c]))
        srcs.append(np.where(drained, best[j], src))
        dsts.append(c)
    if not srcs:
        e = np.empty(0, np.int64)
        return e, e, e, e, np.empty(0, bool)
    src_op, c = np.concatenate(srcs), np.concatenate(dsts)
    slack = t1[c] - t1[src_op]
    keep = slack >= 0  # an inconsistent pair (clock or ordering noise) adds no edge
    src_op, c, slack = src_op[keep], c[keep], slack[keep]
    rows, costs = intrinsic_of
    intr = costs[np.searchsorted(rows, c)]
    blocked = _blocked(src_op, c, slack, intr, t0, t1)
    return src_op, c, slack, intr, blocked


def _blocked(src_op: np.ndarray, c: np.ndarray, slack: np.ndarray, intr: np.ndarray,
             t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """bool per (freeing op ``src_op``, launch call ``c``) pair: the call was blocked: the
    freeing entry completed while the call was in progress, and the call returned within
    :data:`~traincast.graph.waits.common.QUEUE_WAKE_NS` after it (``slack`` = call end - op
    end), later than its intrinsic cost ``intr``."""
    return (t1[src_op] > t0[c]) & (slack <= QUEUE_WAKE_NS) & (t1[c] - t0[c] > intr)
