"""The events id columns stored as int32 per job (:data:`~traincast.trace.schema.
NARROW_INT_COLUMNS`): each is int32 when every value of every rank fits, else int64 on every
rank, so the ranks' tables concatenate and no value changes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A
from traincast.trace.schema import NARROW_INT_COLUMNS

__all__ = ["narrow_ids"]

_INT32 = np.iinfo(np.int32)


def narrow_ids(tables: list[pa.Table]) -> list[pa.Table]:
    """The ranks' events tables with each column of :data:`~traincast.trace.schema.
    NARROW_INT_COLUMNS` as int32 where every value of every table fits in int32, else as
    int64 in every table (a job is decided as a whole, so the tables concatenate)."""
    out = list(tables)
    for name in NARROW_INT_COLUMNS:
        cols = [t.column(name) if name in t.column_names else None for t in out]
        if any(c is None for c in cols):
            continue
        fits = True
        for c in cols:
            if c.type == pa.int32():
                continue
            v = A.to_numpy(c)
            if v.size and (int(v.min()) < _INT32.min or int(v.max()) > _INT32.max):
                fits = False
                break
        want = np.int32 if fits else np.int64
        for i, (t, c) in enumerate(zip(out, cols, strict=True)):
            if c.type != (pa.int32() if fits else pa.int64()):
                out[i] = t.set_column(t.schema.get_field_index(name), name,
                                      A.from_numpy(A.to_numpy(c).astype(want)))
    return out
