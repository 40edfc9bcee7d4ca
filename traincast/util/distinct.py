"""The distinct values of an integer array, sorted: ``np.unique(values)`` without importing
``numpy.ma``.

numpy 2's ``np.unique`` (no indices or counts asked) checks ``np.ma.is_masked`` before its
hash path, and that first touch of ``np.ma`` imports ``numpy.ma`` (~14-19 ms here: its
module builds hundreds of wrapped functions and their docstrings). A short command
(``traincast predict`` of 8 ranks, ~0.6 s) that calls ``np.unique`` once pays it whole;
nothing else it runs imports ``numpy.ma``. :func:`sorted_distinct` gives the same array
for integer and boolean input, counting values over their range when it is small (one pass,
no sort) and sorting otherwise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sorted_distinct"]

#: a range of values up to this many times the number of values (or 4,096) is counted in an
#: array of its size rather than sorted
_COUNT_RANGE_PER_VALUE = 4
_COUNT_RANGE_MIN = 4096


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (any shape, flattened), ascending, in its dtype:
    equal to ``np.unique(values)``.

    Raises:
        TypeError: ``values`` is not of an integer or boolean dtype (``np.unique`` then: its
            NaN and object rules are not reproduced here).
    """
    a = np.asarray(values).ravel()
    if a.dtype.kind not in "biu":
        raise TypeError(f"sorted_distinct needs integers or booleans, not {a.dtype}")
    if a.size == 0:
        return a.copy()
    if a.dtype.kind == "b":
        seen = np.bincount(a.view(np.uint8), minlength=2)
        return np.flatnonzero(seen).astype(np.bool_)
    lo, hi = int(a.min()), int(a.max())
    span = hi - lo + 1
    if span <= max(_COUNT_RANGE_PER_VALUE * a.size, _COUNT_RANGE_MIN) and \
            hi <= np.iinfo(np.int64).max:
        offsets = a.astype(np.int64) - lo if lo else a.astype(np.int64, copy=False)
        seen = np.bincount(offsets, minlength=span)
        return (np.flatnonzero(seen) + lo).astype(a.dtype)
    s = np.sort(a)
    keep = np.empty(s.size, np.bool_)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
