"""Idle-time attribution: why the device sat idle, from the execution graph.

HTA classifies each idle gap on a stream by its length and by whether the next kernel's
launch came after the previous kernel ended ("host wait", "kernel wait", "other";
``hta/analyzers/breakdown_analysis.py`` ``get_idle_time_breakdown``). traincast asks the
execution graph instead: a gap ends when some op starts, and the binding dependencies of that
start inside the gap (:mod:`traincast.graph.binding`) say what the device waited for:

* ``host_ns``: the op's launch came late, the host was busy with other work (launch-bound,
  Python overhead, a sync's wake-up) — the chain inside the gap runs through LAUNCH/THREAD
  (or SYNC) edges only;
* ``data_loading_ns``: same, but the launching thread was inside a data-loader op at the end
  of the gap (``DataLoader``, ``_next_data``, ``__next__`` of a loader, ``data_loading``);
* ``peer_wait_ns``: the chain inside the gap crosses a COLLECTIVE edge — the device (or the
  host that feeds it) waited for a late rank (or, on CPU ranks, a WAIT on a collective);
* ``stream_dep_ns``: the op waited for an op on another stream (CROSS_STREAM), or, launched
  long before on an idle stream, for an event the trace does not name;
* ``other_ns``: anything else (unexplained delays kept as measured, ops without a launch).

The device is the union of the GPU streams of a rank (on CPU-only ranks, the host's compute
threads plus collective threads, as in :mod:`traincast.analysis.breakdown`). Additionally,
``comm_wait_ns`` is the time collectives spent waiting for their last member to arrive while
no compute ran: the device was busy with a communication kernel doing nothing useful.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traincast.analysis.breakdown import _rank_intervals
from traincast.analysis.intervals import clip, union
from traincast.graph.binding import binding_edges, walk_back
from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.trace.traceset import TraceSet

COLUMNS = ["rank", "iteration", "idle_ns", "host_ns", "data_loading_ns", "peer_wait_ns",
           "stream_dep_ns", "other_ns", "comm_wait_ns", "gaps"]

DATA_LOADER = re.compile(r"dataloader|_next_data|data_loading|enumerate\(.*loader", re.I)


def idle_attribution(source: object, *, graph: ExecutionGraph | None = None) -> pd.DataFrame:
    """Idle time per rank and step, split by cause (ns; see the module docstring).

    Args:
        source: a measured TraceSet (its graph is built with calibrated latencies so that the
            measured times satisfy it) or a :class:`~traincast.prediction.Prediction`
            (the predicted timeline is analysed with the prediction's graph).
        graph: for a TraceSet, a graph already built from it (``traincast.predict(ts).graph``
            without a what-if): its measurement-calibrated lags (``exact_lag``) are used
            instead of building the graph a second time.

    Returns:
        DataFrame with :data:`COLUMNS`; ``idle_ns`` equals the sum of the five causes.
    """
    from traincast.prediction import Prediction

    if isinstance(source, Prediction):
        ts, graph, times = source.measured, source.graph, source.result.times
        windows = source.timeline.iterations.to_pandas()
    elif isinstance(source, TraceSet):
        from traincast.graph.build import build_graph

        ts = source
        if graph is None or graph.exact_lag is None or graph.n_nodes != ts.events.num_rows:
            graph = build_graph(ts, exact=True)
        elif graph.lag is not graph.exact_lag:
            graph = graph.copy()
            graph.lag = graph.exact_lag
        times = graph.measured
        windows = ts.iterations.to_pandas()
        for i, r in enumerate(windows["rank"].tolist()):
            o = graph.clock_offset.get(int(r), 0)
            windows.loc[i, "start"] -= o
            windows.loc[i, "end"] -= o
    else:
        raise TypeError("idle_attribution takes a TraceSet or a Prediction")
    return _attribute(ts, graph, times, windows)


def _attribute(ts: TraceSet, graph: ExecutionGraph, times: np.ndarray,
               windows: pd.DataFrame) -> pd.DataFrame:
    ev = ts.events.select(["rank", "kind", "device", "tid", "name"]).to_pandas()
    n_pts = graph.n_event_points  # barrier points (collectives' last arrivals) follow
    ev["ts"] = times[0:n_pts:2]
    ev["dur"] = times[1:n_pts:2] - times[0:n_pts:2]
    ev["row"] = np.arange(len(ev))
    binding = binding_edges(graph, times)
    cat = ev["name"].astype("category")  # one regex test per distinct name, not per event
    is_loader = np.array([bool(DATA_LOADER.search(str(n))) for n in cat.cat.categories]
                         or [False], bool)
    loader_name = is_loader[cat.cat.codes.to_numpy()]
    rows_out = []
    for rank, sub in ev.groupby("rank", sort=True, observed=True):
        sub = sub[(sub["ts"] >= 0) & (sub["dur"] >= 0)]
        iv, source, ops = _rank_intervals(sub)
        op_rows = sub["row"].to_numpy()[ops]
        op_start = times[2 * op_rows]
        order = np.argsort(op_start, kind="stable")
        op_rows, op_start = op_rows[order], op_start[order]
        busy_s, busy_e = union(np.concatenate([v[0] for v in iv.values()]),
                               np.concatenate([v[1] for v in iv.values()]))
        # host data-loader spans on this rank (for the data-loading split)
        host = sub[(sub["device"] < 0).to_numpy() & loader_name[sub["row"].to_numpy()]]
        dl_s, dl_e = union(host["ts"].to_numpy(np.int64),
                           (host["ts"] + host["dur"]).to_numpy(np.int64))
        comm_wait = _comm_wait(graph, times, rank, iv)
        for w in windows[windows["rank"] == rank].itertuples():
            lo, hi = int(w.start), int(w.end)
            acc = dict.fromkeys(("host", "data_loading", "peer_wait", "stream_dep", "other"), 0)
            gs, ge = _gaps(busy_s, busy_e, lo, hi)
            for g0, g1 in zip(gs.tolist(), ge.tolist(), strict=True):
                j = np.searchsorted(op_start, g1, "left")
                if j >= op_start.size or op_start[j] != g1:
                    acc["other"] += g1 - g0  # the window ended, or nothing starts here
                    continue
                cause = _cause(graph, binding, times, int(op_rows[j]), g0, dl_s, dl_e)
                acc[cause] += g1 - g0
            cw = comm_wait(lo, hi)
            rows_out.append({"rank": int(rank), "iteration": int(w.iteration),
                             "idle_ns": int(sum(acc.values())), "host_ns": acc["host"],
                             "data_loading_ns": acc["data_loading"],
                             "peer_wait_ns": acc["peer_wait"],
                             "stream_dep_ns": acc["stream_dep"], "other_ns": acc["other"],
                             "comm_wait_ns": cw, "gaps": int(gs.size)})
    return pd.DataFrame(rows_out, columns=COLUMNS)


def _gaps(busy_s: np.ndarray, busy_e: np.ndarray, lo: int, hi: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """Idle intervals of [lo, hi) given disjoint sorted busy intervals."""
    s, e = clip(busy_s, busy_e, lo, hi)
    starts = np.concatenate([[lo], e])
    ends = np.concatenate([s, [hi]])
    keep = ends > starts
    return starts[keep], ends[keep]


def _cause(graph: ExecutionGraph, binding: np.ndarray, times: np.ndarray, row: int, g0: int,
           dl_s: np.ndarray, dl_e: np.ndarray) -> str:
    chain = walk_back(graph, binding, 2 * row, g0, times, max_steps=10_000)
    if not chain:
        return "other"
    kinds = {int(k) for k in graph.kind[chain]}
    if int(EdgeKind.COLLECTIVE) in kinds or int(EdgeKind.WAIT) in kinds:
        return "peer_wait"
    first = int(graph.kind[chain[0]])
    if first == int(EdgeKind.CROSS_STREAM) or (
            first == int(EdgeKind.STREAM) and graph.lag[chain[0]] > 0):
        # waited for another stream; a STREAM edge carrying a gap is a wait the trace does
        # not name (an event recorded on another stream, kept as measured by the graph)
        return "stream_dep"
    if first == int(EdgeKind.LAUNCH) or kinds & {int(EdgeKind.THREAD), int(EdgeKind.SYNC),
                                                int(EdgeKind.ISSUE)}:
        # host-bound; data loading if the host was inside a loader op when the gap ended
        t = int(times[graph.src[chain[0]]])
        k = np.searchsorted(dl_s, t, "right") - 1
        if k >= 0 and dl_e[k] >= t:
            return "data_loading"
        return "host"
    return "other"


def _comm_wait(graph: ExecutionGraph, times: np.ndarray, rank: int,
               iv: dict[str, tuple[np.ndarray, np.ndarray]]):
    """A function (lo, hi) -> ns collectives of ``rank`` waited for peers outside compute."""
    node_rank = graph.node_rank
    ws, we = [], []
    for grp in graph.collective_groups:
        mine = grp[node_rank[grp] == rank]
        if mine.size == 0:
            continue
        last = int(times[2 * grp].max())
        for n in mine.tolist():
            s = int(times[2 * n])
            if last > s:
                ws.append(s)
                we.append(min(last, int(times[2 * n + 1])))
    ws_a, we_a = union(np.asarray(ws, np.int64), np.asarray(we, np.int64))
    comp_s, comp_e = union(*iv.get("compute", (np.empty(0, np.int64), np.empty(0, np.int64))))

    def measure(lo: int, hi: int) -> int:
        s, e = clip(ws_a, we_a, lo, hi)
        if s.size == 0:
            return 0
        total = int((e - s).sum())
        cs, ce = clip(comp_s, comp_e, lo, hi)
        # subtract the overlap with compute
        for a, b in zip(s.tolist(), e.tolist(), strict=True):
            i0 = np.searchsorted(ce, a, "right")
            i1 = np.searchsorted(cs, b, "left")
            if i1 > i0:
                ov = np.minimum(ce[i0:i1], b) - np.maximum(cs[i0:i1], a)
                total -= int(ov[ov > 0].sum())
        return total

    return measure
