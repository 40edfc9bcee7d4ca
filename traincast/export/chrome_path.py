"""Chrome-trace (Perfetto) export of a predicted timeline with its critical path highlighted.

Format: Google's "Trace Event Format" (complete events ``ph: "X"``, ``ts``/``dur`` in µs;
flow events ``ph: "s"``/``"f"`` with ``bp: "e"`` binding to the enclosing slice; ``M``
metadata naming processes and threads). The overlay follows HTA's
``overlay_critical_path_analysis`` (facebookresearch/HolisticTraceAnalysis,
``hta/analyzers/critical_path_analysis.py``): events on the path get ``args.critical = 1``,
and flows of category ``critical_path`` link the events the path hops between; in addition
critical events get a distinct colour (``cname``) and ``args.critical_ns``, the time (ns) of
path segments attributed to them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from traincast.errors import OutputError
from traincast.util.fileio import atomic_write, refuse_inputs

if TYPE_CHECKING:  # pragma: no cover
    from traincast.analysis.critical_path import CriticalPath
    from traincast.predict.prediction import Prediction

#: Chrome-trace reserved colour name of critical events (red).
CRITICAL_CNAME = "terrible"
#: Thread id of GPU stream S in the exported trace (``GPU_LANE + S``), as in report/chrome.py.
GPU_LANE = 1_000_000
#: Edge kinds whose hops get a flow arrow; THREAD hops only between sibling events.
_FLOW_KINDS = ("LAUNCH", "STREAM", "SYNC", "CROSS_STREAM", "COLLECTIVE", "WAIT", "ISSUE",
               "DATA", "THREAD")


def write_critical_path_trace(path_out: str | Path, pred: Prediction, cp: CriticalPath, *,
                              window_only: bool = True) -> Path:
    """Write the predicted timeline with the critical path ``cp`` highlighted.

    Args:
        path_out: ``.json`` or ``.json.gz`` file; written atomically.
        pred: the replay the path was computed on (``traincast.predict``).
        cp: :func:`traincast.analysis.critical_path.critical_path` of ``pred``.
        window_only: keep only events overlapping the step window ``[cp.start_ns,
            cp.end_ns]`` (every rank); False keeps the whole timeline.

    One process per rank (``pid`` = rank), host threads keep their ids, GPU stream ``S`` is
    thread ``GPU_LANE + S``. Times are µs from ``cp.start_ns`` (replay clock). Every event
    carries ``args.event`` (its row in ``TraceSet.events``); exactly the events of
    ``cp.events`` carry ``args.critical = 1`` and ``cname`` :data:`CRITICAL_CNAME`. One flow
    (``cat: "critical_path"``, ids 0..k-1 in path order) per path edge whose two points
    belong to different events, except a THREAD edge into or out of a nested event (a
    parent/child hop is visible from the nesting), from the source point's event to the
    destination point's event.

    Raises:
        OutputError: the folder does not exist or is not writable, or ``path_out`` is one of
            the run's trace files.
    """
    path_out = Path(path_out)
    refuse_inputs([path_out], [info.path for info in pred.measured.ranks.values()])
    if not path_out.parent.is_dir():
        raise OutputError("output folder does not exist", path_out.parent)
    g = pred.graph
    ev = pred.measured.events
    t = pred.result.times
    node_ev = g.node_event
    n_start = t[0:g.n_event_points:2]
    n_end = t[1:g.n_event_points:2]
    keep = (n_start >= 0) & (n_end >= n_start)
    if window_only:
        keep &= (n_start <= cp.end_ns) & (n_end >= cp.start_ns)
    # nodes of the critical events are always exported
    node_of = np.full(int(node_ev.max(initial=-1)) + 1, -1, np.int64)
    node_of[node_ev] = np.arange(node_ev.size)
    crit_events = cp.events
    crit_nodes = node_of[crit_events]
    crit_nodes = crit_nodes[crit_nodes >= 0]
    keep[crit_nodes] |= (n_start[crit_nodes] >= 0) & (n_end[crit_nodes] >= n_start[crit_nodes])
    nodes = np.flatnonzero(keep)
    rows = node_ev[nodes]
    origin = cp.start_ns

    def col(name: str) -> np.ndarray:
        return ev.column(name).to_numpy()

    rank, tid, stream, device = col("rank"), col("tid"), col("stream"), col("device")
    iteration = col("iteration")
    names = ev.column("name").combine_chunks()
    name_vals = names.dictionary.to_pylist()
    name_idx = names.indices.to_numpy(zero_copy_only=False)
    kinds = ev.column("kind").combine_chunks()
    kind_vals = kinds.dictionary.to_pylist()
    kind_idx = kinds.indices.to_numpy(zero_copy_only=False)
    gpu = device >= 0
    lane = np.where(gpu, GPU_LANE + stream.astype(np.int64), tid.astype(np.int64))
    attributed = cp.path.groupby("event")["dur_ns"].sum()
    crit_ns = {int(k): int(v) for k, v in attributed.items() if k >= 0}
    crit_set = set(crit_events.tolist())
    thread_names = {(r, tt): nm for r, info in pred.measured.ranks.items()
                    for (_, tt), nm in info.threads.items()}

    out: list[dict] = []
    lanes: set[tuple[int, int]] = set()
    for r in sorted(set(rank[rows].tolist())):
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                    "args": {"name": f"rank {r} predicted"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0,
                    "args": {"sort_index": r}})
    starts_us = (n_start[nodes] - origin) / 1000.0
    durs_us = (n_end[nodes] - n_start[nodes]) / 1000.0
    for k, row in enumerate(rows.tolist()):
        pid, ln = int(rank[row]), int(lane[row])
        if (pid, ln) not in lanes:
            lanes.add((pid, ln))
            nm = (f"stream {int(stream[row])}" if gpu[row] else
                  thread_names.get((pid, int(tid[row])), f"thread {int(tid[row])}"))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": ln,
                        "args": {"name": nm}})
        args: dict = {"event": row, "iteration": int(iteration[row])}
        e = {"ph": "X", "name": name_vals[name_idx[row]], "cat": kind_vals[kind_idx[row]],
             "pid": pid, "tid": ln, "ts": round(float(starts_us[k]), 3),
             "dur": round(float(durs_us[k]), 3), "args": args}
        if row in crit_set:
            args["critical"] = 1
            args["critical_ns"] = crit_ns.get(row, 0)
            e["cname"] = CRITICAL_CNAME
        out.append(e)
    out += _flows(cp, pred, lane, rank, origin)
    data = orjson.dumps({"traceEvents": out, "displayTimeUnit": "ms",
                         "otherData": {"generator": "traincast", "critical_path": {
                             "rank": cp.rank, "iteration": cp.iteration,
                             "start_ns": cp.start_ns, "end_ns": cp.end_ns,
                             "duration_ns": cp.duration_ns}}})
    atomic_write(path_out, data)  # gzip for .gz
    return path_out


def _flows(cp: CriticalPath, pred: Prediction, lane: np.ndarray, rank: np.ndarray,
           origin: int) -> list[dict]:
    """Flow events ``s``/``f`` for the hops of the path (see write_critical_path_trace)."""
    g = pred.graph
    t = pred.result.times
    p = cp.path
    sel = (p["edge"].to_numpy() >= 0) & p["edge_kind"].isin(_FLOW_KINDS).to_numpy()
    s_pt = p["src_point"].to_numpy(np.int64)[sel]
    d_pt = p["dst_point"].to_numpy(np.int64)[sel]
    kinds = p["edge_kind"].to_numpy(object)[sel]
    durs = p["dur_ns"].to_numpy(np.int64)[sel]
    # a segment clipped at the step start begins at an event outside the window: no arrow
    hop = ((s_pt // 2) != (d_pt // 2)) & (t[s_pt] >= cp.start_ns)
    # THREAD: only sibling hops (end of one event -> start of the next)
    thread = kinds == "THREAD"
    hop &= ~thread | ((s_pt % 2 == 1) & (d_pt % 2 == 0))
    out: list[dict] = []
    fid = 0
    for sp, dp, kd, du in zip(s_pt[hop].tolist(), d_pt[hop].tolist(), kinds[hop].tolist(),
                              durs[hop].tolist(), strict=True):
        pair = []
        for pt, ph in ((sp, "s"), (dp, "f")):
            node = pt // 2
            row = int(g.node_event[node])
            t0, t1 = int(t[2 * node]), int(t[2 * node + 1])
            at = int(t[pt])
            if pt % 2 == 1 and t1 > t0:
                at = t1 - 1  # 1 ns inside the slice, so the flow binds to it (as HTA does)
            pair.append({"ph": ph, "id": fid, "pid": int(rank[row]), "tid": int(lane[row]),
                         "ts": round((at - origin) / 1000.0, 3), "cat": "critical_path",
                         "name": "critical_path", "bp": "e",
                         "args": {"edge_kind": kd, "dur_ns": du, "event": row}})
        out += pair
        fid += 1
    return out
