"""The straggler blame's passes over its candidate events, compiled with numba: the same
results as the numpy paths of :mod:`traincast.analysis.stragglers.lateness`, where they
apply (each function returns None otherwise, or without numba: the caller then takes its
numpy path). The loops are in :mod:`traincast.analysis.numba_kernels`; the kernels load on
first use (:func:`traincast.graph.jit.kernel`)."""

from __future__ import annotations

import numpy as np

from traincast.graph.jit import kernel, read_only, worth_compiling

__all__ = ["candidate_ops", "has_window_blame", "median_values_type", "preload",
           "window_blame"]


#: the type of the codes and occurrences :func:`candidate_ops` gives where they fit it
#: (half the bytes of int32; the wider one otherwise)
OPS_TYPE = np.uint16


def median_values_type(dur: np.ndarray) -> type:
    """The type of the op medians' buckets of durations ``dur`` (any of them): int32 when
    every one fits (half the memory of float64; the medians are the same), else float64."""
    if dur.size and -(1 << 31) <= int(dur.min()) and int(dur.max()) < 1 << 31:
        return np.int32
    return np.float64


def preload(n_cand: int, ids: type, it_ev: np.ndarray, kind_idx: np.ndarray,
            name_idx: np.ndarray, ev_rank: np.ndarray, ev_ts: np.ndarray,
            ev_dur: np.ndarray) -> None:
    """Load the machine code of the blame's kernels (:func:`candidate_ops`, the op
    medians, :func:`window_blame`) for the types the blame calls them with, now, on empty
    inputs: the caller does it before its candidates' arrays exist, so that the loads'
    transient pages are not on top of them. Nothing for ``n_cand`` candidates too few for
    the compiled paths; ``ids``: the candidate rows' integer type."""
    if n_cand == 0 or not worth_compiling(2 * n_cand):
        return
    if not _CANDIDATES:
        _CANDIDATES.append(kernel("traincast.analysis.numba_kernels", "candidate_ops"))
    if not _MEDIANS:
        _MEDIANS.append(kernel("traincast.analysis.numba_kernels", "op_medians"))
    if _CANDIDATES[0] is None or _MEDIANS[0] is None or not has_window_blame(None):
        return
    i64, f64 = np.empty(0, np.int64), np.empty(0, np.float64)
    ops = np.empty(0, OPS_TYPE)  # the codes' and occurrences' type (the usual one)
    rows = np.empty(0, ids)
    buckets = np.empty(0, median_values_type(ev_dur))
    it_ev, kind_idx, name_idx, ev_rank, ev_ts, ev_dur = (
        a[:0] for a in (it_ev, kind_idx, name_idx, ev_rank, ev_ts, ev_dur))
    _CANDIDATES[0](*read_only(rows, it_ev, kind_idx, name_idx, ev_rank, ev_ts, i64, i64),
                   0, 0, ops, ops, 0)
    _MEDIANS[0](*read_only(ops, ops, i64, rows, ev_dur), 0, 0, buckets)
    _BLAME[0](*read_only(rows, ops, ops, i64, f64, ev_rank, ev_ts, ev_dur, i64, i64, i64,
                         i64, i64, np.empty(0, bool), f64), 0.9)


_MEDIANS: list = []


_CANDIDATES: list = []


def candidate_ops(crow: np.ndarray, it_ev: np.ndarray, kind_idx: np.ndarray,
                  name_idx: np.ndarray, ev_rank: np.ndarray, ev_ts: np.ndarray,
                  offsets: dict[int, int], n_kinds: int, n_names: int
                  ) -> tuple[np.ndarray, int, np.ndarray, np.ndarray] | None:
    """(code, number of codes, occurrences, most) of the candidate event rows ``crow`` as
    ``lateness._op_codes`` and ``lateness._occurrences`` give them on their dense,
    in-order path, from one compiled pass (:func:`traincast.analysis.numba_kernels.
    candidate_ops`); None off that path or without the kernel. ``code`` and ``occ`` (as
    long as ``crow``) are of :data:`OPS_TYPE` where every value fits it, else int32 (the
    pass done again); ``most``: int64 per code."""
    if crow.size == 0 or not worth_compiling(2 * crow.size):
        return None
    if not _CANDIDATES:
        _CANDIDATES.append(kernel("traincast.analysis.numba_kernels", "candidate_ops"))
    if _CANDIDATES[0] is None:
        return None
    keys = np.asarray(sorted(offsets), np.int64)
    vals = np.asarray([offsets[int(r)] for r in keys.tolist()], np.int64)
    args = (*read_only(crow, it_ev, kind_idx, name_idx, ev_rank, ev_ts, keys, vals),
            int(n_kinds), int(n_names))
    status, n_codes, most = 3, 0, None
    code = occ = np.empty(0, np.int32)
    for kind in (OPS_TYPE, np.int32):  # uint16 where every code and occurrence fits it
        code = occ = np.empty(0, np.int32)  # (the narrower pair freed before the wider)
        code = np.empty(crow.size, kind)
        occ = np.empty(crow.size, kind)
        status, n_codes, most = _CANDIDATES[0](*args, code, occ, int(np.iinfo(kind).max))
        if status != 3:
            break
    return (code, int(n_codes), occ, most) if status == 0 else None


_BLAME: list = []


def has_window_blame(size: int | None) -> bool:
    """Whether :func:`window_blame` runs compiled for ``size`` (twice the candidates;
    None: any size); the caller decides once for all its process groups."""
    if not worth_compiling(size):
        return False
    if not _BLAME:
        _BLAME.append(kernel("traincast.analysis.numba_kernels", "window_blame"))
    return _BLAME[0] is not None


def window_blame(wins: np.ndarray, w_rank: np.ndarray, w_start: np.ndarray,
                 w_arr: np.ndarray, w_late: np.ndarray, w_pseudo: np.ndarray,
                 rows: np.ndarray, code: np.ndarray, occ: np.ndarray, first: np.ndarray,
                 med: np.ndarray, ev_rank: np.ndarray, ev_ts: np.ndarray,
                 ev_dur: np.ndarray, offsets: dict[int, int], share: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per window ``wins`` (one process group; ``w_late``: its call was late,
    ``w_pseudo``: its window start's excess where that counts, else 0): the largest
    excess, the blamed candidate event (-1: none) and its excess, as ``lateness._blame``
    chooses them from ``lateness._window_events``, from two compiled merges of the
    candidates ``rows`` (in (rank, aligned start) order;
    :func:`traincast.analysis.numba_kernels.window_blame`, whatever their number: see
    :func:`has_window_blame`); None without the kernel."""
    if not has_window_blame(None):
        return None
    o = np.lexsort((wins, w_start, w_rank))
    keys = np.asarray(sorted(offsets), np.int64)
    vals = np.asarray([offsets[int(r)] for r in keys.tolist()], np.int64)
    got = _BLAME[0](*read_only(rows, code, occ, first, med, ev_rank, ev_ts, ev_dur, keys,
                               vals, w_rank[o].astype(np.int64),
                               w_start[o].astype(np.int64), w_arr[o].astype(np.int64),
                               w_late[o], w_pseudo[o].astype(np.float64)), float(share))
    back = np.empty_like(o)
    back[o] = np.arange(o.size)
    return tuple(part[back] for part in got)  # type: ignore[return-value]
