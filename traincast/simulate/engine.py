"""The simulator: one engine that turns an execution graph plus durations into times.

Evaluation is a single pass of Kahn's topological order over the points (start/end of every
event): a point's time is the maximum of its anchor and of ``t[src] + lag`` over its incoming
edges, final once every predecessor is final. This is the max-plus recurrence of a
discrete-event replay in which FIFO resources (host threads, GPU streams) are serialised by
their edges (Lin et al., arXiv 2404.12674, Sec. 5; Zhu et al., Lumos, MLSys'25, Sec. 3).
Replay, what-if and planning all go through :func:`simulate`.

Three evaluation modes give identical times (the maximum does not depend on the order its
terms come in). With numba (a dependency) the loop over points in topological order is
compiled (:mod:`traincast.simulate.numba_kernels`), for graphs of at least
:func:`traincast.graph.jit.min_size` points (below, importing numba costs more than it saves):
it reads one int32 array, the edge ids in Kahn's topological order of their sources
(:func:`_flat`, kept in ``graph.structure``; the CSR it is found from is dropped then), and
relaxes ``t[dst[e]] = max(t[dst[e]], t[src[e]] + lag[e])`` for each in turn.
Without it, graphs below :data:`LEVEL_MIN_POINTS` points run a Python loop over their edges
listed once in a topological order of their sources (kept in ``graph.structure``): the
order of the points' measured times where it is one (checked; a trace's graph), else Kahn's;
one pass per lag vector. Larger graphs are first evaluated level by level with numpy: all ready
points of a level propagate their edges at once (a sort by destination and one
``maximum.reduceat``), which pays off when levels are wide -- many ranks progressing side by
side, ~1,000 points per level at 1,024 ranks. When the levels stay narrow (one long chain:
fewer than :data:`LEVEL_MIN_WIDTH` points per level on average over a window of
:data:`LEVEL_WINDOW` levels) the rest runs in a Python loop over the ready points.

A graph whose edges were moved within their nodes (``overlap=ideal``: waits leave a
collective's start instead of its end) gets its compiled edge order, or a small graph's
topological order of the points, from the replay's (:func:`share_structure`) instead of
finding it again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traincast.errors import TraincastError
from traincast.graph.jit import kernel as load_kernel
from traincast.graph.jit import load_on_empty, read_only, worth_compiling
from traincast.graph.model import ExecutionGraph, SparsePoints

#: graphs with at least this many points start in the level-synchronous numpy mode
LEVEL_MIN_POINTS = 250_000
#: the numpy mode continues while levels average at least this many points ...
LEVEL_MIN_WIDTH = 256
#: ... over this many consecutive levels
LEVEL_WINDOW = 200


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
    """Evaluate ``graph`` (optionally with replacement edge lags, int64 ns per edge; the
    graph's own lags are read in their type, int32 or int64).

    Raises:
        CyclicGraphError: some points are on a cycle.
    """
    # (the graph's lags in their type, int32 or int64; others given as int64)
    lags = graph.lag if lag is None else np.asarray(lag, np.int64)
    n_pts = graph.n_points
    src = graph.src
    has_in = _has_in(graph)
    kernel = _compiled_kernel(n_pts)
    anchor = graph.__dict__.get("_anchor")
    if kernel is not None and isinstance(anchor, SparsePoints) and anchor.fill < 0:
        # the order first, the times after it (its pages not under the order's)
        reached = has_in.copy()
        reached[anchor.index[anchor.values >= 0]] = True
        times = None
    else:
        times = graph.anchor_copy()
        reached = (times >= 0) | has_in
    ready = np.flatnonzero(~has_in & reached)
    done = 0
    if kernel is not None:  # the same recurrence, compiled (traincast.simulate.numba_kernels)
        flat = _flat(graph, reached, ready)
        del ready
        ids = read_only(graph.src, graph.dst)
        row = _row_kernel()
        if row is not None and lags.dtype in (np.int32, np.int64) and \
                lags.flags.c_contiguous and flat.dtype == src.dtype == graph.dst.dtype \
                == np.int32 and src.flags.c_contiguous and graph.dst.flags.c_contiguous:
            # the lags read in edge order; read-only views: one signature per lag type
            # whether the graph's (read-only) or a copy's (writable)
            lags, = read_only(lags)
            if times is None:  # the kernel's load, then the times (not under its pages)
                load_on_empty(row, flat, *ids, lags, np.empty(0, np.int64))
                times = graph.anchor_copy()
            row(flat, *ids, lags, times)
        else:
            if times is None:
                times = graph.anchor_copy()
            # edge ids: no bounds to check (int64: the kernel's one row signature)
            s_lag = np.take(lags, flat, mode="clip").astype(np.int64, copy=False)
            kernel(flat, *ids, s_lag[None, :], times[None, :])  # in place
        times[~reached] = -1
        return SimResult(times, n_pts, int(src.size))
    order, dst, indptr, _ = _csr(graph)
    s_lag = np.take(lags, order, mode="clip")  # a permutation: no bounds to check
    s_dst = dst[order]  # the numpy paths read the destinations in CSR order
    if n_pts < LEVEL_MIN_POINTS:  # the edges in topological order, kept for the next lags
        times = _rows_flat(graph, s_lag[None, :], times, reached, ready, indptr, s_dst)[0]
        return SimResult(times, n_pts, int(src.size))
    indeg = _indeg(graph).copy()
    ready, done = _levels(ready, times, indeg, indptr, s_dst, s_lag)
    if ready.size:
        times, n = _loop(ready, times, indeg, indptr, s_dst, s_lag)
        done += n
    n_reached = int(reached.sum())
    if done != n_reached:
        raise CyclicGraphError(f"{n_reached - done} points lie on dependency cycles")
    times[~reached] = -1
    return SimResult(times, n_pts, int(src.size))


def _csr(graph: ExecutionGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(edge order by source (stable), the destinations in edge order, indptr [P + 1]; int32
    when the ids fit, else int64 (the destinations are ``graph.dst`` itself when of that
    type); and bool[P], the points with an incoming edge) of ``graph``'s edges: the CSR of
    outgoing edges, the destination of CSR position ``k`` being ``dst[order[k]]`` (no
    second column of the destinations in CSR order is kept). Kept in ``graph.structure`` (shared by
    copies: a what-if that only changes lags reuses it) until the compiled edge order is
    found from it (:func:`_flat`), which drops it; the in-degrees (:func:`_indeg`) are kept
    beside it until then. A large graph with the builder's int32 ids gets the same arrays
    from a compiled counting sort (:func:`traincast.simulate.numba_kernels.csr_by_source`)."""
    hit = graph.structure.get("csr")
    if hit is not None and hit[0] is graph.src and hit[1] is graph.dst and hit[2] == \
            graph.n_points:
        return hit[3]
    n_pts = graph.n_points
    src, dst = graph.src, graph.dst
    # int32 when the ids fit: these arrays live as long as the graph
    it = np.int32 if max(n_pts, src.size) < (1 << 31) - 1 else np.int64
    # the same arrays by a counting sort, compiled (for the builder's id type: one
    # signature to compile)
    fill = _csr_kernel(n_pts) if (src.dtype == dst.dtype == it and src.flags.c_contiguous
                                  and dst.flags.c_contiguous) else None
    if fill is not None:
        indptr, indeg = np.zeros(n_pts + 1, it), np.zeros(n_pts, it)
        order = np.empty(src.size, it)
        fill(src, dst, indptr, indeg, order)
        out = (order, dst, indptr, indeg > 0)
        graph.structure["csr"] = (graph.src, graph.dst, n_pts, out)
        graph.structure["indeg"] = (graph.src, graph.dst, n_pts, indeg)
        return out
    order = np.argsort(src, kind="stable").astype(it)
    indptr = np.zeros(n_pts + 1, it)
    np.cumsum(np.bincount(src, minlength=n_pts), out=indptr[1:])
    indeg = np.bincount(dst, minlength=n_pts).astype(it)
    out = (order, dst.astype(it, copy=False), indptr, indeg > 0)
    graph.structure["csr"] = (graph.src, graph.dst, n_pts, out)
    graph.structure["indeg"] = (graph.src, graph.dst, n_pts, indeg)
    return out


def _indeg(graph: ExecutionGraph, *, take: bool = False) -> np.ndarray:
    """int[P]: the in-degree of each point (the CSR's integer type), kept since
    :func:`_csr` found it, else counted anew; read-only use unless ``take`` (the kept array
    is then handed over: no longer kept, the caller may change it)."""
    n_pts = graph.n_points
    hit = graph.structure.get("indeg")
    if hit is not None and hit[0] is graph.src and hit[1] is graph.dst and hit[2] == n_pts:
        if take:
            graph.structure.pop("indeg", None)
        return hit[3]
    it = _csr(graph)[1].dtype
    return np.bincount(graph.dst, minlength=n_pts).astype(it)


def _has_in(graph: ExecutionGraph) -> np.ndarray:
    """bool[P]: the points with an incoming edge, from the CSR when one is kept, else kept
    in ``graph.structure`` for the same edges (read-only use)."""
    n_pts = graph.n_points
    for key in ("csr", "has_in"):
        hit = graph.structure.get(key)
        if hit is not None and hit[0] is graph.src and hit[1] is graph.dst and \
                hit[2] == n_pts:
            return hit[3][3] if key == "csr" else hit[3]
    has_in = np.zeros(n_pts, bool)
    has_in[graph.dst] = True
    graph.structure["has_in"] = (graph.src, graph.dst, n_pts, has_in)
    return has_in


def _flat(graph: ExecutionGraph, reached: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """The edge ids in Kahn's topological order of their sources (each source's edges
    together, in id order; compiled), the one structure the compiled propagations read:
    kept in ``graph.structure`` for the same edges and the same reached points. Found from
    the CSR (:func:`_csr`) and its in-degrees, which are then no longer kept (built,
    used, dropped).

    Raises:
        CyclicGraphError: some points are on a cycle.
    """
    # lazy: numba is imported (and may be missing) only once a compiled kernel loaded
    from traincast.simulate.numba_kernels import topo_edges

    sig = np.packbits(reached).tobytes()
    hit = graph.structure.get("flat")
    if hit is not None and hit[0] is graph.src and hit[1] is graph.dst and hit[2] == sig:
        return hit[3]
    order, dst, indptr, has_in = _csr(graph)
    flat, n = topo_edges(ready, _indeg(graph, take=True), indptr, dst, order)  # consumed
    del order, dst, indptr
    n_reached = int(reached.sum())
    if n != n_reached:
        raise CyclicGraphError(f"{n_reached - n} points lie on dependency cycles")
    flat.flags.writeable = False
    graph.structure["flat"] = (graph.src, graph.dst, sig, flat)
    graph.structure["has_in"] = (graph.src, graph.dst, graph.n_points, has_in)
    graph.structure.pop("csr", None)
    graph.structure.pop("indeg", None)
    return flat


def starts_lead_to_ends(graph: ExecutionGraph, ends: np.ndarray) -> bool:
    """True when each end point ``ends`` (odd) has an edge from its node's start
    (``end - 1 -> end``): one pass over the edges' sources."""
    want = np.zeros(graph.n_points, bool)
    want[ends - 1] = True
    e = np.flatnonzero(want[graph.src])
    e = e[graph.dst[e].astype(np.int64) == graph.src[e].astype(np.int64) + 1]
    have = np.zeros(graph.n_points, bool)
    have[graph.src[e]] = True
    return bool(have[ends - 1].all())


def share_structure(changed: ExecutionGraph, base: ExecutionGraph) -> bool:
    """Give ``changed`` (``base`` with some edges leaving their node's start point instead
    of its end, as ``overlap=ideal`` moves a wait from a collective's end to its start)
    the simulator's orders kept for ``base`` without finding them again: the compiled
    simulator's edge order (:func:`_flat`; each moved edge keeps its place, among its old
    source's edges) and the small graphs' topological order of the points
    (:func:`_flat_edges`; ``changed``'s edges are then listed in it). Both hold because an
    edge leads from every such node's start to its end: the new source's time is final
    before the old one's. True when shared; False (nothing changed) when the graphs differ
    otherwise, an edge moved otherwise, or ``base`` has neither order kept."""
    n_pts = base.n_points
    if (changed.dst is not base.dst or changed.n_points != n_pts
            or changed.src.size != base.src.size):
        return False
    flat, points = (base.structure.get(key) for key in ("flat", "flat_edges"))
    flat = flat if flat is not None and flat[0] is base.src and flat[1] is base.dst else None
    points = points if (points is not None and points[0] is base.src
                        and points[1] is base.dst) else None
    if flat is None and points is None:
        return False
    moved = np.flatnonzero(changed.src != base.src)
    if moved.size:
        old_s = base.src[moved].astype(np.int64)
        if not (np.all(old_s & 1 == 1)
                and np.array_equal(changed.src[moved].astype(np.int64), old_s - 1)
                and starts_lead_to_ends(base, np.unique(old_s))):
            return False
    if flat is not None:
        changed.structure["flat"] = (changed.src, changed.dst, flat[2], flat[3])
        changed.structure["has_in"] = (changed.src, changed.dst, n_pts, _has_in(base))
    if points is not None:
        changed.structure["flat_points"] = (changed.src, changed.dst, points[2], points[4])
    return True


def _loop(ready: np.ndarray, times: np.ndarray, indeg: np.ndarray, indptr: np.ndarray,
          s_dst: np.ndarray, s_lag: np.ndarray) -> tuple[np.ndarray, int]:
    """Kahn evaluation from the ``ready`` points, one point at a time; returns the new times
    and how many points were finished."""
    # Python-level hot loop on lists (faster than numpy scalars)
    t = times.tolist()
    deg = indeg.tolist()
    ip = indptr.tolist()
    nd = s_dst.tolist()
    nl = s_lag.tolist()
    stack = ready.tolist()
    pop = stack.pop
    push = stack.append
    done = 0
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
    return np.asarray(t, np.int64), done


def _levels(ready: np.ndarray, times: np.ndarray, indeg: np.ndarray, indptr: np.ndarray,
            s_dst: np.ndarray, s_lag: np.ndarray) -> tuple[np.ndarray, int]:
    """Level-synchronous Kahn evaluation in numpy, in place on ``times`` and ``indeg``.

    Every point of ``ready`` is final; its out-edges are applied together, and the points
    whose last predecessor that was become the next level. Returns the points still ready
    (for the loop to continue from) and how many points were finished, once the levels have
    become narrow (see the module docstring) or nothing is left.
    """
    done = 0
    widths: list[int] = []
    while ready.size:
        widths.append(int(ready.size))
        if len(widths) >= LEVEL_WINDOW:
            if sum(widths[-LEVEL_WINDOW:]) < LEVEL_MIN_WIDTH * LEVEL_WINDOW:
                break
            del widths[:-LEVEL_WINDOW]
        done += ready.size
        e, cnt = _out_edges(ready, indptr)
        if e.size == 0:
            ready = ready[:0]
            break
        q = s_dst[e]
        v = np.repeat(times[ready], cnt) + s_lag[e]
        o = np.argsort(q, kind="stable")
        q, v = q[o], v[o]
        head = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        u = q[head]
        times[u] = np.maximum(times[u], np.maximum.reduceat(v, head))
        indeg[u] -= np.diff(np.r_[head, q.size])
        ready = u[indeg[u] == 0]
    return ready, done


def kept_out_edges(graph: ExecutionGraph, points: np.ndarray) -> np.ndarray | None:
    """The ids of the edges leaving ``points`` (ascending), read from the simulator's CSR
    when ``graph.structure`` keeps one for its edges; None when it does not."""
    hit = graph.structure.get("csr")
    if hit is None or hit[0] is not graph.src or hit[1] is not graph.dst \
            or hit[2] != graph.n_points:
        return None
    order, _, indptr, _ = hit[3]
    e, _ = _out_edges(np.asarray(points, np.int64), indptr)
    return np.sort(order[e])


def edge_order(graph: ExecutionGraph) -> np.ndarray:
    """The order in which the simulator reads a graph's lags
    (``simulate_batch(..., by_source=True)``), edge ids: for a graph the compiled kernel
    takes (:func:`traincast.graph.jit.min_size`), in the topological order of their sources
    (:func:`_flat`); else sorted by source point (stable). Kept in ``graph.structure``,
    read-only use.

    Raises:
        CyclicGraphError: some points are on a cycle (the compiled order).
    """
    if _compiled_kernel(graph.n_points) is None:
        return _csr(graph)[0]
    has_in = _has_in(graph)
    reached = (graph.anchor >= 0) | has_in
    return _flat(graph, reached, np.flatnonzero(~has_in & reached))


def _edge_lags(graph: ExecutionGraph, lags: np.ndarray, compiled: bool) -> np.ndarray:
    """``lags`` (columns in :func:`edge_order`) in edge order when the path that reads
    them (``compiled`` or not) reads another order than :func:`edge_order` gives."""
    if (_compiled_kernel(graph.n_points) is not None) == compiled:
        return lags
    out = np.empty_like(lags)
    out[:, edge_order(graph)] = lags
    return out


def simulate_batch(graph: ExecutionGraph, lags: np.ndarray, *,
                   by_source: bool = False, jit: bool | None = None,
                   out: np.ndarray | None = None) -> np.ndarray:
    """Evaluate ``graph`` for many lag vectors at once: ``times[b]`` equals
    ``simulate(graph, lags[b]).times`` for every ``b``.

    The layouts of a planner search, or a verdict's what-ifs, share graphs and differ only
    in durations; the topological order is found once, then every lag vector is propagated
    along it. With ``numba`` installed (a dependency) and a graph of at least
    :func:`traincast.graph.jit.min_size` points (or ``jit=True``), the propagation is a compiled loop over
    points, edges and the batch (~1 ns per edge and layout); a smaller graph (or no numba)
    below :data:`LEVEL_MIN_POINTS` points takes one Python pass per row over its edges in
    topological order (numba is not imported); a larger one without numba, numpy over the
    batch axis, a level of the order at a time.

    Args:
        graph: the shared graph (its ``anchor`` and edges; its own ``lag`` is ignored).
        lags: int64[B, n_edges], ns.
        by_source: the columns of ``lags`` are in :func:`edge_order` (``lags[b, i]`` is the
            lag of edge ``edge_order(graph)[i]``), not in edge order.
        jit: None: the compiled kernel for graphs of at least
            :func:`traincast.graph.jit.min_size` points; True: whatever the size, when numba
            is available (a caller that simulates many small graphs in one process, as the
            planner's search does, pays numba's import once); False: never.
        out: int64[B, n_points] to write the times into (a buffer reused between calls:
            no fresh pages to fault in), returned.

    Returns:
        int64[B, n_points] (-1 for points no edge or anchor reaches).

    Raises:
        CyclicGraphError: some points are on a cycle.
    """
    lags = np.ascontiguousarray(lags, np.int64)
    if lags.ndim != 2 or lags.shape[1] != graph.src.size:
        raise ValueError(f"lags must be [batch, {graph.src.size}], got {lags.shape}")
    src = graph.src
    n_pts = graph.n_points
    kernel = None if jit is False else _compiled_kernel(None if jit else n_pts)
    if by_source:  # in edge order where this path reads another order than edge_order's
        e_lags = _edge_lags(graph, lags, kernel is not None)
        if e_lags is not lags:
            lags, by_source = e_lags, False
    has_in = _has_in(graph)
    anchor = graph.anchor.astype(np.int64, copy=False)  # read only
    reached = (anchor >= 0) | has_in
    ready = np.flatnonzero(~has_in & reached)
    if kernel is not None:
        flat = _flat(graph, reached, ready)
        times = _rows_out(out, lags.shape[0], anchor)
        s_lag = lags if by_source else np.take(lags, flat, axis=1)
        kernel(flat, *read_only(graph.src, graph.dst), s_lag, times)
        times[:, ~reached] = -1
        return times
    # e.g. planner templates: edges already by source
    presorted = by_source or bool(np.all(src[1:] >= src[:-1]))
    # the CSR kept in graph.structure (a replay's, reused)
    order_e, dst, indptr, _ = _csr(graph)
    if n_pts < LEVEL_MIN_POINTS:
        # a small graph: one pass over its edges in topological order per row (Python lists)
        return _rows_flat(graph, lags if presorted else np.take(lags, order_e, axis=1),
                          anchor, reached, ready, indptr, dst[order_e], out)
    if lags.shape[0] == 1:  # one row: the single-row hybrid of simulate
        times = _rows_out(out, 1, anchor)
        s_lag = lags[0] if presorted else np.take(lags[0], order_e, mode="clip")
        indeg = _indeg(graph).copy()
        s_dst = dst[order_e]
        ready, done = _levels(ready, times[0], indeg, indptr, s_dst, s_lag)
        if ready.size:
            t, n = _loop(ready, times[0], indeg, indptr, s_dst, s_lag)
            times[0] = t
            done += n
        n_reached = int(reached.sum())
        if done != n_reached:
            raise CyclicGraphError(f"{n_reached - done} points lie on dependency cycles")
        times[:, ~reached] = -1
        return times
    s_dst = dst[order_e]
    levels = _topo_levels(ready, _indeg(graph).copy(), indptr, s_dst)
    done = sum(lv.size for lv in levels)
    n_reached = int(reached.sum())
    if done != n_reached:
        raise CyclicGraphError(f"{n_reached - done} points lie on dependency cycles")
    times = _rows_out(out, lags.shape[0], anchor)
    s_lag = lags if presorted else np.take(lags, order_e, axis=1)
    for lv in levels:
        e, cnt = _out_edges(lv, indptr)
        if e.size == 0:
            continue
        q = s_dst[e]
        v = np.repeat(times[:, lv], cnt, axis=1) + s_lag[:, e]
        o = np.argsort(q, kind="stable")
        q, v = q[o], v[:, o]
        head = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        u = q[head]
        times[:, u] = np.maximum(times[:, u], np.maximum.reduceat(v, head, axis=1))
    times[:, ~reached] = -1
    return times


def _rows_out(out: np.ndarray | None, n_rows: int, anchor: np.ndarray) -> np.ndarray:
    """int64[n_rows, points] holding ``anchor`` in each row: ``out`` when given."""
    if out is None:
        return np.repeat(anchor[None, :], n_rows, axis=0)
    if out.shape != (n_rows, anchor.size) or out.dtype != np.int64:
        raise ValueError(f"out must be int64[{n_rows}, {anchor.size}], got {out.dtype}"
                         f"{list(out.shape)}")
    out[:] = anchor
    return out


def _rows_flat(graph: ExecutionGraph, s_lag: np.ndarray, anchor: np.ndarray,
               reached: np.ndarray, ready: np.ndarray, indptr: np.ndarray,
               s_dst: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`simulate_batch` of a small graph without the compiled kernel: the edges in
    the topological order of their sources (:func:`_flat_edges`, found once per graph), then
    per row one loop over them, ``t[dst] = max(t[dst], t[src] + lag)``: each source is
    final when its edges are read, so the times are those of :func:`simulate`."""
    e, flat_src, flat_dst = _flat_edges(graph, reached, ready, indptr, s_dst)
    f_src, f_dst = flat_src.tolist(), flat_dst.tolist()
    times = _rows_out(out, s_lag.shape[0], anchor)
    start = anchor.tolist()
    for b in range(s_lag.shape[0]):
        t = start.copy()
        for p, q, lag in zip(f_src, f_dst, s_lag[b, e].tolist(), strict=True):
            v = t[p] + lag
            if v > t[q]:
                t[q] = v
        times[b] = t
    times[:, ~reached] = -1
    return times


def _flat_edges(graph: ExecutionGraph, reached: np.ndarray, ready: np.ndarray,
                indptr: np.ndarray, s_dst: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(CSR positions, sources, destinations) of the edges leaving the reached points, in
    a topological order of their sources (:func:`_kahn_points`; or the order
    :func:`share_structure` gave the graph), in the CSR's integer type; kept in
    ``graph.structure`` (with the order of the points) for the same edges and the same
    reached points.

    Raises:
        CyclicGraphError: some points are on a cycle.
    """
    sig = np.packbits(reached).tobytes()
    hit = graph.structure.get("flat_edges")
    if hit is not None and hit[0] is graph.src and hit[1] is graph.dst and hit[2] == sig:
        return hit[3]
    shared = graph.structure.pop("flat_points", None)
    if (shared is not None and shared[0] is graph.src and shared[1] is graph.dst
            and shared[2] == sig):
        pts = shared[3]
    else:
        pts = _kahn_points(graph, reached, ready, indptr, s_dst)
    e, cnt = _out_edges(pts, indptr)
    e = e.astype(s_dst.dtype)
    out = (e, np.repeat(pts, cnt), s_dst[e])
    for a in out:
        a.flags.writeable = False
    graph.structure["flat_edges"] = (graph.src, graph.dst, sig, out, pts)
    return out


def _kahn_points(graph: ExecutionGraph, reached: np.ndarray, ready: np.ndarray,
                 indptr: np.ndarray, s_dst: np.ndarray) -> np.ndarray:
    """The reached points in a topological order, read-only, in the CSR's integer type:
    their measured times' order when that is one (:func:`_time_order`), else Kahn's order
    from ``ready`` (a stack: each point's successors as soon as it is final). Any
    topological order gives the same times: each point's time is the largest over its
    predecessors, taken once they are all final.

    Raises:
        CyclicGraphError: some points are on a cycle.
    """
    pts = _time_order(graph, reached)
    if pts is not None:
        pts = pts.astype(s_dst.dtype, copy=False)
        pts.flags.writeable = False
        return pts
    deg = _indeg(graph).tolist()
    ip = indptr.tolist()
    nd = s_dst.tolist()
    stack = ready.tolist()
    pop, push = stack.pop, stack.append
    order = []
    keep = order.append
    while stack:
        p = pop()
        keep(p)
        for k in range(ip[p], ip[p + 1]):
            q = nd[k]
            deg[q] -= 1
            if deg[q] == 0:
                push(q)
    n_reached = int(reached.sum())
    if len(order) != n_reached:
        raise CyclicGraphError(f"{n_reached - len(order)} points lie on dependency cycles")
    pts = np.asarray(order, s_dst.dtype)
    pts.flags.writeable = False
    return pts


#: passes of the measured-time order (:func:`_time_order`) over the edges whose times do not
#: increase; a graph that needs more (or has more than half its edges tied: plans, whose
#: points have no measurement) takes Kahn's loop
TIE_PASSES = 16


def _time_order(graph: ExecutionGraph, reached: np.ndarray) -> np.ndarray | None:
    """The reached points sorted by measured time, points of equal time by their depth along
    the edges between them, when every edge then leads from a reached point to a later one
    (checked); else None. A trace's measured times rarely decrease along an edge (a kernel
    recorded as starting a few µs before the event it waits for); such an edge's destination
    takes its source's time for the order first. Numpy sorts in place of
    :func:`_kahn_points`' loop over every edge (``docs/design/read_ahead.md``)."""
    src, dst = graph.src, graph.dst
    if not src.size:
        return None
    key = _raised_along(graph.measured, src, dst, 0)
    if key is None:
        return None
    tie = np.flatnonzero(key[src] == key[dst])
    if 2 * tie.size > src.size:
        return None
    depth = _raised_along(np.zeros(key.size, np.int32), src[tie], dst[tie], 1)
    if depth is None:
        return None
    pts = np.flatnonzero(reached)
    pts = pts[np.lexsort((depth[pts], key[pts]))]
    pos = np.full(key.size, -1, np.int64)
    pos[pts] = np.arange(pts.size)
    p_src = pos[src]
    if p_src.min() < 0 or not np.all(p_src < pos[dst]):
        return None
    return pts


def _raised_along(values: np.ndarray, src: np.ndarray, dst: np.ndarray, step: int
                  ) -> np.ndarray | None:
    """``values`` (not modified) with each edge's destination raised to at least its source's
    value plus ``step``, in at most :data:`TIE_PASSES` passes over the edges; None when more
    are needed."""
    for n in range(TIE_PASSES + 1):
        up = values[src] + step
        low = up > values[dst]
        if not low.any():
            return values
        if n == TIE_PASSES:
            return None
        values = values.copy() if n == 0 else values
        np.maximum.at(values, dst[low], up[low])
    return None  # pragma: no cover - the loop returns


def _out_edges(points: np.ndarray, indptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edge ids (CSR by source) leaving ``points``: ``indptr[p] .. indptr[p + 1] - 1`` for
    each point in order, and the count per point."""
    lo = indptr[points]
    cnt = indptr[points + 1] - lo
    total = int(cnt.sum())
    return np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(total, dtype=np.int64), cnt


def _topo_levels(ready: np.ndarray, indeg: np.ndarray, indptr: np.ndarray,
                 s_dst: np.ndarray) -> list[np.ndarray]:
    """Kahn's levels from ``ready`` (``indeg`` is consumed): every point of a level has all
    its predecessors in earlier levels."""
    levels = []
    while ready.size:
        levels.append(ready)
        e, _ = _out_edges(ready, indptr)
        if e.size == 0:
            break
        q = np.sort(s_dst[e], kind="stable")
        head = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        u = q[head]
        indeg[u] -= np.diff(np.r_[head, q.size])
        ready = u[indeg[u] == 0]
    return levels


_KERNEL: list = []
_CSR_KERNEL: list = []
_ROW_KERNEL: list = []


def _compiled_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.simulate.numba_kernels.propagate`, or None (:func:`traincast.graph.jit.
    kernel`: numba missing, ``TRAINCAST_NO_NUMBA`` set to check the numpy path, or ``size``
    points too few to pay for loading it)."""
    if not worth_compiling(size):
        return None
    if not _KERNEL:
        _KERNEL.append(load_kernel("traincast.simulate.numba_kernels", "propagate"))
    return _KERNEL[0]


def _csr_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.simulate.numba_kernels.csr_by_source`, or None (as
    :func:`_compiled_kernel`)."""
    if not worth_compiling(size):
        return None
    if not _CSR_KERNEL:
        _CSR_KERNEL.append(load_kernel("traincast.simulate.numba_kernels", "csr_by_source"))
    return _CSR_KERNEL[0]


def _row_kernel():  # type: ignore[no-untyped-def]
    """:func:`traincast.simulate.numba_kernels.propagate_row`, or None (numba missing or
    ``TRAINCAST_NO_NUMBA`` set); asked for once :func:`_compiled_kernel` was given."""
    if not _ROW_KERNEL:
        _ROW_KERNEL.append(load_kernel("traincast.simulate.numba_kernels", "propagate_row"))
    return _ROW_KERNEL[0]
