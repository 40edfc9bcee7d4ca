"""Whole-job cache entries found by ``stat`` alone: ``<stat key>.stat`` beside the job
entries of :mod:`traincast.trace.cache` records the job key of the files as ``stat`` sees
them (:func:`stat_key`), so a load of files not written since reads the job entry after one
``stat`` per file instead of hashing every file's bytes (a miss hashes as before). Each
record is 40 hex digits, written atomically; a record that is unreadable, malformed or whose
job entry is gone is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traincast.trace import cache as C

__all__ = ["job_key_by_stat", "put_stat_key", "stat_key"]


def stat_key(paths: Sequence[Path], options: dict[str, Any]) -> str | None:
    """Key of what the files of a job look like to ``stat`` (device, inode, size, change and
    modification times in ns, path; an SQLite file's ``-wal`` too) plus the options and
    code of :func:`~traincast.trace.cache.job_key`; None when a file cannot be stat'ed. A file rewritten in any way changes its ``st_ctime_ns``
    (no call sets it back), so equal keys mean files not written since."""
    h = hashlib.blake2b(digest_size=20)
    h.update(f"stat|{C._code_fingerprint()}|".encode())
    C._hash_job_code(h)
    try:
        for p in paths:
            st = os.stat(p)
            h.update(f"{p}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
                     f"{st.st_ctime_ns}".encode())
            try:  # an SQLite file's write-ahead log is part of its content (file_key)
                st = os.stat(p.with_name(p.name + "-wal"))
                h.update(f"|wal {st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
                         f"{st.st_ctime_ns}".encode())
            except FileNotFoundError:
                pass
            h.update(b"\n")
    except OSError:
        return None
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _stat_entry(root: Path, skey: str) -> Path:
    return root / f"v{C.CACHE_SCHEMA}" / "jobs" / skey[:2] / f"{skey}.stat"


def job_key_by_stat(store: C.TraceCache, skey: str) -> str | None:
    """The :func:`~traincast.trace.cache.job_key` recorded for :func:`stat_key` ``skey`` (None: none recorded)."""
    try:
        text = _stat_entry(store.root, skey).read_bytes()
    except OSError:
        return None
    key = text.decode("ascii", "replace").strip()
    return key if len(key) == 40 and all(c in "0123456789abcdef" for c in key) else None


def put_stat_key(store: C.TraceCache, skey: str, jkey: str) -> bool:
    """Record that the files of :func:`stat_key` ``skey`` have job key ``jkey`` (atomically;
    False if it could not be written): a later load of unchanged files finds the job entry
    with one ``stat`` per file instead of hashing every file's bytes."""
    entry = _stat_entry(store.root, skey)
    tmp: Path | None = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{skey[:8]}-{C._OWNER}-", dir=entry.parent)
        tmp = Path(name)
        os.fchmod(fd, 0o666 & ~C._umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(jkey.encode("ascii"))
        os.replace(tmp, entry)
        tmp = None
        return True
    except OSError as exc:
        C.log.debug("traincast cache: cannot write %s (%s)", entry, exc)
        return False
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
