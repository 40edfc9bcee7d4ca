"""benchmarks/record_gpu_set.py: its CPU path records the profiler-cost programs and writes a
manifest naming the machine, each step's command and exit code, and the runs recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "record_gpu_set.py"


def test_cpu_path_records_and_writes_the_manifest(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "set"
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--device", "cpu",
                        "--skip", "bench", "--quick", "--budget-min", "2"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads((out / "MANIFEST.json").read_text())
    assert m["device"] == "cpu" and m["machine"]["torch"]
    assert m["steps"]["pairs"] == {"skipped": "the pairs' models run on CUDA only"}
    assert m["steps"]["pcost"]["rc"] == 0
    assert sorted(r["path"] for r in m["runs"]) == ["pcost/mlp", "pcost/views"]
    run = json.loads((out / "pcost" / "mlp" / ".run.json").read_text())
    assert set(run["median_step_ns"]) == {"none", "kineto", "+shapes", "+stack", "+et"}
    assert (out / "pcost" / "mlp" / "+et" / "et.json.gz").is_file()
