"""Loops of the analyses compiled with numba (imported only when numba is; each caller has a
numpy path giving the same result, see :func:`traincast.graph.jit.kernel`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from traincast.util import numba_blas  # noqa: F401 - numba without its scipy BLAS probe


@njit(cache=True, nogil=True)
def median_missing_zero(kid: np.ndarray, dur: np.ndarray, size: np.ndarray,
                        n_keys: int) -> np.ndarray:  # pragma: no cover - compiled
    """float64[n_keys]: per key ``k`` (``kid`` in ``[0, n_keys)``), the median of the
    non-negative values ``dur`` of its rows padded with zeros to ``size`` members (``size``
    per row, equal within a key): the mean of the order statistics ``(size - 1) // 2`` and
    ``size // 2``. Rows are bucketed by key (counting sort), then the one or two order
    statistics of each key's values are selected (``np.partition``, linear time)."""
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
        w = np.partition(vals[start[k]:start[k + 1]], hi)
        b = w[hi]
        if lo == hi:
            a = b
        elif lo >= 0:  # lo = hi - 1: the largest value left of position hi
            a = np.max(w[:hi])
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
        w = np.partition(vals[start[k]:start[k + 1]], hi)
        b = w[hi]
        if lo == hi:
            a = b
        elif lo >= 0:
            a = np.max(w[:hi])
        else:
            a = 0.0
        out[k] = 0.5 * (a + b)
    return out
