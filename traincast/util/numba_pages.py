"""Giving back the pages of LLVM's library that loading numba's cached kernels touched once.

Importing numba loads llvmlite's shared library (``libllvmlite.so``: all of LLVM), whose
static constructors run at load time, and the first cached kernel a process loads initialises
LLVM's native target and JIT: together they bring tens of MiB of the library's code and
read-only data into the process's resident memory (RssFile). Running a loaded kernel
executes only its own machine code (in memory LLVM allocated, anonymous) and numba's helper
libraries, never LLVM again; a later kernel load runs a small part of it (the object-file
linker).

:func:`release_llvm_pages` advises the kernel (``madvise(MADV_DONTNEED)``, Linux
``madvise(2)``) that the process no longer needs those pages. Only mappings that are
read-only and hold no private (copy-on-write) page are advised: every resident page there is
the file's own, unchanged, so the advice only unmaps it; the next access maps it again from
the page cache (a minor fault) with the same bytes. Writable mappings, and the read-only ones
the dynamic linker wrote into (relocations: pages that ``/proc/self/pagemap`` shows as not
the file's), are left alone. The mappings are chosen once per process (from
``/proc/self/maps`` and ``pagemap``) and advised again after each kernel load.

Set ``TRAINCAST_KEEP_PAGES`` (non-empty) to leave them resident. Elsewhere than Linux, or
when ``madvise`` or ``/proc/self/maps`` / ``pagemap`` cannot be read, it does nothing.
"""

from __future__ import annotations

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
    # lazy: ctypes costs ~2 ms at every CLI start (the collector imports this module), and
    # only a large job's run calls madvise
    import ctypes

    try:  # the process's own symbols (libc among them)
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


#: byte 7 of a ``/proc/PID/pagemap`` entry (bits 56-63) -> 1 where the page is swapped (bit
#: 62) or present (bit 63) but not a page of the file (bit 61 clear: a private copy), else 0
#: (Linux ``admin-guide/mm/pagemap.rst``)
_PRIVATE = bytes(1 if b & 0x40 or (b & 0x80 and not b & 0x20) else 0 for b in range(256))
#: where that byte sits in an entry (a native-endian 64-bit integer)
_TOP = 7 if sys.byteorder == "little" else 0


def clean_ranges(maps: str, pages: Callable[[int, int], bytes | None],
                 library: str = LIBRARY) -> list[tuple[int, int]]:
    """The (start, stop) address ranges of the mappings in ``maps`` (the text of
    ``/proc/PID/maps``) of files whose path holds ``library`` (``"/"``: every file) that are
    private, not writable, and hold no private copy of a page: ``pages(start, stop)`` gives
    the range's ``pagemap`` entries (8 bytes a page), or None when they cannot be read (the
    range is then left out); when no page of any such mapping reads as present (entries
    without flags), none is chosen. Advising these ranges away loses nothing (module
    docstring)."""
    out: list[tuple[int, int]] = []
    present = False  # some page read as present: the entries carry their flags
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or len(parts[1]) != 4:
            continue
        path, perms = parts[5], parts[1]
        if not path.startswith("/") or library not in path or perms[1] == "w" \
                or perms[3] != "p":
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-", 1))
        entries = pages(lo, hi)
        if entries is None:
            continue
        flags = entries[_TOP::8]
        present = present or (bool(flags) and max(flags) >= 0x80)
        if 1 in flags.translate(_PRIVATE):
            continue  # a page the process wrote (relocations): kept
        out.append((lo, hi))
    # a pagemap without flags (every page absent, though the process runs the libraries'
    # code) cannot tell a written page: nothing is chosen
    return out if present else []


def file_ranges(library: str) -> list[tuple[int, int]]:
    """:func:`clean_ranges` of this process now (``[]`` when ``/proc/self/maps`` or
    ``/proc/self/pagemap`` cannot be read); ``library`` a substring of the mapped files'
    paths (``"/"``: every file)."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    except (OSError, ValueError):
        return []

    def pages(lo: int, hi: int) -> bytes | None:
        size = (hi - lo) // page * 8
        try:
            data = os.pread(fd, size, lo // page * 8)
        except OSError:
            return None
        return data if len(data) == size else None

    try:
        return clean_ranges(maps, pages, library)
    finally:
        os.close(fd)


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

