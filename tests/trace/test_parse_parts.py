"""Rank parts computed where the files are parsed, records shipped through a spool folder,
and parse workers started ahead of the parse: the TraceSet stays the serial load's."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import traincast
from traincast.errors import IterationError
from traincast.trace import assemble as assemble_mod
from traincast.trace import cache as C
from traincast.trace import load as load_mod
from traincast.trace import parse_server, shipped
from traincast.trace.readers.kineto import read_kineto
from traincast.util.executor import local_pool_running
from traincast.util.executor import shutdown as shutdown_executor

_TABLES = ("events", "collectives", "shapes", "iterations", "stream_waits", "member_lists")


def _same(a: traincast.TraceSet, b: traincast.TraceSet) -> None:
    for name in _TABLES:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.schema == y.schema and x.equals(y), name
    assert a.ranks == b.ranks and a.warnings == b.warnings


def _parsed(folder: Path) -> list[tuple[int, object]]:
    recs = [read_kineto(f) for f in sorted(folder.iterdir())]
    return sorted(((int(k.distributed_info["rank"]), k) for k in recs), key=lambda x: x[0])


def test_worker_parts_give_the_serial_assembly(dlrm3: Path) -> None:
    """Parts made as a worker makes them are used as they are, and a part whose world or
    rank is not the job's is made again: the TraceSet is the same either way."""
    parsed = _parsed(dlrm3)
    plain = assemble_mod.assemble(parsed, [], None)
    parts = {id(k): load_mod._worker_part(k, None, None) for _, k in parsed}
    assert all(p is not None and p.world == 8 for p in parts.values())
    _same(assemble_mod.assemble(parsed, [], None, None, parts), plain)
    parts[id(parsed[0][1])].world = 16  # another world's members: not used
    parts[id(parsed[1][1])].rank = 7
    _same(assemble_mod.assemble(parsed, [], None, None, parts), plain)
    # no world size recorded, or a step marker that matches nothing: no part
    k = parsed[0][1]
    assert load_mod._worker_part(k, None, "no such marker") is None
    info = dict(k.distributed_info)
    del info["world_size"]
    k.distributed_info = info
    assert load_mod._worker_part(k, None, None) is None


def test_parallel_load_with_worker_parts_equals_serial(dlrm3: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    made_here: list[int] = []
    real = assemble_mod.rank_part

    def counting(rank: int, *args, **kwargs):  # type: ignore[no-untyped-def]
        made_here.append(rank)
        return real(rank, *args, **kwargs)

    serial = traincast.load(dlrm3, cache=False, executor="serial")
    monkeypatch.setattr(assemble_mod, "rank_part", counting)
    try:
        par = traincast.load(dlrm3, cache=False, executor="process", workers=2)
        assert made_here == []  # every rank's part came from a worker
        _same(par, serial)
        with pytest.raises(IterationError, match="matches no host event"):
            traincast.load(dlrm3, cache=False, executor="process", workers=2,
                           iteration_marker="no such marker")
    finally:
        shutdown_executor()


def test_shipped_round_trip_inline_and_spooled(dlrm3: Path, tmp_path: Path) -> None:
    parsed = _parsed(dlrm3)
    rank, k = parsed[0]
    part = load_mod._worker_part(k, None, None)
    folder = tmp_path / "spool"
    folder.mkdir()
    for where in (None, str(folder), str(tmp_path / "missing")):
        back = pickle.loads(pickle.dumps(shipped.Shipped(k, part, where)))
        assert back.record.events.equals(part.events)  # the part's events stand for them
        for name in ("comm_args", "shapes", "stream_waits"):
            assert getattr(back.record, name).equals(getattr(k, name))
        assert back.part.rank == rank and back.part.events is back.record.events
        assert back.part.steps.number.tolist() == part.steps.number.tolist()
        assert len(back.part.calls) == len(part.calls)
        assert list(folder.iterdir()) == []  # mapped, then its name deleted
    plain = pickle.loads(pickle.dumps(shipped.Shipped(k)))
    assert plain.part is None and plain.record.events.equals(k.events)


def test_spool_sweeps_folders_of_ended_processes(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shipped, "SPOOL_ROOT", tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dead = tmp_path / f"traincast-parse-{gone}-abc"
    alive = tmp_path / f"traincast-parse-{os.getpid()}-abc"
    for d in (dead, alive):
        d.mkdir()
        (d / "x").write_bytes(b"1")
    new = shipped.spool()
    assert new is not None and new.parent == tmp_path and new.is_dir()
    assert not dead.exists() and alive.exists()
    monkeypatch.setattr(shipped, "SPOOL_ROOT", tmp_path / "none")
    assert shipped.spool() is None


def test_workers_started_ahead_are_stopped(dlrm3: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Not found by stat: the workers start while the files are hashed and the load's pool
    is stopped after it; a hit by content (the same bytes, touched) stops them unused."""
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(load_mod, "JOB_ONLY_MIN_FILES", 2)
    monkeypatch.setattr(load_mod, "_main_is_guarded", lambda: True)
    started: list[object] = []
    real = load_mod._Warmer

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(load_mod, "_Warmer", spy)
    shutdown_executor()
    cache = tmp_path / "cache"
    try:
        cold = traincast.load(dlrm3, cache=cache, workers=2)
        assert len(started) == 1 and not local_pool_running()
        C.wait_for_writes()
        _same(cold, traincast.load(dlrm3, cache=False, executor="serial"))
        for f in dlrm3.iterdir():  # touched: the stat key misses, the content hits
            os.utime(f)
        hit = traincast.load(dlrm3, cache=cache, workers=2)
        assert len(started) == 2
        started[-1].done()
        assert not local_pool_running() and hit.events.equals(cold.events)
    finally:
        shutdown_executor()


def test_forkserver_preloads_the_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse workers' forkserver, when not running yet, is asked to import the loader
    (and, for a compiled parse, load the kernels) before it forks them; modules already
    asked for stay first. A running one is left alone. Stopping it puts the caller's list
    back. The preloaded module never raises."""
    import time
    from multiprocessing import forkserver

    server = forkserver._forkserver  # type: ignore[attr-defined]
    monkeypatch.setattr(server, "_preload_modules", ["__main__"])
    monkeypatch.setattr(server, "_forkserver_pid", None)  # not running
    monkeypatch.setattr(server, "_stop", lambda: None)
    monkeypatch.setattr(parse_server, "_PREVIOUS", [])
    assert parse_server.preload_parse_workers(True)
    assert server._preload_modules == ["__main__", "traincast.trace.worker_preload"]
    assert parse_server.preload_parse_workers(True)
    assert parse_server.preload_parse_workers(None)
    assert server._preload_modules == ["__main__", "traincast.trace.worker_preload",
                                       "traincast.trace.load"]
    parse_server.stop_forkserver()
    for _ in range(100):
        if server._preload_modules == ["__main__"]:
            break
        time.sleep(0.02)
    assert server._preload_modules == ["__main__"] and not parse_server._PREVIOUS

    monkeypatch.setattr(server, "_forkserver_pid", 12345)  # running: its list was read
    assert not parse_server.preload_parse_workers(True)
    assert server._preload_modules == ["__main__"]
    out = subprocess.run([sys.executable, "-c", "import traincast.trace.worker_preload"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stderr == ""


def test_forkserver_started_for_a_load_is_stopped_after_it(
        dlrm3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forkserver that a load starts with the loader preloaded (it would keep it for the
    life of the process) is stopped with the load's workers; the load is the serial one."""
    import time
    from multiprocessing import forkserver

    server = forkserver._forkserver  # type: ignore[attr-defined]
    shutdown_executor()
    server._stop()
    monkeypatch.setattr(server, "_preload_modules", ["__main__"])
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(load_mod, "JOB_ONLY_MIN_FILES", 2)
    monkeypatch.setattr(load_mod, "_main_is_guarded", lambda: True)
    try:
        cold = traincast.load(dlrm3, cache=tmp_path / "cache", workers=2)
        assert not local_pool_running()
        for _ in range(100):
            if server._forkserver_pid is None:
                break
            time.sleep(0.05)
        assert server._forkserver_pid is None
        for _ in range(100):  # and the caller's preload list is back
            if server._preload_modules == ["__main__"]:
                break
            time.sleep(0.05)
        assert server._preload_modules == ["__main__"]
        _same(cold, traincast.load(dlrm3, cache=False, executor="serial"))
    finally:
        C.wait_for_writes()
        shutdown_executor()
