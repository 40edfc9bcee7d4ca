"""What-ifs simulated on the replay's graph by the compiled paths: the same integers as the
changed graph and the numpy step grouping.

* :func:`~traincast.simulate.engine.simulate_scaled` (lags rescaled where they are read,
  waits moved to their collective's start in the kernel) equals
  :func:`~traincast.simulate.engine.simulate` of the graph
  :func:`~traincast.whatif.apply.apply_what_if` builds, rounding ties included; it declines
  what it cannot do (no compiled kernel, a moved edge that does not leave an end point).
* :func:`~traincast.simulate.scaled.simulate_rows` (several what-ifs a pass, int32 times)
  gives the same times and, through :func:`~traincast.simulate.timeline.marked_windows`,
  the same step windows; it declines times it cannot hold.
* The edges ``overlap=ideal`` moves, read from the kept CSR, are those of the definition.
* The marked steps' work grouped in one compiled pass
  (:func:`~traincast.simulate.timeline._compiled_groups`) equals the numpy grouping of
  :func:`~traincast.simulate.timeline.step_work` and its measured spill.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.simulate import engine as E
from traincast.simulate import timeline as tl
from traincast.simulate.engine import simulate
from traincast.simulate.scaled import simulate_rows, simulate_scaled
from traincast.whatif.apply import apply_what_if, event_factors, ideal_overlap_edges
from traincast.whatif.spec import parse_what_if
from traincast.whatif.speedup import speedup_codes, speedup_factors

pytest.importorskip("numba")

#: speedups (``kernel=2``: factors of 0.5, so rounding ties), a slowdown, a rank's family,
#: the overlap alone and with a speedup
WHAT_IFS = [["speedup=kind:cpu_op=10", "speedup=kind:runtime=10"], ["speedup=kind:kernel=2"],
            ["speedup=kind:kernel=0.3"], ["speedup=rank:1:family:elementwise=1.355"],
            ["overlap=ideal"], ["speedup=family:gemm=3", "overlap=ideal"]]


@pytest.fixture(scope="module")
def dlrm(traces: Path):  # noqa: ANN201
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    return ts, traincast.predict(ts)


@pytest.fixture()
def compiled(monkeypatch) -> None:  # noqa: ANN001
    """The compiled paths, however small the graph."""
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")


@pytest.mark.parametrize("what", WHAT_IFS)
def test_scaled_equals_the_changed_graph(dlrm, compiled, what: list[str]) -> None:  # noqa: ANN001
    ts, pred = dlrm
    graph = pred.graph
    w = parse_what_if(what)
    want = simulate(apply_what_if(ts, graph, w).graph).times
    factor = event_factors(ts, w)
    moved = ideal_overlap_edges(ts, graph) if w.overlap == "ideal" else None
    buf = np.full(graph.n_points, 7, np.int64)
    got = simulate_scaled(graph, factor, moved, out=buf)
    assert got is buf
    np.testing.assert_array_equal(got, want)
    if moved is None:
        assert not np.array_equal(got, pred.result.times)  # a change that shows


def test_scaled_without_change_is_the_replay(dlrm, compiled) -> None:  # noqa: ANN001
    ts, pred = dlrm
    ones = np.ones(ts.events.num_rows)
    np.testing.assert_array_equal(simulate_scaled(pred.graph, ones), pred.result.times)
    np.testing.assert_array_equal(simulate_scaled(pred.graph), pred.result.times)


def test_scaled_declines(dlrm, monkeypatch) -> None:  # noqa: ANN001
    ts, pred = dlrm
    monkeypatch.delenv("TRAINCAST_NUMBA_MIN_SIZE", raising=False)
    assert simulate_scaled(pred.graph) is None  # too small for the compiled kernel
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    g = pred.graph
    start = np.flatnonzero(g.src % 2 == 0)[:1]  # an edge leaving a start point
    assert simulate_scaled(g, None, start) is None
    monkeypatch.setenv("TRAINCAST_NO_NUMBA", "1")
    monkeypatch.setattr(E, "_KERNEL", [])
    assert simulate_scaled(g) is None


def _numpy_groups(ts, graph):  # noqa: ANN001, ANN202
    rows = tl.step_work(ts, graph)
    mk = ts.iterations.column("marker_event").to_numpy()
    node = np.flatnonzero(rows >= 0)
    node = node[mk[rows[node]] >= 0]
    node = node[np.argsort(rows[node], kind="stable")]
    row = rows[node]
    head = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if row.size else node[:0]
    spill = np.zeros(mk.size, np.int64)
    if node.size:
        last = np.maximum.reduceat(graph.measured[2 * node + 1], head)
        spill[row[head]] = np.maximum(last - graph.measured[2 * mk[row[head]] + 1], 0)
    return (node, row[head], head), spill


@pytest.mark.parametrize("name", ["dlrm_8xv100/kineto", "hta/a100_2rank_nccl",
                                  "linear_1x2080ti/kineto.pt.trace.json.gz"])
def test_compiled_groups_equal_numpy(traces: Path, compiled, name: str) -> None:  # noqa: ANN001
    ts = traincast.load(traces / name)
    graph = traincast.predict(ts).graph
    graph.structure.pop("step_groups", None)
    graph.structure.pop("measured_spill", None)
    fast = tl._compiled_groups(ts, graph)
    (node, row, head), spill = _numpy_groups(ts, graph)
    if fast is None:  # several marked steps on a rank: the numpy path
        it = ts.iterations.to_pandas()
        assert it[it["marker_event"] >= 0].duplicated("rank").any()
        return
    for a, b in zip(fast, (node, row, head), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(graph.structure["measured_spill"][1], spill)
    # marked work, or one unmarked step (the file as one iteration): nothing grouped
    assert node.size or (ts.iterations.column("marker_event").to_numpy() < 0).all()


def test_rows_equal_the_changed_graphs(dlrm, compiled) -> None:  # noqa: ANN001
    """All what-ifs of the list in one pass (one of them moving waits), then as step
    windows: the changed graphs' times and :func:`step_windows`."""
    ts, pred = dlrm
    graph = pred.graph
    whats = [parse_what_if(w) for w in WHAT_IFS[:5]]  # the last moves waits
    codes = np.zeros((ts.events.num_rows, len(whats)), np.uint8)
    tables = np.ones((len(whats), 256))
    for b, w in enumerate(whats):
        codes[:, b], tables[b] = speedup_codes(ts, w)
    node, row, head = tl.step_groups(ts, graph)
    times, origin, tails = simulate_rows(graph, codes, tables, ideal_overlap_edges(ts, graph),
                                         len(whats) - 1, node=node, head=head)
    mk = ts.iterations.column("marker_event").to_numpy().astype(np.int64)
    for b, w in enumerate(whats):
        want = simulate(apply_what_if(ts, graph, w).graph).times
        got = np.where(times[:, b] == np.iinfo(np.int32).min, -1,
                       times[:, b].astype(np.int64) + origin)
        np.testing.assert_array_equal(got, want)
        tail = np.full(mk.size, np.iinfo(np.int64).min, np.int64)
        tail[row] = tails[b]
        windows = tl.marked_windows(ts, graph, want[2 * mk], want[2 * mk + 1], tail)
        for a, c in zip(windows, tl.step_windows(ts, graph, want), strict=True):
            np.testing.assert_array_equal(a, c)


def test_rows_from_fortran_codes_and_a_reused_buffer(dlrm, compiled) -> None:  # noqa: ANN001
    """Codes in any layout and a reused times buffer give the same pass (the kernel loaded
    on empty views first)."""
    ts, pred = dlrm
    graph = pred.graph
    whats = [parse_what_if(w) for w in WHAT_IFS[:2]]
    codes = np.zeros((ts.events.num_rows, len(whats)), np.uint8)
    tables = np.ones((len(whats), 256))
    for b, w in enumerate(whats):
        codes[:, b], tables[b] = speedup_codes(ts, w)
    node, _, head = tl.step_groups(ts, graph)
    want = simulate_rows(graph, codes, tables, node=node, head=head)
    buf = np.zeros_like(want[0])
    got = simulate_rows(graph, np.asfortranarray(codes), tables, node=node, head=head,
                        out=buf)
    assert got[0] is buf and got[1] == want[1]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[2], want[2])


def test_rows_decline_what_they_cannot_hold(dlrm, compiled) -> None:  # noqa: ANN001
    ts, pred = dlrm
    g = pred.graph.copy()
    codes = np.zeros((ts.events.num_rows, 2), np.uint8)
    node, _, head = tl.step_groups(ts, g)
    assert simulate_rows(g, codes, np.ones((2, 256)), node=node, head=head) is not None
    g.anchor = np.where(g.anchor >= 0, g.anchor % (1 << 30), -1)  # near 0: no int32 origin
    assert simulate_rows(g, codes, np.ones((2, 256)), node=node, head=head) is None
    g = pred.graph.copy()
    g.set_lags(np.flatnonzero(g.kind == 0)[:1], 1 << 40)  # a time past the int32 range
    assert g.lag.dtype == np.int64  # (widened to hold it)
    assert simulate_rows(g, codes, np.ones((2, 256)), node=node, head=head) is None


@pytest.mark.parametrize("what", WHAT_IFS[:4] + [["speedup=family:gemm=2",
                                                    "speedup=kind:kernel=3"]])
def test_speedup_codes_are_the_factors(dlrm, what: list[str]) -> None:  # noqa: ANN001
    ts, _ = dlrm
    w = parse_what_if(what)
    codes, table = speedup_codes(ts, w)
    np.testing.assert_array_equal(table[codes], speedup_factors(ts, w))
    assert table[0] == 1.0
    wide = np.full((codes.size, 2), 255, np.uint8)  # into a column of a wider array
    got, again = speedup_codes(ts, w, out=wide[:, 1])
    assert np.shares_memory(got, wide)
    np.testing.assert_array_equal(wide[:, 1], codes)
    np.testing.assert_array_equal(again, table)
    assert (wide[:, 0] == 255).all()


def test_moved_edges_from_the_kept_csr(dlrm) -> None:  # noqa: ANN001
    ts, pred = dlrm
    g = pred.graph
    E.edge_order(g)  # the CSR kept
    kept = ideal_overlap_edges(ts, g)
    bare = g.copy()
    bare.structure = {}
    np.testing.assert_array_equal(kept, ideal_overlap_edges(ts, bare))
    assert kept.size


def test_group_max_by_blocks_equals_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps' latest ends, taken whole groups a block at a time (blocks smaller than
    one group included), equal one reduction over all nodes."""
    from traincast.simulate import timeline as T

    rng = np.random.default_rng(5)
    end = rng.integers(-3, 1000, 20_000)
    sizes = rng.integers(1, 40, 300)
    node = rng.permutation(20_000)[:int(sizes.sum())]
    head = (np.cumsum(sizes) - sizes).astype(np.int32)
    d = end[node].copy()
    d[d < 0] = np.iinfo(np.int64).min
    whole = np.maximum.reduceat(d, head)
    for block in (1, 7, 64, 1 << 20):
        monkeypatch.setattr(T, "_BLOCK", block)
        assert np.array_equal(T._group_max(end, node, head), whole)


@pytest.mark.parametrize("name", ["dlrm_8xv100/kineto",
                                  "linear_1x2080ti/kineto.pt.trace.json.gz"])
def test_compiled_groups_from_the_compact_columns(traces: Path, compiled, name: str
                                                  ) -> None:  # noqa: ANN001
    """The grouping read from the compact measured columns (start, dur, clock offsets by
    row range: no 2N + B points laid out) equals the one read from the laid-out points."""
    from traincast.graph.model import MeasuredPoints

    ts = traincast.load(traces / name)
    graph = traincast.predict(ts).graph
    assert isinstance(vars(graph)["_measured"], MeasuredPoints)
    points, columns = tl._measured_columns(graph)
    assert points.size == 0 and columns[0].size == graph.n_nodes  # nothing laid out
    graph.structure.pop("measured_spill", None)
    compact = tl._compiled_groups(ts, graph)
    spill = graph.structure.pop("measured_spill", (None, None))[1]
    laid = graph.measured  # alive: the kernel reads the laid-out points
    assert tl._measured_columns(graph)[0] is laid
    wide = tl._compiled_groups(ts, graph)
    assert (compact is None) == (wide is None)
    assert compact is not None or name.startswith("linear")
    if compact is not None:
        for a, b in zip(compact, wide, strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(spill, graph.structure["measured_spill"][1])


def test_lent_times_written_back(dlrm, compiled) -> None:  # noqa: ANN001
    """A lent buffer of times is written back with the same integers (-1 kept), also when
    the block raises; times spanning 2**31 ns or more are not lent."""
    from traincast.simulate.scaled import lent_times

    _, pred = dlrm
    want = pred.result.times.copy()
    times = want.copy()
    with lent_times(times) as spare:
        assert spare is times
        spare.fill(12345)
    np.testing.assert_array_equal(times, want)
    with pytest.raises(RuntimeError), lent_times(times) as spare:
        spare[:] = 0
        raise RuntimeError
    np.testing.assert_array_equal(times, want)
    wide = want.copy()
    wide[np.flatnonzero(wide >= 0)[-1]] = int(wide.max()) + (1 << 31)
    with lent_times(wide) as spare:
        assert spare is None
    assert (wide[want >= 0] >= 0).all()
    ro = want.copy()
    ro.flags.writeable = False
    with lent_times(ro) as spare:
        assert spare is None
    neg = want.copy()
    neg[np.flatnonzero(neg >= 0)[0]] = -5  # a negative time other than none: not lent
    with lent_times(neg) as spare:
        assert spare is None
    assert (neg == -5).sum() == 1


@pytest.mark.parametrize("repeat", [1, 8])
def test_halved_times_written_back(dlrm, compiled, monkeypatch, repeat: int
                                   ) -> None:  # noqa: ANN001
    """Held in place in half their pages (the second half given back), the times come back
    the same integers into the same array, also when the block raises; times that do not
    fit stay untouched."""
    from traincast.simulate import scaled
    from traincast.simulate.scaled import halved_times

    advised = []
    monkeypatch.setattr(scaled, "advise_away", lambda r: advised.extend(r) or 0)
    _, pred = dlrm
    big = np.concatenate([pred.result.times] * repeat)  # odd and page-crossing sizes
    big = np.concatenate([big, big[:5]])
    times = big.copy()
    addr = times.ctypes.data
    with halved_times(times) as held:
        assert held
        assert ((times.view(np.int32)[:times.size] == np.iinfo(np.int32).min)
                == (big == -1)).all()  # the int32 copy in the first half
    np.testing.assert_array_equal(times, big)
    (a, b), = advised  # whole pages of the second half only
    assert a >= addr + 4 * times.size and b <= addr + 8 * times.size and a % 4096 == 0
    with pytest.raises(RuntimeError), halved_times(times):
        raise RuntimeError
    np.testing.assert_array_equal(times, big)
    wide = big.copy()
    wide[0] = int(big.max()) + (1 << 31)
    with halved_times(wide) as held:
        assert not held
    assert wide[0] == int(big.max()) + (1 << 31)


def test_rows_marks_in_a_lent_buffer(dlrm, compiled) -> None:  # noqa: ANN001
    """A pass of two what-ifs in a lent buffer gives the marks' times and the tails of the
    pass in its own pages, and the lent times come back unchanged."""
    ts, pred = dlrm
    graph = pred.graph
    whats = [parse_what_if(w) for w in WHAT_IFS[:2]]
    codes = np.zeros((ts.events.num_rows, 2), np.uint8)
    tables = np.ones((2, 256))
    for b, w in enumerate(whats):
        codes[:, b], tables[b] = speedup_codes(ts, w)
    node, _, head = tl.step_groups(ts, graph)
    times, origin, tails = simulate_rows(graph, codes, tables, node=node, head=head)
    marks = np.flatnonzero(np.arange(graph.n_points) % 7 == 3)
    want = np.where(times[marks] == np.iinfo(np.int32).min, -1,
                    times[marks].astype(np.int64) + origin)
    replay = pred.result.times.copy()
    lend = replay.copy()
    got, o2, t2 = simulate_rows(graph, codes, tables, node=node, head=head, marks=marks,
                                lend=lend)
    assert o2 == origin
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(t2, tails)
    np.testing.assert_array_equal(lend, replay)
