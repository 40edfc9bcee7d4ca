"""Running a selection of analyses: :func:`analyze` and the table of analyses it chooses from
(:data:`ANALYSES`); ``traincast.analysis`` offers them (imported on first use).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import pandas as pd

from traincast.analysis.breakdown import sharing_device_ops, temporal_breakdown
from traincast.analysis.collective_table import collective_table
from traincast.analysis.critical_path import critical_path
from traincast.analysis.idle import idle_attribution
from traincast.analysis.kernels import op_breakdown, top_kernels
from traincast.analysis.replay_steps import replay_steps
from traincast.analysis.stragglers import straggler_report
from traincast.errors import ParameterError
from traincast.simulate.replay import Replay, replay
from traincast.simulate.scaled import halved_times
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory, small_pages


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
    # the replay's times are not read here: held in half their pages meanwhile
    with contextlib.nullcontext() if rp is None else halved_times(rp.result.times):
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


def split_names(what: Iterable[str] | str) -> list[str]:
    """Analysis names from a list or a comma-separated string (blanks dropped)."""
    return [w.strip() for w in (what.split(",") if isinstance(what, str) else what)
            if w.strip()]


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
            reuse its graph; its times are held in half their pages while the stragglers'
            analysis runs (:func:`traincast.simulate.scaled.halved_times`: not to be read
            meanwhile, the same integers after). The tables come in the order of ``what``.

    Raises:
        ParameterError: an unknown analysis name.
    """
    if what is None:
        names = list(ANALYSES)
    else:
        names = split_names(what)
        unknown = [n for n in names if n not in ANALYSES]
        if unknown:
            raise ParameterError(f"unknown analysis {unknown[0]!r} "
                                 f"(choose from {', '.join(ANALYSES)})")
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
