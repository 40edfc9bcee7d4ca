"""A parsed record on its way from a parse worker to the loading process.

:class:`Shipped` holds one reader record (:class:`~traincast.trace.readers.base.TraceFile`)
and, when the worker computed it, the record's
:class:`~traincast.trace.rank_part.RankPart`, whose events then arrive as the record's
too (the same rows with ``rank`` and ``iteration`` set: the assembly of the record gives
the same part from them). Pickled, its Arrow tables travel as Arrow IPC streams in one
buffer, read back without a copy: pickling every column's buffers and types costs ~3x
more on both sides. Everything else pickles as usual.

With a spool folder (:func:`spool`: a private folder in ``/dev/shm``, memory that a file
system serves), the buffer is written to a file there instead of the pickle, and the
receiving process maps the file and deletes its name at once: the tables are read in place,
and no copy of them goes through the pipe between the processes (three copies there, and
the receiver's share of it competed with the workers for the cores). A file that cannot be
written (a full or missing folder) is sent in the pickle. The loading process removes its
spool folder when the parse ends; :func:`spool` first deletes the folders of processes
that ended without (killed).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from traincast.trace.rank_part import RankPart, pack_part, unpack_part
from traincast.trace.readers.base import TraceFile

__all__ = ["Shipped", "pack_tables", "spool", "unpack_tables"]

#: where spool folders are made: a file system in memory (Linux); elsewhere no spool
SPOOL_ROOT = Path("/dev/shm")
_PREFIX = "traincast-parse-"


def spool() -> Path | None:
    """A new private spool folder (``/dev/shm/traincast-parse-<pid>-*``), or None where
    there is no such file system; first deletes those left by processes that ended."""
    if not SPOOL_ROOT.is_dir() or not os.access(SPOOL_ROOT, os.W_OK | os.X_OK):
        return None
    _sweep()
    try:
        return Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=SPOOL_ROOT))
    except OSError:
        return None


def _sweep() -> None:
    """Delete the spool folders of this user whose process no longer runs."""
    try:
        entries = list(os.scandir(SPOOL_ROOT))
    except OSError:
        return
    uid = os.getuid()
    for e in entries:
        if not e.name.startswith(_PREFIX):
            continue
        try:
            pid = int(e.name[len(_PREFIX):].split("-", 1)[0])
            if e.stat(follow_symlinks=False).st_uid != uid or not e.is_dir(
                    follow_symlinks=False):
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(e.path, ignore_errors=True)
        except (OSError, ValueError):  # alive under another user, or not ours to judge
            continue


def pack_tables(tables: list[pa.Table]) -> tuple[pa.Buffer, list[int]]:
    """``tables`` as consecutive Arrow IPC streams in one buffer, and each stream's size."""
    sink = pa.BufferOutputStream()
    sizes = []
    for t in tables:
        start = sink.tell()
        with pa.ipc.RecordBatchStreamWriter(sink, t.schema, options=_IPC_OPTIONS) as w:
            w.write_table(t)
        sizes.append(sink.tell() - start)
    return sink.getvalue(), sizes


#: the IPC options of :func:`pack_tables`, made once: the current format (the streams go from
#: a parse worker to its own loading process, never to an old reader)
_IPC_OPTIONS = pa.ipc.IpcWriteOptions()


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

    __slots__ = ("part", "record", "spool")

    def __init__(self, record: TraceFile, part: RankPart | None = None,
                 spool: str | None = None) -> None:
        self.record = record
        self.part = part
        self.spool = spool  # a spool folder (:func:`spool`) for the tables, or None

    def __getstate__(self) -> tuple[Any, ...]:
        rec = self.record
        fields = {f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)}
        part = self.part
        if part is not None:  # its events stand for the record's (rank and iteration set)
            fields["events"] = part.events
            part = pack_part(part)
        names = [n for n, v in fields.items() if isinstance(v, pa.Table)]
        groups = []
        # the tables a TraceSet keeps (shapes, stream waits) apart from those it copies
        # (events) or drops: a mapped file stays mapped while any of its tables lives
        for kept in (False, True):
            these = [n for n in names if (n in _KEPT) == kept]
            buf, sizes = pack_tables([fields.pop(n) for n in these])
            where = _spooled(buf, self.spool) if self.spool is not None else None
            groups.append((these, buf if where is None else where, sizes))
        return type(rec), fields, groups, part

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        cls, fields, groups, part = state
        for names, buf, sizes in groups:
            if isinstance(buf, str):  # a spool file: mapped, its name deleted at once
                with pa.memory_map(buf) as mm:
                    os.unlink(buf)
                    buf = mm.read_buffer()
            fields.update(zip(names, unpack_tables(buf, sizes), strict=True))
        self.record = cls(**fields)
        if part is not None:
            part = unpack_part(part)
            part.events = self.record.events
        self.part = part


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

#: record tables that the assembled TraceSet keeps (as parts of its own tables)
_KEPT = frozenset({"shapes", "stream_waits"})


_NAMES: list[Any] = []  # [pid, this process's random prefix, counter]


def _spool_name() -> str:
    """A new file name for this process's spool files: a random prefix drawn once per
    process (``uuid4``, whose system call costs more than a small write) and a count."""
    if not _NAMES or _NAMES[0] != os.getpid():  # a forked child draws its own prefix
        _NAMES[:] = [os.getpid(), uuid.uuid4().hex, itertools.count()]
    return f"{_NAMES[1]}-{next(_NAMES[2])}"


def _spooled(buf: pa.Buffer, folder: str) -> str | None:
    """``buf`` written to a new file in ``folder``: its path, or None if it cannot be."""
    path = os.path.join(folder, _spool_name())
    try:  # os calls: a Python file object costs more than the write of a small table
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666)
        try:
            view = memoryview(buf).cast("B")
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    return path
