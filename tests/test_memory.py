"""traincast.memory.release_memory: freed memory handed back to the operating system."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from traincast.memory import _malloc_trim, release_memory


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux") or _malloc_trim() is None,
                    reason="glibc's malloc_trim is Linux/glibc only")
def test_freed_heap_goes_back_to_the_os() -> None:
    # 4,000 arrays of 64 KiB sit on the C heap (below glibc's mmap threshold); keeping every
    # 50th pins the heap's top, so freeing the others does not shrink it by itself
    arrays = [np.ones(8000) for _ in range(4000)]
    kept = arrays[::50]
    del arrays
    before = _rss_mib()
    release_memory()
    after = _rss_mib()
    assert before - after > 100, (before, after)  # ~250 MiB were freed but resident
    assert all(float(a[0]) == 1.0 for a in kept)  # what is in use is untouched


def test_release_memory_is_safe_to_call_repeatedly() -> None:
    for _ in range(3):
        assert release_memory() is None
