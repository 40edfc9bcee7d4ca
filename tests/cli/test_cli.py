"""The ``traincast`` command: predict (json and table), the Chrome-trace timeline, demo, version.

Runs ``traincast.cli.main`` in-process, plus one real call of the installed console script.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import traincast
from traincast.cli import main

# SOURCES.md: ProfilerStep#10 of dlrm_8xv100 ranks 0..7, µs
DLRM_STEP_US = [14455, 19901, 13017, 19313, 17979, 17797, 13091, 12509]


@pytest.fixture(scope="module")
def dlrm_dir(traces: Path) -> Path:
    return traces / "dlrm_8xv100" / "kineto"


@pytest.fixture(scope="module")
def dlrm_run(dlrm_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[dict[str, Any], Path]:
    """``traincast predict DLRM --format json --timeline-out out.json.gz``, run once."""
    out_dir = tmp_path_factory.mktemp("predict")
    timeline = out_dir / "out.json.gz"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(["predict", str(dlrm_dir), "--format", "json", "--timeline-out",
                   str(timeline)])
    assert rc == 0, stderr.getvalue()
    assert sorted(p.name for p in out_dir.iterdir()) == ["out.json.gz"]  # no temporaries
    return json.loads(stdout.getvalue()), timeline


def _check_contract(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Validate the ``--format json`` contract; return all iteration rows."""
    assert {"ranks", "summary"} <= set(doc)
    rows = []
    for r in doc["ranks"]:
        assert set(r) == {"rank", "iterations"} and isinstance(r["rank"], int)
        for it in r["iterations"]:
            assert set(it) == {"iteration", "measured_ns", "predicted_ns", "error_pct",
                               "breakdown_ns", "unprofiled_ns", "bounds_ns"}
            b = it["bounds_ns"]
            assert set(b) == {"device_bound", "host_bound", "comm_bound", "bound", "added",
                              "upper_bound"}
            assert b["bound"] == max(b["device_bound"], b["host_bound"], b["comm_bound"])
            assert isinstance(it["unprofiled_ns"], int)
            assert 0 < it["unprofiled_ns"] <= it["predicted_ns"]
            assert isinstance(it["iteration"], int)
            assert isinstance(it["measured_ns"], int) and it["measured_ns"] > 0
            assert isinstance(it["predicted_ns"], int) and it["predicted_ns"] > 0
            assert isinstance(it["error_pct"], float)
            want = 100.0 * (it["predicted_ns"] - it["measured_ns"]) / it["measured_ns"]
            assert it["error_pct"] == pytest.approx(want, abs=1e-4)
            bd = it["breakdown_ns"]
            assert bd and all(isinstance(v, int) and v >= 0 for v in bd.values())
            assert sum(bd.values()) == it["predicted_ns"]
            rows.append({"rank": r["rank"], **it})
    s = doc["summary"]
    assert set(s) >= {"mape_pct", "max_ape_pct", "iterations"}
    assert isinstance(s["mape_pct"], float) and isinstance(s["max_ape_pct"], float)
    assert s["iterations"] == len(rows)
    apes = [abs(r["error_pct"]) for r in rows]
    assert s["mape_pct"] == pytest.approx(sum(apes) / len(apes), abs=1e-3)
    assert s["max_ape_pct"] == pytest.approx(max(apes), abs=1e-3)
    return rows


# ----------------------------------------------------------------------------- predict json


def test_predict_json_contract(dlrm_run: tuple[dict[str, Any], Path]) -> None:
    doc, _ = dlrm_run
    rows = _check_contract(doc)
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert [r["iteration"] for r in rows] == [10] * 8
    assert [r["measured_ns"] for r in rows] == [us * 1000 for us in DLRM_STEP_US]
    assert set(rows[0]["breakdown_ns"]) == {"compute", "exposed_comm", "host_idle", "other"}
    # replay of the measured trace reproduces it closely
    assert all(abs(r["error_pct"]) < 5 for r in rows)
    assert doc["summary"]["iterations"] == 8
    assert doc["summary"]["max_ape_pct"] < 5


def test_predict_json_matches_the_api(dlrm_run: tuple[dict[str, Any], Path],
                                      dlrm_dir: Path) -> None:
    doc, _ = dlrm_run
    pred = traincast.predict(traincast.load(dlrm_dir))
    api = pred.to_dict()
    assert api["ranks"] == doc["ranks"]
    assert api["summary"] == doc["summary"]


# ----------------------------------------------------------------------------- timeline


def test_timeline_is_a_chrome_trace(dlrm_run: tuple[dict[str, Any], Path],
                                    dlrm_dir: Path) -> None:
    doc, path = dlrm_run
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    trace = json.loads(gzip.decompress(raw))
    events = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs.values()) == sorted(
        [f"rank {r} measured" for r in range(8)] + [f"rank {r} predicted" for r in range(8)])
    assert {e["ph"] for e in events} == {"X", "M"}
    xs = [e for e in events if e["ph"] == "X"]
    for e in xs:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert e["pid"] in procs and isinstance(e["name"], str)
    # every measured event is there, per rank
    ts = traincast.load(dlrm_dir)
    by_pid: dict[int, int] = {}
    for e in xs:
        by_pid[e["pid"]] = by_pid.get(e["pid"], 0) + 1
    pid_of = {name: pid for pid, name in procs.items()}
    for r in range(8):
        lo, hi = ts.rank_slice(r)
        assert by_pid[pid_of[f"rank {r} measured"]] == hi - lo
        assert by_pid[pid_of[f"rank {r} predicted"]] == hi - lo
    # ts/dur in µs: the step markers have the measured and the predicted step times
    predicted = {r["rank"]: r["iterations"][0]["predicted_ns"] for r in doc["ranks"]}
    for r in range(8):
        (m,) = [e for e in xs if e["pid"] == pid_of[f"rank {r} measured"]
                and e["name"] == "ProfilerStep#10"]
        (p,) = [e for e in xs if e["pid"] == pid_of[f"rank {r} predicted"]
                and e["name"] == "ProfilerStep#10"]
        assert m["dur"] == pytest.approx(DLRM_STEP_US[r], abs=1e-3)
        assert p["dur"] == pytest.approx(predicted[r] / 1000, abs=1e-3)
    # threads and GPU streams are named
    lanes = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert any(e["args"]["name"].startswith("stream ") for e in lanes)
    first = min(e["ts"] for e in xs if procs[e["pid"]].endswith("measured"))
    assert math.isclose(first, 0.0, abs_tol=1e-9)


# ----------------------------------------------------------------------------- predict table


def test_predict_table(dlrm_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["predict", str(dlrm_dir)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = {}
    for line in out.splitlines():
        tok = line.split()
        if len(tok) >= 4 and tok[0].isdigit() and tok[1] == "10":
            rows[int(tok[0])] = tok
    assert sorted(rows) == list(range(8))
    for r, tok in rows.items():
        assert float(tok[2].replace(",", "")) == pytest.approx(DLRM_STEP_US[r] / 1000,
                                                               abs=0.01)
    assert "MAPE" in out


# ----------------------------------------------------------------------------- demo, version


def test_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="torch is needed to record the demo run")
    out_dir = tmp_path / "demo"
    rc = main(["demo", "--out", str(out_dir), "--steps", "3", "--warmup", "1",
               "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "predicted", "rank-0.et.json.gz", "rank-0.pt.trace.json.gz", "rank-1.et.json.gz",
        "rank-1.pt.trace.json.gz"]
    doc = json.loads(out)
    rows = _check_contract(doc)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert [(r["rank"], r["iteration"]) for r in rows] == [(0, 1), (0, 2), (0, 3),
                                                           (1, 1), (1, 2), (1, 3)]
    trace = json.loads(gzip.decompress((out_dir / "predicted" / "timeline.json.gz"
                                        ).read_bytes()))
    procs = sorted(e["args"]["name"] for e in trace["traceEvents"]
                   if e["ph"] == "M" and e["name"] == "process_name")
    assert procs == ["rank 0 measured", "rank 0 predicted", "rank 1 measured",
                     "rank 1 predicted"]
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"gloo:all_reduce", "ProfilerStep#1", "ProfilerStep#3"} <= names
    # the demo folder can be predicted again as it is (the timeline is not a rank's trace)
    assert main(["predict", str(out_dir), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["iterations"] == 6


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    out, _ = capsys.readouterr()
    assert out == f"{traincast.__version__}\n"
    assert traincast.__version__.count(".") == 2


# ----------------------------------------------------------------------------- console script


def test_installed_console_script(dlrm_dir: Path,
                                  dlrm_run: tuple[dict[str, Any], Path]) -> None:
    exe = shutil.which("traincast")
    if exe is None:
        pytest.skip("the traincast console script is not on PATH")
    proc = subprocess.run([exe, "predict", str(dlrm_dir), "--format", "json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ranks"] == dlrm_run[0]["ranks"]
    assert doc["summary"] == dlrm_run[0]["summary"]


def test_version_and_short_help_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"{traincast.__version__}\n"
    assert main(["-h"]) == 0
    out = capsys.readouterr().out
    assert "predict" in out and "analyze" in out
    assert main(["predict", "-h"]) == 0
    assert "TRACE" in capsys.readouterr().out.upper()


def _command_paths() -> list[list[str]]:
    import typer

    from traincast.cli import app

    out: list[list[str]] = [[]]

    def walk(cmd, path: list[str]) -> None:
        if hasattr(cmd, "commands"):  # a group (typer's own click)
            for name, sub in cmd.commands.items():
                out.append([*path, name])
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def test_every_help_reads_well_at_80_columns(monkeypatch, capsys) -> None:
    """Issue 18: ``--help`` of every command wraps sentences at 80 columns: no line longer
    than 80, nothing cut ("..." inside a name or a box), no docstring hard line breaks (a
    description line ending mid-sentence far before the margin)."""
    from traincast.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    paths = _command_paths()
    assert ["plan", "dlrm"] in paths and ["analyze"] in paths
    for path in paths:
        assert main([*path, "--help"]) == 0
        text = capsys.readouterr().out
        lines = text.splitlines()
        assert all(len(x) <= 80 for x in lines), (path, max(lines, key=len))
        assert "…" not in text and "│" not in text, path
        # description paragraphs: between the usage line and the first section header
        body = []
        for x in lines[1:]:
            if x.endswith(":") and not x.startswith(" "):
                break
            body.append(x)
        paras = "\n".join(body).split("\n\n")
        for para in paras:
            rows = [r for r in para.splitlines() if r.strip()]
            for r in rows[:-1]:  # every line of a paragraph but its last reaches the margin
                assert len(r) >= 50, (path, r)
