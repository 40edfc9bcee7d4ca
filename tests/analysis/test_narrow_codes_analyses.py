"""A loaded real trace holds its events' ``kind``, ``op_family`` and ``name`` with narrow
dictionary indices (int8, int8, int16), and every analysis gives the same tables as on the
same events with int32 indices (the readers' width, and the loads' before narrowing)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import traincast
from traincast.errors import TraincastWarning
from traincast.trace.schema import DICT_COLUMNS

_WANT = {"kind": pa.int8(), "op_family": pa.int8(), "name": pa.int16()}


def _wide(ts: traincast.trace.TraceSet) -> traincast.trace.TraceSet:
    """``ts`` with its dictionary columns indexed by int32, nothing memoised."""
    ev = ts.events
    for name in DICT_COLUMNS:
        i = ev.schema.get_field_index(name)
        ev = ev.set_column(i, name, ev.column(i).cast(pa.dictionary(pa.int32(), pa.string())))
    return dataclasses.replace(ts, events=ev, memo={})


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.trace.TraceSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraincastWarning)  # the sibling ET folder's notice
        return traincast.load(traces / "dlrm_8xv100" / "kineto")


def test_narrow_codes_give_the_same_analyses(dlrm: traincast.trace.TraceSet) -> None:
    for name in DICT_COLUMNS:
        assert dlrm.events.schema.field(name).type.index_type == _WANT[name], name
    wide = _wide(dlrm)
    assert wide.events.column("name").to_pylist() == dlrm.events.column("name").to_pylist()
    narrow_tables = traincast.analyze(dlrm)
    wide_tables = traincast.analyze(wide)
    assert list(narrow_tables) == list(wide_tables)
    for what, tables in narrow_tables.items():
        assert list(tables) == list(wide_tables[what]), what
        for key, table in tables.items():
            other = wide_tables[what][key]
            if isinstance(table, pd.DataFrame):
                pd.testing.assert_frame_equal(table, other, obj=f"{what}.{key}")
            elif isinstance(table, pd.Series):
                pd.testing.assert_series_equal(table, other, obj=f"{what}.{key}")
            else:
                assert table == other, (what, key)
