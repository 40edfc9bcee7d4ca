"""Reader of OTF2 traces (Score-P and other HPC tracers): MPI programs in the canonical tables.

Format facts: the Open Trace Format 2 (OTF2) documentation, "Events" and "Definitions"
(``otf2.readthedocs.io``, OTF2 3.x; the ``otf2`` package on PyPI wraps the reference C
library). A trace is an *anchor file* ``NAME.otf2`` beside ``NAME.def`` (global definitions) and
``NAME/`` (one ``.evt`` file per location). Timestamps are ticks of a global clock:
``ClockProperties.timer_resolution`` ticks per second from ``global_offset``.

Mapping (the same conventions as the Kineto reader, so everything downstream is shared):

* **Ranks.** Each location group of type ``PROCESS`` is one process; its rank is ``N`` of its
  name ``MPI Rank N`` (Score-P's spelling) when every process has a distinct one, else its
  place among the processes in definition order. ``pid`` = rank, ``tid`` = the location's
  number in the trace (a thread of that process).
* **Regions.** ``Enter``/``Leave`` pairs on a location become complete events named after the
  region: MPI point-to-point, collective and wait regions that carry a message (below) are
  kind ``collective`` (the call runs on the host thread, like a gloo collective); other MPI
  functions (``MPI_Init``, ``MPI_Comm_rank``...) are kind ``runtime``; regions of the
  measurement system (``TRACE BUFFER FLUSH``, ``MEASUREMENT OFF``) are ``annotation``;
  everything else (user and compiler-instrumented functions) is ``cpu_op``. A region still
  open at the end of its location is closed at the location's last timestamp (counted).
* **Messages as collectives.** ``MpiSend``/``MpiIsend`` (sender) and
  ``MpiRecv``/``MpiIrecv`` (receiver, inside the call that completes it: ``MPI_Recv`` or the
  ``MPI_Wait*`` of an ``MPI_Irecv``) make the enclosing region a ``send`` or ``recv`` call.
  The k-th message from rank s to rank d with tag t on a communicator is matched with the
  k-th receive of it on d: MPI's non-overtaking rule (MPI 4.0 standard, Sec. 3.5, "Order")
  guarantees that order. Process group ``mpi:COMM:s->d:tTAG``, members (s, d), bytes
  ``msgLength``. ``MpiCollectiveBegin``/``MpiCollectiveEnd`` inside a collective region make it
  the collective of ``collectiveOp`` (``ALLREDUCE`` -> ``all_reduce``...), matched across
  the communicator's members by their order of calls on that communicator (MPI 4.0, Sec. 6.14:
  every member calls collectives on a communicator in the same order); bytes
  ``sizeSent``/``sizeReceived``.
* **Dropped, counted** (``decode_stats``, shown by ``load`` as a warning): events with no
  canonical counterpart (``Metric`` samples such as PAPI counters, OpenMP/threading,
  RMA, I/O and calling-context events); nothing is silently ignored.

There are no ``ProfilerStep#N`` markers in an MPI program: the whole trace is one iteration
unless ``iteration_marker`` names a region (the main loop's body, say).

Reading is per event in Python (the ``otf2`` package hands events one by one): about 1 µs per
event, fine for traces of millions of events, not for billions.

Bad input (no ``otf2`` package, not an OTF2 anchor file, missing definitions or event files,
no process at all) raises :class:`~traincast.errors.TraceFormatError` naming the file.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traincast.errors import NotRegularFileError, TraceFormatError
from traincast.trace import arrow as A
from traincast.trace.collectives import CallRecord
from traincast.trace.families import classify_families
from traincast.trace.readers import otf2_quiet
from traincast.trace.readers.base import (
    TraceFile,
    empty_comm_args,
    empty_shapes,
    empty_stream_waits,
)
from traincast.trace.schema import KINDS, OP_FAMILIES
from traincast.util.fileio import file_kind, open_regular

#: the anchor file's suffix (``traces.otf2``)
OTF2_SUFFIXES = (".otf2",)
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")

#: OTF2 ``CollectiveOp`` -> canonical collective (nccl-tests / c10d vocabulary)
COLLECTIVE_OPS = {
    "BARRIER": "barrier", "BCAST": "broadcast", "GATHER": "gather", "GATHERV": "gather",
    "SCATTER": "scatter", "SCATTERV": "scatter", "ALLGATHER": "all_gather",
    "ALLGATHERV": "all_gather", "ALLTOALL": "all_to_all", "ALLTOALLV": "all_to_all",
    "ALLTOALLW": "all_to_all", "ALLREDUCE": "all_reduce", "REDUCE": "reduce",
    "REDUCE_SCATTER": "reduce_scatter", "REDUCE_SCATTER_BLOCK": "reduce_scatter",
    "SCAN": "scan", "EXSCAN": "scan",
}
_SEND = ("MpiSend", "MpiIsend")
_RECV = ("MpiRecv", "MpiIrecv")
#: events that carry nothing the canonical tables hold beyond what is read (not counted)
_IGNORED = ("ProgramBegin", "ProgramEnd", "MpiCollectiveBegin", "MpiIrecvRequest",
            "MpiIsendComplete", "MpiRequestTest", "MpiRequestCancelled", "BufferFlush",
            "MeasurementOnOff")


@dataclass
class Otf2File(TraceFile):
    """One process (MPI rank) of an OTF2 trace (a :class:`~traincast.trace.readers.base.TraceFile`),
    with its collective calls already extracted (event rows are rank-local)."""

    calls: list[CallRecord] = field(default_factory=list)


def is_otf2(path: Path) -> bool:
    """True for an OTF2 anchor file (``*.otf2``)."""
    return path.name.lower().endswith(OTF2_SUFFIXES)


def _open(path: Path) -> Any:
    try:
        import otf2  # optional dependency (traincast[otf2]): only when an OTF2 file is read
    except ImportError:
        raise TraceFormatError("reading OTF2 traces needs the otf2 package: pip install "
                               "'traincast[otf2]'", path) from None
    otf2_quiet.quiet()
    try:
        with open_regular(path) as fh:
            head = fh.read(64)
    except OSError:
        raise TraceFormatError("no such OTF2 anchor file", path) from None
    _check_archive(path)
    if b"OTF2" not in head and not head.startswith(b"\x00"):
        raise TraceFormatError("not an OTF2 anchor file", path)
    try:
        return otf2.reader.open(str(path))
    except Exception as exc:  # the C library's errors carry no stable type
        raise TraceFormatError(f"not a readable OTF2 trace ({_why(exc)})", path) from None


def _check_archive(anchor: Path) -> None:
    """Refuse an archive holding a FIFO, a device or a socket where the OTF2 library would
    open a file (``<name>.def`` and everything under ``<name>/``): it would block forever."""
    base = anchor.with_name(anchor.name[: -len(".otf2")])
    defs = base.with_name(base.name + ".def")
    if os.path.lexists(defs):
        _regular_or_missing(defs)
    if base.is_dir():
        for root, dirs, names in os.walk(base):
            for n in names:  # os.walk lists FIFOs, devices and sockets among the names
                _regular_or_missing(Path(root) / n)
            for d in dirs:
                if os.path.islink(os.path.join(root, d)):  # followed by the library, not walk
                    _regular_or_missing(Path(root) / d, folder_ok=True)


def _regular_or_missing(p: Path, folder_ok: bool = False) -> None:
    try:
        mode = os.stat(p).st_mode
    except OSError:  # a dangling link: the library reports the missing file
        return
    if not (stat.S_ISREG(mode) or (folder_ok and stat.S_ISDIR(mode))):
        raise NotRegularFileError(f"not a regular file ({file_kind(mode)})", p)


@dataclass
class _Loc:
    """Events of one location (thread) being assembled."""

    rank: int
    tid: int
    stack: list[tuple[str, int, int]] = field(default_factory=list)  # (region, ts, row)
    last: int = 0


def read_otf2(path: str | Path) -> list[Otf2File]:
    """Read an OTF2 trace (its anchor file): one record per process (MPI rank).

    Times become integer nanoseconds from the clock's ``global_offset``:
    ``ns = (ticks - offset) * 10**9 // timer_resolution``. The ``rank`` and ``iteration``
    columns are left at -1; :func:`traincast.trace.load.load` fills them (the rank of a
    record is in its ``distributed_info``).

    Raises:
        TraceFormatError: the ``otf2`` package is missing, the file is not an OTF2 anchor
            file, its definitions or event files are missing or corrupt, or it holds no
            process.
    """
    path = Path(path)
    reader = _open(path)
    try:
        with reader as r:
            return _read(r, path)
    except TraceFormatError:
        raise
    except Exception as exc:  # truncated event files surface as library errors mid-read
        raise TraceFormatError(f"corrupt or truncated OTF2 trace ({_why(exc)})", path
                               ) from None
    finally:
        otf2_quiet.take()  # nothing kept for the next file read on this thread


def _why(exc: Exception) -> str:
    """One line on why the ``otf2`` package failed: the exception a reader callback raised
    (kept by :mod:`otf2_quiet`) if any, else the library's error."""
    msg = otf2_quiet.take() or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return msg[:160]


def _rank_of_groups(groups: list[Any], path: Path) -> dict[Any, int]:
    procs = [g for g in groups if _enum_name(g.location_group_type) == "PROCESS"]
    if not procs:
        procs = list(groups)
    if not procs:
        raise TraceFormatError("no process (location group) in the definitions", path)
    found = [_MPI_RANK.match(str(g.name)) for g in procs]
    ranks = [int(m[1]) for m in found if m]
    if len(ranks) == len(procs) and len(set(ranks)) == len(procs):
        return {g: r for g, r in zip(procs, ranks, strict=True)}
    return {g: i for i, g in enumerate(procs)}


def _read(r: Any, path: Path) -> list[Otf2File]:
    defs = r.definitions
    clock = defs.clock_properties
    res = int(clock.timer_resolution) if clock is not None else 0
    if res <= 0:
        raise TraceFormatError("clock properties missing or timer resolution <= 0", path)
    offset = int(clock.global_offset)
    rank_of_group = _rank_of_groups(list(defs.location_groups), path)
    host = {g: str(getattr(getattr(g, "system_tree_parent", None), "name", "") or "")
            for g in rank_of_group}

    def member_ranks(comm: Any) -> list[int]:
        members = getattr(getattr(comm, "group", None), "members", ()) or ()
        out = []
        for m in members:
            g = getattr(m, "group", None)
            out.append(rank_of_group[g] if g in rank_of_group else int(getattr(m, "_ref", 0)))
        return out

    comm_members: dict[Any, list[int]] = {}
    locs: dict[Any, _Loc] = {}
    for n, loc in enumerate(defs.locations):
        g = loc.group
        if g in rank_of_group:
            locs[loc] = _Loc(rank_of_group[g], n)
    if not locs:
        raise TraceFormatError("no location belongs to a process", path)
    kinds = list(KINDS)
    k_cpu, k_rt, k_ann, k_coll = (kinds.index(x) for x in
                                  ("cpu_op", "runtime", "annotation", "collective"))
    region_kind: dict[Any, int] = {}

    def kind_of(region: Any) -> int:
        hit = region_kind.get(region)
        if hit is None:
            paradigm = _enum_name(getattr(region, "paradigm", None))
            role = _enum_name(getattr(region, "region_role", None))
            if paradigm == "MPI":
                hit = k_rt
            elif paradigm == "MEASUREMENT_SYSTEM" or role == "ARTIFICIAL":
                hit = k_ann
            else:
                hit = k_cpu
            region_kind[region] = hit
        return hit

    # per rank: rows as lists (name, kind, ts, end, tid)
    rows: dict[int, list[list[Any]]] = {rk: [] for rk in set(rank_of_group.values())}
    pending: dict[int, list[tuple[int, str, Any, int, int, int]]] = {rk: [] for rk in rows}
    coll_seq: Counter[tuple[int, Any]] = Counter()
    dropped: dict[int, Counter[str]] = {rk: Counter() for rk in rows}
    outside: Counter[str] = Counter()
    for loc, ev in r.events:
        st = locs.get(loc)
        if st is None:
            outside["event of a location outside any process"] += 1
            continue
        t = (int(ev.time) - offset) * 10**9 // res
        st.last = max(st.last, t)
        name = type(ev).__name__
        out = rows[st.rank]
        if name == "Enter":
            region = ev.region
            out.append([str(region.name), kind_of(region), t, -1, st.tid])
            st.stack.append((str(region.name), t, len(out) - 1))
        elif name == "Leave":
            if not st.stack:
                dropped[st.rank]["Leave without Enter"] += 1
                continue
            _, _, row = st.stack.pop()
            out[row][3] = t
        elif name in _SEND or name in _RECV:
            if not st.stack:
                dropped[st.rank][f"{name} outside any region"] += 1
                continue
            row = st.stack[-1][2]
            comm = ev.communicator
            members = comm_members.setdefault(comm, member_ranks(comm))
            peer_local = int(ev.receiver if name in _SEND else ev.sender)
            if not 0 <= peer_local < len(members):
                dropped[st.rank][f"{name} to a peer outside its communicator"] += 1
                continue
            peer = members[peer_local]
            src, dst = (st.rank, peer) if name in _SEND else (peer, st.rank)
            pending[st.rank].append((row, "send" if name in _SEND else "recv", comm,
                                     src * (1 << 32) + dst, int(ev.msg_tag),
                                     int(ev.msg_length)))
            out[row][1] = k_coll
        elif name == "MpiCollectiveEnd":
            if not st.stack:
                dropped[st.rank]["MpiCollectiveEnd outside any region"] += 1
                continue
            row = st.stack[-1][2]
            comm = ev.communicator
            members = comm_members.setdefault(comm, member_ranks(comm))
            op = _enum_name(ev.collective_op)
            seq = coll_seq[(st.rank, comm)]
            coll_seq[(st.rank, comm)] += 1
            pending[st.rank].append((row, COLLECTIVE_OPS.get(op, op.lower()), comm, -1, seq,
                                     int(ev.size_sent) * (1 << 32) + int(ev.size_received)))
            out[row][1] = k_coll
        elif name not in _IGNORED:
            dropped[st.rank][name] += 1
    for st in locs.values():  # regions left open: close them at the location's last time
        for _, _, row in st.stack:
            rows[st.rank][row][3] = st.last
            dropped[st.rank]["regions never left (closed at the location's last event)"] += 1
    if outside:  # not any rank's: reported with the lowest
        dropped[min(dropped)].update(outside)
    return _records(path, rows, pending, comm_members, host, rank_of_group, dropped)


def _enum_name(value: Any) -> str:
    """``PROCESS`` of ``LocationGroupType.PROCESS`` (the otf2 package's enums are ctypes
    values whose ``str`` is ``Type.NAME``, not :class:`enum.Enum`)."""
    return str(value).rpartition(".")[2] if value is not None else ""


def _comm_label(comm: Any) -> str:
    return str(getattr(comm, "name", "") or f"comm{getattr(comm, '_ref', '')}")


def _records(path: Path, rows: dict[int, list[list[Any]]],
             pending: dict[int, list[tuple[int, str, Any, int, int, int]]],
             comm_members: dict[Any, list[int]], host: dict[Any, str],
             rank_of_group: dict[Any, int], dropped: dict[int, Counter[str]]
             ) -> list[Otf2File]:
    kinds = list(KINDS)
    fams = list(OP_FAMILIES)
    n_bytes = sum(f.stat().st_size for f in _files_of(path))
    world = len(rank_of_group)
    host_of_rank = {rk: host[g] for g, rk in rank_of_group.items()}
    # message order per channel (src, dst, comm, tag) on each side, for matching
    out: list[Otf2File] = []
    for rank in sorted(rows):
        ev_rows = rows[rank]
        n = len(ev_rows)
        names = [x[0] for x in ev_rows]
        kind = np.fromiter((x[1] for x in ev_rows), np.int32, n)
        ts = np.fromiter((x[2] for x in ev_rows), np.int64, n)
        end = np.fromiter((x[3] for x in ev_rows), np.int64, n)
        tid = np.fromiter((x[4] for x in ev_rows), np.int64, n)
        dur = np.maximum(end - ts, 0)
        order = np.lexsort((-dur, ts))
        new_row = np.empty(n, np.int64)
        new_row[order] = np.arange(n)
        name_dict, name_idx = np.unique(np.array(names, dtype=object), return_inverse=True) \
            if n else (np.array([], dtype=object), np.empty(0, np.int64))
        name_dict_l = [str(s) for s in name_dict.tolist()]
        fam = classify_families(name_dict_l)[name_idx] if n else np.empty(0, np.int32)
        fam = np.where(kind == kinds.index("collective"), fams.index("comm"), fam)
        cols: dict[str, Any] = {
            "rank": np.full(n, -1, np.int32),
            "iteration": np.full(n, -1, np.int32),
            "kind": A.dictionary(kind[order], kinds),
            "name": A.dictionary(name_idx.reshape(-1)[order].astype(np.int32), name_dict_l),
            "ts": ts[order],
            "dur": dur[order],
            "pid": np.full(n, rank, np.int64),
            "tid": tid[order],
            "device": np.full(n, -1, np.int32),
            "stream": np.full(n, -1, np.int32),
            "correlation": np.full(n, -1, np.int64),
            "external_id": np.full(n, -1, np.int64),
            "op_family": A.dictionary(np.asarray(fam)[order].astype(np.int32), fams),
            "rf_id": np.full(n, -1, np.int64),
        }
        events = pa.Table.from_arrays(
            [A.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
             for v in cols.values()], names=list(cols))
        calls = _calls(rank, pending[rank], comm_members, new_row)
        threads = {(rank, int(t)): f"location {int(t)}" for t in np.unique(tid).tolist()}
        out.append(Otf2File(
            path=path, events=events,
            distributed_info={"rank": rank, "world_size": world, "backend": "mpi"},
            device_properties=[], base_time_ns=None, host_name=host_of_rank[rank],
            comm_args=empty_comm_args(), stream_waits=empty_stream_waits(), shapes=empty_shapes(),
            threads=threads, n_bytes=n_bytes,
            decode_stats=({"dropped_events": dict(sorted(dropped[rank].items()))}
                          if dropped[rank] else {}),
            calls=calls,
        ))
    return out


def _calls(rank: int, pending: list[tuple[int, str, Any, int, int, int]],
           comm_members: dict[Any, list[int]], new_row: np.ndarray) -> list[CallRecord]:
    """Collective calls of one rank, in event order; point-to-point messages numbered per
    channel (source, destination, communicator, tag) for matching by sequence number."""
    channel: Counter[tuple[Any, int, int]] = Counter()
    calls = []
    for row, coll, comm, pair, tag_or_seq, size in pending:
        label = _comm_label(comm)
        if pair >= 0:  # point to point
            src, dst = divmod(pair, 1 << 32)
            key = (comm, pair, tag_or_seq)
            seq = channel[key]
            channel[key] += 1
            calls.append(CallRecord(
                event=int(new_row[row]), kernel_event=-1, collective=coll,
                process_group=f"mpi:{label}:{src}->{dst}:t{tag_or_seq}",
                group_ranks=sorted({src, dst}), dtype="", in_bytes=size, out_bytes=size,
                seq=seq, recorded_seq=seq, backend="mpi"))
        else:
            sent, received = divmod(size, 1 << 32)
            calls.append(CallRecord(
                event=int(new_row[row]), kernel_event=-1, collective=coll,
                process_group=f"mpi:{label}", group_ranks=sorted(comm_members.get(comm, [])),
                dtype="", in_bytes=sent, out_bytes=received, seq=tag_or_seq,
                recorded_seq=tag_or_seq, backend="mpi"))
    calls.sort(key=lambda c: c.event)
    return calls


def _files_of(anchor: Path) -> list[Path]:
    """The anchor file, its definitions and its event files (for the size on disk)."""
    stem = anchor.with_suffix("")
    out = [anchor]
    if anchor.with_suffix(".def").is_file():
        out.append(anchor.with_suffix(".def"))
    if stem.is_dir():
        out.extend(p for p in stem.iterdir() if p.is_file())
    return out
