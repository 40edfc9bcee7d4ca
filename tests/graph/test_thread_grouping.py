"""Host threads grouped for the nesting walk (:func:`traincast.graph.build._thread_walk`):
the one-sort grouping of rows already in start order (:func:`_group_threads`) gives the
threads, rows and bounds the per-rank sort (:func:`_sort_threads`) gives, on the real 8-rank
traces, on a 2-rank job whose second rank has no host rows, and on made-up rows; rows out of
start order take the per-rank sort."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph import build
from traincast.graph.build import _group_threads, _in_start_order, _sort_threads


def _both(rows, rank, pid, tid, python, t0, t1):  # type: ignore[no-untyped-def]
    r_of = rank[rows]
    assert _in_start_order(r_of, t0[rows], t1[rows] - t0[rows])
    got = _group_threads(rows, r_of, pid[rows], tid[rows], python[rows])
    want = _sort_threads(rows, r_of, rank, pid, tid, python, t0, t1)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    return got


def test_grouping_matches_per_rank_sort_on_real_traces(traces: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple] = []
    real = build._thread_walk

    def spy(*args):  # type: ignore[no-untyped-def]
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(build, "_thread_walk", spy)
    build.build_graph(traincast.load(traces / "dlrm_8xv100" / "kineto"))
    rows, rank, pid, tid, t0, t1, python = seen[0][:7]
    rs, bounds = _both(rows, rank, pid, tid, python, t0, t1)
    assert bounds.size - 1 == 16  # two threads (ops, python) per rank
    assert sorted(rs.tolist()) == seen[0][0].tolist()


def _job() -> tuple[np.ndarray, ...]:
    """Rows of rank 0 (3 threads, two pids, interleaved; equal starts ordered longest
    first), then rank 1 with events but no host rows; rank 2 with host rows."""
    rank = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2], np.int32)
    pid = np.array([7, 7, 5, 7, 5, 7, 7, 1, 1, 3, 3], np.int64)
    tid = np.array([2, 1, 9, 2, 9, 1, 2, 1, 1, 4, -4], np.int64)
    python = np.array([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], bool)
    t0 = np.array([0, 0, 5, 5, 6, 8, 8, 0, 3, 1, 1], np.int64)
    dur = np.array([9, 4, 2, 1, 1, 3, 1, 1, 1, 5, 2], np.int64)
    rows = np.array([0, 1, 2, 3, 4, 5, 6, 9, 10], np.int64)  # rank 1: no host rows
    return rows, rank, pid, tid, python, t0, t0 + dur


def test_grouping_with_an_empty_rank() -> None:
    rows, rank, pid, tid, python, t0, t1 = _job()
    rs, bounds = _both(rows, rank, pid, tid, python, t0, t1)
    # rank 0: (5, 9), (7, 1), (7, 2), (7, 2, python); rank 2: (3, -4), (3, 4)
    assert rs.tolist() == [2, 4, 1, 5, 0, 6, 3, 10, 9]
    assert bounds.tolist() == [0, 2, 4, 6, 7, 8, 9]
    one = rows[:1]
    for a, b in zip(_group_threads(one, rank[one], pid[one], tid[one], python[one]),
                    _sort_threads(one, rank[one], rank, pid, tid, python, t0, t1),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_rows_out_of_start_order_take_the_per_rank_sort() -> None:
    rows, rank, pid, tid, python, t0, t1 = _job()
    assert not _in_start_order(rank[rows], t0[rows][::-1], (t1 - t0)[rows])
    assert not _in_start_order(np.zeros(2, np.int32), np.zeros(2, np.int64),
                               np.array([1, 2], np.int64))  # equal starts, shorter first
    t0 = t0.copy()
    t0[5] = 1  # rank 0 no longer in start order
    walked = build._thread_walk(rows, rank, pid, tid, t0, t1, python)
    rs, bounds = _sort_threads(rows, rank[rows], rank, pid, tid, python, t0, t1)
    np.testing.assert_array_equal(walked[0], rs)
    np.testing.assert_array_equal(walked[1], bounds)


def test_lexsort_with_narrowed_keys_is_numpys() -> None:
    from traincast.graph.grouped import lexsort

    rng = np.random.default_rng(3)
    n = 5000
    keys = (rng.integers(-2**40, 2**40, n),  # wide: kept
            rng.integers(0, 3, n).astype(np.int64) * 1000,  # fits int16
            rng.integers(-5, 5, n).astype(np.int32),
            rng.integers(0, 40_000, n).astype(np.uint32),  # past int16: kept
            rng.integers(0, 2, n).astype(bool),
            np.sort(rng.integers(0, 1024, n)).astype(np.int32))
    np.testing.assert_array_equal(lexsort(keys), np.lexsort(keys))
    np.testing.assert_array_equal(lexsort((keys[1][:0], keys[2][:0])), np.empty(0, np.int64))


@pytest.mark.parametrize("seed", range(4))
def test_lexsort_of_packed_keys_is_numpys(seed: int) -> None:
    """Keys packed into one composite (one stable argsort) or several (16-bit digits):
    numpy's permutation, ties and extreme values included."""
    from traincast.graph.grouped import lexsort

    rng = np.random.default_rng(seed)
    n = 3000
    few = rng.integers(0, 4, n)  # many ties
    cases = [
        (rng.integers(-2**20, 2**20, n), few.astype(np.int16), few.astype(np.int32)),
        (np.sort(rng.integers(0, 2**25, n)), rng.integers(0, 2**22, n), few, few * 7, few),
        (rng.integers(-2**61, 2**61, n), few),  # spans past 62 bits: numpy's lexsort
        (few.astype(np.uint64) + np.uint64(2**64 - 8), rng.integers(0, 2**40, n)),
        (rng.integers(-30_000, 30_000, n).astype(np.int16), few.astype(np.uint8)),
        (np.zeros(n, np.int64), np.full(n, 5, np.int32)),
        (rng.integers(0, 2**40, n), rng.integers(0, 2**30, n)),  # 70 bits: two composites
    ]
    for keys in cases:
        np.testing.assert_array_equal(lexsort(keys), np.lexsort(keys))


@pytest.mark.parametrize("seed", range(3))
def test_group_statistics_of_packed_pairs_are_numpys(seed: int) -> None:
    """Medians and 10th percentiles per key from pairs sorted as one packed integer (or by
    lexsort past 63 bits): ``np.median`` / ``np.percentile`` of each key's values."""
    from traincast.graph.grouped import group_median, group_percentile10, sorted_pairs

    rng = np.random.default_rng(seed)
    n = 4000
    for key, value in ((rng.integers(-5, 40, n).astype(np.int32), rng.integers(-9, 10**9, n)),
                       (rng.integers(0, 3, n), rng.integers(-2**61, 2**61, n)),  # lexsort
                       (np.full(n, 7), np.full(n, 3))):
        sel = rng.random(n) < 0.7
        got = group_median(key, value, sel, -1)
        want = np.array([int(np.median(value[sel & (key == k)])) if (sel & (key == k)).any()
                         else -1 for k in key.tolist()], np.int64)
        np.testing.assert_array_equal(got, want)
        p10 = group_percentile10(key, value)
        assert p10 == {int(k): int(np.percentile(value[key == k], 10)) for k in np.unique(key)}
        k, v = sorted_pairs(key, value)
        o = np.lexsort((value, key))
        np.testing.assert_array_equal(k, key[o])
        np.testing.assert_array_equal(v, value[o])
