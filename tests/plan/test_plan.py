"""Planner: generated graphs, schedules, metrics, search, CLI."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from isolated import run_isolated

from traincast.cli import main
from traincast.plan.api import plan
from traincast.plan.builder import GraphBuilder
from traincast.plan.costs import FamilyEfficiency, PlanCalibration, PlanCosts
from traincast.plan.search import SearchSpace, enumerate_layouts, plan_search
from traincast.plan.spec import Layout, PlanError, SystemSpec, TransformerSpec
from traincast.plan.transformer import schedule_order

# efficiency 1, no latencies: times are the catalog roofline, easy to reason about
IDEAL = PlanCalibration(default=FamilyEfficiency(1.0, 0.0), comm_efficiency=1.0,
                        comm_latency_us=0.0, source="test: ideal")
GPT = TransformerSpec(layers=16, hidden=2048, heads=16, seq=1024, vocab=32000)
# tiny vocabulary: stages are balanced, so the bubble can be compared with theory
BALANCED = TransformerSpec(layers=16, hidden=2048, heads=16, seq=1024, vocab=128)


def node(gpus: int) -> SystemSpec:
    return SystemSpec.from_catalog(gpus, node="DGX-A100")


# ------------------------------------------------------------------ builder


def test_builder_collective_waits_for_last_member() -> None:
    g = GraphBuilder()
    a = g.op(0, "c", "a", 100)
    b = g.op(1, "c", "b", 300)
    x = g.op(0, "comm", "ar", 0, category="comm", after=[a])
    y = g.op(1, "comm", "ar", 0, category="comm", after=[b])
    g.collective([x, y], 50)
    z = g.op(0, "c", "next", 10, after=[x])
    ops = g.run().ops
    assert ops.loc[x, "end_ns"] == ops.loc[y, "end_ns"] == 350  # last arrival 300 + 50
    assert ops.loc[z, "start_ns"] == 350
    assert ops.loc[a, "end_ns"] == 100


# ------------------------------------------------------------------ schedules


@pytest.mark.parametrize("sched,pp,m,v", [("1f1b", 4, 8, 1), ("1f1b", 4, 2, 1),
                                          ("gpipe", 3, 5, 1), ("interleaved", 4, 8, 2),
                                          ("interleaved", 2, 4, 3)])
def test_schedule_runs_every_pass_once(sched: str, pp: int, m: int, v: int) -> None:
    for r in range(pp):
        order = schedule_order(sched, pp, m, v, r)
        c = Counter(order)
        assert len(order) == 2 * m * v and set(c.values()) == {1}
        # a chunk's backward of a micro-batch never precedes its forward
        for ph, mb, ch in order:
            if ph == "B":
                assert order.index(("F", mb, ch)) < order.index(("B", mb, ch))


def test_1f1b_warmup_is_megatrons() -> None:
    # rank r of p runs p - r - 1 forward passes before its first backward
    for r in range(4):
        order = schedule_order("1f1b", 4, 8, 1, r)
        first_b = next(i for i, o in enumerate(order) if o[0] == "B")
        assert first_b == 4 - r - 1 + 1
    # interleaved: (p - r - 1) * 2 + (v - 1) * p warm-up forwards
    order = schedule_order("interleaved", 4, 8, 2, 0)
    assert next(i for i, o in enumerate(order) if o[0] == "B") == 3 * 2 + 4 + 1


# ------------------------------------------------------------------ metrics


def test_bubble_emerges_close_to_theory() -> None:
    sysm = node(4)
    for m in (4, 16):
        r = plan(BALANCED, sysm, Layout(pp=4, dp=1, tp=1, micro_batch=1, global_batch=m),
                 calibration=IDEAL)
        theory = 3 / (m + 3) * 100  # (p-1)/(m+p-1), Narayanan et al. SC'21
        assert r.bubble_pct == pytest.approx(theory, abs=4.0)
    r1 = plan(BALANCED, node(1), Layout(micro_batch=1, global_batch=4), calibration=IDEAL)
    assert r1.bubble_pct == 0.0


def test_interleaving_shrinks_the_bubble() -> None:
    base = dict(pp=4, dp=1, micro_batch=1, global_batch=8)
    a = plan(BALANCED, node(4), Layout(**base), calibration=IDEAL)
    b = plan(BALANCED, node(4), Layout(**base, schedule="interleaved", virtual_stages=2),
             calibration=IDEAL)
    assert b.bubble_pct < a.bubble_pct
    assert b.iteration_time_s < a.iteration_time_s


def test_recompute_costs_time_saves_memory() -> None:
    lay = Layout(tp=2, dp=4, micro_batch=2, global_batch=16)
    none = plan(GPT, node(8), lay, calibration=IDEAL)
    full = plan(GPT, node(8), lay.replace(recompute="full"), calibration=IDEAL)
    assert full.iteration_time_s > none.iteration_time_s
    assert full.hfu_pct > full.mfu_pct  # recomputed FLOPs count as hardware FLOPs only
    assert none.hfu_pct == pytest.approx(none.mfu_pct)
    assert full.memory_gib_per_gpu < none.memory_gib_per_gpu


def test_overlapped_grad_reduce_hides_comm() -> None:
    lay = Layout(dp=8, micro_batch=2, global_batch=16)
    ov = plan(GPT, node(8), lay, calibration=IDEAL)
    no = plan(GPT, node(8), lay.replace(overlap_grad_reduce=False), calibration=IDEAL)
    assert no.iteration_time_s > ov.iteration_time_s
    assert no.exposed_comm_s > ov.exposed_comm_s


def test_slower_network_slows_multinode_dp() -> None:
    lay = Layout(tp=8, dp=4, micro_batch=1, global_batch=16, overlap_grad_reduce=False)
    fast = plan(GPT, node(32), lay, calibration=IDEAL)
    slow_sys = SystemSpec.from_catalog(32, node="DGX-A100", inter_node_gbps=100.0)
    slow = plan(GPT, slow_sys, lay, calibration=IDEAL)
    assert slow.exposed_comm_s > fast.exposed_comm_s
    assert slow.iteration_time_s > fast.iteration_time_s


def test_contract_keys_and_units() -> None:
    r = plan(GPT, node(8), Layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8),
             calibration=IDEAL)
    d = r.to_dict()
    for k in ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu_pct", "hfu_pct",
              "bubble_pct", "exposed_comm_s", "memory_gib_per_gpu", "fits"):
        assert k in d
    assert d["tokens_per_s"] == pytest.approx(8 * GPT.seq / d["iteration_time_s"])
    # ideal efficiency: MFU cannot exceed 100 %, and is not trivially small
    assert 10 < d["mfu_pct"] <= 100
    json.dumps(d)


def test_gpt3_does_not_fit_on_one_node_without_model_parallelism() -> None:
    gpt3 = TransformerSpec(layers=96, hidden=12288, heads=96, seq=2048)
    r = plan(gpt3, node(8), Layout(dp=8, micro_batch=1, global_batch=8), calibration=IDEAL)
    assert r.fits is False


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("lay,msg", [
    (Layout(tp=3, dp=1), "does not equal"),
    (Layout(tp=32, dp=1, pp=1), "must divide heads"),
    (Layout(pp=3, dp=1), "does not equal"),
])
def test_bad_layouts(lay: Layout, msg: str) -> None:
    sysm = node(8) if "divide" not in msg else SystemSpec.from_catalog(32, node="DGX-A100")
    with pytest.raises(PlanError, match=msg):
        plan(GPT, sysm, lay)


def test_bad_specs() -> None:
    with pytest.raises(PlanError, match="must divide hidden"):
        TransformerSpec(layers=2, hidden=100, heads=3, seq=8)
    with pytest.raises(PlanError, match="layers"):
        TransformerSpec(layers=-1, hidden=64, heads=1, seq=8)
    with pytest.raises(PlanError, match="multiple of micro_batch"):
        Layout(dp=2, micro_batch=3, global_batch=8)
    with pytest.raises(PlanError, match="unknown GPU"):
        PlanCosts.build(SystemSpec(gpu="Z100", gpus=1), "bf16")


# ------------------------------------------------------------------ search


def test_search_ranks_and_explains() -> None:
    space = SearchSpace(recompute=("none", "full"), zero=(0,), sequence_parallel=(False,),
                        virtual_stages=(2,))
    res = plan_search(GPT, node(8), 16, space=space, calibration=IDEAL, executor="serial")
    t = res.table
    assert len(t) > 5 and t["iteration_time_s"].is_monotonic_increasing
    assert res.enumerated == len(t) + res.invalid + res.out_of_memory
    assert res.reasons and res.reasons[0].startswith("best:")
    # every simulated layout is valid and fits
    assert (t["tp"] * t["pp"] * t["dp"] == 8).all() and t["fits"].all()
    layouts, _ = enumerate_layouts(GPT, node(8), 16, space)
    assert len(layouts) == res.enumerated - res.invalid


def test_search_prunes_out_of_memory() -> None:
    big = TransformerSpec(layers=32, hidden=8192, heads=64, seq=2048)
    space = SearchSpace(recompute=("full",), zero=(0,), sequence_parallel=(False,),
                        schedules=("1f1b",), micro_batch=(1,))
    res = plan_search(big, node(8), 8, space=space, calibration=IDEAL, executor="serial")
    assert res.out_of_memory > 0  # e.g. tp=1 pp=1 dp=8 holds 16 bytes x 26B params


# ------------------------------------------------------------------ CLI


def test_cli_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "transformer", "--layers", "8", "--hidden", "1024", "--heads", "16",
               "--seq", "512", "--gpus", "8", "--node", "DGX-A100", "--tp", "2", "--pp", "2",
               "--micro-batch", "1", "--global-batch", "8", "--format", "json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layout"]["dp"] == 2 and d["iteration_time_s"] > 0


def test_cli_plan_config_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "gpt.yaml"
    cfg.write_text("model: {layers: 8, hidden: 1024, heads: 16, seq: 512}\n"
                   "system: {gpus: 8, node: DGX-A100}\nlayout: {tp: 8, global_batch: 8}\n")
    assert main(["plan", "transformer", "--config", str(cfg), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["tp"] == 8


@pytest.mark.parametrize("args,msg", [
    (["--heads", "15"], "must divide hidden"),
    (["--tp", "3"], "does not equal"),
    (["--gpu", "Z100"], "unknown GPU"),
    (["--layers", "-4"], "layers"),
])
def test_cli_plan_bad_input(args: list[str], msg: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    base = {"--layers": "8", "--hidden": "1024", "--heads": "16", "--seq": "512",
            "--gpus": "8", "--node": "DGX-A100"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["plan", "transformer"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_cli_bad_config(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("model: [1, 2\n")
    assert main(["plan", "transformer", "--config", str(cfg)]) == 2
    assert str(cfg) in capsys.readouterr().err


def test_host_bound_passes_take_the_launch_time() -> None:
    """A pass takes max(host issue time, device time): with a huge launch overhead the step
    grows with the kernel count; with a tiny one the device time is unchanged."""
    lay = Layout(dp=8, micro_batch=1, global_batch=8)
    base = plan(GPT, node(8), lay, calibration=IDEAL, keep_timeline=True)
    tiny = PlanCalibration(default=FamilyEfficiency(1.0, 0.0), launch_overhead_us=0.01)
    assert plan(GPT, node(8), lay, calibration=tiny).iteration_time_s == pytest.approx(
        base.iteration_time_s, rel=1e-3)
    slow = PlanCalibration(default=FamilyEfficiency(1.0, 0.0), launch_overhead_us=5000.0)
    r = plan(GPT, node(8), lay, calibration=slow, keep_timeline=True)
    ops = r.timeline.ops
    host = ops[ops["category"] == "host"]
    assert r.iteration_time_s > base.iteration_time_s
    # every device pass ends no earlier than the host finished issuing it
    assert (host["end_ns"].to_numpy() <= ops["end_ns"].max()).all()
    assert host["dur_ns"].sum() > 0.9 * (r.iteration_time_s * 1e9 - ops[ops["phase"].isin(
        ["opt", "dp"])]["dur_ns"].sum())


def test_moe_expert_parallel_adds_all_to_all() -> None:
    moe = TransformerSpec(layers=8, hidden=1024, heads=16, seq=512, vocab=1000, experts=8,
                          top_k=2)
    assert moe.params > TransformerSpec(layers=8, hidden=1024, heads=16, seq=512,
                                        vocab=1000).params * 3
    lay = Layout(dp=8, micro_batch=1, global_batch=8)
    r1 = plan(moe, node(8), lay, calibration=IDEAL, keep_timeline=True)
    r8 = plan(moe, node(8), lay.replace(ep=8), calibration=IDEAL, keep_timeline=True)
    # expert parallelism: all_to_all on the critical path, experts' memory sharded
    assert r8.breakdown["tp_comm_s"] > r1.breakdown["tp_comm_s"]
    assert r8.memory["weights"] < r1.memory["weights"]
    with pytest.raises(PlanError, match="needs an MoE"):
        plan(GPT, node(8), lay.replace(ep=2))


def test_zero3_gathers_parameters() -> None:
    lay = Layout(dp=8, micro_batch=1, global_batch=8)
    z0 = plan(GPT, node(8), lay, calibration=IDEAL, keep_timeline=True)
    z3 = plan(GPT, node(8), lay.replace(zero=3), calibration=IDEAL, keep_timeline=True)
    g = z3.timeline.ops
    assert (g["phase"] == "zero3").sum() == 2 * 1  # one gather per pass (1 fwd + 1 bwd)
    assert z3.memory["weights"] < z0.memory["weights"] / 7


def test_search_on_a_local_ray_instance() -> None:
    pytest.importorskip("ray")
    run_isolated(__file__, "search_on_a_local_ray_instance_checks")


def search_on_a_local_ray_instance_checks() -> None:
    """The search on a real local Ray instance (in a child process: :mod:`isolated`)."""
    from traincast.util.executor import shutdown

    space = SearchSpace(recompute=("none",), zero=(0,), sequence_parallel=(False,),
                        schedules=("1f1b",))
    local = plan_search(GPT, node(8), 16, space=space, calibration=IDEAL, executor="serial")
    try:
        on_ray = plan_search(GPT, node(8), 16, space=space, calibration=IDEAL,
                             executor="ray", workers=2)
    finally:
        shutdown()
    assert on_ray.table["describe"].tolist() == local.table["describe"].tolist()
    assert on_ray.table["iteration_time_s"].tolist() == local.table["iteration_time_s"].tolist()
