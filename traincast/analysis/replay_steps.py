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

from typing import TYPE_CHECKING

import numpy as np

from traincast.analysis.breakdown import CATEGORIES, EventArrays, window_totals
from traincast.costs.profiler_overhead import ProfilerOverhead
from traincast.simulate.replay import Replay
from traincast.whatif.unprofiled import Unprofiled, unprofiled_steps

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["BREAKDOWN_COLUMNS", "BREAKDOWN_KEYS", "replay_step_columns", "replay_steps"]

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
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    return pd.DataFrame(replay_step_columns(replay, unprofiled, overhead))


def replay_step_columns(replay: Replay, unprofiled: Unprofiled | None = None,
                        overhead: ProfilerOverhead | None = None) -> dict[str, np.ndarray]:
    """:func:`replay_steps` as numpy columns (the same names, dtypes and rows), without
    pandas. The first five arrays are :attr:`Replay.step_columns`' own: read them, do not
    modify them."""
    cols = dict(replay.step_columns)
    # the breakdown of the simulated events inside the simulated windows, without building
    # the predicted TraceSet (``replay.timeline``: a copy of every event column)
    lo, hi = replay.step_windows()
    start, end, keep = replay.simulated_spans()
    events = replay.measured.events.select(["rank", "kind", "device", "tid"])
    bd = window_totals(EventArrays.of_events(events, start, end).take(keep), cols["rank"],
                       lo, hi)
    for j, c in enumerate(CATEGORIES):
        cols[BREAKDOWN_COLUMNS[c]] = bd[:, j]
    if unprofiled is None:
        unprofiled = unprofiled_steps(replay.measured, replay.graph, overhead)
    cols["unprofiled_ns"] = unprofiled.step_ns
    return cols
