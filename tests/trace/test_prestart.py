"""Parse workers started ahead of a load by a command (traincast.trace.prestart): started
only where the load would start its own, taken by that load (the TraceSet unchanged, the
pool stopped after it), stopped when the load does not take them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import traincast
from traincast.cli.output import start_parse_ahead
from traincast.trace import cache as C
from traincast.trace import load as load_mod
from traincast.trace import parse_server
from traincast.trace import prestart as prestart_mod
from traincast.trace.prestart import prestart
from traincast.util.executor import local_pool_running
from traincast.util.executor import shutdown as shutdown_executor


@pytest.fixture
def ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_jobs_in_pool: None
          ) -> list[object]:
    """A cache folder in the environment, small jobs parsed in a pool (by the load and by
    prestart), the Warmers that loads take recorded."""
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache"))
    taken: list[object] = []
    real = load_mod.take_early

    def spy(files, workers):  # type: ignore[no-untyped-def]
        got = real(files, workers)
        taken.append(got)
        return got

    monkeypatch.setattr(load_mod, "take_early", spy)
    shutdown_executor()
    yield taken
    while parse_server._EARLY:
        parse_server._EARLY.pop()[1].cancel()
    shutdown_executor()


def test_started_ahead_and_taken_by_the_load(dlrm3: Path, ahead: list[object]) -> None:
    assert prestart(dlrm3, workers=2)
    cold = traincast.load(dlrm3, workers=2)
    assert len(ahead) == 1 and isinstance(ahead[0], parse_server.Warmer)
    assert not local_pool_running()  # the load's pool, stopped after it
    C.wait_for_writes()
    serial = traincast.load(dlrm3, cache=False, executor="serial")
    assert cold.events.equals(serial.events) and cold.ranks == serial.ranks
    # cached now (found by stat): nothing started
    assert not prestart(dlrm3, workers=2)
    assert not parse_server._EARLY


def test_not_taken_by_another_load_is_stopped(dlrm3: Path, tmp_path: Path,
                                              ahead: list[object]) -> None:
    other = tmp_path / "other"
    shutil.copytree(dlrm3, other)
    assert prestart(dlrm3, workers=2)
    warmer = parse_server._EARLY[0][1]
    traincast.load(other, workers=2, executor="serial")  # other files: not taken
    assert ahead == [None] and not parse_server._EARLY
    warmer.done()
    assert not local_pool_running()


def test_not_started_where_the_load_would_not_start_workers(
        dlrm3: Path, tmp_path: Path, traces: Path, monkeypatch: pytest.MonkeyPatch,
        ahead: list[object]) -> None:
    assert not prestart(dlrm3 / "rank-0.pt.trace.json.gz", workers=2)  # one file
    assert not prestart(dlrm3, workers=1)  # one core
    assert not prestart(traces / "dlrm_8xv100" / "kineto", workers=2)  # execution traces beside
    assert not prestart(tmp_path / "missing", workers=2)  # the load says what is wrong
    monkeypatch.setattr(prestart_mod, "PARALLEL_MIN_BYTES", 1 << 40)
    assert not prestart(dlrm3, workers=2)  # too little text
    monkeypatch.setattr(prestart_mod, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", "off")
    assert not prestart(dlrm3, workers=2)  # no cache
    assert not parse_server._EARLY
    # the CLI's helper: not for explicit executors, ETs or a bad rank map
    assert not start_parse_ahead(dlrm3, None, None, None, {"executor": "process"})
    assert not start_parse_ahead(dlrm3, dlrm3, None, None, {})
    assert not start_parse_ahead(dlrm3, None, None, ["nonsense"], {})


def test_read_ahead_skips_what_it_cannot_read(dlrm3: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Regular files are read ahead; a FIFO, a folder and a missing file are skipped."""
    import os

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    advised: list[int] = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, off, n, how: advised.append(how) or real(fd, off, n, how))
    files = [*sorted(dlrm3.iterdir()), fifo, tmp_path, tmp_path / "missing.json"]
    thread = parse_server.read_ahead(files)
    assert thread is not None
    thread.join(10)
    assert advised == [os.POSIX_FADV_WILLNEED] * 3
    monkeypatch.delattr(os, "posix_fadvise")
    assert parse_server.read_ahead(files) is None


def test_deciding_imports_no_numpy_nor_arrow() -> None:
    """The decision runs before the command's heavy imports: importing it (and the size
    estimate it reads) in a fresh interpreter loads neither numpy, Arrow nor numba."""
    import subprocess
    import sys

    code = ("import sys, traincast.trace.prestart, traincast.trace.readers.text_size; "
            "print(sorted(m for m in ('numpy', 'pyarrow', 'numba', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_size_estimate_kept_where_it_was() -> None:
    """The estimate moved to a module of its own; the scanner's module still offers it."""
    from traincast.trace.readers import jsonscan, text_size

    assert jsonscan.estimated_text_bytes is text_size.estimated_text_bytes
    assert jsonscan.GZIP_RATIO == text_size.GZIP_RATIO == 15
