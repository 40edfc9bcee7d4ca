"""Collective table (nccl-tests algbw/busbw, transfer time, arrival skew) and per-call detail."""

from __future__ import annotations

import gzip
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

import traincast
from traincast.analysis.collective_table import TABLE_COLUMNS, collective_table
from traincast.costs.comm.calls import CALL_COLUMNS, collective_calls
from traincast.trace.comm_vocab import bus_factor
from traincast.trace.traceset import TraceSet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from synth_trace import Trace  # noqa: E402

KERNEL = {"all_reduce": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
          "all_gather": "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*)"}


def _load(path: Path) -> TraceSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traincast.load(path)


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> TraceSet:
    return _load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def demo(demo_traces: Path) -> TraceSet:
    return _load(demo_traces)


# ---------------------------------------------------------------- hand-built traces


def _write_run(folder: Path, world: int,
               calls: list[tuple[str, int | None, int | None, list[tuple[float, float]]]]
               ) -> Path:
    """One step per rank; each call is (collective, in_nelems, out_nelems, [(kernel ts, dur)
    per rank] in µs). Sizes of None: no record_param_comms (size unknown)."""
    for r in range(world):
        t = Trace(rank=r, world_size=world, pid=100 + r)
        t.host_name = "node0"  # one host, one clock: end times are compared as recorded
        t.step(1, 0, 2000)
        for i, (coll, n_in, n_out, kernels) in enumerate(calls):
            h0 = 10 + 150 * i
            k_ts, k_dur = kernels[r]
            if n_in is not None:
                t.host("record_param_comms", h0, 30, **{
                    "Collective name": coll.replace("_", ""), "Process Group Name": "0",
                    "Process Group Ranks": str(list(range(world))), "In msg nelems": n_in,
                    "Out msg nelems": n_out, "dtype": "Float", "Group size": world})
            t.host(f"nccl:{coll}", h0 + 5, 20, cat="user_annotation")
            t.launch(KERNEL[coll], h0 + 10, 5, k_ts, k_dur, stream=13)
        t.write(folder)
    return folder


def test_two_rank_hand_built_bandwidths(tmp_path: Path) -> None:
    _write_run(tmp_path, 2, [
        # all_reduce of 1e6 floats: ends 300 and 310 µs, last arrival 150 µs
        ("all_reduce", 1_000_000, 1_000_000, [(100, 200), (150, 160)]),
        # all_gather 1000 floats per rank -> 2000 out: transfers 15 and 25 µs
        ("all_gather", 1000, 2000, [(500, 20), (505, 25)]),
        # size unknown: still a row, bandwidth NaN
        ("all_reduce", None, None, [(900, 10), (900, 12)]),
    ])
    ts = _load(tmp_path)
    calls = collective_calls(ts)
    assert list(calls.columns) == CALL_COLUMNS
    ar = calls[(calls["collective"] == "all_reduce") & (calls["size_bytes"] > 0)]
    assert ar["transfer_ns"].tolist() == [150_000, 160_000]
    assert ar["arrival_lateness_ns"].tolist() == [0, 50_000]
    assert ar["dur_ns"].tolist() == [200_000, 160_000]
    assert ar["group_id"].nunique() == 1 and (ar["group_id"] >= 0).all()

    tab = collective_table(ts)
    assert list(tab.columns) == TABLE_COLUMNS
    row = tab[(tab["collective"] == "all_reduce") & (tab["size_bytes"] == 4_000_000)].iloc[0]
    assert (row["count"], row["ranks"], row["matched"]) == (2, 2, 2)
    assert (row["total_ns"], row["mean_ns"], row["mean_transfer_ns"]) == (360_000, 180_000,
                                                                         155_000)
    assert row["bw_basis"] == "transfer"
    algbw = 4_000_000 / 155e-6 / 1e9  # GB/s from the transfer time
    assert row["algbw_gbps"] == pytest.approx(algbw)
    assert row["busbw_gbps"] == pytest.approx(algbw * 2 * (2 - 1) / 2)
    assert (row["arrival_skew_mean_ns"], row["arrival_skew_max_ns"]) == (50_000, 50_000)

    ag = tab[tab["collective"] == "all_gather"].iloc[0]
    assert ag["size_bytes"] == 8000  # nccl-tests S: total output
    assert ag["mean_transfer_ns"] == 20_000
    assert ag["algbw_gbps"] == pytest.approx(8000 / 20e-6 / 1e9)
    assert ag["busbw_gbps"] == pytest.approx(ag["algbw_gbps"] * (2 - 1) / 2)

    unknown = tab[tab["size_bytes"] == 0].iloc[0]
    assert unknown["count"] == 2 and unknown["matched"] == 2
    assert np.isnan(unknown["algbw_gbps"]) and np.isnan(unknown["busbw_gbps"])
    assert unknown["mean_transfer_ns"] == 11_000  # transfers 10 and 12 µs
    assert tab["total_ns"].is_monotonic_decreasing


def test_four_rank_all_reduce_bus_factor(tmp_path: Path) -> None:
    # rank r arrives at 100 + 10 r µs and ends at 200 + 10 r: transfers 70, 80, 90, 100 µs
    _write_run(tmp_path, 4, [("all_reduce", 1_000_000, 1_000_000,
                              [(100 + 10 * r, 100) for r in range(4)])])
    tab = collective_table(_load(tmp_path))
    assert len(tab) == 1
    row = tab.iloc[0]
    assert (row["group_size"], row["mean_transfer_ns"], row["mean_ns"]) == (4, 85_000, 100_000)
    assert (row["arrival_skew_mean_ns"], row["arrival_skew_max_ns"]) == (30_000, 30_000)
    assert row["algbw_gbps"] == pytest.approx(4e6 / 85e-6 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.5)  # 2(n-1)/n, n = 4


def test_bus_factors_follow_nccl_tests() -> None:
    colls = np.array(["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                      "broadcast", "reduce", "send", "recv", "barrier"], object)
    got = bus_factor(colls, np.full(colls.size, 8), undefined="nan")
    np.testing.assert_allclose(got[:8], [1.75, 0.875, 0.875, 0.875, 1, 1, 1, 1])
    assert np.isnan(got[8])


# ---------------------------------------------------------------- real traces


def test_dlrm_table(dlrm: TraceSet) -> None:
    calls = collective_calls(dlrm)
    per_rank = calls.groupby(["rank", "collective"]).size().unstack()
    assert (per_rank["all_to_all"] == 5).all() and (per_rank["all_reduce"] == 3).all()
    assert len(per_rank) == 8
    tab = collective_table(dlrm)
    ar = tab[tab["collective"] == "all_reduce"].set_index("size_bytes")
    assert sorted(ar.index) == sorted(n * 4 for n in (394241, 112, 226960))
    assert (ar["count"] == 8).all() and (ar["ranks"] == 8).all() and (ar["matched"] == 8).all()
    a2a = tab[tab["collective"] == "all_to_all"]
    assert a2a["count"].sum() == 40 and (a2a["group_size"] == 8).all()
    assert (tab["bw_basis"] == "transfer").all()

    # independent recomputation: the k-th NCCL kernel of every rank forms collective k
    ev = dlrm.to_pandas()
    k = ev[ev["kind"].astype(str) == "collective"].copy()
    k["ordinal"] = k.groupby("rank").cumcount()
    k["end"] = k["ts"] + k["dur"]
    last = k.groupby("ordinal")["ts"].transform("max")
    k["transfer"] = k["end"] - last
    k["skew"] = last - k.groupby("ordinal")["ts"].transform("min")
    rank0 = calls[calls["rank"] == 0].reset_index(drop=True)  # in start order
    k["size"] = rank0["size_bytes"].to_numpy()[k["ordinal"].to_numpy()]
    k["coll"] = rank0["collective"].to_numpy()[k["ordinal"].to_numpy()]
    for (coll, size), sub in k.groupby(["coll", "size"]):
        row = tab[(tab["collective"] == coll) & (tab["size_bytes"] == size)].iloc[0]
        t_ns = sub["transfer"].mean()
        assert row["mean_transfer_ns"] == round(t_ns)
        assert row["mean_ns"] == round(sub["dur"].mean())
        assert row["total_ns"] == sub["dur"].sum()
        skews = sub.groupby("ordinal")["skew"].first()
        assert row["arrival_skew_max_ns"] == skews.max()
        assert row["arrival_skew_mean_ns"] == round(skews.mean())
        factor = 2 * 7 / 8 if coll == "all_reduce" else 7 / 8
        assert row["algbw_gbps"] == pytest.approx(size / t_ns)
        assert row["busbw_gbps"] == pytest.approx(size / t_ns * factor)
    # waiting for late peers: the measured duration is never shorter than the transfer
    assert (calls["transfer_ns"] <= calls["dur_ns"]).all()
    assert (calls["arrival_lateness_ns"] >= 0).all()
    assert (calls.groupby("group_id")["arrival_lateness_ns"].min() == 0).all()
    assert (tab["mean_ns"] > tab["mean_transfer_ns"]).all()


def test_v100_unknown_sizes_and_speed(traces: Path) -> None:
    ts = _load(traces / "hta" / "v100_2rank_allreduce")
    t0 = time.perf_counter()
    calls = collective_calls(ts)
    t1 = time.perf_counter()
    tab = collective_table(ts)
    t2 = time.perf_counter()
    assert t1 - t0 < 1.0 and t2 - t1 < 1.0, (t1 - t0, t2 - t1)
    ev = ts.to_pandas()
    ar = ev[(ev["device"] >= 0) & ev["name"].astype(str).str.contains("AllReduce")]
    assert len(calls) == len(ar) == 2020
    assert len(tab) == 1
    row = tab.iloc[0]
    # one rank of two: nothing matched, sizes not recorded -> durations only, NaN bandwidth
    assert (row["collective"], row["size_bytes"], row["count"], row["matched"]) == (
        "all_reduce", 0, 2020, 0)
    assert row["total_ns"] == ar["dur"].sum() and row["mean_ns"] == round(ar["dur"].mean())
    assert row["bw_basis"] == "duration" and np.isnan(row["busbw_gbps"])
    assert pd.isna(row["mean_transfer_ns"]) and pd.isna(row["arrival_skew_max_ns"])
    assert calls["transfer_ns"].isna().all() and (calls["group_id"] == -1).all()


def test_a100_sizes_from_in_msg_nelems(traces: Path) -> None:
    path = traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz"
    doc = orjson.loads(gzip.open(path).read())
    width = {"Float": 4, "Long": 8}
    expected: Counter = Counter()
    durs: dict[tuple[str, int], list[float]] = {}
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if e.get("cat") == "kernel" and "In msg nelems" in a:
            coll = {"allreduce": "all_reduce", "broadcast": "broadcast"}[a["Collective name"]]
            key = (coll, a["In msg nelems"] * width[a["dtype"]])
            expected[key] += 1
            durs.setdefault(key, []).append(e["dur"] * 1000.0)  # µs -> ns
    assert sum(n for (c, _), n in expected.items() if c == "all_reduce") == 15
    assert sum(n for (c, _), n in expected.items() if c == "broadcast") == 6
    tab = collective_table(_load(path.parent))
    got = Counter({(r.collective, r.size_bytes): r.count for r in tab.itertuples()})
    assert got == expected
    # one rank of two: bandwidth from the measured kernel duration; n = 2 -> factors 1
    assert (tab["bw_basis"] == "duration").all()
    want = [size / np.mean(durs[(coll, size)])  # bytes / ns == GB/s
            for coll, size in zip(tab["collective"], tab["size_bytes"], strict=True)]
    np.testing.assert_allclose(tab["algbw_gbps"], want, rtol=1e-6)
    np.testing.assert_allclose(tab["busbw_gbps"], tab["algbw_gbps"])


def test_demo_gloo_calls_are_matched(demo: TraceSet) -> None:
    calls = collective_calls(demo)
    ev = demo.to_pandas()
    executing = ev.loc[calls["event"].to_numpy()]
    assert (executing["kind"].astype(str) == "collective").all()
    assert (executing["device"] == -1).all()  # gloo ranges on host worker threads
    assert executing["name"].astype(str).str.startswith("gloo:").all()
    assert (calls["group_id"] >= 0).all() and calls["transfer_ns"].notna().all()
    assert calls.groupby("rank").size().nunique() == 1
    # each matched pair: one of the two ranks arrived last, its transfer is its duration
    for _, g in calls.groupby("group_id"):
        assert len(g) == 2
        late = g.loc[g["arrival_lateness_ns"].idxmax()]
        assert late["transfer_ns"] == late["dur_ns"]
        assert g["arrival_lateness_ns"].min() == 0
    tab = collective_table(demo)
    assert set(tab["collective"]) <= {"all_reduce", "broadcast"}
    assert (tab["bw_basis"] == "transfer").all() and (tab["ranks"] == 2).all()
    assert tab["count"].sum() == len(calls)
    np.testing.assert_allclose(tab["busbw_gbps"], tab["algbw_gbps"])  # n = 2
    exact = calls.groupby(["collective", "size_bytes"])["transfer_ns"].agg(
        lambda x: x.astype(float).mean())
    want = [size / exact[(coll, size)]
            for coll, size in zip(tab["collective"], tab["size_bytes"], strict=True)]
    np.testing.assert_allclose(tab["algbw_gbps"], want)


def test_predicted_timeline_has_the_same_collectives(dlrm: TraceSet) -> None:
    tl = traincast.predict(dlrm).timeline
    calls, tab = collective_calls(tl), collective_table(tl)
    measured = collective_table(dlrm)
    assert list(calls.columns) == CALL_COLUMNS and len(calls) == 64
    assert list(tab.columns) == TABLE_COLUMNS
    key = ["collective", "process_group", "group_size", "size_bytes", "count"]
    assert tab[key].sort_values(key).values.tolist() == \
        measured[key].sort_values(key).values.tolist()
    # the replay keeps each collective's transfer time (end - last arrival) to within 1 µs
    m = measured.set_index(key[:4])["mean_transfer_ns"]
    p = tab.set_index(key[:4])["mean_transfer_ns"]
    assert (abs(p - m.loc[p.index]) <= 1000).all()
    assert tab["total_ns"].dtype == np.int64 and tab["busbw_gbps"].dtype == np.float64


def test_unmatchable_calls_are_reported_unmatched(tmp_path: Path) -> None:
    # rank 0 issued one all_reduce in the step, rank 1 two (no sequence numbers): matching
    # fails, the calls are still listed, with durations only and a note saying why
    for rank, n in ((0, 1), (1, 2)):
        t = Trace(rank=rank, world_size=2, pid=100 + rank)
        t.step(1, 0, 1000)
        for i in range(n):
            t.host("nccl:all_reduce", 10 + 100 * i, 20, cat="user_annotation")
            t.launch(KERNEL["all_reduce"], 15 + 100 * i, 5, 40 + 100 * i, 30, stream=13)
        t.write(tmp_path)
    ts = _load(tmp_path)
    calls = collective_calls(ts)
    assert len(calls) == 3 and (calls["group_id"] == -1).all()
    assert calls["transfer_ns"].isna().all() and (calls["dur_ns"] == 30_000).all()
    assert any("rank 0 has 1, rank 1 has 2" in n for n in calls.attrs["notes"])
    tab = collective_table(ts)
    assert tab["count"].tolist() == [3] and tab["bw_basis"].tolist() == ["duration"]
    assert tab.attrs["notes"] == calls.attrs["notes"]
