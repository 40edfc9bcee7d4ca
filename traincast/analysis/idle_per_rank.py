"""The idle attribution one rank and one window at a time: the reference of the whole-job
passes of :mod:`traincast.analysis.idle` (equal to them), used where they do not apply.
Times are int64 ns."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from traincast.analysis.breakdown import EventArrays, _intervals
from traincast.analysis.idle import (
    _DATA,
    _HOST,
    _OTHER,
    _PEER,
    _STREAM,
    CAUSES,
    COLUMNS,
    DATA_LOADER,
    _causes,
    _comm_wait_arrays,
    _with_exact_lags,
)
from traincast.analysis.point_times import PointTimes
from traincast.graph.binding import binding_edges
from traincast.graph.model import ExecutionGraph, LagPatch
from traincast.trace import arrow as A
from traincast.trace.intervals import clip, union
from traincast.trace.traceset import TraceSet


def attribute_per_rank(ts: TraceSet, graph: ExecutionGraph, point_times: PointTimes,
                       windows: dict[str, np.ndarray], patch: LagPatch | None = None
                       ) -> dict[str, np.ndarray]:
    """:func:`~traincast.analysis.idle._attribute`, one rank and one window at a time (the
    reference; used where the whole-job passes do not apply): the attribution's columns
    (:data:`~traincast.analysis.idle.COLUMNS`; object columns of no rows when there is no
    window). ``windows``: rank, iteration, start, end (ns) per window."""
    graph = _with_exact_lags(graph, patch)
    n_pts = graph.n_event_points  # barrier points (collectives' last arrivals) follow
    times = point_times.laid()
    binding = binding_edges(graph, times)
    name_idx, names = A.dictionary_parts(ts.events.column("name"))
    # one regex test per distinct name, not per event
    is_loader = np.array([bool(DATA_LOADER.search(str(n))) for n in names] or [False], bool)
    loader_name = is_loader[name_idx]
    del name_idx
    waits = comm_wait_intervals(graph, point_times)
    meta: list[tuple[int, int, int, int]] = []  # (rank, iteration, start, end) per window
    comm: list[int] = []  # comm_wait_ns per window
    g_win, g_len, g_row, g_start, g_rank = [], [], [], [], []  # gaps ending at an op start
    g_other: list[np.ndarray] = []  # (window, length) of gaps attributed to "other"
    loaders: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    arrays = EventArrays.of_events(ts.events, times[0:n_pts:2], times[1:n_pts:2])
    simulated = (arrays.start >= 0) & (arrays.end >= arrays.start)
    w_rank, w_iter = windows["rank"], windows["iteration"]
    w_lo, w_hi = windows["start"], windows["end"]
    for rank, idx in arrays.by_rank():
        idx = idx[simulated[idx]]
        iv, source, ops = _intervals(arrays, idx)
        op_rows = idx[ops]  # rows of ev are event rows
        op_start = times[2 * op_rows]
        order = np.argsort(op_start, kind="stable")
        op_rows, op_start = op_rows[order], op_start[order]
        busy_s, busy_e = union(np.concatenate([v[0] for v in iv.values()]),
                               np.concatenate([v[1] for v in iv.values()]))
        # host data-loader spans on this rank (for the data-loading split)
        host = idx[~arrays.on_gpu[idx] & loader_name[idx]]
        loaders[rank] = union(arrays.start[host], arrays.end[host])
        comm_wait = comm_wait_measure(waits.get(rank), iv)
        mine = np.flatnonzero(w_rank == rank)
        for it_no, lo, hi in zip(w_iter[mine].tolist(), w_lo[mine].tolist(),
                                 w_hi[mine].tolist(), strict=True):
            w = len(meta)
            meta.append((int(rank), int(it_no), int(lo), int(hi)))
            comm.append(comm_wait(int(lo), int(hi)))
            g0, g1 = window_gaps(busy_s, busy_e, int(lo), int(hi))
            j = np.searchsorted(op_start, g1, "left")
            at_op = j < op_start.size
            at_op[at_op] = op_start[j[at_op]] == g1[at_op]
            # the window ended, or nothing starts at the gap's end: "other"
            g_other.append(np.stack([np.full(int((~at_op).sum()), w, np.int64),
                                     (g1 - g0)[~at_op]]))
            g_win.append(np.full(int(at_op.sum()), w, np.int64))
            g_len.append((g1 - g0)[at_op])
            g_row.append(op_rows[j[at_op]])
            g_start.append(g0[at_op])
            g_rank.append(np.full(int(at_op.sum()), int(rank), np.int64))
    # all ranks' gaps classified together: one walk back over the binding edges
    acc = np.zeros((len(meta), len(CAUSES)), np.int64)
    n_gaps = np.zeros(len(meta), np.int64)
    if meta:
        win, length = np.concatenate(g_win), np.concatenate(g_len)
        cause, first_t = _causes(graph, binding, point_times, np.concatenate(g_row),
                                 np.concatenate(g_start))
        split_data_loading(cause, first_t, np.concatenate(g_rank), loaders)
        np.add.at(acc, (win, cause), length)
        other = np.concatenate(g_other, axis=1)
        np.add.at(acc, (other[0], np.full(other.shape[1], _OTHER)), other[1])
        n_gaps = np.bincount(np.concatenate([win, other[0]]), minlength=len(meta))
    if not meta:  # (the table of no rows has object columns)
        return {c: np.empty(0, object) for c in COLUMNS}
    m = np.array(meta, np.int64).reshape(-1, 4)
    return {"rank": m[:, 0], "iteration": m[:, 1], "idle_ns": acc.sum(axis=1),
            "host_ns": acc[:, _HOST], "data_loading_ns": acc[:, _DATA],
            "peer_wait_ns": acc[:, _PEER], "stream_dep_ns": acc[:, _STREAM],
            "other_ns": acc[:, _OTHER], "comm_wait_ns": np.array(comm, np.int64),
            "gaps": np.asarray(n_gaps, np.int64)}


def split_data_loading(cause: np.ndarray, first_t: np.ndarray, rank: np.ndarray,
                       loaders: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    """Host-bound gaps whose chain's first cause fell inside a data-loader op of their
    rank become data loading (in place on ``cause``)."""
    host = np.flatnonzero(cause == _HOST)
    host = host[np.argsort(rank[host], kind="stable")]  # one pass, not a mask per rank
    cuts = np.flatnonzero(np.diff(rank[host])) + 1
    for idx in np.split(host, cuts):
        if idx.size == 0:
            continue
        dl_s, dl_e = loaders.get(int(rank[idx[0]]), (np.empty(0, np.int64),) * 2)
        if dl_s.size == 0:
            continue
        t = first_t[idx]
        k = np.searchsorted(dl_s, t, "right") - 1
        inside = (k >= 0) & (dl_e[np.clip(k, 0, None)] >= t)
        cause[idx[inside]] = _DATA


def window_gaps(busy_s: np.ndarray, busy_e: np.ndarray, lo: int, hi: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Idle intervals of [lo, hi) given disjoint sorted busy intervals."""
    s, e = clip(busy_s, busy_e, lo, hi)
    starts = np.concatenate([[lo], e])
    ends = np.concatenate([s, [hi]])
    keep = ends > starts
    return starts[keep], ends[keep]


def comm_wait_intervals(graph: ExecutionGraph, times: PointTimes
                        ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """rank -> union of its :func:`~traincast.analysis.idle._comm_wait_arrays` (starts,
    ends)."""
    rank, start, end = _comm_wait_arrays(graph, times)
    o = np.argsort(rank, kind="stable")
    rank, start, end = rank[o], start[o], end[o]
    cuts = np.flatnonzero(np.diff(rank)) + 1
    return {int(r[0]): union(s, e) for r, s, e in zip(np.split(rank, cuts),
                                                       np.split(start, cuts),
                                                       np.split(end, cuts), strict=True)
            if r.size}


def comm_wait_measure(waits: tuple[np.ndarray, np.ndarray] | None,
                      iv: dict[str, tuple[np.ndarray, np.ndarray]]
                      ) -> Callable[[int, int], int]:
    """A function (lo, hi) -> ns a rank's collectives waited for peers outside compute."""
    empty = np.empty(0, np.int64)
    ws_a, we_a = waits if waits is not None else (empty, empty)
    comp_s, comp_e = union(*iv.get("compute", (empty, empty)))

    def measure(lo: int, hi: int) -> int:
        s, e = clip(ws_a, we_a, lo, hi)
        if s.size == 0:
            return 0
        total = int((e - s).sum())
        cs, ce = clip(comp_s, comp_e, lo, hi)
        if cs.size == 0:
            return total
        # minus the overlap with compute: |A n B| = |A| + |B| - |A u B| (each set disjoint)
        us, ue = union(np.concatenate([s, cs]), np.concatenate([e, ce]))
        return total - (total + int((ce - cs).sum()) - int((ue - us).sum()))

    return measure
