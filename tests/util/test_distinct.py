"""``sorted_distinct`` is ``np.unique`` for integer and boolean arrays, and imports no
``numpy.ma``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from traincast.util.distinct import sorted_distinct

_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_DTYPES).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, max_side=40))))
def test_equals_np_unique(a: np.ndarray) -> None:
    got, want = sorted_distinct(a), np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a", [
    np.array([], np.int64), np.array([5], np.int32), np.array([True, False, True]),
    np.array([True, True]), np.array([], np.bool_),
    np.array([-2**63, 2**63 - 1, 0], np.int64),  # a range too wide to count: sorted
    np.array([2**64 - 1, 0, 2**64 - 1], np.uint64),
    np.arange(100_000, dtype=np.int64)[::-1] * 3,  # counted: the range is 3x the values
    np.array([[3, 1], [1, 7]], np.int16),
])
def test_edges(a: np.ndarray) -> None:
    got, want = sorted_distinct(a), np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_floats_are_refused() -> None:
    with pytest.raises(TypeError, match="integers or booleans"):
        sorted_distinct(np.array([1.0, np.nan]))


def test_numpy_ma_is_not_imported() -> None:
    code = ("import sys, numpy as np\n"
            "from traincast.util.distinct import sorted_distinct\n"
            "sorted_distinct(np.array([3, 1, 3]))\n"
            "sorted_distinct(np.array([0, 10**12, 5]))\n"
            "print('numpy.ma' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
