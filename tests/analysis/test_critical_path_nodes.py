"""The critical path's step selection finds the marker events' nodes by a search when the
nodes' events ascend, as the inverse of every node gives them (negative and missing events
included), and by that inverse otherwise."""

from __future__ import annotations

import importlib

import numpy as np

from traincast.graph.model import ExecutionGraph

cp = importlib.import_module("traincast.analysis.critical_path")


def _graph(node_event: np.ndarray) -> ExecutionGraph:
    n = node_event.size
    z = np.zeros(0, np.int32)
    return ExecutionGraph(node_event=node_event, node_rank=np.zeros(n, np.int32),
                          measured=np.zeros(2 * n, np.int64), src=z, dst=z,
                          lag=np.zeros(0, np.int64), kind=np.zeros(0, np.int8),
                          anchor=np.full(2 * n, -1, np.int64))


def _inverse(node_event: np.ndarray, events: np.ndarray) -> np.ndarray:
    node_of = np.full(int(node_event.max()) + 1, -1, np.int64)
    node_of[node_event] = np.arange(node_event.size)
    return np.where(events >= 0, node_of[np.maximum(events, 0)], -1)


def test_node_of_equals_the_inverse() -> None:
    rng = np.random.default_rng(0)
    ascending = np.sort(rng.choice(5000, 800, replace=False)).astype(np.int32)
    events = np.r_[-1, ascending[[0, 5, -1]], 1 + ascending[3], rng.integers(0, 4000, 50)]
    got = cp._node_of(_graph(ascending), events)
    np.testing.assert_array_equal(got, _inverse(ascending, events))
    assert got.dtype == np.int64 and (got == -1).any() and (got >= 0).any()
    shuffled = rng.permutation(ascending)  # not ascending: the inverse
    np.testing.assert_array_equal(cp._node_of(_graph(shuffled), events),
                                  _inverse(shuffled, events))


def test_node_range_read_without_laying_it_out() -> None:
    """A graph whose node ``i`` is event ``i`` (:class:`NodeRange`, the builder's) gives
    the same nodes of events and events of nodes as that column laid out, without laying
    it out."""
    from traincast.graph.model import NodeRange

    n = 600
    compact = _graph(np.arange(n, dtype=np.int32))
    object.__setattr__(compact, "_node_event", NodeRange(n, np.int32))
    laid = _graph(np.arange(n, dtype=np.int32))
    events = np.r_[-1, 0, 5, n - 1, 17, 300]
    np.testing.assert_array_equal(cp._node_of(compact, events), cp._node_of(laid, events))
    nodes = np.array([0, 3, n - 1, 250])
    np.testing.assert_array_equal(cp._events_of(compact, nodes), cp._events_of(laid, nodes))
    assert vars(compact)["_node_event"].__dict__.get("_laid") is None  # never laid out
