"""The straggler blame's passes over its candidate events, compiled with numba: the same
results as the numpy paths of :mod:`traincast.analysis.stragglers.lateness`, where they
apply (each function returns None otherwise, or without numba: the caller then takes its
numpy path). The loops are in :mod:`traincast.analysis.numba_kernels`; the kernels load on
first use (:func:`traincast.graph.jit.kernel`)."""

from __future__ import annotations

import numpy as np

from traincast.graph.jit import kernel, worth_compiling

__all__ = ["candidate_ops", "window_excess"]


_CANDIDATES: list = []


def candidate_ops(crow: np.ndarray, it_ev: np.ndarray, kind_idx: np.ndarray,
                  name_idx: np.ndarray, ev_rank: np.ndarray, ev_ts: np.ndarray,
                  offsets: dict[int, int], n_kinds: int, n_names: int
                  ) -> tuple[np.ndarray, int, np.ndarray, np.ndarray] | None:
    """(code, number of codes, occurrences, most) of the candidate event rows ``crow`` as
    ``lateness._op_codes`` and ``lateness._occurrences`` give them on their dense,
    in-order path, from one compiled pass (:func:`traincast.analysis.numba_kernels.
    candidate_ops`); None off that path or without the kernel."""
    if crow.size == 0 or not worth_compiling(2 * crow.size):
        return None
    if not _CANDIDATES:
        _CANDIDATES.append(kernel("traincast.analysis.numba_kernels", "candidate_ops"))
    if _CANDIDATES[0] is None:
        return None
    keys = np.asarray(sorted(offsets), np.int64)
    vals = np.asarray([offsets[int(r)] for r in keys.tolist()], np.int64)
    status, code, n_codes, occ, most = _CANDIDATES[0](crow, it_ev, kind_idx, name_idx,
                                                      ev_rank, ev_ts, keys, vals,
                                                      int(n_kinds), int(n_names))
    return (code, int(n_codes), occ, most) if status == 0 else None


_EXCESS: list = []


def window_excess(wins: np.ndarray, w_rank: np.ndarray, w_start: np.ndarray,
                  w_arr: np.ndarray, w_late: np.ndarray, rows: np.ndarray,
                  code: np.ndarray, occ: np.ndarray, first: np.ndarray, med: np.ndarray,
                  ev_rank: np.ndarray, ev_ts: np.ndarray, ev_dur: np.ndarray,
                  offsets: dict[int, int]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """What ``lateness._window_events`` yields, less the early windows' and the non-positive
    excesses (``w_late``: per window), joined, from one compiled merge
    (:func:`traincast.analysis.numba_kernels.window_excess`; ``rows`` in (rank, aligned
    start) order); None without the kernel."""
    if not worth_compiling(2 * rows.size):
        return None
    if not _EXCESS:
        _EXCESS.append(kernel("traincast.analysis.numba_kernels", "window_excess"))
    if _EXCESS[0] is None:
        return None
    o = np.lexsort((wins, w_start, w_rank))
    keys = np.asarray(sorted(offsets), np.int64)
    vals = np.asarray([offsets[int(r)] for r in keys.tolist()], np.int64)
    return _EXCESS[0](rows, code, occ, first, med, ev_rank, ev_ts, ev_dur, keys, vals,
                      w_rank[o].astype(np.int64), w_start[o].astype(np.int64),
                      w_arr[o].astype(np.int64), w_late[o], wins[o].astype(np.int64))
