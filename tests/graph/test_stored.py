"""A cached job's execution graph, stored beside its parse-cache entry
(:mod:`traincast.graph.stored`): read back field by field equal to the graph the builder
makes, replayed to the same nanosecond; rejected (and built again) when damaged, of another
job or code; never used for a TraceSet whose tables changed; counted and trimmed with the
cache."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import numpy as np
import pytest

import traincast
from traincast.graph import stored as S
from traincast.graph.build import build_graph
from traincast.graph.model import ExecutionGraph
from traincast.simulate.engine import simulate
from traincast.trace import cache as C
from traincast.trace import cache_size
from traincast.trace.cache_key import CACHE_SCHEMA, job_of
from traincast.trace.traceset import drop_link_columns

#: shared sets of several kinds that load through the cache (several ranks, one file, NCCL and
#: gloo, Nsight Systems; with execution traces linked: a job kept under its files' stat key)
TRACES = ["hta/a100_2rank_nccl", "hta/v100_2rank_allreduce",
          "hta/a100_16rank_5streams", "hta/sampled_128rank_sendrecv",
          "linear_1x2080ti/kineto.pt.trace.json.gz", "hta/edge/cpu_only_rank34.json.gz",
          "nsys/cloverleaf_4xa100.sqlite", "dlrm_8xv100/kineto", "linear_1x2080ti"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _graphs(cache: Path) -> list[Path]:
    return sorted((cache / f"v{CACHE_SCHEMA}" / "graphs").rglob("*.graph"))


def _stored_after_replay(path: Path) -> tuple[traincast.TraceSet, Path]:
    """Load ``path`` (a cached job), replay it (which stores its graph) and wait for the
    write; (a second load of it, the graph file)."""
    ts = traincast.load(path)
    assert job_of(ts) is not None
    g, was_stored = S.built_or_stored(ts)
    assert not was_stored
    simulate(g)
    t = S.keep_later(ts, g)
    assert t is not None
    t.join()
    again = traincast.load(path)
    root, key = job_of(again)
    return again, S.graph_file(root, key, exact=False, model_waits=True)


def _assert_same_graph(got: ExecutionGraph, want: ExecutionGraph) -> None:
    arrays = ["node_event", "node_rank", "measured", "src", "dst", "lag", "kind", "anchor",
              "unmatched_collectives", "thread_parent", "exact_lag"]
    for name in arrays:
        a, b = getattr(got, name), getattr(want, name)
        if b is None:
            assert a is None, name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert not got.lag.flags.writeable  # the builder's lags are read-only
    assert len(got.collective_groups) == len(want.collective_groups)
    for a, b in zip(got.collective_groups, want.collective_groups, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert got.clock_offset == want.clock_offset
    assert got.host_waits == want.host_waits
    # stored compactly as the builder stores them (not laid out)
    for key in ("_node_event", "_measured", "_anchor", "_exact"):
        assert type(got.__dict__[key]) is type(want.__dict__[key]), key


@pytest.mark.parametrize("name", TRACES)
def test_stored_graph_is_the_built_graph(traces: Path, cache: Path, name: str) -> None:
    ts, path = _stored_after_replay(traces / name)
    assert path.is_file()
    got, was_stored = S.built_or_stored(ts)
    assert was_stored
    # the simulator's order of the replay came with it (compiled path or small graph's)
    assert {"flat", "flat_points"} & set(got.structure)
    want = build_graph(ts)
    _assert_same_graph(got, want)
    np.testing.assert_array_equal(simulate(got).times, simulate(want).times)
    # a write into a mapped array changes this graph's copy only, not the file
    got.src[0] += 1
    again, _ = S.built_or_stored(ts)
    np.testing.assert_array_equal(again.src, want.src)


def test_predictions_and_what_ifs_equal_with_a_stored_graph(traces: Path, cache: Path) -> None:
    path = traces / "hta/a100_16rank_5streams"
    ts = traincast.load(path)
    built = traincast.predict(ts)  # builds and stores
    C.wait_for_writes()
    assert _graphs(cache)
    ts2 = traincast.load(path)
    read = traincast.predict(ts2)
    np.testing.assert_array_equal(read.result.times, built.result.times)
    for what in ("gpu=H100", "overlap=ideal", "speedup=kind:device=2"):
        a = traincast.predict(ts, what_if=[what])
        b = traincast.predict(ts2, what_if=[what])
        np.testing.assert_array_equal(a.result.times, b.result.times, err_msg=what)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_damaged_graph_is_built_again(traces: Path, cache: Path, damage: str) -> None:
    ts, path = _stored_after_replay(traces / "hta/a100_2rank_nccl")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:len(data) - 100]
    elif damage == "flip":  # a byte of the edges' sources: their CRC-32 no longer matches
        n = int.from_bytes(data[len(S.MAGIC):len(S.MAGIC) + 8], "little")
        head = msgspec.json.decode(bytes(data[len(S.MAGIC) + 8:len(S.MAGIC) + 8 + n]))
        start = -(-(len(S.MAGIC) + 8 + n) // 64) * 64
        (offset,) = [row[3] for row in head["arrays"] if row[0] == "src"]
        data[start + offset + 5] ^= 0xFF
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not a graph at all" * 10)
    path.write_bytes(bytes(data))
    root, key = job_of(ts)
    assert S.read_graph(path, ts, key) is None
    g, was_stored = S.built_or_stored(ts)
    assert not was_stored
    _assert_same_graph(g, build_graph(ts))


def test_another_job_or_code_is_not_read(traces: Path, cache: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ts, path = _stored_after_replay(traces / "hta/a100_2rank_nccl")
    root, key = job_of(ts)
    assert S.read_graph(path, ts, "0" * 40) is None  # another job's key
    other = traincast.load(traces / "hta/v100_2rank_allreduce")
    assert S.read_graph(path, other, key) is None  # another job's events
    monkeypatch.setattr(S, "graph_code_fingerprint", lambda: "another code")
    assert S.read_graph(path, ts, key) is None
    assert S.graph_file(root, key, exact=False, model_waits=True) != path


def test_options_are_stored_apart(traces: Path, cache: Path) -> None:
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    for exact, waits in ((False, True), (True, True), (False, False)):
        g, _ = S.built_or_stored(ts, exact=exact, model_waits=waits)
        t = S.keep_later(ts, g, exact=exact, model_waits=waits)
        assert t is not None
        t.join()
    names = {p.name.rsplit("-", 1)[1] for p in _graphs(cache)}
    assert names == {"01.graph", "11.graph", "00.graph"}
    ts2 = traincast.load(traces / "hta/a100_2rank_nccl")
    for exact, waits in ((False, True), (True, True), (False, False)):
        got, was_stored = S.built_or_stored(ts2, exact=exact, model_waits=waits)
        assert was_stored
        _assert_same_graph(got, build_graph(ts2, exact=exact, model_waits=waits))


def test_changed_tables_are_not_the_cached_job(traces: Path, cache: Path) -> None:
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    assert job_of(ts) is not None
    drop_link_columns(ts)  # reads no column a derived result uses: still the job
    assert job_of(ts) is not None
    ts.events = ts.events.slice(0, ts.events.num_rows - 1)
    assert job_of(ts) is None
    assert S.keep_later(ts, build_graph(ts)) is None


def test_a_job_with_execution_traces_is_kept_under_its_files(traces: Path, cache: Path,
                                                              tmp_path: Path) -> None:
    import gzip
    import shutil

    run = tmp_path / "run"
    shutil.copytree(traces / "dlrm_8xv100", run)
    ts = traincast.load(run / "kineto")  # its ETs beside it, linked
    assert ts.et_nodes and ts.et_links is not None and job_of(ts) is not None
    built = traincast.predict(ts)
    C.wait_for_writes()
    assert len(_graphs(cache)) == 1
    again = traincast.load(run / "kineto")
    assert job_of(again) == job_of(ts)
    got, was_stored = S.built_or_stored(again)
    assert was_stored
    _assert_same_graph(got, build_graph(again))
    np.testing.assert_array_equal(traincast.predict(again).result.times, built.result.times)
    # an execution trace written again with the same bytes: the same job (its entry is
    # found by content), the same graph
    et = sorted((run / "et").iterdir())[0]
    et.write_bytes(et.read_bytes())
    same = traincast.load(run / "kineto")
    assert job_of(same) == job_of(ts) and S.built_or_stored(same)[1]
    # other bytes: another job, the graph built anew
    et.write_bytes(gzip.compress(gzip.decompress(et.read_bytes()), compresslevel=1))
    changed = traincast.load(run / "kineto")
    assert job_of(changed) is not None and job_of(changed) != job_of(ts)
    assert not S.built_or_stored(changed)[1]


def test_no_cache_no_graph(traces: Path, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", "off")
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    assert job_of(ts) is None
    traincast.predict(ts)
    assert not list(tmp_path.rglob("*.graph"))


def test_mismatched_collectives_are_not_stored(traces: Path, cache: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    monkeypatch.setattr(S, "has_size_mismatches", lambda matched: True)
    assert S.keep_later(ts, build_graph(ts)) is None


def test_graphs_are_counted_and_trimmed(traces: Path, cache: Path) -> None:
    _, path = _stored_after_replay(traces / "hta/a100_2rank_nccl")
    d = cache_size.info(cache, CACHE_SCHEMA)
    assert d["graph_entries"] == 1 and d["job_entries"] >= 1
    assert d["bytes"] >= path.stat().st_size
    size = path.stat().st_size
    old = path.stat().st_mtime - 3600
    os.utime(path, (old, old))  # the least recently used: first to go
    deleted, freed = cache_size.trim(cache, d["bytes"] - 1, CACHE_SCHEMA)
    assert (deleted, freed) == (1, size)
    assert not path.exists()


def test_cli_output_equal_with_a_stored_graph(traces: Path, cache: Path) -> None:
    from typer.testing import CliRunner

    from traincast.cli import app

    d = str(traces / "hta/a100_2rank_nccl")
    first = CliRunner().invoke(app, ["analyze", d])
    assert first.exit_code == 0, first.output
    C.wait_for_writes()
    assert _graphs(cache)
    second = CliRunner().invoke(app, ["analyze", d])
    assert second.exit_code == 0
    assert second.output == first.output


def test_clear_waits_for_a_graph_being_written(traces: Path, cache: Path) -> None:
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    g, _ = S.built_or_stored(ts)
    t = S.keep_later(ts, g)
    assert t is not None
    assert C.clear(cache) > 0  # waits for the write, then deletes the folder with it
    assert not t.is_alive() and not cache.exists()
