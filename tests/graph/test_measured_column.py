"""The builder's measured times stored compactly (:class:`MeasuredPoints`: the events' ts/dur
columns, the ranks' clock offsets, the barrier times): laid out on read, equal to the column
made from the events, read point by point without laying it out (real shared traces)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph.build import build_graph
from traincast.graph.model import MeasuredPoints

SETS = ["dlrm_8xv100/kineto", "hta/a100_2rank_nccl", "hta/sampled_128rank_sendrecv",
        "linear_1x2080ti/kineto.pt.trace.json.gz"]


def _expected(ts: traincast.TraceSet, graph) -> np.ndarray:  # noqa: ANN001
    """The measured column as the builder lays it out: starts aligned by the ranks' clock
    offsets, ends = start + dur, then each collective's last aligned arrival."""
    ev = ts.events
    rank = ev.column("rank").to_numpy()
    off = np.array([graph.clock_offset.get(int(r), 0) for r in rank.tolist()], np.int64)
    t0 = ev.column("ts").to_numpy() - off
    t1 = t0 + ev.column("dur").to_numpy()
    n = t0.size
    out = np.empty(2 * n + len(graph.collective_groups), np.int64)
    out[0:2 * n:2], out[1:2 * n:2] = t0, t1
    for k, g in enumerate(graph.collective_groups):
        out[2 * n + k] = t0[g].max()
    return out


@pytest.mark.parametrize("name", SETS)
def test_compact_measured_is_the_laid_out_column(traces: Path, name: str) -> None:
    with warnings.catch_warnings():  # (the shared sets' load warnings are not under test)
        warnings.simplefilter("ignore")
        ts = traincast.load(traces / name)
    g = build_graph(ts)
    stored = vars(g)["_measured"]
    assert isinstance(stored, MeasuredPoints)
    assert g.n_points == stored.size == 2 * g.n_nodes + len(g.collective_groups)
    want = _expected(ts, g)
    got = g.measured
    assert got.dtype == np.int64 and not got.flags.writeable
    np.testing.assert_array_equal(got, want)
    assert g.measured is got  # the same array while it is held
    del got
    # read without laying out: a few points, every point, the starts
    rng = np.random.default_rng(0)
    pts = rng.integers(0, g.n_points, 50)
    np.testing.assert_array_equal(g.measured_at(pts), want[pts])
    np.testing.assert_array_equal(stored.at(pts), want[pts])
    np.testing.assert_array_equal(stored.at(np.arange(g.n_points)), want)
    np.testing.assert_array_equal(g.measured_at(np.arange(g.n_points)), want)
    np.testing.assert_array_equal(g.measured_starts(), want[0:g.n_event_points:2])
    assert "_laid" not in vars(stored) or vars(stored)["_laid"]() is None
    # copies and replaced graphs keep it compact
    assert vars(g.copy())["_measured"] is stored
    assert vars(g.copy_lags())["_measured"] is stored
