"""Op breakdown and top kernels: real traces, hand-built traces, predicted timelines."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis.kernels import op_breakdown, top_kernels
from traincast.errors import ParameterError
from traincast.graph.nesting import self_times
from traincast.trace.intervals import length
from traincast.trace.schema import DEVICE_KINDS
from traincast.trace.traceset import TraceSet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from synth_trace import Trace  # noqa: E402

STAT_COLS = ["count", "total_ns", "mean_ns", "p50_ns", "p90_ns", "p99_ns"]


def _load(path: Path) -> TraceSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traincast.load(path)


@pytest.fixture(scope="module")
def dlrm(traces: Path):
    return _load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def v100(traces: Path):
    return _load(traces / "hta" / "v100_2rank_allreduce")


@pytest.fixture(scope="module")
def demo(demo_traces: Path):
    return _load(demo_traces)


def _device_ops(ts) -> pd.DataFrame:
    ev = ts.to_pandas()
    ev["kind"] = ev["kind"].astype(str)
    return ev[(ev["device"] >= 0) & ev["kind"].isin(DEVICE_KINDS)]


def _ref_stats(durs: np.ndarray) -> dict[str, int]:
    d = np.asarray(durs, np.int64)
    return {"count": d.size, "total_ns": int(d.sum()), "mean_ns": int(np.rint(d.mean())),
            "p50_ns": int(np.rint(np.percentile(d, 50))),
            "p90_ns": int(np.rint(np.percentile(d, 90))),
            "p99_ns": int(np.rint(np.percentile(d, 99)))}


# ---------------------------------------------------------------- hand-built traces


def _gpu_two_ranks(folder: Path) -> Path:
    """Rank 0: GEMM 300 µs, two elementwise kernels (100, 50 µs), a 20 µs memcpy.
    Rank 1: GEMM 200 µs, elementwise 70 µs."""
    r0 = Trace(rank=0, world_size=2, pid=100)
    r0.step(1, 0, 1000)
    r0.launch("volta_sgemm_128x64_nn", 10, 5, 20, 300)
    r0.launch("void at::native::vectorized_elementwise_kernel<4>", 20, 5, 320, 100)
    r0.launch("void at::native::vectorized_elementwise_kernel<4>", 30, 5, 420, 50)
    r0.launch("Memcpy HtoD (Pageable -> Device)", 40, 5, 470, 20, cat="gpu_memcpy",
              api="cudaMemcpyAsync")
    r0.write(folder)
    r1 = Trace(rank=1, world_size=2, pid=101)
    r1.step(1, 0, 1000)
    r1.launch("volta_sgemm_128x64_nn", 10, 5, 20, 200)
    r1.launch("void at::native::vectorized_elementwise_kernel<4>", 20, 5, 220, 70)
    r1.write(folder)
    return folder


def _cpu_only(folder: Path) -> Path:
    """One CPU-only rank; thread 1 nests linear > {t, addmm > copy_}; thread 2 one addmm."""
    t = Trace(rank=0, world_size=1)
    t.step(1, 0, 200)
    t.host("aten::linear", 10, 100)  # self 100 - 10 - 50 = 40
    t.host("aten::t", 20, 10)  # self 10
    t.host("aten::addmm", 40, 50)  # self 50 - 10 = 40
    t.host("aten::copy_", 50, 10)  # self 10
    t.host("aten::empty", 70, 0)  # zero length: self 0, nests nothing
    t.host("aten::addmm", 10, 30, tid=2)  # other thread: self 30
    return t.write(folder)


def test_gpu_breakdown_exact_on_hand_built_trace(tmp_path: Path) -> None:
    ts = _load(_gpu_two_ranks(tmp_path))
    df = op_breakdown(ts).set_index(["rank", "op_family"])
    assert (df["source"] == "device").all()
    r0 = df.loc[0]
    assert r0.loc["gemm", "total_ns"] == 300_000 and r0.loc["gemm", "count"] == 1
    ew = r0.loc["elementwise"]
    # linear interpolation between 50 and 100 µs
    assert (ew["count"], ew["total_ns"], ew["mean_ns"]) == (2, 150_000, 75_000)
    assert (ew["p50_ns"], ew["p90_ns"], ew["p99_ns"]) == (75_000, 95_000, 99_500)
    assert r0.loc["memcpy", "total_ns"] == 20_000
    assert r0["share_pct"].sum() == pytest.approx(100.0)
    assert r0.loc["gemm", "share_pct"] == pytest.approx(100 * 300 / 470)
    assert df.loc[(1, "gemm"), "share_pct"] == pytest.approx(100 * 200 / 270)
    # rows of a rank come in descending total order
    assert list(r0.index) == ["gemm", "elementwise", "memcpy"]

    top = top_kernels(ts)
    g = top.set_index("name").loc["volta_sgemm_128x64_nn"]
    assert (g["kind"], g["op_family"], g["count"], g["ranks"]) == ("kernel", "gemm", 2, 2)
    assert (g["total_ns"], g["mean_ns"], g["p50_ns"], g["p90_ns"]) == (500_000, 250_000,
                                                                       250_000, 290_000)
    assert g["share_pct"] == pytest.approx(100 * 500 / 740)
    assert top["name"].iloc[0] == "volta_sgemm_128x64_nn"
    assert top["share_pct"].sum() == pytest.approx(100.0)
    by_count = top_kernels(ts, by="count")
    assert by_count["name"].iloc[0] == "void at::native::vectorized_elementwise_kernel<4>"
    assert by_count["count"].iloc[0] == 3
    by_mean = top_kernels(ts, by="mean", n=1)
    assert len(by_mean) == 1 and by_mean["mean_ns"].iloc[0] == 250_000


def test_host_self_time_on_hand_built_cpu_trace(tmp_path: Path) -> None:
    ts = _load(_cpu_only(tmp_path))
    top = top_kernels(ts, n=50).set_index("name")
    assert (top["source"] == "host-self").all() and (top["kind"] == "cpu_op").all()
    assert top.loc["aten::linear", "total_ns"] == 40_000
    assert top.loc["aten::t", "total_ns"] == 10_000
    assert top.loc["aten::copy_", "total_ns"] == 10_000
    assert top.loc["aten::empty", "total_ns"] == 0
    addmm = top.loc["aten::addmm"]
    assert (addmm["count"], addmm["total_ns"], addmm["mean_ns"]) == (2, 70_000, 35_000)
    df = op_breakdown(ts).set_index("op_family")
    assert (df["source"] == "host-self").all()
    # linear and addmm are gemm: 40 + 40 + 30 µs; the two threads' busy time is 100 + 30 µs
    assert df.loc["gemm", "total_ns"] == 110_000 and df.loc["gemm", "count"] == 3
    assert df["total_ns"].sum() == 130_000


def test_self_times_partial_overlap_never_negative() -> None:
    # child sticking out of its parent by 5 ns: only the overlap is subtracted
    got = self_times(np.array([0, 10, 100]), np.array([20, 15, 5]), np.array([7, 7, 7]))
    assert got.tolist() == [10, 15, 5]


# ---------------------------------------------------------------- real traces


def test_dlrm_breakdown_matches_events(dlrm) -> None:
    df = op_breakdown(dlrm)
    assert list(df.columns) == ["rank", "op_family", *STAT_COLS, "share_pct", "source"]
    assert (df["source"] == "device").all()
    assert sorted(df["rank"].unique().tolist()) == list(range(8))
    ops = _device_ops(dlrm)
    ops = ops.assign(op_family=ops["op_family"].astype(str))
    for (rank, fam), sub in ops.groupby(["rank", "op_family"]):
        row = df[(df["rank"] == rank) & (df["op_family"] == fam)]
        assert len(row) == 1
        assert row[STAT_COLS].iloc[0].to_dict() == _ref_stats(sub["dur"].to_numpy())
    assert len(df) == ops.groupby(["rank", "op_family"]).ngroups
    share = df.groupby("rank")["share_pct"].sum()
    np.testing.assert_allclose(share.to_numpy(), 100.0)
    # 5 all_to_all + 3 all_reduce NCCL kernels per rank
    assert (df[df["op_family"] == "comm"]["count"] == 8).all()


def test_dlrm_top_kernels(dlrm) -> None:
    top = top_kernels(dlrm, n=10_000)
    ops = _device_ops(dlrm)
    assert top["total_ns"].sum() == ops["dur"].sum()
    assert top["count"].sum() == len(ops)
    assert top["share_pct"].sum() == pytest.approx(100.0)
    assert top["total_ns"].is_monotonic_decreasing
    first = top.iloc[0]
    assert first["name"].startswith("ncclKernel_SendRecv") and first["kind"] == "collective"
    assert (first["count"], first["ranks"]) == (40, 8)
    ar = top[top["name"].str.startswith("ncclKernel_AllReduce")]
    assert ar["count"].sum() == 24 and (ar["ranks"] == 8).all()
    # ranks = distinct ranks a name was recorded on, recomputed from the events
    names = ops["name"].astype(str)
    nranks = ops.groupby(names)["rank"].nunique()
    for row in top.head(30).itertuples():
        assert row.ranks == nranks[row.name]
    s = ops[names == first["name"]]["dur"].to_numpy()
    assert first[STAT_COLS].to_dict() == _ref_stats(s)

    assert len(top_kernels(dlrm)) == 20 and len(top_kernels(dlrm, n=3)) == 3
    by_count = top_kernels(dlrm, n=50, by="count")
    assert by_count["count"].is_monotonic_decreasing
    assert by_count["count"].iloc[0] == names.value_counts().iloc[0]
    by_mean = top_kernels(dlrm, n=50, by="mean")
    assert by_mean["mean_ns"].is_monotonic_decreasing
    assert by_mean["mean_ns"].iloc[0] == int(np.rint(ops.groupby(names)["dur"].mean().max()))


def test_v100_allreduce_kernels_and_speed(v100) -> None:
    t0 = time.perf_counter()
    df = op_breakdown(v100)
    t1 = time.perf_counter()
    top = top_kernels(v100, n=100)
    t2 = time.perf_counter()
    assert t1 - t0 < 1.0 and t2 - t1 < 1.0, (t1 - t0, t2 - t1)
    assert df["rank"].unique().tolist() == [1]
    comm = df.set_index("op_family").loc["comm"]
    ops = _device_ops(v100)
    ar = ops[ops["name"].astype(str).str.contains("AllReduce")]
    assert len(ar) == 2020 and comm["count"] == 2020
    assert comm["total_ns"] == ar["dur"].sum()
    assert df["total_ns"].sum() == ops["dur"].sum()
    nccl = top[top["name"].str.contains("AllReduce")]
    assert nccl["count"].sum() == 2020 and (nccl["ranks"] == 1).all()


def test_demo_uses_host_self_times(demo) -> None:
    """CPU-only gloo run: host cpu_op self times; they partition each thread's busy time."""
    df = op_breakdown(demo)
    assert (df["source"] == "host-self").all()
    ev = demo.to_pandas()
    ops = ev[(ev["kind"].astype(str) == "cpu_op") & (ev["device"] < 0)]
    assert not (ev["device"] >= 0).any()
    for rank, sub in ops.groupby("rank"):
        busy = sum(length(g["ts"].to_numpy(), (g["ts"] + g["dur"]).to_numpy())
                   for _, g in sub.groupby(["pid", "tid"]))
        assert df[df["rank"] == rank]["total_ns"].sum() == busy
        assert df[df["rank"] == rank]["count"].sum() == len(sub)
    # reference self time of every op by an explicit stack walk (containment nesting)
    s, d = ops["ts"].to_numpy(), ops["dur"].to_numpy()
    thread = ops.groupby(["rank", "pid", "tid"]).ngroup().to_numpy()
    ref = d.copy()
    for t in np.unique(thread):
        idx = np.flatnonzero(thread == t)
        stack: list[int] = []
        for i in idx[np.lexsort((-d[idx], s[idx]))]:
            while stack and s[stack[-1]] + d[stack[-1]] <= s[i]:
                stack.pop()
            if stack and d[i] > 0:
                ref[stack[-1]] -= d[i]
            if d[i] > 0:
                stack.append(i)
    names = ops["name"].astype(str).to_numpy()
    top = top_kernels(demo, n=10).set_index("name")
    assert top["source"].eq("host-self").all()
    for name, row in top.iterrows():
        assert row["total_ns"] == ref[names == name].sum(), name
    assert top.loc["aten::mm", "op_family"] == "gemm"


def test_predicted_timeline(dlrm, demo) -> None:
    for ts, source in ((dlrm, "device"), (demo, "host-self")):
        tl = traincast.predict(ts).timeline
        meas, pred = op_breakdown(ts), op_breakdown(tl)
        assert (pred["source"] == source).all()
        key = ["rank", "op_family"]
        both = meas.merge(pred, on=key, suffixes=("", "_pred"))
        assert len(both) == len(meas) == len(pred)
        assert (both["count"] == both["count_pred"]).all()
        top = top_kernels(tl, n=5)
        assert len(top) == 5 and (top["source"] == source).all()
    # device kernels keep their measured durations in replay (except collectives: transfer)
    tl = traincast.predict(dlrm).timeline
    b = op_breakdown(dlrm).merge(op_breakdown(tl), on=["rank", "op_family"],
                                 suffixes=("", "_pred"))
    gemm = b[b["op_family"] == "gemm"]
    assert (gemm["total_ns"] == gemm["total_ns_pred"]).all()


@pytest.mark.parametrize("kwargs", [{"by": "name"}, {"by": ""}, {"n": 0}, {"n": -3},
                                    {"n": 2.5}, {"n": True}, {"n": "5"}])
def test_bad_options(tmp_path: Path, kwargs: dict) -> None:
    ts = _load(_gpu_two_ranks(tmp_path))
    with pytest.raises(ParameterError) as err:
        top_kernels(ts, **kwargs)
    assert "\n" not in str(err.value)
