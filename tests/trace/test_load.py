"""``traincast.load``: real multi-rank traces -> TraceSet (ranks, iterations, collectives)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import warnings
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.errors import CollectiveMismatchError, IterationError
from traincast.trace.load import TraincastWarning
from traincast.trace.traceset import TraceSet

# SOURCES.md: ProfilerStep#10 of dlrm_8xv100 ranks 0..7, µs
DLRM_STEP_US = [14455, 19901, 13017, 19313, 17979, 17797, 13091, 12509]
# SOURCES.md: hta/a100_2rank_nccl steps (rounded to µs)
A100_STEP_US = [222442, 219727, 224936]
DTYPE_BYTES = {"Float": 4, "Long": 8}


def _doc(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw,
                      parse_float=Decimal)


def _names(ts: TraceSet) -> np.ndarray:
    return np.asarray(ts.events.column("name").to_pylist(), dtype=object)


def _kinds(ts: TraceSet) -> np.ndarray:
    return np.asarray(ts.events.column("kind").to_pylist(), dtype=object)


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def a100(traces: Path) -> TraceSet:
    return traincast.load(traces / "hta" / "a100_2rank_nccl")


# ----------------------------------------------------------------------------- DLRM, 8 ranks


def test_dlrm_ranks_and_files(dlrm: TraceSet) -> None:
    assert dlrm.rank_ids == list(range(8))
    assert dlrm.world_size == 8
    for r, info in dlrm.ranks.items():
        assert info.path.name == f"rank-{r}.pt.trace.json.gz"
        assert info.world_size == 8 and info.backend == "nccl"
        assert info.devices == ["Tesla V100-SXM2-32GB"] * 8
    assert dlrm.warnings == []
    assert "ranks=[0, 1, 2, 3, 4, 5, 6, 7]" in repr(dlrm)


def test_dlrm_one_iteration_per_rank_with_measured_step_time(dlrm: TraceSet) -> None:
    it = dlrm.iterations.to_pandas()
    assert it["rank"].tolist() == list(range(8))
    assert it["iteration"].tolist() == [10] * 8
    assert it["dur"].tolist() == [us * 1000 for us in DLRM_STEP_US]
    assert (it["end"] - it["start"]).tolist() == it["dur"].tolist()
    names, ranks = _names(dlrm), dlrm.column("rank")
    ts = dlrm.column("ts")
    for row in it.itertuples():
        assert names[row.marker_event] == "ProfilerStep#10"
        assert ranks[row.marker_event] == row.rank
        assert ts[row.marker_event] == row.start


def test_dlrm_events_rank_major_and_sorted(dlrm: TraceSet) -> None:
    rank, ts, dur = dlrm.column("rank"), dlrm.column("ts"), dlrm.column("dur")
    assert np.all(np.diff(rank) >= 0)
    for r in dlrm.rank_ids:
        lo, hi = dlrm.rank_slice(r)
        assert hi > lo and np.all(rank[lo:hi] == r)
        d = np.diff(ts[lo:hi])
        assert np.all(d >= 0) and np.all(np.diff(dur[lo:hi])[d == 0] <= 0)
    assert dlrm.rank_slice(0)[0] == 0 and dlrm.rank_slice(7)[1] == dlrm.events.num_rows


def test_dlrm_iteration_of_events(dlrm: TraceSet) -> None:
    it = dlrm.column("iteration")
    assert set(np.unique(it).tolist()) <= {-1, 10}
    steps = dlrm.iterations.to_pandas()
    rank, ts = dlrm.column("rank"), dlrm.column("ts")
    host = dlrm.column("device") < 0
    for row in steps.itertuples():
        mine = (rank == row.rank) & host
        inside = mine & (ts >= row.start) & (ts < row.end)
        assert np.all(it[inside] == 10)
        assert np.all(it[mine & ~inside] == -1)
    # GPU events take the iteration of the runtime call that launched them
    kinds, corr = _kinds(dlrm), dlrm.column("correlation")
    for r in dlrm.rank_ids:
        lo, hi = dlrm.rank_slice(r)
        rt = {int(c): int(i) for c, i, k in zip(corr[lo:hi], it[lo:hi], kinds[lo:hi],
                                                 strict=True) if k == "runtime" and c >= 0}
        gpu = [(int(c), int(i)) for c, i, h in zip(corr[lo:hi], it[lo:hi], host[lo:hi],
                                                   strict=True) if not h and c in rt]
        assert len(gpu) > 100
        assert all(rt[c] == i for c, i in gpu)


def test_dlrm_collectives(dlrm: TraceSet) -> None:
    c = dlrm.collectives.to_pandas()
    names, kinds, it = _names(dlrm), _kinds(dlrm), dlrm.column("iteration")
    order = ["all_to_all"] * 4 + ["all_reduce", "all_to_all", "all_reduce", "all_reduce"]
    for r in range(8):
        mine = c[c["rank"] == r].sort_values("event")
        assert mine["collective"].value_counts().to_dict() == {"all_to_all": 5, "all_reduce": 3}
        assert mine["collective"].tolist() == order
        assert mine["seq"].tolist() == list(range(8))
        assert (mine["kernel_event"] >= 0).all()
        assert (mine["issue_event"] == -1).all()
        lo, hi = dlrm.rank_slice(r)
        assert mine["event"].between(lo, hi - 1).all()
        assert mine["kernel_event"].between(lo, hi - 1).all()
    assert set(c["process_group"]) == {"0"}
    assert (c["group_size"] == 8).all()
    assert dlrm.group_ranks() == [tuple(range(8))] * len(c)
    assert dlrm.member_lists.num_rows == 1  # 64 calls, one stored list
    assert (c["in_bytes"] > 0).all()
    ev_names = names[c["event"].to_numpy()]
    k_names = names[c["kernel_event"].to_numpy()]
    expected_call = {"all_to_all": "nccl:all_to_all", "all_reduce": "nccl:all_reduce"}
    assert list(ev_names) == [expected_call[x] for x in c["collective"]]
    assert all(k.startswith("ncclKernel") for k in k_names)
    assert set(kinds[c["kernel_event"].to_numpy()]) == {"collective"}
    # SOURCES.md: the all_to_all run as ncclKernel_SendRecv
    a2a = c["collective"] == "all_to_all"
    assert all("SendRecv" in k for k in k_names[a2a.to_numpy()])
    assert all("AllReduce" in k for k in k_names[~a2a.to_numpy()])
    assert set(it[c["event"].to_numpy()]) == {10}
    # every rank reduces the same amount of data
    ar = c[~a2a]
    assert ar.groupby("rank")["in_bytes"].apply(list).map(tuple).nunique() == 1


def test_to_pandas_view(dlrm: TraceSet) -> None:
    df = dlrm.to_pandas()
    assert isinstance(df, pd.DataFrame)
    assert len(df) == dlrm.events.num_rows
    assert list(df.columns[:13]) == ["rank", "iteration", "kind", "name", "ts", "dur", "pid",
                                     "tid", "device", "stream", "correlation", "external_id",
                                     "op_family"]
    assert df["ts"].dtype == np.int64 and df["dur"].dtype == np.int64
    assert df["rank"].dtype == np.int32
    assert isinstance(df["kind"].dtype, pd.CategoricalDtype)
    steps = df[df["name"] == "ProfilerStep#10"].sort_values("rank")
    assert steps["rank"].tolist() == list(range(8))
    assert steps["dur"].tolist() == [us * 1000 for us in DLRM_STEP_US]
    sizes = df.groupby("rank").size().tolist()
    assert sizes == [hi - lo for lo, hi in map(dlrm.rank_slice, range(8))]
    host = df["kind"].isin(["cpu_op", "annotation", "python", "runtime"])
    assert (df.loc[host, "device"] == -1).all() and (df.loc[host, "stream"] == -1).all()


def test_list_of_files_and_rank_precedence(tmp_path: Path, traces: Path) -> None:
    k = traces / "dlrm_8xv100" / "kineto"
    ts = traincast.load([k / "rank-3.pt.trace.json.gz", k / "rank-5.pt.trace.json.gz"])
    assert ts.rank_ids == [3, 5] and ts.world_size == 8
    assert ts.iterations.column("dur").to_pylist() == [DLRM_STEP_US[3] * 1000,
                                                        DLRM_STEP_US[5] * 1000]
    # distributedInfo wins over the file name
    shutil.copy(k / "rank-3.pt.trace.json.gz", tmp_path / "rank-5.json.gz")
    assert traincast.load(tmp_path).rank_ids == [3]


# ----------------------------------------------------------------------------- HTA A100, NCCL


def test_a100_collectives_from_record_param_comms(a100: TraceSet, traces: Path) -> None:
    assert a100.rank_ids == [0] and a100.world_size == 2
    c = a100.collectives.to_pandas().sort_values("event")
    assert len(c) == 21
    assert c["collective"].value_counts().to_dict() == {"all_reduce": 15, "broadcast": 6}
    assert set(c["process_group"]) == {"0"}
    assert set(c["dtype"]) == {"Float", "Long"}
    assert (c["group_size"] == 2).all()
    assert set(a100.group_ranks()) == {(0, 1)}
    assert (c["kernel_event"] >= 0).all()
    assert c["seq"].tolist() == list(range(21))
    # independent: the record_param_comms ops in time order, without the 'wait' records
    doc = _doc(traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz")
    rpc = sorted((e for e in doc["traceEvents"] if e.get("name") == "record_param_comms"
                  and e["args"]["Collective name"] != "wait"), key=lambda e: e["ts"])
    assert len(rpc) == 21
    want = [e["args"]["In msg nelems"] * DTYPE_BYTES[e["args"]["dtype"]] for e in rpc]
    assert c["in_bytes"].tolist() == want
    assert c["out_bytes"].tolist() == [
        e["args"]["Out msg nelems"] * DTYPE_BYTES[e["args"]["dtype"]] for e in rpc]
    assert c["dtype"].tolist() == [e["args"]["dtype"] for e in rpc]
    names = _names(a100)
    kernels = names[c["kernel_event"].to_numpy()]
    for coll, k in zip(c["collective"], kernels, strict=True):
        assert k.startswith({"all_reduce": "ncclKernel_AllReduce",
                             "broadcast": "ncclKernel_Broadcast"}[coll])


def test_a100_iterations(a100: TraceSet) -> None:
    it = a100.iterations.to_pandas()
    assert it["iteration"].tolist() == [4, 5, 6]
    assert np.allclose(it["dur"] / 1000, A100_STEP_US, atol=0.5)
    # the calls of each step belong to it: 7 per step (2 broadcast + 5 all_reduce)
    c = a100.collectives.to_pandas()
    steps = a100.column("iteration")[c["event"].to_numpy()]
    assert sorted(np.unique(steps, return_counts=True)[1].tolist()) == [7, 7, 7]


# ----------------------------------------------------------------------------- demo (gloo)


def test_demo_traces(demo_traces: Path) -> None:
    ts = traincast.load(demo_traces)
    assert ts.rank_ids == [0, 1] and ts.world_size == 2
    it = ts.iterations.to_pandas()
    assert it.groupby("rank")["iteration"].apply(list).to_dict() == {0: [1, 2, 3],
                                                                      1: [1, 2, 3]}
    assert (it["dur"] > 0).all()
    assert {r.backend for r in ts.ranks.values()} == {"gloo"}
    c = ts.collectives.to_pandas()
    ar = c[c["collective"] == "all_reduce"]
    assert len(ar) >= 6
    names, kinds, tid = _names(ts), _kinds(ts), ts.column("tid")
    tss = ts.column("ts")
    assert (ar["kernel_event"] == -1).all()
    assert (ar["issue_event"] >= 0).all()
    assert set(names[ar["event"].to_numpy()]) == {"gloo:all_reduce"}
    assert set(kinds[ar["event"].to_numpy()]) == {"collective"}
    assert set(names[ar["issue_event"].to_numpy()]) == {"c10d::allreduce_"}
    assert set(kinds[ar["issue_event"].to_numpy()]) == {"cpu_op"}
    # gloo runs the call on its own thread, after the training thread enqueued it
    ev, iss = ar["event"].to_numpy(), ar["issue_event"].to_numpy()
    assert np.all(tid[ev] != tid[iss])
    assert np.all(tss[iss] <= tss[ev])
    assert (ar["in_bytes"] > 0).all() and set(ar["dtype"]) == {"float"}
    # both ranks reduce the same buckets in every step (two gloo threads: order may vary)
    step = ts.column("iteration")[ar["event"].to_numpy()]
    ar = ar.assign(step=step)
    per_rank = {r: Counter(map(tuple, g[["step", "in_bytes"]].to_numpy().tolist()))
                for r, g in ar.groupby("rank")}
    assert per_rank[0] == per_rank[1]
    assert {s for s, _ in per_rank[0]} == {1, 2, 3}
    # the execution traces next to the Kineto traces are attached
    assert {r: info.et_path.name for r, info in ts.ranks.items()} == {
        0: "rank-0.et.json.gz", 1: "rank-1.et.json.gz"}


# ----------------------------------------------------------------------------- ranks


def test_rank_from_file_name(tmp_path: Path, traces: Path) -> None:
    src = traces / "hta" / "edge" / "no_distributed_info.json.gz"
    shutil.copy(src, tmp_path / "worker3.json.gz")
    ts = traincast.load(tmp_path)
    assert ts.rank_ids == [3]
    assert set(ts.column("rank").tolist()) == {3}
    assert ts.ranks[3].world_size is None


def test_single_file_without_rank_is_rank_0(traces: Path) -> None:
    ts = traincast.load(traces / "hta" / "edge" / "no_distributed_info.json.gz")
    assert ts.rank_ids == [0]
    assert ts.iterations.column("iteration").to_pylist() == [1009]


def test_rank_map(tmp_path: Path, traces: Path) -> None:
    src = traces / "hta" / "edge" / "no_distributed_info.json.gz"
    shutil.copy(src, tmp_path / "a.json.gz")
    shutil.copy(src, tmp_path / "b.json.gz")
    ts = traincast.load(tmp_path, rank_map={"a.json.gz": 1, "b.json.gz": 0})
    assert ts.rank_ids == [0, 1]
    assert ts.ranks[1].path.name == "a.json.gz" and ts.ranks[0].path.name == "b.json.gz"


# ----------------------------------------------------------------------------- iterations


def _step_trace(path: Path, *, marker_names: list[str]) -> Path:
    """Three host steps at 100, 300, 500 µs (100 µs each), an op before them and a kernel
    launched in the second step that runs after it ends."""
    ev: list[dict] = []
    for name, start in zip(marker_names, (100, 300, 500), strict=True):
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1,
                   "ts": start, "dur": 100})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                   "ts": start + 10, "dur": 50})
    ev += [
        {"ph": "X", "cat": "cpu_op", "name": "setup", "pid": 1, "tid": 1, "ts": 50, "dur": 10},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 350, "dur": 5, "args": {"correlation": 42}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 420, "dur": 30,
         "args": {"device": 0, "stream": 7, "correlation": 42}},
    ]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_iteration_marker_regex_with_step_number(tmp_path: Path) -> None:
    path = _step_trace(tmp_path / "t.json", marker_names=["train_step 7", "train_step 8",
                                                            "train_step 9"])
    ts = traincast.load(path, iteration_marker=r"^train_step (\d+)$")
    it = ts.iterations.to_pandas()
    assert it["iteration"].tolist() == [7, 8, 9]
    assert it["start"].tolist() == [100_000, 300_000, 500_000]
    assert it["dur"].tolist() == [100_000] * 3
    assert ts.warnings == []
    df = ts.to_pandas()
    by_name = df.groupby("name", observed=True)["iteration"].apply(list).to_dict()
    assert by_name["aten::mm"] == [7, 8, 9]
    assert by_name["setup"] == [-1]
    assert by_name["cudaLaunchKernel"] == [8]
    assert by_name["gemm"] == [8]  # starts at 420 µs, after step 8 ended: follows its launch


def test_iteration_marker_exact_name(tmp_path: Path) -> None:
    path = _step_trace(tmp_path / "t.json", marker_names=["step", "step", "step"])
    ts = traincast.load(path, iteration_marker="step")
    assert ts.iterations.column("iteration").to_pylist() == [0, 1, 2]
    path = _step_trace(tmp_path / "u.json", marker_names=["a 1", "a 2", "a 3"])
    ts = traincast.load(path, iteration_marker="a 2")
    assert ts.iterations.column("start").to_pylist() == [300_000]


def test_no_step_markers_is_one_iteration_with_a_warning(tmp_path: Path) -> None:
    path = _step_trace(tmp_path / "t.json", marker_names=["x", "y", "z"])
    with pytest.warns(TraincastWarning, match="no ProfilerStep#N markers"):
        ts = traincast.load(path)
    it = ts.iterations.to_pandas()
    assert len(it) == 1
    row = it.iloc[0]
    assert (row["iteration"], row["start"], row["end"], row["marker_event"]) == (
        0, 50_000, 600_000, -1)
    assert set(ts.column("iteration").tolist()) == {0}
    assert len(ts.warnings) == 1 and "t.json" in ts.warnings[0]


def test_iteration_marker_on_real_cpu_only_trace(traces: Path) -> None:
    path = traces / "hta" / "edge" / "cpu_only_rank34.json.gz"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ProfilerStep#551 is there: no guess, no warning
        ts = traincast.load(path)
    assert ts.rank_ids == [34] and ts.world_size == 300
    assert ts.iterations.column("iteration").to_pylist() == [551]
    assert set(ts.column("device").tolist()) == {-1}
    doc = _doc(path)
    want = sorted(int(e["dur"] * 1000) for e in doc["traceEvents"]
                  if e.get("name") == "gloo:all_reduce")
    ts = traincast.load(path, iteration_marker="gloo:all_reduce")
    it = ts.iterations.to_pandas()
    assert it["iteration"].tolist() == list(range(10))
    assert sorted(it["dur"].tolist()) == want


def test_iteration_marker_that_matches_nothing(tmp_path: Path) -> None:
    path = _step_trace(tmp_path / "t.json", marker_names=["x", "y", "z"])
    with pytest.raises(IterationError, match="t.json"):
        traincast.load(path, iteration_marker="no such step")
    with pytest.raises(IterationError, match="regex"):
        traincast.load(path, iteration_marker="(unclosed")


def test_member_lists_from_args_and_cache(a100: TraceSet, traces: Path, tmp_path: Path
                                          ) -> None:
    """Every call of a process group lists its members (``Process Group Ranks``): the
    collectives reference one stored list per distinct member list (not one per call and
    rank), equal after the whole-job cache round trip, and the reader keeps them per call."""
    import pyarrow as pa

    from traincast.trace.load import _read_file
    from traincast.trace.schema import COLLECTIVES_SCHEMA, MEMBER_LISTS_SCHEMA

    assert a100.collectives.schema.equals(COLLECTIVES_SCHEMA)
    assert a100.member_lists.schema.equals(MEMBER_LISTS_SCHEMA)
    assert a100.member_lists.column("ranks").to_pylist() == [[0, 1]]
    assert set(a100.collectives.column("members").to_pylist()) == {0}
    assert a100.group_ranks([0, 3]) == [(0, 1), (0, 1)]
    f = traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz"
    local, = _read_file((str(f), 1 << 33))
    members = local.comm_args.column("pg_ranks").to_pylist()
    assert members and all(m == [0, 1] for m in members if m)
    for _ in range(2):  # parsed, then from the whole-job cache entry
        again = traincast.load(traces / "hta" / "a100_2rank_nccl", cache=tmp_path)
        assert again.member_lists.equals(a100.member_lists)
        assert again.collectives.equals(a100.collectives)
        assert again.collectives.filter(pa.array([False] * 21)).to_pandas().empty
    bad = dataclasses.replace(a100, member_lists=None)
    with pytest.raises(CollectiveMismatchError, match="missing member list"):
        bad.group_ranks()


@pytest.mark.parametrize("enabled", [True, False])
def test_cycle_collection_off_during_a_load_only(traces: Path, enabled: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """No cyclic collection runs while a load does; the caller's setting is restored,
    after an error too."""
    import gc

    from traincast.trace import load as load_mod

    seen: list[bool] = []
    real = load_mod._load

    def spy(*args: Any, **kwargs: Any) -> TraceSet:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(load_mod, "_load", spy)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        traincast.load(traces / "dlrm_8xv100" / "kineto" / "rank-0.pt.trace.json.gz",
                       cache=False)
        assert gc.isenabled() is enabled
        with pytest.raises(traincast.errors.EmptyTraceDirError):
            traincast.load(traces / "no such folder", cache=False)
        assert gc.isenabled() is enabled and seen == [False, False]
    finally:
        (gc.enable if was else gc.disable)()
