"""Scale the durations of selected events: the simplest what-if.

A GPU op's or host collective's duration is its ``EXEC`` edge; a host op's is the ``THREAD``
edges between its start and end points (its own CPU time and that of its children).
:func:`scale_lags` multiplies each event's own time by a per-event factor (the what-ifs of
:mod:`traincast.whatif.apply`): its ``EXEC`` edge, the ``COLLECTIVE`` edges into its end and
the ``THREAD`` segments it owns, the edges found once per graph structure.
"""

from __future__ import annotations

import numpy as np

from traincast.errors import ParameterError
from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.graph.nesting import thread_parents
from traincast.trace.schema import KINDS, OP_FAMILIES
from traincast.trace.traceset import TraceSet
from traincast.whatif.match import event_values


def select_events(ts: TraceSet, *, kind: str | None = None, op_family: str | None = None,
                  name_contains: str | None = None, rank: int | None = None) -> np.ndarray:
    """bool[n_events]: events matching every given criterion.

    Raises:
        ParameterError: an unknown kind or op family.
    """
    ev = ts.events
    mask = np.ones(ev.num_rows, bool)
    if kind is not None:
        if kind not in KINDS:
            raise ParameterError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
        mask &= event_values(ts, "kind").equals(kind)
    if op_family is not None:
        if op_family not in OP_FAMILIES:
            raise ParameterError(f"unknown op family {op_family!r} "
                                 f"(one of {', '.join(OP_FAMILIES)})")
        mask &= event_values(ts, "op_family").equals(op_family)
    if name_contains is not None:
        mask &= event_values(ts, "name").mask(lambda n: name_contains in n)
    if rank is not None:
        mask &= ev.column("rank").to_numpy() == rank
    return mask


def scale_durations(graph: ExecutionGraph, selected: np.ndarray, factor: float) -> np.ndarray:
    """Edge lags (int64 ns) with the durations of ``selected`` events multiplied by ``factor``.

    Only GPU ops and host collectives (events with an ``EXEC`` edge) are scaled; pass the
    result to :func:`traincast.simulate.engine.simulate`.

    Raises:
        ParameterError: ``factor`` is negative or not finite.
    """
    if not np.isfinite(factor) or factor < 0:
        raise ParameterError(f"scale factor must be a finite number >= 0, got {factor}")
    lag = graph.lag.astype(np.int64)  # (a copy, int64: a factor may lengthen a lag)
    exe = graph.edges_of_kind(EdgeKind.EXEC)
    nodes = graph.src[exe] // 2
    hit = exe[selected[graph.node_event[nodes]]]
    lag[hit] = np.rint(lag[hit] * factor).astype(np.int64)
    return lag


def scale_lags(graph: ExecutionGraph, factor: np.ndarray, lag: np.ndarray,
               at: np.ndarray | None = None) -> None:
    """Multiply each event's own time by ``factor[event]``, in place on ``lag`` (int64[E],
    lags of ``graph``'s edges): its ``EXEC`` edge, the ``COLLECTIVE`` edges into its end
    (a collective's transfer) and the ``THREAD`` segments it owns
    (:func:`traincast.graph.nesting.thread_edge_owner`); each changed lag is
    ``rint(lag * factor)``. ``at``: int[E], the position in ``lag`` of each edge's lag
    (default: the edge's id)."""
    if not np.any(factor != 1.0):  # rint(lag * 1.0) is lag: nothing changes
        return
    edges, events = _owned_edges(graph)
    scale_owned(factor, lag, edges if at is None else at[edges], events)


def owned_edges(graph: ExecutionGraph) -> tuple[np.ndarray, np.ndarray]:
    """(edges, events), read-only: every edge that carries an event's own time (what
    :func:`scale_lags` scales) and that event, by edge kind then id; kept in
    ``graph.structure`` while the edge arrays are the same objects (int32 when the ids
    fit)."""
    return _owned_edges(graph)


def scale_owned(factor: np.ndarray, lag: np.ndarray, at: np.ndarray, events: np.ndarray
                ) -> None:
    """:func:`scale_lags` with the owned edges given: ``lag[at[k]]`` is the lag of the
    ``k``-th edge of :func:`owned_edges`, which carries ``events[k]``'s own time."""
    changed = factor != 1.0  # rint(lag * 1.0) is lag: only the others change
    for lo in range(0, events.size, _CHUNK):  # bounded temporaries (each edge once)
        ev = events[lo:lo + _CHUNK]
        hit = changed[ev]
        ev = ev[hit]
        e = at[lo:lo + _CHUNK][hit]
        v = lag[e].astype(np.float64)
        v *= factor[ev]
        np.rint(v, out=v)
        lag[e] = v  # integral values: the same as ``.astype(np.int64)``


#: owned edges rescaled at a time by :func:`scale_owned`
_CHUNK = 1 << 20


def _owned_edges(graph: ExecutionGraph) -> tuple[np.ndarray, np.ndarray]:
    """(edges, events): every edge that carries an event's own time and that event (EXEC:
    the source's event; COLLECTIVE: the destination's; THREAD: the owner,
    :func:`traincast.graph.nesting.thread_edge_owner`), by kind then edge id;
    kept in ``graph.structure`` while the edge arrays are the same objects (int32 when the
    ids fit)."""
    key = (graph.src, graph.dst, graph.kind, graph.thread_parent)
    hit = graph.structure.get("owned_edges")
    if hit is not None and all(a is b for a, b in zip(hit[0], key, strict=True)):
        return hit[1]
    it = np.int32 if max(graph.n_edges, graph.n_nodes) < (1 << 31) - 1 else np.int64
    exe = graph.edges_of_kind(EdgeKind.EXEC).astype(it)
    col = graph.edges_of_kind(EdgeKind.COLLECTIVE).astype(it)
    th = graph.edges_of_kind(EdgeKind.THREAD).astype(it)
    # thread_edge_owner on the THREAD edges alone: point_owner of each segment's source
    # (its node from a start point, the node's thread parent from an end point), in place
    own = graph.src[th].astype(it)
    odd = (own & 1).astype(bool)
    own >>= 1  # point ids are >= 0: the node of point p is p // 2
    own[odd] = thread_parents(graph)[own[odd]]
    del odd
    keep = own >= 0
    n_head = exe.size + col.size
    n = n_head + int(np.count_nonzero(keep))
    edges = np.empty(n, it)
    events = np.empty(n, it)
    edges[:exe.size] = exe
    edges[exe.size:n_head] = col
    edges[n_head:] = th[keep]
    del th
    events[:exe.size] = graph.src[exe] >> 1
    events[exe.size:n_head] = graph.dst[col] >> 1
    events[n_head:] = own[keep]
    out = (edges, events)
    for arr in out:
        arr.flags.writeable = False
    graph.structure["owned_edges"] = (key, out)
    return out
