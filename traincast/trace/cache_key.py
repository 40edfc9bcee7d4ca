"""Keys and folders of the parse cache (:mod:`traincast.trace.cache`) that need none of its
heavy imports (no Arrow, no readers): the cache folder, the schema number, the fingerprint of
the code that decides what an entry holds, and the stat key of a job
(:mod:`traincast.trace.cache_stat`) with the record it points to. A command can then tell,
before it imports the loader, whether a load of a job would parse it (no job entry recorded
for its files as ``stat`` sees them: :mod:`traincast.trace.prestart`).

Stat key: blake2b (160 bits) of ``stat|<code fingerprint>|``, the job code's source files
(:data:`JOB_CODE_FILES`), then per file its path, device, inode, size, modification and
change times in ns (an SQLite file's ``-wal`` too), then the load options as sorted JSON.
Its record is ``<root>/v<CACHE_SCHEMA>/jobs/<skey[:2]>/<skey>.stat``: the job key, 40 hex
digits. A path that cannot be stat'ed gives no key (None); an unreadable or malformed record
is no record (None).

Paths key: the same hash over ``paths|<code fingerprint>|``, the job code and the paths and
options alone (no stat). Its record ``<root>/v<CACHE_SCHEMA>/jobs/<pkey[:2]>/<pkey>.paths``
(the job key of the last entry stored for them) is written with every job entry of these
paths and options of a job without execution traces (as the entry's writing starts; the
only loads that look for it): without it no job entry of them was stored by this job code,
so a load that misses the stat key need not hash the files before parsing them to look for
one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from traincast.errors import ParameterError
from traincast.version import __version__

__all__ = ["CACHE_SCHEMA", "JOB_ONLY_MIN_FILES", "cache_dir", "code_fingerprint", "hash_job_code", "job_entry",
           "job_key_at", "job_of", "link_code_fingerprint", "mark_job", "marker_text", "paths_entry", "paths_key",
           "stat_key"]

#: bump when the entry layout or the meaning of a cached field changes
CACHE_SCHEMA = 4
_OFF = {"", "0", "off", "none", "false", "no"}
#: source files whose code decides what a reader returns (fingerprinted into the keys)
CODE_FILES = ("readers/*.py", "arrow.py", "schema.py", "families.py", "cache.py",
              "cache_read.py")
#: source files whose code decides how records become a TraceSet (job entries' key)
#: (schema.py and cache.py too: the tables a job entry holds and their columns)
JOB_CODE_FILES = ("load.py", "assemble.py", "rank_part.py", "iterations.py", "collectives.py",
                  "traceset.py", "schema.py", "cache.py", "narrow.py", "cache_job.py")
_HERE = Path(__file__).resolve().parent
#: files from which a load that stores a whole-job entry stores no per-file entries: one
#: small file written per trace costs ~1-2.5 ms each (1,024 ranks: 1.3 s of the workers'
#: time), and only a load of the same files with other options would reuse them
JOB_ONLY_MIN_FILES = 64


def cache_dir() -> Path | None:
    """The default cache folder, or None when ``TRAINCAST_CACHE_DIR`` disables caching."""
    env = os.environ.get("TRAINCAST_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in _OFF:
            return None
        try:
            return Path(env).expanduser()
        except RuntimeError as exc:  # ~user of a user that does not exist
            raise ParameterError(f"TRAINCAST_CACHE_DIR={env!r}: {exc}") from None
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    except RuntimeError as exc:
        raise ParameterError(f"XDG_CACHE_HOME={xdg!r}: {exc} (set TRAINCAST_CACHE_DIR)"
                             if xdg else f"no home directory for the trace cache ({exc}); set "
                             "TRAINCAST_CACHE_DIR") from None
    return base / "traincast"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Version, :data:`CACHE_SCHEMA` and the reader code (:data:`CODE_FILES`), hashed."""
    h = hashlib.blake2b(digest_size=10)
    h.update(f"{__version__}|{CACHE_SCHEMA}".encode())
    for pattern in CODE_FILES:
        for f in sorted(_HERE.glob(pattern)):
            h.update(f.name.encode())
            try:
                h.update(f.read_bytes())
            except OSError:  # pragma: no cover - e.g. a zipped install: version only
                pass
    return h.hexdigest()


@lru_cache(maxsize=1)
def link_code_fingerprint() -> str:
    """blake2b (80 bits, hex) of the source of every module under ``traincast/trace/`` (the
    readers, the assembly, the linking): what decides a link, and which ET links a job
    entry holds (:func:`traincast.trace.cache.job_key` of a job with execution traces)."""
    h = hashlib.blake2b(digest_size=10)
    for pattern in ("*.py", "readers/*.py", "link/*.py"):
        for f in sorted(_HERE.glob(pattern)):
            h.update(f"{pattern}/{f.name}".encode())
            try:
                h.update(f.read_bytes())
            except OSError:  # pragma: no cover - e.g. a zipped install: the version decides
                pass
    return h.hexdigest()


def hash_job_code(h: Any) -> None:
    """Feed the assembly code (:data:`JOB_CODE_FILES`) to the hash ``h``."""
    for name in JOB_CODE_FILES:
        try:
            h.update((_HERE / name).read_bytes())
        except OSError:  # pragma: no cover - a zipped install: the version decides
            pass


def marker_text(marker: Any) -> str | None:
    """An ``iteration_marker`` (text or compiled pattern) as text, for cache keys."""
    if marker is None:
        return None
    return str(getattr(marker, "pattern", marker))


def stat_key(paths: Sequence[Path], options: dict[str, Any]) -> str | None:
    """Key of what the files of a job look like to ``stat`` (device, inode, size, change and
    modification times in ns, path; an SQLite file's ``-wal`` too) plus the options and
    code of :func:`~traincast.trace.cache.job_key`; None when a file cannot be stat'ed. A
    file rewritten in any way changes its ``st_ctime_ns`` (no call sets it back), so equal
    keys mean files not written since."""
    h = hashlib.blake2b(digest_size=20)
    h.update(f"stat|{code_fingerprint()}|".encode())
    hash_job_code(h)
    try:
        for p in paths:
            st = os.stat(p)
            h.update(f"{p}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
                     f"{st.st_ctime_ns}".encode())
            try:  # an SQLite file's write-ahead log is part of its content (file_key)
                st = os.stat(f"{p}-wal")  # p.with_name(p.name + "-wal"), no Path made
                h.update(f"|wal {st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
                         f"{st.st_ctime_ns}".encode())
            except FileNotFoundError:
                pass
            h.update(b"\n")
    except OSError:
        return None
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()


def paths_key(paths: Sequence[Path], options: dict[str, Any]) -> str:
    """Key of the paths of a job and the options and code of
    :func:`~traincast.trace.cache.job_key`, without their contents (module docstring)."""
    h = hashlib.blake2b(digest_size=20)
    h.update(f"paths|{code_fingerprint()}|".encode())
    hash_job_code(h)
    h.update(json.dumps([[str(p) for p in paths], options], sort_keys=True,
                        default=str).encode())
    return h.hexdigest()


def paths_entry(root: Path, pkey: str) -> Path:
    """Where the record of paths key ``pkey`` lies in the cache at ``root``."""
    return root / f"v{CACHE_SCHEMA}" / "jobs" / pkey[:2] / f"{pkey}.paths"


def stat_entry(root: Path, skey: str) -> Path:
    """Where the record of stat key ``skey`` lies in the cache at ``root``."""
    return root / f"v{CACHE_SCHEMA}" / "jobs" / skey[:2] / f"{skey}.stat"


def job_entry(root: Path, key: str) -> Path:
    """Where the job entry of job key ``key`` lies in the cache at ``root``."""
    return root / f"v{CACHE_SCHEMA}" / "jobs" / key[:2] / f"{key}.arrows"


#: the key of :attr:`TraceSet.memo` that :func:`mark_job` writes
_JOB_MEMO = "cache_job"


def _job_tables(ts: Any) -> tuple[Any, ...]:
    """The objects of ``ts`` that a job entry holds and derived results read (not the
    shapes, which a load may swap for their compressed blocks); the execution traces' nodes
    (a dict filled only while they are linked) and links."""
    return (ts.events, ts.collectives, ts.iterations, ts.stream_waits, ts.member_lists,
            ts.ranks, ts.et_nodes, ts.et_links)


def mark_job(ts: Any, root: Path, key: str) -> None:
    """Record on the TraceSet ``ts`` (its ``memo``) that it is the job of key ``key`` in
    the cache at ``root``, as loaded or assembled (:func:`job_of` reads it): its job entry's
    key (:func:`~traincast.trace.cache.job_key`)."""
    ts.memo[_JOB_MEMO] = (_job_tables(ts), root, key)


def job_of(ts: Any) -> tuple[Path, str] | None:
    """(cache folder, job key) of the TraceSet ``ts`` when :func:`mark_job` marked it and
    its tables are still the ones it had then (a table replaced, execution traces linked
    since: None, and the mark, which holds the tables it was made with, is dropped), else
    None."""
    hit = ts.memo.get(_JOB_MEMO)
    if hit is None:
        return None
    tables, root, key = hit
    now = _job_tables(ts)
    if any(a is not b for a, b in zip(tables, now, strict=True)):
        ts.memo.pop(_JOB_MEMO, None)  # (the mark holds the old tables: let them go)
        return None
    return root, key


def job_key_at(root: Path, skey: str) -> str | None:
    """The job key recorded for stat key ``skey`` in the cache at ``root`` (None: none)."""
    try:
        text = stat_entry(root, skey).read_bytes()
    except OSError:
        return None
    key = text.decode("ascii", "replace").strip()
    return key if len(key) == 40 and all(c in "0123456789abcdef" for c in key) else None
