"""The replay's step table: measured against simulated step, per rank and iteration.

:func:`replay_steps` gives one row per row of the measured ``iterations`` table (rank,
iteration) of a :class:`~traincast.simulate.replay.Replay`: the measured and the simulated
step (ns), the error (percent), the simulated step's temporal breakdown
(:func:`traincast.analysis.breakdown.iteration_breakdown` of the simulated events inside the
simulated step window: compute, exposed communication, host idle, other; ns) and the
simulated step without the profiler's own host cost (:mod:`traincast.whatif.unprofiled`,
ns). It is the ``prediction`` table of :func:`traincast.analysis.analyze` and the first
columns of :attr:`traincast.predict.prediction.Prediction.iterations`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traincast.analysis.breakdown import CATEGORIES, iteration_breakdown
from traincast.costs.profiler_overhead import ProfilerOverhead
from traincast.simulate.replay import Replay
from traincast.whatif.unprofiled import Unprofiled, unprofiled_steps

__all__ = ["BREAKDOWN_COLUMNS", "BREAKDOWN_KEYS", "replay_steps"]

#: breakdown category -> key of ``breakdown_ns`` in ``traincast predict --format json``
BREAKDOWN_KEYS = {"compute": "compute", "exposed_comm": "exposed_comm", "idle": "host_idle",
                  "other": "other"}
#: breakdown category -> column of :func:`replay_steps` (ns)
BREAKDOWN_COLUMNS = {c: f"{k}_ns" for c, k in BREAKDOWN_KEYS.items()}


def replay_steps(replay: Replay, unprofiled: Unprofiled | None = None,
                 overhead: ProfilerOverhead | None = None) -> pd.DataFrame:
    """One row per (rank, iteration) of ``replay.measured.iterations``.

    Args:
        replay: the simulated run.
        unprofiled: its graph without the profiler's cost, simulated
            (:func:`traincast.whatif.unprofiled.unprofiled_steps`); computed when None.
        overhead: the profiler's per-event cost used to compute ``unprofiled`` (default: the
            shipped table).

    Returns:
        columns rank, iteration, measured_ns, predicted_ns, error_pct, compute_ns,
        exposed_comm_ns, host_idle_ns, other_ns, unprofiled_ns (:attr:`Replay.steps` plus
        the breakdown and the unprofiled step).
    """
    df = replay.steps.copy()
    # the breakdown of the simulated events inside the simulated windows, without building
    # the predicted TraceSet (``replay.timeline``: a copy of every event column)
    windows = df[["rank", "iteration"]].copy()
    windows["start"], windows["end"] = replay.step_windows()
    bd = iteration_breakdown(replay.simulated_events(), windows)
    for c in CATEGORIES:
        df[BREAKDOWN_COLUMNS[c]] = bd[c].to_numpy(np.int64)
    if unprofiled is None:
        unprofiled = unprofiled_steps(replay.measured, replay.graph, overhead)
    df["unprofiled_ns"] = unprofiled.step_ns
    return df
