"""The simulator's loops compiled with numba (imported only when numba is).

:func:`traincast.simulate.engine.simulate_batch` calls :func:`propagate` and
:func:`traincast.simulate.engine.simulate` :func:`propagate_row` when this module imports;
the what-ifs on the replay's graph (:mod:`traincast.simulate.scaled`) call
:func:`propagate_scaled` and :func:`propagate_rows`, the grouping of the marked steps' work
(:func:`traincast.simulate.timeline.step_groups`) :func:`marked_step_work` (from the laid-out
measured points or the compact columns they come from), the times held as int32 while lent
(:func:`traincast.simulate.scaled.lent_times`, :func:`traincast.simulate.scaled.halved_times`)
:func:`lend_times`. The numpy paths give the same results without them.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads


@njit(cache=True, nogil=True)
def propagate(flat: np.ndarray, src: np.ndarray, dst: np.ndarray, s_lag: np.ndarray,
              times: np.ndarray) -> None:  # pragma: no cover - compiled
    """In place on ``times`` (int64[B, points]): for each position ``k`` of ``flat`` (edge
    ids in the topological order of their sources, :func:`topo_edges`) and each batch row
    ``b``: ``times[b, q] = max(times[b, q], times[b, p] + s_lag[b, k])``, ``p = src[e]``,
    ``q = dst[e]``, ``e = flat[k]``."""
    n_b = times.shape[0]
    for k in range(flat.size):
        e = flat[k]
        p = src[e]
        q = dst[e]
        for b in range(n_b):
            v = times[b, p] + s_lag[b, k]
            if v > times[b, q]:
                times[b, q] = v


@njit(cache=True, nogil=True)
def topo_edges(ready: np.ndarray, indeg: np.ndarray, indptr: np.ndarray,
               dst: np.ndarray, edge_of: np.ndarray) -> tuple:  # pragma: no cover
    """Kahn's order from the ``ready`` points (``indeg`` is consumed; the CSR by source:
    ``indptr``, ``edge_of`` the edge ids, ``dst`` the destinations in edge order), given
    as its points' out-edges: (the edge ids, each point's block in CSR order, points in
    Kahn's order; the number of points ordered, fewer than those reached when some lie on
    a cycle)."""
    out = np.empty(edge_of.size, edge_of.dtype)
    stack = np.empty(indeg.size, dst.dtype)
    top = 0
    for p in ready:
        stack[top] = p
        top += 1
    n = 0
    m = 0
    while top > 0:
        top -= 1
        p = stack[top]
        n += 1
        for k in range(indptr[p], indptr[p + 1]):
            e = edge_of[k]
            out[m] = e
            m += 1
            q = dst[e]
            indeg[q] -= 1
            if indeg[q] == 0:
                stack[top] = q
                top += 1
    return out[:m], n


@njit(cache=True, nogil=True)
def csr_by_source(src: np.ndarray, dst: np.ndarray, indptr: np.ndarray, indeg: np.ndarray,
                  order: np.ndarray) -> None:  # pragma: no cover - compiled
    """The CSR of the edges ``src -> dst`` by source, filled in place: ``indptr``
    (points + 1), ``indeg`` (points) and ``order`` (the edge ids by source, ties in edge
    order: a stable sort's, by counting). ``indptr`` and ``indeg`` come zeroed."""
    for e in range(src.size):
        indptr[src[e] + 1] += 1
        indeg[dst[e]] += 1
    for p in range(1, indptr.size):
        indptr[p] += indptr[p - 1]
    for e in range(src.size):  # ``indptr[s]`` is the next free slot of s while filling
        s = src[e]
        k = indptr[s]
        order[k] = e
        indptr[s] = k + 1
    for p in range(indptr.size - 1, 0, -1):  # back to each block's start
        indptr[p] = indptr[p - 1]
    indptr[0] = 0


@njit(cache=True, nogil=True)
def propagate_row(flat: np.ndarray, src: np.ndarray, dst: np.ndarray, lag: np.ndarray,
                  times: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`propagate` of one lag vector in edge order (``lag[e]``: no copy gathered in
    ``flat``'s order first). In place on ``times`` (int64[points])."""
    for e in flat:
        q = dst[e]
        v = times[src[e]] + lag[e]
        if v > times[q]:
            times[q] = v


@njit(cache=True, nogil=True)
def propagate_scaled(flat: np.ndarray, src: np.ndarray, dst: np.ndarray, lag: np.ndarray,
                     kind: np.ndarray, parent: np.ndarray, changed: np.ndarray,
                     factor: np.ndarray, moved: np.ndarray, thread_k: int, exec_k: int,
                     coll_k: int, times: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`propagate_row` of a what-if, its lags derived where they are read.

    Each edge carrying an event's own time has its lag ``rint(lag * factor[owner])`` when
    ``changed[owner]`` (``changed`` empty: no lag changes); the owner, from the edge's kind
    (``kind[e]``) and its source point ``p`` and destination ``q``: ``EXEC``
    (kind ``exec_k``) ``p >> 1``, ``COLLECTIVE`` (``coll_k``) ``q >> 1``, ``THREAD``
    (``thread_k``) ``p >> 1`` from a start point, else ``parent[p >> 1]`` (none when < 0).
    An edge ``e`` with ``moved[e]`` (bool per edge id; empty: none) leaves the point
    ``p - 1`` (the start of the node whose end ``p`` it leaves in ``src``): it is relaxed
    with ``times[p - 1]`` where ``p``'s edges are, so ``p - 1`` must be final there
    (precede ``p`` in the topological order of ``flat``). In place on ``times``
    (int64[points], holding the anchors)."""
    if changed.size == 0 and moved.size == 0:
        for e in flat:
            q = dst[e]
            v = times[src[e]] + lag[e]
            if v > times[q]:
                times[q] = v
        return
    scale = changed.size > 0
    has_moved = moved.size > 0
    for e in flat:
        p = src[e]
        q = dst[e]
        v = lag[e]
        if scale:
            kd = kind[e]
            o = -1
            if kd == exec_k:
                o = p >> 1
            elif kd == coll_k:
                o = q >> 1
            elif kd == thread_k:
                o = p >> 1 if (p & 1) == 0 else parent[p >> 1]
            if o >= 0 and changed[o]:
                v = np.int64(np.rint(np.float64(v) * factor[o]))
        v += times[p - 1] if has_moved and moved[e] else times[p]
        if v > times[q]:
            times[q] = v


@njit(cache=True, nogil=True)
def propagate_rows(flat: np.ndarray, src: np.ndarray, dst: np.ndarray, lag: np.ndarray,
                   kind: np.ndarray, parent: np.ndarray, codes: np.ndarray,
                   table: np.ndarray, moved: np.ndarray, moved_row: int, thread_k: int,
                   exec_k: int, coll_k: int, n_unreached: int, node: np.ndarray,
                   head: np.ndarray, times: np.ndarray,
                   tail: np.ndarray) -> bool:  # pragma: no cover - compiled
    """:func:`propagate_scaled` of several what-ifs in one pass, their times held in int32
    against a common origin, reduced to the steps' last work ends.

    ``times`` (int32[points, B]) holds each point's anchor less the origin, or the int32
    minimum where a point has none (-1); row ``b`` is what-if ``b``. An edge's lag in row
    ``b`` is ``rint(lag * table[b, codes[owner, b]])`` where that code is not 0 (the owner
    as :func:`propagate_scaled` finds it), else its lag; the edges marked in ``moved``
    (bool per edge id) leave ``p - 1`` in row ``moved_row`` only. Returns False, ``times``
    not all final, where a value does not fit: a time beyond the int32 maximum, or a row
    in which more points than the ``n_unreached`` ones (no anchor, no edge in) are left
    without a time (a reached point's value would be -1 plus lags); the caller needs an
    origin of at least 2**31, so that every time it holds is >= 0 and above -1.
    Then ``tail[b, g]`` (int64) is the latest end ``times[2 n + 1, b]`` other than none
    over the nodes ``node[head[g]:head[g + 1]]`` (``head`` ends with ``node.size``), less
    the origin like ``times``; the int64 minimum where there is none."""
    nb = times.shape[1]
    none = np.int32(-2147483648)
    top = np.int64(2147483647)
    has_moved = moved.size > 0
    for e in flat:
        p = src[e]
        q = dst[e]
        l0 = lag[e]
        kd = kind[e]
        o = -1
        if kd == exec_k:
            o = p >> 1
        elif kd == coll_k:
            o = q >> 1
        elif kd == thread_k:
            o = p >> 1 if (p & 1) == 0 else parent[p >> 1]
        mv = has_moved and moved[e]
        for b in range(nb):
            v = l0
            if o >= 0:
                c = codes[o, b]
                if c != 0:
                    v = np.int64(np.rint(np.float64(l0) * table[b, c]))
            if mv and b == moved_row:
                v += np.int64(times[p - 1, b])
            else:
                v += np.int64(times[p, b])
            if v > times[q, b]:
                if v > top:
                    return False
                times[q, b] = v
    n_none = np.zeros(nb, np.int64)  # a reached point without a time: more than these
    for p in range(times.shape[0]):
        for b in range(nb):
            if times[p, b] == none:
                n_none[b] += 1
    for b in range(nb):
        if n_none[b] != n_unreached:
            return False
    # the int64 minimum (np.iinfo here makes the cached kernel's load import
    # numba.np.arraymath, a start-up cost of its own)
    low = np.int64(-9223372036854775807) - 1
    for g in range(head.size - 1):
        for b in range(nb):
            tail[b, g] = low
        for i in range(head[g], head[g + 1]):
            r = 2 * np.int64(node[i]) + 1
            for b in range(nb):
                v = times[r, b]
                if v != none and v > tail[b, g]:
                    tail[b, g] = v
    return True


@njit(cache=True, nogil=True)
def marked_step_work(measured: np.ndarray, start: np.ndarray, dur: np.ndarray,
                     seg_lo: np.ndarray, seg_hi: np.ndarray, seg_off: np.ndarray,
                     node_rank: np.ndarray, codes: np.ndarray,
                     python_code: int, pid: np.ndarray, tid: np.ndarray, device: np.ndarray,
                     src: np.ndarray, dst: np.ndarray, kind: np.ndarray, launch_k: int,
                     exec_k: int, row_of: np.ndarray, lo_of: np.ndarray, width: np.ndarray,
                     loose_of: np.ndarray, mk: np.ndarray, work: np.ndarray,
                     count: np.ndarray, last: np.ndarray, earliest: np.ndarray
                     ) -> np.ndarray:  # pragma: no cover - compiled
    """The work of the marked steps grouped by step, when each rank has one marker window.

    The measured times: ``measured`` (int64[2N + B], ns: node ``n``'s start at ``2n``, its
    end at ``2n + 1``) or, when it is empty, the compact columns it is laid out from
    (:class:`traincast.graph.model.MeasuredPoints`): node ``n`` starts at ``start[n]``
    less the clock offset ``seg_off[j]`` of the row range ``[seg_lo[j], seg_hi[j])`` that
    holds it (ascending, disjoint; none: 0) and ends ``dur[n]`` later (int64[N], ns), the
    same integers without the 2N + B column.

    A node's row by its measured start: ``row_of[r]`` when its start ``t >= 0`` lies in
    its rank ``r``'s window ``[lo_of[r], lo_of[r] + width[r])``, else ``loose_of[r]`` (the
    row of a rank recorded as one unmarked step, or -1). Its step-work row: that row, -1
    for a Python frame (``codes == python_code``) or a node of a marked step on another
    thread (``pid``, ``tid``) than its marker ``mk[row]``; a device node (``device >= 0``)
    with an ``EXEC`` edge (kind ``exec_k``) and no ``LAUNCH`` edge (``launch_k``) into it
    keeps its row by start; the destination of a ``LAUNCH`` edge takes its source's row by
    start when that is >= 0 (edges in id order: the last wins). ``work`` (int32[nodes]) is
    scratch. Returns the nodes whose row is a marked step, sorted by row then id (int32);
    ``count[row]`` adds each row's nodes and ``last[row]`` takes the latest measured end
    among them (it comes filled with the smallest int64); ``earliest[0]`` becomes the
    smallest measured start >= 0 of any node (the int64 maximum where none is). Returns
    None when a ``LAUNCH`` edge leaves a node another one enters (not met in traces; the
    caller's numpy path)."""
    n_nodes = work.size
    laid = measured.size > 0
    j = 0
    first = np.int64(9223372036854775807)
    for n in range(n_nodes):  # the row by start
        if laid:
            t = measured[2 * n]
        else:
            j = _segment(seg_lo, seg_hi, j, n)
            t = start[n] - _offset(seg_lo, seg_off, j, n)
        b = -1
        if t >= 0:
            if t < first:
                first = t
            r = node_rank[n]
            if np.uint64(t - lo_of[r]) < np.uint64(width[r]):
                b = row_of[r]
            else:
                b = loose_of[r]
        work[n] = b
    earliest[0] = first
    flags = np.zeros(n_nodes, np.uint8)  # 1: a LAUNCH destination, 2: has an EXEC edge
    for e in range(src.size):
        k = kind[e]
        if k == launch_k:
            flags[dst[e] >> 1] |= 1
        elif k == exec_k:
            flags[src[e] >> 1] |= 2
    for e in range(src.size):  # a launched op's row, stored as -2 - row
        if kind[e] == launch_k:
            h = src[e] >> 1
            if flags[h] & 1:
                return None
            b = work[h]
            if b >= 0:
                work[dst[e] >> 1] = -2 - b
    total = 0
    j = 0
    for n in range(n_nodes):
        w = work[n]
        if w <= -2:
            w = -2 - w
        elif w >= 0 and not (device[n] >= 0 and flags[n] == 2):
            if codes[n] == python_code:
                w = -1
            else:
                m = mk[w]
                if m >= 0 and (pid[n] != pid[m] or tid[n] != tid[m]):
                    w = -1
        work[n] = w
        if w >= 0 and mk[w] >= 0:
            count[w] += 1
            total += 1
            if laid:
                v = measured[2 * n + 1]
            else:
                j = _segment(seg_lo, seg_hi, j, n)
                v = start[n] - _offset(seg_lo, seg_off, j, n) + dur[n]
            if v > last[w]:
                last[w] = v
    at = np.zeros(count.size, np.int64)
    for w in range(1, count.size):
        at[w] = at[w - 1] + count[w - 1]
    node = np.empty(total, np.int32)
    for n in range(n_nodes):
        w = work[n]
        if w >= 0 and mk[w] >= 0:
            node[at[w]] = n
            at[w] += 1
    return node


@njit(cache=True, nogil=True)
def _segment(seg_lo: np.ndarray, seg_hi: np.ndarray, j: int, n: int
             ) -> int:  # pragma: no cover - compiled
    """The first row range ``j' >= j`` that does not end at or before row ``n`` (rows
    visited in ascending order: the ranges are passed once)."""
    while j < seg_lo.size and seg_hi[j] <= n:
        j += 1
    return j


@njit(cache=True, nogil=True)
def _offset(seg_lo: np.ndarray, seg_off: np.ndarray, j: int, n: int
            ) -> np.int64:  # pragma: no cover - compiled
    """The clock offset of row ``n`` given its range candidate ``j`` (:func:`_segment`):
    ``seg_off[j]`` when the range holds it, else 0."""
    if j < seg_lo.size and seg_lo[j] <= n:
        return np.int64(seg_off[j])
    return np.int64(0)


@njit(cache=True, nogil=True)
def lend_times(times: np.ndarray, rel: np.ndarray, origin: int, mode: int
               ) -> tuple[int, int, bool]:  # pragma: no cover - compiled
    """The passes of :func:`traincast.simulate.scaled.lent_times` over ``times`` (int64,
    ns; -1: none) and ``rel`` (int32, the same length; its int32 minimum: none), by
    ``mode``: 0 returns (smallest, largest) of the times >= 0 ((0, -1) when none is) and
    whether every other time is -1; 1 writes ``rel = times - origin`` (the caller checked
    that every time fits); 2 writes ``times = rel + origin`` back; 3 and 4 do 1 and 2 in
    place, ``rel`` being the first half of ``times``' own bytes (``rel`` unused): 3 forward
    (the int32 of point ``i`` overwrites bytes of point ``i // 2``, already read), 4
    backward (the int64 of point ``i`` overwrites the int32 of points ``2i`` and
    ``2i + 1``, already read). Modes 1 to 4 return (0, 0, True)."""
    none = np.int32(-2147483648)
    if mode == 3:
        half = times.view(np.int32)
        for i in range(times.size):
            v = times[i]
            half[i] = np.int32(v - origin) if v >= 0 else none
        return 0, 0, True
    if mode == 4:
        half = times.view(np.int32)
        for i in range(times.size - 1, -1, -1):
            r = half[i]
            times[i] = np.int64(r) + origin if r != none else np.int64(-1)
        return 0, 0, True
    if mode == 1:
        for i in range(times.size):
            v = times[i]
            rel[i] = np.int32(v - origin) if v >= 0 else none
        return 0, 0, True
    if mode == 2:
        for i in range(rel.size):
            r = rel[i]
            times[i] = np.int64(r) + origin if r != none else np.int64(-1)
        return 0, 0, True
    lo = np.int64(9223372036854775807)
    hi = np.int64(-1)
    only_none = True
    for v in times:
        if v >= 0:
            if v < lo:
                lo = v
            if v > hi:
                hi = v
        elif v != -1:
            only_none = False
    if hi < 0:
        return 0, -1, only_none
    return lo, hi, only_none


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
