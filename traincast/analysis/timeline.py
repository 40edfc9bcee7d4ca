"""One step's timeline, measured and replayed side by side, with the critical path marked.

:func:`step_timeline` returns the device work of one iteration (kernels, copies, memsets,
collective kernels) per rank and stream twice, as measured and as the replay placed it
(``Replay.timeline``, the same event rows with simulated times), plus the critical path's
segments (:func:`traincast.analysis.critical_path.critical_path`). Times are ms from the
step's start (the earliest measured, respectively predicted, event of the iteration on any
rank), so the two timelines line up at 0. The HTML report draws it as a zoomable Gantt chart
(:mod:`traincast.report.html`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traincast.analysis.critical_path import critical_path
from traincast.simulate.replay import Replay
from traincast.trace.schema import DEVICE_KINDS

__all__ = ["DEVICE_KINDS", "MAX_EVENTS", "step_timeline"]

#: events drawn per source at most (the longest first when there are more)
MAX_EVENTS = 20_000

COLUMNS = ["source", "rank", "stream", "lane", "name", "kind", "start_ms", "dur_ms",
           "critical"]


def step_timeline(prediction: Replay, iteration: int | None = None,
                  max_events: int = MAX_EVENTS) -> pd.DataFrame:
    """The device events of one iteration, measured and predicted, and the critical path.

    Args:
        prediction: a replay of a TraceSet (:func:`traincast.simulate.replay.replay`, or
            :func:`traincast.predict` of it): its ``measured`` set and its ``timeline``.
        iteration: the step to draw; default the critical path's (the last complete one).
        max_events: most events per source (the longest kept).

    Returns:
        One row per drawn event: ``source`` (``measured``, ``predicted`` or
        ``critical path``), ``rank``, ``stream`` (-1 for the critical path), ``lane`` (a
        label ``rank R stream S``), ``name``, ``kind``, ``start_ms`` (from the step start),
        ``dur_ms``, ``critical`` (the event lies on the critical path). Empty when the trace
        has no device events in the step.
    """
    try:
        cp = critical_path(prediction, iteration=iteration)
    except Exception:  # noqa: BLE001 - a timeline without a critical path is still useful
        cp = None
    it = iteration if iteration is not None else (cp.iteration if cp is not None else None)
    on_path = set(cp.path["event"].tolist()) if cp is not None else set()
    frames = []
    for source, tset in (("measured", prediction.measured), ("predicted", prediction.timeline)):
        ev = tset.events.select(["rank", "iteration", "kind", "name", "ts", "dur", "stream"]
                                ).to_pandas()
        ev["event"] = np.arange(len(ev))
        if it is not None:
            ev = ev[ev["iteration"] == it]
        dev = ev[ev["kind"].astype(str).isin(DEVICE_KINDS)]
        if dev.empty:
            continue
        t0 = int(ev["ts"].min())
        dev = dev.nlargest(max_events, "dur") if len(dev) > max_events else dev
        frames.append(pd.DataFrame({
            "source": source, "rank": dev["rank"].to_numpy(), "stream": dev["stream"].to_numpy(),
            "lane": [f"rank {r} stream {s}" for r, s in zip(dev["rank"], dev["stream"],
                                                           strict=True)],
            "name": dev["name"].astype(str).to_numpy(), "kind": dev["kind"].astype(str).to_numpy(),
            "start_ms": (dev["ts"].to_numpy() - t0) / 1e6, "dur_ms": dev["dur"].to_numpy() / 1e6,
            "critical": dev["event"].isin(on_path).to_numpy()}))
        if source == "predicted" and cp is not None and len(cp.path):
            p = cp.path
            frames.append(pd.DataFrame({
                "source": "critical path", "rank": p["rank"].to_numpy(), "stream": -1,
                "lane": [f"rank {r} critical path" for r in p["rank"]],
                "name": p["name"].astype(str).to_numpy(), "kind": p["kind"].astype(str).to_numpy(),
                "start_ms": (p["start_ns"].to_numpy() - t0) / 1e6,
                "dur_ms": p["dur_ns"].to_numpy() / 1e6, "critical": True}))
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)[COLUMNS]
