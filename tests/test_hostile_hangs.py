"""Hostile input that used to hang or never end: non-regular files given as traces (FIFOs,
devices, sockets), kernel-model files as untrusted input, cyclic or very deep execution
traces, the shared process pool used from several threads, and workers or cache temporaries
left behind by a killed parent.

Every refusal through the CLI is one line on stderr with exit 2; through the API a specific
:class:`~traincast.errors.TraincastError`. Hangs are bounded by subprocess timeouts (a hang
fails with ``TimeoutExpired``) or ``signal.alarm``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import traincast
from traincast.errors import NotRegularFileError
from traincast.util.fileio import open_regular


def refused(r: subprocess.CompletedProcess, *names: str) -> str:
    """Assert a clean refusal: exit 2, one stderr line, naming every one of ``names``."""
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("traincast: error: "), r.stderr
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _cli(*args: str, timeout: float = 60, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    """The CLI in its own process, bounded in time (a hang fails with TimeoutExpired)."""
    return subprocess.run([sys.executable, "-m", "traincast.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


# --- only regular files are traces ----------------------------------------------------------

@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    p = tmp_path / "t.json"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("cache", ["off", "on"])
def test_fifo_trace_refused(fifo: Path, tmp_path: Path, cache: str) -> None:
    env = {"TRAINCAST_CACHE_DIR": "off" if cache == "off" else str(tmp_path / "cache")}
    line = refused(_cli("analyze", str(fifo), timeout=30, env=env), str(fifo))
    assert "not a regular file (a FIFO)" in line


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom"])
def test_endless_device_trace_refused(dev: str, tmp_path: Path) -> None:
    if not os.path.exists(dev):
        pytest.skip(f"no {dev}")
    r = _cli("analyze", dev, timeout=30, env={"TRAINCAST_CACHE_DIR": str(tmp_path / "c")})
    assert "not a regular file (a character device)" in refused(r, dev)


def test_fifo_in_folder_refused_not_skipped(traces: Path, tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz", d / "rank-0.json.gz")
    os.mkfifo(d / "rank-1.json")
    r = _cli("analyze", str(d), timeout=30, env={"TRAINCAST_CACHE_DIR": "off"})
    assert "not a regular file (a FIFO)" in refused(r, "rank-1.json")


def test_socket_trace_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(p))
        with pytest.raises(NotRegularFileError, match="a socket"):
            traincast.load(p, cache=False)
    finally:
        s.close()


def test_fifo_execution_trace_refused(traces: Path, tmp_path: Path) -> None:
    et = tmp_path / "et"
    et.mkdir()
    os.mkfifo(et / "rank-0.et.json")
    r = _cli("analyze", str(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz"),
             "--et-dir", str(et), timeout=30, env={"TRAINCAST_CACHE_DIR": "off"})
    assert r.returncode == 2 or "not a regular file" not in r.stderr  # a refusal if refused
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        traincast.load(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz", et_dir=et,
                       cache=False)


@pytest.mark.parametrize("cache", [False, True])
def test_fifo_through_api(fifo: Path, tmp_path: Path, cache: bool) -> None:
    with pytest.raises(NotRegularFileError, match="not a regular file"):
        traincast.load(fifo, cache=tmp_path / "c" if cache else False)
    with pytest.raises(NotRegularFileError):
        traincast.load([fifo], cache=False)


def test_open_regular_checks_the_descriptor(fifo: Path, monkeypatch) -> None:
    """A path that passes the stat check but is a FIFO when opened (swapped in between) is
    refused on the open descriptor without blocking."""
    monkeypatch.setattr("traincast.util.fileio.check_regular", lambda p: None)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        open_regular(fifo)


def test_otf2_event_file_fifo_refused(traces: Path, tmp_path: Path) -> None:
    pytest.importorskip("otf2")
    src = traces / "otf2" / "ping-pong-otf2"
    d = tmp_path / "otf2"
    shutil.copytree(src, d)
    (d / "traces" / "1.evt").unlink()
    os.mkfifo(d / "traces" / "1.evt")
    r = _cli("analyze", str(d / "traces.otf2"), timeout=30, env={"TRAINCAST_CACHE_DIR": "off"})
    assert "not a regular file (a FIFO)" in refused(r, "1.evt")
