"""The events' dictionary columns (``traincast.trace.schema.DICT_COLUMNS``) get the narrowest
index type their dictionary fits (``kind`` and ``op_family`` int8, ``name`` at least int16),
values unchanged, in the assembled table and in the job entry of the parse cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import traincast
from traincast.trace import arrow as A
from traincast.trace.narrow import narrow_codes, narrow_index_type
from traincast.trace.schema import DICT_COLUMNS

_WANT = {"kind": pa.int8(), "op_family": pa.int8(), "name": pa.int16()}


@pytest.mark.parametrize(("n", "least", "want"), [
    (0, 8, pa.int8()), (127, 8, pa.int8()), (128, 8, pa.int16()), (5, 16, pa.int16()),
    (32767, 8, pa.int16()), (32768, 16, pa.int32()), (2**31 - 1, 8, pa.int32()),
    (2**31, 8, pa.int64())])
def test_narrow_index_type(n: int, least: int, want: pa.DataType) -> None:
    assert narrow_index_type(n, least) == want


def _column(values: list[str], chunks: int, unify: bool = True) -> pa.ChunkedArray:
    parts = [pa.array(values[i::chunks]).dictionary_encode() for i in range(chunks)]
    col = pa.chunked_array(parts)
    return col.unify_dictionaries() if unify else col


def test_narrow_codes_keeps_values_and_the_shared_dictionary() -> None:
    names = [f"op{i % 300}" for i in range(1000)]  # 300 names: int16
    kinds = [("kernel", "cpu_op", "runtime")[i % 3] for i in range(1000)]
    t = pa.table({"kind": _column(kinds, 4), "name": _column(names, 4),
                  "op_family": _column(["gemm"] * 1000, 4),
                  "dur": pa.chunked_array([np.arange(250)] * 4)})
    out = narrow_codes(t)
    for name in DICT_COLUMNS:
        typ = out.schema.field(name).type
        assert typ == pa.dictionary(_WANT[name], pa.string()), name
        assert out.column(name).to_pylist() == t.column(name).to_pylist()
        col = out.column(name)  # one chunk, the unified dictionary kept (not copied)
        assert col.num_chunks == 1
        assert (col.chunk(0).dictionary.buffers()[2].address
                == t.column(name).chunk(0).dictionary.buffers()[2].address)
    assert out.column("dur").type == pa.int64()
    codes, values = A.dictionary_parts(out.column("name"))
    assert codes.dtype == np.int16
    assert [values[c] for c in codes.tolist()] == t.column("name").to_pylist()
    assert narrow_codes(out).schema == out.schema  # already narrow: unchanged


def test_narrow_codes_leaves_what_it_cannot_narrow() -> None:
    """Chunks with different dictionaries, a plain string column, and a dictionary too
    large for int16 keep their types."""
    t = pa.table({"kind": _column(["a", "b", "c", "d"], 2, unify=False),
                  "op_family": pa.array(["gemm", "conv", "gemm", "conv"])})
    assert narrow_codes(t).schema == t.schema
    many = pa.table({"name": pa.array([f"n{i}" for i in range(40000)]).dictionary_encode()})
    assert narrow_codes(many).schema == many.schema
    nulls = pa.table({"kind": pa.chunked_array([pa.array(["a", None]).dictionary_encode()] * 2)})
    out = narrow_codes(nulls)  # null codes (no reader writes them): Arrow's cast keeps them
    assert out.schema.field("kind").type.index_type == pa.int8()
    assert out.column("kind").to_pylist() == ["a", None, "a", None]


def test_a_loaded_trace_has_narrow_codes_cold_and_from_the_cache(traces: Path,
                                                                 tmp_path: Path) -> None:
    d = traces / "linear_1x2080ti"
    plain = traincast.load(d, cache=False)
    for cache in (tmp_path, tmp_path):  # the job entry written, then read back
        ts = traincast.load(d, cache=cache)
        for name in DICT_COLUMNS:
            typ = ts.events.schema.field(name).type
            assert typ == pa.dictionary(_WANT[name], pa.string()), (name, cache)
            assert ts.events.column(name).to_pylist() == plain.events.column(name).to_pylist()
    assert plain.events.schema == ts.events.schema
