"""Random DLRM / Transformer configurations and their recording (benchmarks/harness/random_models.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import random_models as rm

from traincast.errors import ParameterError


def test_dlrm_configs_deterministic_and_bounded() -> None:
    a = rm.random_dlrm_configs(12, seed=3)
    assert a == rm.random_dlrm_configs(12, seed=3)
    assert a[:5] == rm.random_dlrm_configs(5, seed=3)  # config i does not depend on n
    assert a != rm.random_dlrm_configs(12, seed=4)
    assert len({c["name"] for c in a}) == 12
    for c in a:
        assert c["kind"] == "dlrm" and c["dense"] == 13
        assert rm.DLRM_TABLES[0] <= len(c["tables"]) <= rm.DLRM_TABLES[1]
        assert c["dim"] in rm.DLRM_DIMS and c["batch"] in rm.DLRM_BATCHES
        for t in c["tables"]:
            assert rm.DLRM_ROWS[0] <= t["rows"] <= rm.DLRM_ROWS[1]
            assert rm.DLRM_POOLING[0] <= t["pooling"] <= rm.DLRM_POOLING[1]
        for mlp in (c["bottom_mlp"], c["top_mlp"]):
            assert 1 <= len(mlp) <= 3
            assert all(rm.DLRM_MLP_WIDTH[0] <= w <= rm.DLRM_MLP_WIDTH[1] for w in mlp)
        assert rm.STEP_MS_RANGE[0] <= c["estimated_step_ms"] <= rm.STEP_MS_RANGE[1]


def test_transformer_configs_deterministic_and_bounded() -> None:
    a = rm.random_transformer_configs(12, seed=0)
    assert a == rm.random_transformer_configs(12, seed=0)
    for c in a:
        assert 1 <= c["layers"] <= 3 and c["hidden"] in rm.TF_HIDDEN
        assert c["heads"] in rm.TF_HEADS and c["hidden"] % c["heads"] == 0
        assert rm.TF_SEQ[0] <= c["seq"] <= rm.TF_SEQ[1] and c["batch"] in rm.TF_BATCHES
        assert rm.STEP_MS_RANGE[0] <= c["estimated_step_ms"] <= rm.STEP_MS_RANGE[1]


def test_wide_dlrm_configs_have_large_tables() -> None:
    a = rm.random_dlrm_wide_configs(8, seed=0)
    assert a == rm.random_configs("dlrm_wide", 8, seed=0)
    assert a[0] != rm.random_dlrm_configs(1, seed=0)[0]  # its own draws, not the narrow ones
    for c in a:
        assert c["kind"] == "dlrm" and c["wide"] and c["name"].startswith("dlrm_wide-")
        assert rm.WIDE_TABLES[0] <= len(c["tables"]) <= rm.WIDE_TABLES[1]
        assert c["dim"] in rm.WIDE_DIMS
        assert all(rm.WIDE_ROWS[0] <= t["rows"] <= rm.WIDE_ROWS[1] for t in c["tables"])
        assert sum(t["rows"] for t in c["tables"]) * c["dim"] * 4 <= rm.WIDE_TABLE_BYTES
        lo, hi = rm.WIDE_STEP_MS_RANGE
        assert lo <= c["estimated_step_ms"] <= hi
        assert "MB" in rm.describe(c)
    # past the last-level cache: most draws hold 100 MB of tables or more
    assert sum(sum(t["rows"] for t in c["tables"]) * c["dim"] * 4 >= 1e8 for c in a) >= 4


def test_bad_arguments() -> None:
    with pytest.raises(ParameterError):
        rm.random_configs("gpt", 1)
    with pytest.raises(ParameterError):
        rm.random_dlrm_configs(-1)
    with pytest.raises(ParameterError):
        rm.record_config(rm.random_dlrm_configs(1)[0], "/nonexistent/x", steps=0)


def _tiny_dlrm() -> dict:
    cfg = rm.random_dlrm_configs(1, seed=0)[0]
    cfg.update(tables=[{"rows": 1000, "pooling": 4}, {"rows": 2000, "pooling": 2}], dim=16,
               bottom_mlp=[64], top_mlp=[64], batch=32, sparse=True)
    return cfg


def test_record_config_writes_traces_and_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "dlrm-0"
    run = rm.record_config(_tiny_dlrm(), out, warmup=1, steps=3, repeats=1)
    assert sorted(p.name for p in out.iterdir()) == ["et.json", "kineto.json", "run.json"]
    assert json.loads((out / "run.json").read_text()) == run
    t = run["timing"]
    assert t["unprofiled_step_ns"] > 0 and len(t["steps_ns"]) == 1 and len(t["steps_ns"][0]) == 3
    assert t["noise"] == 0.0 and run["threads"] == 1 and run["et_marker"] == rm.STEP_MARKER
    # the thread's CPU time per step, beside the wall clock (never more than it, a little slack
    # for the two clocks' reads)
    assert len(t["cpu_steps_ns"][0]) == 3 and t["unprofiled_cpu_step_ns"] > 0
    assert all(c <= w * 1.05 + 50_000 for c, w in zip(t["cpu_steps_ns"][0], t["steps_ns"][0],
                                                       strict=True))
    et = json.loads((out / "et.json").read_text())
    names = [n["name"] for n in et["nodes"]]
    assert names.count(rm.STEP_MARKER) == 1  # exactly one step
    assert "aten::embedding_bag" in names and any(n.startswith("Optimizer.step") for n in names)
    assert any("EmbeddingBagBackward" in n for n in names)  # the backward is in it
    kineto = json.loads((out / "kineto.json").read_text())
    steps = [e["name"] for e in kineto["traceEvents"] if e.get("name", "").startswith(
        "ProfilerStep#")]
    assert set(steps) == {"ProfilerStep#1"}


def test_record_set_resumes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root = tmp_path / "set"
    folder = root / "transformer-0"
    folder.mkdir(parents=True)
    fake = {"config": {"name": "transformer-0"}, "timing": {"unprofiled_step_ns": 1}}
    (folder / "run.json").write_text(json.dumps(fake))
    assert rm.record_set("transformer", 1, 0, root, progress=False) == [fake]
