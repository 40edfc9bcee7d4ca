"""benchmarks/fidelity.py: the accuracy table computed from the kept H100 runs
(``benchmarks/data/gpu_runs``), and a class without data says so instead of printing a figure."""

from __future__ import annotations

import io
import json
import statistics
import tarfile
from pathlib import Path

import fidelity
import pytest


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    tmp = tmp_path_factory.mktemp("fidelity")
    rc = fidelity.main(["--only", "replay", "--only", "unprofiled", "--only", "gpu", "--quick",
                        "--sets", "gpu_runs", "--json-out", str(tmp / "f.json"),
                        "--md", str(tmp / "f.md"), "--cache", str(tmp / "cache")])
    assert rc == 0
    return json.loads((tmp / "f.json").read_text()), (tmp / "f.md").read_text()


def test_rows_are_computed_from_the_kept_runs(table: tuple[dict, str]) -> None:
    doc, _ = table
    by = {r["class"]: r for r in doc["rows"]}
    assert set(by) == {"replay", "unprofiled", "gpu"}  # --only: nothing else
    rep = by["replay"]
    # --quick: one trace per configuration, 3 workloads x 2 batches
    assert rep["status"] == "computed" and rep["n"] == 6 == len(rep["errors_pct"])
    assert rep["median_abs_pct"] == pytest.approx(
        statistics.median(abs(e) for e in rep["errors_pct"]), abs=1e-3)
    assert rep["median_abs_pct"] < 1.0 and rep["met"] is True  # the replay reproduces the step
    unp = by["unprofiled"]
    assert unp["n"] == 6 and unp["target"] == "median <= 10%"
    assert len(set(unp["errors_pct"])) == 6  # one figure per trace, not a constant
    assert unp["mean_pct"] == pytest.approx(statistics.fmean(unp["errors_pct"]), abs=1e-3)
    assert doc["sets"]["gpu_runs"]["archive_sha256"]


def test_class_without_data_prints_no_figure(table: tuple[dict, str]) -> None:
    doc, md = table
    gpu = next(r for r in doc["rows"] if r["class"] == "gpu")
    assert gpu["status"] == "no kept data" and gpu["n"] == 0
    assert gpu["median_abs_pct"] is None and gpu["met"] is None
    assert "two GPUs" in gpu["note"]
    lines = md.splitlines()
    assert lines[0].startswith("| class | data set | n | median abs % | geomean abs %")
    row = next(ln for ln in lines if ln.startswith("| `gpu=` cross-GPU"))
    assert "no kept data" in row and "| 0 |  |  |  |" in row
    assert any("NeuSight" in ln and "2407.13853" in ln for ln in lines)


def test_unpack_refuses_an_archive_that_differs_from_its_manifest(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("r1/.run.json")
        data = b"{}"
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    (tmp_path / "x.tgz").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="differs from its manifest"):
        fidelity.unpack("x", tmp_path, {"archive": "x.tgz", "archive_sha256": "0" * 64},
                        tmp_path / "cache")


def test_pairs_across_gpus_and_vendors_are_found(tmp_path: Path) -> None:
    """Code path only (the figures mean nothing here): one kept H100 run copied under three
    device names; each copy is predicted on the other two GPUs, split by vendor."""
    runs = Path(fidelity.DATA) / "gpu_runs"
    m = json.loads((runs / "MANIFEST.json").read_text())
    run = next(r for r in m["runs"] if r["workload"] == "mlp" and r["batch_size"] == 256)
    with tarfile.open(runs / m["archive"]) as tf:
        meta = json.load(tf.extractfile(f"{run['path']}/.run.json"))
        trace = tf.extractfile(f"{run['path']}/rank-0.pt.trace.json.gz").read()
    entries = []
    for i, gpu in enumerate(("NVIDIA H100 80GB HBM3", "NVIDIA H200", "AMD Instinct MI300X")):
        d = tmp_path / "data" / "pairs" / f"g{i}"
        d.mkdir(parents=True)
        (d / ".run.json").write_text(json.dumps({**meta, "gpu": gpu}))
        (d / "rank-0.pt.trace.json.gz").write_bytes(trace)
        entries.append({"path": f"g{i}"})
    (tmp_path / "data" / "pairs" / "MANIFEST.json").write_text(json.dumps({"runs": entries}))
    assert fidelity.main(["--data", str(tmp_path / "data"), "--sets", "pairs", "--only", "gpu",
                          "--only", "vendor", "--json-out", str(tmp_path / "f.json")]) == 0
    rows = json.loads((tmp_path / "f.json").read_text())["rows"]
    got = {(r["class"], r["dataset"].rsplit(", ", 1)[-1]): r for r in rows}
    assert set(got) == {(c, s) for c in ("gpu", "vendor")
                        for s in ("profiled step", "unprofiled step")}
    assert got["gpu", "profiled step"]["n"] == 2  # H100 <-> H200
    assert got["vendor", "profiled step"]["n"] == 4  # each NVIDIA <-> MI300X
    assert all(r["status"] == "computed" for r in rows)
