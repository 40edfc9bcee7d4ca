"""Interval unions: one implementation for the analyses and the planner."""

from __future__ import annotations

import numpy as np

from traincast.trace.intervals import length, subtract, union, union_length


def _brute(s: np.ndarray, e: np.ndarray) -> int:
    covered = np.zeros(int(max(e.max(), 1)) + 1, bool)
    for a, b in zip(s.tolist(), e.tolist(), strict=True):
        covered[int(a):int(b)] = True
    return int(covered.sum())


def test_union_length_matches_brute_force_int_and_float() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        s = rng.integers(0, 200, rng.integers(1, 30))
        e = s + rng.integers(0, 40, s.size)
        want = _brute(s, e)
        got = union_length(s, e)
        assert isinstance(got, np.integer) and int(got) == want == length(s, e)
        got_f = union_length(s.astype(float), e.astype(float))
        assert isinstance(got_f, np.floating) and float(got_f) == want


def test_union_length_empty_and_degenerate() -> None:
    assert union_length(np.array([], np.int64), np.array([], np.int64)) == 0
    assert union_length(np.array([5.0]), np.array([5.0])) == 0.0
    assert union_length(np.array([5, 1]), np.array([5, 3])) == 2


def test_union_and_subtract() -> None:
    s, e = union(np.array([0, 5, 2]), np.array([3, 8, 4]))
    assert s.tolist() == [0, 5] and e.tolist() == [4, 8]
    s, e = subtract(np.array([0]), np.array([10]), np.array([2, 6]), np.array([4, 7]))
    assert s.tolist() == [0, 4, 7] and e.tolist() == [2, 6, 10]
