"""Giving back the pages of LLVM's library that loading numba's cached kernels touched once.

Importing numba loads llvmlite's shared library (``libllvmlite.so``, ~170 MB: all of LLVM),
whose static constructors run at load time, and the first cached kernel a process loads
initialises LLVM's native target and JIT: together they bring ~65 MiB of the library's code
and read-only data into the process's resident memory (RssFile). Running a loaded kernel
executes only its own machine code (in memory LLVM allocated, anonymous) and numba's helper
libraries, never LLVM again; a later kernel load runs a small part of it (the object-file
linker).

:func:`release_llvm_pages` advises the kernel (``madvise(MADV_DONTNEED)``, Linux
``madvise(2)``) that the process no longer needs those pages. Only mappings that are
read-only and hold no private (copy-on-write) page are advised: every resident page there is
the file's own, unchanged, so the advice only unmaps it; the next access maps it again from
the page cache (a minor fault) with the same bytes. Writable mappings, and the read-only ones
the dynamic linker wrote into (relocations), are left alone. The mappings are chosen once per
process (from ``/proc/self/smaps``) and advised again after each kernel load.

Set ``TRAINCAST_KEEP_PAGES`` (non-empty) to leave them resident. Elsewhere than Linux, or
when ``madvise`` or ``/proc/self/smaps`` is missing, it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable

__all__ = ["advise_away", "clean_ranges", "file_ranges", "release_llvm_pages"]

#: ``MADV_DONTNEED`` (Linux ``<sys/mman.h>``)
MADV_DONTNEED = 4

#: the shared library whose pages are advised (a substring of its path)
LIBRARY = "libllvmlite"

#: the (start, stop) address ranges chosen by :func:`_ranges` (one list, after its first call)
_CHOSEN: list[list[tuple[int, int]]] = []


@functools.lru_cache(maxsize=1)
def _madvise() -> Callable[[int, int, int], int] | None:
    """The C library's ``madvise``, or None (not Linux, or no such symbol)."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # the process's own symbols (libc among them)
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def clean_ranges(smaps: str, library: str = LIBRARY) -> list[tuple[int, int]]:
    """The (start, stop) address ranges of ``library``'s mappings in ``smaps`` (the text of
    ``/proc/PID/smaps``) that are not writable and hold no private or anonymous page (module
    docstring): advising them away loses nothing."""
    out: list[tuple[int, int]] = []
    head: tuple[int, int, bool] | None = None
    dirty = 0

    def close() -> None:
        if head is not None and head[2] and dirty == 0:
            out.append((head[0], head[1]))

    for line in smaps.splitlines():
        parts = line.split()
        if not parts:
            continue
        if not parts[0].endswith(":"):  # a mapping's first line: range perms offset dev inode path
            close()
            head, dirty = None, 0
            if len(parts) >= 6 and library in parts[5] and "-" in parts[0]:
                lo, hi = parts[0].split("-", 1)
                perms = parts[1]
                head = (int(lo, 16), int(hi, 16), "w" not in perms and perms.endswith("p"))
        elif head is not None and parts[0] in ("Private_Dirty:", "Anonymous:", "Swap:"):
            dirty += int(parts[1]) if parts[1].isdigit() else 1
    close()
    return out


def file_ranges(library: str) -> list[tuple[int, int]]:
    """:func:`clean_ranges` of this process now (``[]`` when ``/proc/self/smaps`` cannot be
    read); ``library`` a substring of the mapped files' paths (``"/"``: every file)."""
    try:
        with open("/proc/self/smaps") as f:
            text = f.read()
    except OSError:
        return []
    return clean_ranges(text, library)


def advise_away(ranges: list[tuple[int, int]]) -> int:
    """``madvise(MADV_DONTNEED)`` each of ``ranges`` (from :func:`clean_ranges`); returns the
    bytes advised (0 where ``madvise`` is missing). Never raises."""
    madvise = _madvise()
    if madvise is None:
        return 0
    done = 0
    for lo, hi in ranges:
        if madvise(lo, hi - lo, MADV_DONTNEED) == 0:
            done += hi - lo
    return done


def _ranges() -> list[tuple[int, int]]:
    """:func:`file_ranges` of llvmlite's library, read once."""
    if not _CHOSEN:
        _CHOSEN.append(file_ranges(LIBRARY))
    return _CHOSEN[0]


def release_llvm_pages() -> int:
    """Advise away llvmlite's clean read-only pages (module docstring); returns the bytes of
    the ranges advised (0 when nothing was done). Call it after llvmlite's library is loaded
    (the ranges are chosen on the first call). Never raises."""
    if os.environ.get("TRAINCAST_KEEP_PAGES") or _madvise() is None:
        return 0
    return advise_away(_ranges())

