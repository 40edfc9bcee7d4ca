"""A parsed record on its way from a parse worker to the loading process.

:class:`Shipped` holds one reader record (:class:`~traincast.trace.readers.base.TraceFile`)
and, when the worker computed it, the record's
:class:`~traincast.trace.rank_part.RankPart`. Pickled, its Arrow tables (the record's and
the part's events) travel as Arrow IPC streams in one buffer, read back without a copy:
pickling every column's buffers and types costs ~3x more on both sides. Everything else
pickles as usual.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from traincast.trace.rank_part import RankPart
from traincast.trace.readers.base import TraceFile

__all__ = ["Shipped", "pack_tables", "unpack_tables"]


def pack_tables(tables: list[pa.Table]) -> tuple[pa.Buffer, list[int]]:
    """``tables`` as consecutive Arrow IPC streams in one buffer, and each stream's size."""
    sink = pa.BufferOutputStream()
    sizes = []
    for t in tables:
        start = sink.tell()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        sizes.append(sink.tell() - start)
    return sink.getvalue(), sizes


def unpack_tables(buf: pa.Buffer, sizes: list[int]) -> list[pa.Table]:
    """The tables of :func:`pack_tables`, zero-copy views of ``buf``."""
    out = []
    pos = 0
    for n in sizes:
        out.append(pa.ipc.open_stream(buf.slice(pos, n)).read_all())
        pos += n
    return out


class Shipped:
    """A record and its rank part (None when not computed), pickled compactly."""

    __slots__ = ("part", "record")

    def __init__(self, record: TraceFile, part: RankPart | None = None) -> None:
        self.record = record
        self.part = part

    def __getstate__(self) -> tuple[Any, ...]:
        rec = self.record
        fields = {f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)}
        names = [n for n, v in fields.items() if isinstance(v, pa.Table)]
        tables = [fields.pop(n) for n in names]
        part = self.part
        if part is not None:
            tables.append(part.events)
            part = dataclasses.replace(part, events=None)
        buf, sizes = pack_tables(tables)
        return type(rec), fields, names, buf, sizes, part

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        cls, fields, names, buf, sizes, part = state
        tables = unpack_tables(buf, sizes)
        fields.update(zip(names, tables, strict=False))
        self.record = cls(**fields)
        if part is not None:
            part.events = tables[-1]
        self.part = part
