"""A cold load whose files can be in no cache entry hashes each file in its parse worker
(:func:`traincast.trace.load._keys_later`), with the same keys, entries and TraceSet as a
load that hashes them all first."""

from __future__ import annotations

import os
from pathlib import Path

import traincast
import traincast.trace.cache as C
import traincast.trace.load as L
from traincast.trace.cache_key import paths_key


def _options() -> dict[str, object]:
    return {"iteration_marker": None, "rank_map": []}


def test_workers_hash_and_the_job_is_found_by_content_after(dlrm3: Path, tmp_path: Path,
                                                            hashed: list[str]) -> None:
    root = tmp_path / "cache"
    files = sorted(dlrm3.iterdir())
    ref = traincast.load(dlrm3, cache=False, executor="serial")
    cold = traincast.load(dlrm3, cache=root, executor="process", workers=2)
    C.wait_for_writes()
    assert hashed == []  # every key came from a parse worker
    assert cold.events.equals(ref.events) and cold.collectives.equals(ref.collectives)
    keys = [C.file_key(f) for f in files]
    hashed.clear()
    base = root / f"v{C.CACHE_SCHEMA}"
    # the workers stored each file's entry under its key (a job of few files), and the job
    # entry has the key a load hashing first gives
    assert {p.stem for p in base.glob("??/*.arrows")} == set(keys)
    jkey = C.job_key(keys, files, _options())
    assert (base / "jobs" / jkey[:2] / f"{jkey}.arrows").is_file()
    pkey = paths_key(files, _options())
    assert (base / "jobs" / pkey[:2] / f"{pkey}.paths").read_text() == jkey
    # a rewritten file misses the stat key: the paths' record makes the loading process
    # hash first, and the content key finds the job entry (nothing parsed)
    f = files[1]
    f.write_bytes(f.read_bytes())
    again = traincast.load(dlrm3, cache=root, executor="process", workers=2)
    assert len(hashed) == 3 and again.events.equals(cold.events)


def test_the_loading_process_hashes_where_an_entry_may_hit(dlrm3: Path, tmp_path: Path,
                                                          hashed: list[str]) -> None:
    """A cache holding any per-file entry, an unreadable file or a serial parse: the files
    are hashed first, as before."""
    root = tmp_path / "cache"
    files = sorted(dlrm3.iterdir())
    store = C.TraceCache(root)
    assert L._keys_later(store, files, _options(), "process", 2)
    assert not L._keys_later(store, files, _options(), "serial", 2)
    assert not L._keys_later(store, files[:1], _options(), "process", 2)
    for other in ("et", "et-link", "jobs"):  # not per-file entries
        (root / f"v{C.CACHE_SCHEMA}" / other / "ab").mkdir(parents=True)
        (root / f"v{C.CACHE_SCHEMA}" / other / "ab" / "x.arrows").write_bytes(b"")
    (root / f"v{C.CACHE_SCHEMA}" / "cd").mkdir()  # a per-file folder emptied by a trim
    assert L._keys_later(store, files, _options(), "process", 2)
    traincast.load(files[0], cache=root)  # one file: its per-file entry
    C.wait_for_writes()
    assert not L._keys_later(store, files, _options(), "process", 2)
    hashed.clear()
    traincast.load(dlrm3, cache=root, executor="process", workers=2)
    assert len(hashed) == 3
    if os.geteuid() != 0:  # root reads any file
        other = tmp_path / "cache2"
        files[2].chmod(0)
        try:
            assert not L._keys_later(C.TraceCache(other), files, _options(), "process", 2)
        finally:
            files[2].chmod(0o644)


def test_keyed_task_gives_the_files_key_and_records(dlrm3: Path, tmp_path: Path) -> None:
    f = sorted(dlrm3.iterdir())[0]
    item = (str(f), 1 << 33, str(tmp_path / "c"), None, None, None, None)
    key, shipped = L._read_keyed(item)
    assert key == C.file_key(f)
    assert (tmp_path / "c" / f"v{C.CACHE_SCHEMA}" / key[:2] / f"{key}.arrows").is_file()
    key2, here = L._read_keyed_here(item)
    assert key2 == key and here[0].record.events.equals(shipped[0].record.events)
    assert L._key_of(str(tmp_path / "missing.json")) is None
