"""What-ifs simulated on the replay's graph, without building their lags or edges.

A what-if that multiplies events' own times (speedups: :mod:`traincast.whatif.speedup`,
:func:`traincast.whatif.scale.scale_lags`) and moves waits from collectives' ends to their
starts (``overlap=ideal``: :func:`traincast.whatif.apply.ideal_overlap_edges`) changes
nothing the simulator derives from the replay's edges but the lags it reads and the point a
moved edge leaves. :func:`simulate_scaled` therefore evaluates it on the replay's CSR and
topological order (:mod:`traincast.simulate.engine`), each scaled lag derived where it is
read and each moved edge relaxed with its new source's time; :func:`simulate_rows` does
several what-ifs in one pass, their times held in int32 against a common origin and
reduced to the ends of the steps' work. Both are the max-plus recurrence of
:func:`traincast.simulate.engine.simulate`, so the times are the same integers as
simulating the changed graph; both are compiled (numba) and give None where they do not
apply (the caller then builds the changed graph).
"""

from __future__ import annotations

import numpy as np

from traincast.graph.jit import kernel as load_kernel
from traincast.graph.jit import load_on_empty, read_only
from traincast.graph.model import EdgeKind, ExecutionGraph, SparsePoints
from traincast.graph.nesting import thread_parents
from traincast.simulate.engine import CyclicGraphError, _compiled_kernel, _csr, _topo
from traincast.util.allocator import release_memory

__all__ = ["scaled_path", "simulate_rows", "simulate_scaled"]

#: the edge kinds whose lags carry an event's own time (:func:`traincast.whatif.scale.
#: owned_edges`), as the kernels take them
_OWNED_KINDS = (int(EdgeKind.THREAD), int(EdgeKind.EXEC), int(EdgeKind.COLLECTIVE))

_SCALED_KERNEL: list = []
_ROWS_KERNEL: list = []


def simulate_scaled(graph: ExecutionGraph, factor: np.ndarray | None = None,
                    moved: np.ndarray | None = None, *, out: np.ndarray | None = None
                    ) -> np.ndarray | None:
    """The times of a what-if on ``graph`` that rescales events' own times and moves waits
    to their node's start, without building its lags or edges: ``simulate(g).times`` for
    ``g`` = ``graph`` with :func:`traincast.whatif.scale.scale_lags` (``factor``, per
    event; None: no change) applied to its lags, then the edges ``moved`` (ids) leaving the
    start point ``src - 1`` instead of their node's end point ``src``
    (:func:`traincast.whatif.apply.ideal_overlap_edges`). One compiled pass over the
    replay's CSR and topological order (:func:`traincast.simulate.numba_kernels.
    propagate_scaled`): each scaled lag is derived where it is read, each moved edge is
    relaxed with its new source's time when its old source is relaxed (which its new source
    precedes in the order).

    Returns int64[points] (``out`` when given: a buffer reused between calls), or None when
    this path does not apply and the caller builds the changed graph: no compiled kernel
    (numba missing, or a graph below :func:`traincast.graph.jit.min_size` points), ids
    other than the builder's int32, a moved edge that does not leave an event's end point,
    or one whose node's start does not precede its end in the replay's order.

    Raises:
        CyclicGraphError: some points of ``graph`` are on a cycle.
        ValueError: ``out`` is not int64[points].
    """
    if not scaled_path(graph):
        return None
    n_pts = graph.n_points
    order, dst, indptr, has_in = _csr(graph)
    changed = None if factor is None else factor != 1.0
    if changed is not None and not changed.any():
        factor = None  # rint(lag * 1.0) is lag: nothing changes
    if factor is not None:
        factor = np.ascontiguousarray(factor, np.float64)
        if factor.size < graph.n_nodes:
            return None
        parent = thread_parents(graph)
        if parent.dtype != np.int32:
            parent = parent.astype(np.int32)
    else:
        factor, changed, parent = np.zeros(0), np.zeros(0, bool), np.zeros(0, np.int32)
    walk = _walk(graph, moved, order, dst, indptr, has_in)
    if walk is None:
        return None
    order_pts, unreached, flags = walk
    if out is not None and (out.shape != (n_pts,) or out.dtype != np.int64):
        raise ValueError(f"out must be int64[{n_pts}], got {out.dtype}{list(out.shape)}")
    times = np.empty(n_pts, np.int64) if out is None else out
    _anchor_into(graph, times)
    lag, = read_only(graph.lag)  # (one signature per lag type, the graph's or a copy's)
    _scaled_kernel()(order_pts, indptr, dst, order, lag, graph.kind, parent, changed,
                     factor, flags, *_OWNED_KINDS, times)
    times[unreached] = -1
    return times


def simulate_rows(graph: ExecutionGraph, codes: np.ndarray, tables: np.ndarray,
                  moved: np.ndarray | None = None, moved_row: int = -1, *,
                  node: np.ndarray, head: np.ndarray, out: np.ndarray | None = None
                  ) -> tuple[np.ndarray, int, np.ndarray] | None:
    """Several what-ifs of :func:`simulate_scaled` in one compiled pass
    (:func:`traincast.simulate.numba_kernels.propagate_rows`), their times kept as int32
    against a common origin and reduced to the ends of groups of nodes.

    Args:
        graph: the replay's graph.
        codes: uint8[events, B]: per event and what-if, the code of its factor in
            ``tables`` (0: unchanged; :func:`traincast.whatif.speedup.speedup_codes`).
        tables: float64[B, 256]: the factors of the codes, per what-if.
        moved, moved_row: edges (ids) that what-if ``moved_row`` moves to their node's
            start (as :func:`simulate_scaled`); None: none.
        node, head: groups of nodes (``node[head[g]:head[g + 1]]``, the last group to the
            end of ``node``), e.g. :func:`traincast.simulate.timeline.step_groups`.
        out: int32[points, B] to hold the times (a buffer reused between calls).

    Returns:
        (times, origin, tail): int32[points, B], each point's time less ``origin`` (the
        earliest anchor, ns) or the int32 minimum for -1 (no time); int64[B, groups], the
        latest end (ns) >= 0 over each group's nodes, the int64 minimum where none. None
        when this path does not apply (as :func:`simulate_scaled`; besides: anchors below
        2**31 ns or more than 2**31 ns apart, a time that does not fit, a reached point
        without one) and each what-if is simulated on its own.

    Raises:
        CyclicGraphError: some points of ``graph`` are on a cycle.
    """
    if not scaled_path(graph) or _rows_kernel() is None or codes.shape[0] < graph.n_nodes:
        return None
    n_pts = graph.n_points
    order, dst, indptr, has_in = _csr(graph)
    anchor = graph.__dict__.get("_anchor")
    if isinstance(anchor, SparsePoints) and anchor.fill == -1:
        at, values = anchor.index, anchor.values
    else:
        values = graph.anchor
        at = np.flatnonzero(values != -1)
        values = values[at]
    if not values.size or values.min() < 1 << 31 or \
            int(values.max()) - int(values.min()) >= 1 << 31:
        return None
    origin = int(values.min())
    walk = _walk(graph, moved, order, dst, indptr, has_in)
    if walk is None:
        return None
    order_pts, unreached, flags = walk
    parent = thread_parents(graph)
    if parent.dtype != np.int32:
        parent = parent.astype(np.int32)
    codes = np.ascontiguousarray(codes, np.uint8)
    tables = np.ascontiguousarray(tables, np.float64)
    bounds = np.append(head, node.size).astype(np.int64)
    args = (order_pts, indptr, dst, order, *read_only(graph.lag), graph.kind, parent, codes,
            tables, flags, moved_row, *_OWNED_KINDS, node, bounds)
    # the kernel's load before the times: its transient pages not on top of them
    load_on_empty(_rows_kernel(), *args, np.empty((0, codes.shape[1]), np.int32),
                  np.empty((codes.shape[1], 0), np.int64))
    release_memory()  # what the walk freed (its reach mask), back before the times
    shape = (n_pts, codes.shape[1])
    if out is not None and out.shape == shape and out.dtype == np.int32 \
            and out.flags.c_contiguous:
        times = out
        times.fill(np.iinfo(np.int32).min)
    else:
        times = np.full(shape, np.iinfo(np.int32).min, np.int32)
    times[at] = (values - origin).astype(np.int32)[:, None]
    tail = np.empty((codes.shape[1], head.size), np.int64)
    if not _rows_kernel()(*args, times, tail):
        return None
    low = np.iinfo(np.int64).min
    tail = np.where(tail == low, low, tail + origin)
    return times, origin, tail


def scaled_path(graph: ExecutionGraph) -> bool:
    """True when :func:`simulate_scaled` simulates what-ifs on ``graph``: the compiled
    kernel is there and worth loading for its size, and its arrays have the builder's
    types (int32 ids, int32 or int64 lags, int8 kinds)."""
    if _compiled_kernel(graph.n_points) is None or _scaled_kernel() is None:
        return False
    order = _csr(graph)[0]
    return bool(order.dtype == np.int32 and graph.lag.dtype in (np.int32, np.int64)
                and graph.lag.flags.c_contiguous and graph.kind.dtype == np.int8)


def _reached(graph: ExecutionGraph, has_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bool[points]: reached by an anchor or an edge, the ids of the others); the ids are
    kept in ``graph.structure`` for the same edges and anchors (the mask is derived again
    from them: not held under a pass's times)."""
    hit = graph.structure.get("unreached")
    anchor = graph.__dict__.get("_anchor")
    if hit is not None and hit[0] is graph.src and hit[1] is graph.dst and hit[2] is anchor:
        reached = np.ones(graph.n_points, bool)
        reached[hit[3]] = False
        return reached, hit[3]
    if isinstance(anchor, SparsePoints) and anchor.fill < 0:  # no anchor laid out
        reached = has_in.copy()
        reached[anchor.index[anchor.values >= 0]] = True
    else:
        reached = (graph.anchor >= 0) | has_in
    unreached = np.flatnonzero(~reached)
    if reached.size < 1 << 31:
        unreached = unreached.astype(np.int32)
    unreached.flags.writeable = False
    graph.structure["unreached"] = (graph.src, graph.dst, anchor, unreached)
    return reached, unreached


def _anchor_into(graph: ExecutionGraph, out: np.ndarray) -> None:
    """``out[:] = graph.anchor``, straight from a compact column (no array laid out)."""
    value = graph.__dict__.get("_anchor")
    if isinstance(value, SparsePoints) and out.size == value.size:
        out.fill(value.fill)
        out[value.index] = value.values
    else:
        out[:] = graph.anchor


def _moved_positions(graph: ExecutionGraph, moved: np.ndarray, order: np.ndarray,
                     indptr: np.ndarray, reached: np.ndarray, pts: np.ndarray
                     ) -> np.ndarray | None:
    """bool[edges]: the CSR positions of the edges ``moved`` (from an event's end point to
    its start), None when one does not leave an end point or the topological order ``pts``
    of ``graph`` does not place that event's start before its end."""
    src = graph.src[moved].astype(np.int64)
    if src.size and ((src & 1) == 0).any() or (src >= graph.n_event_points).any():
        return None
    # each moved edge is relaxed when its old source is (which precedes its destination):
    # its new source must precede its old one (the node's start before its end)
    ends = np.unique(src)
    need = np.concatenate([ends - 1, ends])  # ascending: ends are odd
    need.sort()
    if not reached[need].all():
        return None
    if _leads_to(indptr, order, _csr(graph)[1], ends - 1, ends).all():  # an edge start -> end: ordered
        pass
    elif not _ordered(graph, need, ends, pts):
        return None
    # each moved edge's position in its source's block of the CSR
    lo = indptr[ends].astype(np.int64)
    cnt = indptr[ends + 1] - lo
    pos = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()))
    flags = np.zeros(order.size, bool)
    pos = pos[np.isin(order[pos], moved)]
    flags[pos] = True
    return flags


def _leads_to(indptr: np.ndarray, order: np.ndarray, dst: np.ndarray, frm: np.ndarray,
              to: np.ndarray) -> np.ndarray:
    """bool per pair: an edge ``frm[i] -> to[i]`` exists (CSR by source: ``indptr``,
    ``order``; ``dst`` in edge order)."""
    lo = indptr[frm].astype(np.int64)
    cnt = (indptr[frm + 1] - lo).astype(np.int64)
    pos = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()))
    hit = dst[order[pos]] == np.repeat(to, cnt)
    return np.bincount(np.repeat(np.arange(frm.size), cnt), weights=hit,
                       minlength=frm.size) > 0


def _ordered(graph: ExecutionGraph, need: np.ndarray, ends: np.ndarray, pts: np.ndarray
             ) -> bool:
    """True when every end point ``ends`` comes after its start in the order ``pts`` (all of
    ``need``, the starts and ends, ascending, are in it)."""
    mark = np.zeros(graph.n_points, bool)
    mark[need] = True
    at = np.flatnonzero(mark[pts])
    del mark
    if at.size != need.size:
        return False
    rank = np.empty(need.size, np.int64)
    rank[np.searchsorted(need, pts[at])] = at
    return bool(np.all(rank[np.searchsorted(need, ends - 1)]
                       < rank[np.searchsorted(need, ends)]))


def _scaled_kernel():  # type: ignore[no-untyped-def]
    """:func:`traincast.simulate.numba_kernels.propagate_scaled`, or None (as
    :func:`_row_kernel`)."""
    if not _SCALED_KERNEL:
        _SCALED_KERNEL.append(load_kernel("traincast.simulate.numba_kernels",
                                          "propagate_scaled"))
    return _SCALED_KERNEL[0]


def _rows_kernel():  # type: ignore[no-untyped-def]
    """:func:`traincast.simulate.numba_kernels.propagate_rows`, or None (as
    :func:`_row_kernel`)."""
    if not _ROWS_KERNEL:
        _ROWS_KERNEL.append(load_kernel("traincast.simulate.numba_kernels", "propagate_rows"))
    return _ROWS_KERNEL[0]


def _walk(graph: ExecutionGraph, moved: np.ndarray | None, order: np.ndarray,
          dst: np.ndarray, indptr: np.ndarray, has_in: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The pass's topological order of the reached points, the unreached points, and the
    CSR positions of the ``moved`` edges (empty: none); None where a moved edge does not
    qualify (:func:`_moved_positions`). Raises CyclicGraphError for points on a cycle."""
    reached, unreached = _reached(graph, has_in)
    ready = np.flatnonzero(~has_in & reached)
    order_pts = _topo(graph, reached, ready, indptr, dst, order)
    del ready
    n_reached = graph.n_points - unreached.size
    if order_pts.size != n_reached:
        raise CyclicGraphError(f"{n_reached - order_pts.size} points lie on dependency cycles")
    flags = np.zeros(0, bool)
    if moved is not None and moved.size:
        flags = _moved_positions(graph, moved, order, indptr, reached, order_pts)
        if flags is None:
            return None
    return order_pts, unreached, flags
