"""The events id columns stored as int32 per job (:data:`~traincast.trace.schema.
NARROW_INT_COLUMNS`): each is int32 when every value of every rank fits, else int64 on every
rank, so the ranks' tables concatenate and no value changes.

Each rank's table is narrowed on its own first (:func:`narrow_ids` of one rank, where its
part is computed: a parse worker); :func:`common_id_types` then widens back to int64 the
columns that some other rank keeps as int64, so every rank's column has the job's type."""

from __future__ import annotations

import pyarrow as pa

from traincast.trace.schema import NARROW_INT_COLUMNS

__all__ = ["common_id_types", "narrow_ids"]


def narrow_ids(events: pa.Table) -> pa.Table:
    """``events`` (all ranks, chunks as concatenated) with each column of
    :data:`~traincast.trace.schema.NARROW_INT_COLUMNS` as int32 where every value fits in
    int32, else as it was (int64): one checked cast per column over all its chunks."""
    for name in NARROW_INT_COLUMNS:
        i = events.schema.get_field_index(name)
        if i < 0 or events.schema.field(i).type != pa.int64():
            continue
        try:  # a safe cast refuses any value beyond int32
            narrow = events.column(i).cast(pa.int32())
        except pa.ArrowInvalid:
            continue
        events = events.set_column(i, name, narrow)
    return events


def common_id_types(tables: list[pa.Table]) -> list[pa.Table]:
    """``tables`` (one per rank, each narrowed on its own or not at all) with each column of
    :data:`~traincast.trace.schema.NARROW_INT_COLUMNS` that is int32 on some and int64 on
    others cast to int64 where it is int32 (a lossless cast), so they concatenate; the
    tables unchanged when they agree."""
    if len(tables) < 2:
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
