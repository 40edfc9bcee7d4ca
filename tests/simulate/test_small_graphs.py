"""The simulator's paths for small graphs and for graphs with moved edges: the same times.

* :func:`~traincast.simulate.engine.simulate_batch` of a graph below the compiled kernel's
  size evaluates each row along its edges in topological order (no numba import); each row
  equals the Kahn loop and :func:`~traincast.simulate.engine.simulate`, with and without
  numba.
* :func:`~traincast.simulate.engine.share_structure` gives a rewired graph the replay's
  compiled edge order: the same times as ordering its edges again.
* The step windows' grouped work and the scaled edges' owners equal their definitions.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.graph.nesting import thread_parents
from traincast.simulate import engine as E
from traincast.simulate.engine import CyclicGraphError, share_structure, simulate, simulate_batch
from traincast.simulate.timeline import step_groups, step_work
from traincast.whatif.apply import apply_what_if
from traincast.whatif.scale import _owned_edges
from traincast.whatif.spec import parse_what_if

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dlrm(traces: Path):  # noqa: ANN201
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    return ts, traincast.predict(ts)


def _kahn(graph: ExecutionGraph, lag: np.ndarray) -> np.ndarray:
    """The reference: the Kahn stack loop over the points (the engine's ``_loop``)."""
    order, dst, indptr, has_in = E._csr(graph)
    s_dst = dst[order]  # the destinations in CSR order
    indeg = E._indeg(graph)
    np.testing.assert_array_equal(has_in, indeg > 0)
    times = graph.anchor.astype(np.int64)
    reached = (times >= 0) | has_in
    ready = np.flatnonzero(~has_in & reached)
    times, done = E._loop(ready, times, indeg.copy(), indptr, s_dst, lag[order])
    assert done == reached.sum()
    times[~reached] = -1
    return times


def _random_dag(seed: int, n_nodes: int = 400) -> ExecutionGraph:
    """A random DAG over ``2 n_nodes`` points: edges from lower to higher points, each node's
    start before its end, the points without an incoming edge anchored, but the last few
    nodes, which no edge or anchor reaches."""
    rng = np.random.default_rng(seed)
    n_pts = 2 * n_nodes
    live = n_pts - 10  # the last 5 nodes are isolated
    a = rng.integers(0, live, 3 * n_pts)
    b = rng.integers(0, live, 3 * n_pts)
    src, dst = np.minimum(a, b), np.maximum(a, b)
    keep = src < dst
    src = np.concatenate([np.arange(0, live, 2), src[keep]])
    dst = np.concatenate([np.arange(1, live, 2), dst[keep]])
    anchor = np.full(n_pts, -1, np.int64)
    free = np.bincount(dst, minlength=n_pts) == 0
    free[live:] = False
    anchor[free] = rng.integers(0, 1000, int(free.sum()))
    return ExecutionGraph(
        node_event=np.arange(n_nodes), node_rank=np.zeros(n_nodes, np.int64),
        measured=np.zeros(n_pts, np.int64), src=src, dst=dst,
        lag=rng.integers(0, 500, src.size), kind=np.zeros(src.size, np.int8), anchor=anchor)


def _lag_rows(graph: ExecutionGraph) -> np.ndarray:
    rng = np.random.default_rng(1)
    return np.stack([graph.lag, 3 * graph.lag,
                     (graph.lag * rng.uniform(0, 2, graph.lag.size)).astype(np.int64)])


@pytest.mark.parametrize("no_numba", [False, True])
def test_small_batch_equals_simulate_row_by_row(dlrm, no_numba: bool, monkeypatch) -> None:  # noqa: ANN001
    if no_numba:
        monkeypatch.setenv("TRAINCAST_NO_NUMBA", "1")
    else:
        monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    monkeypatch.setattr(E, "_KERNEL", [])  # the kernel as this environment loads it
    _, pred = dlrm
    for graph in (pred.graph.copy(), _random_dag(0), _random_dag(1)):
        graph.structure = {}  # derived here, under this environment
        assert graph.measured.size < E.LEVEL_MIN_POINTS
        lags = _lag_rows(graph)
        got = simulate_batch(graph, lags)
        assert "flat_edges" in graph.structure  # the small-graph path
        for b, lag in enumerate(lags):
            want = _kahn(graph, lag)
            np.testing.assert_array_equal(got[b], want)
            np.testing.assert_array_equal(simulate(graph, lag).times, want)
        order = E.edge_order(graph)
        np.testing.assert_array_equal(simulate_batch(graph, lags[:, order], by_source=True),
                                      got)


def test_small_batch_equals_the_compiled_kernel(dlrm, monkeypatch) -> None:  # noqa: ANN001
    pytest.importorskip("numba")
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    _, pred = dlrm
    graph = pred.graph.copy()
    lags = _lag_rows(graph)
    small = simulate_batch(graph, lags)
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the compiled path, however small
    np.testing.assert_array_equal(simulate_batch(graph, lags), small)


def test_jit_chooses_the_path(dlrm, monkeypatch) -> None:  # noqa: ANN001
    pytest.importorskip("numba")
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    monkeypatch.delenv("TRAINCAST_NUMBA_MIN_SIZE", raising=False)
    _, pred = dlrm
    lags = _lag_rows(pred.graph)
    want = None
    for jit, flat in ((None, True), (False, True), (True, False)):
        g = pred.graph.copy()
        g.structure = {}
        got = simulate_batch(g, lags, jit=jit)
        assert ("flat_edges" in g.structure) == flat
        if want is None:
            want = got
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [1, 3])
def test_large_path_without_kernel_and_out(dlrm, rows: int, monkeypatch) -> None:  # noqa: ANN001
    """Above LEVEL_MIN_POINTS without numba: one row takes simulate's levels-then-loop
    hybrid, several rows the batched levels; ``out`` receives the times."""
    monkeypatch.setenv("TRAINCAST_NO_NUMBA", "1")
    monkeypatch.setattr(E, "_KERNEL", [])
    monkeypatch.setattr(E, "LEVEL_MIN_POINTS", 1_000)  # the 8-rank graph counts as large
    monkeypatch.setattr(E, "LEVEL_WINDOW", 20)  # narrow levels: the loop takes over early
    _, pred = dlrm
    graph = pred.graph.copy()
    graph.structure = {}
    lags = _lag_rows(graph)[:rows]
    buf = np.full((rows, graph.n_points), 7, np.int64)
    got = simulate_batch(graph, lags, out=buf)
    assert got is buf and "flat_edges" not in graph.structure
    for b, lag in enumerate(lags):
        np.testing.assert_array_equal(got[b], _kahn(graph, lag))
    with pytest.raises(ValueError, match="out must be"):
        simulate_batch(graph, lags, out=buf[:, :-1])


def test_small_batch_refuses_cycles() -> None:
    g = _random_dag(2)
    g.src = np.append(g.src, 1)
    g.dst = np.append(g.dst, 0)  # end of node 0 -> its start: a cycle
    g.lag = np.append(g.lag, 0)
    g.kind = np.append(g.kind, g.kind[0])
    with pytest.raises(CyclicGraphError):
        simulate_batch(g, g.lag[None, :])
    with pytest.raises(CyclicGraphError):
        simulate(g)


def test_small_batch_does_not_import_numba() -> None:
    code = ("import sys, numpy as np\n"
            "sys.path.insert(0, 'tests/simulate')\n"
            "from test_small_graphs import _random_dag\n"
            "from traincast.simulate.engine import simulate_batch\n"
            "g = _random_dag(0)\n"
            "simulate_batch(g, np.stack([g.lag, 2 * g.lag]))\n"
            "print('numba' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRAINCAST_NO_NUMBA", "TRAINCAST_NUMBA_MIN_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("what", [["overlap=ideal"], ["speedup=family:gemm=2", "overlap=ideal"]])
@pytest.mark.parametrize("compiled", [False, True])
def test_share_structure_equals_a_fresh_sort(dlrm, what: list[str], compiled: bool,
                                             monkeypatch) -> None:  # noqa: ANN001
    if compiled:
        pytest.importorskip("numba")
        monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
        monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    ts, pred = dlrm
    base = pred.graph.copy()
    base.structure = {}
    simulate(base)  # the replay's edge order kept (compiled), or its CSR
    g = apply_what_if(ts, base, parse_what_if(what)).graph
    assert (g.src != base.src).any()
    # the compiled order is shared (each moved edge in its old source's block), or the small
    # graphs' order of the points; the CSR is not: the changed graph sorts its own
    assert share_structure(g, base)
    assert ("flat" in g.structure) == compiled
    assert ("flat_points" in g.structure) != compiled
    times = simulate(g).times
    assert "flat_points" not in g.structure  # taken by the changed graph's edge list
    g.structure = {}
    np.testing.assert_array_equal(times, simulate(g).times)
    rows = np.stack([g.lag, 2 * g.lag])
    share_structure(g, base)
    shared = simulate_batch(g, rows)
    g.structure = {}
    np.testing.assert_array_equal(shared, simulate_batch(g, rows))


def test_share_structure_refuses_other_changes(dlrm) -> None:  # noqa: ANN001
    _, pred = dlrm
    base = pred.graph
    g = base.copy()
    g.structure = {}
    g.src = base.src.copy()
    e = np.flatnonzero(g.src >= 4)[0]
    g.src[e] -= 4  # to another node: not derived
    assert not share_structure(g, base)
    assert "flat" not in g.structure and "csr" not in g.structure
    assert "flat_points" not in g.structure


def test_step_groups_are_the_marked_steps_work(dlrm) -> None:  # noqa: ANN001
    ts, pred = dlrm
    rows = step_work(ts, pred.graph)
    mk = ts.iterations.column("marker_event").to_numpy()
    node, row, head = step_groups(ts, pred.graph)
    want = np.flatnonzero(rows >= 0)
    want = want[mk[rows[want]] >= 0]
    np.testing.assert_array_equal(np.sort(node), want)
    assert np.all(np.diff(rows[node]) >= 0)
    np.testing.assert_array_equal(rows[node[head]], row)
    assert np.unique(row).size == row.size


def test_owned_edges_are_the_events_own_time(dlrm) -> None:  # noqa: ANN001
    _, pred = dlrm
    g = pred.graph
    edges, events = _owned_edges(g)
    exe = g.edges_of_kind(EdgeKind.EXEC)
    col = g.edges_of_kind(EdgeKind.COLLECTIVE)
    th = g.edges_of_kind(EdgeKind.THREAD)
    s = g.src[th]
    own = np.where(s % 2 == 0, s // 2, thread_parents(g)[s // 2])
    keep = own >= 0
    np.testing.assert_array_equal(edges, np.concatenate([exe, col, th[keep]]))
    np.testing.assert_array_equal(events, np.concatenate([g.src[exe] // 2, g.dst[col] // 2,
                                                          own[keep]]))


def test_in_degrees_kept_until_the_order_is_found(dlrm) -> None:  # noqa: ANN001
    """The CSR keeps which points have an incoming edge; the in-degrees themselves are kept
    only until the topological order used them up, and counted anew when asked again."""
    _, pred = dlrm
    g = pred.graph.copy()
    g.structure = {}
    _, _, _, has_in = E._csr(g)
    want = np.bincount(g.dst, minlength=g.n_points)
    np.testing.assert_array_equal(has_in, want > 0)
    np.testing.assert_array_equal(E._indeg(g), want)
    assert "indeg" in g.structure
    taken = E._indeg(g, take=True)
    assert "indeg" not in g.structure
    np.testing.assert_array_equal(taken, want)
    again = E._indeg(g)
    assert again.dtype == taken.dtype
    np.testing.assert_array_equal(again, want)
    np.testing.assert_array_equal(simulate(g).times, pred.result.times)


def test_flat_order_is_topological_and_replaces_the_csr(dlrm, monkeypatch) -> None:  # noqa: ANN001
    """The compiled path keeps one array: every edge once, each source's edges together
    in id order, every edge into a point before that point's own edges; the CSR it was
    found from and its in-degrees are not kept."""
    pytest.importorskip("numba")
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    _, pred = dlrm
    g = pred.graph.copy()
    g.structure = {}
    times = simulate(g).times
    assert "csr" not in g.structure and "indeg" not in g.structure
    flat = g.structure["flat"][3]
    assert flat.dtype == np.int32 and not flat.flags.writeable
    np.testing.assert_array_equal(np.sort(flat), np.arange(g.n_edges))
    np.testing.assert_array_equal(E.edge_order(g), flat)
    s = g.src[flat].astype(np.int64)
    first = np.full(g.n_points, flat.size)  # each point's block in the order
    np.minimum.at(first, s, np.arange(flat.size))
    blocks = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    assert np.unique(s[blocks]).size == blocks.size  # each source's edges together
    same = s[1:] == s[:-1]
    assert np.all(flat[1:][same] > flat[:-1][same])  # in id order
    into = np.arange(flat.size)  # an edge into q lies before q's block
    assert np.all(into < first[g.dst[flat]])
    g.structure = {}
    monkeypatch.setenv("TRAINCAST_NO_NUMBA", "1")
    monkeypatch.setattr(E, "_KERNEL", [])
    np.testing.assert_array_equal(simulate(g).times, times)


def _timed_dag(seed: int) -> ExecutionGraph:
    """A random DAG whose measured times are a replay of it: they never decrease along an
    edge, many edges are ties (zero lags), and a few edges are made to decrease (a kernel
    recorded a little before the event it waits for)."""
    g = _random_dag(seed)
    rng = np.random.default_rng(seed)
    lag = g.lag.copy()
    lag[rng.random(lag.size) < 0.3] = 0
    g.lag = lag
    t = _kahn(g, lag)
    t[t < 0] = 0
    back = rng.choice(np.flatnonzero(lag > 0), 5, replace=False)
    t[g.dst[back]] = t[g.src[back]] - 1  # these edges now go back in time
    g.measured = t
    return g


def _is_topological(graph: ExecutionGraph, pts: np.ndarray, reached: np.ndarray) -> bool:
    pos = np.full(graph.n_points, -1)
    pos[pts] = np.arange(pts.size)
    return (np.array_equal(np.sort(pts), np.flatnonzero(reached))
            and bool(np.all((pos[graph.src] >= 0) & (pos[graph.src] < pos[graph.dst]))))


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_time_order_is_a_topological_order(dlrm, seed: int) -> None:  # noqa: ANN001
    """A trace's graph (and a replayed DAG with ties and edges that go back in time) is
    ordered by its measured times, not Kahn's loop; the order is topological and the times
    along it are Kahn's."""
    _, pred = dlrm
    for g in (pred.graph.copy(), _timed_dag(seed)):
        g.structure = {}
        reached = (g.anchor >= 0) | (np.bincount(g.dst, minlength=g.n_points) > 0)
        pts = E._time_order(g, reached)
        assert pts is not None and _is_topological(g, pts, reached)
        lags = _lag_rows(g)
        got = simulate_batch(g, lags)
        np.testing.assert_array_equal(g.structure["flat_edges"][4], pts)
        for b, lag in enumerate(lags):
            np.testing.assert_array_equal(got[b], _kahn(g, lag))


def test_time_order_declines_what_it_cannot_order(monkeypatch) -> None:  # noqa: ANN001
    """No measurement (every edge a tie), a chain of ties or of backward edges longer than
    the passes allow, or a cycle: Kahn's loop decides (and refuses the cycle)."""
    g = _random_dag(6)  # measured all zero
    reached = (g.anchor >= 0) | (np.bincount(g.dst, minlength=g.n_points) > 0)
    assert E._time_order(g, reached) is None
    g = _timed_dag(6)
    assert E._time_order(g, reached) is not None
    monkeypatch.setattr(E, "TIE_PASSES", 1)
    assert E._time_order(g, reached) is None
    np.testing.assert_array_equal(simulate_batch(g, g.lag[None, :])[0], _kahn(g, g.lag))
    monkeypatch.undo()
    g = _timed_dag(7)
    g.src = np.append(g.src, 1)
    g.dst = np.append(g.dst, 0)  # end of node 0 -> its start: a cycle
    g.lag = np.append(g.lag, 0)
    g.kind = np.append(g.kind, g.kind[0])
    assert E._time_order(g, reached) is None
    with pytest.raises(CyclicGraphError):
        simulate_batch(g, g.lag[None, :])
