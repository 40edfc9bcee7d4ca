"""Interval unions: one implementation for the analyses and the planner."""

from __future__ import annotations

import numpy as np

from traincast.trace.intervals import (
    RankLine,
    clipped_lengths,
    gaps,
    length,
    subtract,
    union,
    union_length,
)


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


def _brute_windows(s, e, lo, hi):  # type: ignore[no-untyped-def]
    """Per window: covered length and the uncovered stretches, from a covered-ns table."""
    top = int(max([*e.tolist(), *hi.tolist(), 1])) + 1
    covered = np.zeros(top, bool)
    for a, b in zip(s.tolist(), e.tolist(), strict=True):
        covered[max(a, 0):max(b, 0)] = True
    lengths, holes = [], []
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        cov = covered[a:b] if b > a else covered[:0]
        lengths.append(int(cov.sum()))
        stretches, t = [], a
        while t < b:
            if covered[t]:
                t += 1
                continue
            u = t
            while u < b and not covered[u]:
                u += 1
            stretches.append((t, u))
            t = u
        holes.append(stretches)
    return lengths, holes


def test_clipped_lengths_and_gaps_match_brute_force() -> None:
    """Overlapping intervals, windows with no interval, empty and inverted windows."""
    rng = np.random.default_rng(11)
    for trial in range(200):
        n = int(rng.integers(0, 25))
        s = rng.integers(0, 200, n)
        e = s + rng.integers(0, 40, n)  # overlapping and zero-length ones
        us, ue = union(s, e)
        w = int(rng.integers(1, 8))
        lo = rng.integers(0, 230, w)
        hi = lo + rng.integers(-5, 60, w)  # some inverted, some empty
        lengths, holes = _brute_windows(s, e, lo, hi)
        assert clipped_lengths(us, ue, lo, hi).tolist() == lengths, trial
        win, g0, g1 = gaps(us, ue, lo, np.maximum(hi, lo))
        got = [[(int(a), int(b)) for a, b in zip(g0[win == i], g1[win == i], strict=True)]
               for i in range(w)]
        assert got == holes, trial


def test_rank_line_keeps_ranks_apart() -> None:
    """Intervals of several ranks on one axis: the union, lengths and gaps of each rank are
    its own (an empty rank has none; touching ends across ranks do not merge)."""
    rng = np.random.default_rng(5)
    ranks = np.array([0, 3, 4, 9])  # rank 4 gets no interval
    rank = rng.choice([0, 3, 9], 60)
    s = rng.integers(100, 300, rank.size)
    e = s + rng.integers(0, 50, rank.size)
    s[:2], e[:2], rank[:2] = [250, 100], [350, 120], [0, 3]  # rank 0 ends where 3 starts
    w_rank = np.repeat(ranks, 2)
    lo = np.tile([90, 200], ranks.size)
    hi = np.tile([200, 360], ranks.size)
    line = RankLine.of(ranks, s, e, lo, hi)
    assert line is not None
    us, ue = union(line.at(rank, s), line.at(rank, e))
    assert set(line.key_of(us).tolist()) <= {0, 3, 9}
    got_len = clipped_lengths(us, ue, line.at(w_rank, lo), line.at(w_rank, hi))
    win, g0, g1 = gaps(us, ue, line.at(w_rank, lo), line.at(w_rank, hi))
    for i, r in enumerate(w_rank.tolist()):
        m = rank == r
        ms, me = union(s[m], e[m])
        assert got_len[i] == clipped_lengths(ms, me, lo[i:i + 1], hi[i:i + 1])[0]
        w0, a, b = gaps(ms, me, lo[i:i + 1], hi[i:i + 1])
        base = line.base(np.array([r]))[0]
        assert (g0[win == i] - base).tolist() == a.tolist()
        assert (g1[win == i] - base).tolist() == b.tolist()
    assert RankLine.of(np.arange(4), np.array([0, 2**61])) is None  # would not fit int64


def test_union_of_sorted_and_shuffled_intervals_agree() -> None:
    """Sorted input skips the sort, input without empty intervals the filter: the same
    union as any order (touching, nested, empty and equal-start intervals), and the
    caller's arrays are never returned or changed."""
    rng = np.random.default_rng(5)
    for trial in range(50):
        s = rng.integers(0, 200, int(rng.integers(0, 40)))
        e = s + rng.integers(-2 if trial % 2 else 1, 30, s.size)
        o = np.lexsort((e, s))
        s_sorted, e_sorted = s[o].copy(), e[o].copy()
        before = (s_sorted.copy(), e_sorted.copy())
        got = union(s_sorted, e_sorted)
        want = union(s[::-1].copy(), e[::-1].copy())
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
        assert (s_sorted == before[0]).all() and (e_sorted == before[1]).all()
        if s.size:
            assert got[0] is not s_sorted and got[1] is not e_sorted


def test_gaps_by_blocks_of_windows_equal_one_block() -> None:
    """Windows taken a block at a time (blocks smaller than one window's intervals
    included) give the gaps of one pass, in the same order."""
    rng = np.random.default_rng(3)
    s = np.sort(rng.integers(0, 100_000, 3000))
    us, ue = union(s, s + rng.integers(1, 60, s.size))
    lo = np.sort(rng.integers(-500, 100_500, 200))
    hi = lo + rng.integers(0, 3000, lo.size)
    whole = gaps(us, ue, lo, hi)
    for chunk in (1, 7, 100, 5000):
        for a, b in zip(gaps(us, ue, lo, hi, chunk=chunk), whole, strict=True):
            assert np.array_equal(a, b)
