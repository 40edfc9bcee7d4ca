"""Lags stored as int32 where they fit: a write that does not fit widens them to int64 exactly
(never a wrap), and a what-if that lengthens an edge past 2**31 ns gives the times the int64
layout gives (real 8-rank DLRM traces)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph.build import build_graph
from traincast.graph.model import LagPatch, compact_lags, lags_fit, take_lags
from traincast.simulate.engine import simulate
from traincast.whatif.apply import apply_what_if
from traincast.whatif.scale import scale_durations
from traincast.whatif.spec import parse_what_if

BIG = 1 << 33  # ns: past int32 (8.6 s)


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def graph(dlrm: traincast.TraceSet):  # noqa: ANN201
    return build_graph(dlrm)


def _wide(g):  # noqa: ANN001, ANN202 - the same graph with int64 lags (the layout before)
    return dataclasses.replace(g, lag=g.lag.astype(np.int64),
                               exact_lag=g.exact_lag.astype(np.int64), structure={})


def test_compact_lags_only_where_every_lag_fits() -> None:
    small = np.array([0, 5, 2**31 - 1], np.int64)
    assert compact_lags(small).dtype == np.int32
    np.testing.assert_array_equal(compact_lags(small), small)
    big = np.array([0, 2**31], np.int64)
    assert compact_lags(big).dtype == np.int64
    assert lags_fit(np.array([-2**31]), np.int32) and not lags_fit(np.array([2**31]), np.int32)
    assert lags_fit(np.array(2**40), np.int64)
    # a patch whose values do not fit its int32 base lays out as int64, exactly
    patch = LagPatch(small.astype(np.int32), np.array([1], np.int32), np.array([BIG]))
    out = patch.array()
    assert out.dtype == np.int64 and out.tolist() == [0, BIG, 2**31 - 1]


def test_set_lags_widens_a_copy_exactly(graph) -> None:  # noqa: ANN001
    assert graph.lag.dtype == np.int32 and not graph.lag.flags.writeable
    with pytest.raises(ValueError):  # the built graph's lags: read-only, never written
        graph.lag[0] = 1
    with pytest.raises(ValueError, match="copy"):
        graph.set_lags([0], BIG)
    g = graph.copy()
    assert g.lag.dtype == np.int32 and g.lag.flags.writeable
    g.set_lags([3], 7)  # fits: no widening
    assert g.lag.dtype == np.int32 and g.lag[3] == 7
    g.set_lags(np.array([4, 5]), np.array([BIG, 9]))
    assert g.lag.dtype == np.int64 and g.lag[4] == BIG and g.lag[3] == 7
    np.testing.assert_array_equal(np.delete(g.lag, [3, 4, 5]),
                                  np.delete(graph.lag, [3, 4, 5]))
    assert graph.lag.dtype == np.int32  # the original untouched
    c = graph.copy_lags()
    assert c.lag.dtype == np.int32 and c.lag is not graph.lag
    c.widen_lags()
    assert c.lag.dtype == np.int64 and graph.lag.dtype == np.int32


def test_take_lags_converts_in_chunks(graph) -> None:  # noqa: ANN001
    order = np.argsort(graph.src, kind="stable")
    out = np.empty(graph.n_edges, np.int64)
    take_lags(graph.lag, order, out)
    np.testing.assert_array_equal(out, graph.lag[order])


@pytest.fixture(params=["numpy", "compiled"])
def paths(request, monkeypatch) -> None:  # noqa: ANN001
    """The numpy paths, then the compiled ones however small the graph."""
    if request.param == "compiled":
        monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
        monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")


def test_lengthening_past_int32_is_the_int64_result(dlrm, graph, paths) -> None:  # noqa: ANN001
    """A slowdown that makes kernels last seconds (lags past 2**31 ns): the what-if's lags
    are widened (the int32 copy would wrap) and its replay is the int64 graph's."""
    wide = _wide(graph)
    what = parse_what_if(["speedup=kind:kernel=0.000001"])  # 1e6x slower kernels
    a32 = apply_what_if(dlrm, graph, what).graph
    a64 = apply_what_if(dlrm, wide, what).graph
    assert int(a64.lag.max()) >= 2**31  # the what-if does lengthen an edge past int32
    assert a32.lag.dtype == np.int64  # widened, not wrapped
    np.testing.assert_array_equal(a32.lag, a64.lag)
    np.testing.assert_array_equal(simulate(a32).times, simulate(a64).times)
    # a what-if whose lags all fit keeps the compact type, with the int64 graph's values
    mild = parse_what_if(["speedup=kind:kernel=2"])
    m32, m64 = apply_what_if(dlrm, graph, mild).graph, apply_what_if(dlrm, wide, mild).graph
    assert m32.lag.dtype == np.int32
    np.testing.assert_array_equal(m32.lag, m64.lag)
    np.testing.assert_array_equal(simulate(m32).times, simulate(m64).times)
    # scale_durations gives int64 lags
    sel = np.ones(dlrm.events.num_rows, bool)
    s32, s64 = scale_durations(graph, sel, 1e6), scale_durations(wide, sel, 1e6)
    assert s32.dtype == np.int64 and int(s32.max()) >= 2**31
    np.testing.assert_array_equal(s32, s64)
    np.testing.assert_array_equal(simulate(graph, s32).times, simulate(wide, s64).times)


def test_int32_lags_replay_as_int64(graph, paths) -> None:  # noqa: ANN001
    wide = _wide(graph)
    np.testing.assert_array_equal(simulate(graph).times, simulate(wide).times)
    np.testing.assert_array_equal(graph.exact_lag, wide.exact_lag)
