"""Columns the graph builder keeps compactly (:class:`~traincast.graph.model.LagPatch` for the
calibrated lags, :class:`~traincast.graph.model.SparsePoints` for the anchors, collected with
:class:`~traincast.graph.edge_lists.PointWrites`): they read as the arrays they stand for,
copies and ``dataclasses.replace`` keep them compact, and they pickle (real 8-rank DLRM
traces)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph.build import build_graph
from traincast.graph.edge_lists import PointWrites
from traincast.graph.model import LagPatch, SparsePoints
from traincast.simulate.engine import simulate


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


def test_built_graph_keeps_exact_lags_and_anchors_compact(dlrm: traincast.TraceSet) -> None:
    g = build_graph(dlrm)
    exact = build_graph(dlrm, exact=True)
    assert isinstance(g.__dict__["_exact"], LagPatch)
    assert isinstance(g.__dict__["_anchor"], SparsePoints)
    # they read as the arrays an exact build has
    np.testing.assert_array_equal(g.exact_lag, exact.lag)
    np.testing.assert_array_equal(g.anchor, exact.anchor)
    assert g.anchor.dtype == np.int64
    assert g.exact_lag.dtype == g.lag.dtype == np.int32  # every lag fits int32
    assert g.anchor.size == g.n_points and (g.anchor >= 0).sum() < g.n_points // 100
    assert g.__dict__["_exact"].index.size < g.n_edges // 5
    assert exact.exact_lag is exact.lag
    # the same array while held; replace keeps the compact column (and that array)
    held = g.anchor
    assert g.anchor is held
    d = dataclasses.replace(g, lag=g.exact_lag)
    assert isinstance(d.__dict__["_anchor"], SparsePoints) and d.anchor is held
    assert isinstance(d.__dict__["_exact"], LagPatch)
    np.testing.assert_array_equal(d.lag, exact.lag)


def test_copies_and_pickles(dlrm: traincast.TraceSet) -> None:
    g = build_graph(dlrm)
    c = g.copy()
    assert isinstance(c.__dict__["_anchor"], np.ndarray)  # the copy's own anchors
    c.anchor[0] = 123
    assert c.anchor[0] == 123 and g.anchor[0] != 123
    assert c.__dict__["_exact"] is g.__dict__["_exact"]  # a patch on the original lags
    c.lag[:] = 0
    np.testing.assert_array_equal(c.exact_lag, g.exact_lag)
    back = pickle.loads(pickle.dumps(g))
    np.testing.assert_array_equal(back.anchor, g.anchor)
    np.testing.assert_array_equal(back.exact_lag, g.exact_lag)
    np.testing.assert_array_equal(simulate(back).times, simulate(g).times)


def test_point_writes_last_write_wins() -> None:
    w = PointWrites()
    w[np.array([4, 1, 7])] = np.array([40, 10, 70])
    w[np.array([1])] = -1  # dropped again
    w[np.array([7, 9])] = 5
    w[np.empty(0, np.int64)] = np.empty(0, np.int64)
    idx, val = w.sparse()
    assert idx.tolist() == [4, 7, 9] and val.tolist() == [40, 5, 5]
    np.testing.assert_array_equal(SparsePoints(12, idx, val).array(), w.array(12))
    assert [a.size for a in PointWrites().sparse()] == [0, 0]


def test_lag_patch() -> None:
    base = np.array([5, 6, 7, 8], np.int64)
    lags = np.array([5, 0, 7, 9], np.int64)
    p = LagPatch.of(lags, base)
    assert p.index.tolist() == [1, 3] and p.index.dtype == np.int32
    np.testing.assert_array_equal(p.array(), lags)
    assert p.array() is not base and base.tolist() == [5, 6, 7, 8]
