"""File helpers below every layer: atomic output (a temporary file in the target folder, then
``os.replace``; several files all new or all old), the refusal to write over an input,
append-only JSON-lines records read back, and inputs opened only when they are regular files
(:func:`open_regular`: a FIFO, a device or a socket is refused with
:class:`~traincast.errors.NotRegularFileError` before anything blocks on it).

Outputs that exist and are not regular files (``/dev/null``, ``/dev/full``, a FIFO a reader
holds open, ``/dev/stdout``) are written in place, never renamed over; block devices, sockets
and FIFOs nobody reads are refused (:class:`~traincast.errors.OutputError`).
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from traincast.errors import InputTooLargeError, NotRegularFileError, OutputError

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))


def file_kind(mode: int) -> str:
    """What a ``st_mode`` that is not a regular file's is, in words ("a FIFO", ...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a file"


def check_regular(path: str | Path) -> None:
    """Refuse ``path`` unless it is a regular file (symbolic links followed).

    Raises:
        NotRegularFileError: a FIFO, a device, a socket or a folder.
        OSError: it cannot be stat-ed (missing, no permission).
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"not a regular file ({file_kind(mode)})", path)


def open_regular(path: str | Path) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only, checked on the open descriptor (no race
    with a path swapped for a FIFO after a check): opened non-blocking, so a FIFO without a
    writer does not block, then ``fstat``-ed, then switched back to blocking reads.

    Raises:
        NotRegularFileError: a FIFO, a device, a socket or a folder.
        OSError: it cannot be opened.
    """
    check_regular(path)  # a plain stat first: devices are never opened
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"not a regular file ({file_kind(mode)})", path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise

#: SQLite files that belong to a database beside it (read with it: inputs too)
_SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


#: files of a folder given as input that traincast reads (traces, execution traces, Nsight
#: exports, OTF2 anchors; hidden files are skipped, as the trace discovery does)
INPUT_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite3", ".otf2")


def input_files(inputs: Iterable[str | Path | None]) -> list[Path]:
    """Every file read from ``inputs`` (files or folders; None skipped): a file itself and
    its SQLite sidecars, a folder's non-hidden files ending in :data:`INPUT_SUFFIXES`
    (non-recursive), and all of an OTF2 anchor's archive folder (recursive)."""
    out: list[Path] = []

    def walk(d: Path, depth: int, every: bool) -> None:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            p = Path(e.path)
            try:
                is_dir = e.is_dir()
            except OSError:
                continue
            if is_dir:
                if depth > 0:
                    walk(p, depth - 1, every)
            elif every or (not e.name.startswith(".") and e.name.endswith(INPUT_SUFFIXES)):
                add(p)

    def add(p: Path) -> None:
        out.append(p)
        if p.name.endswith((".sqlite", ".sqlite3")):
            out.extend(p.with_name(p.name + s) for s in _SQLITE_SIDECARS)
        if p.name.endswith(".otf2"):
            arch = p.with_name(p.name[:-5])
            if arch.is_dir():
                walk(arch, 8, True)

    for i in inputs:
        if i is None:
            continue
        p = Path(i)
        if p.is_dir():
            walk(p, 0, False)
        else:
            add(p)
    return out


def refuse_inputs(outputs: Iterable[str | Path | None], inputs: Iterable[str | Path | None],
                  ) -> None:
    """Refuse outputs that would write over an input file (the same path, a link to it, or a
    hard link of it: compared by device and inode, and by resolved path). Outputs that are
    not regular files (devices, FIFOs) are not compared: nothing is replaced there.

    Raises:
        OutputError: an output is one of the inputs (:func:`input_files`).
    """
    outs = []
    for o in outputs:
        if o is None:
            continue
        try:
            st = os.stat(o)
        except OSError:
            continue  # does not exist (or cannot be reached): not an existing input
        if not stat.S_ISREG(st.st_mode):
            continue  # a device or FIFO is written in place, never replaced
        outs.append((Path(o), (st.st_dev, st.st_ino), os.path.realpath(o)))
    if not outs:
        return
    for f in input_files(inputs):
        try:
            st = os.stat(f)
        except OSError:
            continue
        ident, real = (st.st_dev, st.st_ino), os.path.realpath(f)
        for o, o_ident, o_real in outs:
            if o_ident == ident or o_real == real:
                raise OutputError(f"is an input ({f}): not overwritten (choose another output)",
                                  o)


def _in_place(path: Path) -> os.stat_result | None:
    """The stat of an existing output to write in place (not a regular file, or reached
    through ``/proc``: ``/dev/stdout``, ``/dev/fd/N``); None to replace it atomically."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return st
    if os.path.abspath(path).startswith("/proc/") or \
            os.path.realpath(path.parent).startswith("/proc/"):
        return st
    try:
        if path.is_symlink() and os.readlink(path).startswith("/proc/"):
            return st
    except OSError:
        pass
    return None


def _write_in_place(path: Path, st: os.stat_result, data: bytes) -> None:
    mode = st.st_mode
    if stat.S_ISBLK(mode):
        raise OutputError("is a block device: not written (choose a file)", path)
    if stat.S_ISSOCK(mode):
        raise OutputError("is a socket: not written (choose a file)", path)
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    if stat.S_ISFIFO(mode):
        flags |= os.O_NONBLOCK  # no reader: ENXIO now rather than blocking forever
    elif stat.S_ISREG(mode):
        flags |= os.O_TRUNC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if stat.S_ISFIFO(mode) and exc.errno == 6:  # ENXIO
            raise OutputError("is a FIFO that no process reads: not written", path) from None
        raise OutputError(f"cannot write: {exc.strerror}", path) from None
    try:
        if stat.S_ISFIFO(mode):
            os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror}", path) from None
    finally:
        os.close(fd)


def _check_target(path: Path) -> int | None:
    """Checks before replacing ``path``; the mode to give the new file (None: new file)."""
    if not path.parent.is_dir():
        raise OutputError(f"output folder {path.parent} does not exist", path)
    if path.is_dir():
        raise OutputError("is a folder, not a file", path)
    try:
        old_mode: int | None = os.stat(path).st_mode & 0o7777
    except OSError:
        old_mode = None
    if old_mode is not None and not old_mode & 0o222:
        raise OutputError("exists and is read-only: not replaced (make it writable or choose "
                          "another --out)", path)
    return old_mode


def _write_temporary(path: Path, data: bytes, old_mode: int | None) -> str:
    """``data`` into a new temporary file beside ``path`` with the final mode; its name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if old_mode is None:
            umask = os.umask(0)
            os.umask(umask)
            old_mode = 0o666 & ~umask  # mkstemp creates 0600; give the usual file mode
        os.chmod(tmp, old_mode)
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _unlink(p: str | Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def _encode(path: Path, data: bytes, gzip_if_gz: bool) -> bytes:
    if gzip_if_gz and path.name.endswith(".gz"):
        return gzip.compress(data, compresslevel=5)
    return data


def atomic_write(path: str | Path, data: bytes, *, gzip_if_gz: bool = True,
                 inputs: Iterable[str | Path | None] = ()) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    ``.gz`` paths are gzip-compressed when ``gzip_if_gz``. ``inputs`` are files or folders
    the output must not be (:func:`refuse_inputs`).

    An existing file keeps its permissions; a read-only one (no write bit for anyone) is not
    replaced, as a shell redirect would refuse it (checked on the mode bits, so also for
    root, who may write anything). An existing output that is not a regular file (a
    character device, a FIFO with a reader) is written in place, as a shell redirect would.

    Raises:
        OutputError: the folder does not exist, is not writable, ``path`` is a folder, an
            existing read-only file, an input, a block device, a socket, a FIFO nobody
            reads, or the device is full.
    """
    path = Path(path)
    refuse_inputs([path], inputs)
    st = _in_place(path)
    if st is not None:
        _write_in_place(path, st, _encode(path, data, gzip_if_gz))
        return path
    old_mode = _check_target(path)
    data = _encode(path, data, gzip_if_gz)
    tmp = None
    try:
        tmp = _write_temporary(path, data, old_mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror}", path) from None
    finally:
        if tmp is not None:
            _unlink(tmp)
    return path


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`), at most
    ``max_bytes`` of them.

    Raises:
        NotRegularFileError: a FIFO, a device, a socket or a folder.
        InputTooLargeError: the file holds more than ``max_bytes`` bytes.
        OSError: it cannot be read.
    """
    with open_regular(path) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputTooLargeError(f"larger than the limit of {max_bytes:,} bytes", path)
    return data


def atomic_write_many(items: Iterable[tuple[str | Path, bytes]], *, gzip_if_gz: bool = True,
                      inputs: Iterable[str | Path | None] = ()) -> list[Path]:
    """Write several files so that readers see all the old ones or all the new ones: every
    file goes to a temporary beside its target first (on any failure, the temporaries are
    removed and no target changes), then all are renamed; a rename failing midway puts the
    old files back (from hard links taken before the first rename).

    Outputs that are not regular files are written in place after the others, as
    :func:`atomic_write` does. Raises :class:`~traincast.errors.OutputError` as
    :func:`atomic_write`.
    """
    todo = [(Path(p), d) for p, d in items]
    refuse_inputs([p for p, _ in todo], inputs)
    in_place = []
    staged: list[tuple[Path, bytes, int | None]] = []
    for p, d in todo:
        st = _in_place(p)
        if st is not None:
            in_place.append((p, st, _encode(p, d, gzip_if_gz)))
        else:
            staged.append((p, _encode(p, d, gzip_if_gz), _check_target(p)))
    temps: list[str] = []
    backups: dict[Path, str | None] = {}
    done: list[Path] = []
    current = staged[0][0] if staged else None
    try:
        for p, d, mode in staged:
            current = p
            temps.append(_write_temporary(p, d, mode))
        for p, _, _ in staged:
            current = p
            backups[p] = _hard_link_backup(p)
        for (p, _, _), tmp in zip(staged, temps, strict=True):
            current = p
            os.replace(tmp, p)
            done.append(p)
    except OSError as exc:
        _roll_back(done, backups)
        raise OutputError(f"cannot write: {exc.strerror}; no file changed", current) from None
    finally:
        for t in temps:
            _unlink(t)
        for b in backups.values():
            if b is not None:
                _unlink(b)
    for p, st, d in in_place:
        _write_in_place(p, st, d)
    return [p for p, _ in todo]


def _hard_link_backup(path: Path) -> str | None:
    """A hard link to an existing ``path`` (to restore it), or None (no file, or the file
    system has no hard links)."""
    if not path.exists():
        return None
    tmp = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.old")
    try:
        os.link(path, tmp)
    except OSError:
        return None
    return tmp


def _roll_back(done: list[Path], backups: dict[Path, str | None]) -> None:
    for p in done:
        b = backups.get(p)
        try:
            if b is None:
                os.unlink(p)  # it did not exist before
            else:
                os.replace(b, p)
                backups[p] = None
        except OSError:
            pass


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one per line; a torn last line (no newline:
    an interrupted append) ends the read, undecodable lines and non-objects are skipped, and
    a missing file reads as empty."""
    out: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
    except FileNotFoundError:
        pass
    return out
