"""The graph builder's loops compiled with numba (imported only when numba is, and only for
jobs large enough to pay for loading them: :func:`traincast.graph.jit.kernel`).

Each kernel has a numpy/Python twin that gives the same arrays without numba:
:func:`nest_walk` / :func:`nest_walk_segments` (:func:`traincast.graph.nesting.nest_walk`),
:func:`thread_walk` (grouping then nesting walk, :func:`traincast.graph.build._thread_walk`),
:func:`thread_links` / :func:`thread_links_into` (:func:`traincast.graph.nesting.thread_links`),
:func:`long_steps` (:func:`traincast.graph.waits.handoff.long_steps`),
:func:`event_point_times` (:class:`traincast.graph.chain_times.EventPoints`), :func:`binding`
(:func:`traincast.graph.binding.binding_edges`), :func:`binding_walk` and
:func:`thread_cost_spread`.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads


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


@njit(cache=True, nogil=True)
def binding(src: np.ndarray, dst: np.ndarray, lag: np.ndarray, kind: np.ndarray,
            prio: np.ndarray, times: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`traincast.graph.binding.binding_edges` in one pass over the edges: per
    destination point, the tight edge (``times[src] >= 0`` and ``times[src] + lag >=
    times[dst]``) with the largest value, then the lowest ``prio[kind]`` (tie rank per edge kind), then the lowest
    index; -1 where none is tight."""
    out = np.full(times.size, -1, np.int64)
    binding_into(src, dst, lag, kind, prio, times, out)
    return out


@njit(cache=True, nogil=True)
def binding_into(src: np.ndarray, dst: np.ndarray, lag: np.ndarray, kind: np.ndarray,
                 prio: np.ndarray, times: np.ndarray, out: np.ndarray
                 ) -> None:  # pragma: no cover - compiled
    """:func:`binding` into ``out`` (int32 or int64[points], all -1 on entry)."""
    for e in range(src.size):  # the best edge so far is re-read, not kept beside (memory)
        ts = times[src[e]]
        if ts < 0:
            continue
        d = dst[e]
        v = ts + lag[e]
        if v < times[d]:
            continue
        b = out[d]
        if b < 0:
            out[d] = e
            continue
        bv = times[src[b]] + lag[b]
        if v > bv or (v == bv and prio[kind[e]] < prio[kind[b]]):
            out[d] = e


@njit(cache=True, nogil=True)
def binding_walk(start: np.ndarray, stop: np.ndarray, binding: np.ndarray, times: np.ndarray,
                 src: np.ndarray, kind: np.ndarray, max_steps: int
                 ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per chain ``i``: follow binding edges back from point ``start[i]`` while the point
    has one and its time is after ``stop[i]`` (at most ``max_steps`` edges); returns
    ``(first, seen)``: the first edge followed (-1: none) and a bit mask of the edge kinds
    met (bit ``k`` for kind ``k``). :func:`traincast.analysis.idle._causes`' walk."""
    n = start.size
    first = np.full(n, -1, np.int64)
    seen = np.zeros(n, np.int64)
    for i in range(n):
        p = start[i]
        for _ in range(max_steps):
            e = binding[p]
            if e < 0 or times[p] <= stop[i]:
                break
            if first[i] < 0:
                first[i] = e
            seen[i] |= np.int64(1) << np.int64(kind[e])
            p = src[e]
    return first, seen


@njit(cache=True, nogil=True)
def nest_walk_segments(rows: np.ndarray, t0: np.ndarray, t1: np.ndarray, bounds: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """:func:`nest_walk` over consecutive segments of event ``rows`` (``bounds``:
    int64[S + 1] start positions, the last one the length; each segment one thread sorted by
    (start, -duration)), each walked on its own, mapped to the graph: ``(points, times,
    parents)`` with ``points`` the global point ids in nesting order (``2 * row`` start,
    ``2 * row + 1`` end; a segment's follow the previous one's), ``times`` their times (an
    end clipped to its parent's) and ``parents[i]`` the enclosing row of ``rows[i]`` (-1 at
    top level); ``t0``/``t1`` are indexed by row."""
    n = rows.size
    pts = np.empty(2 * n, np.int64)
    times = np.empty(2 * n, np.int64)
    parents = np.empty(n, np.int64)
    for s in range(bounds.size - 1):
        a, b = bounds[s], bounds[s + 1]
        seg = rows[a:b]
        o, e, p = nest_walk(t0[seg], t1[seg])
        for k in range(2 * (b - a)):
            i = o[k] >> 1
            if o[k] & 1:
                pts[2 * a + k] = 2 * seg[i] + 1
                times[2 * a + k] = e[i]
            else:
                pts[2 * a + k] = 2 * seg[i]
                times[2 * a + k] = t0[seg[i]]
        for i in range(b - a):
            parents[a + i] = seg[p[i]] if p[i] >= 0 else -1
    return pts, times, parents


@njit(cache=True, nogil=True)
def thread_walk(rows: np.ndarray, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                python: np.ndarray, t0: np.ndarray, t1: np.ndarray, rs: np.ndarray,
                pts: np.ndarray, parents: np.ndarray, parent: np.ndarray, max_threads: int,
                min_step: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """The host threads of event ``rows`` grouped and walked in nesting order in two passes
    over the rows: :func:`traincast.graph.build._group_threads` then
    :func:`nest_walk_segments`, without their intermediates.

    ``rows`` (ascending) must come rank by rank, ranks ascending, each rank's rows sorted by
    (start, -duration) (starts ``t0``, ends ``t1``, indexed by row); threads are (rank, pid,
    tid, python), numbered in that order. Fills ``rs`` (the rows thread by thread, each in
    row order), ``pts`` (each thread's points in nesting order, thread ``s`` at ``[2
    bounds[s], 2 bounds[s + 1])``), ``parents`` (the enclosing row of ``rs[i]``, -1 at top
    level; in the type of the point ids) and ``parent[row]`` (the same per row; rows at top
    level are not written). A point's time in the walk is its measured time (``t0``/``t1``
    of its row) but for an end clipped to its parent's (or raised to its start): returns
    ``(bounds, at, val, steps)``, ``bounds`` int64[S + 1], ``at``/``val`` (int64) the
    positions in ``pts`` whose time differs (in walk order, not sorted) and their times,
    ``steps`` (int64, ascending) the positions whose successor on the same thread comes at
    least ``min_step`` later (:func:`long_steps` of the walk's times); ``bounds`` empty,
    with nothing meaningful written, when the rows are not in that order or a rank has
    more than ``max_threads`` threads (the caller's numpy path)."""
    n = rows.size
    fail = np.empty(0, np.int64)
    fails = (fail, fail, fail, fail)
    thread = np.empty(n, np.int32)  # per position: the rank-local, then the global thread
    counts = np.zeros(64, np.int64)  # rows per thread (grown as threads are found)
    kp = np.empty(max_threads, np.int64)
    kt = np.empty(max_threads, np.int64)
    ky = np.empty(max_threads, np.int64)
    order = np.empty(max_threads, np.int64)
    n_threads = 0
    a = 0
    while a < n:  # one rank's rows [a, b)
        r = rank[rows[a]]
        n_local = 0
        last = 0
        b = a
        while b < n and rank[rows[b]] == r:
            row = rows[b]
            if b > a:  # (start, -duration) order within the rank
                prev = rows[b - 1]
                if t0[row] < t0[prev] or (t0[row] == t0[prev] and
                                          t1[row] - t0[row] > t1[prev] - t0[prev]):
                    return fails
            p, t, y = np.int64(pid[row]), np.int64(tid[row]), np.int64(python[row])
            j = last
            if j >= n_local or kp[j] != p or kt[j] != t or ky[j] != y:
                j = 0
                while j < n_local and (kp[j] != p or kt[j] != t or ky[j] != y):
                    j += 1
                if j == n_local:
                    if n_local == max_threads:
                        return fails
                    kp[j], kt[j], ky[j] = p, t, y
                    n_local += 1
                last = j
            thread[b] = j
            b += 1
        if b < n and rank[rows[b]] < r:  # ranks ascending
            return fails
        for j in range(n_local):  # the rank's threads in (pid, tid, python) order
            k = 0
            for i in range(n_local):
                if kp[i] < kp[j] or (kp[i] == kp[j] and (
                        kt[i] < kt[j] or (kt[i] == kt[j] and ky[i] < ky[j]))):
                    k += 1
            order[j] = n_threads + k
        if n_threads + n_local > counts.size:
            grown = np.zeros(2 * (n_threads + n_local), np.int64)
            for q in range(n_threads):  # (a loop: a slice copy is slow to compile)
                grown[q] = counts[q]
            counts = grown
        for i in range(a, b):
            s = order[thread[i]]
            thread[i] = s
            counts[s] += 1
        n_threads += n_local
        a = b
    bounds = np.zeros(n_threads + 1, np.int64)
    at_row = np.empty(n_threads, np.int64)  # per thread: next position in rs
    at_pt = np.empty(n_threads, np.int64)  # next point position
    top = np.zeros(n_threads, np.int64)  # stack depth; thread s stacks at bounds[s]
    for s in range(n_threads):
        bounds[s + 1] = bounds[s] + counts[s]
        at_row[s] = bounds[s]
        at_pt[s] = 2 * bounds[s]
    st_row = np.empty_like(parents)  # (rows fit the point ids' type)
    st_eff = np.empty(n, np.int64)
    st_cut = np.empty(n, np.bool_)  # the end clipped (not the row's measured end)
    last = np.empty(n_threads, np.int64)  # per thread: the time of its last point
    # the clipped ends and the long steps, at their largest size: only the pages written
    # (few) become resident; a buffer grown as they are found slows the loop twofold
    at = np.empty(n + 1, np.int64)
    val = np.empty(n + 1, np.int64)
    steps = np.empty(2 * n + 1, np.int64)
    n_clip = 0
    n_step = 0
    for i in range(n):  # the threads walked side by side, each in its own order
        s = thread[i]
        row = rows[i]
        t = t0[row]
        base = bounds[s]
        k = top[s]
        c = at_pt[s]
        while k > 0 and st_eff[base + k - 1] <= t:
            k -= 1
            pts[c] = 2 * st_row[base + k] + 1
            x = st_eff[base + k]
            if st_cut[base + k]:
                at[n_clip] = c
                val[n_clip] = x
                n_clip += 1
            if c > 2 * base and x - last[s] >= min_step:
                steps[n_step] = c - 1
                n_step += 1
            last[s] = x
            c += 1
        e = t1[row]
        q = at_row[s]
        if k > 0:
            up = st_row[base + k - 1]
            parents[q] = up
            parent[row] = up
            if e > st_eff[base + k - 1]:
                e = st_eff[base + k - 1]
        else:
            parents[q] = -1
        if e < t:
            e = t
        pts[c] = 2 * row
        if c > 2 * base and t - last[s] >= min_step:
            steps[n_step] = c - 1
            n_step += 1
        last[s] = t
        st_row[base + k] = row
        st_eff[base + k] = e
        st_cut[base + k] = e != t1[row]
        rs[q] = row
        at_row[s] = q + 1
        top[s] = k + 1
        at_pt[s] = c + 1
    for s in range(n_threads):
        base = bounds[s]
        c = at_pt[s]
        for k in range(top[s] - 1, -1, -1):
            pts[c] = 2 * st_row[base + k] + 1
            x = st_eff[base + k]
            if st_cut[base + k]:
                at[n_clip] = c
                val[n_clip] = x
                n_clip += 1
            if c > 2 * base and x - last[s] >= min_step:
                steps[n_step] = c - 1
                n_step += 1
            last[s] = x
            c += 1
    return bounds, at[:n_clip].copy(), val[:n_clip].copy(), np.sort(steps[:n_step])


@njit(cache=True, nogil=True)
def event_point_times(pts: np.ndarray, start: np.ndarray, dur: np.ndarray, rank: np.ndarray,
                      offset: np.ndarray, base: int, out: np.ndarray
                      ) -> None:  # pragma: no cover - compiled
    """``out[i]``: the measured time of event point ``pts[i]`` (row ``r = pts[i] >> 1``):
    ``start[r]`` less ``offset[rank[r] - base]`` (``offset`` empty: none), plus ``dur[r]``
    for an end (odd point)."""
    shifted = offset.size > 0
    for i in range(pts.size):
        p = pts[i]
        r = p >> 1
        t = start[r]
        if shifted:
            t -= offset[rank[r] - base]
        if p & 1:
            t += dur[r]
        out[i] = t


@njit(cache=True, nogil=True)
def thread_cost_spread(src: np.ndarray, dst: np.ndarray, kind: np.ndarray, lag: np.ndarray,
                       cost: np.ndarray, thread_kind: int, n_event_points: int) -> int:
    """In place on ``lag``: each node ``i`` with ``cost[i] > 0`` (in node order) takes its
    cost (ns, rounded to the nearest) off the THREAD segments around it: half from the one
    leaving its start, the rest from the one entering its end, what these cannot hold
    (never below 0) from the one leaving its start again, then the one entering its start
    and the one leaving its end. Returns the ns that found no room.
    :func:`traincast.whatif.unprofiled.remove_overhead` in one pass. Edge ids are held in
    the type of ``src`` (the caller checks that they fit)."""
    out_e = np.full(n_event_points, -1, src.dtype)
    in_e = np.full(n_event_points, -1, src.dtype)
    for e in range(src.size):
        if kind[e] != thread_kind:
            continue
        if src[e] < n_event_points:
            out_e[src[e]] = e
        if dst[e] < n_event_points:
            in_e[dst[e]] = e
    lost = 0
    for i in range(cost.size):
        rem = np.int64(np.rint(cost[i]))
        if rem <= 0:
            continue
        s, t = 2 * i, 2 * i + 1
        if t >= n_event_points:
            continue
        order = (out_e[s], in_e[t], out_e[s], in_e[s], out_e[t])
        for k in range(5):
            e = order[k]
            if e < 0 or rem <= 0:
                continue
            want = (rem + 1) // 2 if k == 0 else rem
            take = want if want < lag[e] else lag[e]
            if take > 0:
                lag[e] -= take
                rem -= take
        lost += rem
    return lost


@njit(cache=True, nogil=True)
def thread_links(pts: np.ndarray, times: np.ndarray, bounds: np.ndarray, cap: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """THREAD edges of the chains :func:`nest_walk_segments` gives (points of segment ``s``
    at ``[2 bounds[s], 2 bounds[s + 1])``): each point but a segment's last links to the
    next, lag = the time between them, at most ``cap[dst]`` when ``cap`` is not empty (the
    intrinsic costs of :func:`traincast.graph.build._thread_caps`); ``src``/``dst`` in the
    type of ``pts``, ``lag`` int64."""
    n_seg = bounds.size - 1
    m = pts.size - n_seg if pts.size else 0
    src = np.empty(m, pts.dtype)  # point ids in the chain's integer type
    dst = np.empty(m, pts.dtype)
    lag = np.empty(m, np.int64)
    k = 0
    use_cap = cap.size > 0
    for s in range(n_seg):
        for i in range(2 * bounds[s], 2 * bounds[s + 1] - 1):
            d = pts[i + 1]
            v = times[i + 1] - times[i]
            if use_cap and cap[d] < v:
                v = cap[d]
            src[k] = pts[i]
            dst[k] = d
            lag[k] = v
            k += 1
    return src[:k], dst[:k], lag[:k]


@njit(cache=True, nogil=True)
def thread_links_into(pts: np.ndarray, times: np.ndarray, bounds: np.ndarray,
                      src: np.ndarray, dst: np.ndarray, lag: np.ndarray
                      ) -> None:  # pragma: no cover - compiled
    """:func:`thread_links` without a cap, written into ``src``/``dst``/``lag`` (each of
    ``pts.size - (bounds.size - 1)`` edges; views of a graph's joined columns)."""
    k = 0
    for s in range(bounds.size - 1):
        for i in range(2 * bounds[s], 2 * bounds[s + 1] - 1):
            src[k] = pts[i]
            dst[k] = pts[i + 1]
            lag[k] = times[i + 1] - times[i]
            k += 1


@njit(cache=True, nogil=True)
def long_steps(times: np.ndarray, bounds: np.ndarray, min_step: int
               ) -> np.ndarray:  # pragma: no cover - compiled
    """Positions ``i`` (ascending, int64) of the chain points whose successor ``i + 1`` on
    the same chain (chain ``s`` at ``[2 bounds[s], 2 bounds[s + 1])``) comes at least
    ``min_step`` later: ``np.flatnonzero(np.diff(times) >= min_step)`` without the steps
    from one chain's last point to the next chain's first."""
    count = 0
    for s in range(bounds.size - 1):
        for i in range(2 * bounds[s], 2 * bounds[s + 1] - 1):
            if times[i + 1] - times[i] >= min_step:
                count += 1
    out = np.empty(count, np.int64)
    k = 0
    for s in range(bounds.size - 1):
        for i in range(2 * bounds[s], 2 * bounds[s + 1] - 1):
            if times[i + 1] - times[i] >= min_step:
                out[k] = i
                k += 1
    return out


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
