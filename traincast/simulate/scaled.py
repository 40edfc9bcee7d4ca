"""What-ifs simulated on the replay's graph, without building their lags or edges.

A what-if that multiplies events' own times (speedups: :mod:`traincast.whatif.speedup`,
:func:`traincast.whatif.scale.scale_lags`) and moves waits from collectives' ends to their
starts (``overlap=ideal``: :func:`traincast.whatif.apply.ideal_overlap_edges`) changes
nothing the simulator derives from the replay's edges but the lags it reads and the point a
moved edge leaves. :func:`simulate_scaled` therefore evaluates it on the replay's edge order
(the edge ids in the topological order of their sources, :mod:`traincast.simulate.engine`),
each scaled lag derived where it is read and each moved edge relaxed with its new source's
time; :func:`simulate_rows` does
several what-ifs in one pass, their times held in int32 against a common origin and
reduced to the ends of the steps' work. Both are the max-plus recurrence of
:func:`traincast.simulate.engine.simulate`, so the times are the same integers as
simulating the changed graph; both are compiled (numba) and give None where they do not
apply (the caller then builds the changed graph).

A simulation's int64 times (a replay's, say) that are not read for a while can make room:
:func:`lent_times` holds them as int32 against their earliest time in pages of their own
and lends their buffer (a pass's times fit it: int32[points, 2] is its size), and
:func:`halved_times` holds them in place in the first half of their own bytes and gives
the second half's pages back to the OS. Both write the same integers back on leaving; both
decline times that int32 cannot hold (a span of 2**31 ns or more, a negative time other
than -1).
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from traincast.graph.jit import kernel as load_kernel
from traincast.graph.jit import load_on_empty, read_only
from traincast.graph.model import EdgeKind, ExecutionGraph, SparsePoints
from traincast.graph.nesting import thread_parents
from traincast.simulate.engine import _compiled_kernel, _flat, _has_in, starts_lead_to_ends
from traincast.util.allocator import release_memory
from traincast.util.numba_pages import advise_away

__all__ = ["halved_times", "lent_times", "scaled_path", "simulate_rows", "simulate_scaled"]

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
    replay's edge order (:func:`traincast.simulate.numba_kernels.propagate_scaled`): each scaled lag is derived where it is read, each moved edge is
    relaxed with its new source's time when its old source is relaxed (which its new source
    precedes in the order).

    Returns int64[points] (``out`` when given: a buffer reused between calls), or None when
    this path does not apply and the caller builds the changed graph: no compiled kernel
    (numba missing, or a graph below :func:`traincast.graph.jit.min_size` points), ids
    other than the builder's int32, a moved edge that does not leave an event's end point,
    or one whose node has no edge from its start to its end (which places the start
    before the end in the replay's order).

    Raises:
        CyclicGraphError: some points of ``graph`` are on a cycle.
        ValueError: ``out`` is not int64[points].
    """
    if not scaled_path(graph):
        return None
    n_pts = graph.n_points
    has_in = _has_in(graph)
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
    walk = _walk(graph, moved, has_in)
    if walk is None:
        return None
    flat, unreached, flags = walk
    if out is not None and (out.shape != (n_pts,) or out.dtype != np.int64):
        raise ValueError(f"out must be int64[{n_pts}], got {out.dtype}{list(out.shape)}")
    times = np.empty(n_pts, np.int64) if out is None else out
    _anchor_into(graph, times)
    lag, = read_only(graph.lag)  # (one signature per lag type, the graph's or a copy's)
    _scaled_kernel()(flat, *read_only(graph.src, graph.dst), lag, graph.kind, parent,
                     changed, factor, flags, *_OWNED_KINDS, times)
    times[unreached] = -1
    return times


def simulate_rows(graph: ExecutionGraph, codes: np.ndarray, tables: np.ndarray,
                  moved: np.ndarray | None = None, moved_row: int = -1, *,
                  node: np.ndarray, head: np.ndarray, out: np.ndarray | None = None,
                  marks: np.ndarray | None = None, lend: np.ndarray | None = None
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
        marks: point ids whose times alone are returned (below); None: all of them.
        lend: with ``marks``, a simulation's int64[points] times not read meanwhile (the
            replay's, say) whose buffer holds the pass's times when ``B`` is 2, lent by
            :func:`lent_times` for the pass alone (only then are its int32 pages held
            beside the pass's times) and written back before this returns.

    Returns:
        (times, origin, tail): int32[points, B], each point's time less ``origin`` (the
        earliest anchor, ns) or the int32 minimum for -1 (no time), or with ``marks``
        int64[marks, B], the times of those points (ns, -1: none); int64[B, groups], the
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
    has_in = _has_in(graph)
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
    walk = _walk(graph, moved, has_in)
    if walk is None:
        return None
    flat, unreached, flags = walk
    parent = thread_parents(graph)
    if parent.dtype != np.int32:
        parent = parent.astype(np.int32)
    codes = np.ascontiguousarray(codes, np.uint8)
    tables = np.ascontiguousarray(tables, np.float64)
    bounds = np.append(head, node.size).astype(np.int64)
    args = (flat, *read_only(graph.src, graph.dst, graph.lag), graph.kind, parent, codes,
            tables, flags, moved_row, *_OWNED_KINDS, int(unreached.size), node, bounds)
    # the kernel's load before the times: its transient pages not on top of them
    load_on_empty(_rows_kernel(), *args, np.empty((0, codes.shape[1]), np.int32),
                  np.empty((codes.shape[1], 0), np.int64))
    release_memory()  # what the walk freed (its reach mask), back before the times
    shape = (n_pts, codes.shape[1])
    lend = lend if marks is not None and shape[1] == 2 else None
    with contextlib.nullcontext(None) if lend is None else lent_times(lend) as spare:
        if spare is not None and spare.shape == (n_pts,):
            out = spare.view(np.int32).reshape(shape)
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
        if marks is not None:  # the marks' times, read before a lent buffer goes back
            rel = times[np.asarray(marks, np.int64)].astype(np.int64)
            times = np.where(rel == np.iinfo(np.int32).min, -1, rel + origin)
    low = np.iinfo(np.int64).min
    tail = np.where(tail == low, low, tail + origin)
    return times, origin, tail


@contextmanager
def lent_times(times: np.ndarray) -> Iterator[np.ndarray | None]:
    """Lend the buffer of a simulation's times while they are not read: within the block,
    ``times`` (int64[points], ns, -1 for none; e.g. a replay's ``result.times``) is held
    as int32 against its earliest time, in pages of its own beside the buffer, and the
    block gets the buffer, free to overwrite (e.g. as ``simulate_rows``' ``out``,
    ``view(np.int32)`` of shape (points, 2), or ``simulate_scaled``'s); on leaving, even
    by an exception, the same integers are written back into the same array. The block
    gets None (nothing lent, ``times`` untouched) where :func:`_fits_int32` says no."""
    lend, lo = _fits_int32(times)
    if lend is None:
        yield None
        return
    rel = np.empty(times.size, np.int32)
    lend(times, rel, lo, 1)
    try:
        yield times
    finally:
        lend(times, rel, lo, 2)
        del rel
        release_memory()  # the int32 copy's pages (on the heap, often), back to the OS


@contextmanager
def halved_times(times: np.ndarray) -> Iterator[bool]:
    """Hold a simulation's times in half their pages while they are not read: within the
    block, ``times`` (int64[points], ns, -1 for none; e.g. a replay's ``result.times``)
    holds in the first half of its own bytes each time as int32 against the earliest one,
    and the pages of the second half are given back to the OS (``madvise(MADV_DONTNEED)``,
    :func:`traincast.util.numba_pages.advise_away`): no copy is ever made beside them. On
    leaving, even by an exception, the same integers are written back in place (from the
    last point down; only the second half's pages fault again). The block gets True, or
    False (``times`` untouched) where :func:`_fits_int32` says no. Nothing may read or
    write ``times`` within the block."""
    lend, lo = _fits_int32(times)
    if lend is None:
        yield False
        return
    none = np.empty(0, np.int32)
    lend(times, none, lo, 3)  # forward: point i's int32 over bytes of point i // 2 (read)
    try:
        _advise_pages(times.ctypes.data + 4 * times.size, times.ctypes.data + 8 * times.size)
        yield True
    finally:
        lend(times, none, lo, 4)  # backward: point i's int64 over the int32 of 2i, 2i + 1


def _fits_int32(times: np.ndarray):  # type: ignore[no-untyped-def]
    """(:func:`traincast.simulate.numba_kernels.lend_times`, the earliest time >= 0) when
    ``times`` can be held as int32 against it: a writable C-contiguous int64[points]
    array, every time >= 0 within 2**31 - 1 ns of the earliest, the others -1, and the
    compiled kernel there and worth loading for their size (:func:`traincast.graph.jit.
    worth_compiling`: a small run neither imports numba for it nor gains pages worth it);
    else (None, 0)."""
    lend = load_kernel("traincast.simulate.numba_kernels", "lend_times", times.size)
    if (lend is None or times.dtype != np.int64 or times.ndim != 1
            or not times.flags.c_contiguous or not times.flags.writeable):
        return None, 0
    lo, hi, only_none = lend(times, np.empty(0, np.int32), 0, 0)
    if hi - lo >= (1 << 31) - 1 or not only_none:
        return None, 0
    return lend, int(lo)


def _advise_pages(start: int, end: int) -> None:
    """Advise away the whole pages within the bytes [``start``, ``end``) (addresses)."""
    lo = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    hi = end // mmap.PAGESIZE * mmap.PAGESIZE
    if hi > lo:
        advise_away([(lo, hi)])


def scaled_path(graph: ExecutionGraph) -> bool:
    """True when :func:`simulate_scaled` simulates what-ifs on ``graph``: the compiled
    kernel is there and worth loading for its size, and its arrays have the builder's
    types (int32 ids, int32 or int64 lags, int8 kinds)."""
    if _compiled_kernel(graph.n_points) is None or _scaled_kernel() is None:
        return False
    src, dst = graph.src, graph.dst
    return bool(src.dtype == dst.dtype == np.int32 and src.flags.c_contiguous
                and dst.flags.c_contiguous and src.size < (1 << 31) - 1
                and graph.n_points < (1 << 31) - 1 and graph.lag.dtype in (np.int32, np.int64)
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


def _moved_edges(graph: ExecutionGraph, moved: np.ndarray, reached: np.ndarray
                 ) -> np.ndarray | None:
    """bool[edges]: the edges ``moved`` (ids; from an event's end point to its start)
    marked, None when one does not leave an end point or an edge from that event's start
    to its end does not place the start before the end in the topological order."""
    src = graph.src[moved].astype(np.int64)
    if src.size and ((src & 1) == 0).any() or (src >= graph.n_event_points).any():
        return None
    # each moved edge is relaxed where its old source's edges are (after its old source
    # is final): its new source must precede its old one (the node's start before its end)
    ends = np.unique(src)
    if not reached[ends - 1].all() or not reached[ends].all():
        return None
    if not starts_lead_to_ends(graph, ends):
        return None
    flags = np.zeros(graph.src.size, bool)
    flags[moved] = True
    return flags


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


def _walk(graph: ExecutionGraph, moved: np.ndarray | None, has_in: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The pass's edge order (:func:`traincast.simulate.engine._flat`), the unreached
    points, and the ``moved`` edges marked (empty: none); None where a moved edge does
    not qualify (:func:`_moved_edges`). Raises CyclicGraphError for points on a cycle."""
    reached, unreached = _reached(graph, has_in)
    flat = _flat(graph, reached, np.flatnonzero(~has_in & reached))
    flags = np.zeros(0, bool)
    if moved is not None and moved.size:
        flags = _moved_edges(graph, moved, reached)
        if flags is None:
            return None
    return flat, unreached, flags
