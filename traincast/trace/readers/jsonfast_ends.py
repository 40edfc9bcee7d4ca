"""The compiled (numba) cut of a ``traceEvents`` array into its elements, for the typed
decoder's chunks (:func:`event_ends`); the compiled scanner's module offers it with its own
kernels (:mod:`traincast.trace.readers.jsonfast_kernels`)."""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads

__all__ = ["event_ends"]


@njit(cache=True, nogil=True)
def event_ends(b):  # pragma: no cover - compiled
    """:func:`traincast.trace.readers.jsonscan._event_ends` in one pass: (offsets just past
    each complete top-level element of the array body starting in ``b``, offset of the
    array's closing ``]`` or -1), with the same rules (a quote after an odd run of
    backslashes is escaped, brackets count outside strings only)."""
    n = b.size
    out = np.empty(n // 2 + 1, np.int64)
    m = 0
    depth = 0
    inside = False
    run = 0
    for i in range(n):
        c = b[i]
        if c == 92:
            run += 1
            continue
        if c == 34:
            if run % 2 == 0:
                inside = not inside
        elif not inside:
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth < 0:
                    return out[:m].copy(), i
                if depth == 0:
                    out[m] = i + 1
                    m += 1
        run = 0
    return out[:m].copy(), -1


# the kernel's cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
