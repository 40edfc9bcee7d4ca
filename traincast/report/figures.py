"""plotly figures of traincast's results, for Jupyter: ``figures(obj)``.

The same chart builders as the HTML report (:data:`traincast.report.charts.CHARTS`), so a
notebook and the report show the same thing. Offline: a figure carries its data, and
Jupyter renders it with the plotly.js bundled in the plotly package (no CDN). A figure that
draws part of its table (many ranks, long timelines) says so in its title, and its
``layout.meta["tc_note"]`` tells what it left out.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from traincast.analysis import analyze
from traincast.errors import ParameterError
from traincast.predict.prediction import Prediction
from traincast.report.charts import CHARTS
from traincast.trace.traceset import TraceSet

__all__ = ["figures"]


def figures(obj: Any) -> list[Any]:
    """plotly ``Figure`` objects for a result (display the first, or each, in a notebook).

    Args:
        obj: a :class:`~traincast.predict.prediction.Prediction` (measured vs predicted step per rank
            and iteration, with the error), a :class:`~traincast.trace.traceset.TraceSet`
            (the per-step breakdown of :func:`traincast.analyze`), a dict of analysis tables
            (``traincast.analyze(ts, ...)``: a chart per table that has one, timeline
            included), a plan result (:class:`~traincast.plan.api.PlanResult` or the DLRM
            one: its time breakdown, s) or a plan search's table (``plan_search(...).table``:
            the fastest layouts, s).

    Raises:
        ParameterError: ``obj`` is none of these.
    """
    import plotly.graph_objects as go  # lazy: start-up cost (plotly ~0.15 s), only figures need it

    if isinstance(obj, Prediction):
        return CHARTS["prediction"](go, obj.iterations, {})
    if isinstance(obj, TraceSet):
        tables = analyze(obj, "breakdown")
        return CHARTS["breakdown"](go, tables["breakdown"], tables)
    if isinstance(obj, dict) and all(isinstance(v, pd.DataFrame) for v in obj.values()):
        out: list[Any] = []
        for name, df in obj.items():
            chart = CHARTS.get(name)
            if chart is not None and len(df):
                out += chart(go, df, obj)
        return out
    if isinstance(obj, pd.DataFrame) and {"describe", "iteration_time_s"} <= set(obj.columns):
        return [_search_figure(go, obj)]
    breakdown = getattr(obj, "breakdown", None)
    if isinstance(breakdown, dict) and hasattr(obj, "iteration_time_s"):
        return [_plan_figure(go, obj, breakdown)]
    raise ParameterError(f"no figure for a {type(obj).__name__}: give a Prediction, a TraceSet, "
                         "analysis tables, a plan result or a plan search's table")


def _plan_figure(go: Any, result: Any, breakdown: dict[str, Any]) -> Any:
    parts = {k: float(v) for k, v in breakdown.items() if isinstance(v, int | float)}
    fig = go.Figure(go.Bar(x=[v * 1e3 for v in parts.values()], y=list(parts),
                           orientation="h", marker={"color": "#1f77b4"}))
    fig.update_layout(title=f"{type(result).__name__}: iteration "
                            f"{1e3 * float(result.iteration_time_s):.1f} ms, where it goes",
                      xaxis_title="ms per iteration", height=120 + 28 * len(parts),
                      margin={"l": 160, "r": 20, "t": 50, "b": 40})
    return fig


def _search_figure(go: Any, table: pd.DataFrame, top: int = 20) -> Any:
    d = table.sort_values("iteration_time_s").head(top)
    fig = go.Figure(go.Bar(x=1e3 * d["iteration_time_s"], y=d["describe"].astype(str),
                           orientation="h", marker={"color": "#2ca02c"}))
    fig.update_layout(title=f"The {len(d)} fastest of {len(table)} layouts",
                      xaxis_title="ms per iteration", yaxis={"autorange": "reversed"},
                      height=120 + 24 * len(d), margin={"l": 260, "r": 20, "t": 50, "b": 40})
    return fig
