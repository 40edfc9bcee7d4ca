"""The simulator is a real engine: durations in, times out (hand-built traces, exact)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synth_trace import Trace, single_rank_gpu, two_rank_allreduce

import traincast
from traincast.graph.build import build_graph
from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.simulate.engine import CyclicGraphError, simulate
from traincast.simulate.replay import Replay
from traincast.trace.traceset import TraceSet
from traincast.whatif.scale import scale_durations, select_events

US = 1000
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.skip("shared data not available")
    return SHARED


def _step_ns(pred: Replay, ts: TraceSet, lags: np.ndarray | None = None) -> int:
    res = simulate(pred.graph, lags)
    mk = int(ts.iterations.column("marker_event").to_numpy()[0])
    return int(res.times[2 * mk + 1] - res.times[2 * mk])


def test_replay_reproduces_hand_built_step(tmp_path: Path) -> None:
    ts = traincast.load(single_rank_gpu(tmp_path))
    pred = traincast.predict(ts)
    assert pred.iterations["measured_ns"].tolist() == [480 * US]
    assert pred.iterations["predicted_ns"].tolist() == [480 * US]
    kinds = {EdgeKind(k).name for k in np.unique(pred.graph.kind)}
    assert {"THREAD", "EXEC", "LAUNCH", "STREAM", "SYNC"} <= kinds


def test_halving_gemm_shortens_step_by_half_the_gemm(tmp_path: Path) -> None:
    ts = traincast.load(single_rank_gpu(tmp_path))
    pred = traincast.predict(ts)
    sel = select_events(ts, op_family="gemm", kind="kernel")
    assert sel.sum() == 1
    lags = scale_durations(pred.graph, sel, 0.5)
    # the GEMM is on the path to the sync: the step loses exactly 150 µs
    assert _step_ns(pred, ts, lags) == (480 - 150) * US
    # slowing the elementwise kernel by 2x adds exactly its 100 µs
    sel2 = select_events(ts, op_family="elementwise", kind="kernel")
    assert _step_ns(pred, ts, scale_durations(pred.graph, sel2, 2.0)) == (480 + 100) * US


def test_kernel_off_the_critical_path_does_not_move_the_step(tmp_path: Path) -> None:
    t = Trace()
    t.step(1, 0, 300)
    # a kernel nobody waits for: the step is host-bound
    t.launch("volta_sgemm_128x64_nn", 10, 5, 20, 500)
    t.host("aten::relu", 20, 270)
    ts = traincast.load(t.write(tmp_path))
    pred = traincast.predict(ts)
    sel = select_events(ts, op_family="gemm")
    assert _step_ns(pred, ts, scale_durations(pred.graph, sel, 3.0)) == 300 * US
    assert _step_ns(pred, ts, scale_durations(pred.graph, sel, 0.1)) == 300 * US


def _two_rank_allreduce(folder: Path, late_compute_us: float) -> Path:
    return two_rank_allreduce(folder, late_compute_us)


def test_collective_waits_for_last_rank_and_moves_with_it(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank_allreduce(tmp_path, 300.0))
    pred = traincast.predict(ts)
    assert pred.graph.collective_groups and len(pred.graph.collective_groups[0]) == 2
    assert pred.graph.unmatched_collectives.size == 0
    meas = pred.iterations["measured_ns"].tolist()
    assert pred.iterations["predicted_ns"].tolist() == meas
    # rank 1's compute kernel 200 µs faster: both ranks' steps shrink by 200 µs, rank 0
    # only because it waits for rank 1 in the collective
    sel = select_events(ts, op_family="gemm", rank=1)
    lags = scale_durations(pred.graph, sel, 100 / 300)
    res = simulate(pred.graph, lags)
    mk = ts.iterations.column("marker_event").to_numpy()
    steps = res.times[2 * mk + 1] - res.times[2 * mk]
    assert steps.tolist() == [m - 200 * US for m in meas]


def test_transfer_time_excludes_waiting_for_peers(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank_allreduce(tmp_path, 300.0))
    g = traincast.predict(ts).graph
    exe = g.edges_of_kind(EdgeKind.EXEC)
    grp = g.collective_groups[0]
    lags = {int(g.src[e] // 2): int(g.lag[e]) for e in exe}
    # rank 0's kernel measured 50 + 200 µs (it waited 200 µs for rank 1); transfer is 50
    assert [lags[int(n)] for n in grp] == [50 * US, 50 * US]


def test_missing_peer_replays_with_measured_duration(tmp_path: Path) -> None:
    _two_rank_allreduce(tmp_path, 300.0)
    ts = traincast.load(tmp_path / "rank-0.pt.trace.json.gz")
    pred = traincast.predict(ts)
    assert pred.graph.unmatched_collectives.size == 1
    assert any("measured durations" in n for n in pred.notes)
    exe = pred.graph.edges_of_kind(EdgeKind.EXEC)
    node = int(pred.graph.unmatched_collectives[0])
    lag = int(pred.graph.lag[exe[pred.graph.src[exe] // 2 == node]][0])
    assert lag == 250 * US


def test_engine_rejects_cycles() -> None:
    g = ExecutionGraph(
        node_event=np.arange(2), node_rank=np.zeros(2, np.int32),
        measured=np.zeros(4, np.int64), src=np.array([0, 1, 2, 3]), dst=np.array([1, 2, 3, 0]),
        lag=np.ones(4, np.int64), kind=np.zeros(4, np.int8), anchor=np.full(4, -1, np.int64))
    with pytest.raises(CyclicGraphError):
        simulate(g)


def test_engine_max_plus_semantics() -> None:
    # point 0 anchored at 5; 0 -> 1 (lag 10), 0 -> 2 (lag 3), 1 -> 3 (lag 1), 2 -> 3 (lag 20)
    g = ExecutionGraph(
        node_event=np.arange(2), node_rank=np.zeros(2, np.int32),
        measured=np.zeros(4, np.int64), src=np.array([0, 0, 1, 2]), dst=np.array([1, 2, 3, 3]),
        lag=np.array([10, 3, 1, 20]), kind=np.zeros(4, np.int8),
        anchor=np.array([5, -1, -1, -1]))
    assert simulate(g).times.tolist() == [5, 15, 8, 28]


def test_exact_mode_reproduces_real_trace(shared_data: Path) -> None:
    ts = traincast.load(shared_data / "traces" / "hta" / "a100_16rank_5streams")
    pred = traincast.predict(ts, exact=True)
    assert (pred.iterations["predicted_ns"] == pred.iterations["measured_ns"]).all()


def test_build_graph_is_deterministic(shared_data: Path) -> None:
    ts = traincast.load(shared_data / "traces" / "dlrm_8xv100" / "kineto")
    a, b = build_graph(ts), build_graph(ts)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.lag, b.lag)


def test_ddp_finalize_waits_for_every_bucket(tmp_path: Path) -> None:
    """The first copy_bucket_to_grad after an all_reduce's issue depends on its end (gloo):
    lengthening a collective that had slack still delays the copies, hence the step."""
    t = Trace(world_size=1)
    t.host_name = "node0"
    t.step(1, 0, 1000)
    t.host("c10d::allreduce_", 100, 20)
    t.host("gloo:all_reduce", 110, 50, cat="user_annotation", tid=2,
           **{"Input Dims": [[1024]], "Input type": ["float"]})
    t.host("aten::mm", 130, 500)
    t.host("torch.distributed.ddp.reducer::copy_bucket_to_grad", 700, 10)
    t.host("aten::add_", 720, 200)
    ts = traincast.load(t.write(tmp_path))
    pred = traincast.predict(ts)
    g = pred.graph
    names = ts.events.column("name").to_pylist()
    data = g.edges_of_kind(EdgeKind.DATA)
    pairs = {(names[g.src[e] // 2], names[g.dst[e] // 2]) for e in data}
    assert ("gloo:all_reduce", "torch.distributed.ddp.reducer::copy_bucket_to_grad") in pairs
    assert pred.iterations["predicted_ns"].iat[0] == 1000 * US
    # the all_reduce 20x longer (1 ms): the copy (and the step) now wait for it
    sel = select_events(ts, name_contains="gloo:all_reduce")
    exe = g.edges_of_kind(EdgeKind.EXEC)
    assert exe.size == 0  # one-rank collective: its time is its own thread segment
    from traincast.graph.nesting import thread_edge_owner

    owner = thread_edge_owner(g)
    lags = g.lag.copy()
    lags[(owner >= 0) & sel[np.clip(owner, 0, None)]] *= 20
    res = simulate(g, lags)
    mk = int(ts.iterations.column("marker_event").to_numpy()[0])
    assert res.times[2 * mk + 1] - res.times[2 * mk] > 1000 * US


def test_collective_is_one_barrier_point_with_linear_edges(shared_data: Path) -> None:
    # DLRM 8xV100: every matched collective gets one barrier point (2N + k) that its members'
    # starts feed (ARRIVE, lag 0) and that feeds each member's end (COLLECTIVE, its transfer):
    # 2m edges per collective of m members, not m(m-1)
    ts = traincast.load(shared_data / "traces" / "dlrm_8xv100" / "kineto")
    g = build_graph(ts)
    groups = g.collective_groups
    members = sum(grp.size for grp in groups)
    assert g.n_points == g.n_event_points + len(groups)
    arrive, coll = g.edges_of_kind(EdgeKind.ARRIVE), g.edges_of_kind(EdgeKind.COLLECTIVE)
    assert arrive.size == coll.size == members
    k = 3
    b = g.n_event_points + k
    assert sorted(g.src[arrive[g.dst[arrive] == b]] // 2) == sorted(groups[k].tolist())
    assert g.measured[b] == g.measured[2 * groups[k]].max()  # the measured last arrival
    # the barrier feeds each member's end with exactly its measured transfer time
    into = coll[g.src[coll] == b]
    ends = g.dst[into]
    assert np.array_equal(g.lag[into], g.measured[ends] - g.measured[b])
    # and replay with exact latencies reproduces the measurement through the barrier points
    pred = traincast.predict(ts, exact=True)
    assert (pred.iterations["predicted_ns"] == pred.iterations["measured_ns"]).all()


def test_recorded_thread_nesting_equals_the_derived_one(shared_data: Path) -> None:
    from traincast.graph.nesting import thread_parents

    ts = traincast.load(shared_data / "traces" / "hta" / "v100_2rank_allreduce")
    g = build_graph(ts)
    assert g.thread_parent is not None and (g.thread_parent >= 0).sum() > 1000
    recorded = g.thread_parent.copy()
    g.thread_parent = None  # force the pointer-jumping derivation from the THREAD chains
    assert np.array_equal(thread_parents(g), recorded)


@pytest.mark.parametrize("width", [1, 4, 10**9])
def test_level_mode_equals_the_loop_on_random_graphs(monkeypatch: pytest.MonkeyPatch,
                                                     width: int) -> None:
    # random DAGs (edges from lower to higher point ids, random lags, some anchors):
    # the numpy level-synchronous mode, alone (width 1), switching to the loop when levels
    # get narrow (4) or handing over at once (10**9), gives the loop's times exactly
    from traincast.simulate import engine

    rng = np.random.default_rng(11)
    for _ in range(20):
        n_pts = int(rng.integers(2, 400)) * 2
        m = int(rng.integers(1, 3 * n_pts))
        a, b = rng.integers(0, n_pts, m), rng.integers(0, n_pts, m)
        keep = a != b
        src, dst = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
        anchor = np.where(rng.random(n_pts) < 0.2, rng.integers(0, 1000, n_pts), -1)
        indeg = np.bincount(dst, minlength=n_pts)
        anchor[(indeg == 0)] = np.maximum(anchor[indeg == 0], 0)  # every source anchored
        g = ExecutionGraph(node_event=np.arange(n_pts // 2), node_rank=np.zeros(n_pts // 2,
                           np.int32), measured=np.zeros(n_pts, np.int64), src=src, dst=dst,
                           lag=rng.integers(0, 500, src.size), kind=np.zeros(src.size, np.int8),
                           anchor=anchor.astype(np.int64))
        monkeypatch.setattr(engine, "LEVEL_MIN_POINTS", 10**12)
        loop = simulate(g).times
        monkeypatch.setattr(engine, "LEVEL_MIN_POINTS", 0)
        monkeypatch.setattr(engine, "LEVEL_MIN_WIDTH", width)
        monkeypatch.setattr(engine, "LEVEL_WINDOW", 3)
        assert np.array_equal(simulate(g).times, loop)
        # a cycle is found in either mode
        cyc = ExecutionGraph(g.node_event, g.node_rank, g.measured,
                             np.r_[src, dst[:1]], np.r_[dst, src[:1]],
                             np.r_[g.lag, [1]], np.r_[g.kind, [0]].astype(np.int8), g.anchor)
        with pytest.raises(CyclicGraphError):
            simulate(cyc)
