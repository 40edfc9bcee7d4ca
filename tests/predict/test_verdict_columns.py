"""The terminal verdict's numpy path (``verdict_tables`` + ``verdict_rows``) gives what the
DataFrame path (``traincast.analyze`` + ``verdict``) gives, on real traces of several kinds;
the pandas semantics it replaces (left merge, mode, median per group, descending sort,
the job step) hold on hand-made and random tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.predict.verdict import (
    VERDICT_ANALYSES,
    _desc_order,
    _mode,
    _slowest_rank,
    verdict,
    verdict_rows,
)
from traincast.predict.verdict_tables import comm_wait_share, job_step_ns, parts, verdict_tables

TRACES = ["dlrm_8xv100/kineto", "hta/a100_2rank_nccl", "hta/v100_2rank_allreduce",
          "linear_1x2080ti/kineto.pt.trace.json.gz", "hta/edge/cpu_only_rank34.json.gz",
          "hta/sampled_128rank_sendrecv"]


@pytest.mark.parametrize("name", TRACES)
def test_columns_path_equals_dataframe_path(traces: Path, name: str) -> None:
    ts = traincast.load(traces / name)
    pred = traincast.predict(ts)
    frames = traincast.analyze(ts, VERDICT_ANALYSES, prediction=pred)
    cols = verdict_tables(ts, pred)
    for key, table in cols.items():
        want = frames[key]
        for c, v in table.items():
            assert c in want, (key, c)
            np.testing.assert_array_equal(v, want[c].to_numpy(), err_msg=f"{key}.{c}")
            assert v.dtype == want[c].to_numpy().dtype, (key, c)
    rows = verdict_rows(ts, cols, pred, "DIR")
    want = verdict(ts, frames, pred, "DIR")
    pd.testing.assert_frame_equal(pd.DataFrame(rows["verdict"]), want["verdict"])
    got = pd.DataFrame(rows["opportunities"], columns=list(want["opportunities"].columns))
    pd.testing.assert_frame_equal(got, want["opportunities"])


def _old_parts_inputs(bd: pd.DataFrame, idle: pd.DataFrame) -> tuple[float, np.ndarray]:
    """The former pandas merge: (comm-wait share, merged comm_wait_ns)."""
    m = bd.merge(idle[["rank", "iteration", "comm_wait_ns"]], on=["rank", "iteration"],
                 how="left").fillna(0)
    w = float(m["window_ns"].sum())
    wait = np.minimum(m["comm_wait_ns"], m["comm_exposed_ns"]).sum()
    return (float(wait / w) if w > 0 else 0.0), m["comm_wait_ns"].to_numpy(float)


@pytest.mark.parametrize("seed", range(12))
def test_merge_mode_median_sort_as_pandas(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    ranks = rng.integers(0, 6, n) * (1 if seed % 3 else 10 ** 9)  # ids far apart too
    its = rng.integers(-1, 5, n)
    bd = pd.DataFrame({"rank": ranks, "iteration": its}).drop_duplicates()
    k = len(bd)
    bd = bd.assign(window_ns=rng.integers(1, 1000, k), comm_exposed_ns=rng.integers(0, 50, k),
                   compute_ns=rng.integers(0, 500, k), memory_ns=rng.integers(0, 9, k),
                   idle_ns=rng.integers(0, 300, k)).reset_index(drop=True)
    idle = bd.sample(frac=0.7, random_state=seed)[["rank", "iteration"]]
    if seed % 4 == 0:  # a key twice: pandas' merge gives a row per match
        idle = pd.concat([idle, idle.head(1)])
    idle = idle.assign(comm_wait_ns=rng.integers(0, 80, len(idle)),
                       **{c: rng.integers(0, 60, len(idle)) for c in (
                           "host_ns", "data_loading_ns", "peer_wait_ns", "stream_dep_ns",
                           "other_ns")}).reset_index(drop=True)
    want_share, _ = _old_parts_inputs(bd, idle)
    as_cols = {"breakdown": {c: bd[c].to_numpy() for c in bd},
               "idle": {c: idle[c].to_numpy() for c in idle}}
    assert comm_wait_share(as_cols) == want_share
    assert parts(as_cols) == parts({"breakdown": bd, "idle": idle})

    words = list(rng.choice(["all_to_all", "all_reduce", "", "broadcast"], n))
    want_mode = str(pd.Series(words, dtype=object).mode().iloc[0])
    assert _mode(np.asarray(words, object)) == want_mode

    meas = rng.integers(0, 7, n)
    st = pd.DataFrame({"rank": ranks, "iteration": its, "measured_ns": meas,
                       "predicted_ns": rng.integers(0, 9, n).astype(float)})
    if seed % 2:
        st.loc[0, "predicted_ns"] = np.nan
    assert _slowest_rank({c: st[c].to_numpy() for c in st}) == float(
        st.groupby("rank")["measured_ns"].median().idxmax())
    per = st.groupby("iteration")["predicted_ns"].max()
    assert job_step_ns({c: st[c].to_numpy() for c in st}, "predicted_ns") == float(
        np.median(per.to_numpy(float)))

    vals = rng.integers(-3, 3, n).astype(float)
    want_order = pd.Series(vals).sort_values(ascending=False).index.to_numpy()
    np.testing.assert_array_equal(_desc_order(vals), want_order)


def test_empty_inputs() -> None:
    assert np.isnan(job_step_ns({"iteration": np.empty(0, np.int64),
                                 "predicted_ns": np.empty(0)}, "predicted_ns"))
    assert np.isnan(_slowest_rank({"rank": np.empty(0, np.int32),
                                   "measured_ns": np.empty(0, np.int64)}))
    assert _mode(np.empty(0, object)) == ""
    assert parts({}) == {} and comm_wait_share({}) == 0.0
