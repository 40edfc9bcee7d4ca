"""The real runs kept in the repository (``benchmarks/data/``) stay usable and predicted: the
archives match their manifests; a recorded H100 trace loads, replays and keeps a what-if inside
its bounds; the unprofiled step predicted from kept H100 and CPU traces (never fitted) is near
the step timed without the profiler (CI has no GPU; these runs are how GPU behaviour reaches
the tests)."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

import traincast

RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "gpu_runs"
MANIFEST = RUNS / "MANIFEST.json"


def _checked_names(folder: Path) -> tuple[dict, set[str]]:
    """The set's manifest and its archive's member names, once the archive's sha256 is the
    manifest's."""
    m = json.loads((folder / "MANIFEST.json").read_text())
    archive = folder / m["archive"]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == m["archive_sha256"]
    with tarfile.open(archive) as tf:
        return m, set(tf.getnames())


def test_archive_matches_manifest() -> None:
    m, names = _checked_names(RUNS)
    for run in m["runs"]:
        assert f"{run['path']}/.run.json" in names
        assert f"{run['path']}/rank-0.pt.trace.json.gz" in names
    assert len(m["runs"]) == 18


H200_RUNS = RUNS.parent / "gpu_runs_h200"


def test_h200_archive_matches_manifest_and_pairs_h100() -> None:
    """The H200 side of the cross-GPU pairs: its archive is its manifest's, and every H200 run
    has its H100 twin (same workload, batch and repeat) in the H100 set."""
    m, names = _checked_names(H200_RUNS)
    h100 = {r["path"] for r in json.loads(MANIFEST.read_text())["runs"]}
    for run in m["runs"]:
        assert f"{run['path']}/.run.json" in names
        assert f"{run['path']}/rank-0.pt.trace.json.gz" in names
        assert run["path"].replace("h200", "h100") in h100
    assert len(m["runs"]) == 18


def test_kept_h200_trace_replays(tmp_path: Path) -> None:
    """An H200 trace (the host-bound MLP, batch 256, first repeat) loads and replays within 1%,
    and its unprofiled step is below the profiled one."""
    m = json.loads((H200_RUNS / "MANIFEST.json").read_text())
    run = next(r for r in m["runs"] if r["path"] == "h200/r1/h200_mlp_bs256")
    with tarfile.open(H200_RUNS / m["archive"]) as tf:
        for name in (f"{run['path']}/.run.json", f"{run['path']}/rank-0.pt.trace.json.gz"):
            tf.extract(name, tmp_path, filter="data")
    folder = tmp_path / run["path"]
    assert json.loads((folder / ".run.json").read_text())["gpu"] == "NVIDIA H200"
    rep = traincast.predict(traincast.load(folder))
    assert rep.summary["mape_pct"] < 1.0
    it = rep.iterations
    assert (it["unprofiled_ns"] < it["measured_ns"]).all()


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


@pytest.fixture(scope="module")
def first_repeats(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, dict]]:
    """One batch of each workload, first repeat (GPT bs8, ResNet-50 bs64, MLP bs256)."""
    m = json.loads(MANIFEST.read_text())
    want = {("gpt", 8), ("resnet", 64), ("mlp", 256)}
    runs = [r for r in m["runs"] if (r["workload"], r["batch_size"]) in want
            and r["path"].startswith("h100/r1/")]
    out = tmp_path_factory.mktemp("h100r1")
    with tarfile.open(RUNS / m["archive"]) as tf:
        for run in runs:
            for name in (f"{run['path']}/.run.json", f"{run['path']}/rank-0.pt.trace.json.gz"):
                tf.extract(name, out, filter="data")
    return [(out / r["path"], json.loads((out / r["path"] / ".run.json").read_text()))
            for r in runs]


def test_unprofiled_step_of_kept_runs_near_the_measured_one(first_repeats) -> None:
    """The unprofiled step predicted from each profiled H100 trace (the shipped CUDA table was
    fitted on other models, on another machine) against the same run's median step timed
    without the profiler: median error over the three workloads within 15% and each within
    30% (one run's step varies by up to 24% max/min over its 100 steps on this shared VM
    host), and on average well closer than the profiled step taken as is (21-52% off)."""
    assert len(first_repeats) == 3
    errs, as_is = [], []
    for folder, meta in first_repeats:
        it = traincast.predict(traincast.load(folder)).iterations
        truth = meta["unprofiled_median_ns"]
        errs.append(abs(float(it["unprofiled_ns"].median()) / truth - 1))
        as_is.append(abs(float(it["measured_ns"].median()) / truth - 1))
    assert sorted(errs)[1] < 0.15, errs
    assert max(errs) < 0.30, errs
    assert sum(errs) < 0.5 * sum(as_is), (errs, as_is)


def test_profiler_cost_archive_matches_manifest() -> None:
    """The H200 profiler-cost recordings: the archive is the one the manifest names, and holds
    every run it lists (each setting's trace of the models the CUDA table is fitted on; the
    synthetic programs)."""
    m, names = _checked_names(RUNS.parent / "profiler_cost")
    for run in m["runs"]:
        assert f"{run['path']}/.run.json" in names
    models = [r for r in m["runs"] if "/models/" in r["path"]]
    assert {r["setting"] for r in models} == {"kineto", "+shapes", "+stack", "+et"}
    assert {r["path"] for r in models} == set(m["fit_runs"])  # the CUDA table's fit
    for r in models:
        assert f"{r['path']}/rank-0.pt.trace.json" in names


@pytest.fixture(scope="module")
def cpu_kineto_runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, dict]]:
    """The kept CPU DLRM and Transformer runs profiled with Kineto alone (never fitted)."""
    m, names = _checked_names(RUNS.parent / "profiler_cost_cpu")
    runs = [r for r in m["runs"] if r["split"] == "check" and r["setting"] == "kineto"]
    out = tmp_path_factory.mktemp("cpu")
    with tarfile.open(RUNS.parent / "profiler_cost_cpu" / m["archive"]) as tf:
        for r in runs:
            for name in (f"{r['path']}/.run.json", f"{r['path']}/rank-0.pt.trace.json"):
                assert name in names
                tf.extract(name, out, filter="data")
    return [(out / r["path"], json.loads((out / r["path"] / ".run.json").read_text()))
            for r in runs]


def test_unprofiled_step_of_kept_cpu_runs(cpu_kineto_runs) -> None:
    """A DLRM and a Transformer at two batches each on this project's CPU machine: the
    unprofiled step predicted from each Kineto trace against the step timed without the
    profiler (their noise: 0.4-5.9% between blocks): median error within 10%, and on average
    closer than the profiled step taken as is (5-52% off)."""
    assert len(cpu_kineto_runs) == 4
    errs, as_is = [], []
    for folder, meta in cpu_kineto_runs:
        it = traincast.predict(traincast.load(folder)).iterations
        truth = meta["unprofiled_median_ns"]
        errs.append(abs(float(it["unprofiled_ns"].median()) / truth - 1))
        as_is.append(abs(float(it["measured_ns"].median()) / truth - 1))
    assert sorted(errs)[1] < 0.10 and sorted(errs)[2] < 0.10, errs
    assert sum(errs) < 0.5 * sum(as_is), (errs, as_is)
