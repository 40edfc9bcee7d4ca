"""``traincast.predict``: replay a measured TraceSet and compare with the measurement."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from traincast.analysis.breakdown import CATEGORIES, iteration_breakdown
from traincast.graph.build import build_graph
from traincast.graph.model import ExecutionGraph
from traincast.simulate.engine import SimResult, simulate
from traincast.simulate.timeline import predicted_traceset
from traincast.trace.traceset import TraceSet

#: keys of ``breakdown_ns`` in the JSON output
BREAKDOWN_KEYS = {"compute": "compute", "exposed_comm": "exposed_comm", "idle": "host_idle",
                  "other": "other"}
#: columns of :attr:`Prediction.iterations` holding the breakdown (ns)
BREAKDOWN_COLUMNS = {c: f"{k}_ns" for c, k in BREAKDOWN_KEYS.items()}


@dataclass
class Prediction:
    """Replay of a measured run.

    Attributes:
        measured: the input TraceSet.
        graph: its execution graph.
        result: simulated point times.
        elapsed_s: wall time of build + simulate, seconds.
    """

    measured: TraceSet
    graph: ExecutionGraph
    result: SimResult
    elapsed_s: dict[str, float] = field(default_factory=dict)

    @cached_property
    def timeline(self) -> TraceSet:
        """The predicted events (canonical schema, simulated times)."""
        return predicted_traceset(self.measured, self.graph, self.result)

    @cached_property
    def iterations(self) -> pd.DataFrame:
        """One row per (rank, iteration): measured_ns, predicted_ns, error_pct and the
        predicted breakdown (compute_ns, exposed_comm_ns, host_idle_ns, other_ns)."""
        meas = self.measured.iterations.to_pandas()
        pred = self.timeline.iterations.to_pandas()
        df = meas[["rank", "iteration"]].copy()
        df["measured_ns"] = meas["dur"].to_numpy(np.int64)
        df["predicted_ns"] = pred["dur"].to_numpy(np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            df["error_pct"] = np.where(df["measured_ns"] > 0, 100.0 * (
                df["predicted_ns"] - df["measured_ns"]) / df["measured_ns"], 0.0)
        ev = self.timeline.events.select(["rank", "kind", "ts", "dur", "device", "tid"]
                                         ).to_pandas()
        bd = iteration_breakdown(ev, pred[["rank", "iteration", "start", "end"]])
        for c in CATEGORIES:
            df[BREAKDOWN_COLUMNS[c]] = bd[c].to_numpy(np.int64)
        return df

    @property
    def summary(self) -> dict[str, Any]:
        """MAPE and max APE over all (rank, iteration) rows, in percent."""
        ape = self.iterations["error_pct"].abs()
        return {"mape_pct": float(ape.mean()) if len(ape) else 0.0,
                "max_ape_pct": float(ape.max()) if len(ape) else 0.0,
                "iterations": int(len(ape))}

    def to_dict(self) -> dict[str, Any]:
        """The ``traincast predict --format json`` contract."""
        ranks = []
        for rank, sub in self.iterations.groupby("rank", sort=True):
            its = []
            for row in sub.itertuples(index=False):
                its.append({
                    "iteration": int(row.iteration),
                    "measured_ns": int(row.measured_ns),
                    "predicted_ns": int(row.predicted_ns),
                    "error_pct": round(float(row.error_pct), 4),
                    "breakdown_ns": {k: int(getattr(row, f"{k}_ns"))
                                     for k in BREAKDOWN_KEYS.values()},
                })
            ranks.append({"rank": int(rank), "iterations": its})
        s = self.summary
        return {"ranks": ranks, "summary": {"mape_pct": round(s["mape_pct"], 4),
                                            "max_ape_pct": round(s["max_ape_pct"], 4),
                                            "iterations": s["iterations"]},
                "notes": self.notes}

    @property
    def notes(self) -> list[str]:
        """Caveats: unmatched collectives, loader guesses."""
        out = list(self.measured.warnings)
        n = int(self.graph.unmatched_collectives.size)
        if n:
            out.append(f"{n} collective(s) replayed with measured durations: their peers' "
                       "traces are absent or they lie outside the profiled steps")
        return out


def predict(ts: TraceSet, *, exact: bool = False) -> Prediction:
    """Build the execution graph of ``ts``, replay it and compare with the measurement.

    ``exact=True`` calibrates every latency to its measured value (see
    :func:`traincast.graph.build.build_graph`).

    Raises:
        CollectiveMismatchError: collectives cannot be matched across ranks.
    """
    import time

    t0 = time.perf_counter()
    graph = build_graph(ts, exact=exact)
    t1 = time.perf_counter()
    result = simulate(graph)
    t2 = time.perf_counter()
    return Prediction(ts, graph, result, {"build_s": t1 - t0, "simulate_s": t2 - t1})
