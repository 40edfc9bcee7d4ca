"""The execution graph: what waits for what, as arrays.

Every simulated event (a node) has two *points*, its start (``2*i``) and its end
(``2*i + 1``). Points from ``2*N`` on are *barrier points*, one per matched collective
(``2*N + k`` for ``collective_groups[k]``): the time its last member arrived. Members' starts
feed it (``ARRIVE``) and it feeds their ends (``COLLECTIVE``), so a collective of ``m``
members costs ``2m`` edges, not ``m*(m-1)``. A directed edge ``src -> dst`` with ``lag`` says ``t[dst] >= t[src] + lag``;
an anchor says ``t[p] >= anchor[p]``. The simulator gives every point the smallest time that
satisfies all constraints (a max-plus longest-path evaluation, as in discrete-event replay
with unlimited resources per stream/thread, which the FIFO edges already serialise).

Edge kinds (``EdgeKind``) record why an edge exists, so analyses (critical path) and what-if
transforms can tell CPU work on a thread from a kernel's execution or a wait on a peer.
Node durations live on ``EXEC`` edges (GPU ops and host-side collectives) and on ``THREAD``
edges (the CPU time between consecutive points of a host thread).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np


class EdgeKind(IntEnum):
    """Why an edge exists."""

    THREAD = 0  # consecutive points of one host thread: CPU work or gap, lag = its time
    EXEC = 1  # start -> end of a GPU op or host collective: its duration
    LAUNCH = 2  # runtime launch start -> GPU op start: launch latency
    STREAM = 3  # previous op end -> next op start on one GPU stream (FIFO)
    SYNC = 4  # GPU op end -> end of a blocking host call (synchronize, sync memcpy)
    CROSS_STREAM = 5  # op end on one stream -> op start on another (event wait), inferred
    COLLECTIVE = 6  # barrier point (last arrival) -> end of a collective member: its transfer
    WAIT = 7  # end of an event on another thread -> resumption of a waiting host thread
    ISSUE = 8  # collective enqueued on the calling thread -> start on a backend worker thread
    DATA = 9  # execution-trace tensor dependency between ops on different host threads
    ARRIVE = 10  # start of a collective member -> the collective's barrier point, lag 0
    QUEUE = 11  # end of the op that frees a launch-queue slot -> end of the blocked launch


@dataclass
class ExecutionGraph:
    """Array-backed execution graph of one run.

    Attributes:
        node_event: int[N], row in ``TraceSet.events`` of each node. The id columns
            (``node_event``, ``src``, ``dst``, ``thread_parent``) are int32 in graphs the
            builder makes when every point id fits (fewer than 2**31 - 1 points), else
            int64; other producers (plans, what-ifs) may use either.
        node_rank: int32[N], rank of each node.
        measured: int64[2N + B], measured time (ns, rank clock aligned to rank 0) of each
            point; the B barrier points (``2N + k``) hold collective ``k``'s last arrival.
            :meth:`measured_at` reads a few points without laying out a compact column.
        src, dst: int[E], points of each edge; kind: int8[E].
        lag: int[E], ns: int32 in graphs the builder makes when every lag fits (a read-only
            array: change lags on a :meth:`copy`), else int64. A copy keeps the lags' type;
            a write that may not fit goes through :meth:`set_lags` (or widens the copy's
            lags to int64 first, :meth:`widen_lags`), never straight into an int32 array,
            which would wrap: a what-if may lengthen any edge. Lowering lags (never below
            0) may write in place.
        anchor: int64[2N + B], earliest time of a point (-1: none).
        collective_groups: list of int64 arrays of node ids executing one collective together;
            group ``k`` has the barrier point ``2N + k`` when the graph has barrier points.
        unmatched_collectives: node ids of collectives replayed with measured durations
            because some of their peers' traces are absent.
        clock_offset: rank -> ns subtracted from that rank's clock to align it.
        exact_lag: int[E], the lags calibrated to the measurement (what ``exact=True``
            builds; the measured times satisfy them with equality on the binding edges), kept
            by the builder whatever ``lag`` holds, so analyses of the measured timeline need
            no second build; None for graphs without a measurement (plans). Of the type of
            ``lag`` when every value fits it, else int64.
        thread_parent: int[N], the enclosing host event of each host event on its thread
            (-1: top level or not a host event), when the builder recorded it (else
            :func:`traincast.graph.nesting.thread_parents` derives it from the chains).

    The builder stores four columns compactly: ``exact_lag`` as a :class:`LagPatch` on its
    structural lags (they differ on a few percent of the edges; with ``exact=True`` it is
    ``lag`` itself), ``anchor`` as :class:`SparsePoints` (a few points per thread and
    stream are anchored), ``node_event`` as :class:`NodeRange` (node ``i`` is event row
    ``i``) and ``measured`` as :class:`MeasuredPoints` (the events' own start and duration
    columns, the ranks' clock offsets and the barrier times). Reading any of these
    attributes gives an array, laid out on the first
    read and the same array on every read while someone holds it; assigning an array laid
    out that way stores the compact column again (``dataclasses.replace`` keeps it compact);
    the calibrated lags, once read, stay laid out.
    Changing such an array in place does not change the graph once the array is dropped:
    change anchors and lags on a :meth:`copy` (its anchors and lags are arrays of its own).
    Any array may be assigned to either.
    """

    node_event: np.ndarray
    node_rank: np.ndarray
    measured: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    lag: np.ndarray
    kind: np.ndarray
    anchor: np.ndarray
    collective_groups: list[np.ndarray] = field(default_factory=list)
    unmatched_collectives: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    clock_offset: dict[int, int] = field(default_factory=dict)
    thread_parent: np.ndarray | None = None
    exact_lag: np.ndarray | None = None
    #: per rank and cause of host waits (launch_queue, sync, poll): (rank, cause, calls,
    #: waited calls, waited ns beyond the calls' intrinsic cost, detail); see
    #: :mod:`traincast.graph.waits`
    host_waits: list[tuple[int, str, int, int, int, str]] = field(default_factory=list)
    #: arrays derived from the edge structure alone (the simulator's CSR and topological
    #: order), shared by copies; each entry is checked against the arrays it came from
    structure: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_nodes(self) -> int:
        return int(self.__dict__["_node_event"].size)  # (a compact column is not laid out)

    @property
    def n_event_points(self) -> int:
        """2N: points of events; points from here on are collective barrier points."""
        return 2 * self.n_nodes

    @property
    def n_points(self) -> int:
        """All points, event points and barrier points."""
        return int(self.__dict__["_measured"].size)  # (a compact column is not laid out)

    def measured_at(self, points: Any) -> np.ndarray:
        """int64: ``measured[points]`` (point ids), read from a compact column without
        laying it out when they are few (unless an array of it is alive)."""
        value = _alive(self.__dict__["_measured"])
        if isinstance(value, MeasuredPoints):
            if 8 * np.size(points) < value.size:  # a few: gathered from the columns
                return value.at(points)
            value = value.laid()  # many: the column laid out (dropped after unless held)
        return value[points]

    def measured_starts(self) -> np.ndarray:
        """int64[N]: the measured start of every event, ``measured[0:2N:2]`` (a view of the
        laid-out column, or a fresh array from a compact one: half its size)."""
        value = _alive(self.__dict__["_measured"])
        if isinstance(value, MeasuredPoints):
            return value.starts()
        return value[0:self.n_event_points:2]

    @property
    def n_edges(self) -> int:
        return int(self.src.size)

    def copy(self) -> ExecutionGraph:
        """A copy whose edge lags can be changed without touching this graph (of the same
        type: see :meth:`set_lags` for a write that may not fit it)."""
        exact = self.__dict__.get("_exact")  # shared as stored (a patch stays a patch)
        anchor = self.__dict__.get("_anchor")  # an array of the copy's own
        anchor = anchor.array() if isinstance(anchor, SparsePoints) else anchor.copy()
        return ExecutionGraph(
            self.__dict__["_node_event"], self.node_rank, self.__dict__["_measured"],
            self.src, self.dst,
            self.lag.copy(), self.kind, anchor, self.collective_groups,
            self.unmatched_collectives, dict(self.clock_offset), self.thread_parent,
            exact, list(self.host_waits), self.structure,
        )

    def copy_lags(self) -> ExecutionGraph:
        """:meth:`copy` for a change of lags alone: the lags are the copy's own, the anchors
        are shared when stored compactly (read-only arrays when read: nothing to lay out
        and keep twice), else copied."""
        anchor = self.__dict__.get("_anchor")
        if not isinstance(anchor, SparsePoints):
            return self.copy()
        return ExecutionGraph(
            self.__dict__["_node_event"], self.node_rank, self.__dict__["_measured"],
            self.src, self.dst,
            self.lag.copy(), self.kind, anchor, self.collective_groups,
            self.unmatched_collectives, dict(self.clock_offset), self.thread_parent,
            self.__dict__.get("_exact"), list(self.host_waits), self.structure)

    def widen_lags(self) -> np.ndarray:
        """``lag`` as int64 (an array of this graph's own, copied when it was of another
        type), for writes that may not fit int32; returns it."""
        if self.lag.dtype != np.int64:
            self.lag = self.lag.astype(np.int64)
        return self.lag

    def set_lags(self, index: Any, values: Any) -> None:
        """``lag[index] = values`` (integer ns), exact: the lags are widened to int64 first
        (:meth:`widen_lags`) when a value does not fit their type.

        Raises:
            ValueError: the lags are read-only (the builder's: change them on a :meth:`copy`).
        """
        if not self.lag.flags.writeable:
            raise ValueError("this graph's lags are read-only: change them on a copy()")
        values = np.asarray(values)
        if self.lag.dtype != np.int64 and not lags_fit(values, self.lag.dtype):
            self.widen_lags()
        self.lag[index] = values

    def anchor_copy(self) -> np.ndarray:
        """int64[2N + B]: a fresh copy of ``anchor`` (a compact column is laid out once,
        straight into the copy, when no array of it is alive)."""
        value = self.__dict__.get("_anchor")
        if isinstance(value, SparsePoints):
            ref = value.__dict__.get("_laid")
            if ref is None or ref() is None:
                return value.array()
            value = ref()
        return np.array(value, np.int64)

    def edges_of_kind(self, kind: EdgeKind) -> np.ndarray:
        """Indices of the edges of one kind."""
        return np.flatnonzero(self.kind == int(kind))

    def exec_edge_of_node(self) -> np.ndarray:
        """int64[N]: index of each node's EXEC edge, -1 for host events."""
        out = np.full(self.n_nodes, -1, np.int64)
        e = self.edges_of_kind(EdgeKind.EXEC)
        out[self.src[e] // 2] = e
        return out

    def __repr__(self) -> str:
        # one count per kind (a bincount would widen the int8 column to int64 first)
        counts = [int(np.count_nonzero(self.kind == k)) for k in EdgeKind]
        kinds = ", ".join(f"{k.name.lower()}={int(counts[k])}" for k in EdgeKind if counts[k])
        return f"ExecutionGraph(nodes={self.n_nodes}, edges={self.n_edges}: {kinds})"


def lags_fit(values: np.ndarray, dtype: Any) -> bool:
    """True when every value of the integer array ``values`` fits the integer ``dtype``
    exactly."""
    values = np.asarray(values)
    info = np.iinfo(dtype)
    if values.dtype.kind not in "iu":
        return bool(values.size == 0)
    if np.can_cast(values.dtype, dtype, "safe") or not values.size:
        return True
    return bool(values.min() >= info.min and values.max() <= info.max)


def compact_lags(lag: np.ndarray) -> np.ndarray:
    """``lag`` (int ns) as int32 when every value fits (a copy unless it is int32 already),
    else as int64: the builder's lag column."""
    if lags_fit(lag, np.int32):
        return lag.astype(np.int32, copy=False)
    return lag.astype(np.int64, copy=False)


def take_lags(lag: np.ndarray, order: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = lag[order]`` (``order`` valid edge ids, ``out`` int64), without a
    temporary of the whole gather when ``lag`` is of another type (int32)."""
    if lag.dtype == out.dtype:
        np.take(lag, order, out=out, mode="clip")  # ids valid: unbuffered
        return
    for lo in range(0, order.size, _TAKE_CHUNK):
        out[lo:lo + _TAKE_CHUNK] = lag[order[lo:lo + _TAKE_CHUNK]]


#: edges gathered at a time by :func:`take_lags` when it converts
_TAKE_CHUNK = 1 << 18


#: id of a laid-out array -> (weak reference to it, the compact column it came from)
_LAID: dict[int, tuple[weakref.ref, Any]] = {}


class _Compact:
    """A column stored compactly (see :class:`LagPatch`, :class:`SparsePoints`), laid out as
    an array on demand; the array is kept (weakly) while someone holds it, so reads of the
    column give the same array then, and assigning it to a graph stores the compact column
    again. The array is read-only (change a column by assigning a new array). With ``hold`` the first array laid out is kept for good (a column read several
    times once it is read at all: laying it out once is cheaper)."""

    hold = False

    def array(self) -> np.ndarray:  # pragma: no cover - defined by the subclasses
        raise NotImplementedError

    def laid(self) -> np.ndarray:
        """The column as an array: the one laid out before while it is alive, else anew."""
        ref = self.__dict__.get("_laid")
        out = ref() if ref is not None else None
        if out is None:
            out = self.array()
            # read-only: a write into a laid-out array would last only while it is held
            out.flags.writeable = False
            key = id(out)
            # (the map bound now: module globals may be gone when it runs at exit)
            ref = weakref.ref(out, lambda _r, key=key, laid=_LAID: laid.pop(key, None))
            object.__setattr__(self, "_laid", ref)
            if self.hold:
                object.__setattr__(self, "_held", out)
            _LAID[key] = (ref, self)
        return out

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_laid", None)  # a weak reference: laid out again after a load
        state.pop("_held", None)
        return state


def _alive(value: Any) -> Any:
    """The array laid out from the compact column ``value`` while it is alive, else
    ``value``."""
    if isinstance(value, _Compact):
        ref = value.__dict__.get("_laid")
        out = ref() if ref is not None else None
        if out is not None:
            return out
    return value


def _compact_of(value: Any) -> Any:
    """The compact column ``value`` was laid out from (when it is such an array and alive),
    else ``value``."""
    if isinstance(value, np.ndarray):
        hit = _LAID.get(id(value))
        if hit is not None and hit[0]() is value:
            return hit[1]
    return value


@dataclass(frozen=True, eq=False)
class LagPatch(_Compact):
    """Lags stored as changes to other lags: ``base`` (int[E], shared, not copied) with
    ``values`` (int64) at edges ``index`` (int32 or int64, ascending). Once laid out, the
    array is kept (the analyses that read calibrated lags read them several times); it has
    the type of ``base`` when every value fits it, else int64."""

    hold = True
    base: np.ndarray
    index: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, lags: np.ndarray, base: np.ndarray) -> LagPatch:
        """The patch that turns ``base`` into ``lags`` (same size)."""
        index = np.flatnonzero(lags != base)
        if base.size < np.iinfo(np.int32).max:
            index = index.astype(np.int32)
        return cls(base, index, lags[index])

    def array(self) -> np.ndarray:
        """int[E]: a fresh array, ``base`` with the patch applied (of ``base``'s type when
        the values fit it, else int64)."""
        dtype = self.base.dtype if lags_fit(self.values, self.base.dtype) else np.int64
        out = self.base.astype(dtype)  # a copy
        out[self.index] = self.values
        return out


@dataclass(frozen=True, eq=False)
class SparsePoints(_Compact):
    """An int64 per-point column most of whose points hold ``fill``: ``values`` at points
    ``index`` (ascending, unique), ``size`` points in all."""

    size: int
    index: np.ndarray
    values: np.ndarray
    fill: int = -1

    def array(self) -> np.ndarray:
        """int64[size]: a fresh array, the column laid out."""
        out = np.full(self.size, self.fill, np.int64)
        out[self.index] = self.values
        return out


@dataclass(frozen=True, eq=False)
class NodeRange(_Compact):
    """The node -> event column of a graph whose node ``i`` is event row ``i`` (the
    builder's): ``size`` nodes, ids of type ``dtype``."""

    size: int
    dtype: Any = np.int64

    def array(self) -> np.ndarray:
        """int[size]: a fresh array, ``0 .. size - 1``."""
        return np.arange(self.size, dtype=self.dtype)


@dataclass(frozen=True, eq=False)
class MeasuredPoints(_Compact):
    """The measured times of a built graph's points, from the events' own columns: point
    ``2i`` is ``start[i]`` less its rank's clock offset, point ``2i + 1`` that plus
    ``dur[i]``, barrier point ``2N + k`` is ``barrier[k]``. ``start``, ``dur``: int64[N],
    ns (the events table's ``ts`` and ``dur`` columns, shared, not copied); the rows
    ``lo[j] .. hi[j] - 1`` (ascending, disjoint ranges: one rank each) have the clock offset
    ``offset[j]`` (ns), every other row none; ``barrier``: int64[B], ns."""

    start: np.ndarray
    dur: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    offset: np.ndarray
    barrier: np.ndarray

    @classmethod
    def of(cls, measured: np.ndarray, start: np.ndarray, dur: np.ndarray, lo: np.ndarray,
           hi: np.ndarray, offset: np.ndarray) -> MeasuredPoints | np.ndarray:
        """The compact form of ``measured`` (int64[2N + B], laid out from these columns as
        :meth:`array` does, its barrier times copied), or ``measured`` itself where the
        columns are not int64[N]."""
        n = start.size
        if start.dtype != np.int64 or dur.dtype != np.int64 or dur.size != n or \
                measured.size < 2 * n:
            return measured
        return cls(start, dur, lo, hi, offset, measured[2 * n:].copy())

    @property
    def size(self) -> int:
        """2N + B: the points."""
        return 2 * int(self.start.size) + int(self.barrier.size)

    def _align(self, out: np.ndarray) -> None:
        """Subtract the clock offsets from ``out`` (int64[N], per event row), in place."""
        for a, b, o in zip(self.lo.tolist(), self.hi.tolist(), self.offset.tolist(),
                           strict=True):
            out[a:b] -= o

    def starts(self) -> np.ndarray:
        """int64[N]: a fresh array of the aligned starts (the even points)."""
        out = np.array(self.start, np.int64)
        self._align(out)
        return out

    def array(self) -> np.ndarray:
        """int64[2N + B]: a fresh array, the column laid out."""
        n = self.start.size
        out = np.empty(self.size, np.int64)
        t0 = out[0:2 * n:2]
        t0[:] = self.start
        self._align(t0)
        np.add(t0, self.dur, out=out[1:2 * n:2])
        out[2 * n:] = self.barrier
        return out

    def at(self, points: Any) -> np.ndarray:
        """int64: the times of ``points`` (point ids, any shape), the column not laid out."""
        p = np.asarray(points, np.int64)
        n2 = 2 * self.start.size
        ev = p < n2
        if ev.all():
            row = p >> 1
            return self.start[row] - self._offset_of(row) + np.where(p & 1, self.dur[row], 0)
        out = np.empty(p.shape, np.int64)
        row = p[ev] >> 1
        out[ev] = self.start[row] - self._offset_of(row) + np.where(p[ev] & 1, self.dur[row], 0)
        out[~ev] = self.barrier[p[~ev] - n2]
        return out

    def _offset_of(self, rows: np.ndarray) -> np.ndarray:
        """int64: the clock offset of each event row."""
        if not self.lo.size:
            return np.zeros(rows.shape, np.int64)
        j = np.clip(np.searchsorted(self.lo, rows, "right") - 1, 0, None)
        inside = (rows >= self.lo[j]) & (rows < self.hi[j])
        return np.where(inside, self.offset[j], 0)


def _column_property(key: str, doc: str) -> property:
    """A field of :class:`ExecutionGraph` read and written through a property: a compact
    column is laid out when read (:meth:`_Compact.laid`), an array laid out from one is
    stored compactly again when assigned (so ``dataclasses.replace`` keeps it compact)."""

    def get(self: ExecutionGraph) -> Any:
        value = self.__dict__.get(key)
        return value.laid() if isinstance(value, _Compact) else value

    def put(self: ExecutionGraph, value: Any) -> None:
        self.__dict__[key] = _compact_of(value)

    return property(get, put, doc=doc)


# fields (constructor arguments, ``dataclasses.replace``) that the builder stores compactly
ExecutionGraph.exact_lag = _column_property(  # type: ignore[assignment]
    "_exact", "int64[E] or None: see :class:`ExecutionGraph`.")
ExecutionGraph.anchor = _column_property(  # type: ignore[assignment]
    "_anchor", "int64[2N + B]: see :class:`ExecutionGraph`.")
ExecutionGraph.measured = _column_property(  # type: ignore[assignment]
    "_measured", "int64[2N + B]: see :class:`ExecutionGraph`.")
ExecutionGraph.node_event = _column_property(  # type: ignore[assignment]
    "_node_event", "int[N]: see :class:`ExecutionGraph`.")
