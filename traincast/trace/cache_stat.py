"""Whole-job cache entries found by ``stat`` alone: ``<stat key>.stat`` beside the job
entries of :mod:`traincast.trace.cache` records the job key of the files as ``stat`` sees
them (:func:`stat_key`), so a load of files not written since reads the job entry after one
``stat`` per file instead of hashing every file's bytes (a miss hashes as before). Each
record is 40 hex digits, written atomically; a record that is unreadable, malformed or whose
job entry is gone is a miss.

:func:`put_paths_key` records, before a job entry is written, that one may exist for the
paths and options of a job (:func:`~traincast.trace.cache_key.paths_key`), and
:func:`has_paths_key` tells whether one was recorded: a load whose stat key misses and
whose paths have no record can find no job entry by content (:func:`no_entry_for`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from traincast.trace import cache as C
from traincast.trace.cache_key import job_key_at, paths_entry, stat_entry, stat_key

__all__ = ["has_paths_key", "job_key_by_stat", "no_entry_for", "put_paths_key", "put_stat_key",
           "stat_key"]


def job_key_by_stat(store: C.TraceCache, skey: str) -> str | None:
    """The :func:`~traincast.trace.cache.job_key` recorded for :func:`stat_key` ``skey`` (None: none recorded)."""
    return job_key_at(store.root, skey)


def put_stat_key(store: C.TraceCache, skey: str, jkey: str) -> bool:
    """Record that the files of :func:`stat_key` ``skey`` have job key ``jkey`` (atomically;
    False if it could not be written): a later load of unchanged files finds the job entry
    with one ``stat`` per file instead of hashing every file's bytes."""
    return _put_record(stat_entry(store.root, skey), jkey)


def put_paths_key(store: C.TraceCache, pkey: str, jkey: str) -> bool:
    """Record that a job entry (key ``jkey``) is stored for the paths and options of
    :func:`~traincast.trace.cache_key.paths_key` ``pkey`` (atomically; False if it could
    not be written)."""
    return _put_record(paths_entry(store.root, pkey), jkey)


def has_paths_key(store: C.TraceCache, pkey: str) -> bool:
    """Whether a job entry was ever recorded for paths key ``pkey`` (:func:`put_paths_key`);
    True too when that cannot be told (the record cannot be stat'ed but may exist)."""
    try:
        os.stat(paths_entry(store.root, pkey))
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def no_entry_for(store: C.TraceCache, files: list[Path], pkey: str) -> bool:
    """Whether no entry of the cache can hold ``files`` (regular files, as
    :func:`~traincast.trace.load.discover` gives them) loaded with the paths key ``pkey``:
    no job entry was recorded for their paths and options (:func:`has_paths_key`), so none
    can be found by their content; the cache holds no per-file entry at all; and this
    process may read every file (an unreadable one is left to the usual path, which
    hashes first). False where that cannot be told."""
    if has_paths_key(store, pkey):
        return False
    try:
        with os.scandir(store.root / f"v{C.CACHE_SCHEMA}") as top:
            subdirs = [e.path for e in top if len(e.name) == 2 and e.is_dir()
                       and all(c in "0123456789abcdef" for c in e.name)]  # not et/
    except FileNotFoundError:
        subdirs = []
    except OSError:
        return False
    for d in subdirs:  # a per-file entry's folder (<key[:2]>), maybe empty once trimmed
        try:
            with os.scandir(d) as it:
                if next(it, None) is not None:
                    return False
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return all(os.access(f, os.R_OK) for f in files)


def _put_record(entry: Path, jkey: str) -> bool:
    """Write ``jkey`` to ``entry`` atomically (a temporary beside it, then a rename)."""
    tmp: Path | None = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{entry.stem[:8]}-{C._OWNER}-",
                                    dir=entry.parent)
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
