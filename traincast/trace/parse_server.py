"""The forkserver that a load's parse workers are forked from (start method
:data:`~traincast.util.executor.START_METHOD`): what it imports before it forks them, and its
stop after the parse.

:func:`preload_parse_workers` asks the forkserver, before it starts, to import
:mod:`traincast.trace.worker_preload` (the loader and, for a compiled parse, the scanner's
kernels) or :mod:`traincast.trace.load`: loaded once there, every worker forked from it
starts with them instead of importing and loading them on its own. Such a forkserver keeps
them (~160 MiB) for as long as it runs: :func:`stop_forkserver` stops it once the parse is
done (a later pool starts a new one) and puts the preload list back as it was (the caller's
own forkserver pools, started later, do not import the loader). Both use the standard
library's forkserver object (``multiprocessing.forkserver``), found by ``getattr``: where it
lacks what they use, they do nothing.

:class:`Warmer` starts the parse workers themselves ahead of their files, on a thread. A
command that is about to load a job can start them before it imports what it runs
(:mod:`traincast.trace.prestart`): :func:`hold_early` keeps such a Warmer with the files it
was started for, and the load takes it (:func:`take_early`) when it parses those files in a
pool of its own, or stops it; a command that ends without that load stops it
(:func:`drop_early`).

:func:`read_ahead` asks the kernel, on a thread, to read files into the page cache ahead of
their parse (``posix_fadvise(POSIX_FADV_WILLNEED)``), so that files the page cache let go
are read from disk while the loading process still imports, not one at a time by the
parse workers. Where the call is missing it does nothing; it never raises.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import stat
import sys
import threading
from multiprocessing import forkserver
from pathlib import Path

from traincast.util.executor import START_METHOD, map_tasks, stop_local_pool

__all__ = ["PARALLEL_MIN_BYTES", "Warmer", "drop_early", "hold_early", "main_is_guarded",
           "preload_parse_workers", "read_ahead", "stop_forkserver", "take_early"]

log = logging.getLogger(__name__)

#: estimated trace text (gzipped files count ~:data:`~traincast.trace.readers.text_size.
#: GZIP_RATIO` x their size) above which
#: files missing from the cache are parsed in worker processes by default (below it, starting
#: a pool and pickling results back costs more than it saves: benchmarks/cache_speed.py)
PARALLEL_MIN_BYTES = 256 << 20

#: modules the forkserver of parse workers imports before it forks them
_PRELOAD = {True: "traincast.trace.worker_preload", None: "traincast.trace.load"}


#: the forkserver's preload list before :func:`preload_parse_workers` changed it (restored by
#: :func:`stop_forkserver`, so a later forkserver of the process -- the caller's own pools --
#: does not import the loader)
_PREVIOUS: list[list[str]] = []


def preload_parse_workers(compiled: bool | None) -> bool:
    """Have the forkserver that the parse workers are forked from import the loader (and,
    for a compiled parse, load the scanner's kernels: :mod:`~traincast.trace.
    worker_preload`) before it forks them: each worker then starts with them. Modules
    already asked for (``__main__`` by default) stay first. Only a forkserver that is not
    running yet is asked (a running one read its list when it started). True when asked:
    it starts with them, and :func:`stop_forkserver` stops it after the parse (it would
    keep them, ~160 MiB, for the life of the process) and puts the list back."""
    if START_METHOD != "forkserver":
        return False
    server = getattr(forkserver, "_forkserver", None)  # the process's forkserver
    if server is None or getattr(server, "_forkserver_pid", 0) is not None:
        return False  # running already (or not the standard library's object)
    current = list(getattr(server, "_preload_modules", None) or ["__main__"])
    want = _PRELOAD[compiled]
    if want not in current:
        multiprocessing.get_context("forkserver").set_forkserver_preload(current + [want])
        if not _PREVIOUS:
            _PREVIOUS.append(current)
    return True


def stop_forkserver() -> None:
    """Stop the process's forkserver on a thread (a later pool starts a new one); its
    workers already forked run on. Nothing where the interpreter has no such server."""
    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is None:
        return

    def run() -> None:
        try:
            stop()
        except Exception:  # noqa: BLE001 - gone already, or never started
            log.debug("traincast load: forkserver not stopped", exc_info=True)
        if _PREVIOUS:  # the caller's list again, for the next forkserver
            multiprocessing.get_context("forkserver").set_forkserver_preload(_PREVIOUS.pop())

    threading.Thread(target=run, name="traincast-forkserver-stop", daemon=True).start()


def main_is_guarded() -> bool:
    """False when worker processes would re-run the top level of an unguarded ``__main__``
    script (forkserver/spawn import it): such a script only gets parallel parsing when it
    asks for it with ``executor="process"``."""
    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    if not file:  # interactive, python -c, notebooks
        return True
    try:
        return "__main__" in Path(file).read_text("utf-8", errors="replace")
    except OSError:
        return False


def _warm_task(compiled: bool | None) -> None:
    """Start-up of a parse worker ahead of its files: the module the forkserver preloads for
    such a parse (:data:`_PRELOAD`: the loader and, for a compiled parse, the scanner's
    kernels), imported here when the forkserver did not (one started before)."""
    importlib.import_module(_PRELOAD[True if compiled else None])


class Warmer:
    """Starts the parse workers of a load on a thread (:func:`_warm_task` on each), so their
    start-up overlaps what the loading process does before it parses (imports, hashing the
    files, looking up the cache). :meth:`done` waits for it; :meth:`cancel` stops the
    workers again when nothing is parsed after all (a cache hit); :meth:`stop` stops them
    after the parse. ``own_server``: the forkserver starts for these workers with the loader
    preloaded (:func:`preload_parse_workers`), and is stopped with them."""

    def __init__(self, workers: int | None, compiled: bool | None,
                 own_server: bool = False) -> None:
        n = workers or os.cpu_count() or 1
        self.workers, self.compiled = workers, compiled
        self._own_server = own_server
        self._lock = threading.Lock()
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, args=(n, compiled),
                                        name="traincast-parse-warm", daemon=True)
        self._thread.start()

    def _run(self, n: int, compiled: bool | None) -> None:
        try:
            map_tasks(_warm_task, [compiled] * n, executor="process", workers=n, chunksize=1)
        except Exception:  # noqa: BLE001 - the parse starts (or fails to start) its own
            log.debug("traincast load: parse workers not started ahead", exc_info=True)
        with self._lock:
            if self._cancelled:
                self.stop()

    def done(self) -> None:
        self._thread.join()

    def stop(self) -> None:
        """Stop the workers (and the forkserver started for them)."""
        stop_local_pool()
        if self._own_server:
            stop_forkserver()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if not self._thread.is_alive():
                self.stop()


#: the Warmer a command started ahead of a load, with the files it was started for
_EARLY: list[tuple[list[Path], Warmer]] = []


def hold_early(files: list[Path], warmer: Warmer) -> None:
    """Keep ``warmer``, started for the load of ``files``, for that load (:func:`take_early`);
    one held before is stopped."""
    drop_early()
    _EARLY.append((list(files), warmer))


def drop_early() -> None:
    """Stop the Warmer held for a load, if any (the command ended without that load)."""
    while _EARLY:
        _EARLY.pop()[1].cancel()


def take_early(files: list[Path] | None, workers: int | None) -> Warmer | None:
    """The Warmer held for a load of exactly ``files`` (in order) with ``workers``, now the
    caller's; None when none is held. One held for other files or workers, or when
    ``files`` is None (this load parses in no pool of its own), is stopped."""
    if not _EARLY:
        return None
    held, warmer = _EARLY.pop()
    if files is not None and held == list(files) and warmer.workers == workers:
        return warmer
    warmer.cancel()
    return None


def read_ahead(files: list[Path]) -> threading.Thread | None:
    """Ask the kernel to read the regular files among ``files`` into the page cache (on a
    daemon thread, which is returned; None where ``os.posix_fadvise`` is missing). Devices,
    FIFOs and sockets are never opened; files that cannot be opened are skipped."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return None

    def run() -> None:
        for f in files:
            try:
                if not stat.S_ISREG(os.stat(f).st_mode):
                    continue
                fd = os.open(f, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    thread = threading.Thread(target=run, name="traincast-read-ahead", daemon=True)
    thread.start()
    return thread
