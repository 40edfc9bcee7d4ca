"""The TraceSet: canonical tables of one multi-rank run (measured or predicted)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from traincast.errors import CollectiveMismatchError, TraceFormatError
from traincast.trace.arrow import to_numpy
from traincast.trace.cache_key import job_of, mark_job
from traincast.trace.readers.tolerant import summary_line
from traincast.trace.schema import LINK_COLUMNS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass
class RankInfo:
    """What a rank's trace file says about the run.

    ``world_size`` is None when the file does not say. ``pg_config`` is Kineto's
    ``distributedInfo.pg_config`` (process groups: ``pg_name``, ``pg_size``, ``ranks``).
    ``threads`` maps (pid, tid) to the recorded thread name. ``devices`` are the recorded
    device names, ``device_properties`` the full Kineto ``deviceProperties`` entries
    (``name``, ``numSms``, ``totalGlobalMem``...; names only for nsys). Ranks whose
    ``device_properties`` are equal may hold one list (:func:`share_device_properties`):
    read them, do not change them in place.
    """

    rank: int
    path: Path | None
    world_size: int | None = None
    backend: str = ""
    devices: list[str] = field(default_factory=list)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    #: what tolerant decoding coerced or dropped in the file (``{"coerced": {field: n},
    #: "dropped_fields": {...}, "dropped_events": {reason: n}}``), {} when nothing
    decode_stats: dict[str, dict[str, int]] = field(default_factory=dict)
    pg_config: list[dict[str, Any]] = field(default_factory=list)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    et_path: Path | None = None
    n_bytes: int = 0
    host: str = ""  # host name as recorded (Kineto ``host_name``), "" if unknown


def share_device_properties(ranks: Iterable[RankInfo]) -> None:
    """Let each rank whose ``device_properties`` equal the previous rank's hold that rank's
    list (the same GPUs on every rank: one list instead of one per rank, ~7 KiB each)."""
    last: list[dict[str, Any]] | None = None
    for info in ranks:
        if last is not None and info.device_properties == last:
            info.device_properties = last
        else:
            last = info.device_properties


class Deferred:
    """A table made on first use: ``Deferred(make, *args)`` holds ``make(*args)`` until
    :attr:`TraceSet.shapes` (the one attribute that takes one) is first read, then the
    table replaces it. Pickles as the table.

    ``part(names, *args)``, when given, makes only the columns ``names`` (in that order)
    without keeping them (:meth:`columns`); ``rows``, when given, is the table's row count,
    known without making it."""

    def __init__(self, make: Any, *args: Any, part: Any = None, rows: int | None = None
                 ) -> None:
        self._make, self._args, self._part, self.rows = make, args, part, rows
        self._lock = threading.Lock()
        self._value: pa.Table | None = None

    def __call__(self) -> pa.Table:
        with self._lock:
            if self._value is None:
                self._value = self._make(*self._args)
                self._args = ()
            return self._value

    def columns(self, names: tuple[str, ...]) -> pa.Table:
        """The columns ``names`` of the table: of the made table if it was made, else made
        now (only those, when ``part`` was given) and not kept."""
        with self._lock:
            if self._value is None and self._part is not None:
                return self._part(names, *self._args)
        return self().select(list(names))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _identity, (self(),)


def _identity(value: Any) -> Any:
    return value


@dataclass
class TraceSet:
    """Canonical tables of one run, all ranks together.

    Attributes:
        events: Arrow table per :data:`traincast.trace.schema.EVENTS_SCHEMA` plus ``rf_id``
            (int64), rows sorted by (rank, ts, -dur). Times are integer ns.
        collectives: one row per collective call on a rank
            (:data:`traincast.trace.schema.COLLECTIVES_SCHEMA`); ``event``/``kernel_event``
            are row numbers of ``events``.
        shapes: ``Input Dims``/``Input type`` JSON text keyed by ``event`` row (given as
            a table or a :class:`Deferred` one, made when first read;
            :func:`shape_columns` reads some columns without making it).
        iterations: one row per (rank, iteration): ``start``, ``end``, ``dur`` (ns) of the
            measured step (``ProfilerStep#N`` or the user's marker) and ``marker_event``, the
            row of the marker in ``events`` (-1 when the whole file is one iteration).
        ranks: per-rank file facts.
        member_lists: the member ranks of each collective's process group, one row per
            distinct list (:data:`traincast.trace.schema.MEMBER_LISTS_SCHEMA`), referenced by
            ``collectives.members``; :meth:`group_ranks` gives them per call.
        stream_waits: ``cuda_sync`` records naming the stream and cudaEventRecord they wait
            on (``event`` row, ``wait_on_stream``, ``record_correlation``), when recorded.
        et_nodes: rank -> execution-trace nodes table, when execution traces were given.
        et_links: rows (rank, node_id, event) linking ET nodes to ``events`` rows.
        warnings: things the loader guessed, in one line each.
    """

    events: pa.Table
    collectives: pa.Table
    shapes: pa.Table
    iterations: pa.Table
    ranks: dict[int, RankInfo]
    stream_waits: pa.Table | None = None
    member_lists: pa.Table | None = None
    et_nodes: dict[int, Any] = field(default_factory=dict)
    et_links: pa.Table | None = None
    warnings: list[str] = field(default_factory=list)
    source: str = "measured"
    #: results derived from the tables, memoised by the functions that compute them (keyed
    #: by the tables' identity, so replacing a table invalidates them); not part of equality
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def rank_ids(self) -> list[int]:
        """Ranks present, ascending."""
        return sorted(self.ranks)

    @property
    def world_size(self) -> int:
        """World size as recorded (else the highest rank present + 1)."""
        sizes = {r.world_size for r in self.ranks.values() if r.world_size}
        return max(sizes) if sizes else (max(self.ranks) + 1 if self.ranks else 0)

    def group_ranks(self, rows: np.ndarray | None = None) -> list[tuple[int, ...]]:
        """Member ranks of the process group of each ``collectives`` row, as tuples shared
        between rows with the same list (global ranks, in recorded order).

        Args:
            rows: int row numbers of ``collectives`` (default: every row, in table order).

        Returns:
            One tuple per requested row.

        Raises:
            CollectiveMismatchError: a row references no member list (a table built without
                one)."""
        members = self.collectives.column("members").to_numpy()
        if rows is not None:
            members = members[np.asarray(rows, np.int64)]
        lists = ([] if self.member_lists is None else
                 [tuple(m) for m in self.member_lists.column("ranks").to_pylist()])
        if members.size and (members.min() < 0 or members.max() >= len(lists)):
            raise CollectiveMismatchError(
                "collectives.members references a missing member list")
        return [lists[m] for m in members.tolist()]

    def to_pandas(self) -> pd.DataFrame:
        """The ``events`` table as a pandas DataFrame (categorical kind/name/op_family)."""
        return self.events.to_pandas()

    def column(self, name: str) -> np.ndarray:
        """One numeric column of ``events`` as a numpy array."""
        return to_numpy(self.events.column(name))

    def rank_slice(self, rank: int) -> tuple[int, int]:
        """[start, stop) rows of ``events`` that belong to ``rank``."""
        ranks = self.column("rank")
        # the key in the column's dtype: a Python int would make numpy cast (copy) the
        # whole column on every call, ranks x events work over a job (benchmarks/scale.py)
        key = ranks.dtype.type(rank)
        lo = int(np.searchsorted(ranks, key, "left"))
        hi = int(np.searchsorted(ranks, key, "right"))
        return lo, hi

    @property
    def where(self) -> str:
        """The files of this set for messages: the file of a single rank, else their folder
        and count (``"run/ (8 files)"``), ``""`` when no rank has a file."""
        files = sorted({str(i.path) for i in self.ranks.values() if i.path})
        if not files:
            return ""
        if len(files) == 1:
            return files[0]
        import os.path

        return f"{os.path.commonpath(files)} ({len(files)} files)"

    def require_events(self, purpose: str) -> None:
        """Refuse a set in which a rank has no events (a file holding ``[]``, or whose events
        were all dropped by the tolerant reader).

        Raises:
            TraceFormatError: naming the rank's file, what ``purpose`` needs and what was
                dropped.
        """
        have = set(self._ranks_with_events().tolist())
        for r, info in sorted(self.ranks.items()):
            if r not in have:
                dropped = (summary_line({"dropped_events": info.decode_stats.get(
                    "dropped_events", {})}, verbose=True) if info.decode_stats else "")
                why = f"; {dropped}" if dropped else ""
                raise TraceFormatError(f"rank {r} has no usable trace events, nothing to "
                                       f"{purpose}{why}", info.path or f"rank {r}")

    def _ranks_with_events(self) -> np.ndarray:
        """The distinct ranks of the events, ascending (memoised while the events are the
        same table; without a sort when the rank column is sorted, as a set's events are by
        rank)."""
        hit = self.memo.get("ranks_with_events")
        if hit is not None and hit[0] is self.events:
            return hit[1]
        rank = self.column("rank") if self.events.num_rows else np.empty(0, np.int64)
        if rank.size and np.all(rank[1:] >= rank[:-1]):
            out = rank[np.r_[0, np.flatnonzero(rank[1:] != rank[:-1]) + 1]]
        else:
            out = np.unique(rank)
        self.memo["ranks_with_events"] = (self.events, out)
        return out

    def rank_table(self) -> pd.DataFrame:
        """One row per rank: ``rank``, ``file`` (name), ``events``, ``iterations``,
        ``devices``."""
        import pandas as pd

        counts = (pd.Series(self.column("rank")).value_counts() if self.events.num_rows
                  else pd.Series(dtype=int))
        its = self.iterations.column("rank").to_numpy() if self.iterations.num_rows else []
        return pd.DataFrame([
            {"rank": r, "file": info.path.name if info.path else "",
             "events": int(counts.get(r, 0)), "iterations": int((np.asarray(its) == r).sum()),
             "devices": ", ".join(info.devices)} for r, info in sorted(self.ranks.items())],
            columns=["rank", "file", "events", "iterations", "devices"])

    def _repr_html_(self) -> str:
        """Jupyter display: the set's size and :meth:`rank_table`."""
        # lazy: util.display imports pandas (~0.2 s, ~37 MB), which loading a trace never needs
        from traincast.util.display import html_table

        return html_table(f"TraceSet {self.where or self.source}: {len(self.ranks)} ranks "
                          f"(world size {self.world_size}), {self.events.num_rows:,} events, "
                          f"{self.collectives.num_rows:,} collective calls", self.rank_table())

    def __repr__(self) -> str:
        return (
            f"TraceSet({self.source}, ranks={self.rank_ids}, world_size={self.world_size}, "
            f"events={self.events.num_rows}, collectives={self.collectives.num_rows}, "
            f"iterations={self.iterations.num_rows})"
        )


#: guards :func:`defer_shapes`'s compare-and-swap against an assignment of ``ts.shapes``
_SHAPES_LOCK = threading.Lock()


def drop_link_columns(ts: TraceSet) -> int:
    """Replace ``ts.events`` by the same table without its execution-trace link columns
    (:data:`traincast.trace.schema.LINK_COLUMNS`, read only while the load links execution
    traces), for a program that holds a large job and will not link it again; every other
    column is the same buffer, not a copy. Results memoised on the old table
    (:attr:`TraceSet.memo`) are computed again when next asked (the job's cache mark,
    :func:`~traincast.trace.cache_key.mark_job`, is kept). Returns the bytes the
    dropped columns held (0 when none was there)."""
    there = [c for c in LINK_COLUMNS if c in ts.events.column_names]
    if not there:
        return 0
    held = sum(ts.events.column(c).nbytes for c in there)
    job = job_of(ts)
    ts.events = ts.events.drop_columns(there)
    if job is not None:  # still the cached job: results kept beside it read no link column
        mark_job(ts, *job)
    return held


def _get_shapes(self: TraceSet) -> pa.Table:
    value = self.__dict__["_shapes"]
    if isinstance(value, Deferred):
        value = value()
        with _SHAPES_LOCK:  # unless another thread stored something else meanwhile
            if isinstance(self.__dict__["_shapes"], Deferred):
                self.__dict__["_shapes"] = value
    return value


def _set_shapes(self: TraceSet, value: pa.Table | Deferred) -> None:
    with _SHAPES_LOCK:
        self.__dict__["_shapes"] = value


def defer_shapes(ts: TraceSet, table: pa.Table, deferred: Deferred) -> bool:
    """Hold ``deferred`` (the same rows, made again on first use) in place of ``ts``'s shapes
    if they are still ``table`` (the very object): the table's memory goes back once nobody
    else holds it. Safe against a concurrent ``ts.shapes = ...`` (that value is kept).
    Returns whether the swap was made."""
    with _SHAPES_LOCK:
        if ts.__dict__.get("_shapes") is not table:
            return False
        ts.__dict__["_shapes"] = deferred
        return True


def shape_rows(ts: TraceSet) -> int:
    """The number of rows of ``ts.shapes``, without making deferred shapes when their row
    count is known."""
    value = ts.__dict__["_shapes"]
    if isinstance(value, Deferred) and value.rows is not None:
        return value.rows
    return ts.shapes.num_rows


def shape_columns(ts: TraceSet, *names: str) -> pa.Table:
    """The columns ``names`` of ``ts.shapes`` (in that order). Deferred shapes not made yet
    stay deferred: only those columns are made, and not kept by ``ts`` (a caller that needs
    them twice keeps the returned table)."""
    value = ts.__dict__["_shapes"]
    if isinstance(value, Deferred):
        return value.columns(names)
    return value.select(list(names))


# a property over the dataclass field: ``TraceSet(shapes=...)`` and ``ts.shapes = ...`` store
# the table or a Deferred one; reading it makes a Deferred table once
TraceSet.shapes = property(_get_shapes, _set_shapes)  # type: ignore[assignment]

