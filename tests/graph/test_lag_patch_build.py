"""The builder keeps the calibrated lags as a patch on the structural ones without laying
out the calibrated column (:meth:`traincast.graph.edge_lists.EdgeLists.take_patched`,
:func:`traincast.graph.build._relax_waits` on the patch): read back, they are the lags
``exact=True`` builds, on a 2-rank gloo job whose waits (ISSUE, WAIT, host-side EXEC) relax
THREAD edges and whose calibrated lags differ from the structural ones, and on the real
8-rank traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from synth_trace import Trace

import traincast
from traincast.graph.build import build_graph
from traincast.graph.edge_lists import Deferred, EdgeLists
from traincast.graph.model import EdgeKind


def _gloo_job(folder: Path) -> Path:
    for rank, late in ((0, 0), (1, 40)):
        t = Trace(rank=rank, world_size=2, pid=100 + rank)
        t.host_name = "node0"
        t.step(1, 0, 1000)
        t.host("aten::mm", 10, 80 + late)
        t.host("c10d::allreduce_", 100 + late, 20)
        t.host("gloo:all_reduce", 110 + late + 6 * rank, 200 - late - 6 * rank,
               cat="user_annotation", **{"tid": 2, "Input Dims": [[1024]],
                                         "Input type": ["float"]})
        t.host("aten::add_", 330 + 7 * rank, 100)
        t.host("aten::mul", 440, 100)
        t.write(folder)
    return folder


def test_patched_lags_are_the_exact_build_on_a_gloo_job(tmp_path: Path) -> None:
    ts = traincast.load(_gloo_job(tmp_path))
    g, ge = build_graph(ts), build_graph(ts, exact=True)
    for k in (EdgeKind.WAIT, EdgeKind.ISSUE, EdgeKind.EXEC):
        assert (g.kind == int(k)).any()
    patch = g.__dict__["_exact"]
    assert patch.index.size and patch.index.dtype == np.int32
    assert np.all(np.diff(patch.index) > 0)
    np.testing.assert_array_equal(g.exact_lag, ge.lag)
    np.testing.assert_array_equal(g.src, ge.src)


def test_patched_lags_are_the_exact_build_on_real_traces(traces: Path) -> None:
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    np.testing.assert_array_equal(build_graph(ts).exact_lag, build_graph(ts, exact=True).lag)


def test_take_patched_is_take() -> None:
    a, b = EdgeLists(np.int32), EdgeLists(np.int32)
    for e in (a, b):
        e.add(np.array([0, 2]), np.array([1, 3]), np.array([5, -1]), EdgeKind.THREAD)
        e.add(np.array([4, 6, 8]), np.array([5, 7, 9]), np.array([7, 2, 3]), EdgeKind.EXEC,
              np.array([3, 2, -4]))
        e.add(np.array([1]), np.array([2]), np.array([4]), EdgeKind.SYNC, np.array([1]))
    src, dst, exact, structural, kind = a.take()
    got = b.take_patched()
    for x, y in zip((src, dst, structural), got[:3], strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(got[5], kind)
    assert got[3].tolist() == [2, 4, 5] and got[4].tolist() == [7, 3, 4]
    assert not (b.src or b.lag or b.structural or b.kind)


def test_batches_hold_lags_int32_where_they_fit() -> None:
    """A batch's lags are held as int32 when they fit (the build's batches pile up), int64
    when one does not; joined, the columns are the values given (negatives raised to 0) in
    int64, or int32 patched structural lags only when every batch fits."""
    big = 2**31 + 5
    e = EdgeLists(np.int32)
    e.add(np.array([0, 2]), np.array([1, 3]), np.array([5, -1]), EdgeKind.THREAD)
    e.add(np.array([4]), np.array([5]), np.array([big]), EdgeKind.EXEC, np.array([3]))
    assert e.lag[0].dtype == np.int32 and e.lag[0] is e.structural[0]
    assert e.lag[1].dtype == np.int64 and e.structural[1].dtype == np.int32
    src, dst, exact, structural, kind = e.arrays()
    assert exact.dtype == np.int64 and exact.tolist() == [5, 0, big]
    assert structural.tolist() == [5, 0, 3]
    got = e.take_patched()
    assert got[2].dtype == np.int32 and got[2].tolist() == [5, 0, 3]
    assert got[3].tolist() == [2] and got[4].tolist() == [big] and got[4].dtype == np.int64
    wide = EdgeLists(np.int32)
    wide.add(np.array([0]), np.array([1]), np.array([big]), EdgeKind.EXEC)
    assert wide.take_patched()[2].dtype == np.int64


def test_a_deferred_batch_is_written_into_its_place() -> None:
    def fill(src: np.ndarray, dst: np.ndarray, lag: np.ndarray) -> None:
        src[:], dst[:], lag[:] = [10, 11], [12, 13], [3, 0]

    a, b = EdgeLists(np.int32), EdgeLists(np.int32)
    for e in (a, b):
        e.add(np.array([4]), np.array([5]), np.array([7]), EdgeKind.EXEC, np.array([3]))
        e.add_deferred(Deferred(2, fill), EdgeKind.THREAD)
        e.add_deferred(Deferred(0, fill), EdgeKind.THREAD)  # nothing
        e.add(np.array([1]), np.array([2]), np.array([4]), EdgeKind.SYNC)
    assert a.size() == 4
    src, dst, exact, structural, kind = a.arrays()
    assert src.tolist() == [4, 10, 11, 1] and dst.tolist() == [5, 12, 13, 2]
    assert exact.tolist() == [7, 3, 0, 4] and structural.tolist() == [3, 3, 0, 4]
    assert kind.tolist() == [int(EdgeKind.EXEC), 0, 0, int(EdgeKind.SYNC)]
    got = b.take_patched()
    np.testing.assert_array_equal(got[2], structural)
    assert got[3].tolist() == [0] and got[4].tolist() == [7]
    assert a.size() == 4 and b.size() == 0


def test_on_ranks_of_is_isin() -> None:
    from traincast.graph.waits.common import on_ranks_of

    rng = np.random.default_rng(2)
    for lo in (0, -3):
        rank = rng.integers(lo, 9, 500).astype(np.int32)
        rows = np.flatnonzero(rank % 3 == 0)
        of = rng.integers(0, 500, 200)
        np.testing.assert_array_equal(on_ranks_of(rank, rows, of),
                                      np.isin(rank[of], np.unique(rank[rows])))
