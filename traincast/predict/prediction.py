"""``traincast.predict``: replay a measured TraceSet, or predict a what-if on it, and compare
with the measurement.

:func:`predict` replays the run (:func:`traincast.simulate.replay.replay`) and, with a
what-if (:mod:`traincast.whatif.spec`), simulates the changed graph
(:func:`traincast.whatif.apply.apply_what_if`) and splits the change into causes
(:mod:`traincast.predict.attribution`). The :class:`Prediction` it returns is a
:class:`~traincast.simulate.replay.Replay` (of the changed graph for a what-if) with the
per-step table (:attr:`Prediction.iterations`, ns), the error summary and the
``traincast predict --format json`` contract (:meth:`Prediction.to_dict`).

Errors: see :func:`predict`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.analysis.replay_steps import BREAKDOWN_KEYS, replay_step_columns
from traincast.costs.profiler_overhead import ProfilerOverhead
from traincast.predict.attribution import CHANGE_COLUMNS, attribute_change
from traincast.predict.bounds import BOUND_COLUMNS, step_bound_columns, upper_bound_ns
from traincast.simulate.engine import simulate
from traincast.simulate.replay import Replay, cyclic_graph_named, replay_unchecked
from traincast.simulate.timeline import step_windows
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory, small_pages
from traincast.util.display import html_table
from traincast.whatif.spec import WhatIf, parse_what_if
from traincast.whatif.unprofiled import Unprofiled, unprofiled_steps

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["Prediction", "predict"]


#: keys of each iteration's ``bounds_ns`` in :meth:`Prediction.to_dict` (columns ``<key>_ns``)
BOUNDS_KEYS = ("device_bound", "host_bound", "comm_bound", "bound", "added", "upper_bound")


class _UnprofiledLater:
    """Stands for ``pred.unprofiled`` where only its ``step_ns`` is read: the unprofiled
    graph is made (:attr:`Prediction.unprofiled`, cached there) on that read."""

    def __init__(self, pred: Prediction) -> None:
        self._pred = pred

    @property
    def step_ns(self) -> np.ndarray | None:
        if "unprofiled" not in self._pred.__dict__:  # not made yet
            release_memory()  # the breakdown's temporaries, back to the OS first
        return self._pred.unprofiled.step_ns


@dataclass
class Prediction(Replay):
    """Replay of a measured run, or of a what-if on it (the :class:`Replay` fields: the
    measured TraceSet, the graph simulated, its point times, ``elapsed_s`` of each stage)."""

    #: the what-if applied (None for a plain replay), its notes, and the replay it changed
    what_if: dict[str, Any] | None = None
    what_if_notes: list[str] = field(default_factory=list)
    baseline: Prediction | None = None
    model_rel_err: float = 0.0
    #: per (rank, iteration) what-if change split into causes
    #: (:func:`traincast.predict.attribution.attribute_change`): columns rank, iteration,
    #: op_time_ns, host_waits_ns, comm_ns (they add up to predicted - replay); None for a
    #: plain replay
    change: pd.DataFrame | None = None
    #: the profiler's per-event host cost to remove for ``unprofiled_ns``; None: the shipped
    #: table (:func:`traincast.costs.profiler_overhead.overhead_table`)
    overhead: ProfilerOverhead | None = None
    #: how the replayed graph was built (:func:`predict`'s ``exact`` and ``model_waits``)
    exact: bool = False
    model_waits: bool = True

    @property
    def plain(self) -> bool:
        """True for a replay without a what-if (the graph built from ``measured``)."""
        return self.what_if is None

    @cached_property
    def unprofiled(self) -> Unprofiled:
        """This prediction's graph without the profiler's own host cost
        (:func:`traincast.whatif.unprofiled.unprofiled_graph`), simulated once, on first use:
        its ``step_ns`` holds the step durations in the order of ``measured.iterations``."""
        t0 = time.perf_counter()
        u = unprofiled_steps(self.measured, self.graph, self.overhead)
        self.elapsed_s["unprofiled_s"] = time.perf_counter() - t0
        return u

    @cached_property
    def iterations(self) -> pd.DataFrame:
        """One row per (rank, iteration): measured_ns, predicted_ns, error_pct, the
        predicted breakdown (compute_ns, exposed_comm_ns, host_idle_ns, other_ns) and
        unprofiled_ns, the predicted step without the profiler's own host cost
        (:attr:`unprofiled`; of the what-if graph for a what-if)
        (:func:`traincast.analysis.replay_steps.replay_steps`); for a what-if also
        replay_ns, interval_lo_ns, interval_hi_ns and the change columns
        (:data:`~traincast.predict.attribution.CHANGE_COLUMNS`); always the step's bounds
        (:func:`traincast.predict.bounds.step_bounds`: device_bound_ns, host_bound_ns,
        comm_bound_ns, bound_ns, added_ns) and upper_bound_ns
        (:func:`traincast.predict.bounds.upper_bound_ns`)."""
        import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

        return pd.DataFrame(self.iteration_columns)

    @cached_property
    def iteration_columns(self) -> dict[str, np.ndarray]:
        """:attr:`iterations` as numpy columns (the same names, dtypes and rows; read them,
        do not modify them), without pandas for a plain replay: what ``traincast predict``
        prints and writes."""
        # the bounds first: their temporaries come and go, back to the OS, before the
        # unprofiled graph is made
        bd = step_bound_columns(self.measured, self.graph,
                                None if self.baseline is None else self.baseline.graph)
        release_memory()
        # the unprofiled graph is made once the breakdown's temporaries are gone
        # (replay_step_columns reads ``step_ns`` last): the two never peak together
        cols = replay_step_columns(self, _UnprofiledLater(self))  # type: ignore[arg-type]
        if self.baseline is not None or self.change is not None:
            cols = self._what_if_columns(cols)
        for c in BOUND_COLUMNS:
            cols[c] = bd[c].astype(np.int64, copy=False)
        if self.baseline is None:
            cols["upper_bound_ns"] = upper_bound_ns(cols["measured_ns"], cols["predicted_ns"],
                                                    cols["added_ns"])
        else:
            start, _ = step_windows(self.measured, self.graph, self.result.times)
            base_start, _ = step_windows(self.measured, self.baseline.graph,
                                         self.baseline.result.times)
            cols["upper_bound_ns"] = upper_bound_ns(cols["measured_ns"], cols["replay_ns"],
                                                    cols["added_ns"], base_start, start)
        return cols

    def _what_if_columns(self, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A what-if's replay_ns, 95% interval and change columns added to ``cols``."""
        import pandas as pd  # lazy: a what-if's only (~0.3 s of start-up)

        df = pd.DataFrame(cols)
        if self.baseline is not None:
            df["replay_ns"] = self.baseline.step_columns["predicted_ns"].astype(np.int64)
            rel = self._relative_uncertainty(df)
            df["interval_lo_ns"] = np.rint(df["predicted_ns"] * (1 - 1.96 * rel)).astype(
                np.int64)
            df["interval_hi_ns"] = np.rint(df["predicted_ns"] * (1 + 1.96 * rel)).astype(
                np.int64)
        if self.change is not None:
            df = df.merge(self.change, on=["rank", "iteration"], how="left")
            for c in CHANGE_COLUMNS:
                df[c] = df[c].fillna(0).astype(np.int64)
        return {c: df[c].to_numpy() for c in df.columns}

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
        ape = np.abs(self.iteration_columns["error_pct"])
        return {"mape_pct": float(ape.mean()) if len(ape) else 0.0,
                "max_ape_pct": float(ape.max()) if len(ape) else 0.0,
                "iterations": int(len(ape))}

    def to_dict(self) -> dict[str, Any]:
        """The ``traincast predict --format json`` contract.

        Each iteration's ``bounds_ns`` holds (ns, :mod:`traincast.predict.bounds`):
        ``device_bound`` (the busiest stream's kernel/memcpy/memset time launched in the
        step, after the what-if), ``host_bound`` (the busiest host thread's own work, waits
        excluded), ``comm_bound`` (the busiest stream's collective transfer time at the
        modelled bandwidth), ``bound`` (their max: ``predicted_ns`` is not below it),
        ``added`` (work the what-if added to the iteration) and ``upper_bound``
        (max(measured, replay) + added: ``predicted_ns`` is not above it)."""
        ranks: list[dict[str, Any]] = []
        cols = self.iteration_columns
        # ranks ascending, each rank's rows in table order; one pass over the rows as
        # Python values
        order = np.argsort(cols["rank"], kind="stable")
        v = {c: a[order].tolist() for c, a in cols.items()}
        its: list[dict[str, Any]] = []
        for i, rank in enumerate(v["rank"]):
            if not ranks or ranks[-1]["rank"] != rank:
                its = []
                ranks.append({"rank": rank, "iterations": its})
            item = {
                "iteration": v["iteration"][i],
                "measured_ns": v["measured_ns"][i],
                "predicted_ns": v["predicted_ns"][i],
                "error_pct": round(v["error_pct"][i], 4),
                "breakdown_ns": {k: v[f"{k}_ns"][i] for k in BREAKDOWN_KEYS.values()},
            }
            if self.baseline is not None:
                item["replay_ns"] = v["replay_ns"][i]
                item["interval_ns"] = [v["interval_lo_ns"][i], v["interval_hi_ns"][i]]
            item["unprofiled_ns"] = v["unprofiled_ns"][i]
            item["bounds_ns"] = {k: v[f"{k}_ns"][i] for k in BOUNDS_KEYS}
            if self.change is not None:
                item["change_ns"] = {c[:-3]: v[c][i] for c in CHANGE_COLUMNS}
            its.append(item)
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


#: a what-if whose every step moves by less than this share of the replayed step is
#: "unchanged" and says why (:func:`why_unchanged`)
UNCHANGED_SHARE = 0.005


def why_unchanged(pred: Prediction, base: Prediction, what: WhatIf) -> list[str]:
    """A note when the what-if moves no step by ``UNCHANGED_SHARE`` (0.5%) or more: where the
    critical path of the what-if's longest step (:func:`traincast.analysis.critical_path.
    critical_path`) spends its time -- host (CPU threads, launches and other latencies),
    device (kernels, copies, memsets), communication (collective transfers) or before a
    step's start (a rank that started its step late, a peer that had not begun its step, an
    anchored first point) --
    and the share of it on edges the what-if changed (lag or source differs from the
    replay's graph). [] otherwise."""
    # the step windows' lengths (Replay.step_ns without building the timelines)
    old = base.step_columns["predicted_ns"].astype(float)
    new = pred.step_columns["predicted_ns"].astype(float)
    if not old.size or old.size != new.size or not (old > 0).all():
        return []
    rel = (new - old) / old
    worst = float(rel[np.argmax(np.abs(rel))])
    if abs(worst) >= UNCHANGED_SHARE:
        return []
    # lazy: the analyses' package and pandas, ~0.3 s of start-up a plain predict skips
    from traincast.analysis.critical_path import critical_path

    cp = critical_path(pred)
    path = cp.path
    total = max(1, int(path["dur_ns"].sum()))
    kind, fam, cat, ek = (path[c].to_numpy(object)
                          for c in ("kind", "op_family", "category", "edge_kind"))
    work = np.isin(ek, ["EXEC", "COLLECTIVE"])
    comm = (work & (fam == "comm")) | (kind == "collective") | (cat == "comm_unmatched")
    peer = np.isin(cat, ["waiting_for_peer", "anchored", "late_start"]) & ~comm
    dev = np.isin(kind, GPU_WORK_KINDS) & (ek == "EXEC") & ~comm
    dur = path["dur_ns"].to_numpy(np.int64)
    host = ~dev & ~comm & ~peer
    share = {"host": dur[host].sum() / total, "device": dur[dev].sum() / total,
             "communication": dur[comm].sum() / total}
    if peer.any():
        share["before the step's start (a late start or waiting for a peer)"] = (
            dur[peer].sum() / total)
    g0, g1 = base.graph, pred.graph
    moved = (g0.lag != g1.lag) | (g0.src != g1.src)
    e = path["edge"].to_numpy(np.int64)
    on = (e >= 0) & moved[np.clip(e, 0, None)]
    changed = dur[on].sum() / total
    split = ", ".join(f"{100 * v:.0f}% {k}" for k, v in share.items())
    if host.any():
        by_cat = path[host].groupby("category")["dur_ns"].sum().sort_values(ascending=False)
        split += (f"; largest host part: {by_cat.index[0]} "
                  f"{100 * by_cat.iloc[0] / total:.0f}%")
    where = f"rank {cp.rank} step {cp.iteration}"
    top = max(share, key=share.__getitem__)
    device_change = bool(what.gpu or what.batch_size or any(
        sp.family is not None or sp.pattern is not None
        or set(sp.kinds or ()) & set(GPU_WORK_KINDS) for sp in what.speedups))
    if device_change and share["device"] < 0.25:
        why = f"the GPU is off the critical path: {100 * share['host']:.0f}% of it is host time"
    elif top.startswith("before"):
        why = (f"the step is set by a peer that begins its step late ({100 * share[top]:.0f}% "
               "of the critical path lies before its start)")
    else:
        why = f"the step is bound by {top} time ({100 * share[top]:.0f}% of the critical path)"
    most = f"{100 * worst:+.2f}".replace("-0.00", "+0.00")
    return [f"the step is unchanged (at most {most}% on any rank-step, under "
            f"{100 * UNCHANGED_SHARE:g}%): {why} (critical path of {where}: {split}); "
            f"what the what-if changed is {100 * changed:.0f}% of that path"]


def predict(ts: TraceSet, *, exact: bool = False, what_if: Any = None,
            compute: Any = None, comm: Any = None, model_waits: bool = True,
            overhead: ProfilerOverhead | None = None) -> Prediction:
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
    what = parse_what_if(what_if)
    ts.require_events("replay")
    # many short-lived large arrays (traincast.util.allocator); a cycle names the traces
    with small_pages(), cyclic_graph_named(ts):
        return _predict(ts, what, exact=exact, compute=compute, comm=comm,
                        model_waits=model_waits, overhead=overhead)



def _predict(ts: TraceSet, what: WhatIf, *, exact: bool, compute: Any, comm: Any,
             model_waits: bool, overhead: ProfilerOverhead | None) -> Prediction:
    r = replay_unchecked(ts, exact=exact, model_waits=model_waits)
    base = Prediction(r.measured, r.graph, r.result, r.elapsed_s, overhead=overhead,
                      exact=exact, model_waits=model_waits)
    if what.empty:
        return base
    t2 = time.perf_counter()
    if compute is None and what.batch_size and what.efficiency == "fitted":
        # lazy: a batch what-if alone fits it (every predict would import the models)
        from traincast.costs.compute import fit_compute_model

        compute = fit_compute_model(ts)
    # lazy: the transforms and their cost models (~35 ms of start-up) are a what-if's only
    from traincast.whatif.apply import apply_what_if

    applied = apply_what_if(ts, r.graph, what, compute=compute, comm=comm)
    t3 = time.perf_counter()
    res = simulate(applied.graph)
    t4 = time.perf_counter()
    rel = 0.0
    if compute is not None and what.batch_size and what.efficiency == "fitted":
        cv = getattr(compute, "cv_mape", None)
        err = float(np.nanmean(list(cv.values()))) / 100 if isinstance(cv, dict) and cv else 0.0
        rel = err * applied.changed_share
    pred = Prediction(ts, applied.graph, res,
                      {**r.elapsed_s, "what_if_s": t4 - t2, "apply_s": t3 - t2},
                      what_if=what.to_dict(), what_if_notes=applied.notes, baseline=base,
                      model_rel_err=rel, overhead=overhead, exact=exact,
                      model_waits=model_waits)
    pred.what_if_notes += why_unchanged(pred, base, what)
    if model_waits:
        pred.change = attribute_change(ts, what, base, pred, exact=exact, compute=compute,
                                       comm=comm, factor=applied.factor)
        pred.elapsed_s["attribute_s"] = time.perf_counter() - t4
    return pred
