"""The real H100 runs kept in the repository (``benchmarks/data/gpu_runs/``) stay usable: the
archive matches its manifest, and a recorded trace from it loads, replays and keeps a what-if
inside its bounds (CI has no GPU; these runs are how GPU behaviour reaches the tests)."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

import traincast

RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "gpu_runs"
MANIFEST = RUNS / "MANIFEST.json"


def test_archive_matches_manifest() -> None:
    m = json.loads(MANIFEST.read_text())
    archive = RUNS / m["archive"]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == m["archive_sha256"]
    with tarfile.open(archive) as tf:
        names = set(tf.getnames())
    for run in m["runs"]:
        assert f"{run['path']}/.run.json" in names
        assert f"{run['path']}/rank-0.pt.trace.json.gz" in names
    assert len(m["runs"]) == 18


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The host-bound MLP at batch 256, first repeat: trace and unprofiled step times."""
    m = json.loads(MANIFEST.read_text())
    run = next(r for r in m["runs"] if r["workload"] == "mlp" and r["batch_size"] == 256)
    out = tmp_path_factory.mktemp("h100")
    with tarfile.open(RUNS / m["archive"]) as tf:
        for name in (f"{run['path']}/.run.json", f"{run['path']}/rank-0.pt.trace.json.gz"):
            tf.extract(name, out, filter="data")
    folder = out / run["path"]
    trace = folder / "rank-0.pt.trace.json.gz"
    assert hashlib.sha256(trace.read_bytes()).hexdigest() == run["trace_sha256"]
    return folder, json.loads((folder / ".run.json").read_text())


def test_kept_h100_trace_replays_and_stays_in_bounds(mlp_run: tuple[Path, dict]) -> None:
    folder, meta = mlp_run
    assert meta["gpu"].startswith("NVIDIA H100")
    ts = traincast.load(folder)
    rep = traincast.predict(ts)
    assert rep.summary["mape_pct"] < 1.0
    it = rep.iterations
    # without the profiler the step is shorter than the profiled one it was predicted from
    assert (it["unprofiled_ns"] < it["measured_ns"]).all()
    fast = traincast.predict(ts, what_if=["speedup=kind:device=3"]).iterations
    assert (fast["predicted_ns"] >= fast["bound_ns"]).all()
    assert (fast["predicted_ns"] <= fast["upper_bound_ns"] * 1.01).all()
    assert (fast["predicted_ns"] <= it["predicted_ns"] * 1.01 + 10_000).all()
