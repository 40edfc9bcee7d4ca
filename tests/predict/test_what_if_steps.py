"""Several what-ifs on one replay (traincast.predict.batch): each step table equals the one
``predict(ts, what_if=w)`` gives, whether batched, one row at a time or moving edges; the
changed graphs share what they do not change; the verdict's figures come from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph.model import EdgeKind
from traincast.predict import batch
from traincast.predict.batch import _same_steps, what_if_steps
from traincast.simulate import timeline as tl
from traincast.simulate.engine import edge_order, simulate, simulate_batch
from traincast.simulate.timeline import step_windows
from traincast.trace import arrow as A
from traincast.whatif.apply import apply_what_if
from traincast.whatif.spec import parse_what_if

#: duration-only what-ifs (batched) and edge-moving ones (one at a time), as the verdict
#: proposes them and beyond
WHAT_IFS = [["speedup=sgemm=5.971"], ["speedup=rank:1:family:elementwise=1.355"],
            ["speedup=kind:cpu_op=10", "speedup=kind:runtime=10"], ["overlap=ideal"],
            ["speedup=family:gemm=2", "overlap=ideal"], ["speedup=kind:kernel=0.5"]]


@pytest.fixture(scope="module")
def dlrm(traces: Path):  # noqa: ANN201
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    return ts, traincast.predict(ts)


@pytest.fixture(scope="module")
def one_by_one(dlrm) -> list:  # noqa: ANN001
    ts, _ = dlrm
    return [traincast.predict(ts, what_if=w).steps for w in WHAT_IFS]


@pytest.mark.parametrize("batch_bytes", [batch.BATCH_BYTES, 1])
def test_batched_steps_equal_predict(dlrm, one_by_one, monkeypatch,  # noqa: ANN001
                                     batch_bytes: int) -> None:
    """All duration-only rows in one batch, or one row per batch (a large job): the same
    integers as one ``predict`` per what-if."""
    ts, pred = dlrm
    monkeypatch.setattr(batch, "BATCH_BYTES", batch_bytes)
    got = what_if_steps(ts, pred, WHAT_IFS)
    for w, g, want in zip(WHAT_IFS, got, one_by_one, strict=True):
        assert g.equals(want), w
        assert g["predicted_ns"].dtype == np.int64


def test_compiled_steps_equal_predict(dlrm, one_by_one, monkeypatch) -> None:  # noqa: ANN001
    """With the compiled kernels (however small the graph), every what-if of the list is
    simulated on the replay's graph (no lag rows, no changed graph): the same integers."""
    pytest.importorskip("numba")
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    ts, pred = dlrm

    def refuse(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
        raise AssertionError("lag rows or a changed graph")

    monkeypatch.setattr(batch, "_step_ends_rows", refuse)
    for w, g, want in zip(WHAT_IFS, what_if_steps(ts, pred, WHAT_IFS), one_by_one,
                          strict=True):
        assert g.equals(want), w


def test_passes_of_two_in_the_replays_buffer(dlrm, one_by_one, monkeypatch) -> None:  # noqa: ANN001
    """Passes of two what-ifs (each in the replay's own buffer, lent: its times held as
    int32 meanwhile) and the what-ifs simulated alone (likewise) give the same integers,
    and the replay's times come back unchanged."""
    pytest.importorskip("numba")
    import contextlib

    from traincast.simulate import scaled

    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    ts, pred = dlrm
    monkeypatch.setattr(batch, "ROWS_BYTES", 8 * pred.graph.n_points)  # two a pass
    lent = []
    real = scaled.lent_times

    @contextlib.contextmanager
    def spy(times):  # noqa: ANN001, ANN202
        with real(times) as spare:
            lent.append(spare is times)
            yield spare

    monkeypatch.setattr(scaled, "lent_times", spy)
    monkeypatch.setattr(batch, "lent_times", spy)
    before = pred.result.times.copy()
    got = what_if_steps(ts, pred, WHAT_IFS)
    for w, g, want in zip(WHAT_IFS, got, one_by_one, strict=True):
        assert g.equals(want), w
    assert len(lent) >= 2 and all(lent)  # the passes and the one-at-a-time what-ifs
    np.testing.assert_array_equal(pred.result.times, before)


def test_two_ranks_nccl(traces: Path) -> None:
    ts = traincast.load(traces / "hta" / "a100_2rank_nccl")
    pred = traincast.predict(ts)
    whats = [["overlap=ideal"], ["speedup=family:gemm=3"], ["speedup=nccl=2"]]
    for w, g in zip(whats, what_if_steps(ts, pred, whats), strict=True):
        assert g.equals(traincast.predict(ts, what_if=w).steps), w


def test_applied_graph_shares_what_it_keeps(dlrm) -> None:  # noqa: ANN001
    ts, pred = dlrm
    g0 = pred.graph
    src, lag = g0.src.copy(), g0.lag.copy()
    d = apply_what_if(ts, g0, parse_what_if(["speedup=family:gemm=2"])).graph
    assert d.src is g0.src and d.dst is g0.dst and d.structure is g0.structure
    assert d.anchor is g0.anchor and d.lag is not g0.lag and not np.array_equal(d.lag, lag)
    o = apply_what_if(ts, g0, parse_what_if(["overlap=ideal"])).graph
    assert o.lag is g0.lag and o.src is not g0.src and o.structure is not g0.structure
    assert (o.src != src).any()
    assert np.array_equal(g0.src, src) and np.array_equal(g0.lag, lag)  # the replay's kept
    # overlap moves waits only: the replay's step assignment reads its steps
    assert _same_steps(g0, o)
    t = simulate(o).times
    for a, b in zip(step_windows(ts, g0, t), step_windows(ts, o, t), strict=True):
        assert np.array_equal(a, b)
    moved = o.src.copy()
    e = int(np.flatnonzero(o.kind == int(EdgeKind.EXEC))[0])
    moved[e] += 1
    o.src = moved
    assert not _same_steps(g0, o)


def test_batch_in_source_order_equals_simulate(dlrm) -> None:  # noqa: ANN001
    ts, pred = dlrm
    g = pred.graph
    rng = np.random.default_rng(0)
    lags = np.stack([g.lag, g.lag * 2, rng.integers(0, 1000, g.lag.size)])
    want = np.stack([simulate(g, lag).times for lag in lags])
    assert np.array_equal(simulate_batch(g, lags), want)
    assert np.array_equal(simulate_batch(g, lags[:, edge_order(g)], by_source=True), want)


def test_verdict_simulates_on_the_default_graph(dlrm) -> None:  # noqa: ANN001
    """Given another replay (here calibrated exactly), the candidates are still simulated on
    the graph ``traincast predict`` builds by default: what the printed commands give."""
    from traincast.predict.verdict import opportunities

    ts, pred = dlrm
    tables = traincast.analyze(ts, "breakdown,idle,stragglers", prediction=pred)
    opp = opportunities(ts, tables, pred)
    exact = opportunities(ts, tables, traincast.predict(ts, exact=True))
    assert opp["predicted_ns"].tolist() == exact.set_index("opportunity").loc[
        opp["opportunity"], "predicted_ns"].tolist()


def test_one_window_a_rank_equals_the_sorted_search(dlrm) -> None:  # noqa: ANN001
    """With one marked step a rank, each node's start compared with its rank's window gives
    the rows the search on the rank-major sorted axis gives (nodes before, inside and after
    the window; a rank with no window)."""
    ts, pred = dlrm
    g = pred.graph
    it = ts.iterations
    mk = A.to_numpy(it.column("marker_event")).astype(np.int64)
    it_rank = A.to_numpy(it.column("rank")).astype(np.int64)
    marked = np.flatnonzero(mk >= 0)
    # the marked steps of every rank but the last (a rank with no window)
    rows = marked[it_rank[marked] != it_rank[marked].max()]
    t = g.measured[0:g.n_event_points:2]
    valid = t >= 0
    lo = int(np.min(t, where=valid, initial=np.iinfo(np.int64).max))
    ms, me = g.measured[2 * mk[rows]], g.measured[2 * mk[rows] + 1]
    assert tl._one_marker_a_rank(it_rank[rows], ms, lo, g.node_rank)
    twice = np.r_[it_rank[rows], it_rank[rows[:1]]]  # two windows on one rank
    assert not tl._one_marker_a_rank(twice, np.r_[ms, ms[:1]], lo, g.node_rank)
    assert not tl._one_marker_a_rank(it_rank[rows], ms - 1, int(ms.min()), g.node_rank)
    fast = np.full(g.n_nodes, -1, np.int64)
    tl._rank_windows(fast, rows, it_rank[rows], ms, me, t, valid, g.node_rank)
    slow = np.full(g.n_nodes, -1, np.int64)
    tl._sorted_windows(slow, rows, it_rank[rows], ms, me, t, valid, lo, g.node_rank)
    np.testing.assert_array_equal(fast, slow)
    assert (fast >= 0).any() and ((fast < 0) & valid).any()
