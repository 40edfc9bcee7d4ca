"""The one host-event nesting walk (traincast.graph.nesting) and its two overlap policies."""

from __future__ import annotations

import numpy as np
import pytest

from traincast.graph.nesting import nest_parents, nest_walk, thread_chain
from traincast.graph.nesting_np import nest_segments


def _parents(starts: list[int], ends: list[int], overlap: str) -> list[int]:
    return nest_parents(np.array(starts), np.array(ends), overlap).tolist()  # type: ignore[arg-type]


def test_proper_nesting_is_the_same_under_both_policies() -> None:
    # A [0, 100) holds B [10, 50) holding C [20, 30); D [60, 90) in A; E [200, 210) top level
    s, e = [0, 10, 20, 60, 200], [100, 50, 30, 90, 210]
    for overlap in ("clip", "sibling"):
        assert _parents(s, e, overlap) == [-1, 0, 1, 0, -1]


def test_an_overlapping_event_is_clipped_or_a_sibling() -> None:
    # A [0, 100) holds B [10, 50); C [40, 70) starts in B and outlives it
    s, e = [0, 10, 40], [100, 50, 70]
    assert _parents(s, e, "clip") == [-1, 0, 1]  # C clipped to B's end, a child of B
    assert _parents(s, e, "sibling") == [-1, 0, 0]  # C a sibling of B, inside A
    order, eff, _ = nest_walk(s, e, "clip")
    assert eff.tolist() == [100, 50, 50]
    assert order.tolist() == [0, 2, 4, 5, 3, 1]  # points in nesting order


def test_touching_events() -> None:
    # B starts at the instant A ends: sequence for the graph, inside A for op work when it
    # has no duration
    s, e = [0, 10], [10, 10]
    assert _parents(s, e, "clip") == [-1, -1]
    assert _parents(s, e, "sibling") == [-1, 0]


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        nest_walk([0], [1], "nested")  # type: ignore[arg-type]


# ------------------------------------------------ the closed form in numpy (nesting_np)


def _walked(rs: np.ndarray, bounds: np.ndarray, t0: np.ndarray, t1: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference: :func:`nest_walk` of each thread, mapped to rows as the graph's
    chains are (``thread_chain``)."""
    parts = [thread_chain(rs[a:b], t0, t1)
             for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]


def _threads(rng: np.random.Generator, nested: bool) -> tuple[np.ndarray, ...]:
    """1-4 threads of 1-40 events over rows in random order, each thread sorted by (start,
    -duration); ``nested``: every event inside the one open when it starts (ties, zero
    durations and touching ends included), else random intervals (overlaps: clipped)."""
    sizes = rng.integers(1, 40, rng.integers(1, 5))
    bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = int(bounds[-1])
    t0, t1 = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        cur, stack = 0, []
        for i in range(a, b):
            if not nested:
                t0[i] = rng.integers(0, 60)
                t1[i] = t0[i] + rng.choice([0, 1, 2, 5, 10, 30, -1])
                continue
            while stack and rng.random() < 0.4:
                cur = max(cur, int(t1[stack.pop()]))
            start = cur + int(rng.integers(0, 3))
            lim = int(t1[stack[-1]]) if stack else start + 50
            start = min(start, lim)
            t0[i], t1[i] = start, min(start + int(rng.integers(0, lim - start + 1)), lim)
            stack.append(i)
            cur = start
    perm = rng.permutation(n)
    t0, t1 = t0[perm], t1[perm]  # rows in any order; each thread's rows sorted
    rs = np.argsort(perm)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        rows = rs[a:b]
        rs[a:b] = rows[np.lexsort((-(t1[rows] - t0[rows]), t0[rows]))]
    return rs, bounds, t0, t1


@pytest.mark.parametrize("nested", [True, False])
def test_the_closed_form_is_the_walk(nested: bool) -> None:
    """Every thread at once in numpy equals the walk, thread by thread: nested threads
    without walking any, overlapping ones by walking those that clip."""
    rng = np.random.default_rng(7 if nested else 8)
    walked: list[int] = []

    def walk(a: list[int], b: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        walked.append(len(a))
        return nest_walk(a, b)

    for _ in range(400):
        rs, bounds, t0, t1 = _threads(rng, nested)
        got = nest_segments(rs, t0, t1, bounds, walk)
        assert got is not None
        for x, y in zip(got, _walked(rs, bounds, t0, t1), strict=True):
            np.testing.assert_array_equal(x, y)
    assert (walked == []) if nested else walked


def test_the_closed_form_declines_times_it_cannot_lay_out() -> None:
    rs, bounds = np.array([0, 1]), np.array([0, 1, 2])
    assert nest_segments(rs, np.array([-5, 3]), np.array([1, 9]), bounds, nest_walk) is None
    big = np.array([0, 1 << 62])  # one thread spanning 2**62 ns
    assert nest_segments(rs, big, big + 1, np.array([0, 2]), nest_walk) is None
    assert nest_segments(rs, big, big + 1, bounds, nest_walk) is not None  # (two threads)
    empty = nest_segments(np.empty(0, np.int64), big, big, np.array([0]), nest_walk)
    assert empty is not None and all(x.size == 0 for x in empty)
