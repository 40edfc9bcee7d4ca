"""The prediction's numpy columns (what ``traincast predict`` prints, without pandas) against
the DataFrame path they replaced: the same rows, values and dtypes on real traces, a plain
replay and a what-if."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis.breakdown import CATEGORIES, iteration_breakdown
from traincast.analysis.replay_steps import BREAKDOWN_COLUMNS, replay_step_columns
from traincast.predict.bounds import step_bound_columns, step_bounds

SETS = ["dlrm_8xv100/kineto", "hta/v100_2rank_allreduce"]


@pytest.fixture(scope="module", params=SETS)
def replayed(request: pytest.FixtureRequest, traces: Path) -> traincast.predict.Prediction:
    path = traces / request.param
    if not path.is_dir():
        pytest.skip(f"{path} absent")
    return traincast.predict(traincast.load(path))


def _reference_steps(pred: traincast.predict.Prediction) -> pd.DataFrame:
    """The former ``replay_steps``: the step table, then the breakdown of the simulated
    events (a pandas frame) inside the simulated windows."""
    meas = pred.measured.iterations.to_pandas()
    p_start, p_end = pred.step_windows()
    df = meas[["rank", "iteration"]].copy()
    df["measured_ns"] = meas["dur"].to_numpy(np.int64)
    df["predicted_ns"] = p_end - p_start
    with np.errstate(divide="ignore", invalid="ignore"):
        df["error_pct"] = np.where(df["measured_ns"] > 0, 100.0 * (
            df["predicted_ns"] - df["measured_ns"]) / df["measured_ns"], 0.0)
    windows = df[["rank", "iteration"]].copy()
    windows["start"], windows["end"] = p_start, p_end
    bd = iteration_breakdown(pred.simulated_events(), windows)
    for c in CATEGORIES:
        df[BREAKDOWN_COLUMNS[c]] = bd[c].to_numpy(np.int64)
    df["unprofiled_ns"] = pred.unprofiled.step_ns
    return df


def test_step_columns_equal_the_frame_path(replayed: traincast.predict.Prediction) -> None:
    ref = _reference_steps(replayed)
    got = pd.DataFrame(replay_step_columns(replayed, replayed.unprofiled))
    pd.testing.assert_frame_equal(got, ref)
    assert (ref[list(BREAKDOWN_COLUMNS.values())].to_numpy() > 0).any()  # not all zero
    pd.testing.assert_frame_equal(replayed.steps, ref.iloc[:, :5])


def test_bound_columns_equal_their_frame(replayed: traincast.predict.Prediction) -> None:
    cols = step_bound_columns(replayed.measured, replayed.graph)
    df = step_bounds(replayed.measured, replayed.graph)
    assert list(df.columns) == list(cols)
    for c, v in cols.items():
        np.testing.assert_array_equal(df[c].to_numpy(), v)
        assert df[c].dtype == v.dtype


def test_iterations_frame_is_the_columns(replayed: traincast.predict.Prediction) -> None:
    cols = replayed.iteration_columns
    df = replayed.iterations
    assert list(df.columns) == list(cols) and len(df) == len(cols["rank"]) > 0
    for c, v in cols.items():
        np.testing.assert_array_equal(df[c].to_numpy(), v)
    s = replayed.summary
    assert s["mape_pct"] == pytest.approx(float(df["error_pct"].abs().mean()), rel=1e-12)
    assert s["max_ape_pct"] == float(df["error_pct"].abs().max())


def test_a_what_if_keeps_its_frame_columns(traces: Path) -> None:
    path = traces / "dlrm_8xv100" / "kineto"
    if not path.is_dir():
        pytest.skip(f"{path} absent")
    ts = traincast.load(path)
    pred = traincast.predict(ts, what_if=["speedup=kind:device=2"])
    df = pred.iterations
    for c in ("replay_ns", "interval_lo_ns", "interval_hi_ns", "op_time_ns", "upper_bound_ns"):
        assert c in df and df[c].dtype == np.int64
    np.testing.assert_array_equal(df["replay_ns"].to_numpy(),
                                  pred.baseline.steps["predicted_ns"].to_numpy())
    assert (df["interval_lo_ns"] <= df["predicted_ns"]).all()
    assert (df["predicted_ns"] <= df["interval_hi_ns"]).all()
    d = pred.to_dict()
    assert sum(len(r["iterations"]) for r in d["ranks"]) == len(df)
    first = d["ranks"][0]["iterations"][0]
    row = df[(df["rank"] == d["ranks"][0]["rank"])].iloc[0]
    assert first["replay_ns"] == int(row["replay_ns"])
    assert first["change_ns"]["op_time"] == int(row["op_time_ns"])
