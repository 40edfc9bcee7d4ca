"""The simulator's propagation loop compiled with numba (imported only when numba is).

:func:`traincast.simulate.engine.simulate_batch` calls :func:`propagate` when this module
imports; the numpy path gives the same times without it.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads


@njit(cache=True, nogil=True)
def propagate(order: np.ndarray, indptr: np.ndarray, s_dst: np.ndarray, s_lag: np.ndarray,
              times: np.ndarray) -> None:  # pragma: no cover - compiled
    """In place on ``times`` (int64[B, points]): for each point of the topological
    ``order``, each out-edge ``k`` (CSR by source: ``indptr``, ``s_dst``) and each batch row
    ``b``: ``times[b, dst] = max(times[b, dst], times[b, p] + s_lag[b, k])``."""
    n_b = times.shape[0]
    for p in order:
        for k in range(indptr[p], indptr[p + 1]):
            q = s_dst[k]
            for b in range(n_b):
                v = times[b, p] + s_lag[b, k]
                if v > times[b, q]:
                    times[b, q] = v


@njit(cache=True, nogil=True)
def topo_order(ready: np.ndarray, indeg: np.ndarray, indptr: np.ndarray,
               s_dst: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Kahn's order from the ``ready`` points (``indeg`` is consumed); shorter than the
    points reached when some lie on a cycle."""
    out = np.empty(indeg.size, s_dst.dtype)  # point ids in the CSR's integer type
    stack = np.empty(indeg.size, s_dst.dtype)
    top = 0
    for p in ready:
        stack[top] = p
        top += 1
    n = 0
    while top > 0:
        top -= 1
        p = stack[top]
        out[n] = p
        n += 1
        for k in range(indptr[p], indptr[p + 1]):
            q = s_dst[k]
            indeg[q] -= 1
            if indeg[q] == 0:
                stack[top] = q
                top += 1
    return out[:n]



@njit(cache=True, nogil=True)
def csr_by_source(src: np.ndarray, dst: np.ndarray, indptr: np.ndarray, indeg: np.ndarray,
                  order: np.ndarray, s_dst: np.ndarray) -> None:  # pragma: no cover - compiled
    """The CSR of the edges ``src -> dst`` by source, filled in place: ``indptr``
    (points + 1), ``indeg`` (points), ``order`` (the edge ids by source, ties in edge order:
    a stable sort's, by counting) and ``s_dst`` (the destinations in that order). ``indptr``
    and ``indeg`` come zeroed."""
    for e in range(src.size):
        indptr[src[e] + 1] += 1
        indeg[dst[e]] += 1
    for p in range(1, indptr.size):
        indptr[p] += indptr[p - 1]
    for e in range(src.size):  # ``indptr[s]`` is the next free slot of s while filling
        s = src[e]
        k = indptr[s]
        order[k] = e
        s_dst[k] = dst[e]
        indptr[s] = k + 1
    for p in range(indptr.size - 1, 0, -1):  # back to each block's start
        indptr[p] = indptr[p - 1]
    indptr[0] = 0


@njit(cache=True, nogil=True)
def propagate_row(order: np.ndarray, indptr: np.ndarray, s_dst: np.ndarray,
                  edge_of: np.ndarray, lag: np.ndarray,
                  times: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`propagate` of one lag vector in edge order: ``lag[edge_of[k]]`` is the lag of
    CSR position ``k`` (``edge_of``: the CSR's edge order), read where it is used rather
    than gathered into a CSR-ordered copy first. In place on ``times`` (int64[points])."""
    for p in order:
        tp = times[p]
        for k in range(indptr[p], indptr[p + 1]):
            q = s_dst[k]
            v = tp + lag[edge_of[k]]
            if v > times[q]:
                times[q] = v


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
