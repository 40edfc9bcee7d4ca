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
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (another C library or platform)."""
    if not sys.platform.startswith("linux"):
        return None
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


@functools.lru_cache(maxsize=1)
def _hugepage_toggle() -> Callable[[bool], bool] | None:
    """NumPy's runtime switch of its huge-page advice (``numpy._core.multiarray.
    _set_madvise_hugepage``, which returns the previous setting), when the kernel would
    stall on faults in advised regions; else None (nothing to change, or no such switch)."""
    try:
        text = _DEFRAG.read_text()
    except OSError:  # not Linux, or no transparent huge pages
        return None
    chosen = text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()
    if chosen not in STALLING_DEFRAG:
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
