"""The unprofiled graph's inputs: inputs per op counted from Arrow's codes (each distinct
text parsed once), the run's configuration read once, and lags copied without laying out
the anchors (traincast.whatif.unprofiled, ExecutionGraph.copy_lags)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import traincast
from traincast.graph.model import SparsePoints
from traincast.trace.traceset import TraceSet
from traincast.whatif import unprofiled as unp


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


def _count_reference(ts: TraceSet) -> np.ndarray:
    """Inputs per event as pandas would count them (one parse per distinct text)."""
    n_in = np.full(ts.events.num_rows, np.nan)
    ev = ts.shapes.column("event").to_numpy()
    codes, uniq = pd.factorize(ts.shapes.column("input_dims").to_pandas(),
                               use_na_sentinel=True)
    counts = np.array([unp._count_inputs(u) for u in uniq] + [np.nan])
    ok = (ev >= 0) & (ev < n_in.size)
    n_in[ev[ok]] = counts[codes[ok]]
    return n_in


def test_inputs_per_op_from_arrow_codes(dlrm: TraceSet) -> None:
    _, n_in = unp.host_event_classes(dlrm)
    np.testing.assert_array_equal(n_in, _count_reference(dlrm))
    assert np.isfinite(n_in).sum() > 1000


def test_inputs_per_op_with_missing_odd_and_dictionary_texts(dlrm: TraceSet) -> None:
    """Nulls, empty and unparsable texts count as none; a dictionary-typed column too."""
    n = 6
    dims = pa.array(["[[1, 2], [3]]", None, "", "not json", "[[1, 2], [3]]", "[]"])
    for column in (dims, dims.dictionary_encode()):
        shapes = pa.table({"event": pa.array(np.arange(n), pa.int64()), "input_dims": column,
                           "input_types": pa.array(['["Tensor(float)"]'] * n)})
        ts = dataclasses.replace(dlrm, events=dlrm.events.slice(0, n), shapes=shapes)
        _, n_in = unp.host_event_classes(ts)
        np.testing.assert_array_equal(n_in, [2.0, np.nan, np.nan, np.nan, 2.0, 0.0])


def test_inputs_per_op_of_texts_in_several_chunks(dlrm: TraceSet) -> None:
    """A column of several chunks (a rank's rows each) counts as the same column in one."""
    n = 6
    texts = ["[[1, 2], [3]]", None, "[]", "[[1, 2], [3]]", "[[4]]", "[[1], [2], [3]]"]
    one = pa.chunked_array([pa.array(texts)])
    several = pa.chunked_array([pa.array(texts[:2]), pa.array([], pa.string()),
                                pa.array(texts[2:5]), pa.array(texts[5:])])
    got = []
    for column in (one, several):
        shapes = pa.table({"event": pa.array(np.arange(n), pa.int64()), "input_dims": column,
                           "input_types": pa.array(['["Tensor(float)"]'] * n)})
        ts = dataclasses.replace(dlrm, events=dlrm.events.slice(0, n), shapes=shapes)
        got.append(unp.host_event_classes(ts)[1])
    np.testing.assert_array_equal(got[0], [2.0, np.nan, 0.0, 2.0, 1.0, 3.0])
    np.testing.assert_array_equal(got[1], got[0])


def test_run_config_given_or_read(dlrm: TraceSet, monkeypatch) -> None:
    run = {"torch": "2.11.0", "profiler": {"record_shapes": False, "with_stack": True}}
    read = unp.detect_profiler_settings(dlrm)
    given = unp.detect_profiler_settings(dlrm, run)
    assert vars(read) != vars(given)
    assert given.with_stack and not given.record_shapes
    assert vars(unp.detect_profiler_settings(dlrm, {})) == vars(read)  # no .run.json here
    assert unp.default_overhead(dlrm, "cuda", {}) == unp.default_overhead(dlrm, "cuda")
    asked = []
    monkeypatch.setattr(unp, "overhead_table", lambda v, d: asked.append(v) or d)
    assert unp.default_overhead(dlrm, "cuda", run) == "cuda" and asked == ["2.11.0"]


def test_copy_lags_shares_compact_anchors(dlrm: TraceSet) -> None:
    g = traincast.predict(dlrm).graph
    assert isinstance(g.__dict__["_anchor"], SparsePoints)
    c = g.copy_lags()
    assert c.__dict__["_anchor"] is g.__dict__["_anchor"]  # nothing laid out twice
    assert c.structure is g.structure and c.src is g.src
    np.testing.assert_array_equal(c.anchor, g.copy().anchor)
    assert not c.anchor.flags.writeable  # a shared column reads as a read-only array
    c.lag[:] = 0
    assert g.lag.any()  # the lags are the copy's own
    plain = g.copy()
    plain.anchor = np.zeros(g.n_points, np.int64)  # an anchor of its own: copied, not shared
    assert plain.copy_lags().anchor is not plain.anchor


def test_unprofiled_graph_keeps_the_replays_anchors(dlrm: TraceSet) -> None:
    pred = traincast.predict(dlrm)
    u = pred.unprofiled
    assert u.graph.__dict__["_anchor"] is pred.graph.__dict__["_anchor"]
    assert (u.graph.lag <= pred.graph.lag).all() and (u.graph.lag < pred.graph.lag).any()


def test_view_op_median_found_once_per_events_table(dlrm: TraceSet) -> None:
    """The settings and the host-speed factor read the same median: kept per events table."""
    ts = dataclasses.replace(dlrm, memo={})
    first = unp.view_op_median_ns(ts)
    assert first == unp._view_op_median_ns(ts)
    assert ts.memo["view_op_median_ns"] == (ts.events, first)
    ts.memo["view_op_median_ns"] = (ts.events, -1.0)
    assert unp.view_op_median_ns(ts) == -1.0  # read back, not found again
    other = dataclasses.replace(ts, events=ts.events.slice(0, 10))
    assert unp.view_op_median_ns(other) is None  # another table: found anew
