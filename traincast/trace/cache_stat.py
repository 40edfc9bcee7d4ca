"""Whole-job cache entries found by ``stat`` alone: ``<stat key>.stat`` beside the job
entries of :mod:`traincast.trace.cache` records the job key of the files as ``stat`` sees
them (:func:`stat_key`), so a load of files not written since reads the job entry after one
``stat`` per file instead of hashing every file's bytes (a miss hashes as before). Each
record is 40 hex digits, written atomically; a record that is unreadable, malformed or whose
job entry is gone is a miss.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from traincast.trace import cache as C
from traincast.trace.cache_key import job_key_at, stat_entry, stat_key

__all__ = ["job_key_by_stat", "put_stat_key", "stat_key"]


def job_key_by_stat(store: C.TraceCache, skey: str) -> str | None:
    """The :func:`~traincast.trace.cache.job_key` recorded for :func:`stat_key` ``skey`` (None: none recorded)."""
    return job_key_at(store.root, skey)


def put_stat_key(store: C.TraceCache, skey: str, jkey: str) -> bool:
    """Record that the files of :func:`stat_key` ``skey`` have job key ``jkey`` (atomically;
    False if it could not be written): a later load of unchanged files finds the job entry
    with one ``stat`` per file instead of hashing every file's bytes."""
    entry = stat_entry(store.root, skey)
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
