"""The start-up costs of a ``traincast`` process kept out of its run: the garbage collector
paused while a command imports its libraries and frozen before the process exits, and the
pages of the shared libraries that only the start-up ran given back.

A start imports ~900 modules (pandas, pyarrow, numpy, rich, traincast's own): hundreds of
thousands of objects that live until the process exits. The cyclic garbage collector
traverses them again and again while they are made (young collections every 700
allocations, an occasional full one) and twice more at exit, finding nothing to free: tens of
milliseconds of a command that runs for a fraction of a second. :func:`gc.freeze` moves
every object to a permanent generation that collections ignore.

The libraries' imports and first uses (their module initialisation, relocations, the parse
cache's read) bring tens of MiB of their code into the process's resident memory that the run
never executes again.
:func:`release_startup_pages`, called by a command once a large job is loaded (before its
replay's peak) and again after the replay (before the analyses' peaks), advises them away (:func:`traincast.util.numba_pages.advise_away`: clean, read-only pages of
mapped files only; a page used again is mapped again from the page cache, the same bytes).

Only a process started as the program does this (:func:`main` called without arguments:
the console script, ``python -m traincast.cli``; :func:`as_program`): a caller of
:func:`traincast.cli.main` inside its own process keeps its collector as it was. Objects are
still freed by reference counting; only cycles made while imports ran, if any, wait for the
exit.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
from collections.abc import Iterator

from traincast.util.numba_pages import advise_away, file_ranges

#: set by :func:`as_program`: this process is the ``traincast`` command
_PROGRAM: list[bool] = []

#: events of a job below which :func:`release_startup_pages` does nothing (reading the
#: mappings and mapping used pages again cost milliseconds; a small job's peak is small)
RELEASE_MIN_EVENTS = 1_000_000


def as_program() -> None:
    """Mark this process as the ``traincast`` command (called by :func:`main` when it runs
    as the program)."""
    if not _PROGRAM:
        _PROGRAM.append(True)


def import_uncollected(*modules: str) -> None:
    """Import ``modules`` (the libraries a command is about to run) within
    :func:`imports_uncollected`."""
    with imports_uncollected():
        for name in modules:
            importlib.import_module(name)


@contextlib.contextmanager
def imports_uncollected() -> Iterator[None]:
    """Within the block (a command importing the libraries it runs), no collection; after
    it, every object made so far is frozen (never traversed again) and collection resumes.
    Does nothing outside the program, or when the collector is off."""
    if not _PROGRAM or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def before_exit() -> None:
    """The program is about to exit: freeze every object, so that the interpreter's full
    collections at exit have nothing to traverse (the memory goes back with the process)."""
    if _PROGRAM:
        gc.freeze()


def release_startup_pages(events: int) -> int:
    """Give back the clean pages of every mapped file (module docstring) when this process is
    the program, the job holds ``events`` >= :data:`RELEASE_MIN_EVENTS` events and
    ``TRAINCAST_KEEP_PAGES`` is unset; returns the bytes advised (0: nothing done)."""
    if not _PROGRAM or events < RELEASE_MIN_EVENTS or os.environ.get("TRAINCAST_KEEP_PAGES"):
        return 0
    return advise_away(file_ranges("/"))
