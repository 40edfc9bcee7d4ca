"""Silence the C++ layers of the profiler while recording (they print progress lines on the
process's file descriptors 1 and 2, which spawned ranks inherit)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["quiet_fds"]


@contextlib.contextmanager
def quiet_fds() -> Iterator[None]:
    """Send file descriptors 1 and 2 to /dev/null for the block: the profiler's and the ET
    observer's C++ layers print progress lines there that would tear a progress bar."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no real descriptors (embedded interpreter): print as they like
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


