"""comm_args / stream_waits tables of a Kineto file: rows, ranks parsing, shared empties."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from traincast.trace.readers import kineto_comm as C


def _args(**kw: object) -> SimpleNamespace:
    base = {"coll_name": "allreduce", "pg_name": "0", "pg_ranks": "[0, 1]", "group_size": 2,
            "in_nelems": 4, "out_nelems": 4, "dtype": "Float", "seq": 1}
    return SimpleNamespace(**{**base, **kw})


def test_comm_table_rows_and_ranks() -> None:
    t = C.comm_table([(3, _args()), (5, _args(pg_ranks=[2, 3], seq=2)),
                      (7, _args(pg_ranks="[0, x]")), (9, _args(pg_ranks=[-1]))])
    assert t.column("event").to_pylist() == [3, 5, 7, 9]
    assert t.column("pg_ranks").to_pylist() == [[0, 1], [2, 3], [], []]
    assert t.column("seq").to_pylist() == [1, 2, 1, 1]


def test_empty_tables_are_built_once_and_equal_a_fresh_build(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "_EMPTY", {})
    first, again = C.comm_table([]), C.comm_table([])
    assert again is first and first.num_rows == 0
    monkeypatch.setattr(C, "_EMPTY", {})
    assert C.comm_table([]).equals(first)
    w = C.waits_table([])
    assert C.waits_table([]) is w and w.schema.names == ["event", "wait_on_stream",
                                                         "record_correlation"]
    assert C.waits_table([(1, 7, 11)]).to_pylist() == [
        {"event": 1, "wait_on_stream": 7, "record_correlation": 11}]
