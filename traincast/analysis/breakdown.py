"""Temporal breakdown: where each step's (or the whole trace's) device time goes.

Definitions follow HTA (HolisticTraceAnalysis 0.5, ``hta/analyzers/breakdown_analysis.py``
``get_temporal_breakdown`` and ``communication_analysis.py`` ``get_comm_comp_overlap``):

* device ops are the events on a GPU stream: kernels, memcpy, memset, NCCL kernels;
* *communication* = NCCL/RCCL kernels (kind ``collective``), *memory* = memcpy/memset,
  *compute* = every other kernel;
* within a window, ``compute_ns`` is the length of the union of compute kernels, ``idle_ns``
  the time no device op runs, ``non_compute_ns = window - compute - idle`` (communication and
  memory not hidden behind compute);
* ``comm_overlapped_ns`` is the part of the union of communication kernels during which a
  compute kernel also runs, ``comm_exposed_ns`` the rest; ``overlap_pct = overlapped / comm``.

Windows: ``per="iteration"`` uses each step (``ProfilerStep#N``) on each rank and attributes
time by intersection with the step; ``per="rank"`` uses, like HTA, the span from the first to
the last device op of the rank, over the ops launched before the start of the last step
(``include_last_step=False``, HTA's default: device ops whose launching runtime call is in
the trace and starts before the last step; ops still running from before the profiling
window, whose launch is not recorded, are left out as HTA does) — the mode the HTA
cross-check uses.

On CPU-only ranks (no device op at all) the host plays the device: ``compute`` is the union of
``cpu_op``/``python`` events on threads that run no collective, ``comm`` the gloo collectives
(which run on their own worker threads), and ``idle`` the rest.

The same code runs on measured TraceSets and on predicted timelines.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traincast.analysis.intervals import clip, coverage
from traincast.errors import ParameterError
from traincast.trace.traceset import TraceSet

#: column order of :func:`temporal_breakdown`
COLUMNS = ["rank", "iteration", "start", "end", "window_ns", "compute_ns", "comm_ns",
           "comm_overlapped_ns", "comm_exposed_ns", "memory_ns", "non_compute_ns", "idle_ns",
           "compute_pct", "non_compute_pct", "idle_pct", "overlap_pct", "source"]

CATEGORIES = ("compute", "exposed_comm", "other", "idle")


def window_breakdown(lo: int, hi: int, intervals: dict[str, tuple[np.ndarray, np.ndarray]]
                     ) -> dict[str, int]:
    """Attribute [lo, hi) ns to compute / comm / memory / idle.

    ``intervals`` maps ``compute``, ``comm``, ``other`` (memory) to (starts, ends) arrays.
    Returns ns per key: ``compute`` (union of compute), ``comm`` (union of comm),
    ``comm_overlapped`` (comm under compute), ``exposed_comm`` (comm not under compute),
    ``other`` (memory under neither), ``idle`` (nothing). compute + exposed_comm + other +
    idle == hi - lo.
    """
    clipped = {}
    pts = [np.array([lo, hi], np.int64)]
    for key in ("compute", "comm", "other"):
        s, e = intervals.get(key, (np.empty(0, np.int64), np.empty(0, np.int64)))
        s, e = clip(np.asarray(s, np.int64), np.asarray(e, np.int64), lo, hi)
        clipped[key] = (s, e)
        pts += [s, e]
    grid = np.unique(np.concatenate(pts))
    seg = np.diff(grid)
    comp = coverage(*clipped["compute"], grid)
    comm_all = coverage(*clipped["comm"], grid)
    comm = comm_all & ~comp
    other = coverage(*clipped["other"], grid) & ~comp & ~comm_all
    idle = ~(comp | comm_all | other)
    return {"compute": int(seg[comp].sum()), "comm": int(seg[comm_all].sum()),
            "comm_overlapped": int(seg[comm_all & comp].sum()),
            "exposed_comm": int(seg[comm].sum()), "other": int(seg[other].sum()),
            "idle": int(seg[idle].sum())}


def _rank_intervals(ev: pd.DataFrame) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str,
                                               np.ndarray]:
    """Busy intervals of one rank's events, the source ("device"/"host") and device-op mask."""
    kind = ev["kind"].astype(str).to_numpy()
    s = ev["ts"].to_numpy(np.int64)
    e = s + ev["dur"].to_numpy(np.int64)
    on_gpu = ev["device"].to_numpy() >= 0
    ops = on_gpu & np.isin(kind, ["kernel", "memcpy", "memset", "collective"])
    if ops.any():
        comp = ops & (kind == "kernel")
        comm = ops & (kind == "collective")
        mem = ops & np.isin(kind, ["memcpy", "memset"])
        return ({"compute": (s[comp], e[comp]), "comm": (s[comm], e[comm]),
                 "other": (s[mem], e[mem])}, "device", ops)
    tid = ev["tid"].to_numpy()
    coll = (kind == "collective") & ~on_gpu
    coll_tids = np.unique(tid[coll])
    work = ~on_gpu & np.isin(kind, ["cpu_op", "python"]) & ~np.isin(tid, coll_tids)
    return {"compute": (s[work], e[work]), "comm": (s[coll], e[coll])}, "host", work | coll


def _events_frame(ts: TraceSet) -> pd.DataFrame:
    return ts.events.select(["rank", "iteration", "kind", "ts", "dur", "device", "tid",
                             "correlation"]).to_pandas()


def _launched_before(ev: pd.DataFrame, cutoff: int) -> np.ndarray:
    """bool per event: a device op whose launching runtime call is in the trace and starts
    before ``cutoff``; host events are True (HTA's ``_filter_irrelevant_gpu_kernels``)."""
    kind = ev["kind"].astype(str).to_numpy()
    corr = ev["correlation"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    on_gpu = ev["device"].to_numpy() >= 0
    rt = (kind == "runtime") & ~on_gpu & (corr >= 0)
    launch_ts = pd.Series(ts[rt], index=corr[rt])
    launch_ts = launch_ts[~launch_ts.index.duplicated()]
    t = launch_ts.reindex(corr[on_gpu]).to_numpy()
    keep = np.ones(len(ev), bool)
    keep[on_gpu] = ~np.isnan(t) & (t < cutoff)
    return keep


def temporal_breakdown(ts: TraceSet, *, per: str = "iteration",
                       include_last_step: bool = False) -> pd.DataFrame:
    """Compute / communication (overlapped, exposed) / memory / idle time per window.

    Args:
        ts: measured TraceSet or predicted timeline.
        per: ``"iteration"`` (one row per rank and step) or ``"rank"`` (one row per rank,
            HTA's whole-trace window).
        include_last_step: with ``per="rank"``, keep the ops launched in the last step (HTA
            drops them by default).

    Returns:
        DataFrame with :data:`COLUMNS`: times in ns, percentages of ``window_ns``;
        ``iteration`` is -1 for ``per="rank"``; ``source`` says whether the device or (on
        CPU-only ranks) the host was measured.

    The table is memoised on ``ts`` (the straggler report reuses the breakdown); each call
    returns its own copy.

    Raises:
        ParameterError: unknown ``per``.
    """
    if per not in ("iteration", "rank"):
        raise ParameterError(f"per must be 'iteration' or 'rank', got {per!r}")
    memo_key = f"temporal_breakdown:{per}:{bool(include_last_step)}"
    ids = (id(ts.events), id(ts.iterations))
    hit = ts.memo.get(memo_key)
    if hit is not None and hit[0] == ids:
        return hit[1].copy()
    df = _temporal_breakdown(ts, per, include_last_step)
    ts.memo[memo_key] = (ids, df)
    return df.copy()


def _temporal_breakdown(ts: TraceSet, per: str, include_last_step: bool) -> pd.DataFrame:
    events = _events_frame(ts)
    rows = []
    iters = ts.iterations.to_pandas()
    for rank, ev in events.groupby("rank", sort=True, observed=True):
        iv, source, ops = _rank_intervals(ev)
        if per == "iteration":
            windows = [(int(r.iteration), int(r.start), int(r.end))
                       for r in iters[iters["rank"] == rank].itertuples()]
        else:
            mine = iters[iters["rank"] == rank]
            if not include_last_step and len(mine) > 1:
                last_start = int(mine["start"].max())
                if source == "device":
                    # HTA: device ops launched (launch in the trace) before the last step
                    ev = ev[_launched_before(ev, last_start)]
                else:
                    ev = ev[ev["iteration"].to_numpy() < mine["iteration"].max()]
                iv, source, ops = _rank_intervals(ev)
            if not ops.any():
                continue
            s = ev["ts"].to_numpy(np.int64)[ops]
            e = s + ev["dur"].to_numpy(np.int64)[ops]
            windows = [(-1, int(s.min()), int(e.max()))]
        for it_no, lo, hi in windows:
            b = window_breakdown(lo, hi, iv)
            win = hi - lo
            rows.append({
                "rank": int(rank), "iteration": it_no, "start": lo, "end": hi,
                "window_ns": win, "compute_ns": b["compute"], "comm_ns": b["comm"],
                "comm_overlapped_ns": b["comm_overlapped"],
                "comm_exposed_ns": b["exposed_comm"], "memory_ns": b["other"],
                "non_compute_ns": b["exposed_comm"] + b["other"], "idle_ns": b["idle"],
                "source": source,
            })
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if not c.endswith("_pct")])
    w = df["window_ns"].where(df["window_ns"] > 0)
    df["compute_pct"] = 100.0 * df["compute_ns"] / w
    df["non_compute_pct"] = 100.0 * df["non_compute_ns"] / w
    df["idle_pct"] = 100.0 * df["idle_ns"] / w
    df["overlap_pct"] = 100.0 * df["comm_overlapped_ns"] / df["comm_ns"].where(df["comm_ns"] > 0)
    return df[COLUMNS]


def iteration_breakdown(events: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Prediction-report breakdown: compute, exposed_comm, other, idle (ns) per window.

    Args:
        events: columns rank, kind, ts, dur, device, tid (ns), measured or predicted.
        windows: columns rank, iteration, start, end (ns).

    Returns:
        ``windows`` with columns compute, exposed_comm, other, idle (ns) added; they add up
        to ``end - start``.
    """
    out = windows.copy()
    for c in CATEGORIES:
        out[c] = 0
    for rank, ev in events.groupby("rank", sort=False, observed=True):
        iv, _, _ = _rank_intervals(ev)
        for idx in np.flatnonzero(out["rank"].to_numpy() == rank):
            lo, hi = int(out["start"].iat[idx]), int(out["end"].iat[idx])
            b = window_breakdown(lo, hi, iv)
            for key in CATEGORIES:
                out.iat[idx, out.columns.get_loc(key)] = b[key]
    return out
