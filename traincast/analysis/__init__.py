"""Analyses: pure functions from a TraceSet (measured or predicted) to pandas DataFrames.

:func:`analyze` runs a selection of them and returns ``{table name: DataFrame}``;
:func:`analyze_replayed` does the same together with the replay the analyses use, and on a
large job runs the analyses that need no replay on a second thread while the replay is made
(:mod:`traincast.util.beside`; ``TRAINCAST_SERIAL=1`` keeps one thread; the tables are the
same either way). Rendering (terminal, JSON, HTML) lives in :mod:`traincast.report`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import pandas as pd

from traincast.analysis.breakdown import sharing_device_ops, temporal_breakdown
from traincast.analysis.collective_table import collective_table
from traincast.analysis.critical_path import critical_path
from traincast.analysis.idle import idle_attribution
from traincast.analysis.kernels import op_breakdown, top_kernels
from traincast.analysis.replay_steps import replay_steps
from traincast.analysis.stragglers import straggler_report
from traincast.errors import ParameterError, TraincastError
from traincast.graph.collectives import match_collectives
from traincast.graph.jit import kernel
from traincast.simulate.replay import Replay, replay
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory, small_pages
from traincast.util.beside import Beside, NotRun, threads_allowed


def _breakdown(ts: TraceSet, rp: Replay | None) -> dict[str, pd.DataFrame]:
    with sharing_device_ops(ts):  # the two windows' breakdowns gather the device ops once
        return {"breakdown": temporal_breakdown(ts, per="iteration"),
                "breakdown_by_rank": temporal_breakdown(ts, per="rank")}


def _idle(ts: TraceSet, rp: Replay | None) -> dict[str, pd.DataFrame]:
    # the replay's graph carries the measurement-calibrated lags: no second graph build
    same = rp is not None and rp.measured is ts and rp.plain
    return {"idle": idle_attribution(ts, graph=rp.graph if same else None)}


def _kernels(ts: TraceSet, rp: Replay | None) -> dict[str, pd.DataFrame]:
    return {"op_breakdown": op_breakdown(ts), "top_kernels": top_kernels(ts)}


def _collectives(ts: TraceSet, rp: Replay | None) -> dict[str, pd.DataFrame]:
    return {"collectives": collective_table(ts)}


def _critical_path(ts: TraceSet, rp: Replay) -> dict[str, pd.DataFrame]:
    cp = critical_path(rp)
    return {"critical_path": cp.path, "critical_path_by_family": cp.by_family,
            "critical_path_by_rank": cp.by_rank}


def _stragglers(ts: TraceSet, rp: Replay | None) -> dict[str, pd.DataFrame]:
    rep = straggler_report(ts)
    return {f"stragglers_{k}": v for k, v in rep.items()}


def _prediction(ts: TraceSet, rp: Replay) -> dict[str, pd.DataFrame]:
    return {"prediction": replay_steps(rp)}


#: analysis name -> function(ts, replay) -> tables
ANALYSES: dict[str, Callable[[TraceSet, Replay], dict[str, pd.DataFrame]]] = {
    "breakdown": _breakdown,
    "idle": _idle,
    "kernels": _kernels,
    "collectives": _collectives,
    "critical_path": _critical_path,
    "stragglers": _stragglers,
    "prediction": _prediction,
}
#: the analyses that need a replay of the TraceSet
NEED_REPLAY = ("critical_path", "prediction")
#: the analyses that use a replay when there is one (idle reuses its graph)
USE_REPLAY = (*NEED_REPLAY, "idle")


#: events from which :func:`analyze_replayed` runs the analyses that need no replay on a
#: second thread (below, the thread's start and the GIL's hand-overs cost more than it gives)
THREAD_MIN_EVENTS = 1_000_000

#: the analyses :func:`analyze_replayed` runs beside the replay, in this order: they need
#: none, and their intermediates beside the graph build's first, lighter part leave the peak
#: where it is (the stragglers' larger ones first; kernels and collectives, group-bys over
#: every event, would raise it: they run after the replay, as serially)
BESIDE = ("stragglers", "breakdown")

R = TypeVar("R", bound=Replay)


def split_names(what: Iterable[str] | str) -> list[str]:
    """Analysis names from a list or a comma-separated string (blanks dropped)."""
    return [w.strip() for w in (what.split(",") if isinstance(what, str) else what)
            if w.strip()]


def _names(what: Iterable[str] | str | None) -> list[str]:
    """The analysis names asked for (all for None); ParameterError for an unknown one."""
    if what is None:
        return list(ANALYSES)
    names = split_names(what)
    unknown = [n for n in names if n not in ANALYSES]
    if unknown:
        raise ParameterError(f"unknown analysis {unknown[0]!r} "
                             f"(choose from {', '.join(ANALYSES)})")
    return names


def analyze(ts: TraceSet, what: Iterable[str] | str | None = None, *,
            prediction: Replay | None = None) -> dict[str, pd.DataFrame]:
    """Run analyses on a TraceSet and return their tables.

    Args:
        ts: a measured TraceSet (or a predicted timeline).
        what: analysis names (see :data:`ANALYSES`) as a list or a comma-separated string;
            None runs all.
        prediction: the replay of ``ts`` if already computed (a
            :class:`~traincast.simulate.replay.Replay`, e.g. ``traincast.predict(ts)``): the
            critical path and prediction tables need it (:data:`NEED_REPLAY`; it is computed
            with :func:`traincast.simulate.replay.replay` when missing: after the analyses
            that need none have run, and dropped before this returns) and the idle causes
            reuse its graph. The tables come in the order of ``what``.

    Raises:
        ParameterError: an unknown analysis name.
    """
    names = _names(what)
    own = prediction is None and any(n in NEED_REPLAY for n in names)
    tables: dict[str, dict[str, pd.DataFrame]] = {}
    with small_pages():  # many short-lived large arrays (traincast.util.allocator)
        if own:
            # a replay made here lives only while the analyses that use it run: the others
            # run first, without it, and it is dropped before the tables are joined, so the
            # whole-job graph is never held beside another analysis' intermediates
            for n in names:
                if n not in USE_REPLAY and n not in tables:
                    tables[n] = ANALYSES[n](ts, None)  # type: ignore[arg-type]
                    release_memory()  # its intermediates' pages, before the next one's
            prediction = replay(ts)
        for n in names:
            if n not in tables:
                tables[n] = ANALYSES[n](ts, prediction)  # type: ignore[arg-type]
                release_memory()
        del prediction
    out: dict[str, pd.DataFrame] = {}
    for n in names:  # in the order asked (a name asked twice: its tables once, first place)
        out.update(tables[n])
    return out


def analyze_replayed(ts: TraceSet, what: Iterable[str] | str | None,
                     make_replay: Callable[[], R], *,
                     beside_done: Callable[[], object] | None = None
                     ) -> tuple[dict[str, pd.DataFrame], R]:
    """``(analyze(ts, what, prediction=r), r)`` with ``r = make_replay()`` (a replay of
    ``ts`` built from its own collectives, e.g. ``lambda: traincast.predict(ts)``), computed
    in that order, or, for a job of :data:`THREAD_MIN_EVENTS` events or more
    (:func:`traincast.util.beside.threads_allowed`), with the analyses of :data:`BESIDE`
    among them (they need no replay) run on a second thread while ``make_replay`` runs on
    this one. The tables, their order, the warnings' order and the exception raised (the
    first a serial run meets: ``make_replay``'s, else the first failing analysis in the
    order of ``what``; an analysis the thread did not reach runs here in its turn) are the
    same either way. ``beside_done``, when the thread runs, is called on it once its
    analyses are done (the CLI gives back the library pages they touched:
    :func:`traincast.cli.collector.release_startup_pages`); what it raises is ignored.

    Raises:
        ParameterError: an unknown analysis name (before anything runs).
    """
    names = _names(what)
    side = [n for n in BESIDE if n in names]
    if side and threads_allowed(ts.events.num_rows, THREAD_MIN_EVENTS):
        try:
            # the collectives matched once, here, as the replay's graph build (its first step
            # that may warn or fail) would: the straggler report and the collectives table
            # share it (memoised on ts) rather than match them beside the build
            ts.require_events("replay")
            match_collectives(ts)
        except TraincastError:  # the replay raises it again, alone, as a serial run does
            side = []
    else:
        side = []
    if not side:
        prediction = make_replay()
        return analyze(ts, names, prediction=prediction), prediction
    # the replay's kernel modules load (and, on a cold numba cache, say so on a terminal)
    # before the thread's: the lines come in a serial run's order
    for module, fn in (("graph", "nest_walk"), ("simulate", "propagate")):
        kernel(f"traincast.{module}.numba_kernels", fn)

    def run(n: str) -> Callable[[], dict[str, pd.DataFrame]]:
        def step() -> dict[str, pd.DataFrame]:
            out = ANALYSES[n](ts, None)  # type: ignore[arg-type]
            release_memory()  # its intermediates' pages, before the next one's
            return out
        return step

    tables: dict[str, dict[str, pd.DataFrame]] = {}
    # one allocator setting over both threads (each nested setting restores it)
    with small_pages(), Beside([(n, run(n)) for n in side], then=beside_done) as beside:
        prediction = make_replay()
        for n in names:
            if n in tables:
                continue
            if n in beside:
                try:
                    tables[n] = beside.take(n)
                except NotRun:  # a step the thread ran before it failed: this one first
                    tables[n] = run(n)()
            else:
                tables[n] = ANALYSES[n](ts, prediction)
                release_memory()
    out: dict[str, pd.DataFrame] = {}
    for n in names:  # in the order asked (a name asked twice: its tables once, first place)
        out.update(tables[n])
    return out, prediction
