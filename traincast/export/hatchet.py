"""Hatchet export: the op call tree of every rank as an ``llnl-hatchet`` GraphFrame.

Hatchet (Bhatele et al., "Hatchet: Pruning the Overgrowth in Parallel Profiles", SC'19;
github.com/LLNL/hatchet) analyses call-tree profiles as a graph plus a pandas DataFrame
indexed by ``(node, rank)``; its tree view, filter, squash and flame graph then work on
PyTorch traces. The tree here is built from the execution graph's nesting (traincast.graph):

* host events (CPU ops, runtime calls, annotations) nest by time on their thread
  (:func:`traincast.graph.nesting.thread_parents`);
* device events (kernels, copies, memsets) hang under the runtime call that launched them
  (the graph's LAUNCH edges);
* a node of the GraphFrame is a call path (names from the root), shared by all ranks; each
  rank has its own row.

Metrics per ``(node, rank)``, ns: ``time (inc)`` (the summed duration of the path's events:
host wall time for host events, device time for device events), ``time`` (exclusive:
``time (inc)`` minus the host children's, for host events; device events are leaves),
``gpu time (inc)`` (device time of the subtree: what the ops under a path launched),
``count`` (events), plus ``name`` and ``kind``; a path a rank did not run has zeros there. Requires ``pip install llnl-hatchet``
(``traincast[hatchet]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traincast.errors import TraincastError
from traincast.graph.build import build_graph
from traincast.graph.model import EdgeKind
from traincast.graph.nesting import thread_parents
from traincast.trace.schema import DEVICE_KINDS
from traincast.trace.traceset import TraceSet

__all__ = ["to_hatchet"]


def to_hatchet(ts: TraceSet, graph: Any = None) -> Any:
    """The op call tree of ``ts`` per rank as a ``hatchet.GraphFrame`` (module docstring).

    Args:
        ts: a loaded TraceSet.
        graph: its execution graph (:func:`traincast.graph.build.build_graph`; built when
            None).

    Raises:
        TraincastError: llnl-hatchet is not installed, or the trace has no events.
    """
    try:
        from hatchet import GraphFrame
        from hatchet.frame import Frame
        from hatchet.graph import Graph
        from hatchet.node import Node
    except ImportError:
        raise TraincastError("the Hatchet export needs llnl-hatchet (pip install "
                             "'traincast[hatchet]')") from None

    ts.require_events("export")
    g = graph if graph is not None else build_graph(ts)
    n = g.n_nodes
    parent = thread_parents(g).copy()
    launch = g.edges_of_kind(EdgeKind.LAUNCH)
    if launch.size:
        src, dst = g.src[launch] // 2, g.dst[launch] // 2
        free = parent[dst] < 0
        parent[dst[free]] = src[free]
    ev = g.node_event
    names = np.asarray(ts.events.column("name").to_pylist(), dtype=object)[ev]
    kinds = np.asarray(ts.events.column("kind").to_pylist(), dtype=object)[ev]
    dur = ts.column("dur")[ev].astype(np.int64)
    start = ts.column("ts")[ev]
    rank = g.node_rank.astype(np.int64)
    device = np.isin(kinds, DEVICE_KINDS)
    # call path ids: parents first (a parent starts no later than its child; ties by depth)
    path = np.full(n, -1, np.int64)
    keys: dict[tuple[int, str, str], int] = {}
    info: list[tuple[int, str, str]] = []
    depth = np.zeros(n, np.int64)
    for i in np.lexsort((device, start)):
        p = int(parent[i])
        pp = int(path[p]) if p >= 0 else -1
        if p >= 0 and pp < 0:  # a parent not yet placed (clock ties): attach to the root
            pp = -1
        depth[i] = depth[p] + 1 if p >= 0 else 0
        key = (pp, str(names[i]), str(kinds[i]))
        pid = keys.get(key)
        if pid is None:
            pid = keys[key] = len(info)
            info.append(key)
        path[i] = pid
    # metrics per (path, rank)
    host_child = np.zeros(n, np.int64)
    gpu_sub = np.where(device, dur, 0)
    for i in np.argsort(-depth, kind="stable"):  # children before parents
        p = int(parent[i])
        if p >= 0:
            gpu_sub[p] += gpu_sub[i]
            if not device[i]:
                host_child[p] += dur[i]
    df = pd.DataFrame({"path": path, "rank": rank, "inc": dur,
                       "exc": np.where(device, dur, np.maximum(dur - host_child, 0)),
                       "gpu": gpu_sub, "count": 1})
    agg = df.groupby(["path", "rank"], sort=True).sum().reset_index()
    nodes: list[Any] = []
    roots: list[Any] = []
    for pid, (pp, name, kind) in enumerate(info):
        node = Node(Frame({"name": name, "type": kind}), parent=nodes[pp] if pp >= 0 else None,
                    hnid=pid)
        if pp >= 0:
            nodes[pp].add_child(node)
        else:
            roots.append(node)
        nodes.append(node)
    hg = Graph(roots)
    hg.enumerate_traverse()
    frame = pd.DataFrame({
        "node": [nodes[p] for p in agg["path"]], "rank": agg["rank"].to_numpy(),
        "name": [info[p][1] for p in agg["path"]], "kind": [info[p][2] for p in agg["path"]],
        "time (inc)": agg["inc"].to_numpy(), "time": agg["exc"].to_numpy(),
        "gpu time (inc)": agg["gpu"].to_numpy(), "count": agg["count"].to_numpy()})
    # every path gets a row on every rank (Hatchet's views index (node, rank) directly):
    # paths a rank did not run hold zeros
    ranks = sorted(set(frame["rank"].tolist()))
    full = pd.MultiIndex.from_product([nodes, ranks], names=["node", "rank"])
    frame = frame.set_index(["node", "rank"]).reindex(full)
    for c in ("time (inc)", "time", "gpu time (inc)", "count"):
        frame[c] = frame[c].fillna(0).astype(np.int64)
    pos = {nd: i for i, nd in enumerate(nodes)}
    at = [pos[nd] for nd in frame.index.get_level_values("node")]
    frame["name"] = [info[i][1] for i in at]
    frame["kind"] = [info[i][2] for i in at]
    frame = frame.sort_index()
    return GraphFrame(hg, frame, exc_metrics=["time"], inc_metrics=["time (inc)",
                                                                     "gpu time (inc)"])
