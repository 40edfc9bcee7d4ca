"""The parse cache's size: what it holds (:func:`info`), a cap on its bytes (:func:`max_bytes`,
:func:`trim`) and the use times that decide what goes first.

The cap is ``$TRAINCAST_CACHE_MAX`` (bytes, or with a ``K``/``M``/``G``/``T`` suffix in powers
of 1,024; ``off`` or ``0`` for none), default :data:`DEFAULT_MAX_BYTES`. After a process writes
entries, the folder is trimmed to the cap, least recently used entries first (an entry's
modification time is set when it is written and when a load reads it; a trace's entry and a
whole job's entry and a job's stored execution graph, :mod:`traincast.graph.stored`, count
alike); entries of another cache schema (``v<N>`` folders of an older
traincast) are deleted first, as nothing reads them. Entries being written (hidden temporaries)
are never touched here (:func:`traincast.trace.cache.sweep_stale_temporaries` owns them).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from traincast.errors import ParameterError

__all__ = ["DEFAULT_MAX_BYTES", "info", "max_bytes", "touch", "trim"]

#: default cap on the cache folder's bytes (a 1,024-rank job takes ~0.1-0.2 GiB, its stored
#: execution graph ~0.1 GiB more)
DEFAULT_MAX_BYTES = 2 * 2**30
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_OFF = ("off", "none", "false", "0")


def max_bytes() -> int | None:
    """The cap from ``$TRAINCAST_CACHE_MAX`` (None: no cap).

    Raises:
        ParameterError: a value that is not a size (``500M``, ``2G``, ``1073741824``, ``off``).
    """
    env = os.environ.get("TRAINCAST_CACHE_MAX")
    if env is None or not env.strip():
        return DEFAULT_MAX_BYTES
    if env.strip().lower() in _OFF:
        return None
    m = _SIZE.match(env)
    if not m:
        raise ParameterError(f"TRAINCAST_CACHE_MAX={env!r}: not a size (e.g. 500M, 2G, off)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _entries(root: Path, schema: int) -> tuple[list[tuple[float, int, Path]], list[Path]]:
    """(mtime, bytes, path) of this schema's entries; folders of other schemas."""
    current = root / f"v{schema}"
    others = [d for d in root.glob("v*") if d.is_dir() and d != current]
    out = []
    for pattern in ("*.arrows", "*.graph"):
        for f in current.rglob(pattern):
            try:
                st = f.stat()
            except OSError:  # deleted meanwhile by another process
                continue
            out.append((st.st_mtime, st.st_size, f))
    return out, others


def _tree_bytes(d: Path) -> int:
    n = 0
    for f in d.rglob("*"):
        try:
            if f.is_file():
                n += f.stat().st_size
        except OSError:
            pass
    return n


def touch(entry: Path) -> None:
    """Mark ``entry`` as used now (the trim deletes the least recently used first)."""
    try:
        os.utime(entry)
    except OSError:  # read-only or shared cache owned by another user: no harm
        pass


def trim(root: Path, cap: int | None, schema: int) -> tuple[int, int]:
    """Delete entries of other schemas, then the least recently used ones until the folder
    holds at most ``cap`` bytes; returns (entries deleted, bytes freed). ``cap`` None: only the
    other schemas' folders go."""
    freed = deleted = 0
    entries, others = _entries(root, schema)
    for d in others:
        n = _tree_bytes(d)
        shutil.rmtree(d, ignore_errors=True)
        freed += n
        deleted += 1
    if cap is None:
        return deleted, freed
    total = sum(size for _, size, _ in entries)
    for _, size, f in sorted(entries, key=lambda e: e[0]):
        if total <= cap:
            break
        try:
            f.unlink()
        except OSError:
            continue
        total -= size
        freed += size
        deleted += 1
    return deleted, freed


def info(root: Path | None, schema: int) -> dict[str, Any]:
    """What the cache folder holds: ``folder``, ``exists``, ``trace_entries`` (one per trace
    file), ``job_entries`` (one per assembled job), ``graph_entries`` (execution graphs of
    jobs, :mod:`traincast.graph.stored`), ``bytes``, ``other_schema_bytes`` (entries
    no current load reads), ``max_bytes`` (the cap, None for none), ``oldest_use`` and
    ``newest_use`` (POSIX seconds, None when empty)."""
    cap = max_bytes()
    if root is None:
        return {"folder": None, "exists": False, "trace_entries": 0, "job_entries": 0,
                "graph_entries": 0,
                "bytes": 0, "other_schema_bytes": 0, "max_bytes": cap, "oldest_use": None,
                "newest_use": None}
    entries, others = _entries(root, schema) if root.is_dir() else ([], [])
    jobs = [e for e in entries if "jobs" in e[2].parts]
    links = [e for e in entries if "et-link" in e[2].parts]  # ET links: part of their file's
    graphs = [e for e in entries if e[2].suffix == ".graph"]
    times = [t for t, _, _ in entries]
    return {"folder": str(root), "exists": root.is_dir(),
            "trace_entries": len(entries) - len(jobs) - len(links) - len(graphs),
            "job_entries": len(jobs), "graph_entries": len(graphs),
            "bytes": sum(s for _, s, _ in entries),
            "other_schema_bytes": sum(_tree_bytes(d) for d in others),
            "max_bytes": cap, "oldest_use": min(times) if times else None,
            "newest_use": max(times) if times else None}
