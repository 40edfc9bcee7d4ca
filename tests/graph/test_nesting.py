"""The one host-event nesting walk (traincast.graph.nesting) and its two overlap policies."""

from __future__ import annotations

import numpy as np
import pytest

from traincast.graph.nesting import nest_parents, nest_walk


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
