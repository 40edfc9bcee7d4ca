"""The host threads grouped and walked in one compiled pass
(:func:`traincast.graph.numba_kernels.thread_walk`, :func:`traincast.graph.build._thread_walk`)
give the rows, bounds, points, times and parents of the numpy steps (grouping, then the
nesting walk per thread), on the real 8-rank traces and on made-up jobs; rows out of order,
or a rank with too many threads, take the numpy steps. And the THREAD-edge lookup by
destination (:func:`traincast.graph.build._edges_into`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph import build

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _compiled_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")


def _walk_both(rows, rank, pid, tid, t0, t1, python, monkeypatch):  # type: ignore[no-untyped-def]
    """(compiled, numpy) walks with their parent columns; the compiled one must run."""
    p_c = np.full(t0.size, -1, np.int32)
    got = build._walk_compiled(rows, rank, pid, tid, t0, t1, python, p_c)
    with monkeypatch.context() as m:
        m.setattr(build, "_WALK", [None])
        p_n = np.full(t0.size, -1, np.int32)
        want = build._thread_walk(rows, rank, pid, tid, t0, t1, python, p_n)
    return got, p_c, want, p_n


def _same(got, p_c, want, p_n) -> None:  # type: ignore[no-untyped-def]
    assert got is not None
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(p_c, p_n)


def test_compiled_walk_equals_numpy_steps_on_real_traces(traces: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    seen: list[tuple] = []
    real = build._thread_walk

    def spy(*args):  # type: ignore[no-untyped-def]
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(build, "_thread_walk", spy)
    build.build_graph(traincast.load(traces / "dlrm_8xv100" / "kineto"))
    rows, rank, pid, tid, t0, t1, python, _ = seen[0]
    got, p_c, want, p_n = _walk_both(rows, rank, pid, tid, t0, t1, python, monkeypatch)
    _same(got, p_c, want, p_n)
    assert got[1].size - 1 == 16 and (p_c >= 0).sum() > 1000


def _job(seed: int, n: int = 4000, ranks: int = 3, threads: int = 5):  # type: ignore[no-untyped-def]
    """Rows rank by rank in (start, -duration) order, threads interleaved, nested,
    overlapping and touching intervals, equal starts, zero durations, python events."""
    rng = np.random.default_rng(seed)
    rank = np.sort(rng.integers(0, ranks, n)).astype(np.int32)
    pid = rng.choice(np.array([-3, 7, 7], np.int32), n)
    tid = rng.integers(-2, threads - 2, n).astype(np.int32)
    python = rng.random(n) < 0.2
    t0 = rng.integers(0, n // 4, n).astype(np.int64)
    dur = rng.choice(np.array([0, 1, 2, 5, 40, 300], np.int64), n)
    o = np.lexsort((-dur, t0, rank))
    rank, pid, tid, python, t0, dur = rank[o], pid[o], tid[o], python[o], t0[o], dur[o]
    rows = np.flatnonzero(rng.random(n) < 0.8).astype(np.int64)  # some rows not host rows
    return rows, rank, pid, tid, t0, t0 + dur, python


@pytest.mark.parametrize("seed", range(3))
def test_compiled_walk_equals_numpy_steps_on_made_up_jobs(seed: int,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    rows, rank, pid, tid, t0, t1, python = _job(seed)
    _same(*_walk_both(rows, rank, pid, tid, t0, t1, python, monkeypatch))


def test_rows_out_of_order_or_too_many_threads_take_the_numpy_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows, rank, pid, tid, t0, t1, python = _job(5)
    parent = np.full(t0.size, -1, np.int32)
    late = t0.copy()
    late[rows[10]] += 10_000  # a rank's starts out of order
    assert build._walk_compiled(rows, rank, pid, tid, late, t1 + 10_000, python,
                                parent) is None
    assert (parent == -1).all()  # nothing written
    shuffled = rank.copy()
    shuffled[rank == 0], shuffled[rank == 2] = 2, 0  # ranks descending
    assert build._walk_compiled(rows, shuffled, pid, tid, t0, t1, python, parent) is None
    monkeypatch.setattr(build, "_WALK_MAX_THREADS", 4)  # 5 tids x 2 pids x python per rank
    assert build._walk_compiled(rows, rank, pid, tid, t0, t1, python, parent) is None
    assert (parent == -1).all()
    walked = build._thread_walk(rows, rank, pid, tid, late, t1 + 10_000, python, parent)
    monkeypatch.setattr(build, "_WALK", [None])
    p_n = np.full(t0.size, -1, np.int32)
    want = build._thread_walk(rows, rank, pid, tid, late, t1 + 10_000, python, p_n)
    _same(walked, parent, want, p_n)
    # other column types than the schema's: the numpy steps
    assert build._walk_compiled(rows, rank.astype(np.int64), pid, tid, t0, t1, python,
                                parent) is None


def test_edges_into() -> None:
    dst = np.array([9, 4, 6, 1, 12], np.int32)
    got = build._edges_into(dst, 100, np.array([4, 5, 12, 1, 4, 0], np.int64))
    assert got.tolist() == [101, -1, 104, 103, 101, -1]
    assert build._edges_into(dst[:0], 0, np.array([3])).tolist() == [-1]
    assert build._edges_into(dst, 0, np.array([], np.int64)).size == 0


def test_links_written_into_columns_are_the_links(monkeypatch: pytest.MonkeyPatch) -> None:
    from traincast.graph import nesting
    from traincast.graph.nesting import thread_links, thread_links_into

    rng = np.random.default_rng(7)
    bounds = np.r_[0, np.cumsum(rng.integers(1, 9, 40))].astype(np.int64)
    pts = rng.permutation(2 * int(bounds[-1])).astype(np.int32)
    times = np.cumsum(rng.integers(0, 50, pts.size)).astype(np.int64)
    want = thread_links(pts, times, bounds, np.empty(0, np.int64))
    assert want[0].size == pts.size - 40
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(nesting, "_INTO", [None])
        got = (np.full(want[0].size + 2, -9, np.int32), np.full(want[0].size + 2, -9, np.int32),
               np.full(want[0].size + 2, -9, np.int64))
        thread_links_into(pts, times, bounds, *(a[1:-1] for a in got))
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a[1:-1], b)
            assert a[0] == a[-1] == -9  # nothing written outside the views


def test_long_steps_compiled_equal_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from traincast.graph.waits import handoff

    rng = np.random.default_rng(11)
    bounds = np.r_[0, np.cumsum(rng.integers(1, 9, 60))].astype(np.int64)
    times = np.cumsum(rng.integers(0, 100, 2 * int(bounds[-1]))).astype(np.int64)
    times[2 * bounds[1:-1]] += 500  # long steps across chains: never counted
    got = handoff.long_steps(times, bounds, 60)
    monkeypatch.setattr(handoff, "_LONG", [None])
    want = handoff.long_steps(times, bounds, 60)
    assert got.dtype == want.dtype == np.int64 and want.size > 10
    np.testing.assert_array_equal(got, want)
