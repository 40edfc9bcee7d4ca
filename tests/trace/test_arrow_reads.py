"""Reading Arrow columns without Arrow's compute functions or its pandas conversion (both are
imported on first use and cost ~0.35 s of a command's start): ``traincast.trace.arrow``'s
``filled`` and ``take_strings`` give what ``fill_null(...).to_numpy()`` and
``take(...).to_pylist()`` give."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import traincast
from traincast.trace import arrow as A
from traincast.trace.narrow import narrow_ids

ROOT = Path(traincast.__file__).resolve().parents[1]

STRINGS = [pa.array(["ab", None, "", "é€", "xyz"]), pa.array(["ab", None, "", "é€", "xyz"]).slice(1),
           pa.array(["q", "r", ""], pa.large_string()), pa.chunked_array([["a", "b"], [None, "dd"]]),
           pa.array(["a", None, "b", "a"]).dictionary_encode(),
           pa.chunked_array([pa.array(["x", "y", "x"]).dictionary_encode()]),
           pa.array(["only"]), pa.chunked_array([[], ["z"]], pa.string())]


@pytest.mark.parametrize("col", STRINGS, ids=lambda c: str(c.type))
def test_take_strings_is_take_to_pylist(col: pa.Array) -> None:
    rng = np.random.default_rng(len(col))
    for rows in (np.arange(len(col)), np.arange(len(col))[::-1], rng.integers(0, len(col), 9),
                 np.empty(0, np.int64)):
        ref = col.take(pa.array(rows, pa.int64())).to_pylist()
        assert A.take_strings(col, rows) == ref


def test_take_strings_refuses_numbers() -> None:
    with pytest.raises(TypeError, match="not a string column"):
        A.take_strings(pa.array([1, 2]), np.array([0]))


@pytest.mark.parametrize("arr", [pa.array([1, None, 3, None, 5], pa.int32()),
                                 pa.array([1, None, 3, None, 5], pa.int64()).slice(1, 3),
                                 pa.array([7, 8], pa.int64()), pa.array([None, None], pa.int32()),
                                 pa.array(["a", None, "b"]).dictionary_encode().indices],
                         ids=str)
def test_filled_is_fill_null_to_numpy(arr: pa.Array) -> None:
    got, ref = A.filled(arr, -1), arr.fill_null(-1).to_numpy()
    assert got.dtype == ref.dtype and got.tolist() == ref.tolist()


def test_narrow_ids_with_nulls_casts_as_before() -> None:
    ev = pa.table({"pid": pa.array([1, None], pa.int64()),
                   "correlation": pa.array([2**31, None], pa.int64())})
    out = narrow_ids(ev)
    assert out.schema.field("pid").type == pa.int32()
    assert out.column("pid").to_pylist() == [1, None]
    assert out.schema.field("correlation").type == pa.int64()


def test_the_readers_import_neither_compute_nor_pandas() -> None:
    code = ("import sys, numpy as np, pyarrow as pa\n"
            "from traincast.trace import arrow as A\n"
            "from traincast.trace.narrow import narrow_ids\n"
            "s = pa.Table.from_arrays([A.strings(['a', 'bb'])], names=['s'])\n"
            "assert A.take_strings(s.column('s'), np.array([1, 0])) == ['bb', 'a']\n"
            "t = pa.Table.from_arrays([A.from_numpy(np.arange(3))], names=['pid'])\n"
            "assert narrow_ids(t).schema.field('pid').type == pa.int32()\n"
            "assert A.filled(A.from_numpy(np.arange(2)), -1).tolist() == [0, 1]\n"
            "print(sorted(m for m in ('pandas', 'pyarrow.compute') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, check=True)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr
