"""Nesting of host events on their threads, from the graph's THREAD chains."""

from __future__ import annotations

import numpy as np

from traincast.graph.model import EdgeKind, ExecutionGraph


def thread_parents(graph: ExecutionGraph) -> np.ndarray:
    """int64[N]: the enclosing event of each host event on its thread (-1: top level or
    not a host event), from the nesting of the graph's THREAD chains (vectorised); the one
    the graph builder recorded when it has it (the same nesting, no recomputation)."""
    if graph.thread_parent is not None:
        return graph.thread_parent
    n = graph.n_nodes
    parent = np.full(n, -1, np.int64)
    th = graph.edges_of_kind(EdgeKind.THREAD)
    if th.size == 0:
        return parent
    n_pts = 2 * n
    prv = np.full(n_pts, -1, np.int64)
    prv[graph.dst[th]] = graph.src[th]
    on = np.zeros(n_pts, bool)
    on[graph.src[th]] = True
    on[graph.dst[th]] = True
    pts = np.flatnonzero(on)
    # list ranking by pointer jumping (synchronous updates, log2(chain length) rounds):
    # distance to the chain head, and depth = prefix sum of +1 (start) / -1 (end)
    jump = prv.copy()
    dist = (prv >= 0).astype(np.int64)
    depth = np.where(np.arange(n_pts) % 2 == 0, 1, -1).astype(np.int64)
    active = pts[jump[pts] >= 0]
    while active.size:
        j = jump[active]
        dist[active] += dist[j]
        depth[active] += depth[j]
        jump[active] = jump[j]
        active = active[jump[active] >= 0]
    head = np.where(prv >= 0, prv, np.arange(n_pts))
    active = pts[prv[pts] >= 0]
    while active.size:
        head[active] = head[head[active]]
        active = active[prv[head[active]] >= 0]
    head_of = head[pts]
    o = np.lexsort((dist[pts], head_of))
    seq = pts[o]  # all chain points, chains contiguous, each in chain order
    starts = seq[seq % 2 == 0]
    pos = np.flatnonzero(seq % 2 == 0)
    level = depth[starts]  # 1 = top level
    m = np.int64(seq.size + 1)
    keys = level * m + pos
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    inner = level > 1
    q = (level[inner] - 1) * m + pos[inner]
    idx = np.searchsorted(skeys, q, "left") - 1
    ok = idx >= 0
    ok[ok] = skeys[idx[ok]] // m == level[inner][ok] - 1
    parent[starts[inner][ok] // 2] = starts[order[idx[ok]]] // 2
    return parent


def thread_edge_owner(graph: ExecutionGraph, parent: np.ndarray | None = None) -> np.ndarray:
    """int64[E]: for each THREAD edge, the innermost host event open during it (-1 for other
    edges and for gaps between top-level events).

    A segment that starts at an event's start lies inside that event; one that starts at a
    child's end lies in the child's parent (the parent's self time).
    """
    parent = thread_parents(graph) if parent is None else parent
    owner = np.full(graph.n_edges, -1, np.int64)
    th = graph.edges_of_kind(EdgeKind.THREAD)
    src = graph.src[th]
    node = src // 2
    owner[th] = np.where(src % 2 == 0, node, parent[node])
    return owner
