"""The events id columns stored as int32 per job (:data:`~traincast.trace.schema.
NARROW_INT_COLUMNS`): each is int32 when every value of every rank fits, else int64 on every
rank, so the ranks' tables concatenate and no value changes."""

from __future__ import annotations

import pyarrow as pa

from traincast.trace.schema import NARROW_INT_COLUMNS

__all__ = ["narrow_ids"]


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
