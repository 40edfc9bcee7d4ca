"""The graph builder's compact layout: int32 point ids where they fit, the edge batches
drained as they are joined, and lags relaxed in place, give the graph and the replay the
int64 layout gives (real 8-rank DLRM traces)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph.binding import binding_edges
from traincast.graph.build import build_graph
from traincast.graph.edge_lists import EdgeLists
from traincast.graph.model import EdgeKind, NodeRange
from traincast.simulate.engine import simulate, simulate_batch


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


def _widened(g):  # the same graph with every id and lag column in int64 (the layout before)
    return dataclasses.replace(
        g, src=g.src.astype(np.int64), dst=g.dst.astype(np.int64),
        lag=g.lag.astype(np.int64), exact_lag=g.exact_lag.astype(np.int64),
        node_event=g.node_event.astype(np.int64),
        thread_parent=g.thread_parent.astype(np.int64), structure={})


def test_point_ids_and_lags_are_int32(dlrm: traincast.TraceSet) -> None:
    g = build_graph(dlrm)
    assert g.src.dtype == g.dst.dtype == g.node_event.dtype == np.int32
    assert g.thread_parent.dtype == np.int32
    # every lag fits int32 (a what-if widens its copy's: tests/graph/test_lag_widening.py)
    assert g.lag.dtype == g.exact_lag.dtype == np.int32
    assert not g.lag.flags.writeable  # changed on a copy, never in place
    assert g.measured.dtype == g.anchor.dtype == np.int64
    assert int(g.src.max()) < g.n_points and int(g.dst.max()) < g.n_points


def test_int32_graph_replays_as_the_int64_graph(dlrm: traincast.TraceSet) -> None:
    g = build_graph(dlrm)
    wide = _widened(g)
    t32, t64 = simulate(g).times, simulate(wide).times
    np.testing.assert_array_equal(t32, t64)
    np.testing.assert_array_equal(binding_edges(g, t32), binding_edges(wide, t64))
    np.testing.assert_array_equal(binding_edges(g, g.measured, g.exact_lag),
                                  binding_edges(wide, wide.measured, wide.exact_lag))
    lags = np.stack([g.lag, g.exact_lag])
    np.testing.assert_array_equal(simulate_batch(g, lags), simulate_batch(wide, lags))


def test_exact_graph_reproduces_the_measurement(dlrm: traincast.TraceSet) -> None:
    """The lags relaxed in place (both columns from one THREAD lookup) still let the
    calibrated graph replay the measured times of every event it reaches."""
    g = build_graph(dlrm, exact=True)
    assert g.lag is g.exact_lag
    t = simulate(g).times[:g.n_event_points]
    reached = t >= 0
    assert reached.mean() > 0.9
    np.testing.assert_array_equal(t[reached], g.measured[:g.n_event_points][reached])
    # a relaxed THREAD edge into a waiting point never exceeds its structural twin's kind
    th = g.kind == int(EdgeKind.THREAD)
    assert (g.exact_lag[th] >= 0).all()


def test_take_joins_like_arrays_and_empties_the_lists() -> None:
    a, b = EdgeLists(), EdgeLists(np.int32)
    for e in (a, b):
        e.add(np.array([0, 2]), np.array([1, 3]), np.array([5, -1]), EdgeKind.THREAD)
        e.add(np.array([4]), np.array([5]), np.array([7]), EdgeKind.EXEC, np.array([3]))
    ref = a.arrays()
    got = b.take()
    assert got[0].dtype == got[1].dtype == np.int32 and got[2].dtype == np.int64
    for x, y in zip(ref, got, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not (b.src or b.dst or b.lag or b.structural or b.kind)
    # the exact and structural columns are separate arrays (relaxed in place one by one)
    assert not np.shares_memory(got[2], got[3])


def test_ids_too_large_for_int32_stay_int64(dlrm: traincast.TraceSet,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Past int32's range the builder keeps int64 ids (forced here with a tiny limit) and
    the graph is the same."""
    import traincast.graph.build as B

    small = build_graph(dlrm)
    monkeypatch.setattr(B, "_INT32_LIMIT", 10)
    big = build_graph(dlrm)
    assert big.src.dtype == big.dst.dtype == big.node_event.dtype == np.int64
    assert big.thread_parent.dtype == np.int64
    for name in ("src", "dst", "node_event", "thread_parent", "lag", "exact_lag", "kind",
                 "measured", "anchor"):
        np.testing.assert_array_equal(getattr(big, name), getattr(small, name))
    np.testing.assert_array_equal(simulate(big).times, simulate(small).times)


def test_node_event_is_kept_as_a_range(dlrm: traincast.TraceSet) -> None:
    """The builder's node -> event column (node i is event row i) is kept as a range, laid
    out when read; copies share it, the sizes need no array."""
    g = build_graph(dlrm)
    stored = g.__dict__["_node_event"]
    assert isinstance(stored, NodeRange) and stored.size == dlrm.events.num_rows
    assert g.n_nodes == stored.size and g.n_event_points == 2 * stored.size
    ne = g.node_event
    assert ne.dtype == np.int32 and not ne.flags.writeable
    np.testing.assert_array_equal(ne, np.arange(dlrm.events.num_rows))
    assert g.node_event is ne  # the same array while it is held
    for c in (g.copy(), g.copy_lags(), dataclasses.replace(g, lag=g.lag.copy())):
        assert c.__dict__["_node_event"] is stored
    g.node_event = np.arange(g.n_nodes, dtype=np.int64)  # any array may be assigned
    assert g.node_event.dtype == np.int64


@pytest.mark.parametrize("numba_min", ["0", "100000000"])
def test_thread_links_written_a_slice_of_chains_at_a_time(dlrm: traincast.TraceSet,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          numba_min: str) -> None:
    """The THREAD links, made from the measured times and the clipped ends a few chains at
    a time (the walk's times not kept until the join), are those of one pass."""
    import traincast.graph.nesting as N

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", numba_min)
    whole = build_graph(dlrm)
    monkeypatch.setattr(N, "_SLICE", 37)  # many slices, chains cut at odd places
    sliced = build_graph(dlrm)
    for name in ("src", "dst", "lag", "exact_lag", "kind", "measured", "anchor"):
        np.testing.assert_array_equal(getattr(sliced, name), getattr(whole, name))


def test_clipped_times_are_the_walks_other_times(dlrm: traincast.TraceSet) -> None:
    """The chain points whose walk time is not their event's measured start or end."""
    import traincast.graph.nesting as N

    measured = build_graph(dlrm).measured
    pts = np.concatenate([np.arange(0, 800, 2), np.arange(1, 800, 2)]).astype(np.int32)
    times = measured[pts]
    times[[3, 450]] -= 5  # two clipped
    at, val = N.clipped_times(pts, times, measured)
    np.testing.assert_array_equal(at, [3, 450])
    np.testing.assert_array_equal(val, times[[3, 450]])


def test_narrow_binding_edges_are_the_int64_ones(dlrm: traincast.TraceSet,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numba")
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the compiled pass, however small
    g = build_graph(dlrm)
    t = simulate(g).times
    narrow, wide = binding_edges(g, t, narrow=True), binding_edges(g, t)
    assert narrow.dtype == np.int32 and wide.dtype == np.int64
    np.testing.assert_array_equal(narrow, wide)
    assert (wide >= 0).any()
