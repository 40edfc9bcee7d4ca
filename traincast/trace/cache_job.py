"""A whole-job cache entry (:func:`traincast.trace.cache.put_job`) written while the job is
assembled: the events' columns are compressed and written as the assembly combines them.

:class:`JobEntryWriter` opens the entry's temporary file on a thread of its own (not a
daemon: the process finishes the entry before it exits) and registers it as a pending
write (:func:`~traincast.trace.cache.get_job` of the entry waits for it).
:meth:`~JobEntryWriter.events_column` takes each combined column of the events in order;
once the columns taken exceed a small table (:data:`~traincast.trace.cache._SMALL_TABLE`),
the events are a block per column, and each column is handed to the thread and written as
it comes, while the assembly goes on. :meth:`~JobEntryWriter.finish` then hands over the
TraceSet: the thread checks that the columns it wrote are the events' (else it starts the
entry again from the TraceSet), writes the other tables and the manifest and renames the
entry into place. The bytes are those :func:`~traincast.trace.cache.put_job` writes.
Once the entry is in place, a shapes table of more than :data:`DEFER_SHAPES_BYTES` that the
TraceSet still holds is swapped for its compressed blocks read back from the entry
(:func:`~traincast.trace.traceset.defer_shapes`): decompressed on first use, as a warm load
serves them, so a run that never reads the shapes does not keep them inflated; then the memory
the write freed goes back to the OS (:func:`~traincast.util.allocator.release_memory`).
:meth:`~JobEntryWriter.abort` (the assembly failed) deletes the temporary. A cache that
cannot be written is skipped (logged at debug level), as by ``put_job``.
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from typing import Any

import pyarrow as pa

from traincast.trace import cache as C
from traincast.trace.cache_read import read_deferred
from traincast.trace.readers.jsonscan import max_inflate_bytes, within_inflate_limits
from traincast.trace.traceset import defer_shapes
from traincast.util.allocator import release_memory

__all__ = ["JobEntryWriter"]

log = logging.getLogger(__name__)

#: shapes tables above this many bytes are dropped for their compressed blocks once written
DEFER_SHAPES_BYTES = 16 << 20

#: how often the writing thread, waiting for the next column, checks that the main thread
#: still runs (an interrupt between the writer's start and the assembly's ``try`` would
#: otherwise leave it waiting, and the process could not exit)
_POLL_S = 1.0


def _addresses(arr: pa.Array) -> list[int]:
    return [0 if b is None else b.address for b in arr.buffers()]


class JobEntryWriter:
    """Writes the job entry of ``key`` in cache ``store`` (see the module docstring)."""

    def __init__(self, store: C.TraceCache, key: str) -> None:
        self._store, self._key = store, key
        self._entry = C._job_entry(store.root, key)
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._held: list[tuple[pa.Schema, pa.Array]] = []
        self._held_bytes = 0
        self._streaming = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="traincast-cache-job-write")
        with C._PENDING_LOCK:
            C._PENDING[self._entry] = self._thread
        self._thread.start()

    # ---------------------------------------------------------- the loading thread
    def events_column(self, schema: pa.Schema, j: int, array: pa.Array) -> None:
        """Column ``j`` of the events (``schema``: theirs), combined in one array; the
        columns come in order."""
        if self._closed:
            return
        self._held.append((pa.schema([schema.field(j)], metadata=schema.metadata), array))
        self._held_bytes += array.nbytes
        if self._streaming or self._held_bytes > C._SMALL_TABLE:
            self._streaming = True
            for one, a in self._held:
                self._queue.put(("column", one, a))
            self._held = []

    def finish(self, ts: Any) -> None:
        """The assembled TraceSet ``ts``: write the rest of the entry."""
        if self._closed:
            return
        self._closed = True
        self._held = []
        self._ts = weakref.ref(ts)
        got = C._job_parts(ts)
        self._queue.put(("finish", got) if got is not None else ("abort",))

    def abort(self) -> None:
        """No entry after all: delete what was written."""
        if not self._closed:
            self._closed = True
            self._held = []
            self._queue.put(("abort",))

    # ----------------------------------------------------------- the writing thread
    def _run(self) -> None:
        self._out: C._EntryFile | None = None
        try:
            self._write()
        except Exception as exc:  # noqa: BLE001 - a cache that cannot be written is skipped
            log.debug("traincast cache: cannot write %s (%s)", self._entry, exc)
        finally:
            if self._out is not None:
                self._out.discard()
                self._out = None
            with C._PENDING_LOCK:
                if C._PENDING.get(self._entry) is threading.current_thread():
                    del C._PENDING[self._entry]

    def _file(self) -> C._EntryFile:
        if self._out is None:
            self._out = C._EntryFile(self._entry, self._key)
        return self._out

    def _write(self) -> None:
        """Write the events' columns as they come, then the rest when the TraceSet comes;
        nothing on an abort. Messages keep coming until the last (so the queue is
        drained) even when a write fails."""
        written: list[Any] = []
        streamed: list[pa.Array] = []
        while True:
            try:
                msg = self._queue.get(timeout=_POLL_S)
            except queue.Empty:  # the loading thread gone without a word: nothing to write
                if threading.main_thread().is_alive() or self._closed:
                    continue
                return
            if msg[0] == "abort":
                return
            if msg[0] == "finish":
                break
            _, schema, array = msg
            written.append(self._file().group(pa.Table.from_arrays([array], schema=schema)))
            streamed.append(array)
        tables, meta = msg[1]
        events = tables["events"]
        if streamed and not _same_columns(events, streamed):  # not the events: start again
            if self._out is not None:
                self._out.discard()
                self._out = None
            streamed = []
        out = self._file()
        meta["schemas"] = {n: C._schema_list(t.schema) for n, t in tables.items()}
        meta["rows"] = {n: t.num_rows for n, t in tables.items()}
        for n, t in tables.items():
            meta["tables"][n] = written if n == "events" and streamed else out.table(t)
        if out.close([meta]):
            self._defer_shapes(tables.get("shapes"), meta)
            C._maybe_trim(self._store.root)
        del msg, tables, events, streamed, written
        release_memory()  # the write's buffers (and inflated shapes), freed, back to the OS

    def _defer_shapes(self, table: pa.Table | None, meta: dict[str, Any]) -> None:
        """The written shapes' blocks, read back, in place of ``table`` in the TraceSet."""
        ts = self._ts()
        if ts is None or table is None or table.nbytes <= DEFER_SHAPES_BYTES:
            return
        one = {"tables": {"shapes": meta["tables"]["shapes"]},
               "schemas": {"shapes": meta["schemas"]["shapes"]},
               "rows": {"shapes": meta["rows"]["shapes"]}}
        try:
            with pa.OSFile(str(self._entry), "r") as mm:
                deferred = read_deferred(mm, one, ("shapes",), str(self._entry))["shapes"]
        except (OSError, ValueError, KeyError) as exc:  # the table stays as it is
            log.debug("traincast cache: shapes of %s kept (%s)", self._entry, exc)
            return
        defer_shapes(ts, table, deferred)


def _same_columns(events: pa.Table, streamed: list[pa.Array]) -> bool:
    """Whether ``streamed`` are the columns of ``events`` (the same buffers, a block each)."""
    if events.num_columns != len(streamed) or events.nbytes <= C._SMALL_TABLE:
        return False
    for col, arr in zip(events.columns, streamed, strict=True):
        if col.num_chunks != 1 or col.type != arr.type or len(col) != len(arr) or \
                _addresses(col.chunk(0)) != _addresses(arr):
            return False
    return True


def within_limits(ts: Any) -> bool:
    """Whether every gzipped file of a cached job is still within the inflate limits in
    force (a file cached under a laxer limit is re-read, so the limit still refuses it)."""
    limit = max_inflate_bytes()
    for info in ts.ranks.values():
        p = info.path
        if p is not None and p.name.endswith(".gz"):
            try:
                size = p.stat().st_size
            except OSError:
                return False
            if not within_inflate_limits(info.n_bytes, size, limit):
                return False
    return True
