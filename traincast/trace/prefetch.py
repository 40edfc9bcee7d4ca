"""A small job's first load, started in a child process while the command imports what it runs.

A job with execution traces (ETs) that is not in the parse cache yet spends most of its first
load, after the command's imports (~0.4 s), parsing its profiler traces and reading its ETs
(:func:`~traincast.trace.readers.et.read_execution_trace`, pure Python: ~15-35 ms a rank on
this project's 2-core machine), all on one core. :func:`start` forks a child process that
works on the other core meanwhile, from a queue it shares with the loading process: a pipe
holding the index of every ET and of every profiler trace (``files``), each once, the
longest work first (:func:`_order`); whoever reads an index does that file:

* a profiler trace is parsed into the parse cache as the load would store it
  (:func:`~traincast.trace.readers.kineto.read_kineto`, then
  :meth:`~traincast.trace.cache.TraceCache.put` under the file's key); one stored already is
  skipped;
* an ET is read through the parse cache (:func:`~traincast.trace.cache_et.read_et_cached`,
  which stores its entry).

The load takes from the same queue where it would parse the files one by one
(:func:`read_shared`: the traces it takes are parsed as usual, the ETs read into the cache);
once the queue is empty each process links the traces it parsed to their ETs, into the cache
(:mod:`traincast.trace.link.ahead`; not under ``--rank-map``); the load then waits for the
child and reads the files the child parsed back from their entries; a
load that does not parse them so (the compiled scanner, a pool) takes the ETs left before it
reads them (:func:`wait_for`). Either way the ETs are then read from their entries. What the
load reads and returns is unchanged: an entry the child did not write (it failed, was killed,
read other files) is a miss and the file is read here, a damaged one is read again as always,
and a trace that cannot be parsed is parsed again here so that its error is raised in file
order; an ET that cannot be read is read again where the load reads the ETs, which raises.

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
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["WAIT_LIMIT_S", "can_fork", "read_shared", "start", "wait_for"]

log = logging.getLogger(__name__)

#: the longest a load waits (s) for the child before it stops it and reads the files itself
#: (the child's work is bounded; this guards against a child that hangs)
WAIT_LIMIT_S = 60.0

_TOKEN = 4  # bytes of one index in the queue (little-endian): files, then n_files + ET
_OFF = {"0", "off", "no", "false"}

T = TypeVar("T")


@dataclass
class _Child:
    pid: int
    ets: tuple[Path, ...]
    files: tuple[Path, ...]
    queue: int  # read end of the queue of indexes (-1: closed)
    link: bool = False  # each process links the traces it parsed (link_ahead)


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


def start(ets: list[Path], files: list[Path] | None = None, *, link: bool = False) -> bool:
    """Fork a child that works through the queue of the profiler traces ``files`` and the
    ``ets`` (module docstring) with the load, when :func:`can_fork`; True when started. With
    ``link``, once the queue is empty each process links the traces it parsed to their ETs
    (:func:`~traincast.trace.link.ahead.link_ahead`: the load's own ranks are assigned from
    what the files record, no ``--rank-map``). A child started before and not waited for is
    left to finish on its own."""
    files = list(files or ())
    n = len(files) + len(ets)
    if not n or n * _TOKEN > 65536 or not can_fork():  # (past a pipe's buffer: would block)
        return False
    _reap()
    try:
        queue, put = os.pipe()
    except OSError:  # no file descriptors left: the load does the work
        return False
    try:
        os.write(put, b"".join(i.to_bytes(_TOKEN, "little") for i in _order(files, ets)))
        os.close(put)  # the queue ends (EOF) once every index is taken
        pid = os.fork()
    except OSError:  # no processes left: the load does the work
        os.close(queue)
        return False
    if pid == 0:  # pragma: no cover - the child (measured by the tests through its entries)
        _child(list(ets), files, queue, link)
    _CHILD.append(_Child(pid, tuple(ets), tuple(files), queue, link))
    return True


def _order(files: list[Path], ets: list[Path]) -> list[int]:
    """The queue's indexes (``files`` are ``0 .. len(files) - 1``, the ETs follow), longest
    work first, so that neither process is left with a long file at the end while the other
    waits (Graham's LPT rule, SIAM J. Appl. Math. 17(2), 1969): the ETs first (an ET takes
    longer to read than a profiler trace of its size: ``docs/design/read_ahead.md``), each
    kind by size, largest first (a file that cannot be stat'ed counts as empty)."""
    def size(f: Path) -> int:
        try:
            return os.stat(f).st_size
        except OSError:
            return 0

    n = len(files)
    by_size = sorted(range(len(ets)), key=lambda j: -size(ets[j]))
    return [n + j for j in by_size] + sorted(range(n), key=lambda i: -size(files[i]))


def wait_for(ets: list[Path]) -> bool:
    """Before a load reads ``ets``: read the ETs left in the queue of the child started for
    exactly these ETs, then wait for it (every ET's entry is then in the cache, unless it
    could not be read); True when there was one. A child started for other files is left to
    finish on its own (and reaped later)."""
    child = _take(lambda c: c.ets == tuple(ets))
    if child is None:
        return False
    try:
        _drain(child, None)
    finally:
        _wait(child)
    return True


def read_shared(files: list[Path], todo: list[int], parse: Callable[[int], T],
                cached: Callable[[int], T | None]) -> tuple[dict[int, T], set[int]] | None:
    """Parse the files ``todo`` (indexes into ``files``, all missing from the cache) with the
    child started for exactly these ``files``; None when there is none (the caller parses
    them all). Indexes are taken from the shared queue: files in ``todo`` are parsed here
    (``parse(i)``) and ETs read into the cache here, the child does the others it takes;
    after the queue is empty the child is waited for and the files it parsed are read back
    (``cached(i)``; a miss is parsed here). Returns the result of every file of ``todo`` and
    the set of those read back from the child's entries. An error of ``parse`` is raised for
    the first such file in ``todo`` order, as a serial parse would."""
    child = _take(lambda c: c.files == tuple(files) and c.queue >= 0)
    if child is None:
        return None
    mine: dict[int, T | Exception] = {}
    try:
        known = _drain(child, (set(todo), parse, mine))
        if child.link:  # the traces parsed here, while the child links its own
            _link_own(child, {i: r for i, r in mine.items() if not isinstance(r, Exception)},
                      known)
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


def _drain(child: _Child, traces: tuple[set[int], Callable[[int], T], dict] | None
           ) -> dict[Path, Any]:
    """Take every index left in ``child``'s queue: ETs are read into the cache here (an
    error is left for the load to raise where it reads them); profiler traces, given
    ``traces = (wanted indexes, parse, results)``, are parsed here if wanted (a result or
    its exception stored by index); without ``traces`` they are left alone. Returns the ETs
    read here by path."""
    known: dict[Path, Any] = {}
    if child.queue < 0:
        return known
    # lazy: loaded by the load already (the loading process has them imported)
    from traincast.trace import cache as C
    from traincast.trace.cache_et import read_et_cached  # lazy: as above

    n = len(child.files)
    store = None
    while tok := os.read(child.queue, _TOKEN):
        i = int.from_bytes(tok, "little")
        if i < n:
            if traces is not None and i in traces[0]:
                try:
                    traces[2][i] = traces[1](i)
                except Exception as exc:  # noqa: BLE001 - raised by the caller, in file order
                    traces[2][i] = exc
            continue
        if store is None:
            store = C.resolve(None)
        try:
            known[child.ets[i - n]] = read_et_cached(child.ets[i - n], store)
        except Exception:  # noqa: BLE001, S112 - the load reads it again and says why
            continue
    return known


def _link_own(child: _Child, parsed: dict[int, Any], known: dict[Path, Any]) -> None:
    """Link the profiler traces parsed here (``parsed``: index -> the records of that file)
    to their ETs, into the cache (:func:`~traincast.trace.link.ahead.link_ahead`)."""
    # lazy: imported by the load already (the assembly links through the same modules)
    from traincast.trace import cache as C

    store = C.resolve(None)
    if store is not None:
        _link_parsed({i: r[0] for i, r in parsed.items() if len(r) == 1}, list(child.files),
                     list(child.ets), store, known)


def _link_parsed(parsed: dict[int, Any], files: list[Path], ets: list[Path], store: Any,
                 known: dict[Path, Any]) -> None:
    """:func:`~traincast.trace.link.ahead.link_ahead` of each record ``parsed[i]`` (the
    profiler trace ``files[i]``), in file order: the load's and the child's."""
    # lazy: loaded by the load already; the child pays for it after its queue
    from traincast.trace.link.ahead import link_ahead

    for i, record in sorted(parsed.items()):
        link_ahead(record, files[i], ets, store, known)


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
    with contextlib.suppress(AttributeError, OSError):  # Linux 5.3+: woken as it exits
        fd = os.pidfd_open(child.pid)
        try:
            select.select([fd], [], [], WAIT_LIMIT_S)
        finally:
            os.close(fd)
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


def _child(ets: list[Path], files: list[Path], queue: int,
           link: bool) -> None:  # pragma: no cover
    """Do the files taken from ``queue`` (profiler traces ``files`` and ``ets``) into the
    parse cache, then, with ``link``, link the traces parsed here to their ETs
    (:func:`~traincast.trace.link.ahead.link_ahead`); exit at once (never returns). Runs in
    the forked child."""
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
        from traincast.trace.readers.kineto import read_kineto  # lazy: as above

        store = C.resolve(None)
        if store is None:
            return
        n = len(files)
        known: dict[Path, Any] = {}
        parsed: dict[int, Any] = {}
        while tok := os.read(queue, _TOKEN):
            i = int.from_bytes(tok, "little")
            try:
                if i >= n:
                    known[ets[i - n]] = read_et_cached(ets[i - n], store)
                    continue
                key = C.file_key(files[i])
                if not store.holds(key):
                    parsed[i] = read_kineto(files[i])
                    store.put(key, [parsed[i]])
            except Exception:  # noqa: BLE001, S112 - the load does it again and says why
                continue
        if link:
            _link_parsed(parsed, files, ets, store, known)
    finally:
        os._exit(0)
