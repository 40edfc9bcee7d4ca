"""Columnar cache of decoded trace files (``traincast/trace/cache.py``) and parallel per-file
parsing in ``traincast.load`` (``executor=``/``workers=``/``cache=``)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

import traincast
import traincast.trace.cache_key as K
import traincast.trace.load as load_mod
from traincast.errors import InputTooLargeError, TraceFormatError
from traincast.trace.cache import (
    CACHE_SCHEMA,
    TraceCache,
    cache_dir,
    file_key,
    resolve,
    wait_for_writes,
)
from traincast.trace.traceset import TraceSet
from traincast.util.executor import ExecutorError
from traincast.util.executor import shutdown as shutdown_executor


def _same(a: TraceSet, b: TraceSet) -> None:
    assert a.events.equals(b.events)
    assert a.collectives.equals(b.collectives)
    assert a.iterations.equals(b.iterations)
    assert a.shapes.equals(b.shapes)
    assert (a.stream_waits is None) == (b.stream_waits is None)
    if a.stream_waits is not None:
        assert a.stream_waits.equals(b.stream_waits)
    assert a.warnings == b.warnings
    assert sorted(a.ranks) == sorted(b.ranks)
    for r, x in a.ranks.items():
        y = b.ranks[r]
        assert (x.path, x.world_size, x.backend, x.devices, x.pg_config, x.threads, x.n_bytes,
                x.host) == (y.path, y.world_size, y.backend, y.devices, y.pg_config, y.threads,
                            y.n_bytes, y.host)


@pytest.fixture
def dlrm3(traces: Path, tmp_path: Path) -> Path:
    """Three ranks of the DLRM 8xV100 set, copied to a writable folder."""
    d = tmp_path / "run"
    d.mkdir()
    for r in range(3):
        shutil.copy(traces / "dlrm_8xv100" / "kineto" / f"rank-{r}.pt.trace.json.gz", d)
    return d


@pytest.fixture
def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the files the Kineto reader parses (serial path)."""
    seen: list[str] = []
    real = load_mod.read_kineto

    def counting(path: Path) -> object:
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(load_mod, "read_kineto", counting)
    return seen


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("v*/*/*.arrows"))


def test_second_load_hits_cache_with_identical_tables(dlrm3: Path, tmp_path: Path,
                                                     count_reads: list[str]) -> None:
    root = tmp_path / "cache"
    ref = traincast.load(dlrm3, cache=False)
    assert len(count_reads) == 3
    cold = traincast.load(dlrm3, cache=root)
    assert len(count_reads) == 6 and len(_entries(root)) == 3
    warm = traincast.load(dlrm3, cache=root)
    assert len(count_reads) == 6  # the reader was not called again
    _same(ref, cold)
    _same(ref, warm)
    assert warm.ranks[1].path == dlrm3 / "rank-1.pt.trace.json.gz"


def test_progress_is_reported_for_cache_hits(dlrm3: Path, tmp_path: Path) -> None:
    calls: list[tuple[int, int, str]] = []
    traincast.load(dlrm3, cache=tmp_path / "c")
    traincast.load(dlrm3, cache=tmp_path / "c",
                   progress=lambda d, t, p: calls.append((d, t, p.name)))
    assert [(d, t) for d, t, _ in calls] == [(1, 3), (2, 3), (3, 3)]


def test_changed_content_invalidates(dlrm3: Path, tmp_path: Path,
                                     count_reads: list[str]) -> None:
    root = tmp_path / "cache"
    f = dlrm3 / "rank-0.pt.trace.json.gz"
    traincast.load(f, cache=root)
    key0 = file_key(f)
    # same JSON, other gzip bytes (level 1): a different file as far as the cache knows
    f.write_bytes(gzip.compress(gzip.decompress(f.read_bytes()), compresslevel=1, mtime=0))
    assert file_key(f) != key0
    before = len(count_reads)
    traincast.load(f, cache=root)
    assert len(count_reads) == before + 1
    assert len(_entries(root)) == 2


@pytest.mark.parametrize("damage", ["truncate", "delete", "bad_manifest", "bad_table",
                                    "flipped_bytes"])
def test_corrupt_entry_falls_back_to_parsing_and_is_rewritten(
        dlrm3: Path, tmp_path: Path, count_reads: list[str], damage: str) -> None:
    root = tmp_path / "cache"
    f = dlrm3 / "rank-2.pt.trace.json.gz"
    ref = traincast.load(f, cache=root)
    (entry,) = _entries(root)
    data = bytearray(entry.read_bytes())
    n_manifest = int.from_bytes(data[-16:-8], "little")
    if damage == "truncate":
        entry.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "delete":
        entry.unlink()
    elif damage == "bad_manifest":  # JSON cut short, lengths kept
        start = len(data) - 16 - n_manifest
        data[start:start + n_manifest] = b"{" + b" " * (n_manifest - 1)
        entry.write_bytes(bytes(data))
    elif damage == "bad_table":  # the first table's stream header overwritten
        data[:64] = b"\xff" * 64
        entry.write_bytes(bytes(data))
    else:  # bytes in the middle of the tables flipped
        mid = (len(data) - 16 - n_manifest) // 2
        data[mid:mid + 256] = bytes(255 - b for b in data[mid:mid + 256])
        entry.write_bytes(bytes(data))
    wait_for_writes()  # the whole-job entry is written in the background: let it finish,
    shutil.rmtree(root / f"v{CACHE_SCHEMA}" / "jobs")  # then drop it (it would hit first)
    n = len(count_reads)
    again = traincast.load(f, cache=root)  # no crash: parsed again
    assert len(count_reads) == n + 1
    _same(ref, again)
    third = traincast.load(f, cache=root)  # the entry was rewritten: a hit
    assert len(count_reads) == n + 1
    _same(ref, third)


def test_cache_disabled(dlrm3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        count_reads: list[str]) -> None:
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "env-cache"))
    traincast.load(dlrm3, cache=False)
    traincast.load(dlrm3, cache=False)
    assert len(count_reads) == 6
    assert not (tmp_path / "env-cache").exists()
    for off in ("off", "0", "none"):
        monkeypatch.setenv("TRAINCAST_CACHE_DIR", off)
        assert cache_dir() is None and resolve(None) is None and resolve(True) is None
    traincast.load(dlrm3)
    assert len(count_reads) == 9


def test_cache_dir_from_environment(dlrm3: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch,
                                    count_reads: list[str]) -> None:
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "env-cache"))
    traincast.load(dlrm3)
    assert len(_entries(tmp_path / "env-cache")) == 3
    traincast.load(dlrm3, cache=True)
    assert len(count_reads) == 3
    monkeypatch.delenv("TRAINCAST_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "traincast"


def test_unwritable_cache_is_skipped(dlrm3: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    ts = traincast.load(dlrm3, cache=blocker)  # cannot create entries under a file
    _same(ts, traincast.load(dlrm3, cache=False))


def test_inflate_limit_still_refuses_a_cached_file(dlrm3: Path, tmp_path: Path) -> None:
    f = dlrm3 / "rank-0.pt.trace.json.gz"
    traincast.load(f, cache=tmp_path / "c")
    with pytest.raises(InputTooLargeError):
        traincast.load(f, cache=tmp_path / "c", max_inflate_bytes=100_000)


@pytest.mark.filterwarnings("ignore:.*no ProfilerStep")
def test_nsys_records_round_trip(traces: Path, tmp_path: Path) -> None:
    f = traces / "nsys" / "saxpy_mpi_1xa100.sqlite"
    ref = traincast.load(f, cache=False)
    traincast.load(f, cache=tmp_path / "c")
    store = TraceCache(tmp_path / "c")
    (rec,) = store.get(f, file_key(f)) or [None]
    assert type(rec).__name__ == "NsysFile"
    _same(ref, traincast.load(f, cache=tmp_path / "c"))


def test_parallel_load_equals_serial(dlrm3: Path, tmp_path: Path) -> None:
    try:
        serial = traincast.load(dlrm3, cache=False, executor="serial")
        par = traincast.load(dlrm3, cache=False, executor="process", workers=2)
        _same(serial, par)
        # parsed in workers, then cached here: a warm load equals too
        traincast.load(dlrm3, cache=tmp_path / "c", executor="process", workers=2)
        assert len(_entries(tmp_path / "c")) == 3
        _same(serial, traincast.load(dlrm3, cache=tmp_path / "c", executor="process"))
        # a worker's trace error keeps its type
        (dlrm3 / "rank-1.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
        with pytest.raises(TraceFormatError):
            traincast.load(dlrm3, cache=False, executor="process", workers=2)
    finally:
        shutdown_executor()


def test_executor_argument_is_checked(dlrm3: Path) -> None:
    with pytest.raises(ExecutorError):
        traincast.load(dlrm3, cache=False, executor="threads")
    with pytest.raises(ExecutorError):
        traincast.load(dlrm3, cache=False, workers=0)


def test_auto_executor_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = tmp_path / "a.json.gz"
    small.write_bytes(b"x" * 1000)
    big = tmp_path / "b.json"
    big.write_bytes(b"x" * 10)
    assert load_mod.choose_executor(None, [small, big], 2) == "serial"
    assert load_mod.choose_executor("process", [small], 2) == "process"
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", 1000)
    monkeypatch.setattr(load_mod, "_main_is_guarded", lambda: True)
    assert load_mod.choose_executor(None, [small, big], 2) == "process"
    assert load_mod.choose_executor(None, [small, big], 1) == "serial"
    assert load_mod.choose_executor(None, [small], 2) == "serial"
    monkeypatch.setattr(load_mod, "_main_is_guarded", lambda: False)
    assert load_mod.choose_executor(None, [small, big], 2) == "serial"


@pytest.mark.parametrize("damage", ["truncate", "flipped_bytes", "other_code"])
def test_job_entry_hit_and_damage(dlrm3: Path, tmp_path: Path, count_reads: list[str],
                                  monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    """A whole job is stored assembled: a second load reads one entry (no reader call, no
    per-file entry read), equal to the first, with the same warnings; a damaged entry or one
    from other assembly code is assembled again from the per-file entries."""
    import traincast.trace.cache as C

    root = tmp_path / "cache"
    cold = traincast.load(dlrm3, cache=root, iteration_marker="ProfilerStep#10")
    C.wait_for_writes()  # the job entry is written in the background
    (job,) = (root / f"v{CACHE_SCHEMA}" / "jobs").rglob("*.arrows")
    n = len(count_reads)
    per_file_reads: list[str] = []
    real_get = C.TraceCache.get
    monkeypatch.setattr(C.TraceCache, "get",
                        lambda self, p, k: per_file_reads.append(p.name) or real_get(self, p, k))
    warm = traincast.load(dlrm3, cache=root, iteration_marker="ProfilerStep#10")
    assert len(count_reads) == n and per_file_reads == []
    _same(cold, warm)
    assert warm.warnings == cold.warnings
    assert {r: i.path for r, i in warm.ranks.items()} == {r: i.path for r, i in cold.ranks.items()}
    # another marker is another job
    traincast.load(dlrm3, cache=root)
    C.wait_for_writes()
    assert len(list((root / f"v{CACHE_SCHEMA}" / "jobs").rglob("*.arrows"))) == 2
    data = job.read_bytes()
    if damage == "truncate":
        job.write_bytes(data[: len(data) // 3])
    elif damage == "flipped_bytes":
        mid = len(data) // 3
        job.write_bytes(data[:mid] + bytes(255 - b for b in data[mid:mid + 512])
                        + data[mid + 512:])
    else:
        monkeypatch.setattr(K, "JOB_CODE_FILES", (*K.JOB_CODE_FILES, "arrow.py"))
    per_file_reads.clear()
    again = traincast.load(dlrm3, cache=root, iteration_marker="ProfilerStep#10")
    assert len(count_reads) == n and len(per_file_reads) == 3  # per-file entries, no parse
    _same(cold, again)


def test_job_entry_repeats_the_warnings(traces: Path, tmp_path: Path) -> None:
    f = traces / "tracelens" / "b200_8rank_rank0.json.gz"  # no ProfilerStep#N markers
    with pytest.warns(UserWarning) as cold_w:
        cold = traincast.load(f, cache=tmp_path / "c")
    with pytest.warns(UserWarning) as warm_w:
        warm = traincast.load(f, cache=tmp_path / "c")
    assert cold.warnings and warm.warnings == cold.warnings
    assert [str(w.message) for w in warm_w] == [str(w.message) for w in cold_w]
    _same(cold, warm)


def test_job_entry_written_in_the_background_is_waited_for(
        dlrm3: Path, tmp_path: Path, count_reads: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-job entry is finished on a thread after the load returns; a second load of
    the same job waits for that write and reads the entry (no parse, no per-file read), and
    wait_for_writes() leaves no write pending."""
    import threading
    import time

    import traincast.trace.cache as C

    real_close = C._EntryFile.close
    started = threading.Event()

    def slow_close(self: C._EntryFile, *args: object, **kw: object) -> bool:
        if self.entry.parent.parent.name == "jobs":  # the job entry's, not a file's
            started.set()
            time.sleep(0.3)
        return real_close(self, *args, **kw)

    monkeypatch.setattr(C._EntryFile, "close", slow_close)
    root = tmp_path / "cache"
    cold = traincast.load(dlrm3, cache=root)
    jobs = root / f"v{CACHE_SCHEMA}" / "jobs"
    assert started.wait(5) and not list(jobs.rglob("*.arrows"))  # still being written
    n = len(count_reads)
    per_file_reads: list[str] = []
    real_get = C.TraceCache.get
    monkeypatch.setattr(C.TraceCache, "get",
                        lambda self, p, k: per_file_reads.append(p.name) or real_get(self, p, k))
    warm = traincast.load(dlrm3, cache=root)
    assert len(count_reads) == n and per_file_reads == []
    _same(cold, warm)
    C.wait_for_writes()
    assert not C._PENDING and len(list(jobs.rglob("*.arrows"))) == 1


def test_automatic_parallel_load_stops_its_own_pool(dlrm3: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool the load starts on its own is stopped after it (idle parse workers would keep
    ~120 MiB each); a pool that was running before, or one asked for, is kept."""
    from traincast.util.executor import local_pool_running, map_tasks

    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(load_mod, "_main_is_guarded", lambda: True)
    shutdown_executor()
    calls: list[str] = []
    real = load_mod.choose_executor

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(load_mod, "choose_executor", spy)
    try:
        ts = traincast.load(dlrm3, cache=False, workers=2)
        assert calls == ["process"] and ts.events.num_rows > 0
        assert not local_pool_running()
        ts2 = traincast.load(dlrm3, cache=False, executor="process", workers=2)
        assert local_pool_running()  # asked for: kept for the caller's next use
        assert ts2.events.equals(ts.events)
        assert map_tasks(abs, [-1, -2, -3, -4], executor="process", workers=2,
                         chunksize=1) == [1, 2, 3, 4]
        traincast.load(dlrm3, cache=False, workers=2)
        assert local_pool_running()  # it was running before the load: not the load's own
    finally:
        shutdown_executor()
