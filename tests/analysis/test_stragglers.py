"""Stragglers: lateness at collectives, blame, and the straggler report."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis.stragglers import (
    FLAG_KINDS,
    LATENESS_COLUMNS,
    collective_lateness,
    robust_z,
    straggler_report,
)
from traincast.errors import ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from synth_trace import Trace  # noqa: E402

MS = 1_000_000
LONG_RANKS = [1, 3, 4, 5]
SHORT_RANKS = [0, 2, 6, 7]


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def dlrm_lat(dlrm) -> pd.DataFrame:
    return collective_lateness(dlrm)


@pytest.fixture(scope="module")
def dlrm_rep(dlrm) -> dict[str, pd.DataFrame]:
    return straggler_report(dlrm)


def test_robust_z() -> None:
    z = robust_z(np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
    # median 3, MAD 1 -> scale 1.4826
    assert z[-1] == pytest.approx(97 / 1.4826)
    assert robust_z(np.array([5.0, 5.0, 5.0])).tolist() == [0.0, 0.0, 0.0]
    # MAD 0: mean absolute deviation fallback
    z = robust_z(np.array([0.0, 0.0, 0.0, 0.0, 10.0]))
    assert z[-1] == pytest.approx(10 / (1.2533 * 2.0))


def test_dlrm_lateness_table(dlrm, dlrm_lat: pd.DataFrame) -> None:
    lat = dlrm_lat
    assert list(lat.columns) == LATENESS_COLUMNS
    assert len(lat) == 64 and lat["group_id"].nunique() == 8
    assert (lat.groupby("group_id")["rank"].apply(sorted).map(tuple) == tuple(range(8))).all()
    assert (lat["lateness_ns"] >= 0).all() and (lat["wait_ns"] >= 0).all()
    # lateness + wait = last arrival - first arrival, the same for every member
    spread = lat["lateness_ns"] + lat["wait_ns"]
    assert (spread.groupby(lat["group_id"]).nunique() == 1).all()
    assert (lat.groupby("group_id")["lateness_ns"].min() == 0).all()
    assert (lat.groupby("group_id")["wait_ns"].min() == 0).all()
    # independent check on the raw clocks (one host: the alignment shifts by a few µs only)
    ev = dlrm.events.to_pandas()
    coll = dlrm.collectives.to_pandas()
    raw = coll.assign(arr=ev["ts"].to_numpy()[coll["kernel_event"].to_numpy()])
    raw = raw.merge(lat[["rank", "exec_event", "group_id", "lateness_ns"]],
                    left_on=["rank", "kernel_event"], right_on=["rank", "exec_event"])
    raw_late = raw["arr"] - raw.groupby("group_id")["arr"].transform("min")
    assert (raw_late - raw["lateness_ns"]).abs().max() < 10_000
    kinds = lat.groupby("group_id")["collective"].first()
    assert kinds.tolist().count("all_to_all") == 5 and kinds.tolist().count("all_reduce") == 3
    # blame only for late ranks
    first = lat["lateness_ns"] == 0
    assert (lat.loc[first, "blamed_event"] == -1).all()
    assert (lat["blamed_excess_ns"] >= 0).all()


def test_dlrm_long_steps_wait_at_first_all_to_all(dlrm, dlrm_lat, dlrm_rep) -> None:
    """The DLRM finding (8 ranks, ProfilerStep#10).

    Step times 14.5, 19.9, 13.0, 19.3, 18.0, 17.8, 13.1, 12.5 ms. Ranks 1, 3, 4, 5 start the
    step earlier (their previous, unprofiled step ended earlier) and then wait 4.7-7.6 ms in
    the first all_to_all for ranks 7, 6, 2 and 0, which enter the step up to 7.5 ms later and
    arrive last. The work before the all_to_all takes about the same time everywhere
    (3.0-3.9 ms), and all steps end within 1 ms of each other.
    """
    lat, rep = dlrm_lat, dlrm_rep
    g0 = lat[lat["group_id"] == lat["group_id"].min()].set_index("rank")
    assert (g0["collective"] == "all_to_all").all() and (g0["seq"] == 0).all()
    # who waits longest there: exactly the long-step ranks, the longest first
    waits = g0["wait_ns"].sort_values(ascending=False)
    assert waits.index[:4].tolist() == [1, 3, 4, 5]
    assert waits.loc[LONG_RANKS].min() > 4.5 * MS and waits.loc[SHORT_RANKS].max() < 2.2 * MS
    # who is late there: the short-step ranks, rank 7 last, because they entered the step late
    late = g0["lateness_ns"].sort_values(ascending=False)
    assert late.index[:4].tolist() == [7, 6, 2, 0]
    assert (g0["last_rank"] == 7).all() and late.loc[7] > 7.5 * MS
    for r in SHORT_RANKS:
        assert g0.loc[r, "blamed_name"] == "<start of iteration 10>"
        assert g0.loc[r, "blamed_excess_ns"] >= 0.95 * g0.loc[r, "lateness_ns"]
        marker = dlrm.iterations.to_pandas().set_index("rank").loc[r, "marker_event"]
        assert g0.loc[r, "blamed_event"] == marker
    # that wait is the step-time spread: step minus that wait varies by < 1 ms across ranks
    steps = dlrm.iterations.to_pandas().set_index("rank")["dur"]
    rest = steps - g0["wait_ns"]
    assert steps.max() - steps.min() > 7 * MS and rest.max() - rest.min() < 1 * MS

    ranks = rep["ranks"].set_index("rank")
    assert ranks["step_ns"].tolist() == [14455000, 19901000, 13017000, 19313000, 17979000,
                                         17797000, 13091000, 12509000]
    assert (ranks.loc[LONG_RANKS, "top_wait_collective"] == "all_to_all").all()
    assert (ranks.loc[LONG_RANKS, "top_wait_group"] == g0["group_id"].iloc[0]).all()
    assert (ranks.loc[LONG_RANKS, "top_wait_for"] == 7).all()
    assert (ranks.loc[LONG_RANKS, "step_vs_median"] > 1.05).all()
    assert (ranks.loc[SHORT_RANKS, "step_vs_median"] < 0.95).all()
    # rank 7 keeps the others waiting longest
    assert ranks["waited_for_ns"].idxmax() == 7
    assert ranks["last_share"].idxmax() == 7

    flags = rep["flags"]
    long_ = flags[flags["kind"] == "long_step"].set_index("rank")
    assert sorted(long_.index) == LONG_RANKS
    assert (long_["cause"] == "waiting").all()
    assert (long_["collective"] == "all_to_all").all()
    for r in LONG_RANKS:
        ev = long_.loc[r, "evidence"]
        assert "all_to_all" in ev and "waiting for rank 7" in ev and "long because it waits" in ev
    late_f = flags[(flags["kind"] == "late_at_collective")
                   & (flags["group_id"] == g0["group_id"].iloc[0])]
    assert set(late_f["rank"]) >= set(SHORT_RANKS)
    worst = late_f.set_index("rank").loc[7]
    assert worst["cause"] == "<start of iteration 10>" and worst["score"] > 3.5
    assert "arrived 7.62 ms after rank 1" in worst["evidence"]


def test_dlrm_imbalance(dlrm_rep) -> None:
    imb = dlrm_rep["imbalance"]
    assert len(imb) == 1
    row = imb.iloc[0]
    assert row["iteration"] == 10 and row["ranks"] == 8
    steps = np.array([14455000, 19901000, 13017000, 19313000, 17979000, 17797000, 13091000,
                      12509000])
    assert row["max_step_ns"] == steps.max() and row["slowest_rank"] == 1
    assert row["max_mean_ratio"] == pytest.approx(steps.max() / round(steps.mean()))
    assert row["compute_min_ns"] <= row["compute_median_ns"] <= row["compute_max_ns"]
    flags = dlrm_rep["flags"]
    assert set(flags["kind"]) <= set(FLAG_KINDS)
    assert list(flags.columns) == ["rank", "iteration", "kind", "score", "value_ns", "group_id",
                                   "collective", "cause", "evidence"]
    assert flags["evidence"].map(lambda s: "\n" not in s and len(s) > 20).all()


def _synthetic(folder: Path, slow_rank: int, slow_call: int, extra_us: float,
               growing: bool = False) -> Path:
    """3 ranks, one step, 4 all_reduces; before each, an ``aten::mm`` (100 µs) launching a
    GEMM. On ``slow_rank`` the mm before call ``slow_call`` takes ``extra_us`` longer. All
    NCCL kernels of a call end together at 1000 k + 800 µs. ``growing``: the mm before call
    ``k`` takes 100 (k + 1) µs on every rank (the same op name, four different costs)."""
    for rank in range(3):
        t = Trace(rank=rank, world_size=3, pid=100 + rank)
        t.step(1, 0, 4000)
        for k in range(4):
            base = 1000 * k
            d = 100 * (k + 1 if growing else 1) + (
                extra_us if (rank, k) == (slow_rank, slow_call) else 0)
            t.host("aten::mm", base + 10, d)
            t.launch("volta_sgemm_128x64_nn", base + 20, 5, base + 30, 50)
            t0 = base + 10 + d + 10
            t.host("record_param_comms", t0, 30, **{
                "Collective name": "allreduce", "Process Group Name": "0",
                "Process Group Ranks": "[0, 1, 2]", "In msg nelems": 1024,
                "Out msg nelems": 1024, "dtype": "Float", "Group size": 3})
            t.host("nccl:all_reduce", t0 + 5, 20, cat="user_annotation")
            t.launch("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", t0 + 10, 5,
                     t0 + 20, base + 800 - (t0 + 20), stream=13)
        t.write(folder)
    return folder


def test_blame_names_the_slow_op(tmp_path: Path) -> None:
    ts = traincast.load(_synthetic(tmp_path, slow_rank=2, slow_call=2, extra_us=300))
    lat = collective_lateness(ts)
    assert len(lat) == 12
    row = lat[(lat["rank"] == 2) & (lat["seq"] == 2)].iloc[0]
    assert row["lateness_ns"] == 300_000 and row["wait_ns"] == 0
    assert row["blamed_name"] == "aten::mm" and row["blamed_kind"] == "cpu_op"
    assert row["blamed_excess_ns"] == 300_000
    assert ts.column("dur")[row["blamed_event"]] == 400_000
    others = lat[(lat["seq"] == 2) & (lat["rank"] != 2)]
    assert (others["wait_ns"] == 300_000).all() and (others["last_rank"] == 2).all()
    # every other call: all ranks arrive together
    assert (lat.loc[lat["seq"] != 2, "lateness_ns"] == 0).all()
    rep = straggler_report(ts)
    late = rep["flags"][rep["flags"]["kind"] == "late_at_collective"]
    assert late[["rank", "group_id", "cause"]].values.tolist() == [
        [2, int(row["group_id"]), "aten::mm"]]
    assert "blamed: aten::mm (cpu_op), excess +0.30 ms = 100% of the lateness" in \
        late["evidence"].iloc[0]
    ranks = rep["ranks"].set_index("rank")
    assert ranks.loc[2, "waited_for_ns"] == 600_000 and ranks.loc[2, "last_share"] == 0.25
    assert ranks.loc[0, "wait_ns"] == 300_000


def test_blame_compares_an_op_with_the_same_occurrence(tmp_path: Path) -> None:
    # the k-th aten::mm of the step is compared with the k-th on the other ranks (its
    # occurrence), not with every aten::mm of the step: the 50 µs extra is the excess
    ts = traincast.load(_synthetic(tmp_path, slow_rank=1, slow_call=2, extra_us=50,
                                   growing=True))
    row = collective_lateness(ts).set_index(["rank", "seq"]).loc[(1, 2)]
    assert row["lateness_ns"] == 50_000
    assert row["blamed_name"] == "aten::mm" and row["blamed_excess_ns"] == 50_000
    assert ts.column("dur")[row["blamed_event"]] == 350_000


def test_blame_late_step_start(tmp_path: Path) -> None:
    # no slow op, but rank 1's step starts 200 µs late: the window start is blamed
    for rank in range(3):
        t = Trace(rank=rank, world_size=3, pid=100 + rank)
        s = 200 if rank == 1 else 0
        t.step(1, s, 1000 - s)
        t.host("aten::mm", s + 10, 100)
        t0 = s + 120
        t.host("nccl:all_reduce", t0, 20, cat="user_annotation")
        t.launch("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", t0 + 5, 5, t0 + 15,
                 900 - (t0 + 15), stream=13)
        t.write(tmp_path)
    lat = collective_lateness(traincast.load(tmp_path)).set_index("rank")
    assert lat.loc[1, "lateness_ns"] == 200_000
    assert lat.loc[1, "blamed_name"] == "<start of iteration 1>"
    assert lat.loc[1, "blamed_kind"] == "window" and lat.loc[1, "blamed_excess_ns"] == 200_000


def test_parameters(dlrm) -> None:
    for bad in ({"z_threshold": 0}, {"z_threshold": -1}, {"rel_threshold": -0.1},
                {"min_late_fraction": float("nan")}, {"z_threshold": "x"}):
        with pytest.raises(ParameterError):
            straggler_report(dlrm, **bad)
    # stricter thresholds give fewer findings
    loose = straggler_report(dlrm)["flags"]
    strict = straggler_report(dlrm, z_threshold=50, rel_threshold=0.15,
                              min_late_fraction=0.2)["flags"]
    assert len(strict) < len(loose)
    assert set(strict.loc[strict["kind"] == "long_step", "rank"]) == {1, 3}


def test_single_rank_trace_is_fast_and_honest(traces: Path) -> None:
    ts = traincast.load(traces / "hta" / "v100_2rank_allreduce" / "rank-1.json.gz")
    t = time.perf_counter()
    lat = collective_lateness(ts)
    rep = straggler_report(ts)
    elapsed = time.perf_counter() - t
    assert lat.empty and list(lat.columns) == LATENESS_COLUMNS  # rank 0's trace is absent
    ranks = rep["ranks"]
    assert ranks["rank"].tolist() == [1] and ranks["collectives"].tolist() == [0]
    long_ = rep["flags"][rep["flags"]["kind"] == "long_step"]
    # steps 345.8, 365.3, 346.1, 344.3, 336.3 ms: step 3 is 5.6% over the median
    assert long_["iteration"].tolist() == [3] and long_["cause"].tolist() == ["unknown"]
    assert long_["score"].iloc[0] > 3.5
    assert elapsed < 5.0, elapsed


def test_predicted_timeline(dlrm, dlrm_lat) -> None:
    # the replay keeps the collectives: lateness and the finding carry over within µs
    pred = traincast.predict(dlrm)
    lat = collective_lateness(pred.timeline)
    m = dlrm_lat.merge(lat, on=["rank", "group_id"], suffixes=("", "_pred"))
    assert len(m) == 64
    assert (m["lateness_ns"] - m["lateness_ns_pred"]).abs().max() < 50_000
    assert (m["wait_ns"] - m["wait_ns_pred"]).abs().max() < 50_000
    rep = straggler_report(pred.timeline)
    long_ = rep["flags"][rep["flags"]["kind"] == "long_step"]
    assert sorted(long_["rank"]) == LONG_RANKS and (long_["cause"] == "waiting").all()


def test_blame_is_the_same_without_packed_keys(dlrm, dlrm_lat, monkeypatch) -> None:
    """The packed-key sorts and groupings of the blame (issue 16) give the table of the
    multi-column sorts they replace (the path taken when keys would not fit 62 bits)."""
    from traincast.analysis.stragglers import lateness as S

    monkeypatch.setattr(S, "_pack", lambda cols: None)
    pd.testing.assert_frame_equal(collective_lateness(dlrm), dlrm_lat)
    assert (dlrm_lat["blamed_event"] >= 0).any()


def test_blame_is_the_same_with_the_sorted_occurrences(dlrm, dlrm_lat, monkeypatch) -> None:
    """Occurrences counted in row order (the rows of a reader are in time order per rank)
    give the table of the stable sort by (rank, op, start) they replace; the sort is the
    path without the kernel, and the path for rows out of time order."""
    from traincast.analysis.stragglers import lateness as S

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the kernel, however few the rows
    compiled = collective_lateness(dlrm)
    monkeypatch.setattr(S, "_OCC", [None])
    pd.testing.assert_frame_equal(collective_lateness(dlrm), compiled)
    pd.testing.assert_frame_equal(compiled, dlrm_lat)


def test_occurrences_in_row_order_match_the_sort(monkeypatch) -> None:
    from traincast.analysis.stragglers import lateness as S

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the kernel, however few the rows

    if S._occurrences_in_row_order(np.zeros(1, np.int64), np.zeros(1, np.int32),
                                   np.zeros(1, np.int64)) is None:
        pytest.skip("numba kernel unavailable")
    rng = np.random.default_rng(3)
    n = 5000
    rank = np.sort(rng.integers(0, 6, n)).astype(np.int32)
    t0 = np.concatenate([np.sort(rng.integers(0, 300, int((rank == r).sum())))
                         for r in range(6)]).astype(np.int64)  # ties included
    it = rng.integers(0, 3, n)
    kind = rng.integers(0, 4, n).astype(np.int32)
    name = rng.integers(0, 7, n).astype(np.int32)
    crow = np.arange(n)
    op_key = S._pack([it, kind, name])
    fast = S._occurrences_in_row_order(op_key, rank, t0)
    _, _, by_sort = S._occurrences_by_sort(crow, op_key, rank, it, kind, name, t0)
    assert fast is not None and np.array_equal(fast, by_sort)
    # out of time order within a rank, or ranks interleaved: no row-order shortcut
    i = int(np.flatnonzero((t0[1:] > t0[:-1]) & (rank[1:] == rank[:-1]))[0])
    t_bad = t0.copy()
    t_bad[i] = t0[i + 1] + 1  # row i now starts after row i + 1 of the same rank
    assert S._occurrences_in_row_order(op_key, rank, t_bad) is None
    assert S._occurrences_in_row_order(op_key, rank[::-1].copy(), t0) is None


def test_median_missing_zero_kernel_matches_numpy(monkeypatch) -> None:
    """The compiled medians (order statistics by partition) equal the numpy path's."""
    from traincast.analysis.stragglers import lateness as S

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the kernel, however few the rows

    if S._median_kernel() is None:
        pytest.skip("numba kernel unavailable")
    rng = np.random.default_rng(7)
    for trial in range(100):
        nk = int(rng.integers(1, 40))
        kid = rng.integers(0, nk, int(rng.integers(1, 300))).astype(np.int64)
        size_k = np.maximum(rng.integers(1, 25, nk), np.bincount(kid, minlength=nk))
        dur = (rng.choice([0.0, 1.0, 2.0, 5.0, 9.5], kid.size) if trial % 2
               else rng.random(kid.size) * 1e3)
        compiled = S._median_missing_zero(kid, dur, size_k[kid])
        monkeypatch.setattr(S, "_MEDIAN", [None])
        plain = S._median_missing_zero(kid, dur, size_k[kid])
        monkeypatch.setattr(S, "_MEDIAN", [])
        assert np.array_equal(compiled, plain), trial


def test_stragglers_beside_a_replay_leave_its_times(dlrm, monkeypatch) -> None:  # noqa: ANN001
    """With a replay beside it (its times held in half their pages while the stragglers'
    analysis runs: compiled paths forced), the tables are those without one and the
    replay's times come back the same integers."""
    pytest.importorskip("numba")
    from traincast.simulate import scaled

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    advised = []
    monkeypatch.setattr(scaled, "advise_away", lambda r: advised.append(r) or 0)
    pred = traincast.predict(dlrm)
    times = pred.result.times
    before = times.copy()
    got = traincast.analyze(dlrm, "stragglers", prediction=pred)
    want = traincast.analyze(dlrm, "stragglers")
    assert pred.result.times is times
    assert advised  # held in half, the other half's pages given back
    np.testing.assert_array_equal(times, before)
    assert got.keys() == want.keys()
    for k in got:
        pd.testing.assert_frame_equal(got[k], want[k])


@pytest.mark.parametrize("ops", [np.int32, np.uint8])
def test_narrow_op_codes_equal_the_wide(dlrm, dlrm_lat, monkeypatch, ops) -> None:  # noqa: ANN001
    """The compiled blame with its codes and occurrences in uint16 (the default), in int32,
    or in a type too narrow for them (uint8: the pass done again in int32) gives the same
    table."""
    pytest.importorskip("numba")
    from traincast.analysis.stragglers import compiled
    from traincast.analysis.stragglers import lateness as L

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    types = []

    def spy(*a, **k):  # noqa: ANN002, ANN003, ANN202
        got = compiled.candidate_ops(*a, **k)
        types.append(None if got is None else (got[0].dtype, got[2].dtype))
        return got

    monkeypatch.setattr(L, "candidate_ops", spy)
    default = collective_lateness(dlrm)
    assert types[-1] == (np.dtype(compiled.OPS_TYPE),) * 2
    monkeypatch.setattr(compiled, "OPS_TYPE", ops)
    got = collective_lateness(dlrm)
    assert types[-1] == (np.dtype(np.int32),) * 2  # uint8 holds too few: int32
    pd.testing.assert_frame_equal(got, default)
    pd.testing.assert_frame_equal(got, dlrm_lat)
