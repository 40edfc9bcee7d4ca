"""What-if parsing, speedup and ideal overlap through the simulator (no cost model)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import traincast
from traincast.errors import ParameterError
from traincast.whatif.spec import parse_what_if

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from synth_trace import Trace, single_rank_gpu, two_rank_allreduce  # noqa: E402

US = 1000


@pytest.mark.parametrize("bad", [["gpu"], ["colour=red"], ["batch_size=0"],
                                 ["world_size=-2"], ["inter_node_gbps=0"],
                                 ["inter_node_gbps=nan"], ["speedup=family:magic=2"],
                                 ["speedup=([=2"], ["speedup=x=0"], ["overlap=partial"],
                                 ["world_size=12", "ranks_per_node=8"]])
def test_bad_what_if_is_a_parameter_error(bad: list[str]) -> None:
    with pytest.raises(ParameterError):
        parse_what_if(bad)


def test_parse_combines_and_reports() -> None:
    w = parse_what_if(["speedup=family:gemm=2", "speedup=nccl.*=1.5", "world_size=16",
                       "overlap=ideal"])
    assert w.to_dict() == {"speedup": ["family:gemm=2", "nccl.*=1.5"], "world_size": 16,
                           "overlap": "ideal"}
    assert parse_what_if({"speedup": ["family:gemm=2"], "batch_size": 64}).batch_size == 64


def test_speedup_moves_the_step_by_the_right_amount(tmp_path: Path) -> None:
    ts = traincast.load(single_rank_gpu(tmp_path))
    pred = traincast.predict(ts, what_if=["speedup=family:gemm=2"])
    row = pred.iterations.iloc[0]
    assert row.replay_ns == 480 * US
    assert row.predicted_ns == (480 - 150) * US  # the 300 µs GEMM is on the path
    assert row.interval_lo_ns <= row.predicted_ns <= row.interval_hi_ns
    doc = pred.to_dict()
    assert doc["what_if"] == {"speedup": ["family:gemm=2"]}
    assert doc["ranks"][0]["iterations"][0]["replay_ns"] == 480 * US
    # a regex on kernel names, combined: both kernels 2x faster -> 200 µs saved
    both = traincast.predict(ts, what_if=["speedup=family:gemm=2",
                                          "speedup=elementwise=2"])
    assert both.iterations.iloc[0].predicted_ns == (480 - 200) * US


def test_speedup_of_host_ops_scales_their_self_time(tmp_path: Path) -> None:
    t = Trace()
    t.step(1, 0, 300)
    t.host("aten::linear", 10, 200)
    t.host("aten::addmm", 50, 100)  # child: linear's self time is 100 µs
    t.host("aten::relu", 220, 50)
    ts = traincast.load(t.write(tmp_path))
    pred = traincast.predict(ts, what_if={"speedup": "aten::linear=2"})
    # only linear's own 100 µs halve; its child addmm and relu are unchanged
    assert pred.iterations.iloc[0].predicted_ns == (300 - 50) * US


def _two_rank(folder: Path) -> Path:
    return two_rank_allreduce(folder, 300.0, host_name="node0")


def test_ideal_overlap_removes_waiting_on_collectives(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank(tmp_path))
    pred = traincast.predict(ts, what_if=["overlap=ideal"])
    it = pred.iterations
    # the host no longer waits for the all_reduce (transfer and peers): its sync and the
    # 10 µs op after it no longer follow the transfer; but the step holds the work launched in
    # it, so rank 1's step still ends with its all_reduce, 50 µs of transfer after its GEMM
    # (320 -> 370 µs), instead of the sync's end, the wake-up and the op (390 µs); rank 0's
    # host no longer waits, but its step holds its share of the same all_reduce, which cannot
    # end before rank 1 arrives: both steps end at 370 µs (a steady state runs at the slower
    # rank's pace)
    assert (it["predicted_ns"] < it["replay_ns"]).all()
    assert (it["predicted_ns"] == 370 * US).all()


def test_cli_what_if_json_and_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    import json

    from traincast.cli import main

    single_rank_gpu(tmp_path)
    assert main(["predict", str(tmp_path), "--what-if", "speedup=family:gemm=3",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    it = doc["ranks"][0]["iterations"][0]
    assert it["predicted_ns"] == (480 - 200) * US and "interval_ns" in it
    assert main(["predict", str(tmp_path), "--what-if", "world_size=0"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "world_size" in err


def test_world_size_one_removes_collectives_and_waiting(tmp_path: Path) -> None:
    ts = traincast.load(_two_rank(tmp_path))
    pred = traincast.predict(ts, what_if=["world_size=1"])
    it = pred.iterations.set_index("rank")
    # rank 1: its GEMM ends at 320; the all_reduce (50 µs transfer) is gone
    assert it.loc[1, "predicted_ns"] == it.loc[1, "replay_ns"] - 50 * US
    # rank 0 no longer waits 200 µs for rank 1 either
    assert it.loc[0, "predicted_ns"] == it.loc[0, "replay_ns"] - 250 * US
    assert any("removed" in n for n in pred.notes)


def test_network_what_if_uses_the_comm_model(tmp_path: Path) -> None:
    from traincast.costs.comm import CommModel

    ts = traincast.load(_two_rank(tmp_path))
    # a bandwidth-only model (no latency): 8x faster links make the transfer 8x shorter
    model = CommModel.from_links(8.0, None, 0.0, gpus_per_node=2)
    pred = traincast.predict(ts, what_if=["intra_node_gbps=64"], comm=model)
    it = pred.iterations.set_index("rank")
    saved = it["replay_ns"] - it["predicted_ns"]
    assert (saved > 0).all()
    assert abs(saved.loc[1] - 50 * US * (1 - 1 / 8)) <= 2 * US


def test_comm_algorithm_what_if(tmp_path: Path) -> None:
    from traincast.costs.comm import CommModel

    ts = traincast.load(_two_rank(tmp_path))
    model = CommModel.from_links(8.0, None, 10.0, gpus_per_node=2)
    ring = traincast.predict(ts, what_if=["comm_algorithm=ring"], comm=model)
    best = traincast.predict(ts, what_if=["comm_algorithm=best"], comm=model)
    assert (best.iterations["predicted_ns"] <= ring.iterations["predicted_ns"]).all()
    assert ring.to_dict()["what_if"] == {"comm_algorithm": "ring"}
    with pytest.raises(ParameterError):
        parse_what_if(["comm_algorithm=butterfly"])
