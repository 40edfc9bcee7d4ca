"""The CPU training runs kept in the repository (``benchmarks/data/cpu_dlrm/``): the archive
matches its manifest, and the step predicted from each held-out run's execution trace by the
kept kernel models stays within the error stated in ``MANIFEST.json`` of the run's measured
unprofiled step (the from-ET path end to end on real recordings, no timing in the test)."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import tarfile
from pathlib import Path

import pytest

from traincast.costs.kernel_models import KernelModels
from traincast.predict.et_updates import sparse_updates
from traincast.predict.from_et import predict_from_et
from traincast.trace.readers.et import read_execution_trace

SET = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "cpu_dlrm"
MANIFEST = SET / "MANIFEST.json"


def _manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def test_archive_matches_manifest() -> None:
    m = _manifest()
    archive = SET / m["archive"]
    assert archive.stat().st_size < 8e6
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == m["archive_sha256"]
    with tarfile.open(archive) as tf:
        names = set(tf.getnames())
    assert "models/models.json" in names
    for run in m["runs"]:
        for f in (".run.json", "et.json.gz", "rank-0.pt.trace.json.gz"):
            assert f"{run['path']}/{f}" in names
    assert {r["split"] for r in m["runs"]} == {"heldout"}


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cpu_dlrm")
    with tarfile.open(SET / _manifest()["archive"]) as tf:
        tf.extractall(out, filter="data")
    return out


def _run(kept: Path, entry: dict) -> tuple[Path, dict]:
    d = kept / entry["path"]
    return d, json.loads((d / ".run.json").read_text())


def test_sparse_gradients_found_by_their_looked_up_rows(kept: Path) -> None:
    """Every sparse table's update is timed by its looked-up rows (batch x pooling), every
    sparse backward as a gather of those rows; a dense DLRM has neither."""
    seen = set()
    for entry in _manifest()["runs"]:
        d, meta = _run(kept, entry)
        cfg = meta["config"]
        if cfg["kind"] != "dlrm":
            continue
        df = read_execution_trace(d / "et.json.gz").nodes.to_pandas().set_index(
            "id", drop=False)
        children: dict[int, list[int]] = {}
        for i, p in zip(df["id"].tolist(), df["parent"].tolist(), strict=True):
            children.setdefault(int(p), []).append(int(i))
        found = sparse_updates(df, children, sorted(df.index.tolist()))
        ups = sorted(p["N"] for f, _, p in found.values() if f == "sparse_update")
        bwd = [p for f, _, p in found.values() if f == "movement"]
        if cfg["sparse"]:
            want = sorted(cfg["batch"] * t["pooling"] for t in cfg["tables"])
            assert ups == want and len(bwd) == len(cfg["tables"])
        else:
            assert not found
        seen.add(cfg["sparse"])
    assert seen == {True, False}


def test_from_et_within_stated_error_on_held_out_runs(kept: Path) -> None:
    """Held-out runs (never looked at while the method was built): the prediction is the one
    recorded in the manifest (the path is deterministic), and its error against the run's
    thread CPU time per step stays within the manifest's stated per-run bound, the geometric
    mean within the stated GMAE (see ``tolerance`` in MANIFEST.json for why)."""
    m = _manifest()
    tol = m["tolerance"]
    km = KernelModels.load(kept / m["models"])
    ov = kept / "bench" / "overheads.json"
    errs: dict[str, list[float]] = {}
    for entry in m["runs"]:
        if entry["split"] != "heldout":
            continue
        d, meta = _run(kept, entry)
        p = predict_from_et(d / "et.json.gz", km, overheads=ov)
        assert p.step_ns == pytest.approx(entry["from_et_ns"], rel=1e-4)
        truth = meta["unprofiled_cpu_median_ns"]
        e = p.step_ns / truth - 1.0
        kind = "dlrm" if meta["config"]["kind"] == "dlrm" else "transformer"
        assert abs(e) <= tol["per_run"][kind], (d.name, e)
        errs.setdefault(kind, []).append(e)
    for kind, es in errs.items():
        gmae = math.exp(statistics.mean(math.log(max(abs(x), 1e-6)) for x in es))
        assert gmae <= tol["gmae"][kind], (kind, gmae)
