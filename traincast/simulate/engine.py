"""The simulator: one engine that turns an execution graph plus durations into times.

Evaluation is a single pass of Kahn's topological order over the points (start/end of every
event): a point's time is the maximum of its anchor and of ``t[src] + lag`` over its incoming
edges, final once every predecessor is final. This is the max-plus recurrence of a
discrete-event replay in which FIFO resources (host threads, GPU streams) are serialised by
their edges (Lin et al., arXiv 2404.12674, Sec. 5; Zhu et al., Lumos, MLSys'25, Sec. 3).
Replay, what-if and planning all go through :func:`simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traincast.errors import TraincastError
from traincast.graph.model import ExecutionGraph


class CyclicGraphError(TraincastError):
    """The execution graph has a dependency cycle (inconsistent input)."""


@dataclass
class SimResult:
    """Times (int64 ns, -1 for points no edge or anchor reaches) of every point."""

    times: np.ndarray
    n_points: int
    n_edges: int

    def start(self, node: np.ndarray | int) -> np.ndarray:
        return self.times[2 * np.asarray(node)]

    def end(self, node: np.ndarray | int) -> np.ndarray:
        return self.times[2 * np.asarray(node) + 1]


def simulate(graph: ExecutionGraph, lag: np.ndarray | None = None) -> SimResult:
    """Evaluate ``graph`` (optionally with replacement edge lags, int64 ns per edge).

    Raises:
        CyclicGraphError: some points are on a cycle.
    """
    lags = graph.lag if lag is None else np.asarray(lag, np.int64)
    n_pts = graph.measured.size
    src, dst = graph.src, graph.dst
    # CSR of outgoing edges, sorted by source
    order = np.argsort(src, kind="stable")
    s_dst = dst[order]
    s_lag = lags[order]
    indptr = np.zeros(n_pts + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n_pts), out=indptr[1:])
    indeg = np.bincount(dst, minlength=n_pts).astype(np.int64)
    times = graph.anchor.astype(np.int64).copy()
    reached = (times >= 0) | (indeg > 0)
    # Python-level hot loop on lists (faster than numpy scalars)
    t = times.tolist()
    deg = indeg.tolist()
    ip = indptr.tolist()
    nd = s_dst.tolist()
    nl = s_lag.tolist()
    stack = np.flatnonzero((indeg == 0) & reached).tolist()
    done = 0
    pop = stack.pop
    push = stack.append
    while stack:
        p = pop()
        done += 1
        tp = t[p]
        for e in range(ip[p], ip[p + 1]):
            q = nd[e]
            v = tp + nl[e]
            if v > t[q]:
                t[q] = v
            deg[q] -= 1
            if deg[q] == 0:
                push(q)
    n_reached = int(reached.sum())
    if done != n_reached:
        raise CyclicGraphError(f"{n_reached - done} points lie on dependency cycles")
    out = np.asarray(t, np.int64)
    out[~reached] = -1
    return SimResult(out, n_pts, int(src.size))
