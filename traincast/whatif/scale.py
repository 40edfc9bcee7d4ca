"""Scale the durations of selected events: the simplest what-if.

A GPU op's or host collective's duration is its ``EXEC`` edge; a host op's is the ``THREAD``
edges between its start and end points (its own CPU time and that of its children).
"""

from __future__ import annotations

import numpy as np

from traincast.errors import ParameterError
from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.trace.schema import KINDS, OP_FAMILIES
from traincast.trace.traceset import TraceSet


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
        mask &= np.asarray(ev.column("kind").to_pylist()) == kind
    if op_family is not None:
        if op_family not in OP_FAMILIES:
            raise ParameterError(f"unknown op family {op_family!r} "
                                 f"(one of {', '.join(OP_FAMILIES)})")
        mask &= np.asarray(ev.column("op_family").to_pylist()) == op_family
    if name_contains is not None:
        names = ev.column("name").to_pylist()
        mask &= np.fromiter((name_contains in n for n in names), bool, len(names))
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
    lag = graph.lag.copy()
    exe = graph.edges_of_kind(EdgeKind.EXEC)
    nodes = graph.src[exe] // 2
    hit = exe[selected[graph.node_event[nodes]]]
    lag[hit] = np.rint(lag[hit] * factor).astype(np.int64)
    return lag
