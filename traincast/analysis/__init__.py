"""Analyses: pure functions from a TraceSet (measured or predicted) to pandas DataFrames.

:func:`analyze` runs a selection of them and returns ``{table name: DataFrame}``; rendering
(terminal, JSON, HTML) lives in :mod:`traincast.report`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import pandas as pd

from traincast.errors import ParameterError
from traincast.util.allocator import small_pages

if TYPE_CHECKING:  # pragma: no cover
    from traincast.predict.prediction import Prediction
    from traincast.trace.traceset import TraceSet


def _breakdown(ts: TraceSet, pred: Prediction) -> dict[str, pd.DataFrame]:
    from traincast.analysis.breakdown import temporal_breakdown

    return {"breakdown": temporal_breakdown(ts, per="iteration"),
            "breakdown_by_rank": temporal_breakdown(ts, per="rank")}


def _idle(ts: TraceSet, pred: Prediction | None) -> dict[str, pd.DataFrame]:
    from traincast.analysis.idle import idle_attribution

    # the replay's graph carries the measurement-calibrated lags: no second graph build
    same = pred is not None and pred.measured is ts and pred.what_if is None
    return {"idle": idle_attribution(ts, graph=pred.graph if same else None)}


def _kernels(ts: TraceSet, pred: Prediction) -> dict[str, pd.DataFrame]:
    from traincast.analysis.kernels import op_breakdown, top_kernels

    return {"op_breakdown": op_breakdown(ts), "top_kernels": top_kernels(ts)}


def _collectives(ts: TraceSet, pred: Prediction) -> dict[str, pd.DataFrame]:
    from traincast.analysis.comm import collective_table

    return {"collectives": collective_table(ts)}


def _critical_path(ts: TraceSet, pred: Prediction) -> dict[str, pd.DataFrame]:
    from traincast.analysis.critical_path import critical_path

    cp = critical_path(pred)
    return {"critical_path": cp.path, "critical_path_by_family": cp.by_family,
            "critical_path_by_rank": cp.by_rank}


def _stragglers(ts: TraceSet, pred: Prediction) -> dict[str, pd.DataFrame]:
    from traincast.analysis.stragglers import straggler_report

    rep = straggler_report(ts)
    return {f"stragglers_{k}": v for k, v in rep.items()}


def _prediction(ts: TraceSet, pred: Prediction) -> dict[str, pd.DataFrame]:
    return {"prediction": pred.iterations}


#: analysis name -> function(ts, prediction) -> tables
ANALYSES: dict[str, Callable[[TraceSet, Prediction], dict[str, pd.DataFrame]]] = {
    "breakdown": _breakdown,
    "idle": _idle,
    "kernels": _kernels,
    "collectives": _collectives,
    "critical_path": _critical_path,
    "stragglers": _stragglers,
    "prediction": _prediction,
}


def split_names(what: Iterable[str] | str) -> list[str]:
    """Analysis names from a list or a comma-separated string (blanks dropped)."""
    return [w.strip() for w in (what.split(",") if isinstance(what, str) else what)
            if w.strip()]


def analyze(ts: TraceSet, what: Iterable[str] | str | None = None, *,
            prediction: Prediction | None = None) -> dict[str, pd.DataFrame]:
    """Run analyses on a TraceSet and return their tables.

    Args:
        ts: a measured TraceSet (or a predicted timeline).
        what: analysis names (see :data:`ANALYSES`) as a list or a comma-separated string;
            None runs all.
        prediction: the replay of ``ts`` if already computed (critical path and prediction
            tables need it; it is computed when missing).

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
    if prediction is None and any(n in ("critical_path", "prediction") for n in names):
        from traincast.predict.prediction import predict

        prediction = predict(ts)
    out: dict[str, pd.DataFrame] = {}
    with small_pages():  # many short-lived large arrays (traincast.util.allocator)
        for n in names:
            out.update(ANALYSES[n](ts, prediction))  # type: ignore[arg-type]
    return out
