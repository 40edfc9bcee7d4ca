"""`traincast calibrate comm` and `traincast predict --comm-model`."""

from __future__ import annotations

from pathlib import Path

import pytest

from traincast.cli import main
from traincast.costs.comm import CommModel

DATA = Path(__file__).resolve().parent / "data"


def test_calibrate_from_vtrain_and_use_it(shared_data: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    lut = shared_data / "measurements" / "vtrain" / "vtrain_allreduce_lut.csv"
    out = tmp_path / "a100.json"
    assert main(["calibrate", "comm", str(lut), "--gpu", "a100", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fit on 7168 measurements" in text
    model = CommModel.from_json(out)
    # 1 GiB all_reduce on 8 A100s: busbw ~ 227 GB/s in the table -> ~8.3 ms
    t = model.predict_ns("all_reduce", 1 << 30, 8)
    assert 7e6 < t < 10e6
    # mixing GPUs without --gpu is refused
    assert main(["calibrate", "comm", str(lut)]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_calibrate_from_nccl_tests_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    out = tmp_path / "m.json"
    assert main(["calibrate", "comm", str(DATA / "all_gather_perf_2gpu_bf16.log"),
                 "--out", str(out)]) == 0
    assert out.is_file() and "all_gather" in CommModel.from_json(out).to_json()


def test_missing_comm_model_file(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["predict", str(traces / "hta" / "a100_2rank_nccl"), "--comm-model",
               "/nonexistent/model.json", "--what-if", "world_size=8"])
    assert rc == 2 and "no such communication model" in capsys.readouterr().err


def test_multi_node_log_with_one_gpu_per_node(tmp_path: Path, capsys) -> None:
    """2 nodes x 1 GPU (DGX Spark GB10): no intra-node phase to subtract, so the log
    calibrates alone; 2 nodes x 8 GPUs alone is refused with what to add."""
    out = tmp_path / "c.json"
    assert main(["calibrate", "comm", str(DATA / "all_reduce_perf_2node_gb10.log"),
                 "--out", str(out)]) == 0
    assert out.is_file()
    assert main(["calibrate", "comm",
                 str(DATA / "all_reduce_perf_16rank_old_format.log")]) == 2
    assert "single-node nccl-tests log" in capsys.readouterr().err


def test_calibrate_json_format_the_table_suggests(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The table's "--format json ... for all" hint names an option the command has."""
    import json

    log = str(DATA / "all_gather_perf_2gpu_bf16.log")
    assert main(["calibrate", "comm", log, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["measurements"] > 0 and doc["comm_model"][0]["collective"] == "all_gather"
    assert "busbw_gbps" in doc["comm_model"][0] and doc["model_out"] is None
    out = tmp_path / "m.json"
    assert main(["calibrate", "comm", log, "--format", "json", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["model_out"] == str(out) and out.is_file()
    assert main(["calibrate", "comm", log]) == 0
    assert "busbw GB/s" in capsys.readouterr().out  # the unit in the column name
