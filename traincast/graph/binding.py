"""Which dependency set each point's time: the binding incoming edge.

Given point times ``t`` that satisfy an :class:`ExecutionGraph` (a simulation result, or the
measured times for a graph built with ``exact=True``), the binding edge of a point is the
incoming edge with the largest ``t[src] + lag``: the last thing it waited for. Following
binding edges backwards gives critical paths and the cause of every wait (Lin et al., arXiv
2404.12674, Sec. 5; HTA's critical-path analysis follows the same idea on one rank).

Ties are broken by edge kind, preferring the cross-resource cause (a peer, a sync, another
stream) over the resource's own order (thread chain, stream FIFO), see :data:`PRIORITY`.
"""

from __future__ import annotations

import numpy as np

from traincast.graph.jit import kernel, load_on_empty, read_only, worth_compiling
from traincast.graph.model import EdgeKind, ExecutionGraph

#: tie-break order among edges that bind a point equally (lower wins). EXEC and COLLECTIVE
#: are the only kinds that meet at a collective member's end, and tie exactly when the member
#: itself arrived last: the member's own transfer (EXEC) binds then, a peer otherwise. ARRIVE
#: edges only meet each other (at a barrier point).
PRIORITY = {
    EdgeKind.EXEC: 0, EdgeKind.COLLECTIVE: 1, EdgeKind.SYNC: 2, EdgeKind.QUEUE: 3,
    EdgeKind.WAIT: 4, EdgeKind.DATA: 5, EdgeKind.CROSS_STREAM: 6, EdgeKind.ISSUE: 7,
    EdgeKind.LAUNCH: 8, EdgeKind.STREAM: 9, EdgeKind.THREAD: 10, EdgeKind.ARRIVE: 11,
}
_PRIO = np.array([PRIORITY[EdgeKind(k)] for k in range(len(EdgeKind))], np.int64)


_BINDING: list = []


def _binding_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.binding`, or None (:func:`traincast.graph.jit.kernel`;
    ``size``: the graph's points)."""
    if not worth_compiling(size):
        return None
    if not _BINDING:
        _BINDING.append(kernel("traincast.graph.numba_kernels", "binding"))
    return _BINDING[0]


_BINDING_INTO: list = []


def _binding_into():  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.binding_into`, or None (as
    :func:`_binding_kernel`, once that one loaded)."""
    if not _BINDING_INTO:
        _BINDING_INTO.append(kernel("traincast.graph.numba_kernels", "binding_into"))
    return _BINDING_INTO[0]


def binding_edges(graph: ExecutionGraph, times: np.ndarray, lag: np.ndarray | None = None,
                  *, narrow: bool = False) -> np.ndarray:
    """int64[n_points]: index of the binding incoming edge of each point, -1 for none.

    A point has none when no edge reaches it or when its anchor, not an edge, set its time
    (every incoming edge has slack). ``narrow``: int32[n_points] instead (the same values)
    when the edge ids fit, for a caller that only reads a few of them (half the memory).
    """
    # (read-only: one kernel signature per lag type, the graph's or a copy's)
    lag, = read_only(graph.lag if lag is None else lag)
    compiled = _binding_kernel(times.size)
    if compiled is not None:  # the same choice in one compiled pass (graph/numba_kernels.py)
        if narrow and graph.src.size < 1 << 31:
            into = _binding_into()
            if into is not None:
                # the kernel's load before the points' buffer: its transient pages not on top
                load_on_empty(into, graph.src, graph.dst, lag, graph.kind, _PRIO, times,
                              np.empty(0, np.int32))
                out = np.full(times.size, -1, np.int32)
                into(graph.src, graph.dst, lag, graph.kind, _PRIO, times, out)
                return out
        return compiled(graph.src, graph.dst, lag, graph.kind, _PRIO, times)
    value = times[graph.src] + lag
    tight = value >= times[graph.dst]
    idx = np.flatnonzero(tight & (times[graph.src] >= 0))
    out = np.full(times.size, -1, np.int64)
    if idx.size == 0:
        return out
    dst = graph.dst[idx]
    v = value[idx]
    # per destination: the largest value, then the lowest tie rank, then the lowest index
    # (two scatter passes instead of a sort of every tight edge)
    best_v = np.full(times.size, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(best_v, dst, v)
    top = v == best_v[dst]
    idx, dst = idx[top], dst[top]
    key = _PRIO[graph.kind[idx]] * np.int64(graph.src.size) + idx
    best_k = np.full(times.size, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(best_k, dst, key)
    hit = best_k != np.iinfo(np.int64).max
    out[hit] = best_k[hit] % np.int64(graph.src.size)
    return out
