"""The record every trace reader returns: one process's (rank's) events in canonical columns.

:class:`TraceFile` is what :func:`traincast.trace.load` assembles into a
:class:`~traincast.trace.traceset.TraceSet` and what the parse cache
(:mod:`traincast.trace.cache`) stores. Each reader returns its own subclass, which adds what only
its format has: :class:`~traincast.trace.readers.kineto.KinetoFile` (nothing more),
:class:`~traincast.trace.readers.nsys.NsysFile` (the OS ``pid``),
:class:`~traincast.trace.readers.otf2.Otf2File` (collective ``calls``).

Columns (Arrow tables, rows referenced by their position in ``events``):

- ``events`` -- :data:`~traincast.trace.schema.EVENTS_SCHEMA` plus the link column ``rf_id``
  (int64, the ``Record function id`` linking to an execution trace; -1 if none), rows sorted by
  (ts, -dur); times in ns on the recording clock.
- ``comm_args`` -- collective arguments (``event``, ``coll_name``, ``pg_name``, ``pg_ranks``,
  ``group_size``, ``in_nelems``, ``out_nelems``, ``dtype``, ``seq``), keyed by event row.
- ``stream_waits`` -- stream waits (``event``, ``wait_on_stream``, ``record_correlation``):
  the event row that waits, the stream it waits on and the correlation of the event record.
- ``shapes`` -- ``input_dims`` / ``input_types`` (JSON text) keyed by ``event`` row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A

__all__ = ["TraceFile", "empty_comm_args", "empty_shapes", "empty_stream_waits"]


@dataclass
class TraceFile:
    """One process's trace, decoded (see the module docstring for the tables).

    ``distributed_info`` holds what the file says about its rank (``rank``, ``world_size``,
    ``pg_config``, ...); ``device_properties`` the recorded GPU properties; ``base_time_ns`` the
    clock's epoch offset when recorded (None if not); ``threads`` maps (pid, tid) to recorded
    thread names; ``n_bytes`` is the size of the file read; ``decode_stats`` what tolerant
    decoding coerced or dropped (:meth:`~traincast.trace.readers.tolerant.DecodeStats.to_dict`),
    {} if nothing.
    """

    path: Path
    events: pa.Table
    distributed_info: dict[str, Any]
    device_properties: list[dict[str, Any]]
    base_time_ns: int | None
    host_name: str
    comm_args: pa.Table
    stream_waits: pa.Table
    shapes: pa.Table
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    n_bytes: int = 0
    decode_stats: dict[str, dict[str, int]] = field(default_factory=dict)


def empty_comm_args() -> pa.Table:
    """A ``comm_args`` table with no rows (for formats that record no collective arguments)."""
    e64 = A.from_numpy(np.empty(0, np.int64))
    return pa.Table.from_arrays(
        [e64, A.strings([]), A.strings([]),
         pa.ListArray.from_arrays(A.from_numpy(np.zeros(1, np.int32)),
                                  A.from_numpy(np.empty(0, np.int32))),
         A.from_numpy(np.empty(0, np.int32)), e64, e64, A.strings([]), e64],
        names=["event", "coll_name", "pg_name", "pg_ranks", "group_size", "in_nelems",
               "out_nelems", "dtype", "seq"],
    )


def empty_stream_waits() -> pa.Table:
    """A ``stream_waits`` table with no rows."""
    return pa.Table.from_arrays(
        [A.from_numpy(np.empty(0, np.int64)), A.from_numpy(np.empty(0, np.int32)),
         A.from_numpy(np.empty(0, np.int64))],
        names=["event", "wait_on_stream", "record_correlation"])


def empty_shapes() -> pa.Table:
    """A ``shapes`` table with no rows."""
    return pa.Table.from_arrays(
        [A.from_numpy(np.empty(0, np.int64)), A.strings([]), A.strings([])],
        names=["event", "input_dims", "input_types"])
