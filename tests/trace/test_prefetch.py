"""The first load of a small job with execution traces, started by a forked child while the
command imports (traincast.trace.prefetch): the command's output is the same bytes with and
without it, the child does its share, errors come in file order, and it is only forked where
that is safe."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from traincast.trace import cache as C
from traincast.trace import prefetch
from traincast.trace import prestart as prestart_mod

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
DLRM = DATA / "dlrm_8xv100"

needs_data = pytest.mark.skipif(not DLRM.is_dir(), reason="shared trace data not available")

#: the CLI in a fresh process, as typed, with the read-ahead's calls recorded on stderr's
#: last line (importing prefetch loads no numpy: the child can still be forked)
DRIVER = """
import json, os, sys, time
from traincast.trace import prefetch
seen = {"started": [], "shared": [], "parsed_here": 0, "ets_read_here": 0,
        "linked_here": 0}
start, shared = prefetch.start, prefetch.read_shared
def count(key, fn):
    def counted(*a, **k):
        seen[key] += 1
        return fn(*a, **k)
    return counted
def spy_start(ets, files=None, link=False):
    got = start(ets, files, link=link)
    seen["started"].append([got, len(ets), len(files or ())] + ([True] if link else []))
    if got and os.environ.get("PAUSE_AFTER_FORK"):
        time.sleep(float(os.environ["PAUSE_AFTER_FORK"]))  # slow imports: the child ends
    from traincast.trace import cache_et, load  # (numpy now: the child is forked)
    from traincast.trace.link import cache_link
    load._read_file = count("parsed_here", load._read_file)
    cache_link.link_execution_trace = count("linked_here", cache_link.link_execution_trace)
    cache_et.read_execution_trace = count("ets_read_here", cache_et.read_execution_trace)
    return got
def spy_shared(files, todo, parse, cached):
    got = shared(files, todo, parse, cached)
    seen["shared"].append(None if got is None else [len(got[0]), len(got[1])])
    return got
prefetch.start, prefetch.read_shared = spy_start, spy_shared
from traincast.cli.app import main
sys.argv = ["traincast", *sys.argv[1:]]
code = 1
try:
    code = main()
finally:
    sys.stderr.write("\\nREAD_AHEAD " + json.dumps(seen) + "\\n")
sys.exit(code)
"""


def _run(args: list[str], cache: Path | str, **env: str) -> tuple[int, str, str, dict]:
    """(exit code, stdout, stderr without the record line, the record)."""
    full = {**os.environ, "TRAINCAST_CACHE_DIR": str(cache), "COLUMNS": "120", **env}
    full.pop("TRAINCAST_READ_AHEAD", None) if "TRAINCAST_READ_AHEAD" not in env else None
    res = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True,
                         text=True, env=full, timeout=300, check=False)
    err, _, record = res.stderr.rpartition("\nREAD_AHEAD ")
    return res.returncode, res.stdout, err, json.loads(record)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """The DLRM 8xV100 set (kineto/ and its sibling et/), copied to a writable folder."""
    if not DLRM.is_dir():
        pytest.skip("shared trace data not available")
    dst = tmp_path / "dlrm"
    shutil.copytree(DLRM, dst)
    return dst


@needs_data
def test_the_command_prints_the_same_bytes_with_and_without_the_child(
        job: Path, tmp_path: Path) -> None:
    args = ["analyze", str(job / "kineto"), "--format", "json"]
    code, out, err, seen = _run(args, tmp_path / "c1")
    assert code == 0
    assert seen["started"] == [[True, 8, 8, True]]  # shared, and linked ahead
    # whoever parsed them, all eight traces, ETs and links are stored
    assert seen["shared"] and seen["shared"][0] is not None and seen["parsed_here"] <= 8
    store = C.TraceCache(tmp_path / "c1")
    assert all(store.holds(C.file_key(f)) for f in sorted((job / "kineto").iterdir()))
    assert len(list((tmp_path / "c1").glob("v*/et/*/*.arrows"))) == 8
    assert len(list((tmp_path / "c1").glob("v*/et-link/*/*.arrows"))) == 8
    # the same bytes without the child, and without any cache
    code0, out0, err0, seen0 = _run(args, tmp_path / "c0", TRAINCAST_READ_AHEAD="0")
    assert (code0, out0, err0) == (code, out, err)
    assert seen0["started"] == [] and seen0["shared"] == [None]  # not asked to start
    off = _run(args, "off")
    assert off[:3] == (code, out, err)
    # the job is now found by stat: no child
    again = _run(args, tmp_path / "c1")
    assert again[:3] == (code, out, err) and again[3]["started"] == []


@needs_data
def test_a_child_given_the_time_does_it_all(job: Path, tmp_path: Path) -> None:
    """Imports slow enough for the child to end first: the load parses and reads nothing."""
    args = ["predict", str(job / "kineto"), "--format", "json"]
    code, out, err, seen = _run(args, tmp_path / "c1", PAUSE_AFTER_FORK="3")
    assert code == 0 and seen["started"] == [[True, 8, 8, True]]
    # the child parsed, read and linked everything: the assembly found the eight links
    assert seen["parsed_here"] == seen["ets_read_here"] == seen["linked_here"] == 0
    assert seen["shared"] == [[0, 0]]  # every file found in the cache before the queue
    assert _run(args, tmp_path / "c0", TRAINCAST_READ_AHEAD="0")[:3] == (code, out, err)


@needs_data
def test_a_job_without_execution_traces_shares_its_traces(tmp_path: Path) -> None:
    job = tmp_path / "kineto"
    shutil.copytree(DLRM / "kineto", job)
    args = ["analyze", str(job), "--format", "json"]
    code, out, err, seen = _run(args, tmp_path / "c1")
    assert code == 0 and seen["started"] == [[True, 0, 8]]
    assert seen["ets_read_here"] == 0 and seen["parsed_here"] <= 8
    assert _run(args, tmp_path / "c0", TRAINCAST_READ_AHEAD="0")[:3] == (code, out, err)


@needs_data
def test_a_bad_trace_is_reported_as_without_the_child(job: Path, tmp_path: Path) -> None:
    """Two damaged profiler traces: the first in file order is named, whoever parsed it."""
    for rank in (2, 6):
        f = job / "kineto" / f"rank-{rank}.pt.trace.json.gz"
        f.write_bytes(f.read_bytes()[:2000])
    bad_et = job / "et" / "rank-3.et.json.gz"
    args = ["analyze", str(job / "kineto")]
    code, out, err, seen = _run(args, tmp_path / "c1")
    code0, out0, err0, _ = _run(args, tmp_path / "c0", TRAINCAST_READ_AHEAD="0")
    assert seen["started"] == [[True, 8, 8, True]]
    assert code == code0 == 2 and (out, err) == (out0, err0)
    assert "rank-2.pt.trace.json.gz" in err and "rank-6" not in err
    # a damaged execution trace: read again by the load, which says why
    for rank in (2, 6):
        shutil.copy(DLRM / "kineto" / f"rank-{rank}.pt.trace.json.gz", job / "kineto")
    bad_et.write_bytes(gzip.compress(b'{"schema": "1.0.1", "nodes": [{"name": 3}]}'))
    code, out, err, seen = _run(args, tmp_path / "c2")
    code0, out0, err0, _ = _run(args, tmp_path / "c3", TRAINCAST_READ_AHEAD="0")
    assert seen["started"] == [[True, 8, 8, True]]
    assert code == code0 == 2 and (out, err) == (out0, err0) and "rank-3.et.json.gz" in err


# ------------------------------------------------------------------ the queue, in-process


class _Done:
    """A real child process of this one that has ended: what the load waits for."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "pass"])  # noqa: S603

    @property
    def pid(self) -> int:
        return self.proc.pid


def _held(files: list[Path], ets: list[Path], taken: list[int]) -> None:
    """Hold a child for ``files`` and ``ets`` whose queue (the files' indexes, then the
    ETs') had its first ``len(taken)`` indexes read by the child."""
    read, write = os.pipe()
    os.write(write, b"".join(i.to_bytes(4, "little") for i in range(len(files) + len(ets))))
    os.close(write)
    for _ in taken:
        os.read(read, 4)
    prefetch._CHILD.append(prefetch._Child(_Done().pid, tuple(ets), tuple(files), read))


@pytest.fixture(autouse=True)
def _no_child_left() -> None:
    yield
    prefetch._CHILD.clear()


def test_the_load_parses_what_it_takes_and_reads_back_the_rest(tmp_path: Path) -> None:
    files = [tmp_path / f"rank-{i}.json" for i in range(6)]
    _held(files, [], taken=[0, 1])  # the child took files 0 and 1
    parsed: list[int] = []
    stored = {0: "child-0"}  # the child stored file 0; file 1 failed there
    got = prefetch.read_shared(files, [0, 1, 2, 4, 5],
                               lambda i: parsed.append(i) or f"here-{i}", stored.get)
    assert got is not None
    out, back = got
    assert out == {0: "child-0", 1: "here-1", 2: "here-2", 4: "here-4", 5: "here-5"}
    assert back == {0}
    assert sorted(parsed) == [1, 2, 4, 5]  # file 3 was in the cache already: not parsed
    assert not prefetch._CHILD


def test_errors_come_in_file_order(tmp_path: Path) -> None:
    files = [tmp_path / f"rank-{i}.json" for i in range(4)]
    _held(files, [], taken=[0])

    def parse(i: int) -> str:
        if i in (1, 3):
            raise ValueError(f"bad {i}")
        return str(i)

    with pytest.raises(ValueError, match="bad 1"):
        prefetch.read_shared(files, [0, 1, 2, 3], parse, lambda i: None)
    assert not prefetch._CHILD  # waited for all the same


def test_only_the_child_of_these_files_is_used(tmp_path: Path) -> None:
    files = [tmp_path / f"rank-{i}.json" for i in range(3)]
    ets = [tmp_path / "rank-0.et.json"]
    assert prefetch.read_shared(files, [0], str, lambda i: None) is None  # none held
    _held(files, ets, taken=[])
    assert prefetch.read_shared(files[:2], [0], str, lambda i: None) is None  # other files
    assert not prefetch.wait_for(ets[:0])  # other ETs
    assert prefetch.wait_for(ets)  # these: waited for once
    assert not prefetch.wait_for(ets)


@needs_data
def test_the_load_reads_the_execution_traces_it_takes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """ETs left in the queue are read into the cache by the load (by :func:`read_shared`
    with the traces, else by :func:`wait_for`); one that cannot be read is left for the
    load to read again (and raise)."""
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache"))
    files = [tmp_path / f"rank-{i}.json" for i in range(2)]
    ets = [DLRM / "et" / f"rank-{r}.et.json.gz" for r in range(3)]
    bad = tmp_path / "bad.et.json"
    bad.write_text("{")
    _held(files, [*ets, bad], taken=[0, 1, 2])  # the child took both traces and one ET
    got = prefetch.read_shared(files, [0, 1], str, lambda i: f"child-{i}")
    assert got == ({0: "child-0", 1: "child-1"}, {0, 1})
    entries = list((tmp_path / "cache").glob("v*/et/*/*.arrows"))
    assert len(entries) == 2  # ranks 1 and 2, read here; rank 0 was the child's
    _held([], ets, taken=[])
    assert prefetch.wait_for(ets)
    assert len(list((tmp_path / "cache").glob("v*/et/*/*.arrows"))) == 3


def test_the_queue_holds_the_longest_work_first(tmp_path: Path) -> None:
    """Every index once: the ETs (the longer work) before the profiler traces, each kind by
    size, largest first; a file that cannot be stat'ed counts as empty."""
    def made(name: str, size: int) -> Path:
        f = tmp_path / name
        f.write_bytes(b"x" * size)
        return f

    files = [made("a.json", 10), made("b.json", 30), tmp_path / "gone.json", made("c.json", 20)]
    ets = [made("e0.json", 5), made("e1.json", 50)]
    order = prefetch._order(files, ets)
    assert order == [5, 4, 1, 3, 0, 2]
    assert sorted(order) == list(range(len(files) + len(ets)))


def test_never_forked_here() -> None:
    """The test process has numpy loaded (and threads): no child is forked from it."""
    assert "numpy" in sys.modules
    assert not prefetch.can_fork()
    assert not prefetch.start([Path("rank-0.et.json")])


@needs_data
def test_prestart_shares_the_traces_below_the_compiled_scanner(
        job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    links: list[bool] = []
    monkeypatch.setattr(prefetch, "can_fork", lambda: True)
    monkeypatch.setattr(prefetch, "start",
                        lambda ets, files=None, link=False: links.append(link)
                        or calls.append((len(ets), len(files or ()))) or True)
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache"))
    assert prestart_mod.prestart(job / "kineto")  # the sibling et/ folder
    assert prestart_mod.prestart(job / "kineto", et_dir=job / "et")
    assert prestart_mod.prestart(job)  # the run folder: kineto/ and et/ inside
    assert calls == [(8, 8)] * 3 and links == [True] * 3  # shared, then linked ahead
    ranks = {f"rank-{r}.pt.trace.json.gz": 7 - r for r in range(8)}
    assert prestart_mod.prestart(job / "kineto", rank_map=ranks)
    assert calls[-1] == (8, 8) and links[-1] is False  # ranks of its own: not linked ahead
    del calls[-1], links[-1]
    alone = tmp_path / "alone"
    shutil.copytree(job / "kineto", alone)
    assert prestart_mod.prestart(alone)  # no execution traces: the traces shared
    assert calls[-1] == (0, 8)
    assert not prestart_mod.prestart(alone / "rank-0.pt.trace.json.gz")  # one file
    monkeypatch.setattr(prestart_mod, "JOB_ONLY_MIN_FILES", 8)
    assert not prestart_mod.prestart(alone)  # the load would store no per-file entries
    assert prestart_mod.prestart(job / "kineto")
    assert calls[-1] == (8, 0) and links[-1] is False  # the ETs only: nothing to link
    monkeypatch.setattr(prestart_mod, "COMPILED_MIN_BYTES", 1)
    monkeypatch.setattr(prestart_mod, "JOB_ONLY_MIN_FILES", 64)
    assert prestart_mod.prestart(job / "kineto")
    assert calls[-1] == (8, 0)  # the ETs only: the load would use the compiled scanner
    monkeypatch.setattr(prestart_mod, "PARALLEL_MIN_BYTES", 1)
    assert not prestart_mod.prestart(job / "kineto")  # a pool parses them: nothing
    assert not prestart_mod.prestart(job / "kineto", workers=1)
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", "off")
    assert not prestart_mod.prestart(job / "kineto")
    assert len(calls) == 6
