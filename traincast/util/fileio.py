"""File helpers below every layer: atomic output (a temporary file in the target folder, then
``os.replace``), append-only JSON-lines records read back, and inputs opened only when they
are regular files (:func:`open_regular`: a FIFO, a device or a socket is refused with
:class:`~traincast.errors.NotRegularFileError` before anything blocks on it)."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import stat
import tempfile
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


def atomic_write(path: str | Path, data: bytes, *, gzip_if_gz: bool = True) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    ``.gz`` paths are gzip-compressed when ``gzip_if_gz``.

    An existing file keeps its permissions; a read-only one (no write bit for anyone) is not
    replaced, as a shell redirect would refuse it (checked on the mode bits, so also for
    root, who may write anything).

    Raises:
        OutputError: the folder does not exist, is not writable, ``path`` is a folder, or an
            existing read-only file.
    """
    path = Path(path)
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
    if gzip_if_gz and path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=5)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if old_mode is None:
            umask = os.umask(0)
            os.umask(umask)
            old_mode = 0o666 & ~umask  # mkstemp creates 0600; give the usual file mode
        os.chmod(tmp, old_mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror}", path) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
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
