"""Execution traces in the parse cache: the node and data-dependency tables of
:func:`~traincast.trace.readers.et.read_execution_trace`, keyed like a trace file
(:func:`~traincast.trace.cache.file_key`: content, size, traincast version, reader code) and
stored in the same entry layout under ``<root>/v<CACHE_SCHEMA>/et/``. A missing or damaged
entry means "read the file again"; an entry that cannot be written is skipped (see
:mod:`traincast.trace.cache`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa

from traincast.trace import cache as C
from traincast.trace import cache_size
from traincast.trace.readers.et import ExecutionTrace, read_execution_trace

__all__ = ["cached_et", "read_et_cached"]

log = logging.getLogger(__name__)


def _entry(root: Path, key: str) -> Path:
    return root / f"v{C.CACHE_SCHEMA}" / "et" / key[:2] / f"{key}.arrows"


def cached_et(path: Path, store: C.TraceCache) -> ExecutionTrace | None:
    """The ET of ``path`` from its entry in ``store``, None when there is none (or it is
    damaged, or ``path`` cannot be read to find its key); the file itself is not read."""
    try:
        key = C.file_key(path)
    except OSError:
        return None
    return _read_entry(_entry(store.root, key), key, path)


def _read_entry(entry: Path, key: str, path: Path) -> ExecutionTrace | None:
    try:
        with pa.OSFile(str(entry), "r") as mm:
            (meta,) = C._read_manifest(mm, key)["records"]
            tables = C._read_tables(mm, meta)
        et = ExecutionTrace(str(meta["schema"]), int(meta["pid"]), dict(meta["metadata"]),
                            tables["nodes"], tables["data_deps"], str(path),
                            devices=frozenset(meta["devices"]))
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - any damage to an entry means "read again"
        log.debug("traincast cache: ignoring unreadable entry %s (%s)", entry, exc)
        return None
    cache_size.touch(entry)
    return et


def read_et_cached(path: Path, store: C.TraceCache | None) -> ExecutionTrace:
    """:func:`~traincast.trace.readers.et.read_execution_trace` of ``path`` through the cache
    ``store`` (None: no cache). Raises what the reader raises."""
    if store is None:
        return read_execution_trace(path)
    try:
        key = C.file_key(path)
    except OSError:  # unreadable: the reader says why
        return read_execution_trace(path)
    entry = _entry(store.root, key)
    hit = _read_entry(entry, key, path)
    if hit is not None:
        return hit
    et = read_execution_trace(path)
    meta = {"type": "et", "tables": {"nodes": None, "data_deps": None}, "schema": et.schema,
            "pid": et.pid, "metadata": et.metadata, "devices": sorted(et.devices)}
    if C._json_exact(meta) and C._write_entries(
            entry, key, [{"nodes": et.nodes, "data_deps": et.data_deps}], [meta]):
        C._maybe_trim(store.root)
    return et
