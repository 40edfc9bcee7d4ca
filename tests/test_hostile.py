"""Hostile and careless input (issue 14), one section per class of the issue: tracebacks
(class 1), parameters at and beyond the ends of their ranges (class 2), resource exhaustion
from small inputs (class 3), control characters reaching the terminal (class 4), ranks that
disagree on a collective's size (class 5), outputs and the parse cache (class 6).

Every refusal is checked the same way (:func:`refused`): exit code 2, exactly one line on
stderr, which names the file or parameter at fault. Time bounds are subprocess timeouts, not
timed asserts."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from cli_probe import cli as _cli
from cli_probe import refused

from traincast.cli import main

EDGES = [  # (value at the edge of the range, value beyond it)
    ("speedup=family:gemm=1e-6", "speedup=family:gemm=1e-7"),
    ("speedup=family:gemm=1e6", "speedup=family:gemm=1e7"),
    ("speedup=kind:device=1e-6", "speedup=kind:device=1e-300"),
    ("intra_node_gbps=1e-3", "intra_node_gbps=1e-300"),
    ("inter_node_gbps=1e6", "inter_node_gbps=1e300"),
    ("batch_size=1", "batch_size=0"),
    ("world_size=1024", "world_size=100000000"),
]


@pytest.mark.parametrize(("ok", "bad"), EDGES, ids=[e[0] for e in EDGES])
def test_what_if_edges(traces: Path, ok: str, bad: str, capsys) -> None:
    dlrm = str(traces / "dlrm_8xv100" / "kineto")
    rc = main(["predict", dlrm, "--what-if", ok, "--format", "json"])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    for rank in doc["ranks"]:
        for it in rank["iterations"]:
            for key in ("predicted_ns", "replay_ns", "unprofiled_ns"):
                assert 0 <= it[key] < 2**62, (ok, key, it[key])
    rc = main(["predict", dlrm, "--what-if", bad])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("traincast: error: --what-if")


def test_yaml_alias_bomb_refused_fast(tmp_path: Path, capsys) -> None:
    """A 1-KB "billion laughs" config: refused at its first alias, one line, exit 2."""
    import time

    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
        prev = name
    lines.append(f"layers: *{prev}")
    cfg = tmp_path / "lol.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    rc = main(["plan", "transformer", "--config", str(cfg), "--gpus", "8", "--node",
               "DGX-A100"])
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "YAML aliases are not allowed" in err[0]
    assert str(cfg) in err[0] and len(err[0]) < 300


EVIL_NAMES = ["\x1b[2J\x1b]52;c;cHduZWQ=\x07kernel", "k\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
              "\x9b31mred\r\x08\x00nul"]


def _evil_dlrm(traces: Path, tmp_path: Path, evil: str) -> Path:
    """A real DLRM rank whose busiest kernel got a hostile name."""
    doc = _real_events(traces)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    top = max({e["name"] for e in kernels},
              key=lambda n: sum(e.get("dur", 0) for e in kernels if e["name"] == n))
    for e in kernels:
        if e["name"] == top:
            e["name"] = evil
    return _write_trace(tmp_path / "evil.json", doc)


def _clean(text: str) -> None:
    bad = [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0]
    assert not bad, bad[:5]


@pytest.mark.parametrize("evil", EVIL_NAMES, ids=["osc52", "hyperlink", "c1-and-nul"])
def test_control_characters_do_not_reach_the_terminal(traces: Path, tmp_path: Path,
                                                      evil: str, capsys) -> None:
    trace = _evil_dlrm(traces, tmp_path, evil)
    assert main(["analyze", str(trace), "--what", "kernels"]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert "\\x1b" in out or "\\x9b" in out  # shown, escaped
    good = traces / "dlrm_8xv100" / "kineto" / "rank-0.pt.trace.json.gz"
    assert main(["diff", str(good), str(trace)]) == 0
    _clean(capsys.readouterr().out)


@pytest.mark.parametrize("command", ["analyze", "diff"])
def test_control_characters_do_not_reach_text_files(traces: Path, tmp_path: Path,
                                                    command: str) -> None:
    trace = _evil_dlrm(traces, tmp_path, EVIL_NAMES[0])
    out = tmp_path / "report.txt"
    good = traces / "dlrm_8xv100" / "kineto" / "rank-0.pt.trace.json.gz"
    argv = ([command, str(trace), "--what", "kernels"] if command == "analyze"
            else [command, str(good), str(trace)])
    assert main([*argv, "--out", str(out)]) == 0
    _clean(out.read_text())


# ------------------------------------------------------------------ class 1: tracebacks


def _write_trace(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _real_events(traces: Path, rank: int = 0) -> dict:
    return json.loads(gzip.decompress(
        (traces / "dlrm_8xv100" / "kineto" / f"rank-{rank}.pt.trace.json.gz").read_bytes()))


@pytest.mark.parametrize("command", ["predict", "analyze", "diff"])
def test_empty_array_trace(tmp_path: Path, command: str, capsys) -> None:
    """A file holding ``[]``: loads (an empty trace is valid), but there is nothing to replay
    or compare; one line naming the file, the warning about missing steps held back."""
    t = _write_trace(tmp_path / "empty.json", [])
    argv = [command, str(t)] + ([str(t)] if command == "diff" else [])
    rc = main(argv)
    line = refused(rc, capsys.readouterr().err, str(t))
    assert "no usable trace events" in line or "no iteration" in line


@pytest.mark.parametrize("drop", ["all", "kernels"])
def test_diff_events_without_dur(traces: Path, tmp_path: Path, drop: str, capsys) -> None:
    doc = _real_events(traces)
    for ev in doc["traceEvents"]:
        if drop == "all" or ev.get("cat") == "kernel":
            ev.pop("dur", None)
    bad = _write_trace(tmp_path / "nodur.json", doc)
    good = traces / "dlrm_8xv100" / "kineto" / "rank-0.pt.trace.json.gz"
    rc = main(["diff", str(good), str(bad), "--format", "json"])
    out, err = capsys.readouterr()
    if drop == "all":
        line = refused(rc, err, str(bad))
        assert "dur x" in line  # says what was dropped
    else:  # tolerated: counted, compared
        assert rc == 0 and "events dropped (dur x" in err
        assert json.loads(out)["ops"]


def test_calibrate_comm_single_rank(traces: Path, tmp_path: Path, capsys) -> None:
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(traces / "dlrm_8xv100" / "kineto" / "rank-0.pt.trace.json.gz", one)
    out = tmp_path / "comm.json"
    rc = main(["calibrate", "comm", str(one), "--out", str(out)])
    refused(rc, capsys.readouterr().err, str(one), "at least 2 ranks")
    assert not out.exists()


@pytest.mark.parametrize("value", ["~nosuchuser-traincast/cache", "~nosuchuser-x"])
def test_cache_dir_of_unknown_user(traces: Path, value: str) -> None:
    r = _cli("analyze", str(traces / "hta" / "a100_2rank_nccl"), "--what", "breakdown",
             env={"TRAINCAST_CACHE_DIR": value})
    refused(r.returncode, r.stderr, "TRAINCAST_CACHE_DIR", value)


PLAN = ["plan", "transformer", "--layers", "8", "--hidden", "1024", "--heads", "16", "--seq",
        "1024", "--gpus", "8", "--node", "DGX-A100", "--tp", "8", "--micro-batch", "1",
        "--global-batch", "8"]


@pytest.mark.parametrize(("flag", "value", "named"), [
    ("--hidden", "1000000000000", "hidden"), ("--seq", "1000000000000", "seq"),
    ("--layers", "100000000", "layers"), ("--intra-node-gbps", "1e-300", "intra_node_gbps"),
    ("--inter-node-gbps", "1e300", "inter_node_gbps"), ("--vocab", "99999999999", "vocab"),
    ("--global-batch", "4294967296", "global_batch"),
    ("--pp", "0", "pp"),  # found by tests/fuzz/test_fuzz_cli.py (ZeroDivisionError)
])
def test_plan_flags_beyond_range(flag: str, value: str, named: str) -> None:
    r = _cli(*PLAN, flag, value, timeout=60)
    refused(r.returncode, r.stderr, named)


# -------------------------------------------- class 2: every plan flag at the edge of its range


PLAN_EDGES = [  # flags at (or near) the largest accepted value: finite times or a clean refusal
    ["--hidden", "1048576", "--heads", "16"], ["--seq", "16777216"], ["--layers", "4096"],
    ["--vocab", "16777216"], ["--intra-node-gbps", "0.001"], ["--inter-node-gbps", "1000000"],
    ["--hidden", "1048576", "--heads", "16", "--seq", "16777216", "--micro-batch", "1048576",
     "--global-batch", "1048576"],
    ["--layers", "4096", "--global-batch", "4096"],
]


@pytest.mark.parametrize("edge", PLAN_EDGES, ids=[" ".join(e) for e in PLAN_EDGES])
def test_plan_edges_give_finite_times_or_refuse(edge: list[str]) -> None:
    r = _cli(*PLAN, *edge, "--format", "json", timeout=120)
    if r.returncode == 0:
        doc = json.loads(r.stdout)
        t = doc["iteration_time_s"]
        assert 0 <= t < 1e10, t
    else:
        refused(r.returncode, r.stderr)


# ------------------------------------------------ class 3: small inputs, bounded resources


@pytest.mark.parametrize("kind", ["huge", "deep", "wide-alias"])
def test_config_files_bounded(tmp_path: Path, kind: str) -> None:
    cfg = tmp_path / "c.yaml"
    if kind == "huge":  # a 2 MiB config: refused by size before parsing
        cfg.write_text("tables:\n" + "  - {rows: 1000, dim: 64, pooling: 1}\n" * 60_000)
    elif kind == "deep":  # 100k nested lists: refused or parsed, never a crash
        cfg.write_text("layers: " + "[" * 100_000 + "]" * 100_000 + "\n")
    else:  # one anchor, many aliases (quadratic, not exponential): refused at the first alias
        cfg.write_text("a: &a [1, 2, 3]\n" + "".join(f"k{i}: *a\n" for i in range(5000)))
    r = _cli("plan", "transformer", "--config", str(cfg), "--gpus", "8", "--node",
             "DGX-A100", timeout=60)
    line = refused(r.returncode, r.stderr, str(cfg))
    assert len(line) < 400


# ------------------------------------------------ class 3: user regexes run in linear time

EVIL = "(a+)+$"


def _named_kernel_trace(path: Path, name: str) -> Path:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
               "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
               "tid": 1, "ts": 1, "dur": 4, "args": {"correlation": 7}},
              {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 6,
               "dur": 50, "args": {"correlation": 7, "stream": 7, "device": 0}}]
    return _write_trace(path, {"traceEvents": events})


def test_catastrophic_regex_in_speedup_is_linear(tmp_path: Path) -> None:
    """``(a+)+$`` against a name of 'a's ending in 'b' takes minutes with backtracking; with
    RE2 it is instant (bounded here by the subprocess timeout), and since it matches no event
    the what-if is refused, naming the regex."""
    t = _named_kernel_trace(tmp_path / "t.json", "a" * 40 + "b")
    r = _cli("predict", str(t), "--what-if", f"speedup={EVIL}=2", "--format", "json",
             timeout=60)
    refused(r.returncode, r.stderr, "matches no event", EVIL)


def test_catastrophic_regex_as_iteration_marker(tmp_path: Path) -> None:
    t = _named_kernel_trace(tmp_path / "t.json", "k")
    doc = json.loads(t.read_text())
    doc["traceEvents"][0]["name"] = "a" * 40 + "b"
    t.write_text(json.dumps(doc))
    r = _cli("analyze", str(t), "--what", "breakdown", "--iteration-marker", EVIL, timeout=60)
    refused(r.returncode, r.stderr, "matches no host event")


@pytest.mark.parametrize("pattern", ["(?=x)k", r"(k)\1", "k{1000}{1000}", "(", "x" * 5000])
def test_unsupported_regexes_refused(tmp_path: Path, pattern: str, capsys) -> None:
    t = _named_kernel_trace(tmp_path / "t.json", "k")
    rc = main(["predict", str(t), "--what-if", f"speedup={pattern}=2"])
    line = refused(rc, capsys.readouterr().err, "--what-if speedup")
    assert len(line) < 400


# ---------------------------------------- class 5: ranks that disagree on a collective's size


@pytest.fixture(scope="module")
def mismatched(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The DLRM 8xV100 traces with one all_reduce of rank 3 made 1,000x smaller."""
    out = tmp_path_factory.mktemp("mismatch")
    for f in (traces / "dlrm_8xv100" / "kineto").iterdir():
        shutil.copy(f, out)
    p = out / "rank-3.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(p.read_bytes()))
    done = 0
    for ev in doc["traceEvents"]:
        if ev.get("name") == "nccl:all_reduce" and not done:
            (n,) = ev["args"]["Input Dims"][0]
            ev["args"]["Input Dims"] = [[max(1, n // 1000)]]
            done = n
    assert done
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def test_mismatched_collective_sizes_warn(mismatched: Path, capsys) -> None:
    rc = main(["predict", str(mismatched), "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0
    (line,) = [x for x in err.splitlines() if "sizes differ" in x]
    assert "rank-3.pt.trace.json.gz" in line and "rank 3" in line and "all_reduce" in line
    assert " B, rank " in line and "--strict" in line


@pytest.mark.parametrize("command", ["predict", "analyze"])
def test_mismatched_collective_sizes_strict(mismatched: Path, tmp_path: Path, command: str,
                                            capsys) -> None:
    out = tmp_path / "report.json"
    argv = [command, str(mismatched), "--strict"]
    if command == "analyze":
        argv += ["--format", "json", "--out", str(out)]
    rc = main(argv)
    refused(rc, capsys.readouterr().err, "rank-3.pt.trace.json.gz", "all_reduce", "rank 3")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_consistent_traces_pass_strict(traces: Path, capsys) -> None:
    assert main(["predict", str(traces / "dlrm_8xv100" / "kineto"), "--strict"]) == 0


# ------------------------------------------------------- class 6: outputs and the parse cache


def test_read_only_out_is_not_replaced(traces: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report.txt"
    out.write_text("keep me\n")
    out.chmod(0o444)
    rc = main(["analyze", str(traces / "hta" / "a100_2rank_nccl"), "--what", "breakdown",
               "--out", str(out)])
    refused(rc, capsys.readouterr().err, str(out), "read-only")
    assert out.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]  # no temporary left
    out.chmod(0o644)  # writable again: replaced, permissions kept
    assert main(["analyze", str(traces / "hta" / "a100_2rank_nccl"), "--what", "breakdown",
                 "--out", str(out)]) == 0
    assert "breakdown" in out.read_text() and (out.stat().st_mode & 0o777) == 0o644


def _one_entry(cache: Path) -> Path:
    (entry,) = cache.rglob("*.arrows")
    return entry


def test_cache_entry_with_another_schema_is_reparsed(traces: Path, tmp_path: Path) -> None:
    import dataclasses

    import traincast
    from traincast.trace.cache import TraceCache, file_key

    src = traces / "hta" / "a100_2rank_nccl"
    cache = tmp_path / "cache"
    first = traincast.load(src, cache=cache)
    store = TraceCache(cache)
    for f in sorted(src.iterdir()):
        key = file_key(f)
        recs = store.get(f, key)
        if recs:  # an entry of "another schema": the events without their dur column
            store.put(key, [dataclasses.replace(r, events=r.events.drop_columns(["dur"]))
                            for r in recs])
            assert store.get(f, key) is None
    again = traincast.load(src, cache=cache)  # parsed again, not a crash
    assert again.events.equals(first.events)
    third = traincast.load(src, cache=cache)  # and the entry was rewritten
    assert third.events.equals(first.events)


def test_cache_hit_keeps_the_gzip_ratio_check(traces: Path, tmp_path: Path,
                                             monkeypatch) -> None:
    """A trace cached while the ratio check was off is still refused once a ratio is in
    force that its parse would fail (the 64 MiB floor of the check is lowered to 0 here so a
    real 3 MB trace can show it)."""
    import traincast
    import traincast.trace.readers.jsonscan as J
    from traincast.errors import InputTooLargeError

    src = traces / "dlrm_8xv100" / "kineto" / "rank-0.pt.trace.json.gz"
    monkeypatch.setattr(J, "_RATIO_FLOOR", 0)
    monkeypatch.setenv("TRAINCAST_MAX_INFLATE_RATIO", "0")  # off: parsed and cached
    traincast.load(src, cache=tmp_path / "cache")
    assert list((tmp_path / "cache").rglob("*.arrows"))
    monkeypatch.setenv("TRAINCAST_MAX_INFLATE_RATIO", "2")  # it inflates ~6x
    with pytest.raises(InputTooLargeError, match="inflates more than 2x"):
        traincast.load(src, cache=tmp_path / "cache")


def test_cache_entries_follow_the_umask(traces: Path, tmp_path: Path) -> None:
    import traincast

    old = os.umask(0o022)
    try:
        traincast.load(traces / "hta" / "a100_2rank_nccl", cache=tmp_path / "cache")
    finally:
        os.umask(old)
    for entry in (tmp_path / "cache").rglob("*.arrows"):
        assert entry.stat().st_mode & 0o777 == 0o644  # readable by the group and others


def test_cycle_error_names_the_traces(traces: Path, monkeypatch) -> None:
    import traincast
    import traincast.simulate.replay as P  # where the replay simulates
    from traincast.simulate.engine import CyclicGraphError

    ts = traincast.load(traces / "hta" / "a100_2rank_nccl")

    def cyclic(*a, **k):
        raise CyclicGraphError("3 points lie on dependency cycles")

    monkeypatch.setattr(P, "simulate", cyclic)
    with pytest.raises(CyclicGraphError) as exc:
        traincast.predict(ts)
    assert "a100_2rank_nccl" in str(exc.value) and "cycles" in str(exc.value)


# ------------------------------------------------------------ non-regular files, every command


def _tiny_trace(path: Path) -> Path:
    """A valid one-step Kineto trace of three host ops."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0.0,
           "dur": 40.0, "pid": 1, "tid": 1, "args": {}}]
    ev += [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 2.0 + 10 * i, "dur": 8.0,
            "pid": 1, "tid": 1, "args": {}} for i in range(3)]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def _special(tmp_path: Path, kind: str) -> Path:
    """A path of ``kind``: a FIFO, a character device, a socket or a directory."""
    if kind == "fifo":
        p = tmp_path / "t.json"
        os.mkfifo(p)
        return p
    if kind == "chardev":
        return Path("/dev/zero")
    if kind == "socket":
        import socket

        p = tmp_path / "s.json"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(p))
        sock.close()  # the socket file stays
        return p
    p = tmp_path / "d.json"
    p.mkdir()
    return p


TRACE_COMMANDS = {
    "analyze": lambda t, o: ["analyze", str(t), "--format", "json"],
    "predict": lambda t, o: ["predict", str(t), "--format", "json"],
    "diff": lambda t, o: ["diff", str(t), str(t)],
    "convert": lambda t, o: ["convert", str(t), "--out", str(o / "conv")],
}


@pytest.mark.parametrize("kind", ["fifo", "chardev", "socket", "dir"])
@pytest.mark.parametrize("command", sorted(TRACE_COMMANDS))
def test_non_regular_trace_argument(tmp_path: Path, command: str, kind: str) -> None:
    """Every command's trace argument: a FIFO, a character device or a socket is refused in
    one line at once (never opened and read until it ends); an empty directory is refused as
    holding no trace."""
    if kind in ("fifo", "socket") and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    bad = _special(tmp_path, kind)
    out = tmp_path / "out"
    out.mkdir()
    r = _cli(*TRACE_COMMANDS[command](bad, out), timeout=60)
    refused(r.returncode, r.stderr, bad.name)
    assert r.stdout.strip() == ""
    assert not any(out.iterdir())


OUTPUT_COMMANDS = {
    "analyze --out": lambda t, o: ["analyze", str(t), "--format", "json", "--out", str(o)],
    "predict --timeline-out": lambda t, o: ["predict", str(t), "--timeline-out", str(o)],
    "diff --out": lambda t, o: ["diff", str(t), str(t), "--format", "json", "--out", str(o)],
}


@pytest.mark.parametrize("kind", ["fifo", "socket", "dir"])
@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
def test_non_regular_output_argument(tmp_path: Path, command: str, kind: str) -> None:
    """Every command's output argument: a FIFO nobody reads, a socket or a directory is
    refused in one line at once, and left as it was (never renamed over)."""
    trace = _tiny_trace(tmp_path / "trace.json")
    bad = _special(tmp_path, kind)
    before = os.lstat(bad)
    r = _cli(*OUTPUT_COMMANDS[command](trace, bad), timeout=60)
    refused(r.returncode, r.stderr, bad.name)
    after = os.lstat(bad)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
def test_character_device_output_written_in_place(tmp_path: Path, command: str) -> None:
    """``/dev/null`` as an output: written in place, the device node stays a device."""
    trace = _tiny_trace(tmp_path / "trace.json")
    r = _cli(*OUTPUT_COMMANDS[command](trace, Path("/dev/null")), timeout=60)
    assert r.returncode == 0, r.stderr
    assert Path("/dev/null").is_char_device()
