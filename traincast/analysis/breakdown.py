"""Where an iteration's time goes: compute, exposed communication, other, host-bound idle.

Definitions follow HTA's temporal breakdown and communication-overlap analyses
(HolisticTraceAnalysis docs, "Temporal Breakdown" and "Communication Computation Overlap"):
within a step's window on a rank, each instant is attributed to the first of

1. ``compute``: a compute kernel runs (GPU ranks) / the host runs ops outside collectives
   (CPU-only ranks);
2. ``exposed_comm``: only communication runs (NCCL kernels / gloo collectives);
3. ``other``: only memory copies or memsets run;
4. ``idle``: nothing runs on the device: host-bound idle (the device waits for the host, or
   on CPU-only ranks the host waits).

The four add up to the step's duration. Works the same on measured and predicted tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

CATEGORIES = ("compute", "exposed_comm", "other", "idle")


def _coverage(starts: np.ndarray, ends: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """bool[len(grid)-1]: whether each elementary segment of ``grid`` is covered."""
    if starts.size == 0:
        return np.zeros(grid.size - 1, bool)
    delta = np.zeros(grid.size, np.int64)
    np.add.at(delta, np.searchsorted(grid, starts), 1)
    np.add.at(delta, np.searchsorted(grid, ends), -1)
    return np.cumsum(delta)[:-1] > 0


def window_breakdown(lo: int, hi: int, intervals: dict[str, tuple[np.ndarray, np.ndarray]]
                     ) -> dict[str, int]:
    """Attribute [lo, hi) ns to the categories, given (starts, ends) per busy category.

    ``intervals`` has keys ``compute``, ``comm``, ``other``; time covered by none is idle.
    """
    clipped = {}
    pts = [np.array([lo, hi], np.int64)]
    for key in ("compute", "comm", "other"):
        s, e = intervals.get(key, (np.empty(0, np.int64), np.empty(0, np.int64)))
        m = (e > lo) & (s < hi)
        s, e = np.clip(s[m], lo, hi), np.clip(e[m], lo, hi)
        clipped[key] = (s, e)
        pts += [s, e]
    grid = np.unique(np.concatenate(pts))
    seg = np.diff(grid)
    comp = _coverage(*clipped["compute"], grid)
    comm = _coverage(*clipped["comm"], grid) & ~comp
    other = _coverage(*clipped["other"], grid) & ~comp & ~comm
    idle = ~(comp | comm | other)
    return {"compute": int(seg[comp].sum()), "exposed_comm": int(seg[comm].sum()),
            "other": int(seg[other].sum()), "idle": int(seg[idle].sum())}


def iteration_breakdown(events: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Breakdown of every (rank, iteration) window.

    Args:
        events: columns rank, kind, ts, dur, device, tid (ns), measured or predicted.
        windows: columns rank, iteration, start, end (ns).

    Returns:
        windows with columns compute, exposed_comm, other, idle (ns) added.
    """
    out = windows.copy()
    for c in CATEGORIES:
        out[c] = 0
    for rank, ev in events.groupby("rank", sort=False, observed=True):
        kind = ev["kind"].astype(str).to_numpy()
        s = ev["ts"].to_numpy(np.int64)
        e = s + ev["dur"].to_numpy(np.int64)
        on_gpu = ev["device"].to_numpy() >= 0
        gpu_ops = on_gpu & np.isin(kind, ["kernel", "memcpy", "memset", "collective"])
        if gpu_ops.any():
            iv = {"compute": (s[on_gpu & (kind == "kernel")], e[on_gpu & (kind == "kernel")]),
                  "comm": (s[on_gpu & (kind == "collective")],
                           e[on_gpu & (kind == "collective")]),
                  "other": (s[on_gpu & np.isin(kind, ["memcpy", "memset"])],
                            e[on_gpu & np.isin(kind, ["memcpy", "memset"])])}
        else:
            tid = ev["tid"].to_numpy()
            coll = kind == "collective"
            coll_tids = np.unique(tid[coll])
            work = ~on_gpu & np.isin(kind, ["cpu_op", "python"]) & ~np.isin(tid, coll_tids)
            iv = {"compute": (s[work], e[work]), "comm": (s[coll], e[coll])}
        for idx in np.flatnonzero(out["rank"].to_numpy() == rank):
            lo, hi = int(out["start"].iat[idx]), int(out["end"].iat[idx])
            for key, val in window_breakdown(lo, hi, iv).items():
                out.iat[idx, out.columns.get_loc(key)] = val
    return out
