"""Physical bounds of a predicted step, per (rank, iteration) row of ``iterations``.

:func:`step_bounds` gives, for an execution graph (the replay's or a what-if's changed one)
and the measured TraceSet it was built from, one row per row of ``measured.iterations``
(ns, int64):

- ``device_bound_ns``: the device work the step launched (the GPU ops at the end of its
  ``LAUNCH`` edges, :func:`traincast.simulate.timeline.launched_work`) of kinds kernel, memcpy
  and memset, summed per (device, stream) with the graph's durations (``EXEC`` lags, i.e.
  after the what-if's scaling); the busiest stream's sum. A stream runs its ops one at a
  time, so the step holds at least this.
- ``host_bound_ns``: the host's own work: the longest path over the ``THREAD`` edges (a host
  thread's CPU time between consecutive points, after the what-if's scaling) whose both ends
  lie in the step's measured marker window: the busiest host thread's own time. The wait
  models (:mod:`traincast.graph.waits`) lower a waiting call's ``THREAD`` segment to its
  intrinsic cost, so the waits they recognise are excluded (a wait they do not recognise
  stays the host's work, as the simulation treats it).
- ``comm_bound_ns``: the communication the step launched at the modelled bandwidth: per
  (device, stream), the sum of its collectives' transfer times (``COLLECTIVE`` lags: barrier
  -> end, after a bandwidth or world-size what-if); the busiest stream's sum. A stream's
  collectives run one after the other, each at least its transfer after its last member
  arrives, so the step holds at least this much communication (exposed or not).
- ``bound_ns``: the largest of the three: the step's lower bound.
- ``added_ns``: work the what-if added to the step's iteration: the sum over every edge
  owned by a step of that iteration (any rank: a collective carries a delay to its peers)
  of the positive change of its lag against ``baseline`` (0 without a baseline).

Rows of steps without a marker get 0 bounds (their window is their rank's whole span). The
upper bound of a predicted step is ``max(measured, replay) + added_ns`` (the longest path
grows by at most the lags added along it); :class:`traincast.predict.prediction.Prediction`
adds it as ``upper_bound_ns``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.simulate.engine import simulate
from traincast.simulate.timeline import launched_work, step_work
from traincast.trace import arrow as A
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet

__all__ = ["BOUND_COLUMNS", "step_bounds"]

#: columns of :func:`step_bounds` (ns)
BOUND_COLUMNS = ("device_bound_ns", "host_bound_ns", "comm_bound_ns", "bound_ns", "added_ns")


def _busiest(row: np.ndarray, key: np.ndarray, value: np.ndarray, n_rows: int) -> np.ndarray:
    """int64[n_rows]: per row, the largest sum of ``value`` over one ``key``."""
    out = np.zeros(n_rows, np.int64)
    if row.size == 0:
        return out
    pair, inv = np.unique(np.stack([row, key]), axis=1, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=value, minlength=pair.shape[1])
    np.maximum.at(out, pair[0], np.rint(sums).astype(np.int64))
    return out


def _host_bound(graph: ExecutionGraph, node_row: np.ndarray, n_rows: int) -> np.ndarray:
    """int64[n_rows]: per row, the longest path over the ``THREAD`` edges with both ends in
    the row's step (a thread's own work; a host thread's segments nest, so their plain sum
    would count a parent's and its children's time twice)."""
    th = graph.edges_of_kind(EdgeKind.THREAD)
    s_row = node_row[graph.src[th] // 2]
    th = th[(s_row >= 0) & (s_row == node_row[graph.dst[th] // 2])]
    out = np.zeros(n_rows, np.int64)
    if th.size == 0:
        return out
    sub = ExecutionGraph(graph.node_event, graph.node_rank, graph.measured, graph.src[th],
                         graph.dst[th], graph.lag[th], graph.kind[th],
                         np.zeros(graph.n_points, np.int64))
    t = simulate(sub).times
    dst = graph.dst[th]
    np.maximum.at(out, node_row[dst // 2], t[dst])
    return out


def step_bounds(measured: TraceSet, graph: ExecutionGraph,
                baseline: ExecutionGraph | None = None) -> pd.DataFrame:
    """One row per row of ``measured.iterations``: columns rank, iteration and
    :data:`BOUND_COLUMNS` (ns; see the module docstring). ``baseline``: the unchanged graph
    the what-if's ``graph`` was derived from (same edges), for ``added_ns``."""
    it = measured.iterations
    n_rows = it.num_rows
    ev = measured.events
    kinds = ev.column("kind").to_pandas().astype(str).to_numpy()
    device = A.to_numpy(ev.column("device")).astype(np.int64)
    stream = A.to_numpy(ev.column("stream")).astype(np.int64)
    stream_key = device * (1 << 32) + stream

    node_row = step_work(measured, graph)
    dev, dev_row = launched_work(measured, graph)

    exe = graph.exec_edge_of_node()
    dur = np.where(exe >= 0, graph.lag[np.clip(exe, 0, None)], 0)
    work = np.isin(kinds[dev], GPU_WORK_KINDS) & (device[dev] >= 0)
    device_b = _busiest(dev_row[work], stream_key[dev[work]], dur[dev[work]], n_rows)

    host_b = _host_bound(graph, node_row, n_rows)

    co = graph.edges_of_kind(EdgeKind.COLLECTIVE)
    co = co[graph.dst[co] < graph.n_event_points]
    member = graph.dst[co] // 2
    c_row = node_row[member]
    ok = c_row >= 0
    comm_b = _busiest(c_row[ok], stream_key[member[ok]], graph.lag[co[ok]], n_rows)

    added = np.zeros(n_rows, np.int64)
    if baseline is not None and baseline.lag.size == graph.lag.size:
        inc = np.maximum(graph.lag - baseline.lag, 0)
        pt = np.where(graph.src < graph.n_event_points, graph.src, graph.dst)
        pt = np.where(pt < graph.n_event_points, pt, 0)
        e_row = node_row[pt // 2]
        sel = (e_row >= 0) & (inc > 0)
        per_row = np.bincount(e_row[sel], weights=inc[sel], minlength=n_rows)
        it_iter = A.to_numpy(it.column("iteration")).astype(np.int64)
        per_iter = pd.Series(per_row).groupby(it_iter).transform("sum").to_numpy()
        added = np.rint(per_iter).astype(np.int64)

    df = it.select(["rank", "iteration"]).to_pandas()
    df["device_bound_ns"] = device_b
    df["host_bound_ns"] = host_b
    df["comm_bound_ns"] = comm_b
    df["bound_ns"] = np.maximum(np.maximum(device_b, host_b), comm_b)
    df["added_ns"] = added
    return df
