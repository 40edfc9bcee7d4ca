"""`traincast record` on a real GPU (H200), kept in benchmarks/data/record_gpu: the folders it
wrote load, analyze and predict; the manifest holds the unprofiled steps; a GPU execution trace
given to `predict --from-et` with CPU kernel models is refused, naming both devices."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from traincast.cli import main

REPO = Path(__file__).resolve().parents[2]
KEPT = REPO / "benchmarks" / "data" / "record_gpu"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    manifest = json.loads((KEPT / "MANIFEST.json").read_text())
    root = tmp_path_factory.mktemp("record_gpu")
    with tarfile.open(KEPT / manifest["archive"]) as tar:
        tar.extractall(root, filter="data")
    return root / "h200"


@pytest.mark.parametrize("run", ["mlp", "ddp"])
def test_gpu_recording_reads(runs: Path, run: str, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache"))
    d = runs / run
    meta = json.loads((d / ".run.json").read_text())
    assert meta["device"] == "cuda" and "cuda" in meta["profiler"]["activities"]
    assert meta["complete"] and len(meta["unprofiled_steps_ns"]["0"]) == 5
    assert main(["analyze", str(d)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("step ") and "where it goes" in out
    assert main(["predict", str(d), "--format", "json"]) == 0
    pred = json.loads(capsys.readouterr().out)
    rows = pred["ranks"][0]["iterations"]
    assert len(rows) == meta["active"]
    for r in rows:  # the step without the profiler is shorter than the profiled one
        assert 0 < r["unprofiled_ns"] < r["measured_ns"]


def test_gpu_et_refused_by_from_et_with_cpu_models(runs: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp = runs.parent / "models"
    tmp.mkdir(exist_ok=True)
    (models / "models.json").write_text(json.dumps({
        "format": "traincast.kernel_models", "version": 1, "created": "2026-11-26",
        "source": {"device": "cpu", "device_name": "AMD EPYC", "torch": "2.13.0+cpu"},
        "gmae_definition": "", "models": []}))
    rc = main(["predict", "--from-et", str(runs / "mlp" / "rank-0.et.json.gz"),
               "--models", str(models)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "ran on a GPU (cuda tensors)" in err and "AMD EPYC" in err
