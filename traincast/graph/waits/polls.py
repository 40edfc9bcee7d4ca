"""Polling loops (``SYNC`` edges; the model is described in :mod:`traincast.graph.waits`):
a run of event/stream queries on one thread that ends shortly after a GPU op ends is one
wait for that op, all ranks at once."""

from __future__ import annotations

import numpy as np

from traincast.graph.grouped import group_median, lexsort, search_in_blocks
from traincast.graph.waits.common import (
    POLL_MIN_CALLS,
    POLL_MIN_SPAN_NS,
    QUERY_CALL,
    SYNC_WAKE_NS,
    WaitEdges,
    name_mask,
    on_ranks_of,
    ops_by_end,
)


def polls(rank: np.ndarray, host_rt: np.ndarray, g: np.ndarray, name_idx: np.ndarray,
          name_dict: list[str], pid: np.ndarray, tid: np.ndarray, t0: np.ndarray,
          t1: np.ndarray, out: WaitEdges,
          by_end: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
    """SYNC edges of every rank's polling loops: a run of at least :data:`~traincast.graph.waits.POLL_MIN_CALLS` queries
    on one thread spanning :data:`~traincast.graph.waits.POLL_MIN_SPAN_NS` that ends within
    the wake-up window after an op of its rank ended waits for that op. ``by_end``:
    :func:`~traincast.graph.waits.common.ops_by_end` of ``g`` when the caller has it."""
    query = name_mask(QUERY_CALL, name_dict)
    if not query.any() or g.size == 0 or host_rt.size == 0:
        return
    rows = host_rt[on_ranks_of(rank, g, host_rt)]
    r_of = rank[rows].astype(np.int64)
    p_of = pid[rows].astype(np.int64)
    t_of = tid[rows].astype(np.int64)
    o = lexsort((t0[rows], t_of, p_of, r_of))  # stable: ``rows`` ascending breaks ties
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
    cand = (size >= POLL_MIN_CALLS) & (t1[last] - t0[first] >= POLL_MIN_SPAN_NS)
    g_rank_s, g_end, g_rows = ops_by_end(rank, g, t1) if by_end is None else by_end
    l_rank = rank[last].astype(np.int64)
    j = search_in_blocks(g_rank_s, g_end, l_rank, t1[last], "right") - 1
    jj = np.clip(j, 0, None)
    before_last = rows[head + np.maximum(size - 2, 0)]
    ok = cand & (j >= 0) & (g_rank_s[jj] == l_rank) & (g_end[jj] > t0[before_last]) & (
        t1[last] - g_end[jj] <= SYNC_WAKE_NS)
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
