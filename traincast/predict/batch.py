"""Several what-ifs on one replay: the simulated step of each, sharing one graph.

:func:`what_if_steps` gives, for each what-if, the step table that ``predict(ts,
what_if=w).steps`` gives (:attr:`traincast.simulate.replay.Replay.steps`: rank, iteration,
measured_ns, predicted_ns, error_pct; same integers), without building the graph again per
what-if and without the parts of a prediction the step table does not need (the change
attribution, the note on an unchanged step, the unprofiled step).

* What-ifs that change durations only (:func:`traincast.whatif.apply.rewires` is False:
  speedups, batch size, GPU) share the replay's graph: each gives one row of edge lags, and
  the rows are simulated together (:func:`traincast.simulate.engine.simulate_batch`, which
  reuses the graph's derived structure), at most :data:`BATCH_BYTES` of lag and time arrays
  at a time (a large job simulates them a few rows at a time).
* What-ifs that move edges (``overlap=ideal``, network changes) are applied to the replay's
  graph (a copy of its edge sources) and simulated one at a time, each copy freed before the
  next.

So beside the replay, at most one changed copy of the whole-job graph's edges, or one batch
of lag rows, is held at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.compute import fit_compute_model
from traincast.simulate.engine import simulate, simulate_batch
from traincast.simulate.replay import Replay, cyclic_graph_named
from traincast.simulate.timeline import step_windows
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import small_pages
from traincast.whatif.apply import apply_what_if, event_factors, rewires, scale_lags
from traincast.whatif.spec import WhatIf, parse_what_if

__all__ = ["BATCH_BYTES", "what_if_steps"]

#: the most bytes of lag rows and simulated times one batch of duration-only what-ifs holds
#: (at least one row is always simulated)
BATCH_BYTES = 160 << 20


def what_if_steps(ts: TraceSet, base: Replay, what_ifs: Sequence[Any], *,
                  compute: Any = None, comm: Any = None) -> list[pd.DataFrame]:
    """The step table of each what-if of ``what_ifs`` on the replay ``base`` of ``ts``.

    Args:
        ts: the measured run.
        base: its replay; each table equals ``predict(ts, what_if=w, exact=..., model_waits=
            ...).steps`` for the ``exact`` and ``model_waits`` ``base``'s graph was built with.
        what_ifs: what-if specifications (:func:`traincast.whatif.spec.parse_what_if`).
        compute, comm: fitted cost models, as :func:`traincast.predict.prediction.predict`
            takes them (a ``batch_size`` what-if with ``efficiency=fitted`` fits the compute
            model when none is given).

    Returns:
        one DataFrame per what-if, in order: rank, iteration, measured_ns, predicted_ns,
        error_pct, one row per row of ``ts.iterations``.

    Raises:
        ParameterError: a bad what-if.
        CyclicGraphError: a changed graph has a cycle (names the files).
    """
    whats = [parse_what_if(w) for w in what_ifs]
    ts.require_events("replay")
    with small_pages(), cyclic_graph_named(ts):
        ends = _step_ends(ts, base, whats, compute, comm)
    meas = base.steps
    out = []
    for start, end in ends:
        df = meas[["rank", "iteration", "measured_ns"]].copy()
        df["predicted_ns"] = end - start
        with np.errstate(divide="ignore", invalid="ignore"):
            df["error_pct"] = np.where(df["measured_ns"] > 0, 100.0 * (
                df["predicted_ns"] - df["measured_ns"]) / df["measured_ns"], 0.0)
        out.append(df)
    return out


def _step_ends(ts: TraceSet, base: Replay, whats: list[WhatIf], compute: Any, comm: Any
               ) -> list[tuple[np.ndarray, np.ndarray]]:
    """(start, end) of the simulated steps of each what-if (``step_windows``)."""
    graph = base.graph
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(whats)
    lag_only = [i for i, w in enumerate(whats) if not rewires(w)]
    row_bytes = 8 * (2 * graph.n_edges + graph.n_points)  # a lag row, its CSR copy, times
    per_batch = max(1, BATCH_BYTES // max(row_bytes, 1))
    for lo in range(0, len(lag_only), per_batch):
        chunk = lag_only[lo:lo + per_batch]
        lags = np.empty((len(chunk), graph.n_edges), np.int64)
        for b, i in enumerate(chunk):  # apply_what_if's lags, written into the batch's row
            lags[b] = graph.lag
            scale_lags(graph, event_factors(ts, whats[i], _compute(ts, whats[i], compute)),
                       lags[b])
        times = simulate_batch(graph, lags)
        del lags
        for b, i in enumerate(chunk):
            out[i] = step_windows(ts, graph, times[b])
        del times
    for i, w in enumerate(whats):
        if out[i] is None:
            g = apply_what_if(ts, graph, w, compute=_compute(ts, w, compute), comm=comm).graph
            out[i] = step_windows(ts, g, simulate(g).times)
            del g
    return out  # type: ignore[return-value]


def _compute(ts: TraceSet, what: WhatIf, compute: Any) -> Any:
    """The compute model ``predict`` would use for ``what``."""
    if compute is None and what.batch_size and what.efficiency == "fitted":
        return fit_compute_model(ts)
    return compute
