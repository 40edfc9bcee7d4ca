"""The whole-job entry found by ``stat`` alone (no hashing of unchanged files), and the
column blocks of cache entries."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import traincast
import traincast.trace.cache as C
from traincast.trace import arrow as A


def test_unchanged_files_hit_the_job_entry_without_hashing(dlrm2: Path, tmp_path: Path,
                                                           hashed: list[str]) -> None:
    root = tmp_path / "cache"
    cold = traincast.load(dlrm2, cache=root)
    C.wait_for_writes()
    assert len(hashed) == 2
    assert list((root / f"v{C.CACHE_SCHEMA}" / "jobs").rglob("*.stat"))
    warm = traincast.load(dlrm2, cache=root)
    assert len(hashed) == 2  # one stat per file, no hashing
    assert warm.events.equals(cold.events) and warm.shapes.equals(cold.shapes)
    # another option is another stat key: hashed again (and another job)
    traincast.load(dlrm2, cache=root, iteration_marker="ProfilerStep#10")
    assert len(hashed) == 4


def test_a_rewritten_file_is_hashed_again(dlrm2: Path, tmp_path: Path,
                                          hashed: list[str]) -> None:
    root = tmp_path / "cache"
    cold = traincast.load(dlrm2, cache=root)
    C.wait_for_writes()
    f = dlrm2 / "rank-1.pt.trace.json.gz"
    st = f.stat()
    f.write_bytes(f.read_bytes())  # same bytes, same times set back: ctime still changes
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = traincast.load(dlrm2, cache=root)
    assert len(hashed) == 4  # the stat key missed; the content key hit the job entry
    assert again.events.equals(cold.events)
    n = len(hashed)
    assert traincast.load(dlrm2, cache=root).events.equals(cold.events)
    assert len(hashed) == n  # and the new stat key was recorded


def test_stale_stat_record_is_a_miss(dlrm2: Path, tmp_path: Path, hashed: list[str]) -> None:
    """A stat record whose job entry is gone (trimmed, cleared) falls back to hashing."""
    root = tmp_path / "cache"
    cold = traincast.load(dlrm2, cache=root)
    C.wait_for_writes()
    for job in (root / f"v{C.CACHE_SCHEMA}" / "jobs").rglob("*.arrows"):
        job.unlink()
    again = traincast.load(dlrm2, cache=root)
    assert len(hashed) == 4 and again.events.equals(cold.events)


def test_large_tables_round_trip_in_column_blocks(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A table past the small-table size gets a block per column; a column past the block
    size is cut into slices of rows: both read back equal, dictionaries included."""
    monkeypatch.setattr(C, "_SMALL_TABLE", 1000)
    monkeypatch.setattr(C, "_BLOCK_BYTES", 4096)
    n = 5000
    t = pa.Table.from_arrays(
        [A.from_numpy(np.arange(n, dtype=np.int64)),
         A.dictionary(np.arange(n, dtype=np.int32) % 3, ["a", "b", "c"]),
         A.strings([f"s{i}" for i in range(n)])], names=["x", "k", "s"])
    small = t.slice(0, 10)
    entry = tmp_path / "e.arrows"
    metas = [{"type": "job", "tables": {"big": None, "small": None}}]
    assert C._write_entries(entry, "k" * 40, [{"big": t, "small": small}], metas)
    with pa.OSFile(str(entry), "r") as fh:
        manifest = C._read_manifest(fh, "k" * 40)
        (meta,) = manifest["records"]
        got = C._read_tables(fh, meta)
    assert [len(b) for _, b in meta["tables"]["big"]][0] > 1  # x sliced
    assert [c for c, _ in meta["tables"]["big"]] == [["x"], ["k"], ["s"]]
    assert got["big"].equals(t) and got["small"].equals(small)


def test_a_job_of_many_files_stores_only_its_job_entry(dlrm2: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import traincast.trace.load as L

    monkeypatch.setattr(L, "JOB_ONLY_MIN_FILES", 2)
    root = tmp_path / "cache"
    cold = traincast.load(dlrm2, cache=root)
    C.wait_for_writes()
    base = root / f"v{C.CACHE_SCHEMA}"
    assert [p.parent.parent.name for p in base.rglob("*.arrows")] == ["jobs"]
    assert traincast.load(dlrm2, cache=root).events.equals(cold.events)
    # one file alone is below the threshold: its per-file entry is written
    traincast.load(dlrm2 / "rank-0.pt.trace.json.gz", cache=root)
    C.wait_for_writes()
    assert sum(p.parent.parent.name != "jobs" for p in base.rglob("*.arrows")) == 1


def test_job_shapes_are_decompressed_on_first_use(dlrm2: Path, tmp_path: Path) -> None:
    import pickle

    from traincast.trace.traceset import Deferred

    root = tmp_path / "cache"
    cold = traincast.load(dlrm2, cache=root)
    C.wait_for_writes()
    warm = traincast.load(dlrm2, cache=root)
    assert isinstance(warm.__dict__["_shapes"], Deferred)  # not decoded by the load
    assert pickle.loads(pickle.dumps(warm)).shapes.equals(cold.shapes)
    assert warm.shapes.equals(cold.shapes) and warm.shapes is warm.shapes
    assert isinstance(warm.__dict__["_shapes"], pa.Table)
    warm.shapes = cold.shapes  # assignable as before
    assert warm.shapes is cold.shapes and warm == warm
