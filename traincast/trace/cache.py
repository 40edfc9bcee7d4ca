"""Columnar cache of decoded trace files, so a second ``traincast.load`` of a run is cheap.

What is cached: the per-file result of a reader (:func:`~traincast.trace.readers.kineto.
read_kineto` gives one :class:`~traincast.trace.readers.kineto.KinetoFile`,
:func:`~traincast.trace.readers.nsys.read_nsys` one :class:`~traincast.trace.readers.nsys.
NsysFile` per profiled process), i.e. everything before ranks are assigned and the TraceSet
is assembled (iterations and collectives are recomputed on every load: they depend on
``iteration_marker``, ``rank_map`` and the other files; execution traces and their links to
the Kineto events have entries of their own, :mod:`traincast.trace.cache_et` and
:mod:`traincast.trace.link.cache_link`).

Layout: ``<root>/v<CACHE_SCHEMA>/<key[:2]>/<key>.arrows``, one file per trace file: every
Arrow table of every record as Arrow IPC streams (a table up to 16 MiB as one stream, a
larger one as one stream per column, a column past 256 MiB in slices of rows), each
compressed as one LZ4 block, one after the other, then the manifest (JSON: scalar metadata
of every record -- distributed info, device properties, threads, sizes -- and each block's
columns, byte range, row count, CRC-32 and size uncompressed), then the manifest's length
(8 bytes, little endian) and the magic ``TCACHE03``. A column read back lives in its
block's decompressed buffer (no second copy of a table). One file, read a block at a time
(no memory map: its pages would count as resident while a table is read), costs well under
a millisecond (four Parquet files and a JSON file per trace cost ~3 ms: 1,024 ranks took 3 s
to read back). An entry is written to a temporary file next to it and renamed into place
(``os.replace``), so readers never see half an entry. A temporary is named
``.<key[:8]>-<pid>@<host>-XXXXXXXX``; one left by a process killed mid-write is deleted by a
later process (at most once an hour per cache folder, marker ``.swept``) once it is older
than :data:`STALE_TMP_S` and its owner is gone (its pid no longer runs on this host), or
older than a day whoever wrote it.

Key: blake2b (160 bits) of the file's bytes (read in 1 MiB pieces; about 10 ms for a 3 MB
gzipped 54 MB trace), its size, ``traincast.__version__``, :data:`CACHE_SCHEMA` and a
fingerprint of the reader source code (so an edit of a reader in a development checkout
invalidates older entries even without a version bump). The file's name and path are not part
of the key: the same bytes under another name hit the same entry (the record's ``path`` is set
to the file being loaded).

Sharing: entries get the permissions of the user's umask (like any file they create), so a
cache folder that a group can write (``chmod g+ws``, ``umask 002``) is shared by its members:
an entry one of them wrote is a hit for the others. With the common ``umask 022`` others can
read but not replace entries (an unreadable one is then re-parsed on every load).

Safety: no pickle; Arrow IPC and JSON only. A missing, truncated or otherwise unreadable entry
is ignored (the file is parsed again and the entry rewritten); a cache that cannot be written
(read-only or full disk) is skipped silently (logged at debug level). Metadata that does not
survive a JSON round trip unchanged is not cached. Each table's columns are checked against
the manifest and, for ``events`` and ``shapes``, against the canonical schema; an entry that
differs is parsed again and replaced. A cached gzipped trace whose inflated size
exceeds the current ``max_inflate_bytes`` limit is re-read, so the limit still refuses it.

Whole jobs: after a load assembles a TraceSet (ranks assigned, iterations, collectives, and
the execution traces linked when given), it is stored too, under
``<root>/v<CACHE_SCHEMA>/jobs/``, keyed by :func:`job_key` (every file's content key and path,
ETs included, ``iteration_marker``, ``rank_map``, the assembly code and, with ETs, the link
code's fingerprint). A second load of the same files with the same options reads that one entry,
repeats the load's warnings, and re-checks the inflate limits of gzipped files (a job of
:data:`~traincast.trace.cache_key.JOB_ONLY_MIN_FILES` files or more stores no per-file entries,
only the job's). The job entry is
written on a (non-daemon) thread, from the events' first combined column on while the load
assembles them (:mod:`~traincast.trace.cache_job`, the bytes :func:`put_job` writes), and
after ``load`` returns, overlapping what the caller does next; a later ``load`` of the same
job waits for it, :func:`wait_for_writes` waits for all, and the process finishes it before
exiting; :mod:`~traincast.trace.cache_stat` finds it.

Where: ``load(cache=PATH)``, else ``$TRAINCAST_CACHE_DIR``, else ``$XDG_CACHE_HOME/traincast``,
else ``~/.cache/traincast``. ``TRAINCAST_CACHE_DIR=off`` (or ``0``, ``none``, ``false``)
disables caching, as does ``load(cache=False)``. Size: about 1x to 2x the gzipped trace
(LZ4 Arrow). The folder is capped (``$TRAINCAST_CACHE_MAX``, default 2 GiB): after writing, a
process deletes the least recently used entries beyond the cap
(:mod:`traincast.trace.cache_size`); ``traincast cache info`` shows what it holds and
``traincast cache clear`` (:func:`clear`) empties it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
from isal import isal_zlib  # CRC-32 as zlib's, ~3x faster (ISA-L)

from traincast.errors import ParameterError
from traincast.trace import cache_size
from traincast.trace.cache_key import CACHE_SCHEMA, cache_dir, job_entry, mark_job
from traincast.trace.cache_key import code_fingerprint as _code_fingerprint
from traincast.trace.cache_key import hash_job_code as _hash_job_code
from traincast.trace.cache_read import (  # noqa: F401 - cache_et reads through this module
    _CODEC,
    _MAGIC,
    _read_manifest,
    _read_tables,
    _schema_list,
    read_deferred,
)
from traincast.trace.readers.base import TraceFile
from traincast.trace.readers.kineto import KinetoFile
from traincast.trace.readers.nsys import NsysFile
from traincast.trace.traceset import RankInfo, TraceSet, share_device_properties
from traincast.util.fileio import open_regular

__all__ = ["CACHE_SCHEMA", "TraceCache", "cache_dir", "clear", "file_key", "resolve"]

log = logging.getLogger(__name__)

#: most bytes of one LZ4 block (LZ4 takes < 2 GiB): a larger column goes in slices of rows
_BLOCK_BYTES = 1 << 28
#: a table up to this size is one block of all its columns (fewer, larger LZ4 calls)
_SMALL_TABLE = 16 << 20
_CHUNK = 1 << 20
_RECORD_TYPES: dict[str, type[TraceFile]] = {"kineto": KinetoFile, "nsys": NsysFile}


def resolve(cache: bool | str | os.PathLike[str] | None) -> TraceCache | None:
    """``load(cache=...)`` -> a TraceCache, or None for no caching. Raises
    :class:`~traincast.errors.ParameterError` for a bad ``$TRAINCAST_CACHE_MAX``."""
    if cache is False:
        return None
    root = cache_dir() if cache is None or cache is True else Path(cache).expanduser()
    if root is not None:
        cache_size.max_bytes()  # a bad $TRAINCAST_CACHE_MAX is said before any work
    return TraceCache(root) if root is not None else None


def file_key(path: Path) -> str:
    """Cache key of a trace file: content hash + size + traincast version + reader code; for
    an SQLite database, its write-ahead log (``-wal``, read with it) too."""
    h = hashlib.blake2b(digest_size=20)
    size = 0
    with open_regular(path) as fh:  # a FIFO or /dev/zero would never end
        while block := fh.read(_CHUNK):
            h.update(block)
            size += len(block)
    h.update(f"|{size}|{_code_fingerprint()}".encode())
    wal = path.with_name(path.name + "-wal")
    if path.name.lower().endswith((".sqlite", ".sqlite3")) or wal.exists():
        try:
            with wal.open("rb") as fh:
                n = 0
                while block := fh.read(_CHUNK):
                    h.update(block)
                    n += len(block)
            h.update(f"|wal {n}".encode())
        except FileNotFoundError:
            pass
    return h.hexdigest()


def clear(root: Path | None = None) -> int:
    """Delete the cache folder (default: :func:`cache_dir`); returns the bytes freed."""
    root = root if root is not None else cache_dir()
    wait_for_writes()
    if root is None or not root.is_dir():
        return 0
    n = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    shutil.rmtree(root, ignore_errors=True)
    return n


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _block_rows(col: pa.Table) -> int:
    """Rows per block of the columns ``col`` (all of them unless they are huge)."""
    per_row = col.nbytes / max(col.num_rows, 1)
    return max(1, min(max(col.num_rows, 1), int(_BLOCK_BYTES // max(per_row, 1.0))))


class _Scratch:
    """One buffer that the IPC stream of each block of an entry is written into in turn,
    grown to the largest: a new buffer per block (grown by doubling) cost its page faults
    and copies again for every column."""

    def __init__(self) -> None:
        self._buf: pa.Buffer | None = None

    def stream(self, table: pa.Table) -> pa.Buffer:
        """``table`` as one Arrow IPC stream: a view of the scratch buffer, valid until
        the next call."""
        size = pa.MockOutputStream()
        with pa.ipc.new_stream(size, table.schema) as w:
            w.write_table(table)
        n = size.size()
        if self._buf is None or self._buf.size < n:
            self._buf = None
            self._buf = pa.allocate_buffer(n)
        with pa.ipc.new_stream(pa.FixedSizeBufferWriter(self._buf), table.schema) as w:
            w.write_table(table)
        return self._buf.slice(0, n)


class _EntryFile:
    """An entry being written: a temporary file next to ``entry``, its blocks appended in
    turn (:meth:`table`, :meth:`group`), then its manifest and the rename into place
    (:meth:`close`); :meth:`discard` deletes the temporary if it was not renamed.

    Raises:
        OSError: the temporary cannot be made or written."""

    def __init__(self, entry: Path, key: str) -> None:
        self.entry, self.key = entry, key
        self._scratch = _Scratch()
        self._pos = 0
        fd, name = new_temporary(entry, key)
        self._tmp: Path | None = Path(name)
        self._fh = os.fdopen(fd, "wb")

    def table(self, t: pa.Table) -> list[list[Any]]:
        """Write table ``t``; its groups for the manifest: a small table in one block, a
        large one a block per column (or per slice of rows of a huge column), each read
        back without a copy."""
        return [self.group(cols) for cols in (
            [t] if t.nbytes <= _SMALL_TABLE else [t.select([j]) for j in range(t.num_columns)])]

    def group(self, cols: pa.Table) -> list[Any]:
        """Write the columns ``cols`` (one group of a table); the group for the manifest."""
        blocks = []
        step = _block_rows(cols)
        for lo in range(0, max(cols.num_rows, 1), step):
            part = cols.slice(lo, step)
            raw = self._scratch.stream(part)
            data = pa.compress(raw, codec=_CODEC, asbytes=False)
            self._fh.write(memoryview(data))
            blocks.append([self._pos, data.size, part.num_rows, isal_zlib.crc32(data),
                           raw.size])
            self._pos += data.size
            del raw, data
        return [cols.column_names, blocks]

    def close(self, metas: Sequence[dict[str, Any]]) -> bool:
        """Write the manifest of ``metas`` and rename the entry into place; False if
        another process's rename won."""
        manifest = msgspec.json.encode({"schema": CACHE_SCHEMA, "key": self.key,
                                        "records": list(metas)})
        self._fh.write(manifest)
        self._fh.write(len(manifest).to_bytes(8, "little") + _MAGIC)
        self._fh.close()
        self._scratch = _Scratch()
        try:
            os.replace(self._tmp, self.entry)  # atomic; a concurrent identical entry loses
        except OSError:
            return False
        self._tmp = None
        return True

    def discard(self) -> None:
        """Close and delete the temporary unless it was renamed into place."""
        self._fh.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None


def _write_entries(entry: Path, key: str, tables: Sequence[dict[str, pa.Table]],
                   metas: Sequence[dict[str, Any]]) -> bool:
    """Write one entry file (see the module docstring) holding the tables of each record,
    their byte ranges added to its manifest entry; atomically (temporary file, then
    ``os.replace``). False if it could not be written."""
    out = None
    try:
        out = _EntryFile(entry, key)
        for tabs, meta in zip(tables, metas, strict=True):
            meta["schemas"] = {n: _schema_list(t.schema) for n, t in tabs.items()}
            meta["rows"] = {n: t.num_rows for n, t in tabs.items()}
            for n, t in tabs.items():
                meta["tables"][n] = out.table(t)
        return out.close(metas)
    except OSError as exc:
        log.debug("traincast cache: cannot write %s (%s)", entry, exc)
        return False
    finally:
        if out is not None:
            out.discard()


#: owner of this process's temporaries (``<pid>@<host>``; the pid of a forked child differs)
_OWNER_HOST = socket.gethostname().replace("/", "_") or "localhost"
_OWNER = f"{os.getpid()}@{_OWNER_HOST}"
#: a temporary older than this whose owner is gone is deleted (no write takes so long idle)
STALE_TMP_S = 600
#: a temporary older than this is deleted whoever wrote it
_ABANDONED_TMP_S = 86_400
#: the whole cache folder is swept for stale temporaries at most this often
_SWEEP_EVERY_S = 3600
_swept: set[Path] = set()


def _reset_owner() -> None:
    global _OWNER
    _OWNER = f"{os.getpid()}@{_OWNER_HOST}"


os.register_at_fork(after_in_child=_reset_owner)


def _owner_gone(name: str) -> bool:
    """Whether the writer of temporary ``name`` (``.<key>-<pid>@<host>-XXXX``) is known to
    have ended: it ran on this host and its pid no longer exists."""
    try:
        owner = name[1:].split("-", 1)[1].rsplit("-", 1)[0]
        pid_text, host = owner.split("@", 1)
        pid = int(pid_text)
    except (IndexError, ValueError):
        return False  # another naming: only its age decides
    if host != _OWNER_HOST or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive under another user (EPERM)
        return False
    return False


def sweep_stale_temporaries(root: Path, now: float | None = None) -> int:
    """Delete the temporaries that writers killed mid-write left in the cache at ``root``
    (see the module docstring); the number deleted. Errors are ignored (a cache shared with
    others may hold files this user cannot delete)."""
    now = time.time() if now is None else now
    base = Path(root) / f"v{CACHE_SCHEMA}"
    n = 0
    for top in (base, base / "jobs", base / "graphs"):
        try:
            subdirs = [e.path for e in os.scandir(top) if e.is_dir(follow_symlinks=False)
                       and len(e.name) == 2]
        except OSError:
            continue
        for d in subdirs:
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                if not e.name.startswith(".") or not e.is_file(follow_symlinks=False):
                    continue
                try:
                    age = now - e.stat(follow_symlinks=False).st_mtime
                    if age > _ABANDONED_TMP_S or (age > STALE_TMP_S and _owner_gone(e.name)):
                        os.unlink(e.path)
                        n += 1
                except OSError:
                    continue
    return n


def _maybe_sweep(root: Path) -> None:
    """Sweep ``root`` once per process, and only when no process has in the last hour."""
    if root in _swept:
        return
    _swept.add(root)
    marker = root / f"v{CACHE_SCHEMA}" / ".swept"
    try:
        if time.time() - marker.stat().st_mtime < _SWEEP_EVERY_S:
            return
    except OSError:
        pass
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        return  # a read-only cache: nothing to sweep that this process could delete
    n = sweep_stale_temporaries(root)
    if n:
        log.debug("traincast cache: deleted %d stale temporaries under %s", n, root)


#: (root, cap) pairs trimmed by this process: after a write, once per root (an entry written
#: later in the same process is trimmed by the next process that writes)
_trimmed: set[Path] = set()
_TRIM_LOCK = threading.Lock()


def new_temporary(entry: Path, key: str) -> tuple[int, str]:
    """A temporary file beside ``entry`` (its folder made) named for this process as the
    sweep (:func:`sweep_stale_temporaries`) knows it, readable as the umask allows: (open
    descriptor, path). Raises OSError."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{key[:8]}-{_OWNER}-", dir=entry.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from the group
    except OSError:
        os.close(fd)
        os.unlink(name)
        raise
    return fd, name


def trim_after_write(root: Path) -> None:
    """After an entry was written under ``root``: trim it to the cap once per process."""
    _maybe_trim(root)


def _maybe_trim(root: Path) -> None:
    """Trim ``root`` to the cap (:mod:`~traincast.trace.cache_size`) once per process."""
    with _TRIM_LOCK:
        if root in _trimmed:
            return
        _trimmed.add(root)
    try:
        n, freed = cache_size.trim(root, cache_size.max_bytes(), CACHE_SCHEMA)
    except (OSError, ParameterError) as exc:  # a read-only or vanished folder: nothing to trim
        log.debug("traincast cache: cannot trim %s (%s)", root, exc)
        return
    if n:
        log.debug("traincast cache: %d entries (%d bytes) deleted beyond the cap", n, freed)


def _json_exact(value: Any) -> bool:
    try:
        return msgspec.json.decode(msgspec.json.encode(value)) == value
    except (TypeError, ValueError, msgspec.MsgspecError):
        return False


class TraceCache:
    """Get and put the decoded records of one trace file, by :func:`file_key`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        _maybe_sweep(self.root)
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def _entry(self, key: str) -> Path:
        return self.root / f"v{CACHE_SCHEMA}" / key[:2] / f"{key}.arrows"

    # ------------------------------------------------------------------ read
    def holds(self, key: str) -> bool:
        """Whether an entry is stored under ``key`` (it may still prove unreadable)."""
        return self._entry(key).is_file()

    def get(self, path: Path, key: str) -> list[TraceFile] | None:
        """The cached records of ``path`` (None on a miss or an unreadable entry)."""
        entry = self._entry(key)
        try:
            with pa.OSFile(str(entry), "r") as mm:
                manifest = _read_manifest(mm, key)
                records = [self._read_record(mm, r, path) for r in manifest["records"]]
        except FileNotFoundError:
            self.misses += 1
            return None
        except Exception as exc:  # noqa: BLE001 - any damage to an entry means "parse again"
            log.debug("traincast cache: ignoring unreadable entry %s (%s)", entry, exc)
            self.misses += 1
            return None
        self.hits += 1
        cache_size.touch(entry)
        return records

    @staticmethod
    def _read_record(mm: Any, meta: dict[str, Any], path: Path) -> TraceFile:
        cls = _RECORD_TYPES[meta["type"]]
        kw: dict[str, Any] = {"path": path, **_read_tables(mm, meta)}
        kw["threads"] = {(int(p), int(t)): str(s) for p, t, s in meta["threads"]}
        kw.update(meta["scalars"])
        return cls(**kw)

    # ----------------------------------------------------------------- write
    def put(self, key: str, records: Sequence[TraceFile]) -> bool:
        """Store the records of one file; False if they could not be cached."""
        try:
            metas = [self._record_meta(r) for r in records]
        except ValueError as exc:
            log.debug("traincast cache: not caching (%s)", exc)
            return False
        tables = [{name: getattr(r, name) for name in meta["tables"]}
                  for r, meta in zip(records, metas, strict=True)]
        ok = _write_entries(self._entry(key), key, tables, metas)
        self.writes += ok
        if ok:
            _maybe_trim(self.root)
        return ok

    @staticmethod
    def _record_meta(r: TraceFile) -> dict[str, Any]:
        kind = next((k for k, c in _RECORD_TYPES.items() if type(r) is c), None)
        if kind is None:
            raise ValueError(f"unknown record type {type(r).__name__}")
        tables: dict[str, int] = {}
        scalars: dict[str, Any] = {}
        for f in dataclasses.fields(r):
            v = getattr(r, f.name)
            if f.name in ("path", "threads"):
                continue
            if isinstance(v, pa.Table):
                tables[f.name] = v.num_rows
            elif _json_exact(v):
                scalars[f.name] = v
            else:
                raise ValueError(f"field {f.name} does not round-trip through JSON")
        threads = [[int(p), int(t), str(s)] for (p, t), s in r.threads.items()]
        schemas = {name: _schema_list(getattr(r, name).schema) for name in tables}
        return {"type": kind, "tables": tables, "schemas": schemas, "scalars": scalars,
                "threads": threads}


# ------------------------------------------------------------------- whole-job entries
#: TraceSet tables stored in a job entry
_JOB_TABLES = ("events", "collectives", "shapes", "iterations", "stream_waits",
               "member_lists")


def job_key(file_keys: Sequence[str], paths: Sequence[Path], options: dict[str, Any]) -> str:
    """Key of an assembled TraceSet: the content keys and paths of its files (a rank can
    come from a file's name; warnings name the paths), the load options that change the
    assembly (``iteration_marker``, ``rank_map``) and the fingerprint of the assembly code.
    """
    h = hashlib.blake2b(digest_size=20)
    h.update(f"job|{_code_fingerprint()}|".encode())
    _hash_job_code(h)
    h.update(json.dumps([list(file_keys), [str(p) for p in paths], options],
                        sort_keys=True, default=str).encode())
    return h.hexdigest()


def _rank_json(info: Any) -> dict[str, Any]:
    # a shallow dict (asdict deep-copies every member list of every process group)
    d = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
    d["path"] = None if info.path is None else str(info.path)
    d["et_path"] = None if info.et_path is None else str(info.et_path)
    d["threads"] = [[int(p), int(t), str(s)] for (p, t), s in info.threads.items()]
    return d


def _rank_info(d: dict[str, Any]) -> Any:
    d = dict(d)
    d["path"] = None if d["path"] is None else Path(d["path"])
    d["et_path"] = None if d["et_path"] is None else Path(d["et_path"])
    d["threads"] = {(int(p), int(t)): str(s) for p, t, s in d["threads"]}
    return RankInfo(**d)


def _job_entry(root: Path, key: str) -> Path:
    return job_entry(root, key)


def _job_parts(ts: Any) -> tuple[dict[str, pa.Table], dict[str, Any]] | None:
    """The tables and the metadata of a job entry of TraceSet ``ts`` (None, logged, when
    its metadata does not round-trip through JSON). A job with execution traces also keeps
    ``et_links`` and, per rank ``r`` with an ET, its nodes (``et_nodes_r``), data
    dependencies (``et_deps_r``) and the ET's header (``meta["ets"][str(r)]``)."""
    tables = {n: getattr(ts, n) for n in _JOB_TABLES if getattr(ts, n) is not None}
    ets: dict[str, dict[str, Any]] = {}
    if ts.et_links is not None:
        tables["et_links"] = ts.et_links
        for r, et in sorted(ts.et_nodes.items()):
            tables[f"et_nodes_{r}"] = et.nodes
            tables[f"et_deps_{r}"] = et.data_deps
            ets[str(r)] = {"schema": et.schema, "pid": et.pid, "metadata": et.metadata,
                           "path": et.path, "devices": sorted(et.devices)}
    meta = {"type": "job", "tables": {n: None for n in tables},
            "ranks": [_rank_json(ts.ranks[r]) for r in sorted(ts.ranks)],
            "warnings": list(ts.warnings)}
    if ts.et_links is not None:
        meta["ets"] = ets
    if not _json_exact(meta):
        log.debug("traincast cache: job metadata does not round-trip through JSON")
        return None
    return tables, meta


def put_job(store: TraceCache, key: str, ts: Any) -> bool:
    """Store an assembled TraceSet (with its execution traces, if any) under :func:`job_key`;
    False if it could not be cached. Same file layout as a per-file entry. (A cold load
    writes the same bytes on a thread while it assembles: :mod:`~traincast.trace.cache_job`.)"""
    got = _job_parts(ts)
    if got is None:
        return False
    tables, meta = got
    ok = _write_entries(_job_entry(store.root, key), key, [tables], [meta])
    if ok:
        _maybe_trim(store.root)
    return ok


#: entries being written on a thread (job entries, :mod:`~traincast.trace.cache_job`; graphs,
#: :mod:`traincast.graph.stored`), by entry path
_PENDING: dict[Path, threading.Thread] = {}
_PENDING_LOCK = threading.Lock()


def add_pending(entry: Path, thread: threading.Thread) -> None:
    """Register ``thread`` as the one writing ``entry`` (:func:`wait_for_writes` and
    :func:`clear` wait for it)."""
    with _PENDING_LOCK:
        _PENDING[entry] = thread


def drop_pending(entry: Path) -> None:
    """The write of ``entry`` by the calling thread is over (registered by
    :func:`add_pending`)."""
    with _PENDING_LOCK:
        if _PENDING.get(entry) is threading.current_thread():
            del _PENDING[entry]


def wait_for_writes(entry: Path | None = None) -> None:
    """Wait until the background write of ``entry`` (every pending one if None) is done."""
    with _PENDING_LOCK:
        threads = list(_PENDING.values()) if entry is None else (
            [_PENDING[entry]] if entry in _PENDING else [])
    for t in threads:
        t.join()


def _job_ets(meta: dict[str, Any], tables: dict[str, pa.Table]) -> dict[int, Any]:
    """The execution traces of a job entry (:func:`_job_parts`), by rank."""
    if not meta.get("ets"):
        return {}
    # lazy: only a job with execution traces reads them
    from traincast.trace.readers.et import ExecutionTrace

    return {int(r): ExecutionTrace(str(m["schema"]), int(m["pid"]), dict(m["metadata"]),
                                   tables[f"et_nodes_{r}"], tables[f"et_deps_{r}"],
                                   None if m["path"] is None else str(m["path"]),
                                   devices=frozenset(str(d) for d in m["devices"]))
            for r, m in meta["ets"].items()}


def get_job(store: TraceCache, key: str) -> Any:
    """The TraceSet stored under ``key`` (None on a miss or an unreadable entry)."""
    entry = _job_entry(store.root, key)
    wait_for_writes(entry)
    try:
        with pa.OSFile(str(entry), "r") as mm:
            manifest = _read_manifest(mm, key)
            (meta,) = manifest["records"]
            tables = read_deferred(mm, meta, ("shapes",), str(entry))  # read when used
        cache_size.touch(entry)
        ranks = [_rank_info(d) for d in meta["ranks"]]
        share_device_properties(ranks)
        ts = TraceSet(events=tables["events"], collectives=tables["collectives"],
                      shapes=tables["shapes"], iterations=tables["iterations"],
                      ranks={r.rank: r for r in ranks},
                      stream_waits=tables.get("stream_waits"),
                      member_lists=tables["member_lists"],
                      et_nodes=_job_ets(meta, tables), et_links=tables.get("et_links"),
                      warnings=[str(w) for w in meta["warnings"]])
        mark_job(ts, store.root, key)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - any damage to an entry means "assemble again"
        log.debug("traincast cache: ignoring unreadable job entry %s (%s)", entry, exc)
        return None
    return ts
