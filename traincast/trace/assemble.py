"""Records of one run's files, ranks assigned -> :class:`~traincast.trace.traceset.TraceSet`.

:func:`assemble` takes the records in rank order and, per rank, its
:class:`~traincast.trace.rank_part.RankPart` (computed here, or given: the parse workers
compute the parts of files that say their rank and world size, and a part is used when its
rank and world are the job's), then offsets every rank's event rows into one table and
builds the job's ``collectives``, ``member_lists``, ``shapes``, ``iterations`` and
``stream_waits``. Warnings (a file without step markers, tolerant decoding) are issued in
rank order, as each rank is reached.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from traincast.errors import TraincastWarning
from traincast.trace import arrow as A
from traincast.trace.cache import TraceCache
from traincast.trace.iterations import Steps
from traincast.trace.link import attach_execution_traces
from traincast.trace.narrow import common_id_types, narrow_codes, narrow_ids
from traincast.trace.rank_part import RankPart, rank_part, rank_steps, with_kind
from traincast.trace.readers.base import TraceFile
from traincast.trace.readers.otf2 import Otf2File
from traincast.trace.readers.tolerant import summary_line
from traincast.trace.schema import COLLECTIVES_SCHEMA, DICT_COLUMNS, MEMBER_LISTS_SCHEMA
from traincast.trace.traceset import RankInfo, TraceSet, share_device_properties

__all__ = ["assemble", "job_world"]


def job_world(parsed: list[tuple[int, TraceFile]]) -> int:
    """The job's world size: the largest ``world_size`` its files record (0: none does)."""
    return max((int(k.distributed_info.get("world_size") or 0) for _, k in parsed), default=0)


def assemble(parsed: list[tuple[int, TraceFile]], ets: list[Path], marker: str | None,
             store: TraceCache | None = None,
             parts: Mapping[int, RankPart] | None = None,
             on_column: Callable[[pa.Schema, int, pa.Array], None] | None = None
             ) -> TraceSet:
    """The TraceSet of ``parsed`` ((rank, record) in rank order), with the execution traces
    ``ets`` linked. ``parts``: precomputed parts by ``id(record)``; one whose rank or world
    is not the job's is computed again here. ``on_column(schema, j, array)``: called with
    each column of the events as soon as it is combined in one array, in order (a job
    entry's write begins with them: :mod:`~traincast.trace.cache_job`)."""
    coll_rows, wait_tables = [], []
    shape_parts: list[tuple[pa.Table, int]] = []  # (a record's shapes, its events' offset)
    iter_parts: list[tuple[int, int, Steps]] = []  # (rank, its events' offset, its steps)
    tables: list[pa.Table] = []
    ranks: dict[int, RankInfo] = {}
    warn: list[str] = []
    unmarked: set[Path] = set()
    offset = 0
    world = job_world(parsed)
    # one tuple for the world and for each distinct member list: calls share them (a world
    # group lists every rank in every call, calls x world ids in all)
    world_ranks = tuple(range(world)) if world else tuple(r for r, _ in parsed)
    member_lists: dict[bytes, tuple[int, ...]] = {}
    for rank, k in parsed:
        part = parts.get(id(k)) if parts else None
        if part is not None and (part.rank != rank or part.world != world or not world):
            part = None
        if part is None:
            steps, cols = rank_steps(k, marker)
        else:
            steps = part.steps
        if steps.synthetic and k.path not in unmarked:  # once per file (OTF2, nsys: ranks)
            unmarked.add(k.path)
            msg = f"{k.path}: no ProfilerStep#N markers; treating the file as one iteration"
            warn.append(msg)
            warnings.warn(msg, TraincastWarning, stacklevel=3)
        if k.decode_stats:
            how = (f"rank {rank}: records with no canonical counterpart"
                   if isinstance(k, Otf2File) else "tolerant decoding")
            msg = f"{k.path}: {how}: {summary_line(k.decode_stats, verbose=True)}"
            warn.append(msg)
            warnings.warn(msg, TraincastWarning, stacklevel=3)
        if part is None:
            part = rank_part(rank, k, steps, cols, world, world_ranks, member_lists)
        n = part.events.num_rows
        tables.append(with_kind(part.events, part.kind))
        iter_parts.append((rank, offset, steps))
        for c in part.calls:
            coll_rows.append((rank, c.event + offset,
                              c.kernel_event + offset if c.kernel_event >= 0 else -1,
                              c.issue + offset if c.issue >= 0 else -1,
                              c.collective, c.process_group, c.seq, c.recorded_seq,
                              len(c.group_ranks),
                              c.group_ranks, c.dtype, c.in_bytes, c.out_bytes))
        if k.shapes.num_rows:
            shape_parts.append((k.shapes, offset))
        if k.stream_waits.num_rows:
            sw = k.stream_waits
            wait_tables.append(sw.set_column(0, "event", A.from_numpy(
                A.to_numpy(sw.column("event")) + offset)))
        info = k.distributed_info
        ranks[rank] = RankInfo(
            rank=rank, path=k.path,
            world_size=int(info["world_size"]) if info.get("world_size") is not None else None,
            backend=str(info.get("backend", "")),
            devices=[str(d.get("name", "")) for d in k.device_properties],
            device_properties=[dict(d) for d in k.device_properties if isinstance(d, dict)],
            decode_stats=dict(k.decode_stats),
            pg_config=list(info.get("pg_config") or []),
            threads=k.threads, n_bytes=k.n_bytes, host=k.host_name,
        )
        offset += n
    share_device_properties(ranks.values())
    tables = common_id_types(tables)
    events = narrow_codes(narrow_ids(tables[0] if len(tables) == 1 else
                                     pa.concat_tables(tables).unify_dictionaries()))
    del tables
    events = _combined(events, on_column)
    collectives, member_table = _collectives_table(coll_rows)
    shapes_t = _shapes_table(shape_parts)
    iterations = _iterations_table(iter_parts)
    ts_ = TraceSet(events=events, collectives=collectives, shapes=shapes_t,
                   iterations=iterations, ranks=ranks, warnings=warn, member_lists=member_table,
                   stream_waits=pa.concat_tables(wait_tables) if wait_tables else None)
    if ets:
        attach_execution_traces(ts_, ets, store)
    return ts_


def _shapes_table(parts: list[tuple[pa.Table, int]]) -> pa.Table:
    """The job's ``shapes``: each record's shapes table (``parts``: with the offset of its
    events in the job's), its ``event`` column moved by the offset, concatenated (a chunk
    per record, as ``pa.concat_tables`` of the moved tables gives). The moved event ids are
    written into one int64 array and each record's chunk is a slice of it (no per-record
    array and table)."""
    if not parts:
        return pa.Table.from_arrays([A.from_numpy(np.empty(0, np.int64)), A.strings([]),
                                     A.strings([])],
                                    names=["event", "input_dims", "input_types"])
    cols = [A.to_numpy(t.column("event")) for t, _ in parts]
    first = parts[0][0].schema
    if any(c.dtype != np.int64 for c in cols) or any(
            not t.schema.equals(first) for t, _ in parts[1:]):
        return pa.concat_tables([  # other types: each moved on its own, as they come
            t.set_column(0, "event", A.from_numpy(c + off))
            for (t, off), c in zip(parts, cols, strict=True)])
    events = np.empty(sum(c.size for c in cols), np.int64)
    bounds = np.cumsum([0] + [c.size for c in cols]).tolist()
    for (_, off), c, lo, hi in zip(parts, cols, bounds[:-1], bounds[1:], strict=True):
        np.add(c, off, out=events[lo:hi])
    moved = A.from_numpy(events)
    chunks = [[moved.slice(lo, hi - lo) for lo, hi in zip(bounds[:-1], bounds[1:],
                                                          strict=True)]]
    for j in range(1, len(first)):
        chunks.append([c for t, _ in parts for c in t.column(j).chunks])
    schema = first.set(0, pa.field("event", pa.int64()))
    return pa.Table.from_arrays([pa.chunked_array(c, schema.field(j).type)
                                 for j, c in enumerate(chunks)], schema=schema)


def _iterations_table(parts: list[tuple[int, int, Steps]]) -> pa.Table:
    """The job's ``iterations`` from each rank's steps (``parts``: rank, the offset of its
    events in the job's, its :class:`~traincast.trace.iterations.Steps`), in order."""
    if not parts:
        empty = np.empty(0, np.int64)
        num, start, end, marks, rank = empty, empty, empty, empty, empty
    else:
        sizes = [s.marker_rows.size for _, _, s in parts]
        rank = np.repeat(np.array([r for r, _, _ in parts], np.int64), sizes)
        num = np.concatenate([s.number for _, _, s in parts]).astype(np.int64, copy=False)
        start = np.concatenate([s.start for _, _, s in parts]).astype(np.int64, copy=False)
        end = np.concatenate([s.end for _, _, s in parts]).astype(np.int64, copy=False)
        marks = np.concatenate([s.marker_rows for _, _, s in parts]).astype(np.int64,
                                                                            copy=False)
        marks = np.where(marks >= 0, marks + np.repeat(
            np.array([o for _, o, _ in parts], np.int64), sizes), -1)
    return pa.Table.from_arrays(
        [A.from_numpy(rank.astype(np.int32)), A.from_numpy(num.astype(np.int32)),
         A.from_numpy(start), A.from_numpy(end), A.from_numpy(end - start),
         A.from_numpy(marks)],
        names=["rank", "iteration", "start", "end", "dur", "marker_event"],
    )


def _combined(t: pa.Table,
              on_column: Callable[[pa.Schema, int, pa.Array], None] | None) -> pa.Table:
    """``t`` with each column in one chunk (the table ``Table.combine_chunks`` gives),
    column by column, each passed to ``on_column`` as it is done. A dictionary column of
    one chunk (as :func:`~traincast.trace.narrow.narrow_codes` leaves them) is kept, not
    copied."""
    arrays = []
    for j, c in enumerate(t.columns):
        keep = c.num_chunks == 1 and t.schema.field(j).name in DICT_COLUMNS
        arrays.append(c.chunk(0) if keep else c.combine_chunks())
        if on_column is not None:
            on_column(t.schema, j, arrays[-1])
    return pa.Table.from_arrays(arrays, schema=t.schema)


def _collectives_table(rows: list[tuple]) -> tuple[pa.Table, pa.Table]:
    """The ``collectives`` table and its ``member_lists`` side table from the calls' rows
    (whose 10th item is the tuple of member ranks, shared between calls)."""
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(13)]
    names = [f.name for f in COLLECTIVES_SCHEMA]
    # calls share their member tuples: each distinct object is looked up once, each
    # distinct list stored once
    by_object: dict[int, int] = {}
    by_content: dict[tuple[int, ...], int] = {}
    ids = np.empty(len(cols[9]), np.int32)
    for i, m in enumerate(cols[9]):
        k = by_object.get(id(m))
        if k is None:
            key = m if isinstance(m, tuple) else tuple(m)
            k = by_object[id(m)] = by_content.setdefault(key, len(by_content))
        ids[i] = k
    member_lists = pa.Table.from_arrays([A.list_of(list(by_content))],
                                        schema=MEMBER_LISTS_SCHEMA)
    members = A.from_numpy(ids)
    arrays = [
        A.from_numpy(np.asarray(cols[0], np.int32)),
        A.from_numpy(np.asarray(cols[1], np.int64)),
        A.from_numpy(np.asarray(cols[2], np.int64)),
        A.from_numpy(np.asarray(cols[3], np.int64)),
        A.strings(list(cols[4])),
        A.strings(list(cols[5])),
        A.from_numpy(np.asarray(cols[6], np.int64)),
        A.from_numpy(np.asarray(cols[7], np.int64)),
        A.from_numpy(np.asarray(cols[8], np.int32)),
        members,
        A.strings(list(cols[10])),
        A.from_numpy(np.asarray(cols[11], np.int64)),
        A.from_numpy(np.asarray(cols[12], np.int64)),
    ]
    return pa.Table.from_arrays(arrays, names=names), member_lists
