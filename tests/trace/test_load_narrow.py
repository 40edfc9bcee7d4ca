"""The events id columns are int32 per job where every value fits, int64 otherwise
(``traincast.trace.schema.NARROW_INT_COLUMNS``), and the cache keeps what the load decided."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import traincast
from traincast.trace import arrow as A
from traincast.trace.narrow import common_id_types, narrow_ids
from traincast.trace.schema import NARROW_INT_COLUMNS
from traincast.util.executor import shutdown as shutdown_executor


def _rank_trace(path: Path, rank: int, correlation: int, tid: int = 1) -> Path:
    """One step on rank ``rank`` of 2, a launch and its kernel joined by ``correlation``."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": tid,
         "ts": 100, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
         "ts": 110, "dur": 5, "args": {"correlation": correlation, "External id": 3}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 120, "dur": 30,
         "args": {"device": 0, "stream": 7, "correlation": correlation}},
    ]
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2},
                                "traceEvents": ev}))
    return path


def _job(tmp_path: Path, corr1: int, tid1: int = 1) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    _rank_trace(d / "rank-0.json", 0, 5)
    _rank_trace(d / "rank-1.json", 1, corr1, tid1)
    return d


def test_ids_that_fit_are_int32(tmp_path: Path) -> None:
    ts = traincast.load(_job(tmp_path, 6), cache=False)
    for name in NARROW_INT_COLUMNS:
        assert ts.events.schema.field(name).type == pa.int32(), name
    assert sorted(A.to_numpy(ts.events.column("correlation")).tolist()) == [-1, -1, 5, 5, 6, 6]


@pytest.mark.parametrize("big", [2**31, -(2**31) - 1, 2**40])
def test_one_id_beyond_int32_keeps_the_column_int64_for_the_job(tmp_path: Path, big: int
                                                                 ) -> None:
    """A correlation id past int32 on one rank keeps ``correlation`` int64 on every rank
    (values unchanged); the other columns are decided on their own."""
    root = tmp_path / "cache"
    d = _job(tmp_path, big)
    for cache in (False, root, root):  # no cache, cold, then from the job entry
        ts = traincast.load(d, cache=cache)
        ev = ts.events
        assert ev.schema.field("correlation").type == pa.int64()
        assert ev.schema.field("tid").type == pa.int32()
        corr = A.to_numpy(ev.column("correlation"))
        assert sorted(corr.tolist()) == sorted([-1, -1, 5, 5, big, big])
        assert (corr[A.to_numpy(ev.column("rank")) == 1] == big).sum() == 2


def test_tid_beyond_int32_stays_int64(tmp_path: Path) -> None:
    ts = traincast.load(_job(tmp_path, 6, tid1=2**33), cache=False)
    assert ts.events.schema.field("tid").type == pa.int64()
    assert ts.events.schema.field("correlation").type == pa.int32()
    assert 2**33 in A.to_numpy(ts.events.column("tid")).tolist()


def _table(**cols: np.ndarray) -> pa.Table:
    return pa.Table.from_arrays([A.from_numpy(v) for v in cols.values()], names=list(cols))


def test_narrow_ids_decides_per_column_over_all_chunks() -> None:
    a = _table(pid=np.array([1, 2], np.int64), correlation=np.array([3, 2**31 - 1], np.int64),
               dur=np.array([1, 2], np.int64))
    b = _table(pid=np.array([-(2**31)], np.int64), correlation=np.array([2**31], np.int64),
               dur=np.array([3], np.int64))
    out = narrow_ids(pa.concat_tables([a, b]))
    assert out.schema.field("pid").type == pa.int32()
    assert out.schema.field("correlation").type == pa.int64()
    assert out.schema.field("dur").type == pa.int64()  # not an id column
    assert out.column("pid").to_pylist() == [1, 2, -(2**31)]
    assert out.column("correlation").to_pylist() == [3, 2**31 - 1, 2**31]


def test_common_id_types_widens_only_where_ranks_disagree() -> None:
    a = narrow_ids(_table(pid=np.array([1], np.int64), correlation=np.array([3], np.int64)))
    b = narrow_ids(_table(pid=np.array([2], np.int64), correlation=np.array([2**31], np.int64)))
    assert a.schema.field("correlation").type == pa.int32()
    assert b.schema.field("correlation").type == pa.int64()
    out = common_id_types([a, b])
    assert [t.schema.field("correlation").type for t in out] == [pa.int64(), pa.int64()]
    assert [t.schema.field("pid").type for t in out] == [pa.int32(), pa.int32()]
    both = pa.concat_tables(out)
    assert both.column("correlation").to_pylist() == [3, 2**31]
    assert common_id_types([a, a]) == [a, a] and common_id_types([b]) == [b]


@pytest.mark.parametrize("big", [6, 2**31])
def test_ranks_narrowed_in_workers_give_the_serial_job(tmp_path: Path, big: int) -> None:
    """Each worker narrows its rank's ids on its own; the job's types and values are those
    of a serial load whether the ranks agree (6) or not (2**31)."""
    d = _job(tmp_path, big)
    serial = traincast.load(d, cache=False, executor="serial")
    try:
        par = traincast.load(d, cache=False, executor="process", workers=2)
    finally:
        shutdown_executor()
    assert par.events.schema == serial.events.schema and par.events.equals(serial.events)
