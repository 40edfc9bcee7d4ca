"""Times of points read from their parts during the build (:mod:`traincast.graph.chain_times`):
event points' measured times from the events' columns and the ranks' clock offsets equal the
laid-out column (real shared traces); the chain times (measured but at the clipped ends) by
position and by slices of whole chains equal the walk's times; the long steps of the
handoff model read from them equal those of the array; and the compiled walk reports the
clipped ends the numpy steps find (made-up jobs with clipped ends)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph import build
from traincast.graph.build import build_graph
from traincast.graph.chain_times import ChainTimes, Ends, EventPoints
from traincast.graph.waits import handoff

SETS = ["dlrm_8xv100/kineto", "hta/sampled_128rank_sendrecv"]


@pytest.mark.parametrize("name", SETS)
def test_event_points_are_the_laid_out_measured_times(traces: Path, name: str) -> None:
    with warnings.catch_warnings():  # (the shared sets' load warnings are not under test)
        warnings.simplefilter("ignore")
        ts = traincast.load(traces / name)
        graph = build_graph(ts)
    ev = ts.events
    rank = ev.column("rank").to_numpy()
    shifted = [(r, o) for r, o in graph.clock_offset.items() if o]
    points = EventPoints(ev.column("ts").to_numpy(), ev.column("dur").to_numpy(), rank,
                         shifted)
    n2 = 2 * ev.num_rows
    every = np.arange(n2, dtype=np.int32)
    np.testing.assert_array_equal(points[every], graph.measured[:n2])
    some = np.array([n2 - 1, 0, 7, 7, 2], np.int64)
    np.testing.assert_array_equal(points[some], graph.measured[some])
    t0, t1 = graph.measured[0:n2:2], graph.measured[1:n2:2]
    np.testing.assert_array_equal(Ends(t0, t1)[every], graph.measured[:n2])


def _chains(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(measured column, points, bounds, walk times with a few ends clipped)."""
    rng = np.random.default_rng(seed)
    measured = np.cumsum(rng.integers(0, 90_000, 4000)).astype(np.int64)
    pts = rng.permutation(4000)[:3000].astype(np.int32)
    bounds = np.r_[0, np.sort(rng.choice(np.arange(1, 1500), 40, replace=False)), 1500]
    times = measured[pts]
    times[rng.choice(3000, 50, replace=False)] -= rng.integers(1, 60_000, 50)
    return measured, pts, bounds.astype(np.int64), times


@pytest.mark.parametrize("seed", range(2))
def test_chain_times_by_position_and_slice(seed: int) -> None:
    measured, pts, bounds, times = _chains(seed)
    at = np.flatnonzero(times != measured[pts])
    tm = ChainTimes(pts, at, times[at], measured)
    assert tm.size == pts.size
    q = np.array([0, 5, 2999, 5, int(at[3])], np.int64)
    np.testing.assert_array_equal(tm[q], times[q])
    np.testing.assert_array_equal(tm[np.arange(pts.size)], times)
    seen = 0
    for s0, s1, a, t in tm.slices(bounds, size=101):
        assert a == 2 * bounds[s0] == seen and t.size == 2 * (bounds[s1] - bounds[s0])
        np.testing.assert_array_equal(t, times[a:a + t.size])
        seen += t.size
    assert seen == pts.size
    for compiled in ("0", "100000000"):  # the compiled kernel, then the numpy path
        with pytest.MonkeyPatch.context() as m:
            m.setenv("TRAINCAST_NUMBA_MIN_SIZE", compiled)
            np.testing.assert_array_equal(handoff.long_steps(tm, bounds, 60_000),
                                          handoff.long_steps(times, bounds, 60_000))


def test_compiled_walk_reports_the_clipped_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numba")
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    rng = np.random.default_rng(3)
    n = 3000
    rank = np.sort(rng.integers(0, 2, n)).astype(np.int32)
    pid = np.full(n, 7, np.int32)
    tid = rng.integers(0, 3, n).astype(np.int32)
    python = np.zeros(n, bool)
    t0 = rng.integers(0, n // 3, n).astype(np.int64)
    dur = rng.choice(np.array([0, 3, 8, 50], np.int64), n)
    o = np.lexsort((-dur, t0, rank))
    rank, tid, t0, dur = rank[o], tid[o], t0[o], dur[o]
    rows = np.arange(n, dtype=np.int64)
    p_c = np.full(n, -1, np.int32)
    got = build._walk_compiled(rows, rank, pid, tid, t0, t0 + dur, python, p_c, 3)
    monkeypatch.setattr(build, "_WALK", [None])
    p_n = np.full(n, -1, np.int32)
    want = build._thread_walk(rows, rank, pid, tid, t0, t0 + dur, python, p_n, 3)
    assert got is not None and got[3].size > 10  # (ends clipped to their parents')
    assert got[5].size > 10  # (and long steps)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(p_c, p_n)
    # the times they stand for: each point's start or end but at the clipped positions
    rs, bounds, pts, at, val, steps = got[:6]
    times = ChainTimes(pts, at, val, Ends(t0, t0 + dur))[np.arange(pts.size)]
    measured = np.where(pts & 1, (t0 + dur)[pts >> 1], t0[pts >> 1])
    assert (times[at] != measured[at]).all() and (pts[at] & 1).all()  # clipped: ends
    keep = np.ones(pts.size, bool)
    keep[at] = False
    np.testing.assert_array_equal(times[keep], measured[keep])
    # the long steps the walk found are those of its times
    np.testing.assert_array_equal(steps, handoff.long_steps(times, bounds, 3))
