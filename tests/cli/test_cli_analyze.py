"""`traincast analyze` and `traincast diff` end to end (in-process CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traincast.cli import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_analyze_json_to_stdout(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = traces / "dlrm_8xv100" / "kineto"
    rc, out, err = _run(["analyze", str(d), "--what", "breakdown,idle,prediction",
                         "--format", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert set(doc) == {"breakdown", "breakdown_by_rank", "idle", "prediction"}
    assert [r["rank"] for r in doc["breakdown"]] == list(range(8))
    assert all(r["window_ns"] == r["compute_ns"] + r["non_compute_ns"] + r["idle_ns"]
               for r in doc["breakdown"])
    assert [r["measured_ns"] for r in doc["prediction"]] == [
        v * 1000 for v in (14455, 19901, 13017, 19313, 17979, 17797, 13091, 12509)]


def test_analyze_table_and_file_output(traces: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    d = traces / "hta" / "a100_2rank_nccl"
    rc, out, err = _run(["analyze", str(d), "--what", "breakdown,idle"], capsys)
    assert rc == 0, err
    assert "breakdown (3 rows)" in out and "idle (3 rows)" in out
    target = tmp_path / "report.txt"
    rc, out, err = _run(["analyze", str(d), "--what", "breakdown", "--out", str(target)],
                        capsys)
    assert rc == 0 and "breakdown_by_rank" in target.read_text()


def test_analyze_unknown_analysis_is_exit_2(traces: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(["analyze", str(traces / "hta" / "a100_2rank_nccl"), "--what",
                         "breakdown,vibes"], capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "unknown analysis 'vibes'" in lines[0]


def test_analyze_bad_input_writes_nothing(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "rank-0.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1')
    out_file = tmp_path / "out.json"
    rc, out, err = _run(["analyze", str(bad), "--format", "json", "--out", str(out_file)],
                        capsys)
    assert rc == 2 and "rank-0.json" in err and "Traceback" not in err
    assert not out_file.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["rank-0.json"]


def test_html_needs_out(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(["analyze", str(traces / "hta" / "a100_2rank_nccl"), "--what",
                         "breakdown", "--format", "html"], capsys)
    assert rc == 2 and "--out" in err


def test_diff_vs_predicted_and_critical_path_out(traces: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    d = traces / "dlrm_8xv100" / "kineto"
    rc, out, err = _run(["diff", str(d), "--vs-predicted", "--format", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert {"ops", "steps", "summary"} <= set(doc)
    # a replay of the run itself: no op appears or vanishes
    assert not any(r["status"] in ("new", "gone") for r in doc["ops"])
    cp = tmp_path / "cp.json.gz"
    rc, out, err = _run(["analyze", str(d), "--what", "critical_path", "--format", "json",
                         "--out", str(tmp_path / "t.json"), "--critical-path-out", str(cp)],
                        capsys)
    assert rc == 0, err
    trace = json.loads(gzip.decompress(cp.read_bytes()))
    marked = [e for e in trace["traceEvents"] if e.get("args", {}).get("critical") == 1]
    tables = json.loads((tmp_path / "t.json").read_text())
    assert len(marked) > 0 and len({r["rank"] for r in tables["critical_path"]}) > 1
    assert oct(cp.stat().st_mode & 0o777) != oct(0o600)  # usual file mode, not mkstemp's


def test_diff_needs_b_or_vs_predicted(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(["diff", str(traces / "hta" / "a100_2rank_nccl")], capsys)
    assert rc == 2 and "--vs-predicted" in err
