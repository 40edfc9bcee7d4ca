"""Reading cache entries with the blocks checked and decoded on threads."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest

import traincast
import traincast.trace.cache as C
import traincast.trace.cache_read as R
from traincast.trace.cache import CACHE_SCHEMA


@pytest.fixture
def run2(traces: Path, tmp_path: Path) -> Path:
    """Two ranks of the DLRM 8xV100 set, copied to a writable folder."""
    d = tmp_path / "run"
    d.mkdir()
    for r in range(2):
        shutil.copy(traces / "dlrm_8xv100" / "kineto" / f"rank-{r}.pt.trace.json.gz", d)
    return d


def _manifest(entry: Path) -> dict:
    data = entry.read_bytes()
    n = int.from_bytes(data[-16:-8], "little")
    return msgspec.json.decode(data[-16 - n:-16])


def test_threaded_read_equals_serial_and_damage_falls_back(
        run2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every entry read on threads, a warm load equals the cold one (shapes deferred
    included); a column block of ``events`` damaged in the job entry raises the cache's
    ValueError on the threads, and the load assembles again from the per-file entries."""
    monkeypatch.setattr(R, "_THREAD_MIN_BYTES", 0)
    monkeypatch.setattr(R, "_THREADS", 2)
    root = tmp_path / "cache"
    cold = traincast.load(run2, cache=root)
    C.wait_for_writes()
    (job,) = (root / f"v{CACHE_SCHEMA}" / "jobs").rglob("*.arrows")
    warm = traincast.load(run2, cache=root)
    for name in ("events", "collectives", "iterations", "shapes"):
        assert getattr(warm, name).equals(getattr(cold, name)), name

    (meta,) = _manifest(job)["records"]
    offset, length = meta["tables"]["events"][-1][1][0][:2]  # the last column's block
    data = bytearray(job.read_bytes())
    data[offset + length // 2] ^= 0xFF
    job.write_bytes(bytes(data))
    with pa.OSFile(str(job), "r") as mm:
        with pytest.raises(ValueError, match="CRC-32"):
            R._read_tables(mm, meta, ("shapes",))
    reads: list[str] = []
    real_get = C.TraceCache.get
    monkeypatch.setattr(C.TraceCache, "get",
                        lambda self, p, k: reads.append(p.name) or real_get(self, p, k))
    again = traincast.load(run2, cache=root)
    assert len(reads) == 2  # the per-file entries
    assert again.events.equals(cold.events)


def test_small_entries_are_read_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the size threshold no thread pool is started; the results keep their order."""
    def no_pool(*_a: object, **_k: object) -> None:
        raise AssertionError("a pool was started")

    monkeypatch.setattr(R, "ThreadPoolExecutor", no_pool)
    assert R._run([lambda: 1, lambda: 2], R._THREAD_MIN_BYTES - 1) == [1, 2]
    monkeypatch.undo()
    monkeypatch.setattr(R, "_THREADS", 2)
    assert R._run([lambda i=i: i for i in range(5)], R._THREAD_MIN_BYTES) == list(range(5))
