"""Hand memory that a finished phase freed back to the operating system.

Two allocators keep freed memory for reuse, and after a large load neither gives it to the
other: Arrow's pool (mimalloc or jemalloc) keeps freed pages of the per-file tables,
decompression buffers and concatenation temporaries, and the C library's ``malloc`` keeps
freed heap (numpy arrays and pickled messages below its adaptive ``mmap`` threshold, which
grows up to 32 MiB after large frees: glibc ``mallopt(3)``, ``M_MMAP_THRESHOLD``). Measured at
1,024 DLRM ranks on the 2-core dev machine: a cold ``traincast.load`` left the process at
718 MiB resident with 452 MiB live; :func:`release_memory` brought it to 452 MiB, and a parse
worker of the pool kept ~130 MiB between tasks.

:func:`release_memory` asks both to return what they hold unused:
``pyarrow.MemoryPool.release_unused`` and, on Linux with glibc, ``malloc_trim(0)`` (the call
Dask's workers make for the same reason: ``distributed``'s worker memory documentation,
"Memory not released back to the OS"). Both are hints: nothing is freed that is in use, and
where neither exists the call does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable

import pyarrow as pa


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (another C library or platform)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_memory() -> None:
    """Return the memory Arrow's pool and the C library's heap hold unused to the OS (see
    the module docstring); cheap (milliseconds), safe at any time, never raises."""
    try:
        pa.default_memory_pool().release_unused()
    except (AttributeError, NotImplementedError, pa.ArrowException):  # pragma: no cover
        pass
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
