"""The numpy columns the verdict reads (``breakdown_columns``, ``straggler_summary``) against
the DataFrame code they replace (kept here as the reference), on every shared trace set, and
that computing them imports neither pandas nor ``pyarrow.compute``."""

from __future__ import annotations

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
from traincast.analysis import breakdown as B
from traincast.analysis.stragglers import report as R
from traincast.analysis.stragglers import straggler_report, straggler_summary
from traincast.graph.collectives import clock_offsets, match_collectives

ROOT = Path(__file__).resolve().parents[2]

SETS = ["dlrm_8xv100/kineto", "hta/v100_2rank_allreduce", "hta/a100_2rank_nccl",
        "hta/a100_16rank_5streams", "hta/sampled_128rank_sendrecv",
        "linear_1x2080ti/kineto.pt.trace.json.gz", "otf2/ping-pong-otf2",
        "otf2/ping-pong-otf2-papi", "nsys/cloverleaf_4xa100.sqlite",
        "nsys/saxpy_mpi_1xa100.sqlite", "hta/edge/cpu_only_rank34.json.gz",
        "hta/edge/amd_mi250_minitoy.json.gz", "hta/trace_diff/test.json.gz",
        "hta/critical_path_simple_add/input.json.gz",
        "tracelens/wild/h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]


@pytest.fixture(scope="module", params=SETS)
def ts(request: pytest.FixtureRequest, traces: Path) -> traincast.TraceSet:
    path = traces / request.param
    if not path.exists():
        pytest.skip(f"{path} absent")
    with warnings.catch_warnings():  # (the shared sets' load warnings are not under test)
        warnings.simplefilter("ignore")
        return traincast.load(path)


# ------------------------------------------------------------- the former pandas code

def _old_step_table(ts: traincast.TraceSet) -> pd.DataFrame:
    """The former ``report._step_table``."""
    it = ts.iterations.to_pandas()
    df = it[["rank", "iteration"]].copy()
    df["step_ns"] = it["dur"].to_numpy(np.int64)
    bd = B.temporal_breakdown(ts, per="iteration")
    comp = bd.set_index(["rank", "iteration"])["compute_ns"]
    df["compute_ns"] = comp.reindex(pd.MultiIndex.from_frame(df[["rank", "iteration"]])
                                    ).fillna(0).to_numpy(np.int64)
    return df


def _old_imbalance_table(steps: pd.DataFrame) -> pd.DataFrame:
    """The former ``report._imbalance_table``."""
    cols = ["iteration", "ranks", "max_step_ns", "mean_step_ns", "max_mean_ratio",
            "slowest_rank", "compute_min_ns", "compute_median_ns", "compute_max_ns",
            "compute_spread", "most_compute_rank"]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    g = steps.groupby("iteration", sort=True)
    df = pd.DataFrame({
        "ranks": g.size(), "max_step_ns": g["step_ns"].max(),
        "mean_step_ns": g["step_ns"].mean().round().astype(np.int64),
        "slowest_rank": steps.loc[g["step_ns"].idxmax(), ["iteration", "rank"]].set_index(
            "iteration")["rank"],
        "compute_min_ns": g["compute_ns"].min(),
        "compute_median_ns": g["compute_ns"].median().round().astype(np.int64),
        "compute_max_ns": g["compute_ns"].max(),
        "most_compute_rank": steps.loc[g["compute_ns"].idxmax(), ["iteration", "rank"]
                                       ].set_index("iteration")["rank"],
    })
    df["max_mean_ratio"] = df["max_step_ns"] / df["mean_step_ns"].where(df["mean_step_ns"] > 0)
    df["compute_spread"] = ((df["compute_max_ns"] - df["compute_min_ns"])
                            / df["compute_median_ns"].where(df["compute_median_ns"] > 0)
                            ).fillna(0.0)
    df = df.reset_index()
    return df[cols]


def _old_top_wait(ts: traincast.TraceSet, lat: pd.DataFrame) -> pd.DataFrame:
    """The former top-wait columns of ``report._ranks_table``."""
    df = pd.DataFrame({"rank": np.asarray(ts.rank_ids, np.int32)})
    idx = df["rank"].to_numpy()
    if lat.empty:
        df["top_wait_collective"] = ""
        df["top_wait_group"] = -1
        df["top_wait_ns"] = np.zeros(len(df), np.int64)
        df["top_wait_for"] = -1
        return df
    g = lat.groupby("rank")
    top = lat.loc[g["wait_ns"].idxmax()].set_index("rank").reindex(idx)
    df["top_wait_collective"] = top["collective"].fillna("").to_numpy(object)
    df["top_wait_group"] = top["group_id"].fillna(-1).to_numpy(np.int64)
    df["top_wait_ns"] = top["wait_ns"].fillna(0).to_numpy(np.int64)
    df["top_wait_for"] = top["last_rank"].fillna(-1).to_numpy(np.int64)
    return df


def _old_lateness_core(ts: traincast.TraceSet) -> pd.DataFrame:
    """The former first columns of ``collective_lateness`` (before the blame), sorted as
    its result."""
    matched = match_collectives(ts)
    tbl = matched.table
    tbl = tbl[tbl["group_id"].to_numpy() >= 0].reset_index(drop=True)
    ev_ts = ts.events.column("ts").to_numpy()
    ev_dur = ts.events.column("dur").to_numpy()
    ex = tbl["exec_event"].to_numpy(np.int64)
    rank = tbl["rank"].to_numpy(np.int32)
    gid = tbl["group_id"].to_numpy(np.int64)
    offsets = clock_offsets(ts, matched)
    off_of = np.vectorize(offsets.get, otypes=[np.int64])
    arr = ev_ts[ex] - off_of(rank)
    out = pd.DataFrame({"rank": rank, "group_id": gid, "exec_event": ex, "arrival_ns": arr,
                        "end_ns": arr + ev_dur[ex]})
    g = out.groupby("group_id", sort=False)["arrival_ns"]
    first = g.transform("min").to_numpy(np.int64)
    last = g.transform("max").to_numpy(np.int64)
    out["lateness_ns"] = arr - first
    out["wait_ns"] = last - arr
    is_last = arr == last
    last_rank = out.loc[is_last].groupby("group_id")["rank"].min()
    out["last_rank"] = last_rank.reindex(gid).to_numpy(np.int32)
    return out.sort_values(["group_id", "rank"], kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------------ equivalence

@pytest.mark.parametrize("per", ["iteration", "rank"])
def test_breakdown_columns_are_the_frame(ts: traincast.TraceSet, per: str) -> None:
    cols = B.breakdown_columns(ts, per=per)
    assert list(cols) == B.COLUMNS
    got = pd.DataFrame(cols)
    pd.testing.assert_frame_equal(got, B.temporal_breakdown(ts, per=per))
    # the per-rank reference (pandas, with the former percentages)
    pd.testing.assert_frame_equal(got, B._breakdown_loop(ts, per, False))
    ints = [c for c in B.COLUMNS if not c.endswith("_pct") and c != "source"]
    if len(got):
        ref = B._finish(got[ints + ["source"]].copy())  # the pandas percentages (loop path)
        pd.testing.assert_frame_equal(got, ref)
        assert all(cols[c].dtype == np.int64 for c in ints)
        assert cols["source"].dtype == object


def test_breakdown_columns_share_the_memo(ts: traincast.TraceSet,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ts.memo.pop("temporal_breakdown:iteration:False", None)
    calls = []
    inner = B._breakdown_columns
    monkeypatch.setattr(B, "_breakdown_columns", lambda *a: calls.append(a) or inner(*a))
    df = B.temporal_breakdown(ts)
    a = B.breakdown_columns(ts)
    b = B.breakdown_columns(ts)
    assert len(calls) == 1
    for c in B.COLUMNS:  # each call its own copy
        assert not np.shares_memory(a[c], b[c])
    if len(df):
        a["compute_ns"][:] = -1
        df.loc[:, "idle_ns"] = -1
        assert (B.breakdown_columns(ts)["compute_ns"] >= 0).all()
        assert (B.temporal_breakdown(ts)["idle_ns"] >= 0).all()


def test_straggler_summary_is_the_report(ts: traincast.TraceSet) -> None:
    summ = straggler_summary(ts)
    rep = straggler_report(ts)
    assert list(summ["ranks"]) == R.TOP_WAIT_COLUMNS
    assert list(summ["imbalance"]) == R.IMBALANCE_COLUMNS
    pd.testing.assert_frame_equal(pd.DataFrame(summ["ranks"]), rep["ranks"][R.TOP_WAIT_COLUMNS])
    pd.testing.assert_frame_equal(pd.DataFrame(summ["imbalance"]), rep["imbalance"])
    # against the former pandas code
    steps = _old_step_table(ts)
    pd.testing.assert_frame_equal(R._step_table(ts), steps)
    pd.testing.assert_frame_equal(pd.DataFrame(summ["imbalance"]), _old_imbalance_table(steps))
    lat = traincast.analysis.stragglers.collective_lateness(ts)
    pd.testing.assert_frame_equal(pd.DataFrame(summ["ranks"]), _old_top_wait(ts, lat))
    if len(lat):
        old = _old_lateness_core(ts)
        pd.testing.assert_frame_equal(lat[list(old.columns)], old)


def test_imbalance_edge_cases() -> None:
    """Ties (the first rank with the max), an even count (the median of two, rounded half to
    even), a zero mean and a zero median, and no step at all."""
    steps = pd.DataFrame({
        "rank": np.array([3, 1, 2, 0, 5, 4, 0, 1], np.int32),
        "iteration": np.array([7, 7, 7, 7, 2, 2, 9, 9], np.int32),
        "step_ns": np.array([10, 30, 30, 5, 0, 0, 4, 5], np.int64),
        "compute_ns": np.array([3, 4, 4, 2, 0, 0, 1, 2], np.int64),
    })
    cols = {c: steps[c].to_numpy() for c in steps}
    pd.testing.assert_frame_equal(pd.DataFrame(R._imbalance_columns(cols)),
                                  _old_imbalance_table(steps))
    pd.testing.assert_frame_equal(R._imbalance_table(steps), _old_imbalance_table(steps))
    empty = steps.iloc[:0]
    pd.testing.assert_frame_equal(R._imbalance_table(empty), _old_imbalance_table(empty))


def test_top_wait_ties_take_the_first_row() -> None:
    lat = pd.DataFrame({"rank": np.array([0, 1, 0, 1, 2], np.int32),
                        "wait_ns": np.array([5, 7, 5, 7, 0], np.int64),
                        "collective": np.array(["a", "b", "c", "d", None], object),
                        "group_id": np.array([0, 0, 1, 1, 2], np.int64),
                        "last_rank": np.array([1, 0, 1, 0, 2], np.int32)})

    class _Ranks:
        rank_ids = [0, 1, 2, 3]

    got = R._top_wait_columns(np.asarray(_Ranks.rank_ids, np.int32), tuple(
        lat[c].to_numpy() for c in ("rank", "wait_ns", "collective", "group_id", "last_rank")))
    pd.testing.assert_frame_equal(pd.DataFrame(got), _old_top_wait(_Ranks, lat))
    assert got["top_wait_collective"].tolist() == ["a", "b", "", ""]


# --------------------------------------------------------------------------- imports

def test_summary_path_imports_no_pandas(traces: Path, tmp_path: Path) -> None:
    path = str(traces / "dlrm_8xv100" / "kineto")
    code = ("import json, sys, warnings\n"
            "warnings.simplefilter('ignore')\n"
            "import traincast\n"
            "from traincast.analysis.breakdown import breakdown_columns\n"
            "from traincast.analysis.stragglers.report import straggler_summary\n"
            f"ts = traincast.load({path!r})\n"
            "bd = [breakdown_columns(ts, per=p) for p in ('iteration', 'rank')]\n"
            "s = straggler_summary(ts)\n"
            "print(json.dumps([len(bd[0]['rank']), len(s['ranks']['rank']),"
            " sorted(m for m in ('pandas', 'pyarrow.compute') if m in sys.modules)]))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINCAST_CACHE_DIR": str(tmp_path)}

    def run() -> list:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, cwd=ROOT, timeout=300, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])

    run()  # the parse cache, warm
    n_bd, n_ranks, mods = run()
    assert n_bd == 8 and n_ranks == 8 and mods == [], mods
