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
from traincast.simulate.engine import CyclicGraphError, SimResult, simulate
from traincast.simulate.timeline import predicted_traceset, step_windows
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import small_pages

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
    #: the what-if applied (None for a plain replay), its notes, and the replay it changed
    what_if: dict[str, Any] | None = None
    what_if_notes: list[str] = field(default_factory=list)
    baseline: Prediction | None = None
    model_rel_err: float = 0.0
    #: per (rank, iteration) what-if change split into causes (see :func:`_attribute`):
    #: columns rank, iteration, op_time_ns, host_waits_ns, comm_ns (they add up to
    #: predicted - replay); None for a plain replay
    change: pd.DataFrame | None = None
    #: the profiler's per-event host cost to remove for ``unprofiled_ns``
    #: (:class:`traincast.record.overhead.ProfilerOverhead`); None: the shipped table
    overhead: Any = None

    @cached_property
    def unprofiled(self) -> Any:
        """This prediction's graph without the profiler's own host cost
        (:func:`traincast.whatif.unprofiled.unprofiled_graph`), simulated once, on first use:
        a :class:`~traincast.whatif.unprofiled.Unprofiled` whose ``step_ns`` holds the step
        durations in the order of ``measured.iterations``."""
        import time

        from traincast.whatif.unprofiled import unprofiled_graph

        t0 = time.perf_counter()
        u = unprofiled_graph(self.measured, self.graph, self.overhead)
        u.step_ns = _step_ns(self.measured, u.graph)
        self.elapsed_s["unprofiled_s"] = time.perf_counter() - t0
        return u

    @cached_property
    def timeline(self) -> TraceSet:
        """The predicted events (canonical schema, simulated times)."""
        return predicted_traceset(self.measured, self.graph, self.result)

    @cached_property
    def iterations(self) -> pd.DataFrame:
        """One row per (rank, iteration): measured_ns, predicted_ns, error_pct, the
        predicted breakdown (compute_ns, exposed_comm_ns, host_idle_ns, other_ns) and
        unprofiled_ns, the predicted step without the profiler's own host cost
        (:attr:`unprofiled`; of the what-if graph for a what-if)."""
        meas = self.measured.iterations.to_pandas()
        # the predicted steps and their events from the simulated times, without building
        # the predicted TraceSet (:attr:`timeline`: a copy of every event column)
        p_start, p_end = step_windows(self.measured, self.graph, self.result.times)
        pred = meas[["rank", "iteration"]].assign(start=p_start, end=p_end)
        df = meas[["rank", "iteration"]].copy()
        df["measured_ns"] = meas["dur"].to_numpy(np.int64)
        df["predicted_ns"] = p_end - p_start
        with np.errstate(divide="ignore", invalid="ignore"):
            df["error_pct"] = np.where(df["measured_ns"] > 0, 100.0 * (
                df["predicted_ns"] - df["measured_ns"]) / df["measured_ns"], 0.0)
        bd = iteration_breakdown(self._simulated_events(),
                                 pred[["rank", "iteration", "start", "end"]])
        for c in CATEGORIES:
            df[BREAKDOWN_COLUMNS[c]] = bd[c].to_numpy(np.int64)
        df["unprofiled_ns"] = self.unprofiled.step_ns
        if self.baseline is not None:
            df["replay_ns"] = _dur(self.baseline)
            rel = self._relative_uncertainty(df)
            df["interval_lo_ns"] = np.rint(df["predicted_ns"] * (1 - 1.96 * rel)).astype(
                np.int64)
            df["interval_hi_ns"] = np.rint(df["predicted_ns"] * (1 + 1.96 * rel)).astype(
                np.int64)
        if self.change is not None:
            df = df.merge(self.change, on=["rank", "iteration"], how="left")
            for c in CHANGE_COLUMNS:
                df[c] = df[c].fillna(0).astype(np.int64)
        return df

    def _simulated_events(self) -> pd.DataFrame:
        """rank, kind, ts, dur, device, tid of the simulated events (the rows of
        :attr:`timeline`'s events), ns on the simulation's clock."""
        n_pts = self.graph.n_event_points
        start = self.result.times[0:n_pts:2]
        end = self.result.times[1:n_pts:2]
        keep = (start >= 0) & (end >= start)
        ev = self.measured.events.select(["rank", "kind", "device", "tid"]).to_pandas()
        ev["ts"] = start
        ev["dur"] = end - start
        return ev if keep.all() else ev[keep].reset_index(drop=True)

    def _relative_uncertainty(self, df: pd.DataFrame) -> np.ndarray:
        """Relative standard error of a what-if prediction, per row.

        Combines (root of the sum of squares): the iteration-to-iteration coefficient of
        variation of the measured step on that rank (what one more run would vary by), the
        replay's own error on that row (how well the graph explains the measured run), and
        the models' cross-validated relative error weighted by the share of the step they
        changed (:attr:`model_rel_err`).
        """
        meas = df["measured_ns"].astype(float)
        cv = df.groupby("rank")["measured_ns"].transform(
            lambda x: float(np.std(x) / np.mean(x)) if len(x) > 1 and np.mean(x) > 0 else 0.0)
        replay_err = (df["replay_ns"] - meas).abs() / meas.where(meas > 0)
        rel = np.sqrt(cv.to_numpy() ** 2 + np.nan_to_num(replay_err.to_numpy()) ** 2
                      + self.model_rel_err ** 2)
        return rel

    def _repr_html_(self) -> str:
        """Jupyter display: the what-if, the error summary and :attr:`iterations` in ms."""
        from traincast.util.display import html_table

        df = self.iterations.copy()
        for c in [c for c in df.columns if c.endswith("_ns")]:
            df[c[:-3] + "_ms"] = df.pop(c) / 1e6
        s = self.summary
        what = f" what-if {self.what_if}" if self.what_if else ""
        return html_table(f"Prediction{what}: MAPE {s['mape_pct']:.2f}% (max "
                          f"{s['max_ape_pct']:.2f}%) over {s['iterations']} rank-iterations",
                          df)

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
                item = {
                    "iteration": int(row.iteration),
                    "measured_ns": int(row.measured_ns),
                    "predicted_ns": int(row.predicted_ns),
                    "error_pct": round(float(row.error_pct), 4),
                    "breakdown_ns": {k: int(getattr(row, f"{k}_ns"))
                                     for k in BREAKDOWN_KEYS.values()},
                }
                if self.baseline is not None:
                    item["replay_ns"] = int(row.replay_ns)
                    item["interval_ns"] = [int(row.interval_lo_ns), int(row.interval_hi_ns)]
                item["unprofiled_ns"] = int(row.unprofiled_ns)
                if self.change is not None:
                    item["change_ns"] = {c[:-3]: int(getattr(row, c)) for c in CHANGE_COLUMNS}
                its.append(item)
            ranks.append({"rank": int(rank), "iterations": its})
        s = self.summary
        out: dict[str, Any] = {
            "ranks": ranks, "summary": {"mape_pct": round(s["mape_pct"], 4),
                                        "max_ape_pct": round(s["max_ape_pct"], 4),
                                        "iterations": s["iterations"]},
            "notes": self.notes}
        if self.what_if is not None:
            out["what_if"] = self.what_if
        return out

    @property
    def notes(self) -> list[str]:
        """Caveats: unmatched collectives, loader guesses, what the what-if did."""
        out = list(self.measured.warnings) + list(self.what_if_notes)
        out += self.unprofiled.notes
        n = int(self.graph.unmatched_collectives.size)
        if n:
            out.append(f"{n} collective(s) replayed with measured durations: their peers' "
                       "traces are absent or they lie outside the profiled steps")
        skew = {r: o for r, o in self.graph.clock_offset.items() if o}
        if skew:
            shown = ", ".join(f"rank {r} {o / 1e3:+.1f} us" for r, o in sorted(skew.items()))
            out.append("clocks aligned on collective ends (estimated offset against rank "
                       f"{min(self.graph.clock_offset)}): {shown}")
        return out


#: the causes a what-if change is split into (:func:`_attribute`)
CHANGE_COLUMNS = ("op_time_ns", "host_waits_ns", "comm_ns")


def predict(ts: TraceSet, *, exact: bool = False, what_if: Any = None,
            compute: Any = None, comm: Any = None, model_waits: bool = True,
            overhead: Any = None) -> Prediction:
    """Build the execution graph of ``ts``, replay it and compare with the measurement.

    Args:
        ts: the measured run.
        exact: calibrate every latency to its measured value (see
            :func:`traincast.graph.build.build_graph`).
        what_if: changes to predict (``{"gpu": "H100", "batch_size": 64, ...}`` or
            ``["gpu=H100", ...]``; :mod:`traincast.whatif.spec`). The result's
            ``predicted_ns`` is then the what-if prediction, ``replay_ns`` the unchanged
            replay, and ``interval_*_ns`` a 95% prediction interval; ``error_pct`` is the
            change against the measurement.
        compute, comm: fitted cost models to use; fitted from ``ts`` when needed and absent.
        model_waits: model host waits (launch queue, blocking copies, syncs, polling) as
            dependencies plus intrinsic cost (:mod:`traincast.graph.waits`); False replays
            host calls with their measured durations (for comparison).
        overhead: the profiler's per-event host cost
            (:func:`traincast.record.overhead.measure_profiler_overhead`) removed for the
            ``unprofiled_ns`` column; default: the table shipped with the package.

    Raises:
        CollectiveMismatchError: collectives cannot be matched across ranks.
        ParameterError: a bad what-if.
        TraceFormatError: a rank's file holds no usable events (names the file).
        CyclicGraphError: the graph built from the traces has a cycle (names the files).
    """
    from traincast.whatif.spec import parse_what_if

    what = parse_what_if(what_if)
    ts.require_events("replay")
    try:
        with small_pages():  # many short-lived large arrays (traincast.util.allocator)
            return _predict(ts, what, exact=exact, compute=compute, comm=comm,
                            model_waits=model_waits, overhead=overhead)
    except CyclicGraphError as exc:  # name the traces the graph was built from
        raise CyclicGraphError(f"{exc} (a bug of traincast's graph for these traces; please "
                               "report it)", ts.where or None) from None


def _predict(ts: TraceSet, what: Any, *, exact: bool, compute: Any, comm: Any,
             model_waits: bool, overhead: Any) -> Prediction:
    import time

    t0 = time.perf_counter()
    graph = build_graph(ts, exact=exact, model_waits=model_waits)
    t1 = time.perf_counter()
    result = simulate(graph)
    t2 = time.perf_counter()
    base = Prediction(ts, graph, result, {"build_s": t1 - t0, "simulate_s": t2 - t1},
                      overhead=overhead)
    if what.empty:
        return base
    from traincast.whatif.apply import apply_what_if

    if compute is None and what.batch_size and what.efficiency == "fitted":
        compute = _fit_compute(ts)
    applied = apply_what_if(ts, graph, what, compute=compute, comm=comm)
    t3 = time.perf_counter()
    res = simulate(applied.graph)
    t4 = time.perf_counter()
    rel = 0.0
    if compute is not None and what.batch_size and what.efficiency == "fitted":
        cv = getattr(compute, "cv_mape", None)
        err = float(np.nanmean(list(cv.values()))) / 100 if isinstance(cv, dict) and cv else 0.0
        rel = err * applied.changed_share
    pred = Prediction(ts, applied.graph, res,
                      {"build_s": t1 - t0, "simulate_s": t2 - t1, "what_if_s": t4 - t2,
                       "apply_s": t3 - t2},
                      what_if=what.to_dict(), what_if_notes=applied.notes, baseline=base,
                      model_rel_err=rel, overhead=overhead)
    if model_waits:
        pred.change = _attribute(ts, what, base, pred, exact=exact, compute=compute,
                                 comm=comm)
        pred.__dict__.pop("iterations", None)  # cached before the change columns existed
        pred.elapsed_s["attribute_s"] = time.perf_counter() - t4
    return pred


def _attribute(ts: TraceSet, what: Any, base: Prediction, full: Prediction, *, exact: bool,
               compute: Any, comm: Any) -> pd.DataFrame:
    """Split each step's predicted change into its causes, by counterfactual replays that add
    one cause at a time (so the parts add up exactly to ``predicted - replay``):

    * ``comm_ns``: the communication changes alone (world size, bandwidths, algorithm,
      overlap) on the measured graph;
    * ``op_time_ns``: then the changed op durations (GPU, batch, speedups) with every host
      call replayed as measured (the graph without the wait models,
      :func:`traincast.graph.build.build_graph` ``model_waits=False``);
    * ``host_waits_ns``: the rest, what the host-wait models (launch queue, blocking copies,
      syncs, polling; :mod:`traincast.graph.waits`) change when the host's waiting follows
      the new GPU instead of being replayed as work: negative when freed waits shorten the
      step, positive when a slower GPU makes the host wait where it did not.
    """
    import dataclasses

    from traincast.whatif.apply import apply_what_if

    keys = ["rank", "iteration"]
    # step times from the timelines, not ``iterations``: that would simulate the graphs
    # without the profiler (``unprofiled_ns``), not needed here
    b = base.measured.iterations.select(keys).to_pandas()
    b["b"] = _dur(base)
    comm_only = dataclasses.replace(what, speedups=[], batch_size=None, gpu=None)
    if comm_only.empty:
        c_times = b["b"].to_numpy(np.int64)
    else:
        g = apply_what_if(ts, base.graph, comm_only, compute=compute, comm=comm).graph
        c_times = _step_ns(ts, g)
    plain = build_graph(ts, exact=exact, model_waits=False)
    g = apply_what_if(ts, plain, what, compute=compute, comm=comm).graph
    f_times = _step_ns(ts, g)
    p_times = _dur(full)
    out = b[keys].copy()
    out["comm_ns"] = c_times - b["b"].to_numpy(np.int64)
    out["op_time_ns"] = f_times - c_times
    out["host_waits_ns"] = p_times - f_times
    return out


def _dur(pred: Prediction) -> np.ndarray:
    """int64[(rank, iteration) rows]: the predicted step durations of ``pred``."""
    return pred.timeline.iterations.column("dur").to_numpy().astype(np.int64)


def _step_ns(ts: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    """int64[(rank, iteration) rows]: the simulated step durations of ``graph``, in the order
    of ``ts.iterations``."""
    start, end = step_windows(ts, graph, simulate(graph).times)
    return end - start


def _fit_compute(ts: TraceSet) -> Any:
    """The compute model fitted on ``ts`` (None when the model module is unavailable)."""
    try:
        from traincast.costs.compute import fit_compute_model
    except ImportError:  # pragma: no cover - the model ships with the package
        return None
    return fit_compute_model(ts)
