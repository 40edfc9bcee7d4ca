"""Reading cache entries: each block's CRC-32 checked (ISA-L's, equal to zlib's)."""

from __future__ import annotations

import shutil
import zlib
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


def test_damaged_block_raises_and_load_falls_back(
        run2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm load equals the cold one (shapes deferred included); one byte changed in a
    column block of ``events`` of the job entry makes the reader raise the cache's
    ValueError, and the load assembles again from the per-file entries."""
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


def test_stored_crc_is_zlibs(run2: Path, tmp_path: Path) -> None:
    """The CRC-32 written in a manifest is zlib's of the block's bytes (entries written
    before stay readable)."""
    root = tmp_path / "cache"
    traincast.load(run2, cache=root)
    C.wait_for_writes()
    (job,) = (root / f"v{CACHE_SCHEMA}" / "jobs").rglob("*.arrows")
    data = job.read_bytes()
    (meta,) = _manifest(job)["records"]
    blocks = [b for groups in meta["tables"].values() for _cols, bl in groups for b in bl]
    assert blocks
    for offset, length, _rows, crc, _raw in blocks:
        assert zlib.crc32(data[offset:offset + length]) == crc
