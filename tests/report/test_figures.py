"""traincast.report.figures: plotly figures of each result type (issue 15, Jupyter)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.errors import ParameterError
from traincast.report.figures import figures

go = pytest.importorskip("plotly.graph_objects")


@pytest.fixture(scope="module")
def dlrm(traces: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traincast.load(traces / "dlrm_8xv100" / "kineto")


def test_prediction_figure_holds_the_measured_and_predicted_steps(dlrm) -> None:
    p = traincast.predict(dlrm)
    (fig,) = figures(p)
    bars = {t.name: np.asarray(t.y, float) for t in fig.data if t.type == "bar"}
    it = p.iterations
    assert len(bars["measured"]) == len(it)
    assert sorted(bars["measured"]) == pytest.approx(sorted(it["measured_ns"] / 1e6))
    assert sorted(bars["predicted"]) == pytest.approx(sorted(it["predicted_ns"] / 1e6))


def test_traceset_and_tables_figures(dlrm) -> None:
    (fig,) = figures(dlrm)[:1]
    assert any(t.type == "bar" for t in fig.data)
    tables = traincast.analyze(dlrm, "breakdown,collectives,critical_path")
    figs = figures(tables)
    assert len(figs) >= 3 and all(isinstance(f, go.Figure) for f in figs)


def test_plan_figures() -> None:
    from traincast.plan.api import plan
    from traincast.plan.search import SearchSpace, plan_search
    from traincast.plan.spec import Layout, SystemSpec, TransformerSpec

    model = TransformerSpec(layers=4, hidden=1024, heads=16, seq=1024)
    system = SystemSpec.from_catalog(8, node="DGX-A100")
    res = plan(model, system, Layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=16))
    (fig,) = figures(res)
    parts = {k: v for k, v in res.breakdown.items() if isinstance(v, int | float)}
    assert list(fig.data[0].y) == list(parts)
    space = SearchSpace(recompute=("none",), zero=(0,), sequence_parallel=(False,),
                        schedules=("1f1b",))
    table = plan_search(model, system, 16, space=space, executor="serial").table
    (fig,) = figures(table)
    shown = np.asarray(fig.data[0].x, float)
    assert shown[0] == pytest.approx(1e3 * table["iteration_time_s"].min())
    assert (np.diff(shown) >= 0).all()


def test_unknown_object_is_refused() -> None:
    with pytest.raises(ParameterError, match="no figure for a int"):
        figures(3)
