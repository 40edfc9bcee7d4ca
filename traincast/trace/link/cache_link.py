"""ET links in the parse cache: the ``(node_id, event)`` pairs that
:func:`~traincast.trace.link.match.link_execution_trace` finds between one rank's execution
trace and its Kineto events, stored under ``<root>/v<CACHE_SCHEMA>/et-link/`` in the entry
layout of :mod:`traincast.trace.cache` (table ``links``: int64 ``node_id``, int64 ``event``,
the event's row within its rank).

Key: blake2b (160 bits) of the ET file's content key and the Kineto file's
(:func:`~traincast.trace.cache.file_key`: bytes, size, traincast version, reader code), the
rank, and the source of every module under ``traincast/trace/`` (readers, assembly, linking):
the link reads only the rank's events (names, kinds, devices, times, threads, ids), which
those decide. A file whose events live in other files (OTF2) or that cannot be read is not
cached. Only links that passed the match score are stored; a refused pair is linked (and
refused) again on every load. A missing, damaged or inconsistent entry (rows outside the
rank's events) means "link again"; an entry that cannot be written is skipped.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa

from traincast.errors import TraincastError
from traincast.trace import arrow as A
from traincast.trace import cache as C
from traincast.trace import cache_size
from traincast.trace.cache_key import link_code_fingerprint
from traincast.trace.link.match import link_execution_trace
from traincast.trace.readers.et import ExecutionTrace
from traincast.trace.readers.otf2 import is_otf2

__all__ = ["link_cached", "link_code_fingerprint"]

log = logging.getLogger(__name__)


def link_key(et_path: Path, kineto_path: Path | None, rank: int) -> str | None:
    """Cache key of the link of ``et_path`` to rank ``rank`` of ``kineto_path`` (None: not
    cacheable, see the module docstring)."""
    if kineto_path is None or is_otf2(kineto_path):
        return None
    try:
        et_key, kineto_key = C.file_key(et_path), C.file_key(kineto_path)
    except (OSError, TraincastError):  # gone or not a file now: linked without the cache
        return None
    h = hashlib.blake2b(digest_size=20)
    h.update(f"et-link|{C.CACHE_SCHEMA}|{link_code_fingerprint()}|{et_key}|{kineto_key}|{rank}"
             .encode())
    return h.hexdigest()


def _entry(root: Path, key: str) -> Path:
    return root / f"v{C.CACHE_SCHEMA}" / "et-link" / key[:2] / f"{key}.arrows"


def _read(entry: Path, key: str, n_events: int) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        with pa.memory_map(str(entry), "r") as mm:
            (meta,) = C._read_manifest(mm, key)["records"]
            links = C._read_tables(mm, meta)["links"]
        nodes = A.to_numpy(links.column("node_id")).astype(np.int64)
        rows = A.to_numpy(links.column("event")).astype(np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= n_events):
            raise ValueError("event rows outside the rank's events")
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - any damage to an entry means "link again"
        log.debug("traincast cache: ignoring unreadable entry %s (%s)", entry, exc)
        return None
    cache_size.touch(entry)
    return nodes, rows


def link_cached(et: ExecutionTrace, events: pa.Table, et_path: Path,
                kineto_path: Path | None, rank: int, store: C.TraceCache | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """The linked ``(node ids, event rows)`` of ``et`` and one rank's ``events`` (rows
    within ``events``; int64, sorted by node id), from the cache ``store`` when it holds
    them, else :func:`~traincast.trace.link.match.link_execution_trace` (raising what it
    raises, naming ``et_path``), then stored."""
    key = link_key(et_path, kineto_path, rank) if store is not None else None
    if key is not None:
        hit = _read(_entry(store.root, key), key, events.num_rows)
        if hit is not None:
            return hit
    links = link_execution_trace(et, events, path=et_path)
    nodes = A.to_numpy(links.column("node_id")).astype(np.int64)
    rows = A.to_numpy(links.column("event")).astype(np.int64)
    if key is not None:
        table = pa.Table.from_arrays([A.from_numpy(nodes), A.from_numpy(rows)],
                                     names=["node_id", "event"])
        if C._write_entries(_entry(store.root, key), key, [{"links": table}],
                            [{"type": "et-link", "tables": {"links": None}}]):
            C._maybe_trim(store.root)
    return nodes, rows
