"""A small job's first load, started in a child process while the command imports what it runs.

A job with execution traces (ETs) that is not in the parse cache yet spends most of its first
load, after the command's imports (~0.4 s), reading the ETs
(:func:`~traincast.trace.readers.et.read_execution_trace`, pure Python: ~15-35 ms a rank on
this project's 2-core machine) and parsing its profiler traces, all on one core.
:func:`start` forks a child process that works on the other core meanwhile:

1. it reads the ETs through the parse cache (:func:`~traincast.trace.cache_et.read_et_cached`,
   which stores each one's entry);
2. then it parses profiler traces (``files``) from a queue it shares with the loading process
   (a pipe holding each file's index once: whoever reads an index parses that file), storing
   each one's entry in the parse cache as the load would
   (:func:`~traincast.trace.readers.kineto.read_kineto`, then
   :meth:`~traincast.trace.cache.TraceCache.put` under the file's key); a file whose entry is
   stored already is skipped.

The load takes from the same queue (:func:`read_shared`) when it parses those files in its
own process, then waits for the child and reads the files the child parsed from their
entries; before it reads the ETs it waits for the child (:func:`wait_for`) and finds their
entries in the cache. What the load reads and returns is unchanged: an entry the child did
not write (it failed, was killed, read other files) is a miss and the file is read here, a
damaged one is read again as always, and a file that cannot be parsed is parsed again here
so that its error is raised in file order.

The child is only forked where that is safe: on Linux, from a process with no other Python
thread and before numpy or Arrow are imported (a command before its heavy imports; never a
test process or an application that loads through the API), with two CPUs or more to run
on. Its standard streams go to ``/dev/null``; Ctrl-C ends it with the command; it ends with
``os._exit`` (no ``atexit`` handlers, no buffers flushed twice).

Imports only light modules. :func:`start` and :func:`wait_for` never raise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["WAIT_LIMIT_S", "can_fork", "read_shared", "start", "wait_for"]

log = logging.getLogger(__name__)

#: the longest a load waits (s) for the child before it stops it and reads the files itself
#: (the child's work is bounded; this guards against a child that hangs)
WAIT_LIMIT_S = 60.0

_TOKEN = 4  # bytes of one file index in the queue (little-endian)
_OFF = {"0", "off", "no", "false"}

T = TypeVar("T")


@dataclass
class _Child:
    pid: int
    ets: tuple[Path, ...]
    files: tuple[Path, ...]
    queue: int  # read end of the queue of file indexes (-1: none)


#: the child started by :func:`start` and not waited for yet
_CHILD: list[_Child] = []


def can_fork() -> bool:
    """Whether a child can be forked safely here (module docstring): Linux, ``os.fork``, one
    Python thread, neither numpy nor pyarrow imported, two usable CPUs or more, and
    ``TRAINCAST_READ_AHEAD`` not set to ``0`` (or ``off``, ``no``, ``false``)."""
    if os.environ.get("TRAINCAST_READ_AHEAD", "").strip().lower() in _OFF:
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    if threading.active_count() != 1 or "numpy" in sys.modules or "pyarrow" in sys.modules:
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):  # pragma: no cover - Linux has it
        return (os.cpu_count() or 1) >= 2


def start(ets: list[Path], files: list[Path] | None = None) -> bool:
    """Fork a child that reads ``ets`` (in order) through the default parse cache, then
    parses the profiler traces ``files`` it takes from the queue shared with the load, when
    :func:`can_fork`; True when started. A child started before and not waited for is left
    to finish on its own."""
    if not (ets or files) or not can_fork():
        return False
    _reap()
    files = list(files or ())
    queue = -1
    try:
        if files:
            queue, put = os.pipe()
            tokens = b"".join(i.to_bytes(_TOKEN, "little") for i in range(len(files)))
            if len(tokens) > 65536:  # past a pipe's buffer the write would block
                os.close(queue)
                os.close(put)
                queue, files = -1, []
            else:
                os.write(put, tokens)
                os.close(put)  # the queue ends (EOF) once every index is taken
        pid = os.fork()
    except OSError:  # no pipes or processes left: the load does the work
        if queue >= 0:
            os.close(queue)
        return False
    if pid == 0:  # pragma: no cover - the child (measured by the tests through its entries)
        _child(list(ets), files, queue)
    _CHILD.append(_Child(pid, tuple(ets), tuple(files), queue))
    return True


def wait_for(ets: list[Path]) -> bool:
    """Before a load reads ``ets``: wait for the child started for exactly these ETs (their
    entries are then in the cache); True when one was waited for. A child started for other
    files is left to finish on its own (and reaped later)."""
    child = _take(lambda c: c.ets == tuple(ets))
    if child is None:
        return False
    _wait(child)
    return True


def read_shared(files: list[Path], todo: list[int], parse: Callable[[int], T],
                cached: Callable[[int], T | None]) -> tuple[dict[int, T], set[int]] | None:
    """Parse the files ``todo`` (indexes into ``files``, all missing from the cache) with the
    child started for exactly these ``files``; None when there is none (the caller parses
    them all). Indexes are taken from the shared queue: those in ``todo`` are parsed here
    (``parse(i)``), the child parses the others it takes; after the queue is empty the child
    is waited for and the files it parsed are read back (``cached(i)``; a miss is parsed
    here). Returns the result of every file of ``todo`` and the set of those read back from
    the child's entries. An error of ``parse`` is raised for the first such file in
    ``todo`` order, as a serial parse would."""
    child = _take(lambda c: c.files == tuple(files) and c.queue >= 0)
    if child is None:
        return None
    want = set(todo)
    mine: dict[int, T | Exception] = {}
    try:
        while tok := os.read(child.queue, _TOKEN):
            i = int.from_bytes(tok, "little")
            if i in want:
                try:
                    mine[i] = parse(i)
                except Exception as exc:  # noqa: BLE001 - raised below, in file order
                    mine[i] = exc
    finally:
        _wait(child)
    out: dict[int, T] = {}
    back: set[int] = set()
    for i in todo:
        got = mine.get(i)
        if isinstance(got, Exception):
            raise got
        if i not in mine:
            hit = cached(i)
            if hit is not None:
                back.add(i)
                out[i] = hit
                continue
            got = parse(i)
        out[i] = got  # type: ignore[assignment]
    return out, back


def _take(match: Callable[[_Child], bool]) -> _Child | None:
    """The held child that ``match``es, no longer held; None (and the ended ones reaped)."""
    for child in _CHILD:
        if match(child):
            _CHILD.remove(child)
            return child
    _reap()
    return None


def _wait(child: _Child) -> None:
    """Wait for ``child`` to end (at most :data:`WAIT_LIMIT_S`, then it is stopped)."""
    if child.queue >= 0:
        with contextlib.suppress(OSError):
            os.close(child.queue)
    deadline = time.monotonic() + WAIT_LIMIT_S
    pause = 0.0005
    while True:
        try:
            done, _ = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler): it ended
            return
        if done:
            return
        if time.monotonic() > deadline:
            log.debug("traincast: the read-ahead child %d did not end; stopped", child.pid)
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)
                os.waitpid(child.pid, 0)
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.005)


def _reap() -> None:
    """Collect the children that ended (no zombies); those still running are kept."""
    for child in list(_CHILD):
        try:
            done, _ = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            done = child.pid
        if done:
            _CHILD.remove(child)
            if child.queue >= 0:
                with contextlib.suppress(OSError):
                    os.close(child.queue)


def _child(ets: list[Path], files: list[Path], queue: int) -> None:  # pragma: no cover
    """Read ``ets`` into the parse cache, then the ``files`` taken from ``queue``; exit at
    once (never returns). Runs in the forked child."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it with the command
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        import gc

        gc.disable()  # short-lived: its objects go with the process

        # lazy: the command forks before its heavy imports; the child pays for these alone
        from traincast.trace import cache as C
        from traincast.trace.cache_et import read_et_cached  # lazy: as above

        store = C.resolve(None)
        for path in ets:
            try:
                read_et_cached(path, store)
            except Exception:  # noqa: BLE001, S112 - the load reads it again and says why
                continue
        if queue < 0 or store is None:
            return
        from traincast.trace.readers.kineto import read_kineto  # lazy: as above

        while tok := os.read(queue, _TOKEN):
            f = files[int.from_bytes(tok, "little")]
            try:
                key = C.file_key(f)
                if not store.holds(key):
                    store.put(key, [read_kineto(f)])
            except Exception:  # noqa: BLE001, S112 - the load parses it again and says why
                continue
    finally:
        os._exit(0)
