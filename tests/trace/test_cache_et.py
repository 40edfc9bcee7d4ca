"""Execution traces through the parse cache: the same tables as a fresh read, a damaged entry
read again."""

from __future__ import annotations

from pathlib import Path

from traincast.trace.cache import TraceCache
from traincast.trace.cache_et import read_et_cached
from traincast.trace.readers.et import read_execution_trace


def _same(a, b) -> bool:
    return (a.nodes.equals(b.nodes) and a.data_deps.equals(b.data_deps)
            and (a.schema, a.pid, a.metadata, a.devices) == (b.schema, b.pid, b.metadata,
                                                             b.devices))


def test_cached_et_equals_a_fresh_read(traces: Path, tmp_path: Path) -> None:
    f = traces / "dlrm_8xv100" / "et" / "rank-3.et.json.gz"
    store = TraceCache(tmp_path / "c")
    fresh = read_execution_trace(f)
    first = read_et_cached(f, store)  # miss: read and written
    entries = list((tmp_path / "c").rglob("*.arrows"))
    assert len(entries) == 1 and "et" in entries[0].parts
    second = read_et_cached(f, store)  # hit
    assert _same(fresh, first) and _same(fresh, second) and second.path == str(f)
    entries[0].write_bytes(entries[0].read_bytes()[:-40])  # damaged: read again, rewritten
    assert _same(fresh, read_et_cached(f, store))
    assert _same(fresh, read_et_cached(f, None))
