"""The idle attribution reads the measured times from the graph's compact column
(:class:`~traincast.analysis.point_times.PointTimes`) instead of laying them out: every read
equals the laid-out column, the compiled walk gives the same chains from either form, and
the attribution the same table (real shared traces, one copy with skewed rank clocks so that
the ranks' clock offsets are read)."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pandas as pd
import pytest

import traincast
from traincast.analysis import idle as I
from traincast.analysis.point_times import PointTimes, _segments
from traincast.graph.model import MeasuredPoints

SKEW_US = {3: 5_000.0, 6: -7_250.5}  # per rank, µs (trace units)


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def skewed(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> traincast.TraceSet:
    """dlrm with ranks on four hosts, two of them shifted: several ranks get an offset."""
    out = tmp_path_factory.mktemp("skew") / "kineto"
    out.mkdir()
    for f in sorted((traces / "dlrm_8xv100" / "kineto").glob("rank-*.json.gz")):
        rank = int(f.name.split("-")[1].split(".")[0])
        d = orjson.loads(gzip.decompress(f.read_bytes()))
        d["host_name"] = f"host{rank % 2 if rank not in SKEW_US else rank}"
        for e in d["traceEvents"]:
            if "ts" in e:
                e["ts"] = float(e["ts"]) + SKEW_US.get(rank, 0.0)
        (out / f.name).write_bytes(gzip.compress(orjson.dumps(d), compresslevel=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traincast.load(out)


@pytest.fixture(scope="module", params=["dlrm", "skewed"])
def case(request: pytest.FixtureRequest) -> tuple:
    """(name, TraceSet, its prediction)."""
    ts = request.getfixturevalue(request.param)
    return request.param, ts, traincast.predict(ts)


def test_compact_reads_are_the_laid_out_column(case: tuple) -> None:
    name, _, pred = case
    g = pred.graph
    stored = vars(g)["_measured"]
    assert isinstance(stored, MeasuredPoints)
    t = PointTimes.of_graph(g)
    assert t.compact is stored and t.size == g.n_points
    want = g.measured.copy()  # (laid out here, dropped below: the compact form is read)
    if name == "skewed":  # several ranks' offsets, rows between them without
        assert np.count_nonzero(stored.offset) >= 2 and t.seg_lo.size > 3
    np.testing.assert_array_equal(t.at(np.arange(g.n_points)), want)
    rng = np.random.default_rng(1)
    pts = rng.integers(0, g.n_points, 500)
    np.testing.assert_array_equal(t.at(pts), want[pts])
    rows = rng.integers(0, g.n_nodes, 500)
    s, e = t.start_end(rows)
    np.testing.assert_array_equal(s, want[2 * rows])
    np.testing.assert_array_equal(e, want[2 * rows + 1])
    # the kernel's columns, read as gap_chains reads them: the segment of each row
    _, ts_col, dur, seg_lo, seg_off, barrier = t.kernel_columns()
    row = np.arange(g.n_nodes)
    off = seg_off[np.searchsorted(seg_lo, row, "right") - 1]
    np.testing.assert_array_equal(ts_col - off, want[0:g.n_event_points:2])
    np.testing.assert_array_equal(ts_col - off + dur, want[1:g.n_event_points:2])
    np.testing.assert_array_equal(barrier, want[g.n_event_points:])
    assert seg_lo[0] == 0 and seg_lo[-1] == g.n_nodes and (np.diff(seg_lo) > 0).all()
    # an array gives the same reads
    a = PointTimes(want)
    np.testing.assert_array_equal(a.at(pts), want[pts])
    np.testing.assert_array_equal(a.start_end(rows)[0], s)


def test_gap_chains_same_from_compact_and_array(case: tuple) -> None:
    _, _, pred = case
    g = pred.graph
    patch = I._exact_patch(g)
    chains = I._chains_kernel(None)
    if patch is None or chains is None:
        pytest.skip("no compiled walk with a patch here")
    from traincast.graph.jit import read_only

    args = read_only(g.src, g.dst, g.lag, patch.index, patch.values, g.kind, I._PRIO)
    want = g.measured.copy()
    # chains from the starts of many ops back to a while before them
    rows = np.arange(0, g.n_nodes, 3, dtype=np.int64)
    cur, stop = read_only(2 * rows, want[2 * rows] - 50_000)
    got = []
    for t in (PointTimes.of_graph(g), PointTimes(want)):
        into = np.full(t.size, -1, np.int32)
        out = chains(*args, *t.kernel_columns(), into, cur, stop, I.MAX_STEPS)
        got.append((into, *out))
    assert (got[0][0] >= 0).sum() > g.n_nodes  # binding edges were found
    assert (got[0][1] >= 0).any() and got[0][3].any()
    for x, y in zip(*got, strict=True):
        np.testing.assert_array_equal(x, y)


def test_idle_same_from_compact_and_laid_out(case: tuple,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _, ts, pred = case
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the compiled walk, as at scale
    read = []
    real = PointTimes.of_graph
    monkeypatch.setattr(PointTimes, "of_graph",
                        classmethod(lambda cls, g: read.append(1) or real(g)))
    got = I.idle_attribution(ts, graph=pred.graph)
    assert read
    monkeypatch.setattr(PointTimes, "of_graph",
                        classmethod(lambda cls, g: cls(array=g.measured)))
    want = I.idle_attribution(ts, graph=pred.graph)
    pd.testing.assert_frame_equal(got, want)
    assert want["gaps"].sum() > 0


def test_segments_cover_the_rows() -> None:
    n = 20
    z = np.zeros(n, np.int64)
    # offsets on rows 2..5 and 9..14, an empty range, rows outside any range: none
    m = MeasuredPoints(np.arange(n, dtype=np.int64) * 10, z + 3, np.array([2, 7, 9]),
                       np.array([5, 7, 14]), np.array([4, 99, -6], np.int64),
                       np.array([1000], np.int64))
    seg_lo, seg_off = _segments(m)
    np.testing.assert_array_equal(seg_lo, [0, 2, 5, 9, 14, 20])
    np.testing.assert_array_equal(seg_off, [0, 4, 0, -6, 0])
    t = PointTimes(compact=m)
    np.testing.assert_array_equal(t.at(np.arange(m.size)), m.array())
    # no offsets: one segment; no rows: none read
    one = MeasuredPoints(m.start, m.dur, np.empty(0, np.int64), np.empty(0, np.int64),
                         np.empty(0, np.int64), m.barrier)
    assert [a.tolist() for a in _segments(one)] == [[0, n], [0]]
    np.testing.assert_array_equal(PointTimes(compact=one).at(np.arange(one.size)),
                                  one.array())
    # overlapping ranges (not what the builder makes): the column is laid out instead
    bad = MeasuredPoints(m.start, m.dur, np.array([2, 4]), np.array([6, 8]),
                         np.array([1, 2], np.int64), m.barrier)
    assert _segments(bad) is None
    graph = SimpleNamespace(_measured=bad, measured=bad.array())
    t = PointTimes.of_graph(graph)  # type: ignore[arg-type]
    assert t.compact is None and t.at(np.arange(3)) is not None
    np.testing.assert_array_equal(t.at(np.arange(bad.size)), bad.array())
