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
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from multiprocessing import forkserver

from traincast.util.executor import START_METHOD

__all__ = ["preload_parse_workers", "stop_forkserver"]

log = logging.getLogger(__name__)

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
