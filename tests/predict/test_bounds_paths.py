"""The host bound's longest paths read along the replay's own CSR and order (masked lags)
equal a simulation of the subgraph, and the per-(row, stream) sums of the bounds
(traincast.predict.bounds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph.model import EdgeKind, ExecutionGraph, SparsePoints
from traincast.predict import bounds
from traincast.simulate.engine import simulate


@pytest.fixture(scope="module")
def replay(traces: Path) -> traincast.predict.prediction.Prediction:
    return traincast.predict(traincast.load(traces / "dlrm_8xv100" / "kineto"))


def _subgraph_paths(g: ExecutionGraph, edges: np.ndarray) -> np.ndarray:
    """The reference: a graph of ``edges`` alone, every point anchored at 0, simulated."""
    sub = ExecutionGraph(g.node_event, g.node_rank, g.measured, g.src[edges], g.dst[edges],
                         g.lag[edges], g.kind[edges], np.zeros(g.n_points, np.int64))
    return simulate(sub).times


def test_longest_paths_equal_the_subgraph_on_a_replay(replay) -> None:
    g = replay.graph
    assert bounds._reaches_every_point(g)
    rng = np.random.default_rng(5)
    th = g.edges_of_kind(EdgeKind.THREAD)
    some = np.flatnonzero(rng.random(g.n_edges) < 0.4)
    for edges in (th, some, th[:1]):
        t = bounds._longest_paths(g, edges)
        np.testing.assert_array_equal(t, _subgraph_paths(g, edges))
        mask = np.zeros(g.n_edges, bool)
        mask[edges] = True  # the same edges as a mask
        np.testing.assert_array_equal(bounds._longest_paths(g, mask), t)
    # the replay's order was read, not found again: the graph keeps one structure
    assert {"flat", "csr"} & g.structure.keys()  # compiled order, or the small graph's CSR


def test_longest_paths_of_a_graph_that_leaves_a_point_unreached() -> None:
    """A point with no anchor and no incoming edge: the subgraph is simulated instead."""
    n = 3  # nodes 0..2: points 0..5; point 4 (node 2's start) has no edge in or anchor
    src = np.array([0, 1, 2, 4], np.int64)
    dst = np.array([1, 2, 3, 5], np.int64)
    lag = np.array([5, 7, 11, 13], np.int64)
    anchor = np.full(2 * n, -1, np.int64)
    anchor[0] = 0
    g = ExecutionGraph(np.arange(n), np.zeros(n, np.int32), np.zeros(2 * n, np.int64), src,
                       dst, lag, np.zeros(4, np.int8), anchor)
    assert not bounds._reaches_every_point(g)
    edges = np.array([1, 3])
    t = bounds._longest_paths(g, edges)
    np.testing.assert_array_equal(t, _subgraph_paths(g, edges))
    np.testing.assert_array_equal(bounds._longest_paths(g, np.isin(np.arange(4), edges)), t)
    assert t[5] == 13 and t[2] == 7


def test_masked_lags_never_win_against_far_paths() -> None:
    """Times far from 0 (ns on a trace clock) stay exact: the left-out lag cannot overflow."""
    src = np.array([0, 1, 2], np.int64)
    dst = np.array([1, 2, 3], np.int64)
    lag = np.array([10**15, 3, 10**15], np.int64)
    g = ExecutionGraph(np.arange(2), np.zeros(2, np.int32), np.zeros(4, np.int64), src, dst,
                       lag, np.zeros(3, np.int8),
                       SparsePoints(4, np.array([0]), np.array([0]), fill=-1))
    for edges in (np.array([0, 2]), np.array([1]), np.array([0, 1, 2])):
        np.testing.assert_array_equal(bounds._longest_paths(g, edges),
                                      _subgraph_paths(g, edges))


@pytest.mark.parametrize("compiled", [False, True])
def test_int32_masked_lags_are_the_int64_ones(replay, compiled, monkeypatch) -> None:  # noqa: ANN001
    """A graph with int32 lags is masked in int32 (the replay's simulator signature); paths
    past int32's left-out mark are simulated again in int64: the same times either way
    (numpy paths, then the compiled ones however small the graph)."""
    if compiled:
        monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
        monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    g = replay.graph
    assert g.lag.dtype == np.int32
    th = g.edges_of_kind(EdgeKind.THREAD)
    far = g.copy_lags()  # THREAD segments of 2**30 ns: paths past 2**31 ns
    far.set_lags(th, np.full(th.size, 1 << 30))
    assert far.lag.dtype == np.int32
    for graph in (g, far):
        wide = graph.copy_lags()
        wide.widen_lags()
        for edges in (th, np.flatnonzero(np.random.default_rng(3).random(g.n_edges) < 0.5)):
            t = bounds._longest_paths(graph, edges)
            np.testing.assert_array_equal(t, bounds._longest_paths(wide, edges))
            np.testing.assert_array_equal(t, _subgraph_paths(wide, edges))
    assert int(bounds._longest_paths(far, th).max()) > 1 << 31  # (the int64 pass ran)


def test_busiest_is_the_largest_sum_per_row() -> None:
    rng = np.random.default_rng(11)
    for n in (0, 1, 2, 300):
        row = rng.integers(0, 5, n)
        key = rng.integers(0, 4, n) * (1 << 32) + rng.integers(0, 3, n)
        val = rng.integers(0, 10**12, n)
        want = np.zeros(6, np.int64)
        sums: dict[tuple[int, int], int] = {}
        for r, k, v in zip(row.tolist(), key.tolist(), val.tolist(), strict=True):
            sums[r, k] = sums.get((r, k), 0) + v
        for (r, _), v in sums.items():
            want[r] = max(want[r], v)
        np.testing.assert_array_equal(bounds._busiest(row, key, val, 6), want)


def test_step_bounds_equal_under_either_path(replay, monkeypatch) -> None:
    ts, g = replay.measured, replay.graph
    fast = bounds.step_bounds(ts, g)
    monkeypatch.setattr(bounds, "_reaches_every_point", lambda graph: False)
    slow = bounds.step_bounds(ts, g)
    assert fast.equals(slow)
    assert (fast["host_bound_ns"] > 0).all()
