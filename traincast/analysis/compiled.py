"""Loops of the analyses compiled with numba (imported only when numba is; each caller has a
numpy path giving the same result, see :func:`traincast.graph.jit.kernel`)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def median_missing_zero(kid: np.ndarray, dur: np.ndarray, size: np.ndarray,
                        n_keys: int) -> np.ndarray:  # pragma: no cover - compiled
    """float64[n_keys]: per key ``k`` (``kid`` in ``[0, n_keys)``), the median of the
    non-negative values ``dur`` of its rows padded with zeros to ``size`` members (``size``
    per row, equal within a key): the mean of the order statistics ``(size - 1) // 2`` and
    ``size // 2``. Rows are bucketed by key (counting sort), then each key's values sorted."""
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
        v = np.sort(vals[start[k]:start[k + 1]])
        zeros = sz[k] - c
        lo = (sz[k] - 1) // 2 - zeros
        hi = sz[k] // 2 - zeros
        a = v[lo] if lo >= 0 else 0.0
        b = v[hi] if hi >= 0 else 0.0
        out[k] = 0.5 * (a + b)
    return out
