"""Bad input: every case raises its own exception from traincast.errors naming the file, and
the CLI turns it into exactly one ``traincast: error:`` line on stderr, exit code 2, no
traceback and no half-written output."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import traincast
from traincast.cli import app, main
from traincast.errors import (
    CollectiveMismatchError,
    EmptyTraceDirError,
    ExecutionTraceMismatchError,
    IterationError,
    OutputError,
    ParameterError,
    RankError,
    TraceFormatError,
    TraincastError,
)
from traincast.export.chrome import write_chrome_trace

# ----------------------------------------------------------------------------- helpers


def _dlrm(traces: Path, rank: int = 0) -> Path:
    return traces / "dlrm_8xv100" / "kineto" / f"rank-{rank}.pt.trace.json.gz"


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _assert_one_error_line(rc: int, out: str, err: str, *names: str) -> str:
    assert rc == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("traincast: error:"), lines[0]
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert out == ""
    return lines[0]


def _rewrite(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    edit(doc)
    dst.write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return dst


# ----------------------------------------------------------------------------- cases
# Each builds bad input under tmp and returns (path to pass, exception, names in message).

Case = tuple[Path, type[TraincastError], tuple[str, ...]]


def truncated_gzip(tmp: Path, traces: Path) -> Case:
    raw = _dlrm(traces).read_bytes()
    p = tmp / "rank-0.pt.trace.json.gz"
    p.write_bytes(raw[: len(raw) // 2])
    return p, TraceFormatError, (p.name,)


def corrupt_gzip(tmp: Path, traces: Path) -> Case:
    raw = bytearray(_dlrm(traces).read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + 64] = bytes(b ^ 0xFF for b in raw[mid : mid + 64])
    p = tmp / "rank-0.pt.trace.json.gz"
    p.write_bytes(bytes(raw))
    return p, TraceFormatError, (p.name,)


def truncated_json(tmp: Path, traces: Path) -> Case:
    text = gzip.decompress(_dlrm(traces).read_bytes())
    p = tmp / "rank-0.pt.trace.json"
    p.write_bytes(text[: len(text) // 2])
    return p, TraceFormatError, (p.name,)


def json_cut_after_events(tmp: Path, traces: Path) -> Case:
    text = gzip.decompress(_dlrm(traces).read_bytes())
    p = tmp / "rank-0.pt.trace.json"
    p.write_bytes(text[:-3])  # the events are complete, the document is not
    return p, TraceFormatError, (p.name,)


def not_json(tmp: Path, traces: Path) -> Case:
    p = tmp / "trace.json"
    p.write_text("this is not JSON, just text\n")
    return p, TraceFormatError, (p.name,)


def json_not_a_trace(tmp: Path, traces: Path) -> Case:
    p = tmp / "trace.json"
    p.write_text('{"a": 1}')
    return p, TraceFormatError, (p.name,)


def events_not_objects(tmp: Path, traces: Path) -> Case:
    p = tmp / "trace.json"
    p.write_text('{"traceEvents": [1, 2, 3]}')
    return p, TraceFormatError, (p.name,)


def empty_file(tmp: Path, traces: Path) -> Case:
    p = tmp / "trace.json.gz"
    p.write_bytes(b"")
    return p, TraceFormatError, (p.name,)


def empty_folder(tmp: Path, traces: Path) -> Case:
    d = tmp / "no_traces_here"
    d.mkdir()
    (d / "README.txt").write_text("not a trace")
    return d, EmptyTraceDirError, (d.name,)


def nonexistent_path(tmp: Path, traces: Path) -> Case:
    return tmp / "does_not_exist", EmptyTraceDirError, ("does_not_exist",)


def only_execution_traces(tmp: Path, traces: Path) -> Case:
    d = tmp / "ets"
    d.mkdir()
    shutil.copy(traces / "dlrm_8xv100" / "et" / "rank-0.et.json.gz", d)
    return d, EmptyTraceDirError, (d.name,)


def junk_json_next_to_traces(tmp: Path, traces: Path) -> Case:
    d = tmp / "run"
    d.mkdir()
    shutil.copy(_dlrm(traces), d)
    (d / "config.json").write_text('{"lr": 0.1}')
    return d, TraceFormatError, ("config.json",)


def duplicate_ranks(tmp: Path, traces: Path) -> Case:
    d = tmp / "run"
    d.mkdir()
    shutil.copy(_dlrm(traces), d / "rank-0.pt.trace.json.gz")
    shutil.copy(_dlrm(traces), d / "copy.json.gz")
    return d, RankError, ("rank-0.pt.trace.json.gz", "copy.json.gz")


def different_world_sizes(tmp: Path, traces: Path) -> Case:
    d = tmp / "run"
    d.mkdir()
    shutil.copy(_dlrm(traces, 0), d)

    def edit(doc: dict) -> None:
        doc["distributedInfo"]["world_size"] = 16

    _rewrite(_dlrm(traces, 1), d / "rank-1.pt.trace.json.gz", edit)
    return d, RankError, ("rank-1.pt.trace.json.gz",)


def rank_outside_world(tmp: Path, traces: Path) -> Case:
    def edit(doc: dict) -> None:
        doc["distributedInfo"]["rank"] = 9

    p = _rewrite(_dlrm(traces, 1), tmp / "rank-1.pt.trace.json.gz", edit)
    return p, RankError, (p.name,)


def several_files_without_rank(tmp: Path, traces: Path) -> Case:
    d = tmp / "run"
    d.mkdir()
    src = traces / "hta" / "edge" / "no_distributed_info.json.gz"
    shutil.copy(src, d / "a.json.gz")
    shutil.copy(src, d / "b.json.gz")
    return d, RankError, ("a.json.gz", "rank map")


def execution_trace_of_missing_rank(tmp: Path, traces: Path) -> Case:
    d = tmp / "run"
    d.mkdir()
    shutil.copy(_dlrm(traces, 0), d)
    shutil.copy(traces / "dlrm_8xv100" / "et" / "rank-5.et.json.gz", d)
    return d, ExecutionTraceMismatchError, ("rank-5.et.json.gz",)


CASES = [truncated_gzip, corrupt_gzip, truncated_json, json_cut_after_events, not_json,
         json_not_a_trace, events_not_objects, empty_file, empty_folder, nonexistent_path,
         only_execution_traces, junk_json_next_to_traces, duplicate_ranks,
         different_world_sizes, rank_outside_world, several_files_without_rank,
         execution_trace_of_missing_rank]


@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_load_raises_specific_error(make: Callable[[Path, Path], Case], tmp_path: Path,
                                    traces: Path) -> None:
    path, exc_type, names = make(tmp_path, traces)
    with pytest.raises(exc_type) as info:
        traincast.load(path)
    assert type(info.value) is exc_type
    msg = str(info.value)
    for name in names:
        assert name in msg, (name, msg)
    assert info.value.path is not None and Path(info.value.path).name in msg
    assert "\n" not in msg


@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_cli_reports_one_line_and_writes_nothing(make: Callable[[Path, Path], Case],
                                                 tmp_path: Path, traces: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path, _, names = make(tmp_path, traces)
    out_file = tmp_path / "timeline.json.gz"
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, out, err = _cli(capsys, "predict", path, "--format", "json", "--timeline-out", out_file)
    _assert_one_error_line(rc, out, err, *names)
    assert not out_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporaries either


def test_iteration_marker_matching_nothing(traces: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = traces / "hta" / "edge" / "cpu_only_rank34.json.gz"
    with pytest.raises(IterationError, match="cpu_only_rank34.json.gz"):
        traincast.load(path, iteration_marker="no_such_marker")
    rc, out, err = _cli(capsys, "predict", path, "--iteration-marker", "no_such_marker")
    _assert_one_error_line(rc, out, err, "cpu_only_rank34.json.gz", "no_such_marker")


# ----------------------------------------------------------------------------- ET of another run


def test_execution_trace_from_another_run(tmp_path: Path, traces: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    foreign = traces / "linear_1x2080ti" / "et.json.gz"
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(_dlrm(traces, 0), d)
    shutil.copy(foreign, d / "rank-0.et.json.gz")
    with pytest.raises(ExecutionTraceMismatchError, match="rank-0.et.json.gz"):
        traincast.load(d)
    out_file = tmp_path / "t.json.gz"
    rc, out, err = _cli(capsys, "predict", d, "--timeline-out", out_file)
    _assert_one_error_line(rc, out, err, "rank-0.et.json.gz")
    assert not out_file.exists()


# ----------------------------------------------------------------------------- collectives


@pytest.fixture()
def inconsistent_demo(tmp_path: Path, demo_traces: Path) -> Path:
    """The demo run with one gloo:all_reduce of the last profiled step deleted on rank 1."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(demo_traces / "rank-0.pt.trace.json.gz", d)

    def drop_one(doc: dict) -> None:
        ev = doc["traceEvents"]
        step = max((e for e in ev if e.get("name", "").startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
        inside = [i for i, e in enumerate(ev) if e.get("name") == "gloo:all_reduce"
                  and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
        assert len(inside) >= 2
        del ev[inside[0]]

    _rewrite(demo_traces / "rank-1.pt.trace.json.gz", d / "rank-1.pt.trace.json.gz", drop_one)
    return d


def test_consistent_demo_predicts(demo_traces: Path, tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(demo_traces / f"rank-{r}.pt.trace.json.gz", d)
    pred = traincast.predict(traincast.load(d))
    assert pred.summary["iterations"] == 6


def test_inconsistent_collectives(inconsistent_demo: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    ts = traincast.load(inconsistent_demo)  # each file is fine on its own
    with pytest.raises(CollectiveMismatchError) as info:
        traincast.predict(ts)
    msg = str(info.value)
    assert "rank-0.pt.trace.json.gz" in msg or "rank-1.pt.trace.json.gz" in msg
    assert "rank 1" in msg and "rank 0" in msg
    out_file = tmp_path / "timeline.json.gz"
    rc, out, err = _cli(capsys, "predict", inconsistent_demo, "--timeline-out", out_file)
    _assert_one_error_line(rc, out, err, "rank-")
    assert not out_file.exists()


# ----------------------------------------------------------------------------- outputs


def test_timeline_out_in_missing_folder(tmp_path: Path, traces: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing" / "timeline.json.gz"
    ts = traincast.load(_dlrm(traces, 0))
    with pytest.raises(OutputError, match="missing"):
        write_chrome_trace(target, ts)
    rc, out, err = _cli(capsys, "predict", _dlrm(traces, 0), "--format", "json",
                        "--timeline-out", target)
    _assert_one_error_line(rc, out, err, "missing")
    assert not target.parent.exists()


@pytest.mark.parametrize("where", ["parent_is_a_file", "target_is_a_folder"])
def test_timeline_out_unwritable(where: str, tmp_path: Path, traces: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    if where == "parent_is_a_file":
        (tmp_path / "afile").write_text("x")
        target = tmp_path / "afile" / "timeline.json.gz"
    else:
        target = tmp_path / "timeline.json.gz"
        target.mkdir()
    rc, out, err = _cli(capsys, "predict", _dlrm(traces, 0), "--format", "json",
                        "--timeline-out", target)
    _assert_one_error_line(rc, out, err, "timeline.json.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        ["afile"] if where == "parent_is_a_file" else ["timeline.json.gz"])
    if where == "target_is_a_folder":
        assert list(target.iterdir()) == []
    with pytest.raises(OutputError):
        write_chrome_trace(target, traincast.load(_dlrm(traces, 0)))


@pytest.mark.parametrize("value", ["a.json.gz", "a.json.gz=x", "a.json.gz=-1", "=3x"])
def test_bad_rank_map(value: str, tmp_path: Path, traces: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "run"
    d.mkdir()
    src = traces / "hta" / "edge" / "no_distributed_info.json.gz"
    shutil.copy(src, d / "a.json.gz")
    shutil.copy(src, d / "b.json.gz")
    with pytest.raises(ParameterError, match="--rank-map"):
        app(args=["predict", str(d), "--rank-map", value], standalone_mode=False)
    capsys.readouterr()
    out_file = tmp_path / "t.json.gz"
    rc, out, err = _cli(capsys, "predict", d, "--rank-map", value, "--timeline-out", out_file)
    line = _assert_one_error_line(rc, out, err, "--rank-map")
    assert repr(value) in line
    assert not out_file.exists()
    # the same folder with a good map works
    rc, out, err = _cli(capsys, "predict", d, "--rank-map", "a.json.gz=0", "--rank-map",
                        "b.json.gz=1", "--format", "json")
    assert rc == 0, err
    assert [r["rank"] for r in json.loads(out)["ranks"]] == [0, 1]


# ----------------------------------------------------------------------------- valid input


def test_cpu_only_trace_is_valid(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = traces / "hta" / "edge" / "cpu_only_rank34.json.gz"
    pred = traincast.predict(traincast.load(path))
    assert pred.summary["iterations"] == 1
    rc, out, err = _cli(capsys, "predict", path, "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [r["rank"] for r in doc["ranks"]] == [34]
    (row,) = doc["ranks"][0]["iterations"]
    assert row["iteration"] == 551
    assert row["measured_ns"] == 210_109_162  # ProfilerStep#551: 210109.162 µs


def test_trace_without_gpu_events_is_valid(traces: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = traces / "hta" / "edge" / "no_distributed_info.json.gz"
    ts = traincast.load(path)
    assert set(ts.column("device").tolist()) == {-1}
    rc, out, err = _cli(capsys, "predict", path, "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["summary"]["iterations"] == 1
    (row,) = doc["ranks"][0]["iterations"]
    raw = json.loads(gzip.decompress(path.read_bytes()))
    (step,) = [e for e in raw["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    assert row["iteration"] == int(step["name"].split("#")[1]) == 1009
    assert row["measured_ns"] == round(step["dur"] * 1000)


def test_trace_with_no_events_is_valid(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text('{"traceEvents": [], "distributedInfo": {"rank": 0, "world_size": 1}}')
    with pytest.warns(UserWarning, match="no ProfilerStep"):
        ts = traincast.load(p)
    assert ts.events.num_rows == 0 and ts.rank_ids == [0]


# ------------------------------------------------ formerly bugs (found by these tests, fixed)


@pytest.mark.parametrize("argv", [["predict", "--no-such-option", "x"],
                                  ["predict", "x", "--format", "yaml"]])
def test_usage_errors_exit_2_without_traceback(argv: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2
    assert "Traceback" not in err and err.strip()


def test_invalid_utf8_is_a_format_error_or_accepted(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "caf\xe9", '
                  b'"pid": 1, "tid": 1, "ts": 1, "dur": 2}]}')
    try:
        ts = traincast.load(p)
    except TraceFormatError as exc:
        assert p.name in str(exc)
    else:
        assert ts.events.num_rows == 1


def test_absurd_timestamp_is_a_format_error(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, '
                 '"tid": 1, "ts": 1e300, "dur": 2}]}')
    with pytest.raises(TraceFormatError, match="rank-0.json"):
        traincast.load(p)


def test_trace_events_text_before_the_array(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps({
        "otherData": {"keys": ["traceEvents"]},
        "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
                         "tid": 1, "ts": 1, "dur": 2}],
    }))
    ts = traincast.load(p)
    assert ts.events.num_rows == 1


def test_execution_trace_of_another_rank(tmp_path: Path, traces: Path) -> None:
    """Same program, other rank: op names match, the collectives' issuing rank does not."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(_dlrm(traces, 3), d)
    shutil.copy(traces / "dlrm_8xv100" / "et" / "rank-0.et.json.gz", d / "rank-3.et.json.gz")
    with pytest.raises(ExecutionTraceMismatchError, match="issued by rank 0, not by rank 3"):
        traincast.load(d)


def test_traincast_timeline_is_not_a_trace(traces: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(_dlrm(traces, 0), d)
    assert main(["predict", str(d), "--timeline-out", str(d / "tl.json.gz")]) == 0
    capsys.readouterr()
    rc = main(["predict", str(d)])
    _, err = capsys.readouterr()
    assert rc == 2 and "tl.json.gz" in err and "written by traincast" in err
