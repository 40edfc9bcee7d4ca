"""A job entry written as the assembly combines the events (``traincast.trace.cache_job``)
holds the bytes ``put_job`` writes; an abort or a failed check leaves no temporary behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import traincast
from traincast.errors import TraceFormatError
from traincast.trace import cache as C
from traincast.trace import cache_job, cache_read
from traincast.trace import load as load_mod
from traincast.trace.cache_job import JobEntryWriter
from traincast.trace.cache_read import _HeldBlock
from traincast.trace.traceset import Deferred, defer_shapes

_KEY = "ab" + "0" * 38


def _put_job_bytes(ts: traincast.TraceSet, root: Path, key: str = _KEY) -> bytes:
    assert C.put_job(C.TraceCache(root), key, ts)
    return C._job_entry(root, key).read_bytes()


def _stream(ts: traincast.TraceSet, root: Path, columns: list | None = None) -> Path:
    w = JobEntryWriter(C.TraceCache(root), _KEY)
    ev = ts.events
    for j, c in enumerate(ev.columns if columns is None else columns):
        w.events_column(ev.schema, j, c.combine_chunks())
    w.finish(ts)
    C.wait_for_writes()
    assert not C._PENDING
    return C._job_entry(root, _KEY)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != ".swept")


@pytest.mark.parametrize("small_table", [None, 1000])
def test_streamed_entry_is_put_jobs(dlrm3: Path, tmp_path: Path, small_table: int | None,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Events held until finished (a small table) or written column by column as they come
    (a large one): the same bytes, read back as the same TraceSet."""
    if small_table is not None:
        monkeypatch.setattr(C, "_SMALL_TABLE", small_table)
    ts = traincast.load(dlrm3, cache=False, executor="serial")
    want = _put_job_bytes(ts, tmp_path / "a")
    entry = _stream(ts, tmp_path / "b")
    assert entry.read_bytes() == want
    back = C.get_job(C.TraceCache(tmp_path / "b"), _KEY)
    assert back is not None and back.events.equals(ts.events)
    assert _files(tmp_path / "b") == [entry]


def test_columns_that_are_not_the_events_are_written_again(
        dlrm3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "_SMALL_TABLE", 1000)
    ts = traincast.load(dlrm3, cache=False, executor="serial")
    want = _put_job_bytes(ts, tmp_path / "a")
    other = ts.events.slice(1).columns  # other buffers, other rows
    entry = _stream(ts, tmp_path / "b", other)
    assert entry.read_bytes() == want and _files(tmp_path / "b") == [entry]


def test_abort_leaves_no_temporary(dlrm3: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "_SMALL_TABLE", 1000)
    ts = traincast.load(dlrm3, cache=False, executor="serial")
    root = tmp_path / "cache"
    w = JobEntryWriter(C.TraceCache(root), _KEY)
    for j, c in enumerate(ts.events.columns[:3]):
        w.events_column(ts.events.schema, j, c.combine_chunks())
    w.abort()
    w.finish(ts)  # after an abort: nothing
    C.wait_for_writes()
    assert not C._PENDING and _files(root) == []


def test_cold_load_writes_put_jobs_bytes(dlrm3: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry a cold load writes while it assembles equals ``put_job`` of its TraceSet;
    an assembly that fails leaves no entry and no temporary."""
    monkeypatch.setattr(C, "_SMALL_TABLE", 1000)
    root = tmp_path / "cache"
    ts = traincast.load(dlrm3, cache=root, executor="serial")
    C.wait_for_writes()
    (entry,) = (root / f"v{C.CACHE_SCHEMA}" / "jobs").rglob("*.arrows")
    key = entry.name.removesuffix(".arrows")
    assert entry.read_bytes() == _put_job_bytes(ts, tmp_path / "b", key)

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("assembly failed")

    monkeypatch.setattr(load_mod, "assemble", broken)
    shutil.rmtree(root)
    with pytest.raises(RuntimeError, match="assembly failed"):
        traincast.load(dlrm3, cache=root, executor="serial")
    C.wait_for_writes()
    assert not list((root / f"v{C.CACHE_SCHEMA}" / "jobs").rglob("*"))


def test_written_shapes_are_served_from_the_entry(dlrm3: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a cold load's entry is written, the TraceSet holds its shapes as the entry's
    compressed blocks (made again, equal, on first use) unless they were replaced meanwhile;
    below the size bound they stay as they were."""
    ts = traincast.load(dlrm3, cache=tmp_path / "small", executor="serial")
    C.wait_for_writes()
    assert not isinstance(ts.__dict__["_shapes"], Deferred)  # small: kept as it is

    monkeypatch.setattr(cache_job, "DEFER_SHAPES_BYTES", 0)
    before = traincast.load(dlrm3, cache=False, executor="serial").shapes
    assert before.num_rows > 0
    ts = traincast.load(dlrm3, cache=tmp_path / "c", executor="serial")
    C.wait_for_writes()  # the swap is made on the writing thread, once the entry is written
    assert isinstance(ts.__dict__["_shapes"], Deferred)
    assert ts.shapes.equals(before) and ts.shapes is ts.shapes  # made once, then kept

    # a table the caller stored meanwhile is never swapped for the written one
    ts.shapes = mine = before.slice(0, 5)
    assert not defer_shapes(ts, before, Deferred(lambda: before))
    assert ts.shapes is mine
    assert defer_shapes(ts, mine, Deferred(lambda: before))
    assert ts.shapes is before



def test_deferred_shapes_hold_no_bytes_and_read_the_file_that_was_read(
        dlrm3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job entry's deferred shapes (from HOLD_MIN_BYTES on) keep only their blocks'
    places and the entry's file open: made equal after a writer replaced the entry
    (``os.replace``, a new file) and a trim deleted it; an entry changed in place since it
    was read is named in the error. Below the bound the bytes are kept (no descriptor)."""
    ts = traincast.load(dlrm3, cache=False, executor="serial")
    small = tmp_path / "small"
    _put_job_bytes(ts, small)
    kept = C.get_job(C.TraceCache(small), _KEY).__dict__["_shapes"]
    assert not isinstance(kept._args[1][0][1][0][0], _HeldBlock)  # small: bytes in memory
    monkeypatch.setattr(cache_read, "HOLD_MIN_BYTES", 0)
    root = tmp_path / "j"
    want = _put_job_bytes(ts, root)
    entry = C._job_entry(root, _KEY)
    back = C.get_job(C.TraceCache(root), _KEY)
    assert back is not None and back.events.equals(ts.events)
    deferred = back.__dict__["_shapes"]
    assert isinstance(deferred, Deferred)
    if not hasattr(os, "pread"):
        pytest.skip("no positional reads: the blocks stay in memory")
    assert isinstance(deferred._args[1][0][1][0][0], _HeldBlock)  # no bytes held
    other = tmp_path / "other"
    other.write_bytes(b"x" * len(want))  # a writer's rename over it, then a trim
    os.replace(other, entry)
    entry.unlink()
    assert back.shapes.equals(ts.shapes)

    _put_job_bytes(ts, root)  # changed in place after it was read: named, not decoded
    again = C.get_job(C.TraceCache(root), _KEY)
    block = again.__dict__["_shapes"]._args[1][0][1][0][0]
    with entry.open("r+b") as f:
        f.seek(block.offset)
        f.write(b"\0" * 64)
    with pytest.raises(TraceFormatError, match="changed on disk") as err:
        _ = again.shapes
    assert err.value.path == str(entry)
