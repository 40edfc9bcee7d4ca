"""Arrival, lateness and waiting at matched collectives, in numpy (no pandas, no blame).

The first columns of :func:`traincast.analysis.stragglers.lateness.collective_lateness`
(which adds the blame and builds its DataFrame from these) and what
:func:`traincast.analysis.stragglers.report.straggler_summary` reads: each call's arrival
(start of its executing event) and end on the aligned clock (the ranks' clock offsets from
:func:`traincast.graph.collectives.clock_offsets`), its lateness behind the group's first
arrival, its waiting for the group's last, and the rank that arrived last.
"""

from __future__ import annotations

import numpy as np

from traincast.graph.collectives import MatchedCollectives, clock_offsets, match_collectives
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet


def lateness_core(ts: TraceSet, matched: MatchedCollectives | None = None
                  ) -> tuple[dict[str, np.ndarray], dict[int, int]] | None:
    """Arrival, lateness, waiting and last rank of every matched call, without the blame
    (and without pandas): the first columns of :func:`collective_lateness`.

    Args:
        ts: a TraceSet, measured or predicted.
        matched: ``match_collectives(ts)`` (computed when None).

    Returns:
        None when no call is matched, else (columns, clock offsets: ns per rank). The
        columns hold per matched call on a rank, in the order of
        ``matched.columns`` (rank, event) with the unmatched calls left out: ``row``
        (int64, its row in ``matched.columns``), ``rank`` (int32), ``group_id``,
        ``exec_event``, ``arrival_ns``, ``end_ns`` (aligned clock), ``lateness_ns``,
        ``wait_ns`` (int64 ns) and ``last_rank`` (int32; ties: lowest), as in
        :func:`collective_lateness`.
        :func:`lateness_order` sorts the rows as :func:`collective_lateness` does.

    Raises:
        CollectiveMismatchError: from :func:`~traincast.graph.collectives.match_collectives`.
    """
    if matched is None:
        matched = match_collectives(ts)
    c = matched.columns
    row = np.flatnonzero(c["group_id"] >= 0)
    if row.size == 0:
        return None
    ev = ts.events
    ev_ts = A.to_numpy(ev.column("ts"))
    ev_dur = A.to_numpy(ev.column("dur"))
    ex = c["exec_event"][row].astype(np.int64)
    rank = c["rank"][row].astype(np.int32)
    gid = c["group_id"][row].astype(np.int64)
    offsets = clock_offsets(ts, matched)
    off_of = np.vectorize(offsets.get, otypes=[np.int64])
    arr = ev_ts[ex] - off_of(rank)
    end = arr + ev_dur[ex]
    o = np.lexsort((rank, gid))  # each group's rows together, by rank
    g_sorted = gid[o]
    starts = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    counts = np.diff(np.r_[starts, o.size])
    a_sorted = arr[o]
    first = np.empty(o.size, np.int64)
    last = np.empty(o.size, np.int64)
    first[o] = np.repeat(np.minimum.reduceat(a_sorted, starts), counts)
    last[o] = np.repeat(np.maximum.reduceat(a_sorted, starts), counts)
    # rank arriving last (lowest rank among ties: the group's rows are by rank)
    big = np.iinfo(np.int64).max
    cand = np.where(arr[o] == last[o], rank[o].astype(np.int64), big)
    last_rank = np.empty(o.size, np.int32)
    last_rank[o] = np.repeat(np.minimum.reduceat(cand, starts), counts)
    return {"row": row, "rank": rank, "group_id": gid, "exec_event": ex, "arrival_ns": arr,
            "end_ns": end, "lateness_ns": arr - first, "wait_ns": last - arr,
            "last_rank": last_rank}, offsets


def lateness_order(core: dict[str, np.ndarray]) -> np.ndarray:
    """Positions of :func:`lateness_core`'s rows in :func:`collective_lateness`'s order:
    by (group_id, rank), ties in their order (a stable sort)."""
    return np.lexsort((core["rank"], core["group_id"]))
