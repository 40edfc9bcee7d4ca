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

SMAPS = """\
7f0000000000-7f0000001000 r--p 00000000 08:01 12 /x/libllvmlite.so
Rss:                   4 kB
Private_Clean:         4 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0000001000-7f0000003000 r-xp 00001000 08:01 12 /x/libllvmlite.so
Rss:                   8 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0000003000-7f0000004000 r--p 00003000 08:01 12 /x/libllvmlite.so
Rss:                   4 kB
Private_Dirty:         4 kB
Anonymous:             4 kB
Swap:                  0 kB
7f0000004000-7f0000005000 rw-p 00004000 08:01 12 /x/libllvmlite.so
Rss:                   4 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
7f0000005000-7f0000006000 r-xp 00000000 08:01 13 /x/libother.so
Rss:                   4 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
7f0000006000-7f0000007000 r--s 00000000 08:01 12 /x/libllvmlite.so
Rss:                   4 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
7f0000007000-7f0000008000 rw-p 00000000 00:00 0
Rss:                   4 kB
"""


def test_only_clean_read_only_private_mappings_of_the_library_are_chosen() -> None:
    # the relocated (dirty) one, the writable one, a shared one and another library's are not
    assert clean_ranges(SMAPS) == [(0x7F0000000000, 0x7F0000001000),
                                   (0x7F0000001000, 0x7F0000003000)]
    assert clean_ranges(SMAPS, "libother") == [(0x7F0000005000, 0x7F0000006000)]
    assert clean_ranges("") == []


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
    for line in open("/proc/self/smaps"):
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
