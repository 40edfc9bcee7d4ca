"""traincast.trace.assemble: the job's shapes and iterations tables, built column-wise, equal
the tables built record by record (the former construction), chunks included."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from traincast.trace import arrow as A
from traincast.trace.assemble import _iterations_table, _shapes_table
from traincast.trace.iterations import Steps
from traincast.trace.narrow import common_id_types


def _shapes(n: int, seed: int, event_type: type = np.int64) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.Table.from_arrays(
        [A.from_numpy(np.sort(rng.integers(0, 50, n)).astype(event_type)),
         A.strings([f"[[{i}]]" for i in range(n)]), A.strings(["float"] * n)],
        names=["event", "input_dims", "input_types"])


def _shapes_record_by_record(parts: list[tuple[pa.Table, int]]) -> pa.Table:
    return pa.concat_tables([t.set_column(0, "event", A.from_numpy(
        A.to_numpy(t.column("event")) + off)) for t, off in parts])


@pytest.mark.parametrize("event_type", [np.int64, np.int32])
def test_shapes_table_equals_the_record_by_record_concatenation(event_type: type) -> None:
    parts = [(_shapes(n, i, event_type), off)
             for i, (n, off) in enumerate([(5, 0), (1, 60), (7, 61), (3, 200)])]
    got, want = _shapes_table(parts), _shapes_record_by_record(parts)
    assert got.equals(want) and got.schema.equals(want.schema, check_metadata=True)
    assert [[len(c) for c in col.chunks] for col in got.columns] == \
        [[len(c) for c in col.chunks] for col in want.columns]


def test_shapes_table_without_records_is_empty() -> None:
    t = _shapes_table([])
    assert t.num_rows == 0 and t.column_names == ["event", "input_dims", "input_types"]


def _iterations_stacked(parts: list[tuple[int, int, Steps]]) -> pa.Table:
    rows = [np.stack([np.full(s.marker_rows.size, r, np.int64), s.number, s.start, s.end,
                      np.where(s.marker_rows >= 0, s.marker_rows + off, -1)], axis=1)
            for r, off, s in parts]
    it = np.concatenate(rows) if rows else np.empty((0, 5), np.int64)
    return pa.Table.from_arrays(
        [A.from_numpy(it[:, 0].astype(np.int32)), A.from_numpy(it[:, 1].astype(np.int32)),
         A.from_numpy(it[:, 2].copy()), A.from_numpy(it[:, 3].copy()),
         A.from_numpy(it[:, 3] - it[:, 2]), A.from_numpy(it[:, 4].copy())],
        names=["rank", "iteration", "start", "end", "dur", "marker_event"])


def test_iterations_table_equals_the_stacked_rows() -> None:
    def steps(n: int, synthetic: bool = False) -> Steps:
        start = np.arange(n, dtype=np.int64) * 100
        marks = np.full(n, -1, np.int64) if synthetic else np.arange(n, dtype=np.int64) * 3
        return Steps(number=np.arange(n, dtype=np.int64) + 2, start=start, end=start + 90,
                     marker_rows=marks, synthetic=synthetic)

    parts = [(0, 0, steps(3)), (1, 40, steps(0)), (2, 40, steps(2, synthetic=True)),
             (5, 90, steps(4))]
    for p in (parts, parts[:1], []):
        assert _iterations_table(p).equals(_iterations_stacked(p))


def test_common_id_types_returns_agreeing_tables_as_they_are() -> None:
    t = pa.table({"pid": pa.array([1], pa.int32()), "tid": pa.array([2], pa.int64())})
    tables = [t, pa.table({"pid": pa.array([3], pa.int32()), "tid": pa.array([4], pa.int64())})]
    out = common_id_types(tables)
    assert all(a is b for a, b in zip(out, tables, strict=True))
