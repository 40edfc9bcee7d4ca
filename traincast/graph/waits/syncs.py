"""Blocking copies and synchronizations (``SYNC`` edges; the model is described in
:mod:`traincast.graph.waits`), all ranks at once, and the sync model used before the wait
models (:func:`legacy_syncs`, ``build_graph(model_waits=False)``)."""

from __future__ import annotations

import numpy as np

from traincast.graph.grouped import group_median, lexsort, runs, search_in_blocks
from traincast.graph.waits.common import (
    DEVICE_SYNC,
    MEMCPY_CALL,
    STREAM_SYNC,
    SYNC_WAKE_NS,
    WaitEdges,
    name_mask,
    on_ranks_of,
    ops_by_end,
)


def _name_flags(name_dict: list[str], *needles: str) -> list[np.ndarray]:
    """bool per name id for each substring."""
    return [np.array([x in s for s in name_dict] or [False], bool) for x in needles]


def syncs(rank: np.ndarray, host_rt: np.ndarray, g: np.ndarray, launch: np.ndarray,
          blocking: np.ndarray, name_idx: np.ndarray, name_dict: list[str],
          device: np.ndarray, stream: np.ndarray, pid: np.ndarray, tid: np.ndarray,
          t0: np.ndarray, t1: np.ndarray, out: WaitEdges,
          by_end: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
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
            :func:`launch_queue`; blocking: bool per name id (the builder's BLOCKING_CALL);
            by_end: :func:`~traincast.graph.waits.common.ops_by_end` of ``g`` when the
            caller has it.
    """
    calls = host_rt[blocking[name_idx[host_rt]]]
    calls = calls[on_ranks_of(rank, g, calls)]  # a rank without GPU ops: none
    if calls.size == 0:
        return
    memcpy = name_mask(MEMCPY_CALL, name_dict)
    dev_sync = name_mask(DEVICE_SYNC, name_dict)
    str_sync = name_mask(STREAM_SYNC, name_dict)
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
        # only the ops a blocking copy call launched can match (the order among them is
        # theirs in the sort of all launched ops)
        by_copy = (memcpy & blocking)[name_idx[lc]]
        lc_c, lg_c = lc[by_copy], lg[by_copy]
        o = lexsort((t1[lg_c], lc_c))
        lc_s, lg_s = lc_c[o], lg_c[o]
        del by_copy, lc_c, lg_c
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
                               & (t1[cp] - t1[op] <= SYNC_WAKE_NS))
        sel = end_dep & ok_t
        pairs_c.append(cp[sel])
        pairs_d.append(op[sel])
        handled = cp
        sc, sd = cp[start_dep], op[start_dep]
    # launch order per (rank, stream), by launch start
    lr = rank[lg].astype(np.int64)
    dev = device[lg].astype(np.int64)
    st = stream[lg].astype(np.int64) & 0xFFFFFFFF
    o = lexsort((t0[lc], st, dev, lr))
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
        ko = lexsort((kt, kp, kr))
        gid = np.empty(kr.size, np.int64)
        gid[ko] = np.cumsum(runs(kr[ko], kp[ko], kt[ko])) - 1
        l_gid, s_gid = gid[:lc.size], gid[lc.size:]
        th = lexsort((t0[lc], l_gid))  # launches by thread, then start
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
    g_rank_s, g_end, g_rows = ops_by_end(rank, g, t1) if by_end is None else by_end
    j = search_in_blocks(g_rank_s, g_end, rank[other].astype(np.int64), t1[other], "right") - 1
    jj = np.clip(j, 0, None)
    near = (j >= 0) & (g_rank_s[jj] == rank[other]) & (g_end[jj] > t0[other]) & (
        t1[other] - g_end[jj] <= SYNC_WAKE_NS)
    pairs_c.append(other[near])
    pairs_d.append(g_rows[jj[near]])
    c = np.concatenate(pairs_c)
    d = np.concatenate(pairs_d)
    if c.size == 0:
        return
    # a rank with no pair at all is left out entirely (as rank by rank)
    with_pairs = np.unique(rank[c])
    o = lexsort((d, c))  # distinct (call, op) pairs in (call, op) order
    c, d = c[o], d[o]
    keep = runs(c, d)
    c, d = c[keep], d[keep]
    slack = t1[c] - t1[d]
    keep = slack >= 0  # the call returned before the op ended: it did not wait for it
    c, d, slack = c[keep], d[keep], slack[keep]
    waited_pair = (t1[d] > t0[c]) & (slack <= SYNC_WAKE_NS)
    typical_c = group_median(rank[c].astype(np.int64), slack, waited_pair, 0)
    out.add(2 * d + 1, 2 * c + 1, np.where(waited_pair, slack, np.minimum(slack, typical_c)),
            np.minimum(slack, typical_c), False)
    # the wake-up median of each rank with pairs (0 for others), looked up per call
    c_ranks = rank[c].astype(np.int64)
    typ_rank, typ_at = np.unique(c_ranks, return_index=True)
    typ_val = typical_c[typ_at]
    del c_ranks

    def typ(q: np.ndarray) -> np.ndarray:
        pos = np.clip(np.searchsorted(typ_rank, q), 0, max(typ_rank.size - 1, 0))
        return np.where(typ_rank[pos] == q, typ_val[pos], 0) if typ_rank.size else (
            np.zeros(q.size, np.int64))

    in_r = np.isin(rank[sc], with_pairs)
    sc, sd = sc[in_r], sd[in_r]
    s_slack = t1[sc] - t0[sd]
    k = s_slack >= 0
    sc, sd, s_slack = sc[k], sd[k], s_slack[k]
    s_typ = typ(rank[sc].astype(np.int64))
    s_wait = (t0[sd] > t0[sc]) & (s_slack <= SYNC_WAKE_NS)
    out.add(2 * sd, 2 * sc + 1, np.where(s_wait, s_slack, np.minimum(s_slack, s_typ)),
            np.minimum(s_slack, s_typ), False)
    calls = calls[np.isin(rank[calls], with_pairs)]
    w = np.isin(calls, np.concatenate([c[waited_pair], sc[s_wait]]))
    call_dur = t1[calls] - t0[calls]
    c_rank = rank[calls].astype(np.int64)
    n_names = int(name_idx.max()) + 1 if name_idx.size else 1
    intr = group_median(c_rank * n_names + name_idx[calls], call_dur, ~w, -1)
    fallback = typ(c_rank)
    intr = np.where(intr < 0, fallback, intr)
    relax = w & (call_dur > intr)
    out.relax(2 * calls[relax] + 1, intr[relax])
    ranks, first, n_calls = np.unique(c_rank, return_index=True, return_counts=True)
    bi = np.searchsorted(ranks, c_rank[relax])
    n_relax = np.bincount(bi, minlength=ranks.size)
    waited = np.bincount(bi, weights=(call_dur - intr)[relax].astype(np.float64),
                         minlength=ranks.size)
    typ_of = typ(ranks)
    for i, r in enumerate(ranks.tolist()):
        out.summary.append((r, "sync", int(n_calls[i]), int(n_relax[i]), int(waited[i]),
                            f"wake-up median {int(typ_of[i]) / 1e3:.1f} us"))



def legacy_syncs(host_rows: np.ndarray, g: np.ndarray, blocking: np.ndarray,
                 name_idx: np.ndarray, t0: np.ndarray, t1: np.ndarray, out: WaitEdges) -> None:
    """The sync model before the wait models (``build_graph(model_waits=False)``, kept for
    comparison): a blocking call depends on the GPU op that ended last before it only when
    the measured run waited for it (it ended within :data:`SYNC_WAKE_NS`); launches, copies
    and syncs that did not wait keep their measured durations as host work."""
    calls = host_rows[blocking[name_idx[host_rows]]]
    if calls.size == 0 or g.size == 0:
        return
    o = np.argsort(t1[g], kind="stable")
    g_end, g_rows = t1[g][o], g[o]
    j = np.searchsorted(g_end, t1[calls], "right") - 1
    jj = np.clip(j, 0, None)
    waited = (j >= 0) & (g_end[jj] > t0[calls]) & (t1[calls] - g_end[jj] <= SYNC_WAKE_NS)
    c, dep = calls[waited], g_rows[jj[waited]]
    wake = t1[c] - t1[dep]
    typical = np.full(wake.size, int(np.median(wake)) if wake.size else 0, np.int64)
    out.add(2 * dep + 1, 2 * c + 1, wake, typical, False)
    out.relax(2 * c + 1, wake)
