"""The host-wait models of :mod:`traincast.graph.waits` (launch queue, blocking copies and
syncs, polling loops; the models are described there) over all ranks at once.

Every statistic is the rank's own (wake-up medians, intrinsic costs per API name, queue
depths), with numpy calls whose count does not grow with the number of ranks: rank by rank,
a 1,024-rank job spent ~1 ms per rank in numpy call overhead (issue 16). A rank whose
launches visibly fill the queue (its depth is fitted, a search over depths) goes through
:func:`traincast.graph.waits.launch_queue`, rank by rank.

Edges into one point keep the order the per-rank models give them (ties between edges of one
kind are broken by edge order, :mod:`traincast.graph.binding`).
"""

from __future__ import annotations

import numpy as np

from traincast.graph import waits as W
from traincast.graph.grouped import group_median, group_percentile10, runs, search_in_blocks


def launch_queue(ranks: list[int], rank: np.ndarray, g: np.ndarray, launch: np.ndarray,
                 device: np.ndarray, stream: np.ndarray, t0: np.ndarray, t1: np.ndarray,
                 name_idx: np.ndarray, out: W.WaitEdges) -> None:
    """QUEUE edges of every rank's launches (:func:`traincast.graph.waits.launch_queue`).

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
        o = np.lexsort((gl, t1[gl], ll, st, dev, r_of))
        last = np.r_[runs(r_of[o], dev[o], st[o], ll[o])[1:], True]
        e = o[last]
        e_rank, e_dev, e_st, calls, best = r_of[e], dev[e], st[e], ll[e], gl[e]
        # per stream, entries in launch order (start, then row)
        o = np.lexsort((calls, t0[calls], e_st, e_dev, e_rank))
        e_rank, e_dev, e_st, calls, best = (a[o] for a in (e_rank, e_dev, e_st, calls, best))
        key_new = runs(e_rank, e_dev, e_st)
        key_id = np.cumsum(key_new) - 1
        key_head = np.flatnonzero(key_new)
        pos = np.arange(calls.size) - key_head[key_id]
        ends = t1[calls]
        launched = search_in_blocks(key_id, t0[calls], key_id, ends) - key_head[key_id]
        ob = np.lexsort((t1[best], key_id))
        completed = (search_in_blocks(key_id[ob], t1[best][ob], key_id, ends)
                     - key_head[key_id])
        outstanding = launched - completed
        ranks_here, r_first = np.unique(e_rank, return_index=True)
        max_out = np.maximum(np.maximum.reduceat(outstanding, r_first), 0)
        max_of = dict(zip(ranks_here.tolist(), max_out.tolist(), strict=True))
        fitted = {r for r, m in max_of.items() if m >= W.MIN_FITTED_DEPTH}
        depth_of = {r: max(W.DEFAULT_QUEUE_DEPTH, m + 1) for r, m in max_of.items()}
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
        d_r = np.maximum(W.DEFAULT_QUEUE_DEPTH, max_out + 1)[e_ri]
        pair = mine & (pos >= d_r)
        c_i = np.flatnonzero(pair)
        src_op, c = best[c_i - d_r[c_i]], calls[c_i]
        slack = t1[c] - t1[src_op]
        keep = slack >= 0
        c_i, src_op, c, slack = c_i[keep], src_op[keep], c[keep], slack[keep]
        p_rank = e_rank[c_i]
        intr_c = intr[c_i]
        blocked = (t1[src_op] > t0[c]) & (slack <= W.QUEUE_WAKE_NS) & (t1[c] - t0[c] > intr_c)
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
                W.launch_queue(r, g[sel], launch[sel], device, stream, t0, t1, name_idx, out)


def _name_flags(name_dict: list[str], *needles: str) -> list[np.ndarray]:
    """bool per name id for each substring."""
    return [np.array([x in s for s in name_dict] or [False], bool) for x in needles]


def syncs(rank: np.ndarray, host_rt: np.ndarray, g: np.ndarray, launch: np.ndarray,
          blocking: np.ndarray, name_idx: np.ndarray, name_dict: list[str],
          device: np.ndarray, stream: np.ndarray, pid: np.ndarray, tid: np.ndarray,
          t0: np.ndarray, t1: np.ndarray, out: W.WaitEdges) -> None:
    """SYNC edges of every rank's blocking copies and synchronizations (module docstring of
    :mod:`traincast.graph.waits`): (a) a copy waits for the op it issued (its end, or its
    start for a copy from pageable memory); (b) a device sync for the op launched last before
    it on every stream of its rank, a stream sync for the op launched last before it on the
    stream its thread launched to last; (c) any other blocking call for the op of its rank
    that ended last before it, when that was during the call and within the wake-up window.
    Pairs are distinct (call, op) in that order; a call that waited has its THREAD segment
    lowered to the median duration of its rank's calls of the same name that did not.

    Args:
        host_rt: every rank's host runtime calls (ascending rows); g/launch as for
            :func:`launch_queue`; blocking: bool per name id (the builder's BLOCKING_CALL).
    """
    calls = host_rt[blocking[name_idx[host_rt]]]
    calls = calls[np.isin(rank[calls], np.unique(rank[g]))]  # a rank without GPU ops: none
    if calls.size == 0:
        return
    memcpy = W.name_mask(W.MEMCPY_CALL, name_dict)
    dev_sync = W.name_mask(W.DEVICE_SYNC, name_dict)
    str_sync = W.name_mask(W.STREAM_SYNC, name_dict)
    pairs_c: list[np.ndarray] = []
    pairs_d: list[np.ndarray] = []
    handled = np.empty(0, np.int64)
    sc = sd = np.empty(0, np.int64)
    has_launch = launch >= 0
    lg, lc = g[has_launch], launch[has_launch]
    # (a) copies: the op they issued (latest end among the ops of that call; call rows are
    # unique across ranks)
    cp = calls[memcpy[name_idx[calls]]]
    if cp.size and lg.size:
        o = np.lexsort((t1[lg], lc))
        lc_s, lg_s = lc[o], lg[o]
        pos = np.searchsorted(lc_s, cp, "right") - 1
        hit = (pos >= 0) & (lc_s[np.clip(pos, 0, None)] == cp)
        cp, op = cp[hit], lg_s[pos[hit]]
        to_p, from_p, pinned, d2d, pageable, is_async = _name_flags(
            name_dict, "-> Pageable", "Pageable ->", "Pinned", "Device -> Device", "Pageable",
            "Async")
        on = name_idx[op]
        to_pageable, from_pageable = to_p[on], from_p[on]
        known = pinned[on] | d2d[on] | pageable[on]
        call_async = is_async[name_idx[cp]]
        start_dep = from_pageable & ~to_pageable
        end_dep = (to_pageable | ~call_async | ~known) & ~start_dep
        timing_only = call_async & ~known
        ok_t = ~timing_only | ((t1[op] > t0[cp]) & (t1[cp] >= t1[op])
                               & (t1[cp] - t1[op] <= W.SYNC_WAKE_NS))
        sel = end_dep & ok_t
        pairs_c.append(cp[sel])
        pairs_d.append(op[sel])
        handled = cp
        sc, sd = cp[start_dep], op[start_dep]
    # launch order per (rank, stream), by launch start
    lr = rank[lg].astype(np.int64)
    dev = device[lg].astype(np.int64)
    st = stream[lg].astype(np.int64) & 0xFFFFFFFF
    o = np.lexsort((t0[lc], st, dev, lr))
    s_rank, s_dev, s_st, s_ts, s_op = lr[o], dev[o], st[o], t0[lc][o], lg[o]
    s_new = runs(s_rank, s_dev, s_st)
    s_id = np.cumsum(s_new) - 1
    s_head = np.flatnonzero(s_new)
    stream_rank = s_rank[s_head]

    def last_launched_before(q_stream: np.ndarray, q_t: np.ndarray) -> np.ndarray:
        """Per query: the op launched last at or before ``q_t`` on stream ``q_stream``
        (an id of ``s_head``), -1 if none."""
        j = search_in_blocks(s_id, s_ts, q_stream, q_t, "right") - 1
        ok = j >= s_head[q_stream]
        return np.where(ok, s_op[np.clip(j, 0, None)], -1)

    # a device sync waits for the op launched last before it on every stream of its rank
    ds = calls[dev_sync[name_idx[calls]]]
    if ds.size and s_head.size:
        r_lo = np.searchsorted(stream_rank, rank[ds], "left")
        r_hi = np.searchsorted(stream_rank, rank[ds], "right")
        n_st = r_hi - r_lo
        q_ds = np.repeat(ds, n_st)
        q_stream = np.repeat(r_lo, n_st) + (np.arange(q_ds.size)
                                            - np.repeat(np.cumsum(n_st) - n_st, n_st))
        d = last_launched_before(q_stream, t0[q_ds])
        pairs_c.append(q_ds[d >= 0])
        pairs_d.append(d[d >= 0])
    ss = calls[str_sync[name_idx[calls]]]
    if ss.size and lg.size:
        # the stream the calling thread launched to last before the call
        # threads (rank, pid, tid) of the launches and of the syncs, numbered together
        kr = np.r_[lr, rank[ss].astype(np.int64)]
        kp = np.r_[pid[lc], pid[ss]].astype(np.int64)
        kt = np.r_[tid[lc], tid[ss]].astype(np.int64) & 0xFFFFFFFF
        ko = np.lexsort((kt, kp, kr))
        gid = np.empty(kr.size, np.int64)
        gid[ko] = np.cumsum(runs(kr[ko], kp[ko], kt[ko])) - 1
        l_gid, s_gid = gid[:lc.size], gid[lc.size:]
        th = np.lexsort((t0[lc], l_gid))  # launches by thread, then start
        j = search_in_blocks(l_gid[th], t0[lc][th], s_gid, t0[ss], "right") - 1
        jj = np.clip(j, 0, None)
        ok = (j >= 0) & (l_gid[th][jj] == s_gid)
        ss_f = ss[ok]
        inv = np.empty(o.size, np.int64)
        inv[o] = np.arange(o.size)
        stream_of = s_id[inv[th[jj[ok]]]]  # the stream of that launch
        d = last_launched_before(stream_of, t0[ss_f])
        pairs_c.append(ss_f[d >= 0])
        pairs_d.append(d[d >= 0])
    # (c) any other blocking call: the op of its rank that ended last before it, if it ended
    # during the call and within the wake-up window
    other = calls[~np.isin(calls, handled)]
    gr = rank[g].astype(np.int64)
    og = np.lexsort((g, t1[g], gr))
    g_rank_s, g_end, g_rows = gr[og], t1[g][og], g[og]
    j = search_in_blocks(g_rank_s, g_end, rank[other].astype(np.int64), t1[other], "right") - 1
    jj = np.clip(j, 0, None)
    near = (j >= 0) & (g_rank_s[jj] == rank[other]) & (g_end[jj] > t0[other]) & (
        t1[other] - g_end[jj] <= W.SYNC_WAKE_NS)
    pairs_c.append(other[near])
    pairs_d.append(g_rows[jj[near]])
    c = np.concatenate(pairs_c)
    d = np.concatenate(pairs_d)
    if c.size == 0:
        return
    # a rank with no pair at all is left out entirely (as rank by rank)
    with_pairs = np.unique(rank[c])
    o = np.lexsort((d, c))  # distinct (call, op) pairs in (call, op) order
    c, d = c[o], d[o]
    keep = runs(c, d)
    c, d = c[keep], d[keep]
    slack = t1[c] - t1[d]
    keep = slack >= 0  # the call returned before the op ended: it did not wait for it
    c, d, slack = c[keep], d[keep], slack[keep]
    waited_pair = (t1[d] > t0[c]) & (slack <= W.SYNC_WAKE_NS)
    typical_c = group_median(rank[c].astype(np.int64), slack, waited_pair, 0)
    out.add(2 * d + 1, 2 * c + 1, np.where(waited_pair, slack, np.minimum(slack, typical_c)),
            np.minimum(slack, typical_c), False)
    typ = dict(zip(rank[c].tolist(), typical_c.tolist(), strict=True))
    in_r = np.isin(rank[sc], with_pairs)
    sc, sd = sc[in_r], sd[in_r]
    s_slack = t1[sc] - t0[sd]
    k = s_slack >= 0
    sc, sd, s_slack = sc[k], sd[k], s_slack[k]
    s_typ = np.array([typ.get(r, 0) for r in rank[sc].tolist()], np.int64)
    s_wait = (t0[sd] > t0[sc]) & (s_slack <= W.SYNC_WAKE_NS)
    out.add(2 * sd, 2 * sc + 1, np.where(s_wait, s_slack, np.minimum(s_slack, s_typ)),
            np.minimum(s_slack, s_typ), False)
    calls = calls[np.isin(rank[calls], with_pairs)]
    w = np.isin(calls, np.concatenate([c[waited_pair], sc[s_wait]]))
    call_dur = t1[calls] - t0[calls]
    c_rank = rank[calls].astype(np.int64)
    n_names = int(name_idx.max()) + 1 if name_idx.size else 1
    intr = group_median(c_rank * n_names + name_idx[calls], call_dur, ~w, -1)
    fallback = np.array([typ.get(r, 0) for r in c_rank.tolist()], np.int64)
    intr = np.where(intr < 0, fallback, intr)
    relax = w & (call_dur > intr)
    out.relax(2 * calls[relax] + 1, intr[relax])
    ranks, first, n_calls = np.unique(c_rank, return_index=True, return_counts=True)
    bi = np.searchsorted(ranks, c_rank[relax])
    n_relax = np.bincount(bi, minlength=ranks.size)
    waited = np.bincount(bi, weights=(call_dur - intr)[relax].astype(np.float64),
                         minlength=ranks.size)
    for i, r in enumerate(ranks.tolist()):
        out.summary.append((r, "sync", int(n_calls[i]), int(n_relax[i]), int(waited[i]),
                            f"wake-up median {typ.get(r, 0) / 1e3:.1f} us"))


def polls(rank: np.ndarray, host_rt: np.ndarray, g: np.ndarray, name_idx: np.ndarray,
          name_dict: list[str], pid: np.ndarray, tid: np.ndarray, t0: np.ndarray,
          t1: np.ndarray, out: W.WaitEdges) -> None:
    """SYNC edges of every rank's polling loops: a run of at least :data:`~traincast.graph.waits.POLL_MIN_CALLS` queries
    on one thread spanning :data:`~traincast.graph.waits.POLL_MIN_SPAN_NS` that ends within
    the wake-up window after an op of its rank ended waits for that op."""
    query = W.name_mask(W.QUERY_CALL, name_dict)
    if not query.any() or g.size == 0 or host_rt.size == 0:
        return
    rows = host_rt[np.isin(rank[host_rt], np.unique(rank[g]))]
    r_of = rank[rows].astype(np.int64)
    p_of = pid[rows].astype(np.int64)
    t_of = tid[rows].astype(np.int64)
    o = np.lexsort((rows, t0[rows], t_of, p_of, r_of))
    rows, r_of, p_of, t_of = rows[o], r_of[o], p_of[o], t_of[o] & 0xFFFFFFFF
    is_q = query[name_idx[rows]]
    if not is_q.any():
        return
    # runs of consecutive queries on one thread (no other host event of it in between)
    brk = np.r_[True, (~is_q[1:]) | (~is_q[:-1]) | (r_of[1:] != r_of[:-1])
                | (p_of[1:] != p_of[:-1]) | (t_of[1:] != t_of[:-1])]
    head = np.flatnonzero(brk)
    size = np.diff(np.r_[head, rows.size])
    q_run = is_q[head]
    head, size = head[q_run], size[q_run]
    first, last = rows[head], rows[head + size - 1]
    cand = (size >= W.POLL_MIN_CALLS) & (t1[last] - t0[first] >= W.POLL_MIN_SPAN_NS)
    gr = rank[g].astype(np.int64)
    og = np.lexsort((g, t1[g], gr))
    g_rank_s, g_end, g_rows = gr[og], t1[g][og], g[og]
    l_rank = rank[last].astype(np.int64)
    j = search_in_blocks(g_rank_s, g_end, l_rank, t1[last], "right") - 1
    jj = np.clip(j, 0, None)
    before_last = rows[head + np.maximum(size - 2, 0)]
    ok = cand & (j >= 0) & (g_rank_s[jj] == l_rank) & (g_end[jj] > t0[before_last]) & (
        t1[last] - g_end[jj] <= W.SYNC_WAKE_NS)
    head, size, first, last, l_rank, jj = (a[ok] for a in (head, size, first, last, l_rank,
                                                           jj))
    dep = g_rows[jj]
    slack = t1[last] - g_end[jj]
    typical = group_median(l_rank, slack, np.ones(slack.size, bool), 0)
    out.add(2 * dep + 1, 2 * last + 1, slack, np.minimum(slack, typical), False)
    # the THREAD segments inside each loop are not work: every query after the first
    inner_n = size - 1
    idx = np.repeat(head + 1, inner_n) + (np.arange(int(inner_n.sum()))
                                          - np.repeat(np.cumsum(inner_n) - inner_n, inner_n))
    members = rows[idx]
    pts = np.concatenate([2 * members, 2 * members + 1])
    out.relax(pts, np.zeros(pts.size, np.int64))
    q_rank = r_of[is_q]
    ranks, n_q = np.unique(q_rank, return_counts=True)
    li = np.searchsorted(ranks, l_rank)
    n_loops = np.bincount(li, minlength=ranks.size)
    spent = np.bincount(li, weights=(t1[last] - t1[first]).astype(np.float64),
                        minlength=ranks.size)
    for i, r in enumerate(ranks.tolist()):
        if n_loops[i]:
            out.summary.append((r, "poll", int(n_q[i]), int(n_loops[i]), int(spent[i]),
                                f"{int(n_loops[i])} polling loops"))
        else:
            out.summary.append((r, "poll", int(n_q[i]), 0, 0, "no polling loop"))
