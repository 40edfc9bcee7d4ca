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
               dur: np.ndarray, size: int, n_keys: int) -> np.ndarray:  # pragma: no cover
    """:func:`median_missing_zero` of the candidates ``i`` keyed ``first[code[i]] +
    occ[i]`` with values ``dur[rows[i]]``, every key over ``size`` members: the keys and
    values are formed here, row by row, instead of as whole arrays."""
    n = code.size
    count = np.zeros(n_keys, np.int64)
    for i in range(n):
        count[first[code[i]] + occ[i]] += 1
    start = np.zeros(n_keys + 1, np.int64)
    for k in range(n_keys):
        start[k + 1] = start[k] + count[k]
    fill = start[:-1].copy()
    vals = np.empty(n, np.float64)
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
        b = _select(w, hi)
        if lo == hi:
            a = b
        elif lo >= 0:
            a = _largest(w, hi)
        else:
            a = 0.0
        out[k] = 0.5 * (a + b)
    return out


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
