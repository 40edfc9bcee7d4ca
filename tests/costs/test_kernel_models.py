"""Fitted kernel models: fit on data with a known relation, held-out GMAE saved, save/load
round trip, errors for bad input, and a safe (pickle-free) file format."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traincast.cli import main
from traincast.costs.kernel_models import (
    FORMAT_VERSION,
    KernelModels,
    ModelFormatError,
    _trees_predict,
    gmae,
    load_measurements,
)
from traincast.errors import ParameterError

NOISE = 0.03  # log-normal sigma of the synthetic measurements


def _gemm_ns(m, n, k, op, dtype):
    """2 us latency + 2MNK FLOPs at 40 (fp32) / 10 (bf16) GFLOP/s, bmm 10% slower."""
    rate = np.where(dtype == "float32", 40.0, 10.0) * np.where(op == "bmm", 0.9, 1.0)
    return 2000.0 + 2 * m * n * k / rate


def _synthetic(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 240
    df = pd.DataFrame({
        "M": np.exp(rng.uniform(np.log(8), np.log(1024), n)).round(),
        "N": np.exp(rng.uniform(np.log(8), np.log(1024), n)).round(),
        "K": np.exp(rng.uniform(np.log(8), np.log(1024), n)).round(),
        "op": rng.choice(["mm", "bmm"], n), "dtype": rng.choice(["float32", "bfloat16"], n)})
    df["B"] = 1.0
    t = _gemm_ns(df.M.to_numpy(), df.N.to_numpy(), df.K.to_numpy(), df.op.to_numpy(),
                 df.dtype.to_numpy())
    fwd = df.assign(family="gemm", direction="fwd",
                    time_ns=t * np.exp(rng.normal(0, NOISE, n)), rel_mad=NOISE, rel_iqr=NOISE)
    bwd = df.assign(family="gemm", direction="bwd",
                    time_ns=2 * t * np.exp(rng.normal(0, NOISE, n)), rel_mad=NOISE,
                    rel_iqr=NOISE)
    e = 60
    emb = pd.DataFrame({"B": rng.integers(32, 1024, e), "E": rng.integers(1000, 10**5, e),
                        "T": rng.integers(1, 8, e), "L": rng.integers(1, 32, e),
                        "D": rng.integers(8, 128, e), "dist": rng.choice(["uniform", "zipf"], e),
                        "family": "embedding_bag", "direction": "fwd"})
    emb["time_ns"] = 5000 + emb["B"] * emb["T"] * emb["L"] * emb["D"] * 0.5
    return pd.concat([fwd, bwd, emb], ignore_index=True)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[KernelModels, Path]:
    models = KernelModels.fit(_synthetic(), seed=0, source={"device": "synthetic"})
    out = models.save(tmp_path_factory.mktemp("models") / "m")
    return models, out


def test_gmae_definition() -> None:
    assert gmae(np.array([2.0, 0.5]), np.array([1.0, 1.0])) == pytest.approx(1.0)
    assert gmae(np.array([1.1]), np.array([1.0])) == pytest.approx(0.1)


def test_fit_recovers_known_relation(fitted: tuple[KernelModels, Path]) -> None:
    models, out = fitted
    assert models.keys == [("embedding_bag", "fwd"), ("gemm", "bwd"), ("gemm", "fwd")]
    by = {(r["family"], r["direction"]): r for r in models.summary}
    for key in (("gemm", "fwd"), ("gemm", "bwd")):
        # held-out error close to the noise (mean |N(0, s)| = 0.8 s)
        assert by[key]["heldout_gmae"] < 2 * NOISE, by[key]
        assert by[key]["n_test"] == 48 and by[key]["meets_10pct"]
    assert by[("embedding_bag", "fwd")]["heldout_gmae"] < 0.01  # noiseless
    # predictions follow the relation, also outside the fitted sizes (roofline base)
    for m, n, k in ((64, 64, 64), (1000, 1000, 1000), (4096, 4096, 4096)):
        want = float(_gemm_ns(m, n, k, np.array("mm"), np.array("float32")))
        got = models.predict_ns("gemm", "fwd", B=1, M=m, N=n, K=k, op="mm")
        assert got == pytest.approx(want, rel=0.15 if m <= 1024 else 0.3)
    summary = json.loads((out / "summary.json").read_text())
    assert "exp(mean(|ln(predicted / measured)|)) - 1" in summary["gmae_definition"]
    assert {(r["family"], r["direction"]) for r in summary["models"]} == set(by)
    assert all(r["heldout_gmae"] == by[(r["family"], r["direction"])]["heldout_gmae"]
               for r in summary["models"])


def test_round_trip_identical(fitted: tuple[KernelModels, Path]) -> None:
    models, out = fitted
    loaded = KernelModels.load(out)
    assert loaded.keys == models.keys and loaded.source == {"device": "synthetic"}
    df = _synthetic(seed=1)
    for fam, direction in models.keys:
        g = df[(df.family == fam) & (df.direction == direction)]
        a = models.predict_frame(fam, direction, g)
        b = loaded.predict_frame(fam, direction, g)
        assert np.array_equal(a, b)
    one = loaded.predict_ns("gemm", "bwd", B=1, M=100, N=200, K=300, op="bmm",
                            dtype="bfloat16")
    frame = loaded.predict_frame("gemm", "bwd", pd.DataFrame(
        {"B": [1], "M": [100], "N": [200], "K": [300], "op": ["bmm"], "dtype": ["bfloat16"]}))
    assert one == frame[0] > 0


def test_bad_input(fitted: tuple[KernelModels, Path]) -> None:
    models, _ = fitted
    with pytest.raises(ParameterError, match="unknown kernel family 'gem'.*gemm"):
        models.predict_ns("gem", M=1)
    with pytest.raises(ParameterError, match="missing size parameter.*K.*expected sizes B, M, "
                                             "N, K"):
        models.predict_ns("gemm", "fwd", B=1, M=2, N=3)
    with pytest.raises(ParameterError, match="unknown parameter.*batch"):
        models.predict_ns("gemm", "fwd", B=1, M=2, N=3, K=4, batch=2)
    with pytest.raises(ParameterError, match="op='conv'.*mm, addmm, bmm, linear"):
        models.predict_ns("gemm", "fwd", B=1, M=2, N=3, K=4, op="conv")
    with pytest.raises(ParameterError, match="positive"):
        models.predict_ns("gemm", "fwd", B=1, M=0, N=3, K=4)
    with pytest.raises(ParameterError, match="direction 'up'"):
        models.predict_ns("gemm", "up", B=1, M=2, N=3, K=4)
    with pytest.raises(ParameterError, match="no model for embedding_bag/bwd"):
        models.predict_ns("embedding_bag", "bwd", B=1, E=2, T=3, L=4, D=5)
    with pytest.raises(ParameterError, match="unknown model kind"):
        KernelModels.fit(_synthetic(), kinds=["xgboost"])


def test_files_hold_no_pickle(fitted: tuple[KernelModels, Path]) -> None:
    _, out = fitted
    doc = json.loads((out / "models.json").read_text())
    assert doc["format"] == "traincast.kernel_models" and doc["version"] == FORMAT_VERSION
    for entry in doc["models"]:
        data = (out / entry["file"]).read_bytes()
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for name in z.namelist():
                raw = z.read(name)
                assert name.endswith(".npy") and raw.startswith(b"\x93NUMPY")
                assert b"\x80\x02" not in raw[:128] and b"\x80\x04" not in raw[:128]
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            assert all(z[k].dtype.kind in "fiu" for k in z.files)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["models.json", "summary.json"] + [e["file"] for e in doc["models"]])


def test_load_refuses_altered_or_foreign_files(fitted: tuple[KernelModels, Path],
                                               tmp_path: Path) -> None:
    _, out = fitted
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    f = bad / "gemm.fwd.npz"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match="sha256"):
        KernelModels.load(bad)
    doc = json.loads((out / "models.json").read_text())
    doc["version"] = 99
    (bad / "models.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFormatError, match="version 99"):
        KernelModels.load(bad)
    with pytest.raises(ModelFormatError, match="no models.json"):
        KernelModels.load(tmp_path)


def test_tree_export_matches_sklearn() -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    from traincast.costs.kernel_models import _export_trees

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2
    gb = GradientBoostingRegressor(loss="huber", n_estimators=50, max_depth=3, init="zero",
                                   learning_rate=0.1, random_state=0).fit(X, y)
    Xt = rng.normal(size=(100, 4))
    ours = 0.1 * _trees_predict(_export_trees(gb), Xt)
    np.testing.assert_allclose(ours, gb.predict(Xt), rtol=1e-12, atol=1e-12)


def test_fit_on_quick_bench_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    pytest.importorskip("torch")
    from traincast.record.microbench import run_bench

    bench = tmp_path / "bench"
    run_bench(bench, families=["elementwise"], quick=True, points=12, repeats=3,
              overheads=False, progress=False)
    data = load_measurements(bench)
    assert len(data) == 12 and set(data.direction) == {"fwd"}
    out = tmp_path / "models"
    assert main(["fit", str(bench), "--out", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["models"]
    assert row["family"] == "elementwise" and row["heldout_gmae"] >= 0
    models = KernelModels.load(out)
    t = models.predict_ns("elementwise", n=5000, op="add", dtype="float32")
    assert 100 < t < 1e6
    assert main(["fit", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "no such benchmark folder" in capsys.readouterr().err


def test_fit_table_says_why_no_heldout_error(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Too few points for a held-out split: the GMAE cell reads n/a and a line says why."""
    pytest.importorskip("torch")
    from traincast.record.microbench import run_bench

    bench = tmp_path / "bench"
    run_bench(bench, families=["elementwise"], quick=True, points=6, repeats=2,
              overheads=False, progress=False)
    assert main(["fit", str(bench), "--out", str(tmp_path / "m")]) == 0
    text = capsys.readouterr().out
    assert "n/a" in text
    assert "GMAE n/a: 1 of 1 families have fewer than 10 points" in " ".join(text.split())
