"""The replay below prediction: ``traincast.simulate.replay`` builds and simulates the graph,
analyses take it, and neither imports ``traincast.predict``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis import analyze
from traincast.analysis.critical_path import critical_path
from traincast.predict.prediction import Prediction
from traincast.simulate.replay import Replay, replay


def _synth_module():
    """tests/graph/synth_trace.py (the hand-built Kineto trace builder), without packages."""
    path = Path(__file__).resolve().parents[1] / "graph" / "synth_trace.py"
    spec = importlib.util.spec_from_file_location("_replay_synth_trace", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture(scope="module")
def two_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _synth_module().two_rank_allreduce(tmp_path_factory.mktemp("two_rank"))


def test_prediction_is_a_replay_with_the_same_times(two_rank: Path) -> None:
    ts = traincast.load(two_rank, cache=False)
    r = replay(ts)
    pred = traincast.predict(ts)
    assert isinstance(pred, Prediction) and isinstance(pred, Replay)
    assert type(r) is Replay and r.plain and pred.plain
    assert np.array_equal(r.result.times, pred.result.times)
    assert np.array_equal(r.step_ns(), pred.steps["predicted_ns"].to_numpy())
    pd.testing.assert_frame_equal(r.steps, pred.iterations[list(r.steps.columns)])
    assert critical_path(r).path.equals(critical_path(pred).path)


def test_analyze_builds_a_replay_not_a_prediction(two_rank: Path) -> None:
    ts = traincast.load(two_rank, cache=False)
    pred = traincast.predict(ts)
    alone = analyze(ts, "idle,critical_path,prediction")
    given = analyze(ts, "idle,critical_path,prediction", prediction=pred)
    assert alone.keys() == given.keys()
    for k in alone:
        pd.testing.assert_frame_equal(alone[k], given[k])
    # the facade's prediction table is the first columns of the plain replay's
    # Prediction.iterations (which adds the step bounds: traincast.predict.bounds)
    pd.testing.assert_frame_equal(alone["prediction"],
                                  pred.iterations[list(alone["prediction"].columns)])


def test_what_if_prediction_is_not_plain(two_rank: Path) -> None:
    ts = traincast.load(two_rank, cache=False)
    pred = traincast.predict(ts, what_if=["overlap=ideal"])
    assert not pred.plain and pred.baseline is not None and pred.baseline.plain


_NO_PREDICT = """
import sys
import traincast.analysis, traincast.analysis.per_rank, traincast.analysis.timeline
from traincast.trace.load import load
tables = traincast.analysis.analyze(load(sys.argv[1], cache=False), "critical_path,prediction")
assert set(tables) >= {"critical_path", "prediction"}, tables.keys()
bad = sorted(m for m in sys.modules if m.startswith(("traincast.predict", "traincast.record")))
assert not bad, bad
"""


def test_analyses_do_not_import_predict_or_record(two_rank: Path) -> None:
    """A fresh process runs the replay-based analyses without loading ``traincast.predict``
    or the torch recording harness (``traincast.record``)."""
    p = subprocess.run([sys.executable, "-c", _NO_PREDICT, str(two_rank)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr.strip().splitlines()[-1:]


def test_whatif_exports_its_api_and_version_lives_low() -> None:
    import traincast.whatif as w
    from traincast.version import __version__

    assert {"WhatIf", "apply_what_if", "parse_what_if", "unprofiled_graph"} <= set(w.__all__)
    assert "scale_durations" not in w.__all__
    assert traincast.__version__ == __version__
