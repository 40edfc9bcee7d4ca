"""Change attribution: a what-if's predicted step change split into its causes.

:func:`attribute_change` replays counterfactual graphs that add one cause at a time, so the
parts add up exactly to ``predicted - replay`` per (rank, iteration) (ns):

* ``comm_ns``: the communication changes alone (world size, bandwidths, algorithm, overlap)
  on the measured graph;
* ``op_time_ns``: then the changed op durations (GPU, batch, speedups) with every host call
  replayed as measured (the graph without the wait models,
  :func:`traincast.graph.build.build_graph` ``model_waits=False``);
* ``host_waits_ns``: the rest, what the host-wait models (launch queue, blocking copies,
  syncs, polling; :mod:`traincast.graph.waits`) change when the host's waiting follows the
  new GPU instead of being replayed as work: negative when freed waits shorten the step,
  positive when a slower GPU makes the host wait where it did not.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.graph.build import build_graph
from traincast.simulate.replay import Replay, simulated_step_ns
from traincast.trace.traceset import TraceSet
from traincast.whatif.spec import WhatIf

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["CHANGE_COLUMNS", "attribute_change"]

#: the causes a what-if change is split into, columns of :func:`attribute_change`
CHANGE_COLUMNS = ("op_time_ns", "host_waits_ns", "comm_ns")


def attribute_change(ts: TraceSet, what: WhatIf, base: Replay, full: Replay, *,
                     exact: bool, compute: Any, comm: Any,
                     factor: np.ndarray | None = None) -> pd.DataFrame:
    """Columns rank, iteration, comm_ns, op_time_ns, host_waits_ns: the change from the
    replay ``base`` to the what-if ``full`` of ``ts`` per row of ``ts.iterations``, split by
    cause (module docstring); ``exact``, ``compute``, ``comm`` as the what-if was predicted
    with (:func:`traincast.predict.prediction.predict`); ``factor``: the per-event factors
    that prediction applied (:attr:`traincast.whatif.apply.Applied.factor`), reused for the
    graph without wait models (computed again when None)."""
    # lazy: the transforms (~35 ms of start-up) are not imported by a plain replay, which
    # reads CHANGE_COLUMNS only
    from traincast.whatif.apply import apply_what_if

    keys = ["rank", "iteration"]
    # step times from the step windows (``Replay.steps``, what ``step_ns`` reads from the
    # timeline, without building it), not ``Prediction.iterations``: that would simulate
    # the graphs without the profiler (``unprofiled_ns``), not needed here
    b = base.measured.iterations.select(keys).to_pandas()
    b["b"] = base.steps["predicted_ns"].to_numpy(np.int64)
    comm_only = dataclasses.replace(what, speedups=[], batch_size=None, gpu=None)
    if comm_only.empty:
        c_times = b["b"].to_numpy(np.int64)
    else:
        g = apply_what_if(ts, base.graph, comm_only, compute=compute, comm=comm).graph
        c_times = simulated_step_ns(ts, g)
    plain = build_graph(ts, exact=exact, model_waits=False)
    g = apply_what_if(ts, plain, what, compute=compute, comm=comm, factor=factor).graph
    f_times = simulated_step_ns(ts, g)
    p_times = full.steps["predicted_ns"].to_numpy(np.int64)
    out = b[keys].copy()
    out["comm_ns"] = c_times - b["b"].to_numpy(np.int64)
    out["op_time_ns"] = f_times - c_times
    out["host_waits_ns"] = p_times - f_times
    return out
