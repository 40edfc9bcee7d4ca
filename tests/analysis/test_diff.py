"""Trace diff: op-level comparison of two runs, and attribution of the step-time change."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis.diff import OPS_COLUMNS, trace_diff
from traincast.errors import ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from synth_trace import Trace  # noqa: E402

GEMM = "volta_sgemm_128x64_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"


@pytest.fixture(scope="module")
def hta_pair(traces: Path) -> tuple[traincast.TraceSet, traincast.TraceSet]:
    d = traces / "hta" / "trace_diff"
    return traincast.load(d / "control.json.gz"), traincast.load(d / "test.json.gz")


def _reference(ts: traincast.TraceSet) -> pd.DataFrame:
    """Per (name, kind): calls and summed duration per step, by a plain pandas groupby."""
    ev = ts.events.to_pandas()
    ev["kind"] = ev["kind"].astype(str)
    ev["name"] = ev["name"].astype(str).str.replace(r"^ProfilerStep#\d+$", "ProfilerStep#*",
                                                    regex=True)
    ev = ev[(ev["iteration"] >= 0) & (ev["kind"] != "sync")
            & ~((ev["kind"] == "annotation") & (ev["device"] >= 0))]
    n = ts.iterations.num_rows
    g = ev.groupby(["name", "kind"])["dur"].agg(["size", "sum"])
    return pd.DataFrame({"count": g["size"] / n, "total": (g["sum"] / n).round()})


def test_hta_control_vs_test_matches_groupby(hta_pair) -> None:
    a, b = hta_pair
    t = time.perf_counter()
    res = trace_diff(a, b)
    elapsed = time.perf_counter() - t
    ops = res["ops"]
    assert list(ops.columns) == OPS_COLUMNS
    assert not ops.duplicated(["name", "kind"]).any()
    ref_a, ref_b = _reference(a), _reference(b)
    got = ops.set_index(["name", "kind"])
    assert set(got.index) == set(ref_a.index) | set(ref_b.index)
    ra = ref_a.reindex(got.index).fillna(0)
    rb = ref_b.reindex(got.index).fillna(0)
    np.testing.assert_allclose(got["count_a"], ra["count"])
    np.testing.assert_allclose(got["count_b"], rb["count"])
    assert (got["total_a_ns"] == ra["total"].astype(np.int64)).all()
    assert (got["total_b_ns"] == rb["total"].astype(np.int64)).all()
    assert (got["delta_ns"] == got["total_b_ns"] - got["total_a_ns"]).all()
    # statuses from their definition
    only_b = set(ref_b.index) - set(ref_a.index)
    only_a = set(ref_a.index) - set(ref_b.index)
    assert set(got.index[got["status"] == "new"]) == only_b and len(only_b) > 0
    assert set(got.index[got["status"] == "gone"]) == only_a and len(only_a) > 0
    both = got.loc[~got["status"].isin(["new", "gone"])]
    d, ta = both["delta_ns"].abs(), both["total_a_ns"]
    same = (d < 1000) | (d < 0.05 * ta)
    assert (both.loc[same, "status"] == "same").all()
    assert (both.loc[~same & (both["delta_ns"] > 0), "status"] == "slower").all()
    assert (both.loc[~same & (both["delta_ns"] < 0), "status"] == "faster").all()
    # the A100 run was the faster one: steps 77.5 ms vs 124.1 ms per step on average
    summ = res["summary"].iloc[0]
    assert summ["step_a_ns"] == pytest.approx(a.iterations.to_pandas()["dur"].mean())
    assert summ["step_b_ns"] == pytest.approx(b.iterations.to_pandas()["dur"].mean())
    assert summ["step_delta_pct"] == pytest.approx(60.1, abs=0.1)
    assert summ["device_busy_delta_ns"] + summ["device_idle_delta_ns"] == pytest.approx(
        summ["step_delta_ns"])
    dev = ops[ops["on_device"]]
    np.testing.assert_allclose(dev["contribution_pct"],
                               100 * dev["delta_ns"] / summ["step_delta_ns"])
    assert ops.loc[~ops["on_device"], "contribution_pct"].isna().all()
    assert summ["device_ops_delta_ns"] == dev["delta_ns"].sum()
    assert dev["delta_share_pct"].abs().sum() == pytest.approx(100)
    counts = ops["status"].value_counts()
    assert all(summ[f"n_{s}"] == counts.get(s, 0) for s in ("slower", "faster", "same", "new",
                                                           "gone"))
    # one row per rank pair: rank 3 of the A100 run vs rank 1 of the V100 run
    steps = res["steps"]
    assert steps[["rank_a", "rank_b", "iterations_a", "iterations_b"]].values.tolist() == [
        [3, 1, 6, 6]]
    assert elapsed < 5.0, elapsed


def test_by_op_family_adds_up(hta_pair) -> None:
    a, b = hta_pair
    by_name = trace_diff(a, b)["ops"]
    by_fam = trace_diff(a, b, by="op_family")["ops"]
    assert not by_fam.duplicated(["name", "kind"]).any()
    assert (by_fam["name"] == by_fam["op_family"]).all()
    fam = by_name.groupby(["op_family", "kind"])[["total_a_ns", "total_b_ns"]].sum()
    got = by_fam.set_index(["name", "kind"])[["total_a_ns", "total_b_ns"]]
    # per-name totals are rounded per row: sums agree to a few ns per row
    diff = (fam.reindex(got.index) - got).abs()
    assert (diff.to_numpy() <= by_name.groupby(["op_family", "kind"]).size().reindex(
        got.index).to_numpy()[:, None]).all()


def test_measured_vs_predicted_dlrm(traces: Path) -> None:
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    pred = traincast.predict(ts)
    res = trace_diff(ts, pred.timeline)
    ops, summ = res["ops"], res["summary"].iloc[0]
    # the replay keeps every op (GPU annotations and cuda_sync records are not compared)
    assert not ops["status"].isin(["new", "gone"]).any()
    assert (ops["count_a"] == ops["count_b"]).all()
    assert abs(summ["step_delta_pct"]) < 1.0
    step = summ["step_a_ns"]
    assert ops["delta_ns"].abs().max() < 0.01 * step
    assert (ops["status"] == "same").mean() > 0.95
    steps = res["steps"]
    assert steps["rank_a"].tolist() == list(range(8)) == steps["rank_b"].tolist()
    np.testing.assert_allclose(steps["step_b_ns"],
                               pred.iterations["predicted_ns"].to_numpy(np.float64))


def _run(folder: Path, gemm_us: float, steps: int = 1) -> traincast.TraceSet:
    """Per step: a GEMM (``gemm_us``) and an elementwise kernel (100 µs) launched back to
    back, cudaDeviceSynchronize until they finish, then 40 µs of CPU (as
    ``synth_trace.single_rank_gpu``, which is the 300 µs case)."""
    t = Trace()
    step = 180 + gemm_us
    for k in range(steps):
        s = k * step
        t.step(k + 1, s, step)
        t.launch(GEMM, s + 10, 5, s + 20, gemm_us)
        t.launch(ELEMENTWISE, s + 20, 5, s + 20 + gemm_us, 100)
        t.host("cudaDeviceSynchronize", s + 30, gemm_us + 95, cat="cuda_runtime")
        t.host("aten::add", s + gemm_us + 130, 40)
    t.write(folder)
    return traincast.load(folder)


def test_synthetic_kernel_twice_as_slow(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", 300)
    b = _run(tmp_path / "b", 600)
    res = trace_diff(a, b)
    ops = res["ops"]
    slower = ops[ops["status"] == "slower"]
    top = slower.iloc[0]
    assert top["name"] == GEMM and top["kind"] == "kernel" and top["op_family"] == "gemm"
    assert top["delta_ns"] == 300_000 and top["mean_a_ns"] == 300_000
    assert top["mean_b_ns"] == 600_000 and top["delta_pct"] == pytest.approx(100)
    # the step grew by exactly the GEMM's 300 µs and the GPU is the critical resource
    assert top["contribution_pct"] == pytest.approx(100)
    assert top["delta_share_pct"] == pytest.approx(100)
    ew = ops.set_index("name").loc[ELEMENTWISE]
    assert ew["status"] == "same" and ew["delta_ns"] == 0
    # host ops that only wait absorb the same change, with no contribution claimed
    sync = ops.set_index("name").loc["cudaDeviceSynchronize"]
    assert sync["status"] == "slower" and sync["delta_ns"] == 300_000
    assert np.isnan(sync["contribution_pct"])
    summ = res["summary"].iloc[0]
    assert summ["step_delta_ns"] == 300_000
    assert summ["device_busy_delta_ns"] == 300_000 and summ["device_idle_delta_ns"] == 0
    assert summ["device_ops_explained_pct"] == pytest.approx(100)
    assert summ["n_new"] == summ["n_gone"] == 0


def test_per_iteration_normalises_step_counts(tmp_path: Path) -> None:
    one = _run(tmp_path / "one", 300, steps=1)
    three = _run(tmp_path / "three", 300, steps=3)
    res = trace_diff(one, three)
    assert (res["ops"]["status"] == "same").all()
    assert (res["ops"]["delta_ns"] == 0).all()
    assert res["summary"].iloc[0]["steps_b"] == 3
    raw = trace_diff(one, three, per_iteration=False)["ops"].set_index("name")
    assert raw.loc[GEMM, "count_b"] == 3 and raw.loc[GEMM, "total_b_ns"] == 900_000
    assert raw.loc[GEMM, "delta_ns"] == 600_000 and raw.loc[GEMM, "status"] == "slower"
    # ProfilerStep#1..3 are one op
    assert raw.loc["ProfilerStep#*", "count_b"] == 3


def test_self_diff_and_parameters(hta_pair) -> None:
    a, _ = hta_pair
    res = trace_diff(a, a)
    assert (res["ops"]["status"] == "same").all() and (res["ops"]["delta_ns"] == 0).all()
    assert res["summary"].iloc[0]["step_delta_ns"] == 0
    assert res["ops"]["contribution_pct"].isna().all()
    with pytest.raises(ParameterError, match="by must be"):
        trace_diff(a, a, by="kernel")
    with pytest.raises(ParameterError, match="TraceSet"):
        trace_diff(a, "trace.json")  # type: ignore[arg-type]


def test_v100_is_fast(traces: Path) -> None:
    ts = traincast.load(traces / "hta" / "v100_2rank_allreduce" / "rank-1.json.gz")
    t = time.perf_counter()
    res = trace_diff(ts, ts)
    assert time.perf_counter() - t < 5.0
    assert not any(re.match(r"ProfilerStep#\d", n) for n in res["ops"]["name"])


def test_status_names_its_cause_on_hta_pair(hta_pair) -> None:
    """Issue 18: cudaMemcpyAsync is called 21x more often (38 -> 802 per step), each call 4x
    faster (0.338 -> 0.077 ms): slower because of the count, although each call got faster;
    AddmmBackward0 (99 -> 30 calls, each longer) is faster because of the count."""
    a, b = hta_pair
    ops = trace_diff(a, b)["ops"].set_index("name")
    m = ops.loc["cudaMemcpyAsync"]
    assert (m["count_a"], m["count_b"]) == (38, 802)
    assert round(m["mean_a_ns"] / 1e6, 3) == 0.338 and round(m["mean_b_ns"] / 1e6, 3) == 0.077
    assert (m["status"], m["cause"]) == ("slower", "count, per-call opposite")
    add = ops.loc["autograd::engine::evaluate_function: AddmmBackward0"]
    assert add["mean_b_ns"] > add["mean_a_ns"] and add["count_b"] < add["count_a"]
    assert (add["status"], add["cause"]) == ("faster", "count, per-call opposite")
    acc = ops.loc["autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"]
    assert (acc["status"], acc["cause"]) == ("slower", "per-call")  # 259 vs 263 calls: same
    assert set(ops["cause"]) <= {"", *__import__("traincast.analysis.diff",
                                                 fromlist=["CAUSES"]).CAUSES}
    assert (ops.loc[ops["status"].isin(["slower", "faster"]), "cause"] != "").mean() > 0.9


def test_steps_say_why_ranks_differ(hta_pair) -> None:
    a, b = hta_pair
    steps = trace_diff(a, b)["steps"]
    assert (steps["rank_a"].tolist(), steps["rank_b"].tolist()) == ([3], [1])
    assert steps["pairing"].iat[0] == "different ranks, paired in order (a holds rank 3, b rank 1)"
    same = trace_diff(a, a)["steps"]
    assert (same["pairing"] == "same rank").all()


def test_terminal_diff_shows_both_runs_uncut(hta_pair) -> None:
    """At 100 columns: full names (folded, never cut), calls/ms per step and per call of both
    runs, whole headers, and the one-row summary as metric/value lines."""
    from rich.console import Console

    from traincast.report.tables import render_tables

    a, b = hta_pair
    console = Console(width=100, record=True, force_terminal=False)
    render_tables(trace_diff(a, b), console=console)
    text = console.export_text()
    assert "Memcpy DtoD (Device ->" in text  # before: "Memcpy DtoD  Device)"
    assert "Memcpy DtoD  Device)" not in text
    for header in ("calls/step", "ms/step", "ms/call", "device_busy_delta ms", "pairing"):
        assert header in text
    assert "38→802" in text and "0.338→0.077" in text
    assert "…" not in text and "..." not in text.split("more rows")[0].replace("... ", "")
    assert all(len(line) <= 100 for line in text.splitlines())


def test_step_change_terms_add_up(hta_pair) -> None:
    """control vs test: 46.6 ms slower step, 165% 'explained' by device ops and 306 ms of
    host deltas: the step_change table shows how the terms add up (issue 27)."""
    a, b = hta_pair
    res = trace_diff(a, b)
    s = res["summary"].iloc[0]
    t = res["step_change"].set_index("term")["delta_ns"]
    t.index = t.index.str.strip()
    assert t["step change"] == pytest.approx(46.576e6, rel=1e-4)
    assert t["device busy"] + t["device idle"] == pytest.approx(t["step change"])
    assert t["device busy"] + t["concurrency"] == pytest.approx(t["device-op deltas (sum)"])
    assert s["device_ops_explained_pct"] == pytest.approx(165.4, abs=0.1)
    assert s["device_concurrency_delta_ns"] == pytest.approx(22.27e6, rel=1e-3)
    host = res["step_change"].iloc[-1]
    assert host["term"].startswith("host") and np.isnan(host["share_of_step_change_pct"])
