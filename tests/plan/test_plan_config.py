"""Plan config files read from Python (:mod:`traincast.plan.config`): the specs they give, the
same plan as ``traincast plan --config``, and the input guards (size, nesting, aliases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traincast
from traincast.cli import main
from traincast.plan.config import (
    CONFIG_MAX_BYTES,
    MAX_FLOW_DEPTH,
    flow_depth,
    load_dlrm_config,
    load_transformer_config,
    read_config,
)
from traincast.plan.spec import DLRMSpec, PlanError, TransformerSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPT = ("model: {layers: 8, hidden: 1024, heads: 16, seq: 512}\n"
       "system: {gpus: 8, node: DGX-A100}\nlayout: {tp: 2, pp: 2, global_batch: 8}\n")


def test_transformer_config_gives_the_specs(tmp_path: Path) -> None:
    path = tmp_path / "gpt.yaml"
    path.write_text(GPT)
    cfg = load_transformer_config(path)
    assert isinstance(cfg.model, TransformerSpec) and cfg.model.layers == 8
    assert cfg.system.gpus == 8
    layout = cfg.layout()
    assert (layout.tp, layout.pp, layout.dp) == (2, 2, 2)  # dp: the GPUs tp x pp leave
    # keyword overrides win over the file; None is "not given"
    cfg = load_transformer_config(path, layers=4, tp=None, dp=1, pp=1)
    assert cfg.model.layers == 4 and cfg.layout_fields["tp"] == 2
    assert cfg.layout().dp == 1


def test_transformer_config_plans_as_the_cli(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gpt.json"
    path.write_text(json.dumps({"model": {"layers": 8, "hidden": 1024, "heads": 16,
                                          "seq": 512},
                                "gpus": 8, "node": "DGX-A100",  # flat system keys
                                "layout": {"tp": 2, "global_batch": 8}}))
    cfg = load_transformer_config(path)
    res = traincast.plan(cfg.model, cfg.system, cfg.layout())
    assert main(["plan", "transformer", "--config", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(res.to_dict()))


def test_example_configs() -> None:
    gpt = load_transformer_config(EXAMPLES / "gpt.yaml")
    assert gpt.model.hidden == 2048 and gpt.system.gpus == 16
    dlrm = load_dlrm_config(EXAMPLES / "dlrm.yaml")
    assert isinstance(dlrm.model, DLRMSpec) and len(dlrm.model.tables) == 4
    assert dlrm.model.bottom_mlp == (512, 256, 64) and dlrm.batch is None
    assert dlrm.system(gpus=8, node="DGX-A100").gpus == 8


@pytest.mark.parametrize("text,msg", [
    ("model: {layers: 8, hidden: 1024, heads: 16}\nsystem: {gpus: 8}\n", "missing model size"),
    ("model: {layers: 8, hidden: 1024, heads: 16, seq: 512}\n", "number of GPUs"),
    ("model: {layers: 8, hidden: 1024, heads: 16, seq: 512, width: 3}\n",
     "unknown model key(s): width"),
    ("model: 3\n", "'model' must be a mapping"),
    ("- 1\n- 2\n", "must be a mapping"),
    ("model: [1, 2\n", "not valid yaml"),
])
def test_transformer_config_bad(tmp_path: Path, text: str, msg: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PlanError) as info:
        load_transformer_config(path)
    assert msg in str(info.value)


def test_dlrm_config_bad(tmp_path: Path) -> None:
    path = tmp_path / "dlrm.yaml"
    path.write_text("tables: [{rows: 10, dim: 4}]\nbottom_mlp: [4]\ncolour: red\n")
    with pytest.raises(PlanError, match="unknown key"):
        load_dlrm_config(path)
    path.write_text("tables: [{rows: 10}]\n")
    with pytest.raises(PlanError, match="needs rows and dim"):
        load_dlrm_config(path)


def test_read_config_guards(tmp_path: Path) -> None:
    assert read_config(None) == {}
    with pytest.raises(PlanError, match="cannot read config"):
        read_config(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (CONFIG_MAX_BYTES + 1))
    with pytest.raises(PlanError, match="larger than"):
        read_config(big)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * (MAX_FLOW_DEPTH + 1) + "]" * (MAX_FLOW_DEPTH + 1) + "\n")
    with pytest.raises(PlanError, match="nested"):
        read_config(deep)
    alias = tmp_path / "alias.yaml"
    alias.write_text("a: &x [1, 2]\nb: [*x, *x]\n")
    with pytest.raises(PlanError, match="aliases are not allowed"):
        read_config(alias)


def test_flow_depth_skips_strings_and_comments() -> None:
    assert flow_depth("a: [[1], {b: 2}]\n") == 2
    assert flow_depth("a: '[[[['\nb: \"{{\"  # [[[[[\n") == 0
