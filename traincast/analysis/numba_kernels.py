"""Loops of the analyses compiled with numba (imported only when numba is; each caller has a
numpy path giving the same result, see :func:`traincast.graph.jit.kernel`).

The medians select their order statistics with :func:`_select` rather than ``np.partition``
and ``np.max``: numba implements those in ``numba.np.arraymath``, which loading the cached
machine code of a kernel using them imports (with ``numba.np.linalg`` and its BLAS probe,
~0.2 s per process); an order statistic is one value whatever the algorithm selecting it."""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads


@njit(cache=True, nogil=True)
def _select(w: np.ndarray, k: int) -> float:  # pragma: no cover - compiled
    """The ``k``-th smallest value of ``w`` (0-based), rearranging ``w`` so that the values
    before position ``k`` are no larger and those after it no smaller (Wirth's selection,
    N. Wirth, "Algorithms + Data Structures = Programs", 1976, 2.3.4)."""
    lo = 0
    hi = w.size - 1
    while lo < hi:
        x = w[k]
        i = lo
        j = hi
        while True:
            while w[i] < x:
                i += 1
            while x < w[j]:
                j -= 1
            if i <= j:
                t = w[i]
                w[i] = w[j]
                w[j] = t
                i += 1
                j -= 1
            if i > j:
                break
        if j < k:
            lo = i
        if k < i:
            hi = j
    return w[k]


@njit(cache=True, nogil=True)
def _largest(w: np.ndarray, n: int) -> float:  # pragma: no cover - compiled
    """The largest of the first ``n`` (>= 1) values of ``w``."""
    m = w[0]
    for i in range(1, n):
        if w[i] > m:
            m = w[i]
    return m


@njit(cache=True, nogil=True)
def median_missing_zero(kid: np.ndarray, dur: np.ndarray, size: np.ndarray,
                        n_keys: int) -> np.ndarray:  # pragma: no cover - compiled
    """float64[n_keys]: per key ``k`` (``kid`` in ``[0, n_keys)``), the median of the
    non-negative values ``dur`` of its rows padded with zeros to ``size`` members (``size``
    per row, equal within a key): the mean of the order statistics ``(size - 1) // 2`` and
    ``size // 2``. Rows are bucketed by key (counting sort), then the one or two order
    statistics of each key's values are selected (:func:`_select`, linear time on average)."""
    n = kid.size
    count = np.zeros(n_keys, np.int64)
    sz = np.zeros(n_keys, np.int64)
    for i in range(n):
        count[kid[i]] += 1
        sz[kid[i]] = size[i]
    start = np.zeros(n_keys + 1, np.int64)
    for k in range(n_keys):
        start[k + 1] = start[k] + count[k]
    fill = start[:-1].copy()
    vals = np.empty(n, np.float64)
    for i in range(n):
        k = kid[i]
        vals[fill[k]] = dur[i]
        fill[k] += 1
    out = np.zeros(n_keys, np.float64)
    for k in range(n_keys):
        c = count[k]
        if c == 0:
            continue
        zeros = sz[k] - c
        lo = (sz[k] - 1) // 2 - zeros
        hi = sz[k] // 2 - zeros
        if hi < 0:  # both order statistics fall among the padded zeros
            continue
        w = vals[start[k]:start[k + 1]]
        b = _select(w, hi)
        if lo == hi:
            a = b
        elif lo >= 0:  # lo = hi - 1: the largest value left of position hi
            a = _largest(w, hi)
        else:
            a = 0.0
        out[k] = 0.5 * (a + b)
    return out


@njit(cache=True, nogil=True)
def occurrences_most(codes: np.ndarray, bounds: np.ndarray, n_codes: int
                     ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """(int32[n], int64[n_codes]): for each row ``i``, how many rows before it in its segment
    ``[bounds[s], bounds[s + 1])`` have the same code (``codes`` in ``[0, n_codes)``), and per
    code its most rows in one segment: a count per code, reset after each segment by
    revisiting its rows (linear time)."""
    seen = np.zeros(n_codes, np.int64)
    most = np.zeros(n_codes, np.int64)
    out = np.empty(codes.size, np.int32)
    for s in range(bounds.size - 1):
        for i in range(bounds[s], bounds[s + 1]):
            c = codes[i]
            out[i] = seen[c]
            seen[c] += 1
        for i in range(bounds[s], bounds[s + 1]):
            c = codes[i]
            if seen[c] > most[c]:
                most[c] = seen[c]
            seen[c] = 0
    return out, most


@njit(cache=True, nogil=True)
def op_medians(code: np.ndarray, occ: np.ndarray, first: np.ndarray, rows: np.ndarray,
               dur: np.ndarray, size: int, n_keys: int, vals: np.ndarray
               ) -> np.ndarray:  # pragma: no cover
    """:func:`median_missing_zero` of the candidates ``i`` keyed ``first[code[i]] +
    occ[i]`` with values ``dur[rows[i]]``, every key over ``size`` members: the keys and
    values are formed here, row by row, instead of as whole arrays. ``vals`` (``code.size``
    values, float64, or int32 when every value fits one) holds the values bucketed by
    key; the medians are the same float64 either way."""
    n = code.size
    count = np.zeros(n_keys, np.int64)
    for i in range(n):
        count[first[code[i]] + occ[i]] += 1
    start = np.zeros(n_keys + 1, np.int64)
    for k in range(n_keys):
        start[k + 1] = start[k] + count[k]
    fill = start[:-1].copy()
    for i in range(n):
        k = first[code[i]] + occ[i]
        vals[fill[k]] = dur[rows[i]]
        fill[k] += 1
    out = np.zeros(n_keys, np.float64)
    for k in range(n_keys):
        c = count[k]
        if c == 0:
            continue
        zeros = size - c
        lo = (size - 1) // 2 - zeros
        hi = size // 2 - zeros
        if hi < 0:
            continue
        w = vals[start[k]:start[k + 1]]
        b = np.float64(_select(w, hi))
        if lo == hi:
            a = b
        elif lo >= 0:
            a = np.float64(_largest(w, hi))
        else:
            a = 0.0
        out[k] = 0.5 * (a + b)
    return out



@njit(cache=True, nogil=True)
def _patched(lag: np.ndarray, p_index: np.ndarray, p_values: np.ndarray, e: int
             ) -> int:  # pragma: no cover - compiled
    """``lag[e]`` with the patch (``p_values`` at the ascending edges ``p_index``) applied:
    a binary search of the patch."""
    lo = 0
    hi = p_index.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if p_index[mid] < e:
            lo = mid + 1
        else:
            hi = mid
    if lo < p_index.size and p_index[lo] == e:
        return p_values[lo]
    return lag[e]


@njit(cache=True, nogil=True)
def _segment(seg_lo: np.ndarray, row: int) -> int:  # pragma: no cover - compiled
    """The segment ``s`` with ``seg_lo[s] <= row < seg_lo[s + 1]`` (``seg_lo``: ascending
    row bounds, ``seg_lo[0] <= row < seg_lo[-1]``), by binary search."""
    lo = 0
    hi = seg_lo.size - 1
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if seg_lo[mid] <= row:
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _time_at(p: int, times: np.ndarray, ev_ts: np.ndarray, ev_dur: np.ndarray,
             seg_lo: np.ndarray, seg_off: np.ndarray, barrier: np.ndarray
             ) -> int:  # pragma: no cover - compiled
    """The time of point ``p`` as :func:`gap_chains` reads it (from ``times`` when it is
    not empty, else from the compact columns)."""
    if times.size:
        return times[p]
    n2 = 2 * ev_ts.size
    if p >= n2:
        return barrier[p - n2]
    row = p >> 1
    t = ev_ts[row] - seg_off[_segment(seg_lo, row)]
    if p & 1:
        t += ev_dur[row]
    return t


@njit(cache=True, nogil=True)
def gap_chains(src: np.ndarray, dst: np.ndarray, lag: np.ndarray, p_index: np.ndarray,
               p_values: np.ndarray, kind: np.ndarray, prio: np.ndarray, times: np.ndarray,
               ev_ts: np.ndarray, ev_dur: np.ndarray, seg_lo: np.ndarray, seg_off: np.ndarray,
               barrier: np.ndarray, binding: np.ndarray, start: np.ndarray, stop: np.ndarray,
               max_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """The binding edges of the points (into ``binding``, filled with -1 by the caller:
    :func:`traincast.graph.numba_kernels.binding` with the lags ``lag`` patched by
    ``p_values`` at the ascending edges ``p_index``), then per chain ``i`` the walk of
    :func:`traincast.graph.numba_kernels.binding_walk` from point ``start[i]`` back to
    ``stop[i]``: ``(first, seen, lagged)``, the first edge followed (-1: none; of the type of
    ``binding``), the bit mask of the edge kinds met (int32: kinds below 31) and whether the
    (patched) lag of the first edge is positive (bool; False: none).

    The points' times (int64 ns) are ``times`` (int64[P]) when it is not empty, else the
    compact column of :class:`traincast.graph.model.MeasuredPoints`, read point by point
    (:mod:`traincast.analysis.point_times`): event point ``2i`` is ``ev_ts[i]`` less the
    offset ``seg_off[s]`` of the segment ``s`` of rows ``[seg_lo[s], seg_lo[s + 1])``
    holding row ``i``, point ``2i + 1`` that plus ``ev_dur[i]``, point ``2N + b`` is
    ``barrier[b]`` (N: ``ev_ts.size``). The segment of the last row read on each side of
    the edges is kept (consecutive edges mostly stay in a rank): written out at both
    reads (and at the walk's), as a call per read costs several times the read."""
    arr = times.size > 0
    n2 = 2 * ev_ts.size
    # the last segment read on the sources' side and on the destinations' (none yet)
    s_lo, s_hi, s_off = np.int64(0), np.int64(0), np.int64(0)
    d_lo, d_hi, d_off = np.int64(0), np.int64(0), np.int64(0)
    j = 0
    for e in range(src.size):  # the best edge so far is re-read, not kept beside (memory)
        while j < p_index.size and p_index[j] < e:
            j += 1
        lag_e = p_values[j] if j < p_index.size and p_index[j] == e else lag[e]
        p = src[e]
        if arr:
            ts = times[p]
        elif p >= n2:
            ts = barrier[p - n2]
        else:
            row = p >> 1
            if row < s_lo or row >= s_hi:
                k = _segment(seg_lo, row)
                s_lo, s_hi, s_off = seg_lo[k], seg_lo[k + 1], seg_off[k]
            ts = ev_ts[row] - s_off + (ev_dur[row] if p & 1 else 0)
        if ts < 0:
            continue
        d = dst[e]
        v = ts + lag_e
        if arr:
            td = times[d]
        elif d >= n2:
            td = barrier[d - n2]
        else:
            row = d >> 1
            if row < d_lo or row >= d_hi:
                k = _segment(seg_lo, row)
                d_lo, d_hi, d_off = seg_lo[k], seg_lo[k + 1], seg_off[k]
            td = ev_ts[row] - d_off + (ev_dur[row] if d & 1 else 0)
        if v < td:
            continue
        b = binding[d]
        if b < 0:
            binding[d] = e
            continue
        bv = _time_at(src[b], times, ev_ts, ev_dur, seg_lo, seg_off, barrier) + \
            _patched(lag, p_index, p_values, b)
        if v > bv or (v == bv and prio[kind[e]] < prio[kind[b]]):
            binding[d] = e
    n = start.size
    first = np.full(n, -1, binding.dtype)
    seen = np.zeros(n, np.int32)
    lagged = np.zeros(n, np.bool_)
    for i in range(n):
        p = start[i]
        for _ in range(max_steps):
            e = binding[p]
            if e < 0:
                break
            if arr:
                tp = times[p]
            elif p >= n2:
                tp = barrier[p - n2]
            else:
                row = p >> 1
                if row < s_lo or row >= s_hi:
                    k = _segment(seg_lo, row)
                    s_lo, s_hi, s_off = seg_lo[k], seg_lo[k + 1], seg_off[k]
                tp = ev_ts[row] - s_off + (ev_dur[row] if p & 1 else 0)
            if tp <= stop[i]:
                break
            if first[i] < 0:
                first[i] = e
                lagged[i] = _patched(lag, p_index, p_values, e) > 0
            seen[i] |= np.int32(1) << np.int32(kind[e])
            p = src[e]
    return first, seen, lagged


@njit(cache=True, nogil=True)
def candidate_ops(crow: np.ndarray, it_ev: np.ndarray, kind_idx: np.ndarray,
                  name_idx: np.ndarray, ev_rank: np.ndarray, ev_ts: np.ndarray,
                  off_rank: np.ndarray, off_val: np.ndarray, n_kinds: int, n_names: int,
                  code: np.ndarray, occ: np.ndarray, top: int
                  ) -> tuple[int, int, np.ndarray]:  # pragma: no cover
    """The straggler blame's op identity of its candidate rows ``crow`` in one go, into
    ``code`` and ``occ`` (the caller's, as long as ``crow``, of an integer type holding
    0 .. ``top``): ``(status, n_codes, most)``. ``code`` is the dense code of
    (iteration, kind, name), ``((it - it_lo) * n_kinds + kind) * n_names + name``, when
    the codes number at most ``max(rows, 2**20)`` and every kind and name is in
    ``[0, n_kinds)`` and ``[0, n_names)`` (else status 1, nothing computed); ``occ`` and ``most`` are :func:`occurrences_most` over
    the ranks' runs of rows when the rows are in (rank, aligned start) order, the aligned
    start being ``ev_ts`` minus the rank's offset (``off_val`` at ``off_rank``, ascending)
    (else status 2). Status 3: a code or an occurrence would pass ``top`` (nothing to
    read; the caller's wider types hold them). Status 0: all computed."""
    n = crow.size
    most = np.empty(0, np.int64)
    if n == 0:
        return 1, 0, most
    it_lo = it_ev[crow[0]]
    it_hi = it_lo
    for i in range(n):
        row = crow[i]
        it = it_ev[row]
        if it < it_lo:
            it_lo = it
        if it > it_hi:
            it_hi = it
        if (kind_idx[row] < 0 or name_idx[row] < 0 or kind_idx[row] >= n_kinds
                or name_idx[row] >= n_names):  # (no code: codes index arrays unchecked)
            return 1, 0, most
    n_codes = (np.int64(it_hi) - it_lo + 1) * max(n_kinds, 1) * max(n_names, 1)
    if n_codes > max(n, 1 << 20):
        return 1, 0, most
    if n_codes - 1 > top:
        return 3, n_codes, most
    o = 0
    prev_r = ev_rank[crow[0]]
    prev_t = np.int64(0)
    ordered = True
    for i in range(n):
        row = crow[i]
        code[i] = ((np.int32(it_ev[row] - it_lo) * np.int32(n_kinds) + kind_idx[row])
                   * np.int32(n_names) + name_idx[row])
        if not ordered:
            continue
        r = ev_rank[row]
        if r < prev_r:
            ordered = False
            continue
        while o < off_rank.size and off_rank[o] < r:
            o += 1
        t = ev_ts[row]
        if o < off_rank.size and off_rank[o] == r:
            t -= off_val[o]
        if i > 0 and r == prev_r and t < prev_t:
            ordered = False
        prev_r = r
        prev_t = t
    if not ordered:
        return 2, n_codes, most
    seen = np.zeros(n_codes, np.int64)
    most = np.zeros(n_codes, np.int64)
    a = 0
    while a < n:
        r = ev_rank[crow[a]]
        b = a
        while b < n and ev_rank[crow[b]] == r:
            c = code[b]
            if seen[c] > top:
                return 3, n_codes, np.empty(0, np.int64)
            occ[b] = seen[c]
            seen[c] += 1
            b += 1
        for i in range(a, b):
            c = code[i]
            if seen[c] > most[c]:
                most[c] = seen[c]
            seen[c] = 0
        a = b
    return 0, n_codes, most



@njit(cache=True, nogil=True)
def window_blame(rows: np.ndarray, code: np.ndarray, occ: np.ndarray, first: np.ndarray,
                 med: np.ndarray, ev_rank: np.ndarray, ev_ts: np.ndarray,
                 ev_dur: np.ndarray, off_rank: np.ndarray, off_val: np.ndarray,
                 w_rank: np.ndarray, w_start: np.ndarray, w_arr: np.ndarray,
                 w_late: np.ndarray, w_pseudo: np.ndarray, share: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """The op blamed in each window without listing its candidates: ``(best, row,
    excess)`` per window.

    Candidates: event ``rows`` in (rank, aligned start) order, aligned start ``ev_ts[row]``
    minus the offset of its rank (``off_val`` at ``off_rank``, ascending; 0 for a rank
    without), op id ``first[code] + occ``, excess ``ev_dur[row] - med[op id]``. Windows: in
    (``w_rank``, ``w_start``, window id) order; a candidate's window is the last one of its
    rank starting at or before it; it counts when it ends (start + duration) by the
    window's arrival ``w_arr``, the window's call was late (``w_late``) and its excess is
    positive. ``best``: the largest excess of its candidates and of its pseudo-op
    (``w_pseudo``: the window start's excess where it counts, else 0), 0 for none;
    ``row``: among the candidates with an excess of at least ``share * best``, the one
    with the shortest duration, then the earliest aligned start, then the first in
    candidate order (-1: none), and ``excess`` its excess. Two merges of the candidates."""
    nw = w_rank.size
    best = w_pseudo.copy()
    c_row = np.full(nw, -1, np.int64)
    c_x = np.zeros(nw, np.float64)
    c_d = np.zeros(nw, np.int64)
    c_t = np.zeros(nw, np.int64)
    for phase in range(2):
        k = -1
        o = 0
        for i in range(rows.size):
            row = rows[i]
            r = ev_rank[row]
            while o < off_rank.size and off_rank[o] < r:
                o += 1
            t = ev_ts[row]
            if o < off_rank.size and off_rank[o] == r:
                t -= off_val[o]
            while k + 1 < nw and (w_rank[k + 1] < r or (w_rank[k + 1] == r
                                                         and w_start[k + 1] <= t)):
                k += 1
            if k < 0 or w_rank[k] != r or not w_late[k]:
                continue
            d = ev_dur[row]
            if t + d > w_arr[k]:
                continue
            x = d - med[first[code[i]] + occ[i]]
            if not x > 0:
                continue
            if phase == 0:
                if x > best[k]:
                    best[k] = x
            elif x >= share * best[k]:
                if c_row[k] < 0 or d < c_d[k] or (d == c_d[k] and t < c_t[k]):
                    c_row[k] = row
                    c_x[k] = x
                    c_d[k] = d
                    c_t[k] = t
    return best, c_row, c_x


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
