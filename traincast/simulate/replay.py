"""Replay: a measured TraceSet's execution graph simulated with the trace's own durations.

:func:`replay` builds the graph (:func:`traincast.graph.build.build_graph`; a cached job's
graph built before is read from the cache, :func:`traincast.graph.stored.built_or_stored`) and
simulates it
(:func:`traincast.simulate.engine.simulate`); the :class:`Replay` it returns holds the
measured TraceSet, the graph, the simulated point times and the predicted timeline (the same
event rows with simulated times, :func:`traincast.simulate.timeline.predicted_traceset`).
Times are ns on the simulation's aligned clock. Analyses that need simulated times (critical
path, idle causes of a replay, the replay's step table) take a :class:`Replay`;
:class:`traincast.predict.prediction.Prediction` is one, with what-if changes on top.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from traincast.graph.model import ExecutionGraph
from traincast.graph.stored import built_or_stored, keep_later
from traincast.simulate.engine import CyclicGraphError, SimResult, simulate
from traincast.simulate.timeline import predicted_traceset, step_windows
from traincast.trace.arrow import to_numpy
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory, small_pages

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["Replay", "replay", "simulated_step_ns"]


@dataclass
class Replay:
    """A simulated run of a measured TraceSet's execution graph.

    Attributes:
        measured: the input TraceSet.
        graph: its execution graph (for a :class:`~traincast.predict.prediction.Prediction`
            with a what-if, the changed graph).
        result: simulated point times.
        elapsed_s: wall time of the steps that made it (``build_s``, ``simulate_s``, ...),
            seconds.
    """

    measured: TraceSet
    graph: ExecutionGraph
    result: SimResult
    elapsed_s: dict[str, float] = field(default_factory=dict)

    @property
    def plain(self) -> bool:
        """True when :attr:`graph` is the graph built from :attr:`measured`, unchanged (a
        what-if :class:`~traincast.predict.prediction.Prediction` says False)."""
        return True

    @cached_property
    def timeline(self) -> TraceSet:
        """The predicted events (canonical schema, simulated times)."""
        return predicted_traceset(self.measured, self.graph, self.result)

    def step_windows(self) -> tuple[np.ndarray, np.ndarray]:
        """int64 (start, end) per row of ``measured.iterations``: the simulated step windows
        (:func:`traincast.simulate.timeline.step_windows`), without building
        :attr:`timeline`."""
        return step_windows(self.measured, self.graph, self.result.times)

    @cached_property
    def step_columns(self) -> dict[str, np.ndarray]:
        """:attr:`steps` as numpy columns (the same names, dtypes and rows; shared: read
        them, do not modify them), without pandas."""
        meas = self.measured.iterations
        p_start, p_end = self.step_windows()
        measured = to_numpy(meas.column("dur")).astype(np.int64)
        predicted = p_end - p_start
        with np.errstate(divide="ignore", invalid="ignore"):
            error = np.where(measured > 0, 100.0 * (predicted - measured) / measured, 0.0)
        return {"rank": to_numpy(meas.column("rank")),
                "iteration": to_numpy(meas.column("iteration")),
                "measured_ns": measured, "predicted_ns": predicted, "error_pct": error}

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per row of ``measured.iterations``: rank, iteration, measured_ns,
        predicted_ns (the simulated step window's length) and error_pct (predicted against
        measured, percent; 0 where nothing was measured)."""
        import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

        return pd.DataFrame(self.step_columns)

    def step_ns(self) -> np.ndarray:
        """int64[(rank, iteration) rows]: the simulated step durations, in the order of
        ``measured.iterations`` (from :attr:`timeline`)."""
        return to_numpy(self.timeline.iterations.column("dur")).astype(np.int64)

    def simulated_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """int64 start and end (ns, the simulation's clock) of every row of
        ``measured.events``, and the bool mask of the rows simulated (the rows of
        :attr:`timeline`'s events)."""
        n_pts = self.graph.n_event_points
        start = self.result.times[0:n_pts:2]
        end = self.result.times[1:n_pts:2]
        return start, end, (start >= 0) & (end >= start)

    def simulated_events(self) -> pd.DataFrame:
        """rank, kind, device, tid, ts, dur of the simulated events (the rows of
        :attr:`timeline`'s events), ns on the simulation's clock."""
        start, end, keep = self.simulated_spans()
        ev = self.measured.events.select(["rank", "kind", "device", "tid"]).to_pandas()
        ev["ts"] = start
        ev["dur"] = end - start
        return ev if keep.all() else ev[keep].reset_index(drop=True)


def replay(ts: TraceSet, *, exact: bool = False, model_waits: bool = True) -> Replay:
    """Build the execution graph of ``ts`` and simulate it with the measured durations.

    Args:
        ts: the measured run.
        exact: calibrate every latency to its measured value (see
            :func:`traincast.graph.build.build_graph`).
        model_waits: model host waits as dependencies plus intrinsic cost
            (:mod:`traincast.graph.waits`); False replays host calls as measured.

    Raises:
        CollectiveMismatchError: collectives cannot be matched across ranks.
        TraceFormatError: a rank's file holds no usable events (names the file).
        CyclicGraphError: the graph built from the traces has a cycle (names the files).
    """
    ts.require_events("replay")
    with small_pages(), cyclic_graph_named(ts):  # many short-lived large arrays
        return replay_unchecked(ts, exact=exact, model_waits=model_waits)


def replay_unchecked(ts: TraceSet, *, exact: bool, model_waits: bool) -> Replay:
    """:func:`replay` without the checks and the allocator setting (for callers that hold
    both around more work, :func:`traincast.predict.prediction.predict`)."""
    t0 = time.perf_counter()
    graph, stored = built_or_stored(ts, exact=exact, model_waits=model_waits)
    release_memory()  # the build's per-event intermediates, freed, back to the OS
    t1 = time.perf_counter()
    result = simulate(graph)
    if not stored:  # a cached job's graph, with the simulator's edge order, for the next run
        keep_later(ts, graph, exact=exact, model_waits=model_waits)
    release_memory()  # the simulation's temporaries (edge order, lags in it), likewise
    t2 = time.perf_counter()
    return Replay(ts, graph, result, {"build_s": t1 - t0, "simulate_s": t2 - t1})


@contextmanager
def cyclic_graph_named(ts: TraceSet) -> Iterator[None]:
    """Within the block, a :class:`CyclicGraphError` is raised again naming the trace files
    of ``ts`` the graph was built from."""
    try:
        yield
    except CyclicGraphError as exc:
        raise CyclicGraphError(f"{exc} (a bug of traincast's graph for these traces; please "
                               "report it)", ts.where or None) from None


def simulated_step_ns(ts: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    """int64[(rank, iteration) rows]: the simulated step durations of ``graph`` (of ``ts``,
    changed or not), in the order of ``ts.iterations``."""
    start, end = step_windows(ts, graph, simulate(graph).times)
    return end - start
