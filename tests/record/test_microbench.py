"""Kernel microbenchmarks: a --quick run completes, resumes without re-measuring, and writes
meta.json and overheads.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from traincast.cli import main  # noqa: E402
from traincast.errors import ParameterError  # noqa: E402
from traincast.record.microbench import (  # noqa: E402
    OVERHEADS_SCHEMA,
    SCHEMA,
    BenchSetupError,
    family_points,
    read_points,
    run_bench,
)

FAMILIES = ["elementwise", "embedding_bag", "layer_norm"]


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "cpu"
    res = run_bench(out, families=FAMILIES, quick=True, points=4, repeats=3, progress=False)
    assert res.measured == {f: 4 for f in FAMILIES}
    assert res.skipped == {f: 0 for f in FAMILIES}
    return out


def test_quick_run_writes_points(bench_dir: Path) -> None:
    for fam in FAMILIES:
        recs = read_points(bench_dir / f"{fam}.jsonl")
        assert len(recs) == 4 and len({r["key"] for r in recs}) == 4
        for r in recs:
            assert r["family"] == fam and r["device"] == "cpu" and r["threads"] == 1
            st = r["fwd"]
            assert st["repeats"] == 3 and st["inner"] >= 1
            assert 0 < st["min_ns"] <= st["median_ns"] and st["iqr_ns"] >= 0
            assert st["mad_ns"] >= 0
        if fam in ("embedding_bag", "layer_norm"):
            assert all(r["bwd"]["median_ns"] > 0 for r in recs)
    assert {r["dist"] for r in read_points(bench_dir / "embedding_bag.jsonl")} == \
        {"uniform", "zipf"}


def test_meta_and_overheads(bench_dir: Path) -> None:
    meta = json.loads((bench_dir / "meta.json").read_text())
    assert meta["schema"] == SCHEMA and meta["device"] == "cpu" and meta["threads"] == 1
    assert meta["torch"] and meta["device_name"] and meta["created"] and meta["updated"]
    assert meta["points"] == {f: 4 for f in FAMILIES}
    ov = json.loads((bench_dir / "overheads.json").read_text())
    assert ov["schema"] == OVERHEADS_SCHEMA and ov["units"] == "ns"
    for k in ("python_loop_iter", "dispatch_tiny_op", "T1_between_ops"):
        assert ov[k]["median_ns"] > 0 and ov[k]["n"] > 0, k
    # a tiny op costs far more than an empty loop iteration, and less than a millisecond
    assert ov["python_loop_iter"]["median_ns"] < ov["dispatch_tiny_op"]["median_ns"] < 1e6
    for k in ("T2_op_to_first_launch", "T3_last_launch_to_op_end", "T4_launch",
              "T5_between_launches"):
        assert ov[k]["median_ns"] is None and "CPU" in ov[k]["reason"]


def test_resume_skips_measured_points(bench_dir: Path) -> None:
    path = bench_dir / "elementwise.jsonl"
    before = path.read_bytes()
    with open(path, "ab") as fh:  # an interrupted run's torn last line
        fh.write(b'{"key": "torn')
    res = run_bench(bench_dir, families=["elementwise"], quick=True, points=5, repeats=3,
                    overheads=False, progress=False)
    assert res.skipped == {"elementwise": 4} and res.measured == {"elementwise": 1}
    recs = read_points(path)
    assert len(recs) == 5 and path.read_bytes().startswith(before)
    res = run_bench(bench_dir, families=["elementwise"], quick=True, points=5, repeats=3,
                    overheads=False, progress=False)
    assert res.measured == {"elementwise": 0} and res.skipped == {"elementwise": 5}


def test_points_are_deterministic() -> None:
    a = family_points("gemm", n=10, seed=3)
    assert a == family_points("gemm", n=10, seed=3)
    assert a[:4] == family_points("gemm", n=4, seed=3)
    assert a != family_points("gemm", n=10, seed=4)
    assert all(p["sizes"]["B"] == 1 for p in a if p["op"] != "bmm")


def test_bad_input(bench_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="known: gemm"):
        run_bench(tmp_path / "x", families=["nope"], quick=True)
    with pytest.raises(ParameterError, match="cpu, cuda, rocm"):
        run_bench(tmp_path / "x", device="tpu", quick=True)
    with pytest.raises(BenchSetupError, match="threads=1"):
        run_bench(bench_dir, families=["elementwise"], quick=True, threads=2, progress=False)


def test_cli_bench(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b"
    argv = ["bench", "--out", str(out), "--families", "memcpy", "--quick", "--points", "3",
            "--repeats", "3", "--no-overheads", "--format", "json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["families"] == [{"family": "memcpy", "measured": 3, "skipped": 0, "failed": 0}]
    assert main(["bench", "--out", str(out), "--families", "gemm,bogus", "--quick"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_cold_families_are_measured_cold(bench_dir: Path, tmp_path: Path) -> None:
    from traincast.record.microbench.timing import TRIM_MIN_BYTES, cold_how

    # the embedding bag of the module's bench: flushed (tiny tables: no trim), recorded so
    for r in read_points(bench_dir / "embedding_bag.jsonl"):
        assert r["cold"] == {"fwd": "flush+code", "bwd": "flush+code"}
        assert r["fwd"]["inner"] == 1 and r["bwd"]["inner"] == 1  # one call per sample
    assert "cold" not in read_points(bench_dir / "layer_norm.jsonl")[0]
    # a gradient of 2 MiB and more is faulted in (heap trimmed first), a smaller one is not
    big = {"T": 1, "E": TRIM_MIN_BYTES // (4 * 64), "D": 64}
    assert cold_how("embedding_bag", "bwd", big) == "flush+code+trim"
    assert cold_how("embedding_bag", "bwd", {**big, "E": big["E"] - 1}) == "flush+code"
    assert cold_how("gemm", "fwd", {"M": 8}) is None
    # the in-place update family: one point per call, its own key (not a warm point's)
    res = run_bench(tmp_path / "u", families=["update"], quick=True, points=3, repeats=3,
                    progress=False, overheads=False)
    assert res.measured == {"update": 3}
    recs = read_points(tmp_path / "u" / "update.jsonl")
    assert all(r["cold"] == {"fwd": "flush+code"} and r["fwd"]["min_ns"] > 0 for r in recs)
