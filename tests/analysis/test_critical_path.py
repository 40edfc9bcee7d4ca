"""Multi-rank critical path: HTA agreement, cross-rank walks, exact sums, Perfetto overlay."""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis.critical_path import ANCHOR, critical_path, thread_parents
from traincast.errors import OutputError, ParameterError
from traincast.export.chrome_path import CRITICAL_CNAME, write_critical_path_trace
from traincast.graph.model import EdgeKind
from traincast.simulate.engine import simulate
from traincast.simulate.replay import Replay
from traincast.trace.load import TraincastWarning
from traincast.trace.schema import DEVICE_KINDS
from traincast.trace.traceset import TraceSet
from traincast.whatif.scale import scale_durations, select_events

US = 1000


def _synth_module():
    """tests/graph/synth_trace.py (the hand-built Kineto trace builder), without packages."""
    path = Path(__file__).resolve().parents[1] / "graph" / "synth_trace.py"
    spec = importlib.util.spec_from_file_location("_cp_synth_trace", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _two_rank_allreduce(folder: Path, late_compute_us: float = 300.0) -> Path:
    """The 2-rank all_reduce of tests/graph/synth_trace.py (rank 1's GEMM is late)."""
    return _synth_module().two_rank_allreduce(folder, late_compute_us)


def _with_lags(pred: Replay, lags: np.ndarray) -> Replay:
    g = pred.graph.copy()
    g.lag[:] = lags
    return Replay(pred.measured, g, simulate(g))


def _check_exact_sum(cp) -> None:
    p = cp.path
    assert int(p["dur_ns"].sum()) == cp.duration_ns == cp.end_ns - cp.start_ns
    assert (p["dur_ns"] >= 0).all()
    assert p["order"].tolist() == list(range(len(p)))
    # contiguous in time: each segment starts where the previous one ended
    assert (p["start_ns"].to_numpy()[1:] == p["end_ns"].to_numpy()[:-1]).all()
    assert int(p["start_ns"].iat[0]) == cp.start_ns and int(p["end_ns"].iat[-1]) == cp.end_ns
    for tbl in (cp.by_family, cp.by_rank, cp.by_kind):
        assert int(tbl["time_ns"].sum()) == cp.duration_ns
        assert tbl["share_pct"].sum() == pytest.approx(100.0)


# --- 3. hand-built 2-rank case with a known answer ------------------------------------


@pytest.mark.parametrize("exact", [False, True])
def test_path_goes_through_late_ranks_compute(tmp_path: Path, exact: bool) -> None:
    ts = traincast.load(_two_rank_allreduce(tmp_path))
    pred = traincast.predict(ts, exact=exact)
    cp = critical_path(pred)
    # both steps are 390 µs; ties go to the lowest rank
    assert (cp.rank, cp.iteration, cp.duration_ns) == (0, 1, 390 * US)
    _check_exact_sum(cp)
    assert cp.reached_start
    p = cp.path
    assert set(p["rank"]) == {0, 1}
    gemm = p[(p["edge_kind"] == "EXEC") & (p["op_family"] == "gemm")]
    assert gemm["rank"].tolist() == [1] and gemm["dur_ns"].tolist() == [300 * US]
    assert "volta_sgemm" in gemm["name"].iat[0]
    # the path crosses from rank 1 to rank 0 at the collective: the transfer (50 µs) after
    # rank 1's arrival, then rank 0's sync wake-up and its CPU tail
    coll = p[p["edge_kind"] == "COLLECTIVE"]
    assert len(coll) == 1 and coll["rank"].iat[0] == 0 and coll["dur_ns"].iat[0] == 50 * US
    i = int(coll.index[0])
    assert (p["rank"].iloc[:i] == 1).all() and (p["rank"].iloc[i:] == 0).all()
    assert p["edge_kind"].iloc[i + 1] == "SYNC"
    assert cp.by_rank.set_index("rank")["time_ns"].to_dict() == {1: 320 * US, 0: 70 * US}
    fam = cp.by_family.set_index("family")["time_ns"]
    assert fam["gemm"] == 300 * US and fam["comm"] == 50 * US


def test_rank_that_arrived_last_keeps_its_own_path(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank_allreduce(tmp_path))
    cp = critical_path(traincast.predict(ts), rank=1)
    _check_exact_sum(cp)
    assert set(cp.path["rank"]) == {1}
    assert "COLLECTIVE" not in set(cp.path["edge_kind"])
    assert (cp.path["edge_kind"] == "EXEC").sum() == 2  # the GEMM, then the transfer


def test_path_follows_the_new_straggler_after_a_what_if(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank_allreduce(tmp_path))
    pred = traincast.predict(ts)
    # rank 1's GEMM 6x faster (50 µs): rank 0 (100 µs GEMM) now arrives last
    lags = scale_durations(pred.graph, select_events(ts, op_family="gemm", rank=1), 1 / 6)
    cp = critical_path(_with_lags(pred, lags), rank=1)
    _check_exact_sum(cp)
    p = cp.path
    gemm = p[(p["edge_kind"] == "EXEC") & (p["op_family"] == "gemm")]
    assert gemm["rank"].tolist() == [0] and gemm["dur_ns"].tolist() == [100 * US]
    assert p.loc[p["edge_kind"] == "COLLECTIVE", "rank"].tolist() == [1]


def test_thread_segments_belong_to_the_innermost_open_event(tmp_path: Path) -> None:
    synth = _synth_module()
    t = synth.Trace()
    t.step(1, 0, 200)
    t.host("aten::linear", 10, 100)
    t.host("aten::t", 20, 10)
    t.host("aten::addmm", 40, 50)
    t.host("aten::relu", 150, 30)
    ts = traincast.load(t.write(tmp_path))
    pred = traincast.predict(ts)
    cp = critical_path(pred)
    _check_exact_sum(cp)
    p = cp.path
    seg = list(zip(p["name"], p["start_ns"] // US, p["end_ns"] // US, p["category"],
                   strict=True))
    assert seg == [
        ("ProfilerStep#1", 0, 10, "host_untraced"),
        ("aten::linear", 10, 20, "gemm"), ("aten::t", 20, 30, "other"),
        ("aten::linear", 30, 40, "gemm"),  # between two children: the parent's self time
        ("aten::addmm", 40, 90, "gemm"), ("aten::linear", 90, 110, "gemm"),
        ("ProfilerStep#1", 110, 150, "host_untraced"), ("aten::relu", 150, 180, "elementwise"),
        ("ProfilerStep#1", 180, 200, "host_untraced"),
    ]
    assert set(p["edge_kind"]) == {"THREAD"}
    parents = thread_parents(pred.graph)
    names = ts.events.column("name").to_pylist()
    par = {names[i]: (names[parents[i]] if parents[i] >= 0 else None)
           for i in range(len(names))}
    assert par == {"ProfilerStep#1": None, "aten::linear": "ProfilerStep#1",
                   "aten::t": "aten::linear", "aten::addmm": "aten::linear",
                   "aten::relu": "ProfilerStep#1"}
    # HTA's definition of the events on the path: owners of the path's points
    assert sorted(names[i] for i in cp.point_events) == sorted(names)


def test_bad_iteration_or_rank(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank_allreduce(tmp_path))
    pred = traincast.predict(ts)
    with pytest.raises(ParameterError):
        critical_path(pred, iteration=7)
    with pytest.raises(ParameterError):
        critical_path(pred, rank=5)


# --- 1. agreement with HTA on simple_add ------------------------------------------------


def _hta_marked(path: Path) -> set[tuple[str, int, int]]:
    """(name, ts ns, dur ns) of the X events HTA's overlay marked ``args.critical = 1``."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return {(e["name"], round(e["ts"] * US), round(e["dur"] * US))
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("args", {}).get("critical") == 1}


@pytest.fixture(scope="module")
def simple_add(traces: Path) -> tuple[TraceSet, set[int]]:
    """HTA's simple_add input as a TraceSet, and the rows of the events HTA marked."""
    base = traces / "hta" / "critical_path_simple_add"
    with warnings.catch_warnings():  # "no ProfilerStep#N markers" (also in ts.warnings)
        warnings.simplefilter("ignore", TraincastWarning)
        ts = traincast.load(base / "input.json.gz")
    hta_keys = _hta_marked(base / "expected_overlaid_critical_path.json.gz")
    ev = ts.events.to_pandas()
    keys = list(zip(ev["name"].astype(str), ev["ts"], ev["dur"], strict=True))
    # (name, ts, dur) identifies the events HTA can mark (positive duration, not cuda_sync
    # records, which are graph nodes in neither tool); zero-duration duplicates exist
    can_mark = ((ev["kind"] != "sync") & (ev["dur"] > 0)).to_numpy()
    row_of = {k: i for i, k in enumerate(keys) if can_mark[i]}
    assert len(row_of) == can_mark.sum()
    hta = {row_of[k] for k in hta_keys}
    assert len(hta) == len(hta_keys) == 624
    return ts, hta


def test_agrees_with_hta_on_simple_add(simple_add: tuple[TraceSet, set[int]]) -> None:
    """Our path vs HTA's ``overlay_critical_path_analysis`` output for the same trace.

    Same step: the file has no ``ProfilerStep#N``, so traincast treats it as one iteration,
    and HTA's marked events span the whole file too (its first and last marked events are
    the file's first operator and last ``cudaFree``): HTA was run on the whole trace. We
    replay with ``exact=True`` -- every latency as measured, so the binding edges are the
    ones that bound in the measurement, which is what HTA's graph (measured timestamps) sees.
    The structural replay replaces sync wake-ups and launch latencies by medians, which
    changes which edge binds at three memcpys (see the next test).
    Events are matched by (name, ts, dur); "on the path" means, as in HTA's
    ``critical_path_events_set``, owning a point (start or end) the path passes through.

    HTA marks 624 events. After the principled exclusions, 618 are common.
    Every difference is asserted below, each for a stated reason:

    1. HTA's graph has no node for ``user_annotation`` events nor for zero-duration events
       (``CriticalPathAnalysis.critical_path_analysis`` keeps ``dur > 0`` CPU events,
       ``CPGraph._create_event_nodes`` takes operators and runtime calls). Ours has both on
       the thread chain (82 on the path: annotations and zero-duration runtime calls):
       excluded from the comparison; HTA marks none of them.
    2. The tail (HTA-only: the last six GPU ops, ``ampere_sgemm`` ... ``epilogue`` and a
       memset; ours-only: the 13 host ops that ran while they did, and the final
       ``cudaDeviceSynchronize``). HTA's path is the *heaviest* path where the gaps between
       top-level operators and blocking calls weigh zero; the GPU branch (534 µs of kernels
       and delays from the last launch) outweighs the host's busy time (507 µs up to the
       next ``cudaDeviceSynchronize``), so HTA follows the kernels and a zero-weight sync
       edge, although the kernels had ended 235 µs before the host even called
       ``cudaDeviceSynchronize`` (they had slack; the call did not wait, so traincast adds
       no SYNC edge). Our path is time-tight: the host is what the end waited for. HTA's
       path also stops before the last ``cudaDeviceSynchronize``, a zero-weight extension.
    (A graph-builder bug found by this test put the unexplained start delay of seven
    pageable ``Memcpy HtoD`` copies on their STREAM edge although their launch came after
    the predecessor ended, so the path skipped 43 host events HTA has; fixed in
    ``graph/build.py``: the delay now follows the later of launch and predecessor.)
    """
    ts, hta = simple_add
    ev = ts.events.to_pandas()
    kind = ev["kind"].astype(str).to_numpy()
    dur = ev["dur"].to_numpy()
    start = ev["ts"].to_numpy()
    end = start + dur
    name = ev["name"].astype(str).to_numpy()
    gpu = np.isin(kind, DEVICE_KINDS)

    pred = traincast.predict(ts, exact=True)
    cp = critical_path(pred)
    assert (cp.rank, cp.iteration) == (0, 0) and cp.reached_start
    _check_exact_sum(cp)
    assert cp.duration_ns == int(end.max() - start.min())  # the whole file
    # HTA's marked events span the file too: from its first operator to its last cudaFree
    ops = np.flatnonzero(np.isin(kind, ("cpu_op", "runtime")) & (dur > 0))
    assert min(start[i] for i in hta) == start[ops].min()
    assert max(end[i] for i in hta) == end[ops[name[ops] == "cudaFree"]].max()

    ours_all = set(cp.point_events.tolist())
    # 1. events HTA's graph does not have
    not_in_hta_graph = {i for i in ours_all if kind[i] == "annotation" or dur[i] == 0}
    assert len(not_in_hta_graph) == 82
    assert not hta & {i for i in range(len(kind)) if kind[i] == "annotation" or dur[i] == 0}
    ours = ours_all - not_in_hta_graph
    assert len(ours & hta) == 618

    # 2. the tail
    hta_only, ours_only = hta - ours, ours - hta
    tail_gpu = {i for i in hta_only if gpu[i]}
    assert hta_only == tail_gpu and len(tail_gpu) == 6
    syncs = np.flatnonzero(name == "cudaDeviceSynchronize")
    last_sync = int(syncs[np.argmax(start[syncs])])
    assert last_sync == len(kind) - 1 or end[last_sync] == end.max()
    first_tail = min(start[i] for i in tail_gpu)
    waited_by = int(syncs[start[syncs] > first_tail].min())  # the first sync after them
    slack = start[waited_by] - max(end[i] for i in tail_gpu)
    assert slack == 235 * US  # the kernels ended before the sync was called
    # the sync depends on those kernels (a slower GPU would make it wait), but the edge
    # has slack in the measured run: it did not bind
    g = pred.graph
    into = np.flatnonzero((g.dst == 2 * waited_by + 1) & (g.kind == int(EdgeKind.SYNC)))
    assert into.size
    assert all(g.measured[g.src[e]] + g.exact_lag[e] < g.measured[g.dst[e]] for e in into)
    launch_start = {int(c): s for c, s, k in zip(ev["correlation"], start, kind, strict=True)
                    if k == "runtime" and c >= 0}
    first_launch = min(launch_start[int(ev["correlation"].iat[i])] for i in tail_gpu)
    tail_host = {i for i in ours_only if i != last_sync}
    assert len(tail_host) == 13
    assert all(not gpu[i] and first_launch <= start[i] and end[i] <= start[waited_by]
               for i in tail_host)
    assert last_sync in ours_only and last_sync not in hta
    # the copies whose launch came after their stream predecessor: their delay follows the
    # launch, so no STREAM edge carries a gap on the path
    gaps = cp.path[(cp.path["edge_kind"] == "STREAM") & (cp.path["dur_ns"] > 0)]
    assert len(gaps) == 0


def test_structural_replay_of_simple_add(simple_add: tuple[TraceSet, set[int]]) -> None:
    """The structural replay (median launch and wake-up latencies) of the same trace: the
    same differences as with ``exact=True`` plus four small pageable
    ``Memcpy HtoD`` copies HTA has on its path: with the median wake-up latency the
    ``cudaMemcpyAsync``/``cudaStreamSynchronize`` waiting for each no longer ends exactly when
    the copy allows, so the path stays on the host thread there."""
    ts, hta = simple_add
    ev = ts.events.to_pandas()
    kind = ev["kind"].astype(str).to_numpy()
    dur = ev["dur"].to_numpy()
    pred = traincast.predict(ts)
    cp = critical_path(pred)
    _check_exact_sum(cp)
    assert cp.reached_start
    assert {"THREAD", "EXEC", "LAUNCH", "SYNC"} <= set(cp.path["edge_kind"])
    exact = critical_path(traincast.predict(ts, exact=True))
    fixed = cp

    def comparable(c) -> set[int]:
        return {i for i in c.point_events.tolist() if kind[i] != "annotation" and dur[i] > 0}

    extra = (hta - comparable(fixed)) - (hta - comparable(exact))
    assert len(extra) == 4 and {kind[i] for i in extra} == {"memcpy"}
    assert all(ev["name"].iat[i].startswith("Memcpy HtoD") for i in extra)
    assert comparable(fixed) - hta == comparable(exact) - hta
    assert len(comparable(fixed) & hta) == 614


# --- 2. DLRM, 8 ranks ----------------------------------------------------------------


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.mark.parametrize("exact", [False, True])
def test_dlrm_path_crosses_ranks(dlrm: TraceSet, exact: bool) -> None:
    pred = traincast.predict(dlrm, exact=exact)
    cp = critical_path(pred)
    it = pred.iterations
    # default: the last iteration, the rank with the longest predicted step
    assert cp.iteration == 10
    longest = it.loc[it["predicted_ns"].idxmax()]
    assert cp.rank == int(longest["rank"]) == 1
    assert cp.duration_ns == int(longest["predicted_ns"])
    _check_exact_sum(cp)
    p = cp.path
    assert p["rank"].nunique() > 1
    assert "COLLECTIVE" in set(p["edge_kind"])
    # at every COLLECTIVE hop the walk continues on the member that arrived last
    g, t = pred.graph, pred.result.times
    for row in p[p["edge_kind"] == "COLLECTIVE"].itertuples():
        src_node = row.src_point // 2
        grp = next(x for x in g.collective_groups if src_node in x)
        assert t[row.src_point] == t[2 * grp].max()
        assert p["rank"].iat[row.order - 1] == g.node_rank[src_node] != row.rank
    # rank 7 entered step 10 7.5 ms after rank 1: rank 1's first all_to_all waited for it;
    # rank 7 was not waiting, it started late (its step marker is the anchored point)
    first = p.iloc[0]
    assert first["edge_kind"] == ANCHOR and first["category"] == "late_start"
    assert first["rank"] == 7 and first["name"] == "ProfilerStep#10"
    assert "waiting_for_peer" not in set(cp.by_family["family"])
    assert cp.by_family.set_index("family").at["late_start", "time_ns"] == first["dur_ns"]
    assert set(p["rank"]) == {1, 7}


def test_dlrm_any_rank_sums_exactly(dlrm: TraceSet) -> None:
    pred = traincast.predict(dlrm)
    for r in (0, 7):
        cp = critical_path(pred, rank=r, iteration=10)
        assert cp.rank == r
        _check_exact_sum(cp)


# --- 4. Perfetto overlay --------------------------------------------------------------


def _read_trace(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _check_overlay(doc: dict, cp) -> None:
    evs = doc["traceEvents"]
    xs = [e for e in evs if e["ph"] == "X"]
    marked = {e["args"]["event"] for e in xs if e["args"].get("critical") == 1}
    assert marked == set(cp.events.tolist())
    assert all(e.get("cname") == CRITICAL_CNAME for e in xs if e["args"].get("critical"))
    assert not any("cname" in e for e in xs if not e["args"].get("critical"))
    slices = {e["args"]["event"]: e for e in xs}
    flows = [e for e in evs if e["ph"] in ("s", "f")]
    assert flows
    by_id: dict[int, dict[str, dict]] = {}
    for f in flows:
        assert f["cat"] == "critical_path"
        by_id.setdefault(f["id"], {})[f["ph"]] = f
    assert sorted(by_id) == list(range(len(by_id)))
    for pair in by_id.values():
        assert set(pair) == {"s", "f"}
        assert pair["s"]["ts"] <= pair["f"]["ts"]
        for f in pair.values():
            # each end of a flow sits inside a marked slice on its own lane
            sl = slices[f["args"]["event"]]
            assert sl["args"]["critical"] == 1
            assert (sl["pid"], sl["tid"]) == (f["pid"], f["tid"])
            assert sl["ts"] - 1e-3 <= f["ts"] <= sl["ts"] + sl["dur"] + 1e-3
    # the arrows follow the path's hops in path order
    kinds = [by_id[i]["s"]["args"]["edge_kind"] for i in sorted(by_id)]
    hops = cp.path[(cp.path["src_point"] // 2 != cp.path["dst_point"] // 2) &
                   (cp.path["edge"] >= 0) & (cp.path["start_ns"] > cp.start_ns)]
    assert set(kinds) <= set(hops["edge_kind"])
    crit_ns = sum(e["args"]["critical_ns"] for e in xs if e["args"].get("critical"))
    assert crit_ns == int(cp.path.loc[cp.path["event"] >= 0, "dur_ns"].sum())


def test_overlay_marks_exactly_the_path(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank_allreduce(tmp_path / "in"))
    pred = traincast.predict(ts)
    cp = critical_path(pred)
    out = write_critical_path_trace(tmp_path / "cp.json", pred, cp)
    doc = _read_trace(out)
    _check_overlay(doc, cp)
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    coll = [f for f in flows if f["args"]["edge_kind"] == "COLLECTIVE"]
    assert {f["pid"] for f in coll} == {0, 1}  # the arrow crosses ranks
    assert doc["otherData"]["critical_path"]["duration_ns"] == 390 * US
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp.json", "in"]  # no temp left
    with pytest.raises(OutputError):
        write_critical_path_trace(tmp_path / "missing" / "cp.json", pred, cp)


def test_overlay_of_dlrm_gz(dlrm: TraceSet, tmp_path: Path) -> None:
    pred = traincast.predict(dlrm)
    cp = critical_path(pred)
    out = write_critical_path_trace(tmp_path / "dlrm_cp.json.gz", pred, cp)
    doc = _read_trace(out)
    _check_overlay(doc, cp)
    pids = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert pids == set(range(8))
    whole = _read_trace(write_critical_path_trace(tmp_path / "all.json", pred, cp,
                                                  window_only=False))
    _check_overlay(whole, cp)
    assert len(whole["traceEvents"]) >= len(doc["traceEvents"])


# --- performance ----------------------------------------------------------------------


def test_one_iteration_of_a_large_trace_is_fast(traces: Path) -> None:
    ts = traincast.load(traces / "hta" / "v100_2rank_allreduce")
    pred = traincast.predict(ts)
    assert ts.events.num_rows > 120_000
    t0 = time.perf_counter()
    cp = critical_path(pred, iteration=4)
    elapsed = time.perf_counter() - t0
    _check_exact_sum(cp)
    assert len(cp.path) > 10_000
    assert elapsed < 1.0, f"critical path took {elapsed:.3f} s"
    assert isinstance(cp.path, pd.DataFrame)
