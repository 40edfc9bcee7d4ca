"""A job with execution traces has a job entry of its own: the second load of the same traces
and ETs reads the assembled TraceSet, its ETs and their links from one entry (no assembly,
no linking) and gets the same TraceSet; a changed ET, other link code or other options miss."""

from __future__ import annotations

import gzip
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import traincast
from traincast.trace import cache as C
from traincast.trace import load as load_mod
from traincast.trace.traceset import TraceSet


def _assert_same(got: TraceSet, want: TraceSet) -> None:
    """Every table, rank, ET and warning of ``got`` equals ``want``'s."""
    for name in ("events", "collectives", "shapes", "iterations", "stream_waits",
                 "member_lists", "et_links"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.schema.equals(b.schema, check_metadata=True), name
            assert a.equals(b), name
    assert got.ranks == want.ranks
    assert got.warnings == want.warnings
    assert sorted(got.et_nodes) == sorted(want.et_nodes)
    for r, et in want.et_nodes.items():
        mine = got.et_nodes[r]
        assert (mine.schema, mine.pid, mine.metadata, mine.path, mine.devices) == \
               (et.schema, et.pid, et.metadata, et.path, et.devices)
        assert mine.nodes.equals(et.nodes) and mine.data_deps.equals(et.data_deps)


def _no_assembly(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> TraceSet:
        raise AssertionError("assembled although the job entry was there")

    monkeypatch.setattr(load_mod, "assemble", refuse)


@pytest.fixture
def dlrm_run(traces: Path, tmp_path: Path) -> Path:
    """The 8-rank DLRM set (Kineto traces and their ETs in a sibling folder), writable."""
    run = tmp_path / "run"
    shutil.copytree(traces / "dlrm_8xv100", run)
    return run / "kineto"


def test_the_second_load_reads_the_job_entry(dlrm_run: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = traincast.load(dlrm_run, cache=cache)
    assert first.et_nodes and first.et_links is not None and first.et_links.num_rows
    C.wait_for_writes()
    assert len(list((cache / f"v{C.CACHE_SCHEMA}" / "jobs").rglob("*.arrows"))) == 1
    fresh = traincast.load(dlrm_run, cache=False)
    _assert_same(first, fresh)
    _no_assembly(monkeypatch)
    second = traincast.load(dlrm_run, cache=cache)
    _assert_same(second, fresh)
    # the replay of the entry's job equals the assembled job's
    np.testing.assert_array_equal(traincast.predict(second).result.times,
                                  traincast.predict(fresh).result.times)


@pytest.mark.parametrize("name", ["hta/et_simple_add", "linear_1x2080ti"])
def test_one_rank_sets_read_back_the_same(traces: Path, tmp_path: Path, name: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    src = traces / name
    if not src.is_dir():
        pytest.skip(f"{src} not available")
    run = tmp_path / "run"
    shutil.copytree(src, run)
    cache = tmp_path / "cache"
    with warnings.catch_warnings(record=True) as first_warned:
        warnings.simplefilter("always")
        first = traincast.load(run, cache=cache)
    assert first.et_nodes
    C.wait_for_writes()
    _no_assembly(monkeypatch)
    with warnings.catch_warnings(record=True) as second_warned:
        warnings.simplefilter("always")
        second = traincast.load(run, cache=cache)
    _assert_same(second, first)
    assert [str(w.message) for w in second_warned] == [str(w.message) for w in first_warned]


def test_an_et_written_again_with_the_same_bytes_is_the_same_job(
        dlrm_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = traincast.load(dlrm_run, cache=cache)
    C.wait_for_writes()
    et = sorted((dlrm_run.parent / "et").iterdir())[0]
    et.write_bytes(et.read_bytes())  # the stat key misses, the content key finds the entry
    _no_assembly(monkeypatch)
    _assert_same(traincast.load(dlrm_run, cache=cache), first)


def test_a_changed_et_or_link_code_or_option_assembles_again(
        dlrm_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    traincast.load(dlrm_run, cache=cache)
    C.wait_for_writes()
    real = load_mod.assemble
    calls: list[int] = []
    monkeypatch.setattr(load_mod, "assemble", lambda *a, **k: calls.append(1) or real(*a, **k))
    # other bytes of the same ET (another gzip level): another content key
    et = sorted((dlrm_run.parent / "et").iterdir())[0]
    et.write_bytes(gzip.compress(gzip.decompress(et.read_bytes()), compresslevel=1))
    changed = traincast.load(dlrm_run, cache=cache)
    assert calls == [1]
    _assert_same(changed, traincast.load(dlrm_run, cache=False))
    C.wait_for_writes()
    traincast.load(dlrm_run, cache=cache)  # now its own entry
    assert calls == [1, 1]  # (the cache=False load above assembled too)
    monkeypatch.setattr(load_mod, "link_code_fingerprint", lambda: "other link code")
    traincast.load(dlrm_run, cache=cache)
    assert calls == [1, 1, 1]
    monkeypatch.undo()
    monkeypatch.setattr(load_mod, "assemble", lambda *a, **k: calls.append(1) or real(*a, **k))
    traincast.load(dlrm_run, cache=cache, iteration_marker=r"ProfilerStep#\d+")
    assert calls == [1, 1, 1, 1]


def test_a_truncated_entry_means_assemble_again(dlrm_run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = traincast.load(dlrm_run, cache=cache)
    C.wait_for_writes()
    (entry,) = (cache / f"v{C.CACHE_SCHEMA}" / "jobs").rglob("*.arrows")
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    _assert_same(traincast.load(dlrm_run, cache=cache), first)
    C.wait_for_writes()
    assert entry.stat().st_size > 0 and C.get_job(C.TraceCache(cache), entry.stem) is not None


def test_a_job_entry_without_ets_keeps_its_metadata(dlrm_run: Path, tmp_path: Path) -> None:
    """The entry of a job without ETs names no ET table (the layout before ETs were kept)."""
    ts = traincast.load(dlrm_run, cache=False, et_dir=None)
    ts_no_et = TraceSet(events=ts.events, collectives=ts.collectives, shapes=ts.shapes,
                        iterations=ts.iterations, ranks=ts.ranks,
                        stream_waits=ts.stream_waits, member_lists=ts.member_lists,
                        warnings=list(ts.warnings))
    tables, meta = C._job_parts(ts_no_et)
    assert "ets" not in meta and not any(n.startswith("et_") for n in tables)
    tables, meta = C._job_parts(ts)
    assert sorted(meta["ets"]) == [str(r) for r in sorted(ts.et_nodes)]
    assert isinstance(tables["et_links"], pa.Table)
