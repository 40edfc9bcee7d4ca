"""The events id columns stored as int32 per job (:data:`~traincast.trace.schema.
NARROW_INT_COLUMNS`): each is int32 when every value of every rank fits, else int64 on every
rank, so the ranks' tables concatenate and no value changes. The events' dictionary columns
(:data:`~traincast.trace.schema.DICT_COLUMNS`) get the narrowest index type their dictionary
fits, ``name`` at least int16 (:func:`narrow_codes`: int8 up to 127 values, int16 up to
32,767, else int32): the values and the dictionary are unchanged, only the width of the
codes. A column's index type then depends on its dictionary's size alone, not on the trace
(``kind`` and ``op_family`` int8, ``name`` int16 below 32,768 names): the compiled kernels
that read the codes see the same argument types from job to job.

Each rank's table is narrowed on its own first (:func:`narrow_ids` of one rank, where its
part is computed: a parse worker); :func:`common_id_types` then widens back to int64 the
columns that some other rank keeps as int64, so every rank's column has the job's type."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A
from traincast.trace.schema import DICT_COLUMNS, NARROW_INT_COLUMNS

__all__ = ["common_id_types", "narrow_codes", "narrow_ids", "narrow_index_type"]

_INT32_MIN, _INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
#: index types, narrowest first, with the largest dictionary each can index
_INDEX_TYPES = ((pa.int8(), 127), (pa.int16(), 32767), (pa.int32(), 2**31 - 1))
#: the narrowest index type of a column, where not int8 (names: int16 whatever the trace)
_LEAST = {"name": 16}


def narrow_ids(events: pa.Table) -> pa.Table:
    """``events`` (all ranks, chunks as concatenated) with each column of
    :data:`~traincast.trace.schema.NARROW_INT_COLUMNS` as int32 where every value fits in
    int32, else as it was (int64): one checked cast per column over all its chunks."""
    for name in NARROW_INT_COLUMNS:
        i = events.schema.get_field_index(name)
        if i < 0 or events.schema.field(i).type != pa.int64():
            continue
        col = events.column(i)
        if col.null_count:
            try:  # a safe cast refuses any value beyond int32
                narrow = col.cast(pa.int32())
            except pa.ArrowInvalid:
                continue
        else:  # numpy: Arrow's cast imports its compute functions (~65 ms) on first use
            values = A.to_numpy(col)
            if values.size and (values.min() < _INT32_MIN or values.max() > _INT32_MAX):
                continue
            narrow = A.from_numpy(values.astype(np.int32))
        events = events.set_column(i, name, narrow)
    return events


def common_id_types(tables: list[pa.Table]) -> list[pa.Table]:
    """``tables`` (one per rank, each narrowed on its own or not at all) with each column of
    :data:`~traincast.trace.schema.NARROW_INT_COLUMNS` that is int32 on some and int64 on
    others cast to int64 where it is int32 (a lossless cast), so they concatenate; the
    tables unchanged when they agree."""
    if len(tables) < 2:
        return tables
    first = tables[0].schema
    if all(t.schema.equals(first) for t in tables[1:]):  # one type per column already
        return tables
    wide = []
    for name in NARROW_INT_COLUMNS:
        types = set()
        for t in tables:
            i = t.schema.get_field_index(name)
            if i >= 0:
                types.add(t.schema.field(i).type)
        if pa.int32() in types and pa.int64() in types:
            wide.append(name)
    if not wide:
        return tables
    out = []
    for t in tables:
        for name in wide:
            i = t.schema.get_field_index(name)
            if i >= 0 and t.schema.field(i).type == pa.int32():
                t = t.set_column(i, name, t.column(i).cast(pa.int64()))
        out.append(t)
    return out


def narrow_index_type(n_values: int, least: int = 8) -> pa.DataType:
    """The narrowest signed index type (int8, int16, int32) of at least ``least`` bits that
    indexes ``n_values`` values (int64 beyond int32)."""
    for t, most in _INDEX_TYPES:
        if t.bit_width >= least and n_values <= most:
            return t
    return pa.int64()


def narrow_codes(events: pa.Table) -> pa.Table:
    """``events`` with each dictionary column of :data:`~traincast.trace.schema.
    DICT_COLUMNS` whose dictionary is shared by its chunks (one chunk, or chunks as
    ``unify_dictionaries`` leaves them) indexed by :func:`narrow_index_type` of its
    dictionary's length (``name``: at least int16), where that is narrower than its index
    type now, and combined in one chunk (the dictionary kept); other columns (and a column
    whose chunks hold different dictionaries) unchanged."""
    for name in DICT_COLUMNS:
        i = events.schema.get_field_index(name)
        if i < 0:
            continue
        t = events.schema.field(i).type
        if not pa.types.is_dictionary(t):
            continue
        col = events.column(i)
        if col.num_chunks == 0:
            continue
        first = col.chunk(0).dictionary
        if any(not c.dictionary.equals(first) for c in col.chunks[1:]):
            continue
        want = narrow_index_type(len(first), _LEAST.get(name, 8))
        if want.bit_width >= t.index_type.bit_width:
            continue
        if col.null_count:  # (readers write no null codes) Arrow's cast keeps the nulls
            narrow: pa.Array | pa.ChunkedArray = col.cast(pa.dictionary(want, t.value_type))
        else:
            narrow = _combined_codes(col, first, want)
        events = events.set_column(i, name, narrow)
    return events


def _combined_codes(col: pa.ChunkedArray, dictionary: pa.Array, index: pa.DataType
                    ) -> pa.DictionaryArray:
    """The chunks of ``col`` (no nulls, all indexing ``dictionary``) as one dictionary
    array of ``index`` codes (values that fit it): the chunks combined by Arrow, then the
    codes converted by numpy (one int32 column at a time, freed at once; Arrow's per-chunk
    casts cost ~15 us a chunk, 3x as long at 1,024 chunks)."""
    codes = A.to_numpy(col.combine_chunks().indices).astype(index.to_pandas_dtype())
    return pa.DictionaryArray.from_arrays(A.from_numpy(codes), dictionary, safe=False)
