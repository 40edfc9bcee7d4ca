"""Physical bounds of a predicted step, per (rank, iteration) row of ``iterations``.

:func:`step_bounds` gives, for an execution graph (the replay's or a what-if's changed one)
and the measured TraceSet it was built from, one row per row of ``measured.iterations``
(ns, int64):

- ``device_bound_ns``: the device work the step launched (the GPU ops at the end of its
  ``LAUNCH`` edges, :func:`traincast.simulate.timeline.launched_work`) of kinds kernel, memcpy
  and memset, summed per (device, stream) with the graph's durations (``EXEC`` lags, i.e.
  after the what-if's scaling); the busiest stream's sum, less the step's measured spill
  (:func:`traincast.simulate.timeline.measured_spill`: the tail a step may leave to the
  next one, as :func:`~traincast.simulate.timeline.step_windows` does). A stream runs its
  ops one at a time, so the step holds at least this.
- ``host_bound_ns``: the host's own work: the longest path over the ``THREAD`` edges (a host
  thread's CPU time between consecutive points, after the what-if's scaling) whose both ends
  lie in the step's measured marker window: the step's host thread's own time. The wait
  models (:mod:`traincast.graph.waits`) lower a waiting call's ``THREAD`` segment to its
  intrinsic cost, so the waits they recognise are excluded (a wait they do not recognise
  stays the host's work, as the simulation treats it).
- ``comm_bound_ns``: the communication the step launched at the modelled bandwidth: per
  (device, stream), the sum of its collectives' transfer times (``COLLECTIVE`` lags: barrier
  -> end, after a bandwidth or world-size what-if); the busiest stream's sum. A stream's
  collectives run one after the other, each at least its transfer after its last member
  arrives, so the step holds at least this much communication (exposed or not).
- ``bound_ns``: the largest of the three: the step's lower bound.
- ``added_ns``: work the what-if added before the step's end: the positive change of every
  edge's lag against ``baseline`` (0 without a baseline), summed over the edges owned by the
  steps of this and earlier iterations (all ranks: a collective carries a delay to its
  peers, a queued device carries one to the next step) and the edges of no step.

:func:`bounds_table` runs a list of what-ifs on one trace (the replay built once) and gives
each one's predicted steps beside their bounds (what the property tests and
``benchmarks/whatif_bounds.py`` check).

A rank recorded as one step without a marker owns all its events; other steps without a
marker get 0 bounds. The upper bound of a predicted step (:func:`upper_bound_ns`) is
``max(measured, replay + shift) + added_ns``, where ``shift`` is how much earlier the step
starts than in the replay (0 when it does not): a point's time grows by at most the lags added
on the paths into it, so the step ends at most ``added_ns`` after its replayed end, and a step
whose start a speed-up moved earlier (its host reached the marker sooner) may hold work that
the device could not finish sooner; :class:`traincast.predict.prediction.Prediction` adds it
as ``upper_bound_ns``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traincast.graph.model import EdgeKind, ExecutionGraph, SparsePoints
from traincast.simulate.engine import simulate
from traincast.simulate.replay import Replay
from traincast.simulate.timeline import launched_work, measured_spill, step_windows, step_work
from traincast.trace import arrow as A
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory
from traincast.whatif.spec import parse_what_if

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["BOUND_COLUMNS", "bounds_table", "step_bound_columns", "step_bounds"]

#: columns of :func:`step_bounds` (ns)
BOUND_COLUMNS = ("device_bound_ns", "host_bound_ns", "comm_bound_ns", "bound_ns", "added_ns")


def _busiest(row: np.ndarray, key: np.ndarray, value: np.ndarray, n_rows: int) -> np.ndarray:
    """int64[n_rows]: per row, the largest sum of ``value`` over one ``key``."""
    out = np.zeros(n_rows, np.int64)
    if row.size == 0:
        return out
    # the (row, key) pairs by a stable sort: each pair's values in a run, summed
    order = np.lexsort((key, row))
    r, k = row[order], key[order]
    head = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (k[1:] != k[:-1])])
    sums = np.add.reduceat(np.asarray(value, np.float64)[order], head)
    np.maximum.at(out, r[head], np.rint(sums).astype(np.int64))
    return out


def _host_bound(measured: TraceSet, graph: ExecutionGraph, node_row: np.ndarray, n_rows: int
                ) -> np.ndarray:
    """int64[n_rows]: per row, the longest path over the ``THREAD`` edges with both ends in
    the row's step (a thread's own work; a host thread's segments nest, so their plain sum
    would count a parent's and its children's time twice)."""
    # the edges kept as a mask (a byte per edge): the per-edge index columns are gone
    # before the longest paths are simulated, and made again, of the kept edges, after
    keep = _host_edges(measured, graph, node_row, n_rows)
    out = np.zeros(n_rows, np.int64)
    if not keep.any():
        return out
    # the step rows' and the mask's temporaries, freed, back to the OS before the lags and
    # times of the longest paths are laid out (they would not fit in the holes they left)
    release_memory()
    t = _longest_paths(graph, keep)
    th = np.flatnonzero(keep)
    del keep
    dst = graph.dst[th]
    row = _rows_of(node_row, n_rows)[graph.src[th] // 2]
    np.maximum.at(out, row, t[dst])
    return out


def _rows_of(node_row: np.ndarray, n_rows: int) -> np.ndarray:
    """``node_row`` in int32 when the rows fit (half the bytes of every gather of it)."""
    return node_row.astype(np.int32) if n_rows < np.iinfo(np.int32).max else node_row


def _host_edges(measured: TraceSet, graph: ExecutionGraph, node_row: np.ndarray,
                n_rows: int) -> np.ndarray:
    """bool[edges]: the ``THREAD`` edges of :func:`_host_bound` (both ends in one row's
    step, not past the step's marker when the row has one); a slice of the edges at a time
    (:data:`_SLICE`), so the per-edge temporaries stay small."""
    nr = _rows_of(node_row, n_rows)
    mk = A.to_numpy(measured.iterations.column("marker_event")).astype(np.int64)
    out = graph.kind == int(EdgeKind.THREAD)
    for lo in range(0, graph.n_edges, _SLICE):
        hi = min(lo + _SLICE, graph.n_edges)
        th = np.flatnonzero(out[lo:hi]) + lo
        dst = graph.dst[th]
        row = nr[graph.src[th] // 2]
        keep = (row >= 0) & (row == nr[dst // 2])
        m = mk[row]
        # a host op that outlives its marker (another thread's) is not bounded by the step
        meas = graph.measured  # (laid out once for both reads)
        keep &= (m < 0) | (meas[dst] <= meas[2 * np.clip(m, 0, None) + 1])
        del meas
        out[th[~keep]] = False
    return out


#: edges per slice of :func:`_host_edges`
_SLICE = 1 << 20


#: the lag of an edge left out of :func:`_longest_paths`: every time it could add to is
#: >= 0 and far smaller than its size, so ``t[src] + lag`` never wins a maximum (no overflow)
_NO_EDGE = -(1 << 62)
#: :data:`_NO_EDGE` in a graph's int32 lags: exact while every time stays <= its size
#: (a left-out edge could only win from a source later than that), checked after
_NO_EDGE32 = -(1 << 31)


def _longest_paths(graph: ExecutionGraph, edges: np.ndarray) -> np.ndarray:
    """int64[points]: per point, the longest path into it over ``edges`` (ids, or a bool
    mask over the edges) alone, every point starting at 0 (the simulation of a graph
    holding only those edges, all points anchored at 0).

    When every point of ``graph`` is reached (anchored or fed by an edge, as in a replay),
    this is ``graph`` itself simulated with its other edges' lags at :data:`_NO_EDGE`:
    the same times (a path through a left-out edge ends below 0), read along the
    simulator's edge order that ``graph`` keeps (``graph.structure``, found by its
    replay) instead of sorting and ordering the subgraph again."""
    n_pts = graph.n_points
    zero = SparsePoints(n_pts, np.empty(0, np.int64), np.empty(0, np.int64), fill=0)
    if _reaches_every_point(graph):
        # in the graph's int32 lags when they are (the simulator's one signature), else int64
        narrow = graph.lag.dtype == np.int32
        no_edge = np.int32(_NO_EDGE32) if narrow else np.int64(_NO_EDGE)
        if edges.dtype == bool:  # one array: no gathered copy of the kept lags
            lag = np.where(edges, graph.lag, no_edge)
        else:
            lag = np.full(graph.n_edges, no_edge)
            lag[edges] = graph.lag[edges]
        masked = ExecutionGraph(graph.node_event, graph.node_rank, vars(graph)["_measured"],
                                graph.src, graph.dst, lag, graph.kind, zero,
                                structure=graph.structure)
        times = simulate(masked).times
        if not narrow or int(times.max(initial=0)) <= -_NO_EDGE32:
            return times
        del times  # a path past int32's mark: again with the int64 one
        masked.lag = np.where(lag == no_edge, np.int64(_NO_EDGE), lag)
        return simulate(masked).times
    if edges.dtype == bool:
        edges = np.flatnonzero(edges)
    sub = ExecutionGraph(graph.node_event, graph.node_rank, vars(graph)["_measured"],
                         graph.src[edges], graph.dst[edges], graph.lag[edges],
                         graph.kind[edges], zero)
    return simulate(sub).times


def _reaches_every_point(graph: ExecutionGraph) -> bool:
    """True when every point of ``graph`` has an anchor or an incoming edge (the
    simulator's reached points are all of them)."""
    fed = np.zeros(graph.n_points, bool)
    fed[graph.dst] = True
    if fed.all():
        return True
    anchor = graph.__dict__.get("_anchor")
    if isinstance(anchor, SparsePoints):  # the anchored points, without laying them out
        if anchor.fill >= 0:
            return True
        fed[anchor.index[anchor.values >= 0]] = True
        return bool(fed.all())
    return bool(np.all(fed | (graph.anchor >= 0)))


def step_bounds(measured: TraceSet, graph: ExecutionGraph,
                baseline: ExecutionGraph | None = None) -> pd.DataFrame:
    """One row per row of ``measured.iterations``: columns rank, iteration and
    :data:`BOUND_COLUMNS` (ns; see the module docstring). ``baseline``: the unchanged graph
    the what-if's ``graph`` was derived from (same edges), for ``added_ns``."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    return pd.DataFrame(step_bound_columns(measured, graph, baseline))


def step_bound_columns(measured: TraceSet, graph: ExecutionGraph,
                       baseline: ExecutionGraph | None = None) -> dict[str, np.ndarray]:
    """:func:`step_bounds` as numpy columns (the same names, dtypes and rows); pandas only
    with a ``baseline`` (a what-if's ``added_ns``)."""
    it = measured.iterations
    n_rows = it.num_rows
    # the host bound first: its temporaries are gone before the device columns are read
    node_row = step_work(measured, graph)
    host_b = _host_bound(measured, graph, node_row, n_rows)

    ev = measured.events
    kind, kinds = A.dictionary_parts(ev.column("kind"))
    gpu_work = np.isin(kind, [i for i, k in enumerate(kinds) if k in GPU_WORK_KINDS])
    device = A.to_numpy(ev.column("device"))
    stream = A.to_numpy(ev.column("stream"))

    def stream_key(rows: np.ndarray) -> np.ndarray:
        return device[rows].astype(np.int64) * (1 << 32) + stream[rows].astype(np.int64)

    dev, dev_row = launched_work(measured, graph)

    work = gpu_work[dev] & (device[dev] >= 0)
    exe = graph.exec_edge_of_node()[dev[work]]  # (the durations of those nodes alone)
    dur = np.where(exe >= 0, graph.lag[np.clip(exe, 0, None)], 0)
    del exe
    spill = measured_spill(measured, graph)
    # the step may leave its measured spill to the next step (step_windows' rule)
    device_b = np.maximum(
        _busiest(dev_row[work], stream_key(dev[work]), dur, n_rows) - spill, 0)

    co = graph.edges_of_kind(EdgeKind.COLLECTIVE)
    co = co[graph.dst[co] < graph.n_event_points]
    member = graph.dst[co] // 2
    c_row = node_row[member]
    ok = c_row >= 0
    comm_b = _busiest(c_row[ok], stream_key(member[ok]), graph.lag[co[ok]], n_rows)

    added = np.zeros(n_rows, np.int64)
    if baseline is not None and baseline.lag.size == graph.lag.size:
        inc = np.maximum(graph.lag.astype(np.int64) - baseline.lag, 0)  # (int32 may not hold it)
        pt = np.where(graph.src < graph.n_event_points, graph.src, graph.dst)
        pt = np.where(pt < graph.n_event_points, pt, 0)
        e_row = node_row[pt // 2]
        sel = (e_row >= 0) & (inc > 0)
        per_row = np.bincount(e_row[sel], weights=inc[sel], minlength=n_rows)
        loose = float(inc[e_row < 0].sum())  # edges of no step: between or outside steps
        it_iter = A.to_numpy(it.column("iteration")).astype(np.int64)
        import pandas as pd  # lazy: a what-if's only; ~0.3 s of start-up

        per_iter = pd.Series(per_row).groupby(it_iter).sum().sort_index().cumsum()
        added = np.rint(per_iter.reindex(it_iter).to_numpy() + loose).astype(np.int64)

    return {"rank": A.to_numpy(it.column("rank")),
            "iteration": A.to_numpy(it.column("iteration")),
            "device_bound_ns": device_b, "host_bound_ns": host_b, "comm_bound_ns": comm_b,
            "bound_ns": np.maximum(np.maximum(device_b, host_b), comm_b), "added_ns": added}


def upper_bound_ns(measured_ns: np.ndarray, replay_ns: np.ndarray, added_ns: np.ndarray,
                   replay_start: np.ndarray | None = None,
                   predicted_start: np.ndarray | None = None) -> np.ndarray:
    """int64 per step: ``max(measured, replay + shift) + added`` (ns), ``shift`` =
    ``max(replay_start - predicted_start, 0)`` (0 when the starts are not given)."""
    replay = np.asarray(replay_ns, np.int64)
    if replay_start is not None and predicted_start is not None:
        replay = replay + np.maximum(np.asarray(replay_start, np.int64)
                                     - np.asarray(predicted_start, np.int64), 0)
    return np.maximum(np.asarray(measured_ns, np.int64), replay) + np.asarray(added_ns,
                                                                                np.int64)


def bounds_table(base: Replay, what_ifs: list[list[str]]) -> pd.DataFrame:
    """Each what-if of ``what_ifs`` (lists of ``key=value`` strings, as ``predict`` takes;
    an empty list is the replay itself) applied to ``base`` (the unchanged replay of
    ``base.measured``) and simulated: one row per what-if and (rank, iteration) with columns
    what_if (the strings joined by a space), rank, iteration, measured_ns, replay_ns,
    predicted_ns, start_ns and end_ns (the simulated step window, ns on the trace's clock),
    :data:`BOUND_COLUMNS`, upper_bound_ns (:func:`upper_bound_ns`). The step windows are :func:`traincast.simulate.timeline.step_windows`, as in
    :class:`traincast.predict.prediction.Prediction`; a what-if's ``batch_size`` with the
    default fitted efficiency fits the compute model once.

    Raises:
        ParameterError: a bad what-if.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    from traincast.whatif.apply import apply_what_if  # lazy: a what-if's only (~35 ms)

    ts = base.measured
    measured_ns = A.to_numpy(ts.iterations.column("dur")).astype(np.int64)
    replay_ns = base.steps["predicted_ns"].to_numpy(np.int64)
    replay_start, _ = step_windows(ts, base.graph, base.result.times)
    compute = None
    out = []
    for w in what_ifs:
        what = parse_what_if(w)
        if what.empty:
            graph, times = base.graph, base.result.times
        else:
            if compute is None and what.batch_size and what.efficiency == "fitted":
                # lazy: a batch what-if alone fits it (every predict would import the models)
                from traincast.costs.compute import fit_compute_model

                compute = fit_compute_model(ts)
            graph = apply_what_if(ts, base.graph, what, compute=compute).graph
            times = simulate(graph).times
        start, end = step_windows(ts, graph, times)
        df = step_bounds(ts, graph, None if what.empty else base.graph)
        df.insert(0, "what_if", " ".join(w))
        df["measured_ns"] = measured_ns
        df["replay_ns"] = replay_ns
        df["predicted_ns"] = end - start
        df["start_ns"], df["end_ns"] = start, end
        df["upper_bound_ns"] = upper_bound_ns(measured_ns, replay_ns, df["added_ns"],
                                              replay_start, start)
        out.append(df)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()
