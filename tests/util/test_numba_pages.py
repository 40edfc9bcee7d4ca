"""Giving back llvmlite's pages after a cached kernel loads (:mod:`traincast.util.numba_pages`):
only clean read-only mappings of the library are chosen, and a kernel loaded from the cache
runs (and another loads) after they were advised away, with llvmlite's resident memory
lower than before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traincast.util.numba_pages import clean_ranges

ROOT = Path(__file__).resolve().parents[2]

MAPS = """\
7f0000000000-7f0000002000 r--p 00000000 08:01 12 /x/libllvmlite.so
7f0000002000-7f0000004000 r-xp 00002000 08:01 12 /x/libllvmlite.so
7f0000004000-7f0000006000 r--p 00004000 08:01 12 /x/libllvmlite.so
7f0000006000-7f0000007000 rw-p 00006000 08:01 12 /x/libllvmlite.so
7f0000007000-7f0000008000 r-xp 00000000 08:01 13 /x/libother.so
7f0000008000-7f0000009000 r--s 00000000 08:01 12 /x/libllvmlite.so
7f0000009000-7f000000a000 r--p 00000000 00:00 0
7f000000a000-7f000000c000 r--p 00008000 08:01 12 /x/libllvmlite.so
"""

FILE_PAGE = (0xA0 << 56).to_bytes(8, sys.byteorder)  # present, a page of the file
COPY = (0x81 << 56).to_bytes(8, sys.byteorder)  # present, a private copy (written)
SWAPPED = (0x40 << 56).to_bytes(8, sys.byteorder)
ABSENT = bytes(8)


def _pages(lo: int, hi: int) -> bytes:
    """pagemap entries: the third mapping holds a written page, the last a swapped one."""
    if lo == 0x7F0000004000:
        return FILE_PAGE + COPY
    if lo == 0x7F000000A000:
        return ABSENT + SWAPPED
    return (FILE_PAGE + ABSENT) * ((hi - lo) // 8192) + FILE_PAGE * ((hi - lo) // 4096 % 2)


def test_only_clean_read_only_private_mappings_of_the_library_are_chosen() -> None:
    # the relocated (written) one, a swapped one, the writable one, a shared one, an
    # anonymous one and another library's are not
    assert clean_ranges(MAPS, _pages) == [(0x7F0000000000, 0x7F0000002000),
                                          (0x7F0000002000, 0x7F0000004000)]
    assert clean_ranges(MAPS, _pages, "libother") == [(0x7F0000007000, 0x7F0000008000)]
    assert clean_ranges(MAPS, lambda lo, hi: None) == []  # pagemap unreadable: nothing
    # entries without flags (every page absent): a written page cannot be told, nothing
    assert clean_ranges(MAPS, lambda lo, hi: bytes((hi - lo) // 4096 * 8)) == []
    assert clean_ranges("", _pages) == []


KERNELS = '''
import sys

from numba import njit

from traincast.util.numba_cache import quick_loads


@njit(cache=True)
def plus(x):
    return x + 1


@njit(cache=True)
def times(x):
    return x * 3


quick_loads(sys.modules[__name__])
'''

RUN = '''
import json
from traincast.util import numba_pages

def llvm_kib():
    kib, on = 0, False
    for line in open("/proc/self/smaps"):  # (resident KiB of the library's mappings)
        parts = line.split()
        if parts and not parts[0].endswith(":"):
            on = len(parts) >= 6 and "libllvmlite" in parts[5]
        elif on and parts[0] == "Rss:":
            kib += int(parts[1])
    return kib

import numba  # noqa: F401 - llvmlite's library loaded, LLVM not yet initialised
import kmod
before = llvm_kib()
numba_pages._CHOSEN.clear()  # measure the load's own touch
a = kmod.plus(1)  # loads (or compiles), then gives the pages back
after = llvm_kib()
b = kmod.times(2)  # LLVM runs again after the advice: another load
print(json.dumps({"plus": a, "times": b, "again": kmod.plus(41), "before": before,
                  "after": after, "hits": sum(kmod.plus._cache_hits.values()),
                  "chosen": len(numba_pages._CHOSEN[0]) if numba_pages._CHOSEN else -1}))
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc: Linux")
def test_kernels_load_and_run_after_llvms_pages_are_given_back(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    (tmp_path / "kmod.py").write_text(KERNELS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    for name in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT", "TRAINCAST_KEEP_PAGES"):
        env.pop(name, None)

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True,
                             text=True, timeout=240, check=True, cwd=tmp_path)
        return json.loads(out.stdout.strip().splitlines()[-1])

    run()  # compiles both kernels into the cache beside the module
    warm = run()
    assert (warm["plus"], warm["times"], warm["again"], warm["hits"]) == (2, 6, 42, 1)
    assert warm["chosen"] > 0
    # loading initialised LLVM (tens of MiB of its code) and gave those pages back
    assert warm["after"] < warm["before"], warm
