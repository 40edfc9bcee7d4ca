"""The rank-local part of assembling a TraceSet: what one rank's record gives on its own.

:func:`rank_steps` finds a record's steps (:func:`~traincast.trace.iterations.find_steps`);
:func:`rank_part` then gives its :class:`RankPart`: the events with their ``rank`` and
``iteration`` columns filled and its id columns narrowed to int32 where they fit
(:mod:`~traincast.trace.narrow`), the steps, the collective calls (event rows rank-local) and,
where gloo ranges run the collective themselves, the events' new ``kind`` codes. Nothing
here depends on the other ranks except the world (the members of a call that records none):
the loader runs it in its parse workers (:mod:`traincast.trace.parse_task`) for files that
say their rank and world size, and in :func:`traincast.trace.assemble.assemble` for the
others; both give the same part.

Raises what :func:`~traincast.trace.iterations.find_steps` raises (``IterationError``).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A
from traincast.trace.collectives import CallRecord, extract_calls
from traincast.trace.iterations import Steps, assign_iterations, find_steps
from traincast.trace.narrow import narrow_ids
from traincast.trace.readers.base import TraceFile
from traincast.trace.readers.nsys import NsysFile, nccl_kernel_calls
from traincast.trace.readers.otf2 import Otf2File
from traincast.trace.schema import KINDS

__all__ = ["RankColumns", "RankPart", "pack_part", "rank_part", "rank_steps", "unpack_part",
           "world_tuple"]

_KINDS = list(KINDS)


@dataclass
class RankColumns:
    """The numpy views of one record's events that the steps and the calls read."""

    name_idx: np.ndarray
    name_dict: list[str]
    kind_idx: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    corr: np.ndarray
    tid: np.ndarray
    host: np.ndarray


@dataclass
class RankPart:
    """One rank's share of the assembly (see the module docstring).

    ``world`` is the world size the calls assumed for calls without member lists (0: the
    ranks of the job, given by the caller); ``kind`` the events' new kind codes (int32) when
    gloo ranges became collectives, else None (``events`` keeps its kinds until then).
    """

    rank: int
    world: int
    events: pa.Table
    steps: Steps
    calls: list[CallRecord]
    kind: np.ndarray | None = None


_WORLD: list[tuple[int, ...]] = []


def world_tuple(world: int) -> tuple[int, ...]:
    """``tuple(range(world))``, one object per process while the world stays the same (the
    members of the calls that record none: pickled as their size, see
    :func:`pack_part`)."""
    if not _WORLD or len(_WORLD[0]) != world:
        _WORLD[:] = [tuple(range(world))]
    return _WORLD[0]


_CALL_FIELDS = tuple(f.name for f in dataclasses.fields(CallRecord))
_CALL_VALUES = operator.attrgetter(*_CALL_FIELDS)
_GROUP = _CALL_FIELDS.index("group_ranks")


def _array_state(a: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    return a.dtype.str, a.shape, a.tobytes()


def _array_of(state: tuple[str, tuple[int, ...], bytes]) -> np.ndarray:
    dtype, shape, data = state
    return np.frombuffer(bytearray(data), np.dtype(dtype)).reshape(shape)


def pack_part(part: RankPart) -> tuple[Any, ...]:
    """``part`` without its events as plain tuples, bytes and ints, for pickling: numpy
    arrays and dataclasses pickle several times slower, and a call's members that are
    :func:`world_tuple` travel as their count. :func:`unpack_part` gives it back."""
    st = part.steps
    arrays = (st.number, st.start, st.end, st.marker_rows)
    world = _WORLD[0] if _WORLD else None
    calls = []
    for c in part.calls:
        v = _CALL_VALUES(c)
        if world is not None and v[_GROUP] is world:
            v = (*v[:_GROUP], len(world), *v[_GROUP + 1:])
        calls.append(v)
    return (part.rank, part.world,
            tuple(_array_state(a) if isinstance(a, np.ndarray) else a for a in arrays),
            st.synthetic, calls, part.kind)


def unpack_part(state: tuple[Any, ...]) -> RankPart:
    """The :class:`RankPart` of :func:`pack_part` (``events`` None: the caller sets them)."""
    rank, world, arrays, synthetic, calls, kind = state
    steps = Steps(*(_array_of(a) if isinstance(a, tuple) else a for a in arrays),
                  synthetic=synthetic)
    out = []
    for v in calls:
        g = v[_GROUP]
        if type(g) is int:
            v = (*v[:_GROUP], world_tuple(g), *v[_GROUP + 1:])
        out.append(CallRecord(*v))
    return RankPart(rank, world, None, steps, out, kind)  # type: ignore[arg-type]


def rank_steps(k: TraceFile, marker: str | None) -> tuple[Steps, RankColumns]:
    """The steps of record ``k`` and the columns they were found in."""
    ev = k.events
    name_idx, name_dict = A.shared_dictionary_parts(ev.column("name"))
    kind_idx, _ = A.shared_dictionary_parts(ev.column("kind"))
    device = A.to_numpy(ev.column("device"))
    cols = RankColumns(name_idx, name_dict, kind_idx, A.to_numpy(ev.column("ts")),
                       A.to_numpy(ev.column("dur")), _int64(ev.column("correlation")),
                       _int64(ev.column("tid")), device < 0)
    steps = find_steps(name_idx, name_dict, kind_idx, cols.host, cols.ts, cols.dur,
                       annotation_code=_KINDS.index("annotation"), marker=marker,
                       source=str(k.path))
    return steps, cols


def _int64(col: pa.ChunkedArray) -> np.ndarray:
    """An id column as int64 (the events of a part already computed hold them narrowed)."""
    return A.to_numpy(col).astype(np.int64, copy=False)


def rank_part(rank: int, k: TraceFile, steps: Steps, cols: RankColumns,
              world: int, world_ranks: Sequence[int],
              member_lists: dict[bytes, tuple[int, ...]]) -> RankPart:
    """Record ``k`` (rank ``rank``) with its steps found: its iterations, calls and events
    with ``rank`` and ``iteration`` set. ``world_ranks``: the members of a call that records
    none and whose process group ``pg_config`` does not list (``world``: its size, or 0);
    ``member_lists``: member tuples by their int32 bytes, shared by the calls of every rank
    given the same dict."""
    ev = k.events
    n = ev.num_rows
    it = assign_iterations(steps, cols.ts, cols.host, cols.corr,
                           cols.kind_idx == _KINDS.index("runtime"))
    ev = ev.set_column(ev.schema.get_field_index("rank"), "rank",
                       A.from_numpy(np.full(n, rank, np.int32)))
    ev = ev.set_column(ev.schema.get_field_index("iteration"), "iteration", A.from_numpy(it))
    ev = narrow_ids(ev)  # this rank's ids as int32 where they fit (the job's type: assemble)
    if isinstance(k, Otf2File):  # MPI messages and collectives, extracted by the reader
        calls = k.calls
    else:
        calls = extract_calls(
            name_idx=cols.name_idx, name_dict=cols.name_dict, kind=cols.kind_idx,
            kinds=_KINDS, tid=cols.tid, ts=cols.ts, dur=cols.dur, correlation=cols.corr,
            host=cols.host, comm_args=_comm_args_rows(k.comm_args, member_lists),
            shapes=_ShapesOf(k.shapes),
            pg_config=k.distributed_info.get("pg_config") or [], world_ranks=world_ranks,
        )
    if not calls and isinstance(k, NsysFile):  # nsys: NCCL kernels without c10d ranges
        calls = nccl_kernel_calls(name_idx=cols.name_idx, name_dict=cols.name_dict,
                                  kind=cols.kind_idx, kinds=_KINDS, correlation=cols.corr,
                                  host=cols.host, rank=rank, world_ranks=world_ranks)
    kind = None
    host_exec = [c.event for c in calls if c.backend == "gloo"]
    if host_exec:  # gloo ranges run the collective on a worker thread: kind collective
        kind = cols.kind_idx.astype(np.int32, copy=True)
        kind[host_exec] = _KINDS.index("collective")
    return RankPart(rank, world, ev, steps, calls, kind)


def with_kind(events: pa.Table, kind: np.ndarray | None) -> pa.Table:
    """``events`` with the kind codes ``kind`` (None: unchanged)."""
    if kind is None:
        return events
    return events.set_column(events.schema.get_field_index("kind"), "kind",
                             A.dictionary(kind, _KINDS))


def _comm_args_rows(ca: pa.Table, member_lists: dict[bytes, tuple[int, ...]]
                    ) -> dict[int, dict[str, Any]]:
    """``event row -> args`` of a record's collective arguments, ``pg_ranks`` as a tuple
    shared by every call with the same members (``member_lists``, kept over the job): no
    Python list of the world per call."""
    if not ca.num_rows:
        return {}
    rows = ca.drop_columns(["pg_ranks"]).to_pylist()
    starts, lens, vals, valid = A.list_spans(ca.column("pg_ranks"))
    vals = np.ascontiguousarray(vals, np.int32)
    out = {}
    for i, row in enumerate(rows):
        if valid[i]:
            part = vals[starts[i]:starts[i] + lens[i]]
            key = part.tobytes()
            members = member_lists.get(key)
            if members is None:
                members = member_lists[key] = tuple(part.tolist())
            row["pg_ranks"] = members
        else:
            row["pg_ranks"] = None
        out[int(row["event"])] = row
    return out


class _ShapesOf:
    """``event row -> (Input Dims, Input type)`` texts of one record's ``shapes`` table, looked
    up on demand: the collectives need a handful of them (a dict of every shape row would hold
    millions of Python tuples on a large job)."""

    def __init__(self, shapes: pa.Table) -> None:
        self._t = shapes
        ev = A.to_numpy(shapes.column("event")) if shapes.num_rows else np.empty(0, np.int64)
        self._order = np.argsort(ev, kind="stable")
        self._sorted = ev[self._order]
        self._cols: tuple[pa.ChunkedArray, pa.ChunkedArray] | None = None

    def get(self, event: int, default: tuple[str, str]) -> tuple[str, str]:
        i = int(np.searchsorted(self._sorted, event))
        if i >= self._sorted.size or self._sorted[i] != event:
            return default
        row = int(self._order[i])
        if self._cols is None:
            self._cols = (self._t.column("input_dims"), self._t.column("input_types"))
        dims, types = self._cols
        return dims[row].as_py(), types[row].as_py()
