"""Columns of a TraceSet's shapes without keeping them (traincast.trace.traceset
shape_columns / shape_rows over a job entry's deferred blocks), and the unprofiled costing's
use of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
import traincast.trace.cache as C
from traincast.trace.traceset import Deferred, shape_columns, shape_rows
from traincast.whatif import unprofiled as unp


@pytest.mark.parametrize("per_column", [False, True])
def test_deferred_shapes_give_columns_without_being_made(
        dlrm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_column: bool) -> None:
    """A block of all columns (small table) or a block per column: the columns asked for,
    equal to the made table's, in the order asked; the TraceSet keeps its deferred shapes."""
    if per_column:
        monkeypatch.setattr(C, "_SMALL_TABLE", 0)
    root = tmp_path / "cache"
    cold = traincast.load(dlrm2, cache=root)
    C.wait_for_writes()
    warm = traincast.load(dlrm2, cache=root)
    deferred = warm.__dict__["_shapes"]
    assert isinstance(deferred, Deferred)
    assert len(deferred._args[1]) == (3 if per_column else 1)  # the entry's column groups
    assert shape_rows(warm) == cold.shapes.num_rows > 0
    got = shape_columns(warm, "input_dims", "event")
    assert got.column_names == ["input_dims", "event"]
    assert got.equals(cold.shapes.select(["input_dims", "event"]))
    assert warm.__dict__["_shapes"] is deferred and deferred._value is None  # not kept

    # the costing reads them without making the table, counts as from the made one
    cls, n_in = unp.host_event_classes(warm)
    assert warm.__dict__["_shapes"] is deferred and deferred._value is None
    cls0, n_in0 = unp.host_event_classes(cold)
    np.testing.assert_array_equal(cls, cls0)
    np.testing.assert_array_equal(n_in, n_in0)

    # once made, the columns come from the made table
    assert warm.shapes.equals(cold.shapes)
    assert shape_columns(warm, "event").equals(cold.shapes.select(["event"]))
    assert shape_rows(warm) == cold.shapes.num_rows


def test_plain_shapes_and_deferred_without_part(dlrm2: Path) -> None:
    """A table (not deferred): its columns; a Deferred without ``part`` makes and keeps the
    whole table."""
    ts = traincast.load(dlrm2)
    table = ts.shapes
    assert shape_columns(ts, "event").equals(table.select(["event"]))
    assert shape_rows(ts) == table.num_rows
    d = Deferred(lambda: table)
    assert d.rows is None
    assert d.columns(("input_types",)).equals(table.select(["input_types"]))
    assert d() is table
