"""The graph builder's nesting walk compiled with numba (imported only when numba is).

:func:`traincast.graph.build._thread_chain` calls :func:`nest_walk` when this module imports;
its Python loop gives the same result without it.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def nest_walk(t0: np.ndarray, t1: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """One host thread's events (int64 starts ``t0`` and ends ``t1``, sorted by (start,
    -duration)) in nesting order: ``(order, eff, par)`` with ``order`` the local points
    (``2i`` start, ``2i + 1`` end of position ``i``), ``eff`` each event's end clipped to its
    parent's, ``par`` its enclosing position (-1 at top level)."""
    n = t0.size
    eff = np.empty(n, np.int64)
    par = np.full(n, -1, np.int64)
    order = np.empty(2 * n, np.int64)
    stack = np.empty(n, np.int64)
    k = 0
    top = 0
    for i in range(n):
        t = t0[i]
        while top > 0 and eff[stack[top - 1]] <= t:
            top -= 1
            order[k] = 2 * stack[top] + 1
            k += 1
        e = t1[i]
        if top > 0:
            p = stack[top - 1]
            par[i] = p
            if e > eff[p]:
                e = eff[p]
        eff[i] = e if e > t else t
        order[k] = 2 * i
        k += 1
        stack[top] = i
        top += 1
    while top > 0:
        top -= 1
        order[k] = 2 * stack[top] + 1
        k += 1
    return order, eff, par
