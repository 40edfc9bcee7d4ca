"""``idle_columns`` (the idle attribution as numpy columns, without pandas) against the former
DataFrame path: the step windows it reads from Arrow's buffers equal the ones the former code
read through ``to_pandas`` (kept here), and its columns make the same table as
:func:`~traincast.analysis.idle.idle_attribution` and as the per-rank reference built the
former way (rows of Python ints into a DataFrame), on every shared trace set that loads, for
a TraceSet with and without the plain replay's graph and for a Replay; and a fresh process
that predicts and reads the columns (warm parse cache) imports neither pandas nor
``pyarrow.compute``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis import idle as I
from traincast.simulate.replay import Replay

ROOT = Path(__file__).resolve().parents[2]
#: the shared sets that load (the others are execution traces only, or one rank's pieces)
SETS = ["dlrm_8xv100/kineto", "hta/a100_16rank_5streams", "hta/a100_2rank_nccl",
        "hta/et_simple_add", "hta/sampled_128rank_sendrecv", "hta/v100_2rank_allreduce",
        "linear_1x2080ti", "otf2/ping-pong-otf2", "otf2/ping-pong-otf2-papi", "tracelens"]
WINDOW = ["rank", "iteration", "start", "end"]


@pytest.fixture(scope="module", params=SETS)
def case(request: pytest.FixtureRequest, traces: Path) -> tuple:
    """(TraceSet, its plain prediction) of one shared set; skips when it does not load."""
    path = traces / request.param
    if not path.is_dir():
        pytest.skip(f"{path} absent")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ts = traincast.load(path)
        except Exception as exc:  # noqa: BLE001 - a set that no longer loads is skipped
            pytest.skip(f"{request.param} does not load: {exc}")
        return ts, traincast.predict(ts)


def _old_windows(source: traincast.TraceSet | Replay, graph) -> pd.DataFrame:  # noqa: ANN001
    """The windows as the former ``idle_attribution`` made them (through pandas); ``graph``:
    the one the attribution read (its clock offsets)."""
    if isinstance(source, Replay):
        return source.timeline.iterations.to_pandas()
    windows = source.iterations.to_pandas()
    off = np.fromiter((graph.clock_offset.get(int(r), 0) for r in windows["rank"]),
                      np.int64, len(windows))
    windows["start"] = windows["start"].to_numpy(np.int64) - off
    windows["end"] = windows["end"].to_numpy(np.int64) - off
    return windows


def _old_loop_frame(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    """The per-rank reference's table as the former code built it: a row of Python ints per
    window into a DataFrame."""
    n = len(cols["rank"])
    rows = [{c: int(cols[c][i]) for c in I.COLUMNS} for i in range(n)]
    return pd.DataFrame(rows, columns=I.COLUMNS)


def _spied(monkeypatch: pytest.MonkeyPatch, source, **kw) -> tuple:  # noqa: ANN001
    """idle_columns(source, **kw) and the arguments it passed to ``_attribute``."""
    seen: list[tuple] = []
    real = I._attribute

    def spy(*args):  # noqa: ANN002, ANN202
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(I, "_attribute", spy)
    cols = I.idle_columns(source, **kw)
    monkeypatch.setattr(I, "_attribute", real)
    (args,) = seen
    return cols, args


@pytest.mark.parametrize("how", ["plain", "graph", "replay"])
def test_columns_equal_the_former_table(case: tuple, how: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ts, pred = case
    source, kw = {"plain": (ts, {}), "graph": (ts, {"graph": pred.graph}),
                  "replay": (pred, {})}[how]
    cols, (a_ts, graph, times, windows, patch) = _spied(monkeypatch, source, **kw)
    assert list(cols) == I.COLUMNS
    assert all(isinstance(v, np.ndarray) and v.ndim == 1 for v in cols.values())
    # the windows read from the buffers are the former pandas ones
    old = _old_windows(source, graph)
    assert sorted(windows) == sorted(WINDOW)
    for k in WINDOW:
        np.testing.assert_array_equal(windows[k].astype(np.int64),
                                      old[k].to_numpy().astype(np.int64))
    # the table: the DataFrame API's, and the per-rank reference's built the former way
    got = pd.DataFrame(cols)
    pd.testing.assert_frame_equal(got, I.idle_attribution(source, **kw), check_exact=True)
    old_cols = {k: old[k].to_numpy() for k in WINDOW}
    ref = _old_loop_frame(I._attribute_loop(a_ts, graph, times, old_cols, patch))
    pd.testing.assert_frame_equal(got, ref, check_exact=True)
    assert (got.dtypes == np.int64).all()
    assert len(got) == ts.iterations.num_rows


def test_no_windows_give_the_former_empty_table(case: tuple) -> None:
    ts, _ = case
    bare = dataclasses.replace(ts, iterations=ts.iterations.slice(0, 0))
    got = pd.DataFrame(I.idle_columns(bare))
    # the former table: no rows from the per-rank code, object columns
    pd.testing.assert_frame_equal(got, pd.DataFrame([], columns=I.COLUMNS))
    pd.testing.assert_frame_equal(I.idle_attribution(bare), got)


def test_importing_idle_imports_no_pandas() -> None:
    code = ("import sys\nimport traincast.analysis.idle\n"
            "print(sorted(m for m in ('pandas', 'pyarrow.compute') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120, check=True)
    assert res.stdout.strip() == "[]", res.stderr


def test_predict_then_columns_import_no_pandas(traces: Path) -> None:
    # what the verdict of ``traincast analyze`` does: predict, then the idle columns with the
    # replay's graph (the parse cache warm: this test's session folder, loaded here first)
    path = traces / "dlrm_8xv100" / "kineto"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the sibling execution traces, linked)
        traincast.load(path)
    code = ("import json, sys\nimport traincast\n"
            "from traincast.analysis.idle import idle_columns\n"
            f"ts = traincast.load({str(path)!r})\n"
            "pred = traincast.predict(ts)\n"
            "heavy = ('pandas', 'pyarrow.compute')\n"
            "cols = idle_columns(ts, graph=pred.graph)\n"
            "a = sorted(m for m in heavy if m in sys.modules)\n"
            "cols2 = idle_columns(pred)\n"
            "b = sorted(m for m in heavy if m in sys.modules)\n"
            "print(json.dumps([a, b, len(cols['rank']), len(cols2['rank'])]))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    after_graph, after_replay, n, n2 = json.loads(res.stdout.strip().splitlines()[-1])
    assert after_graph == [] and after_replay == [], (after_graph, after_replay)
    assert n == n2 == 8
