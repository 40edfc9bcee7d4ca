"""Reader of Nsight Systems SQLite exports (``nsys export --type sqlite report.nsys-rep``).

Format facts: NVIDIA, Nsight Systems exporter documentation, "SQLite Export Schema Reference"
and "Common SQLite examples" (``nsys-exporter/exported_data.html``, ``examples.html``); every
export also documents its columns in the comments of its ``CREATE TABLE`` statements, and newer
exports carry the enum tables (``ENUM_*``) used below. Tables are created lazily, so only
``CUPTI_ACTIVITY_KIND_KERNEL`` and ``StringIds`` are required; every other table is optional.
Times are integer nanoseconds on the recording host's clock (no conversion).

Tables and columns read (nothing else):

====================================  =========================================================
``CUPTI_ACTIVITY_KIND_KERNEL``        start, end, deviceId, streamId, correlationId, globalPid,
                                      demangledName, shortName (StringIds ids)
``CUPTI_ACTIVITY_KIND_MEMCPY``        start, end, deviceId, streamId, correlationId, globalPid,
                                      copyKind, srcKind, dstKind
``CUPTI_ACTIVITY_KIND_MEMSET``        start, end, deviceId, streamId, correlationId, globalPid,
                                      memKind
``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``  start, end, deviceId, streamId, correlationId,
                                      globalPid, syncType, eventId
``CUPTI_ACTIVITY_KIND_CUDA_EVENT``    globalPid, eventId, streamId, correlationId
``CUPTI_ACTIVITY_KIND_RUNTIME``       start, end, eventClass, globalTid, correlationId, nameId
``NVTX_EVENTS``                       start, end, eventType, globalTid, textId, text
``StringIds`` (id, value); ``ThreadNames`` (nameId, globalTid); ``TARGET_INFO_GPU`` (id, name);
``TARGET_INFO_SYSTEM_ENV`` (name, value: ``Hostname``); ``ENUM_CUDA_MEMCPY_OPER``,
``ENUM_CUDA_MEM_KIND``, ``ENUM_CUPTI_SYNC_TYPE``, ``ENUM_NSYS_EVENT_CLASS``,
``ENUM_NSYS_EVENT_TYPE`` (id, name, label), with built-in copies of their values for older
exports that lack them.
====================================  =========================================================

Canonical events follow the Kineto reader's conventions, so everything downstream is shared:

* kernels: kind ``kernel`` (``collective`` when the short name starts with ``nccl``/``rccl``,
  as Kineto does), name = the demangled name (what Kineto shows); memory copies: kind
  ``memcpy``, named like Kineto ``Memcpy HtoD (Pageable -> Device)``; memsets ``Memset
  (Device)``; CUPTI synchronisation records: kind ``sync`` (``Context Sync``, ``Stream Wait
  Event``...). GPU rows take ``pid`` = device and ``tid`` = stream, as Kineto's GPU tracks do.
* CUDA runtime and driver calls (``eventClass`` CUDA runtime/driver; the other classes, e.g.
  the backtrace records older exports store next to each call, are not calls): kind
  ``runtime``, named without CUPTI's callback-id version suffix (``cudaLaunchKernel_v7000`` ->
  ``cudaLaunchKernel``, as Kineto's CUPTI name table spells them). ``pid``/``tid`` decode the
  serialized ``globalTid`` as documented: ``(globalTid >> 24) & 0xFFFFFF`` and
  ``globalTid & 0xFFFFFF``.
* NVTX push/pop and start/end ranges: kind ``annotation``, name = ``text`` else the
  ``textId`` string (ranges without a message or without an end are skipped; marks are
  instants and skipped, as the Kineto reader skips instants).

Processes and ranks: one record (a :class:`NsysFile`) per profiled process, i.e. per process
with CUDA activity (GPU work or CUDA API calls). A process whose thread nsys named
``MPI Rank N`` (MPI tracing) is rank N when every such process has a distinct one; otherwise
a file holding several processes numbers them 0..n-1 in order of their OS pid; a file of one
process leaves the rank to :func:`traincast.trace.load.load` (rank map, ``rank-N`` in the file
name, else 0). Correlation ids are per process, so every join on them stays within a process.

Bad input (not SQLite, truncated, corrupt, no kernel table) raises
:class:`~traincast.errors.TraceFormatError` naming the file. The database is opened read-only
(``mode=ro&immutable=1`` URI, ``query_only``, ``trusted_schema=OFF``): nothing is created
beside it (no ``-shm``/``-wal``), so a read-only mount works; a WAL-mode database with a
non-empty ``-wal`` log is read from a private copy of both files (the log's changes are seen).
Only tables (never views) are queried.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from traincast.errors import NotRegularFileError, TraceFormatError
from traincast.trace import arrow as A
from traincast.trace.arrow import Interner
from traincast.trace.collectives import CallRecord
from traincast.trace.comm_vocab import normalise
from traincast.trace.families import classify_families
from traincast.trace.readers.base import TraceFile, empty_comm_args, empty_shapes
from traincast.trace.schema import KINDS, OP_FAMILIES
from traincast.util.fileio import open_regular

if TYPE_CHECKING:
    import sqlite3

#: first 16 bytes of every SQLite 3 database file
SQLITE_MAGIC = b"SQLite format 3\x00"
#: file endings read as Nsight Systems SQLite exports (folders are scanned for these)
NSYS_SUFFIXES = (".sqlite", ".sqlite3")
#: Nsight Systems reports proper (binary, not SQLite): they must be exported first
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"

_ID24 = 0xFFFFFF  # pid and tid fields of a serialized global id
_NO_STREAM = 0xFFFFFFFF  # CUPTI's "no stream" (context-wide synchronisation)

# Built-in enum values (Nsight Systems 2024.5 export, ENUM_* tables), for exports without them.
#: ENUM_CUDA_MEMCPY_OPER, as Kineto spells copy kinds
_COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
              7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH",
              13: "UVM DtoD"}
#: ENUM_CUDA_MEM_KIND labels (nsys numbering, not CUPTI's CUpti_ActivityMemoryKind)
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
             5: "Device Static", 6: "Managed Static", 7: "Unknown"}
#: ENUM_CUPTI_SYNC_TYPE (CUpti_ActivitySynchronizationType), as Kineto names them
_SYNC_NAME = {"EVENT_SYNCHRONIZE": "Event Sync", "STREAM_WAIT_EVENT": "Stream Wait Event",
              "STREAM_SYNCHRONIZE": "Stream Sync", "CONTEXT_SYNCHRONIZE": "Context Sync"}
_SYNC_TYPE = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
#: ENUM_NSYS_EVENT_CLASS: classes of CUPTI_ACTIVITY_KIND_RUNTIME rows that are API calls
_CALL_CLASSES = {"TRACE_PROCESS_EVENT_CUDA_RUNTIME": 0, "TRACE_PROCESS_EVENT_CUDA_DRIVER": 1}
#: ENUM_NSYS_EVENT_TYPE: NVTX_EVENTS rows that are ranges
_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}

_CBID_VERSION = re.compile(r"_v\d+$")
_COMM_KERNEL = re.compile(r"^(nccl|rccl)", re.IGNORECASE)
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")


@dataclass
class NsysFile(TraceFile):
    """One profiled process of an Nsight Systems export
    (a :class:`~traincast.trace.readers.base.TraceFile`).

    ``pid`` is the OS process id; ``distributed_info`` holds ``rank`` when the file tells it
    (``MPI Rank N`` thread name, or the process's place among several in one file).
    """

    pid: int = -1


def is_nsys(path: Path) -> bool:
    """True for a file to read with :func:`read_nsys`: a ``.sqlite``/``.sqlite3`` or
    ``.nsys-rep``/``.qdrep`` name, or any other non-JSON file starting like an SQLite
    database."""
    name = path.name.lower()
    if name.endswith(NSYS_SUFFIXES + REPORT_SUFFIXES):
        return True
    if name.endswith((".json", ".json.gz")):
        return False
    try:
        with open_regular(path) as fh:
            return fh.read(16) == SQLITE_MAGIC
    except (OSError, NotRegularFileError):  # the reader then says what is wrong with it
        return False


def read_nsys(path: str | Path) -> list[NsysFile]:
    """Read an Nsight Systems SQLite export: one record per profiled process, by OS pid.

    The ``rank`` and ``iteration`` columns are left at -1; :func:`traincast.trace.load.load`
    fills them.

    Raises:
        TraceFormatError: a report not exported to SQLite, not an SQLite file, truncated or
            corrupt, no kernel table, or no CUDA activity at all.
    """
    path = Path(path)
    if path.name.lower().endswith(REPORT_SUFFIXES):
        raise TraceFormatError("an Nsight Systems report, not its SQLite export; run "
                               f"`nsys export --type sqlite {path.name}` and load the .sqlite",
                               path)
    try:
        with open_regular(path) as fh:
            head = fh.read(100)
            n_bytes = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise TraceFormatError(f"cannot read the file ({exc.strerror})", path) from None
    if head[:16] != SQLITE_MAGIC:
        raise TraceFormatError("not an SQLite database (expected an Nsight Systems export: "
                               "nsys export --type sqlite)", path)
    expected = _header_size(head)
    if expected > n_bytes:
        raise TraceFormatError(f"truncated SQLite database ({n_bytes} of {expected} bytes)",
                               path)
    # lazy: only a Nsight Systems export needs SQLite (~5 ms of every loading command's start)
    import sqlite3

    with _readonly_view(path) as (view, immutable):
        try:  # read-only always; immutable unless a private copy must apply its log
            con = sqlite3.connect(view + ("?mode=ro&immutable=1" if immutable else "?mode=ro"),
                                  uri=True)
        except sqlite3.Error as exc:
            raise TraceFormatError(f"cannot open the SQLite database ({exc})", path) from None
        return _read_open(con, path, n_bytes)


@contextlib.contextmanager
def _readonly_view(path: Path) -> Iterator[tuple[str, bool]]:
    """The SQLite file URI (no query) to read ``path`` without writing anything beside it,
    and whether it may be opened immutable.

    Without a write-ahead log (no ``-wal`` file, or an empty one) the file is opened
    ``mode=ro&immutable=1``: no lock, no ``-shm``/``-wal`` created, so a read-only mount
    works. With a non-empty ``-wal`` (a WAL-mode database not checkpointed), the database
    and its log are copied into a private temporary folder and read there, so the log's
    changes are seen and nothing is created beside the input.
    """
    wal = path.with_name(path.name + "-wal")
    try:
        has_wal = wal.stat().st_size > 0
    except OSError:
        has_wal = False
    if not has_wal:
        yield path.resolve().as_uri(), True
        return
    with tempfile.TemporaryDirectory(prefix="traincast-nsys-") as tmp:
        copy = Path(tmp) / "db.sqlite"
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, Path(tmp) / "db.sqlite-wal")
        except OSError as exc:
            raise TraceFormatError(f"cannot read the database and its write-ahead log "
                                   f"({exc.strerror})", path) from None
        yield copy.as_uri(), False


def _read_open(con: sqlite3.Connection, path: Path, n_bytes: int) -> list[NsysFile]:
    import sqlite3  # lazy: as in read_nsys (loaded there already)

    try:
        con.execute("PRAGMA query_only = ON")
        con.execute("PRAGMA trusted_schema = OFF")
        con.text_factory = _text
        return _read(con, path, n_bytes)
    except sqlite3.Error as exc:
        raise TraceFormatError(f"corrupt or truncated SQLite database ({exc})", path) from None
    except UnicodeDecodeError:  # sqlite3's message quotes a corrupt schema that is not UTF-8
        raise TraceFormatError("corrupt SQLite database (schema text is not UTF-8)",
                               path) from None
    finally:
        con.close()


def _header_size(head: bytes) -> int:
    """Database size the SQLite header records (0 if it records none): page size (offset 16)
    times the in-header page count (offset 28), valid when the version-valid-for number
    (offset 92) equals the change counter (offset 24); SQLite file format, section 1.3."""
    if len(head) < 100 or head[24:28] != head[92:96]:
        return 0
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    return page * int.from_bytes(head[28:32], "big")


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class _Db:
    """Read access to the tables of one export (only tables, never views)."""

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self.con = con
        self.path = path
        self.tables = {str(n) for n, t in con.execute("SELECT name, type FROM sqlite_master")
                       if t == "table"}
        self._cols: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = ({str(r[1]) for r in self.con.execute(
                f'PRAGMA table_info("{table}")')} if table in self.tables else set())
        return self._cols[table]

    def require(self, table: str, cols: tuple[str, ...]) -> None:
        missing = [c for c in cols if c not in self.columns(table)]
        if missing:
            raise TraceFormatError(f"{table} lacks column(s) {', '.join(missing)} (not a "
                                   "supported Nsight Systems export)", self.path)

    def col(self, table: str, name: str) -> str:
        """SQL for an optional integer column: NULL (or absent) -> -1."""
        return f'COALESCE("{name}", -1)' if name in self.columns(table) else "-1"

    def ints(self, table: str, exprs: list[str], where: str = "") -> np.ndarray:
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"' + (f" WHERE {where}" if where else "")
        rows = self.con.execute(sql).fetchall()
        if not rows:
            return np.empty((0, len(exprs)), np.int64)
        try:
            return np.array(rows, np.int64).reshape(len(rows), len(exprs))
        except (TypeError, ValueError, OverflowError):
            raise TraceFormatError(f"{table} holds a non-integer value where the schema "
                                   "documents an integer", self.path) from None

    def enum(self, table: str) -> dict[int, tuple[str, str]]:
        """id -> (name, label) of an ``ENUM_*`` table ({} when absent)."""
        if not {"id", "name", "label"} <= self.columns(table):
            return {}
        return {int(i): (str(n or ""), str(lb or "")) for i, n, lb in self.con.execute(
            f'SELECT id, name, label FROM "{table}"') if isinstance(i, int)}


@dataclass
class _Part:
    """Rows of one table, as parallel arrays (``proc`` = serialized id >> 24)."""

    ts: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    proc: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    corr: np.ndarray


def _codes(keys: np.ndarray, label: Callable[[tuple[int, ...]], str],
           names: Interner) -> np.ndarray:
    """Name codes of rows keyed by integer tuples (one label per distinct key)."""
    if keys.shape[0] == 0:
        return np.empty(0, np.int32)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    codes = names.encode([label(tuple(int(x) for x in u)) for u in uniq])
    return codes[inv.reshape(-1)]


def _gpu_part(m: np.ndarray, kind: str, name: np.ndarray) -> _Part:
    """Columns of a GPU table queried as start, end, deviceId, streamId, corr, globalPid."""
    proc = np.where(m[:, 5] >= 0, m[:, 5] >> 24, -1)
    stream = np.where((m[:, 3] >= 0) & (m[:, 3] < 2**31) & (m[:, 3] != _NO_STREAM), m[:, 3], -1)
    device = m[:, 2]
    return _Part(ts=m[:, 0], end=m[:, 1], kind=np.full(len(m), KINDS.index(kind), np.int32),
                 name=name, proc=proc, pid=device.copy(), tid=stream.copy(),
                 device=device.astype(np.int32), stream=stream.astype(np.int32), corr=m[:, 4])


def _host_part(m: np.ndarray, kind: str, name: np.ndarray, gtid: np.ndarray,
               corr: np.ndarray) -> _Part:
    n = len(m)
    ok = gtid >= 0
    return _Part(ts=m[:, 0], end=m[:, 1], kind=np.full(n, KINDS.index(kind), np.int32),
                 name=name, proc=np.where(ok, gtid >> 24, -1),
                 pid=np.where(ok, (gtid >> 24) & _ID24, -1), tid=np.where(ok, gtid & _ID24, -1),
                 device=np.full(n, -1, np.int32), stream=np.full(n, -1, np.int32), corr=corr)


def _copy_kind_name(symbol: str) -> str:
    """``CUDA_MEMCPY_KIND_HTOD`` -> ``HtoD``; ``CUDA_MEMCPY_KIND_UVM_DTOH`` -> ``UVM DtoH``."""
    parts = symbol.removeprefix("CUDA_MEMCPY_KIND_").split("_")
    m = re.fullmatch(r"([A-Z])TO([A-Z])", parts[-1])
    parts[-1] = f"{m[1]}to{m[2]}" if m else parts[-1].capitalize()
    return " ".join(parts)


def _read(con: sqlite3.Connection, path: Path, n_bytes: int) -> list[NsysFile]:
    db = _Db(con, path)
    if KERNEL not in db.tables:
        raise TraceFormatError(f"no {KERNEL} table: not an Nsight Systems export with CUDA "
                               "kernel trace (nsys profile --trace=cuda)", path)
    if "StringIds" not in db.tables:
        raise TraceFormatError("no StringIds table: not an Nsight Systems export", path)
    strings: dict[int, str] = {int(i): str(v) for i, v in con.execute(
        "SELECT id, value FROM StringIds") if isinstance(i, int)}
    names = Interner()
    parts: list[_Part] = []
    gpu_cols = ["start", "end", "deviceId", "streamId"]

    # kernels
    db.require(KERNEL, ("start", "end", "deviceId", "streamId"))
    kcols = db.columns(KERNEL)
    if not {"demangledName", "shortName"} & kcols:
        raise TraceFormatError(f"{KERNEL} lacks both demangledName and shortName", path)
    demangled = "demangledName" if "demangledName" in kcols else "shortName"
    short = "shortName" if "shortName" in kcols else "demangledName"
    m = db.ints(KERNEL, [*gpu_cols, db.col(KERNEL, "correlationId"), db.col(KERNEL, "globalPid"),
                         db.col(KERNEL, demangled), db.col(KERNEL, short)])

    def kernel_name(key: tuple[int, ...]) -> str:
        return strings.get(key[0]) or strings.get(key[1]) or f"kernel {key[0]}"

    part = _gpu_part(m, "kernel", _codes(m[:, 6:8], kernel_name, names))
    short_ids, inv = np.unique(m[:, 7], return_inverse=True)
    comm = np.array([bool(_COMM_KERNEL.match(strings.get(int(s), ""))) for s in short_ids]
                    or [False], bool)[inv.reshape(-1)] if len(m) else np.zeros(0, bool)
    part.kind[comm] = KINDS.index("collective")
    parts.append(part)

    # memory copies and sets
    if MEMCPY in db.tables:
        db.require(MEMCPY, ("start", "end", "deviceId", "streamId"))
        copy_enum = {i: _copy_kind_name(n) for i, (n, _) in db.enum("ENUM_CUDA_MEMCPY_OPER").items()
                     } or _COPY_KIND
        mem_enum = {i: lb for i, (_, lb) in db.enum("ENUM_CUDA_MEM_KIND").items()} or _MEM_KIND
        m = db.ints(MEMCPY, [*gpu_cols, db.col(MEMCPY, "correlationId"),
                             db.col(MEMCPY, "globalPid"), db.col(MEMCPY, "copyKind"),
                             db.col(MEMCPY, "srcKind"), db.col(MEMCPY, "dstKind")])

        def memcpy_name(key: tuple[int, ...]) -> str:
            return (f"Memcpy {copy_enum.get(key[0], 'Unknown')} ({mem_enum.get(key[1], 'Unknown')}"
                    f" -> {mem_enum.get(key[2], 'Unknown')})")

        parts.append(_gpu_part(m, "memcpy", _codes(m[:, 6:9], memcpy_name, names)))
    if MEMSET in db.tables:
        db.require(MEMSET, ("start", "end", "deviceId", "streamId"))
        mem_enum = {i: lb for i, (_, lb) in db.enum("ENUM_CUDA_MEM_KIND").items()} or _MEM_KIND
        m = db.ints(MEMSET, [*gpu_cols, db.col(MEMSET, "correlationId"),
                             db.col(MEMSET, "globalPid"), db.col(MEMSET, "memKind")])
        parts.append(_gpu_part(m, "memset", _codes(
            m[:, 6:7], lambda k: f"Memset ({mem_enum.get(k[0], 'Unknown')})", names)))

    # CUPTI synchronisation records (and what a stream wait waits on)
    wait_rows: list[tuple[int, int, int, int]] = []  # (part row, proc, eventId, correlation)
    if SYNC in db.tables:
        db.require(SYNC, ("start", "end", "deviceId", "streamId"))
        sync_enum = {i: _SYNC_NAME.get(n.removeprefix("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_"),
                                       "Unknown Sync")
                     for i, (n, _) in db.enum("ENUM_CUPTI_SYNC_TYPE").items()} or _SYNC_TYPE
        m = db.ints(SYNC, [*gpu_cols, db.col(SYNC, "correlationId"), db.col(SYNC, "globalPid"),
                           db.col(SYNC, "syncType"), db.col(SYNC, "eventId")])
        part = _gpu_part(m, "sync", _codes(
            m[:, 6:7], lambda k: sync_enum.get(k[0], "Unknown Sync"), names))
        offset = sum(len(p.ts) for p in parts)
        parts.append(part)
        waits = np.flatnonzero(np.array([sync_enum.get(int(t)) == "Stream Wait Event"
                                         for t in m[:, 6]] or [False], bool)[:len(m)])
        wait_rows = [(offset + int(r), int(part.proc[r]), int(m[r, 7]), int(m[r, 4]))
                     for r in waits.tolist()]

    # CUDA runtime / driver API calls
    if RUNTIME in db.tables:
        db.require(RUNTIME, ("start", "end", "nameId"))
        classes = {i for i, (n, _) in db.enum("ENUM_NSYS_EVENT_CLASS").items()
                   if n in _CALL_CLASSES} or set(_CALL_CLASSES.values())
        m = db.ints(RUNTIME, ["start", "end", db.col(RUNTIME, "eventClass"),
                              db.col(RUNTIME, "globalTid"), db.col(RUNTIME, "correlationId"),
                              db.col(RUNTIME, "nameId")])
        if "eventClass" in db.columns(RUNTIME):
            m = m[np.isin(m[:, 2], list(classes))]

        def api_name(key: tuple[int, ...]) -> str:
            s = strings.get(key[0], f"CUDA API {key[0]}")
            return _CBID_VERSION.sub("", s) if s.startswith("cuda") else s

        parts.append(_host_part(m, "runtime", _codes(m[:, 5:6], api_name, names), m[:, 3],
                                m[:, 4]))

    # NVTX ranges
    if NVTX in db.tables:
        db.require(NVTX, ("start", "end", "eventType"))
        types = {i for i, (n, _) in db.enum("ENUM_NSYS_EVENT_TYPE").items()
                 if n in _RANGE_TYPES} or set(_RANGE_TYPES.values())
        has_text = "text" in db.columns(NVTX)
        sql = (f'SELECT start, "end", eventType, {db.col(NVTX, "globalTid")}, '
               f'{db.col(NVTX, "textId")}, {"text" if has_text else "NULL"} FROM "{NVTX}" '
               f'WHERE "end" IS NOT NULL AND eventType IN ({", ".join(map(str, sorted(types)))})')
        rows = con.execute(sql).fetchall()
        labels = [(t if isinstance(t, str) and t else strings.get(tid, "")
                   if isinstance(tid, int) else "") for *_, tid, t in rows]
        keep = [i for i, s in enumerate(labels) if s]
        try:
            m = np.array([rows[i][:5] for i in keep], np.int64).reshape(len(keep), 5)
        except (TypeError, ValueError, OverflowError):
            raise TraceFormatError(f"{NVTX} holds a non-integer value where the schema "
                                   "documents an integer", path) from None
        codes = names.encode([labels[i] for i in keep]) if keep else np.empty(0, np.int32)
        parts.append(_host_part(m, "annotation", codes, m[:, 3],
                                np.full(len(m), -1, np.int64)))

    return _split(db, parts, names.values, wait_rows, strings, n_bytes)


def _split(db: _Db, parts: list[_Part], name_values: list[str],
           wait_rows: list[tuple[int, int, int, int]], strings: dict[int, str],
           n_bytes: int) -> list[NsysFile]:
    """One :class:`NsysFile` per process with CUDA activity."""
    path = db.path
    cat = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _Part.__dataclass_fields__}
    kind = cat["kind"]
    host = cat["device"] < 0
    annotation = kind == KINDS.index("annotation")
    # a GPU row without a process: the process of its launching call, else the only process
    procs = sorted({int(p) for p in np.unique(cat["proc"][~annotation]) if p >= 0},
                   key=lambda p: (p & _ID24, p))
    lost = np.flatnonzero(~host & (cat["proc"] < 0))
    if lost.size:
        rt = np.flatnonzero(kind == KINDS.index("runtime"))
        by_corr: dict[int, set[int]] = {}
        for c, p in zip(cat["corr"][rt].tolist(), cat["proc"][rt].tolist(), strict=True):
            by_corr.setdefault(c, set()).add(p)
        for r in lost.tolist():
            cand = by_corr.get(int(cat["corr"][r]), set(procs) if len(procs) == 1 else set())
            if len(cand) == 1:
                cat["proc"][r] = next(iter(cand))
    if not procs:
        raise TraceFormatError("no CUDA activity (kernels, memory operations or CUDA API "
                               "calls) in the file", path)
    dur = cat["end"] - cat["ts"]
    if dur.size and (np.abs(cat["ts"]).max() > 2**62 or np.abs(dur).max() > 2**62):
        raise TraceFormatError("absurd timestamp in the file", path)
    dur = np.maximum(dur, 0)  # clock glitches: zero-length events, as the Kineto reader does

    # threads, MPI ranks, devices, host
    threads: dict[int, dict[tuple[int, int], str]] = {}
    if {"nameId", "globalTid"} <= db.columns("ThreadNames"):
        for nid, g in db.con.execute("SELECT nameId, globalTid FROM ThreadNames"):
            if isinstance(nid, int) and isinstance(g, int) and nid in strings:
                threads.setdefault(g >> 24, {})[((g >> 24) & _ID24, g & _ID24)] = strings[nid]
    mpi: dict[int, int] = {}
    for p in procs:
        found = {int(mm[1]) for s in threads.get(p, {}).values() if (mm := _MPI_RANK.match(s))}
        if len(found) == 1:
            mpi[p] = found.pop()
    use_mpi = len(mpi) == len(procs) and len(set(mpi.values())) == len(procs)
    devices: list[dict[str, Any]] = []
    if {"id", "name"} <= db.columns("TARGET_INFO_GPU"):
        gpus = {int(i): str(n or "") for i, n in db.con.execute(
            "SELECT id, name FROM TARGET_INFO_GPU") if isinstance(i, int) and 0 <= i < 4096}
        devices = [{"id": i, "name": gpus.get(i, "")} for i in range(max(gpus, default=-1) + 1)]
    hosts: set[str] = set()
    if {"name", "value"} <= db.columns("TARGET_INFO_SYSTEM_ENV"):
        hosts = {str(v) for (v,) in db.con.execute(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")}
    host_name = hosts.pop() if len(hosts) == 1 else ""

    # what each stream wait waits on: the latest cudaEventRecord of that event before it
    records: dict[tuple[int, int], list[tuple[int, int]]] = {}
    if wait_rows and {"eventId", "streamId", "correlationId"} <= db.columns(CUDA_EVENT):
        m = db.ints(CUDA_EVENT, [db.col(CUDA_EVENT, "globalPid"), "eventId", "streamId",
                                 "correlationId"])
        for g, ev, st, c in m.tolist():
            records.setdefault((g >> 24 if g >= 0 else -1, ev), []).append((c, st))
        for lst in records.values():
            lst.sort()
    waits_of: dict[int, tuple[int, int]] = {}
    for row, proc, ev, corr in wait_rows:
        lst = records.get((proc, ev)) or records.get((-1, ev)) or []
        j = bisect_left(lst, (corr, -1)) - 1
        if j >= 0 and 0 <= lst[j][1] < 2**31:
            waits_of[row] = (lst[j][1], lst[j][0])

    kinds = list(KINDS)
    fams = list(OP_FAMILIES)
    family_of_name = classify_families(name_values)
    out: list[NsysFile] = []
    for i, p in enumerate(procs):
        rows = np.flatnonzero(cat["proc"] == p)
        rows = rows[np.lexsort((-dur[rows], cat["ts"][rows]))]
        used, name_idx = np.unique(cat["name"][rows], return_inverse=True)
        name_dict = [name_values[u] for u in used.tolist()]
        codes = kind[rows]
        fam = family_of_name[cat["name"][rows]]
        fam = np.where((codes == kinds.index("memcpy")) | (codes == kinds.index("memset")),
                       fams.index("memcpy"), fam)
        fam = np.where(codes == kinds.index("collective"), fams.index("comm"), fam)
        n = rows.size
        columns: dict[str, Any] = {
            "rank": np.full(n, -1, np.int32),
            "iteration": np.full(n, -1, np.int32),
            "kind": A.dictionary(codes, kinds),
            "name": A.dictionary(name_idx.reshape(-1).astype(np.int32), name_dict),
            "ts": cat["ts"][rows],
            "dur": dur[rows],
            "pid": cat["pid"][rows],
            "tid": cat["tid"][rows],
            "device": cat["device"][rows],
            "stream": cat["stream"][rows],
            "correlation": cat["corr"][rows],
            "external_id": np.full(n, -1, np.int64),
            "op_family": A.dictionary(fam.astype(np.int32), fams),
            "rf_id": np.full(n, -1, np.int64),
        }
        events = pa.Table.from_arrays(
            [A.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
             for v in columns.values()], names=list(columns))
        new_row = {int(r): j for j, r in enumerate(rows.tolist())}
        sw = sorted((new_row[r], s, c) for r, (s, c) in waits_of.items() if r in new_row)
        info: dict[str, Any] = {}
        if use_mpi:
            info["rank"] = mpi[p]
        elif len(procs) > 1:
            info["rank"] = i
        out.append(NsysFile(
            path=path, events=events, distributed_info=info, device_properties=devices,
            base_time_ns=None, host_name=host_name, comm_args=empty_comm_args(),
            stream_waits=pa.Table.from_arrays(
                [A.from_numpy(np.array([r for r, _, _ in sw], np.int64)),
                 A.from_numpy(np.array([s for _, s, _ in sw], np.int32)),
                 A.from_numpy(np.array([c for _, _, c in sw], np.int64))],
                names=["event", "wait_on_stream", "record_correlation"]),
            shapes=empty_shapes(),
            threads=threads.get(p, {}), n_bytes=n_bytes, pid=p & _ID24,
        ))
    return out


# ------------------------------------------------------------------ NCCL kernels -> collectives

_NCCL_OP = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
#: dtype spellings in NCCL kernel names (``..._Sum_float``, ``..._Sum_f32_RING_LL``)
_NCCL_DTYPE = {"float": "float", "f32": "float", "half": "half", "f16": "half",
               "bf16": "bfloat16", "__nv_bfloat16": "bfloat16", "double": "double",
               "f64": "double", "int8_t": "int8", "i8": "int8", "uint8_t": "uint8", "u8": "uint8",
               "int32_t": "int32", "i32": "int32", "uint32_t": "uint32", "u32": "uint32",
               "int64_t": "int64", "i64": "int64", "uint64_t": "uint64", "u64": "uint64",
               "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2"}


def _nccl_dtype(name: str) -> str:
    head = name.split("(", 1)[0]
    for tok in reversed(head.split("_")):
        if tok in _NCCL_DTYPE:
            return _NCCL_DTYPE[tok]
    return ""


def nccl_kernel_calls(*, name_idx: np.ndarray, name_dict: list[str], kind: np.ndarray,
                      kinds: list[str], correlation: np.ndarray, host: np.ndarray, rank: int,
                      world_ranks: list[int]) -> list[CallRecord]:
    """Collective calls of one rank of an Nsight Systems export, one per NCCL/RCCL kernel.

    nsys records no c10d call ranges (``nccl:all_reduce``) unless the program emits them as
    NVTX, nor message sizes or process groups. Each collective kernel becomes a call: the
    host event is the CUDA API call that launched it (by correlation id; the kernel itself if
    the launch is not in the trace), the collective comes from the kernel name
    (``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``all_reduce``, dtype ``float``), sizes
    are 0 (unknown), the process group is the default one ("0", all ranks loaded), as
    :func:`traincast.trace.collectives.extract_calls` assumes for calls without arguments.
    Point-to-point (``SendRecv``) and ``Generic`` kernels stay unmatched (group of one rank).
    """
    k_coll = kinds.index("collective")
    rows = np.flatnonzero((kind == k_coll) & ~host)
    if rows.size == 0:
        return []
    rt = np.flatnonzero((kind == kinds.index("runtime")) & host & (correlation >= 0))
    launch = dict(zip(correlation[rt].tolist(), rt.tolist(), strict=True))
    out: list[CallRecord] = []
    for r in rows.tolist():
        name = name_dict[name_idx[r]]
        m = _NCCL_OP.search(name)
        op = m.group(1).lower() if m else ""
        if op in ("sendrecv", "send", "recv"):
            coll, group = ("send_recv" if op == "sendrecv" else op), [rank]
        elif op and op != "generic":
            coll = normalise(op)
            group = sorted(world_ranks) if len(world_ranks) > 1 else [rank]
        else:
            coll, group = (op or "unknown"), [rank]
        event = launch.get(int(correlation[r]), r) if correlation[r] >= 0 else r
        out.append(CallRecord(event=event, kernel_event=r, collective=coll, process_group="0",
                              group_ranks=group, dtype=_nccl_dtype(name), in_bytes=0,
                              out_bytes=0, backend="nccl"))
    out.sort(key=lambda c: (c.event, c.kernel_event))
    counters: dict[tuple[str, tuple[int, ...]], int] = {}
    for c in out:
        key = (c.process_group, tuple(c.group_ranks))
        c.seq = counters.get(key, 0)
        counters[key] = c.seq + 1
    return out
