"""Arrow arrays straight from numpy buffers.

``pyarrow.array`` imports pandas on first use (about 50 MB of resident memory) to check for
pandas objects; readers build their columns through these helpers instead, so loading a
trace costs only what the columns need.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_NP_TO_PA = {
    np.dtype(np.int8): pa.int8(),
    np.dtype(np.int16): pa.int16(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.float64): pa.float64(),
    np.dtype(np.bool_): pa.bool_(),
}


def from_numpy(values: np.ndarray) -> pa.Array:
    """Wrap a 1-D numpy array of int32/int64/float64 as an Arrow array (zero copy)."""
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(
        _NP_TO_PA[values.dtype], len(values), [None, pa.py_buffer(values)]
    )


def strings(values: Sequence[str]) -> pa.Array:
    """An Arrow ``string`` array of ``values`` (no nulls)."""
    encoded = [v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    if encoded:
        np.cumsum(np.fromiter(map(len, encoded), np.int32, len(encoded)), out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def dictionary(codes: np.ndarray, values: Sequence[str]) -> pa.DictionaryArray:
    """A ``dictionary<int32, string>`` array from int32 codes into ``values``."""
    return pa.DictionaryArray.from_arrays(from_numpy(codes.astype(np.int32, copy=False)),
                                          strings(values))


class Interner:
    """Assigns stable int32 codes to strings across chunks (a growing dictionary)."""

    def __init__(self, initial: Sequence[str] = ()) -> None:
        self.codes: dict[str, int] = {v: i for i, v in enumerate(initial)}

    def encode(self, values: list[str]) -> np.ndarray:
        """Codes of ``values`` (int32 array), adding unseen strings to the dictionary."""
        codes = self.codes
        for v in dict.fromkeys(values):
            if v not in codes:
                codes[v] = len(codes)
        return np.fromiter(map(codes.__getitem__, values), np.int32, len(values))

    @property
    def values(self) -> list[str]:
        return list(self.codes)


_PA_TO_NP = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
             pa.float64(): np.float64}


def to_numpy(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-width Arrow array without nulls as numpy (zero copy for one chunk).

    ``Array.to_numpy`` imports pandas on first use; this reads the data buffer directly.
    Dictionary arrays give their int codes.
    """
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 1:
            arr = arr.chunk(0)
        elif arr.num_chunks == 0:
            return np.empty(0, _PA_TO_NP.get(arr.type, np.int64))
        else:
            arr = arr.combine_chunks()
    if isinstance(arr, pa.DictionaryArray):
        arr = arr.indices
    if arr.null_count:
        raise ValueError("array has nulls")
    if arr.type == pa.bool_():
        bits = np.frombuffer(arr.buffers()[1], np.uint8)
        return np.unpackbits(bits, bitorder="little")[arr.offset: arr.offset + len(arr)].astype(
            bool)
    dtype = _PA_TO_NP[arr.type]
    buf = arr.buffers()[1]
    if buf is None:
        return np.empty(0, dtype)
    return np.frombuffer(buf, dtype)[arr.offset: arr.offset + len(arr)]


def combined(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One Arrow array of a (chunked) column (its only chunk as it is; an empty array of
    its type when it has no chunk: ``combine_chunks`` of no chunk imports pandas)."""
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 1:
            return arr.chunk(0)
        return pa.nulls(0, arr.type) if arr.num_chunks == 0 else arr.combine_chunks()
    return arr


def valid_mask(arr: pa.Array) -> np.ndarray | None:
    """bool[rows], True where ``arr`` holds a value (its validity bitmap), None when it holds
    no null."""
    if not arr.null_count:
        return None
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return bits[arr.offset: arr.offset + len(arr)].astype(bool)


def filled(arr: pa.Array | pa.ChunkedArray, fill: int) -> np.ndarray:
    """A fixed-width Arrow array as numpy with its nulls set to ``fill`` (:func:`to_numpy`
    when it has none; a copy when it has some), without ``fill_null``: Arrow's compute
    functions, like ``Array.to_numpy``, import pandas on first use."""
    arr = combined(arr)
    valid = valid_mask(arr)
    if valid is None:
        return to_numpy(arr)
    out = np.frombuffer(arr.buffers()[1], _PA_TO_NP[arr.type])[
        arr.offset: arr.offset + len(arr)].copy()
    out[~valid] = fill
    return out


def take_strings(col: pa.Array | pa.ChunkedArray, rows: np.ndarray) -> list[str | None]:
    """``col.take(rows).to_pylist()`` for a ``string``, ``large_string`` or string dictionary
    column, read from its buffers: ``take`` imports Arrow's compute functions (~65 ms, and
    pandas with them) on first use. ``rows``: int indices into ``col``.

    Raises:
        TypeError: ``col`` does not hold strings.
    """
    col = combined(col)
    rows = np.asarray(rows, np.int64)
    if isinstance(col, pa.DictionaryArray):
        values = take_strings(col.dictionary, np.arange(len(col.dictionary)))
        return [values[c] if c >= 0 else None for c in filled(col.indices, -1)[rows].tolist()]
    if pa.types.is_string(col.type):
        width = np.int32
    elif pa.types.is_large_string(col.type):
        width = np.int64
    else:
        raise TypeError(f"not a string column: {col.type}")
    _, offsets, data = col.buffers()
    off = np.frombuffer(offsets, width)[col.offset: col.offset + len(col) + 1]
    raw = memoryview(data) if data is not None else memoryview(b"")
    starts, ends = off[rows].tolist(), off[rows + 1].tolist()
    if not col.null_count:
        return [str(raw[a:b], "utf-8") for a, b in zip(starts, ends, strict=True)]
    valid = valid_mask(col)[rows].tolist()  # type: ignore[index]
    return [str(raw[a:b], "utf-8") if v else None
            for a, b, v in zip(starts, ends, valid, strict=True)]


def dictionary_parts(arr: pa.ChunkedArray | pa.DictionaryArray) -> tuple[np.ndarray, list[str]]:
    """(codes, values) of a dictionary column (chunks unified first). The codes keep the
    column's index type (int8, int16 or int32: a view, not copied, for one chunk); widen
    them before arithmetic that could leave that type."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.unify_dictionaries().combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return to_numpy(arr.indices), arr.dictionary.to_pylist()


#: string dictionaries met by :func:`shared_dictionary_parts`: (a copy of the dictionary,
#: its values), by length
_SHARED: dict[int, list[tuple[pa.Array, list[str]]]] = {}
_MAX_SHARED = 64
#: larger dictionaries are not kept (nor compared)
_MAX_SHARED_VALUES = 1 << 14


def shared_dictionary_parts(arr: pa.ChunkedArray | pa.DictionaryArray
                            ) -> tuple[np.ndarray, list[str]]:
    """:func:`dictionary_parts`, the values (a new list) holding the same ``str`` objects as
    an earlier call's when the dictionaries are equal (a string dictionary without nulls):
    the ranks of a job share one, and each of its names is then made (and hashed, for the
    memos keyed by a dictionary's names) once per process, not once per rank. Dictionaries of
    up to :data:`_MAX_SHARED_VALUES` values are kept, the last :data:`_MAX_SHARED`."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.unify_dictionaries().combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    d = arr.dictionary
    if not pa.types.is_string(d.type) or d.null_count or len(d) > _MAX_SHARED_VALUES:
        return dictionary_parts(arr)
    known = _SHARED.setdefault(len(d), [])
    for have, values in known:
        if have.equals(d):
            return to_numpy(arr.indices), list(values)
    values = d.to_pylist()
    if sum(map(len, _SHARED.values())) >= _MAX_SHARED:
        _SHARED.clear()
        known = _SHARED[len(d)] = []
    known.append((strings(values), values))  # a copy: no view of a caller's buffers kept
    return to_numpy(arr.indices), list(values)


def list_spans(arr: pa.Array | pa.ChunkedArray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of a ``list`` / ``large_list`` column as spans of its flat values, without
    materialising the lists.

    Returns:
        (int64[rows] start of each row in ``values``, int64[rows] length (0 for a null row),
        values as numpy, bool[rows] valid).

    Raises:
        TypeError: not a list column.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise TypeError(f"not a list column: {arr.type}")
    off = to_numpy(arr.offsets).astype(np.int64)
    starts, lens = off[:-1], np.diff(off)
    valid = (np.ones(len(arr), bool) if arr.null_count == 0
             else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool))
    lens = np.where(valid, lens, 0)
    child = arr.values
    values = (to_numpy(child) if child.null_count == 0 and child.type in _PA_TO_NP
              else np.asarray(child.to_numpy(zero_copy_only=False)))
    return starts, lens, values, valid


def list_of(members: Sequence[Sequence[int]], dtype: Any = np.int32) -> pa.Array:
    """A ``list<int32>`` array of ``members`` (one sequence of ints per row), each distinct
    object converted to numpy once (calls of a process group share one tuple of its ranks).
    64-bit offsets (``large_list``) only past 2^31 values.

    Plain lists, not ``list_view`` rows sharing one span: pyarrow 26 aborts the process in
    ``to_pandas`` of an empty ``list_view`` column (e.g. a filter that keeps no row), casts
    shared spans to empty lists, and Ray's Arrow serializer has no ``list_view``."""
    n = len(members)
    lens = np.fromiter(map(len, members), np.int64, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    as_array: dict[int, np.ndarray] = {}
    parts = []
    for m in members:
        a = as_array.get(id(m))
        if a is None:
            a = as_array[id(m)] = np.asarray(m, dtype).reshape(-1)
        parts.append(a)
    values = from_numpy(np.concatenate(parts) if parts else np.empty(0, dtype))
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(from_numpy(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(from_numpy(offsets), values)


_INT_TYPES = {pa.int32(): np.int32, pa.int64(): np.int64}
_INT32_LIST = pa.list_(pa.int32())


def column(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """``pa.array(values, typ)`` without ``pa.array`` (which imports pandas) for plain Python
    values: ``int`` into ``int32``/``int64``, ``bool`` into ``bool``, ``str`` into ``string``,
    lists of ``int`` into ``list<int32>``. Any other value (``None``, a ``bool`` or a float
    among ints, an int out of range, a lone surrogate...) goes through ``pa.array`` itself,
    which converts it or raises as it always did (``ArrowInvalid``, ``ArrowTypeError``,
    ``OverflowError``, ``UnicodeEncodeError``).
    """
    n = len(values)
    try:
        if typ == pa.string():
            # TypeError for a value that is no str, UnicodeEncodeError for a surrogate
            data = "".join(values).encode()  # type: ignore[arg-type]
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(np.fromiter(map(len, values), np.int64, n), out=offsets[1:])
            if offsets[-1] != len(data):  # not all ASCII: lengths in bytes
                np.cumsum(np.fromiter(map(len, map(str.encode, values)), np.int64, n),
                          out=offsets[1:])
            if offsets[-1] < 2**31:
                return pa.Array.from_buffers(pa.string(), n, [
                    None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
            return pa.array(values, typ)  # past 2 GiB of text
        kinds = set(map(type, values))
        if typ == pa.bool_() and kinds <= {bool}:
            return from_numpy(np.fromiter(values, np.bool_, n))
        if typ in _INT_TYPES and kinds <= {int}:
            return from_numpy(np.fromiter(values, _INT_TYPES[typ], n))
        if (typ == _INT32_LIST and kinds <= {list}
              and all(set(map(type, v)) <= {int} for v in values)):
            got = list_of(values, np.int32)
            if got.type == typ:
                return got
    except (OverflowError, TypeError, UnicodeEncodeError):  # pa.array's own error, if any
        pass
    return pa.array(values, typ)
