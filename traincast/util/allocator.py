"""Hand memory that a finished phase freed back to the operating system, and keep short-lived
arrays on small pages.

:func:`release_memory` asks both allocators that keep freed memory for reuse to return what
they hold unused: Arrow's pool (``pyarrow.MemoryPool.release_unused``) and, on Linux with
glibc, the C library's heap (``malloc_trim(0)``; glibc ``mallopt(3)``, ``M_MMAP_THRESHOLD``;
the call Dask's workers make, ``distributed``'s worker memory documentation, "Memory not
released back to the OS"). Both are hints: nothing is freed that is in use, and where neither
exists the call does nothing.

:func:`small_pages` is a context manager that, while it is open, turns off NumPy's advice to
back arrays of 4 MiB and more with transparent huge pages (NumPy docs, "Global state: madvise
hugepage on Linux"; Linux admin guide, ``mm/transhuge.rst``, ``transparent_hugepage/defrag``);
where NumPy has no such switch it does nothing.

:func:`keep_heap_in_worker` tunes glibc's heap (``mallopt``) in a parse worker process, which
frees and allocates the same arrays file after file.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (another C library or platform)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # lazy: the command's start (``--help``) imports this module

    try:  # the process's own symbols (libc among them): no library search, no subprocess
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_memory() -> None:
    """Return the memory Arrow's pool and the C library's heap hold unused to the OS (see
    the module docstring); cheap (milliseconds), safe at any time, never raises. Arrow's
    pool is only asked when pyarrow is already imported (otherwise it holds nothing): the
    planner's workers, say, do not pay pyarrow's import for it."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        try:
            pa.default_memory_pool().release_unused()
        except (AttributeError, NotImplementedError, pa.ArrowException):  # pragma: no cover
            pass
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: ``transparent_hugepage/defrag`` settings under which a fault in a region advised with
#: ``MADV_HUGEPAGE`` compacts memory synchronously (Linux ``mm/transhuge.rst``)
STALLING_DEFRAG = frozenset({"always", "madvise", "defer+madvise"})
_DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")


#: the environment variable of mimalloc's switch of its transparent huge pages (mimalloc's
#: ``allow_thp`` option, read once, when the library starts: when pyarrow is imported)
MIMALLOC_THP_VAR = "MIMALLOC_ALLOW_THP"


def stalling_defrag() -> bool:
    """Whether a fault in a region advised onto transparent huge pages compacts memory
    synchronously (the kernel's ``transparent_hugepage/defrag`` is one of
    :data:`STALLING_DEFRAG`); False where that cannot be read (not Linux, no huge pages)."""
    try:
        text = _DEFRAG.read_text()
    except OSError:
        return False
    chosen = text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()
    return chosen in STALLING_DEFRAG


def arrow_small_pages() -> bool:
    """Keep Arrow's mimalloc pool (pyarrow's default) off transparent huge pages in this
    process and the processes it starts, where the kernel would stall on faults in advised
    regions (:func:`stalling_defrag`): sets ``MIMALLOC_ALLOW_THP=0`` unless the variable is
    set already. Effective only before pyarrow is imported (mimalloc reads it once, at
    start); returns whether it was set here. For the ``traincast`` command: the job's
    columns are combined into fresh pool memory once per load, and on a busy machine each
    2 MiB fault of it cost ~0.4 ms of compaction (0.1-0.3 s of system time per 1,024-rank
    load, against ~0.03 s on small pages)."""
    if MIMALLOC_THP_VAR in os.environ or "pyarrow" in sys.modules or not stalling_defrag():
        return False
    os.environ[MIMALLOC_THP_VAR] = "0"
    return True


@functools.lru_cache(maxsize=1)
def _hugepage_toggle() -> Callable[[bool], bool] | None:
    """NumPy's runtime switch of its huge-page advice (``numpy._core.multiarray.
    _set_madvise_hugepage``, which returns the previous setting), when the kernel would
    stall on faults in advised regions; else None (nothing to change, or no such switch)."""
    if not stalling_defrag():  # not Linux, no transparent huge pages, or no stall
        return None
    try:
        from numpy._core import multiarray
    except ImportError:  # pragma: no cover - NumPy < 2
        from numpy.core import multiarray  # type: ignore[no-redef]
    return getattr(multiarray, "_set_madvise_hugepage", None)


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Within the block, NumPy does not ask for transparent huge pages where the kernel
    would compact memory synchronously to provide them (module docstring); the previous
    setting is restored afterwards. Nests; changes nothing elsewhere."""
    toggle = _hugepage_toggle()
    if toggle is None:
        yield
        return
    previous = toggle(False)
    try:
        yield
    finally:
        toggle(previous)


#: glibc ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_KEPT: list[bool] = []


def keep_heap_in_worker() -> None:
    """In a worker process of this machine's pool (once): glibc's malloc keeps the memory
    that a file's arrays free, up to 64 MiB blocks, for the next file, instead of giving
    it back to the system and faulting fresh pages in again (two thirds of a file's page
    faults, ~1 ms of its ~7 ms); each task gives it back at its end
    (:func:`release_memory`). Nothing elsewhere, nor in the loading process."""
    if _HEAP_KEPT or multiprocessing.parent_process() is None:
        return
    _HEAP_KEPT.append(True)
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: glibc's mallopt, if any
        libc.mallopt(_M_MMAP_THRESHOLD, 64 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    except (OSError, AttributeError):  # another C library: its defaults
        pass
