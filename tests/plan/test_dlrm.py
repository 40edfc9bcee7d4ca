"""DLRM planner: sharded per-rank graphs, placement, sharding search, host issue time, spec
and host overhead from a trace, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traincast.cli import main
from traincast.plan.costs import FamilyEfficiency, PlanCalibration
from traincast.plan.dlrm import (
    default_candidates,
    dlrm_spec_from_trace,
    fit_host_overhead,
    plan_dlrm,
    search_sharding,
)
from traincast.plan.spec import DLRMSpec, EmbeddingTable, Layout, PlanError, SystemSpec

# efficiency 1, no latencies: times are the catalog roofline
IDEAL = PlanCalibration(default=FamilyEfficiency(1.0, 0.0), comm_efficiency=1.0,
                        comm_latency_us=0.0, source="test: ideal")
A100x8 = SystemSpec.from_catalog(8, node="DGX-A100")
MLP = {"dense_features": 13, "bottom_mlp": (256, 64), "top_mlp": (256, 1)}
# one table dominates the lookups (50M rows, 100 lookups per bag), seven small ones
SKEWED = DLRMSpec(tables=(EmbeddingTable(50_000_000, 64, 100.0),
                          *(EmbeddingTable(100_000, 64, 2.0) for _ in range(7))), **MLP)
BATCH = 65536


def run(model: DLRMSpec, sharding: tuple[str, ...] | str, batch: int = BATCH, **kw):
    s = (sharding,) if isinstance(sharding, str) else sharding
    return plan_dlrm(model, A100x8, Layout(dp=8, sharding=s), batch, calibration=IDEAL, **kw)


# ------------------------------------------------------------------ graph sanity


def test_row_wise_balances_a_dominant_table_table_wise_does_not() -> None:
    tw = run(SKEWED, "table")
    rw = run(SKEWED, "row")
    tw_lk = tw.per_rank["lookup_fwd_ns"] + tw.per_rank["lookup_bwd_ns"]
    rw_lk = rw.per_rank["lookup_fwd_ns"] + rw.per_rank["lookup_bwd_ns"]
    # table-wise: the big table sits alone on one rank, which does most of the lookup work
    big = int(tw_lk.idxmax())
    assert tw.per_rank.loc[big, "tables"] == "t0"
    assert tw_lk.max() > 5 * tw_lk.drop(big).max()
    # row-wise: every rank holds 1/8 of every table: balanced
    assert rw_lk.max() < 1.01 * rw_lk.min()
    assert rw_lk.max() < 0.5 * tw_lk.max()
    assert tw.iteration_time_s > rw.iteration_time_s
    assert rw.breakdown["reduce_scatter_fwd_s"] > 0 and tw.breakdown["reduce_scatter_fwd_s"] == 0
    # row-wise also spreads the memory of the big table
    assert rw.memory_gib_per_gpu < tw.memory_gib_per_gpu


def test_data_parallel_tiny_table_needs_no_all_to_all() -> None:
    tiny = DLRMSpec(tables=(EmbeddingTable(100, 64, 1.0),), **MLP)
    dp = run(tiny, "data", batch=1024, keep_timeline=True)
    names = set(dp.timeline.ops["name"])
    assert not any("all_to_all" in n for n in names)
    assert (dp.per_rank["a2a_send_bytes"] == 0).all()
    assert dp.breakdown["a2a_fwd_s"] == 0 and dp.breakdown["input_dist_s"] == 0
    tw = run(tiny, "table", batch=1024, keep_timeline=True)
    assert any("all_to_all" in n for n in set(tw.timeline.ops["name"]))


def test_uneven_all_to_all_ends_together_on_all_ranks() -> None:
    model = DLRMSpec(tables=tuple(EmbeddingTable(1_000_000, 64, 4.0) for _ in range(6)), **MLP)
    # four tables on rank 0, one each on ranks 1 and 2, none elsewhere
    res = run(model, "table", placement={0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 2},
              keep_timeline=True)
    pr = res.per_rank
    assert pr.loc[0, "tables"] == "t0 t1 t2 t3" and pr.loc[5, "tables"] == ""
    assert pr["a2a_send_bytes"].nunique() == 3  # uneven sends
    assert pr.loc[0, "a2a_fwd_ns"] == pr["a2a_fwd_ns"].max()  # the heaviest sender
    ops = res.timeline.ops
    for name in ("pooled all_to_all fwd", "pooled all_to_all bwd"):
        a2a = ops[ops["name"] == name]
        assert len(a2a) == 8 and a2a["end_ns"].nunique() == 1
        # the exchange lasts at least the heaviest rank's own traffic after the last arrival
        assert a2a["end_ns"].iloc[0] - a2a["start_ns"].max() >= int(pr["a2a_fwd_ns"].max())
    assert res.placement == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 2}


def test_greedy_placement_spreads_equal_tables() -> None:
    model = DLRMSpec(tables=tuple(EmbeddingTable(1_000_000, 64, 4.0) for _ in range(16)),
                     **MLP)
    res = run(model, "table")
    assert sorted(res.placement.values()) == sorted(list(range(8)) * 2)
    assert (res.per_rank["shards"] == 2).all()


def test_bad_input_raises_plan_error() -> None:
    with pytest.raises(PlanError, match="multiple of the 8 GPUs"):
        run(SKEWED, "table", batch=100)
    with pytest.raises(PlanError, match="sharding has 2 values"):
        run(SKEWED, ("table", "row"))
    with pytest.raises(PlanError, match="bottom MLP output"):
        run(DLRMSpec(tables=(EmbeddingTable(10, 32),), **MLP), "table", batch=64)
    with pytest.raises(PlanError, match="only table-wise"):
        run(SKEWED, "row", placement={0: 1})
    with pytest.raises(PlanError, match="rank must be in"):
        run(SKEWED, "table", placement={0: 9})


# ------------------------------------------------------------------ host issue time

# every rank holds a block of every table: the ranks' graphs are identical
UNIFORM = DLRMSpec(tables=tuple(EmbeddingTable(1_000_000, 64, 4.0) for _ in range(4)), **MLP)


def test_host_bound_step_is_the_host_issue_time() -> None:
    res = run(UNIFORM, "row", batch=1024, launch_overhead_us=1000.0, keep_timeline=True)
    ops = res.timeline.ops
    host = ops[ops["stream"] == "host"]
    assert (host["category"] == "host").all() and len(host) == 8 * 9  # 9 phases per rank
    # every op the graph costs is one kernel launch, issued at 1 ms each
    kernels = res.per_rank["kernels"]
    assert kernels.nunique() == 1
    assert sum(v[0] for v in res.kernels.values()) == kernels[0]
    assert res.kernels["optimizer"] == [2 * (2 + 2)] * 8  # 8 tensors x 1 sgd kernel
    assert list(res.per_rank["host_issue_ns"]) == [kernels[0] * 1e6] * 8
    # the device is idle most of the time: the step is the host's issue time (+ the last
    # kernel's device time, µs)
    assert res.iteration_time_s == pytest.approx(kernels[0] * 1e-3, rel=1e-3)
    assert res.breakdown["host_issue_max_s"] == pytest.approx(kernels[0] * 1e-3)
    assert any("1000 us per kernel" in n for n in res.notes)


def test_zero_launch_overhead_leaves_the_gpu_graph_unchanged() -> None:
    base = run(SKEWED, "table", keep_timeline=True)  # IDEAL: launch overhead 0
    assert not (base.timeline.ops["stream"] == "host").any()
    assert base.breakdown["host_issue_max_s"] == 0 and (base.per_rank["kernels"] > 0).all()
    # an explicit 0 overrides a calibration's launch overhead: the same step
    cal = PlanCalibration(default=FamilyEfficiency(1.0, 0.0), launch_overhead_us=50.0,
                          source="test: ideal + 50 us")
    kw = {"calibration": cal, "keep_timeline": True}
    zero = plan_dlrm(SKEWED, A100x8, Layout(dp=8, sharding=("table",)), BATCH,
                     launch_overhead_us=0.0, **kw)
    assert zero.iteration_time_s == base.iteration_time_s
    dev = ["name", "start_ns", "end_ns"]
    assert zero.timeline.ops[dev].equals(base.timeline.ops[dev])
    # the calibration's overhead is used when none is given; the host only adds time
    host = plan_dlrm(SKEWED, A100x8, Layout(dp=8, sharding=("table",)), BATCH, **kw)
    assert host.iteration_time_s >= base.iteration_time_s
    assert host.breakdown["host_issue_max_s"] == pytest.approx(
        host.per_rank["kernels"].max() * 50e-6)
    with pytest.raises(PlanError, match="launch_overhead_us"):
        run(SKEWED, "table", launch_overhead_us=-1.0)


def test_host_waits_for_the_input_splits_and_before_the_interaction() -> None:
    res = run(UNIFORM, "table", batch=1024, launch_overhead_us=5.0, keep_timeline=True)
    ops = res.timeline.ops.set_index(["rank", "name"])
    for r in range(8):
        o = ops.loc[r]
        issue = o.loc["issue embedding fwd", "start_ns"]
        assert issue >= o.loc["input_dist all_to_all", "end_ns"]
        assert o.loc["issue interaction fwd", "start_ns"] >= max(
            o.loc["pooled all_to_all fwd", "end_ns"], o.loc["embedding fwd", "end_ns"])
        assert o.loc["issue interaction bwd", "start_ns"] >= o.loc["loss + top_mlp bwd",
                                                                   "end_ns"]
        # a device op never starts before the host issued it
        assert o.loc["bottom_mlp fwd", "start_ns"] >= o.loc["issue bottom_mlp fwd",
                                                            "start_ns"]


# ------------------------------------------------------------------ search


def test_search_ranks_plans_with_per_rank_columns() -> None:
    names = [n for n, _ in default_candidates(SKEWED)]
    assert names[:4] == ["all-table", "all-row", "all-column", "all-data"]
    df = search_sharding(SKEWED, A100x8, BATCH, executor="serial", calibration=IDEAL)
    assert len(df) >= 4
    assert df["iteration_time_s"].is_monotonic_increasing or not df["fits"].all()
    fitting = df[df["fits"]]
    assert fitting["iteration_time_s"].is_monotonic_increasing
    for col in ("lookup_fwd_ns", "lookup_bwd_ns", "a2a_fwd_ns", "a2a_bwd_ns"):
        assert all(len(v) == 8 for v in df[col])
    # the dominant table on one rank is not the winner
    assert df.iloc[0]["plan"] != "all-table"
    best = df.iloc[0]["per_table"]
    assert len(best) == len(SKEWED.tables)


def test_search_process_executor_matches_serial() -> None:
    small = DLRMSpec(tables=tuple(EmbeddingTable(10_000, 64, 2.0) for _ in range(4)), **MLP)
    kw = {"candidates": {"t": "table", "r": "row"}, "refine": False, "calibration": IDEAL}
    a = search_sharding(small, A100x8, 1024, executor="serial", **kw)
    b = search_sharding(small, A100x8, 1024, executor="process", workers=2, **kw)
    assert list(a["plan"]) == list(b["plan"])
    assert list(a["iteration_time_s"]) == pytest.approx(list(b["iteration_time_s"]))


# ------------------------------------------------------------------ from the DLRM trace


@pytest.fixture(scope="module")
def dlrm_trace(traces: Path):
    import traincast

    root = traces / "dlrm_8xv100"
    if not (root / "et").is_dir():
        pytest.skip("dlrm_8xv100 execution traces not available")
    return traincast.load(root / "kineto", et_dir=root / "et")


def test_spec_from_trace_recovers_ranks_tables_and_step(dlrm_trace) -> None:
    spec, batch, placement, step = dlrm_spec_from_trace(dlrm_trace)
    # 8 ranks x 3 model-parallel tables + 2 replicated (Criteo's 26 sparse features)
    assert len(spec.tables) == 26
    assert sorted(set(placement.values())) == list(range(8))
    assert all(list(placement.values()).count(r) == 3 for r in range(8))
    assert spec.dense_features == 13
    assert spec.bottom_mlp == (256, 128, 16) and spec.top_mlp == (512, 512, 256, 1)
    assert all(t.dim == 16 for t in spec.tables)
    assert batch == 128  # 8 ranks x local batch 16
    # SOURCES.md: ProfilerStep#10 of ranks 0..7, median of 8 step times
    assert step == pytest.approx((14455 + 17797) / 2 * 1e-6)
    got = dlrm_spec_from_trace(dlrm_trace)
    assert got.sharding.count("data") == 2
    res = plan_dlrm(spec, SystemSpec.from_catalog(8, node="DGX-1-V100"),
                    Layout(dp=8, sharding=got.sharding), batch, placement=placement,
                    optimizer="adagrad", dense_optimizer="adagrad")
    # a host-bound trace: the graph issues ~half the trace's launches (see fit_host_overhead)
    assert 0 < res.iteration_time_s < step


def test_host_overhead_from_trace(dlrm_trace) -> None:
    fit = fit_host_overhead(dlrm_trace)
    df = fit.per_step
    assert list(df["rank"]) == list(range(8))
    # ProfilerStep#10 of each rank: 261-273 launches, 10 cudaStreamSynchronize (pageable
    # copies: the interaction's CPU indices, fwd and bwd, the input splits), 2 blocking
    # device-to-host copies; the 57 aten::item are of CPU tensors (no sync)
    assert df["launches"].between(261, 273).all()
    assert (df["stream_syncs"] == 10).all() and (df["dtoh_copies"] == 2).all()
    assert (df["items"] == 57).all() and (df["items_blocking"] == 0).all()
    # the host is busy ~12.4-13.6 ms of each step whatever the rank's wait (0.1-7.5 ms)
    assert df["host_us"].between(12_000, 14_000).all()
    assert df["blocked_us"].max() > 50 * df["blocked_us"].min()
    assert fit.launch_overhead_us == pytest.approx(48.0, abs=1.0)
    assert "in-sample" in fit.notes[0]
    spec, batch, placement, step = dlrm_spec_from_trace(dlrm_trace)
    got = dlrm_spec_from_trace(dlrm_trace)
    res = plan_dlrm(spec, SystemSpec.from_catalog(8, node="DGX-1-V100"),
                    Layout(dp=8, sharding=got.sharding), batch, placement=placement,
                    optimizer="adagrad", dense_optimizer="adagrad", calibration=IDEAL,
                    launch_overhead_us=fit.launch_overhead_us)
    # the graph costs 127 kernels per rank, the trace launches ~262: host-bound, the
    # prediction is the model's issue time, well under the measured step
    assert (res.per_rank["kernels"] == 127).all()
    assert res.iteration_time_s == pytest.approx(127 * fit.launch_overhead_us * 1e-6,
                                                 rel=0.01)
    assert res.iteration_time_s < step


# ------------------------------------------------------------------ CLI


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "dlrm.yaml"
    cfg.write_text("tables:\n  - {rows: 1000000, dim: 64, pooling: 20}\n"
                   "  - {rows: 1000, dim: 64, pooling: 1}\n"
                   "dense_features: 13\nbottom_mlp: [128, 64]\ntop_mlp: [128, 1]\n")
    rc = main(["plan", "dlrm", "--config", str(cfg), "--gpus", "8", "--node", "DGX-A100",
               "--batch", "4096", "--sharding", "row,data", "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    for k in ("iteration_time_s", "samples_per_s", "exposed_comm_s", "memory_gib_per_gpu",
              "fits", "per_rank"):
        assert k in doc
    assert doc["sharding"] == ["row", "data"]
    assert len(doc["per_rank"]) == 8 and doc["per_rank"][0]["tables"] == "t0r t1d"
    assert doc["iteration_time_s"] > 0


@pytest.mark.parametrize("args,msg", [
    (["--batch", "100"], "multiple of the 8 GPUs"),
    (["--batch", "128", "--fit-host"], "--fit-host needs --from-trace"),
    (["--batch", "128", "--sharding", "diagonal"], "sharding must be one of"),
    ([], "--batch"),
])
def test_cli_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              args: list[str], msg: str) -> None:
    cfg = tmp_path / "dlrm.json"
    cfg.write_text(json.dumps({"tables": [{"rows": 100, "dim": 16}], "bottom_mlp": [16],
                               "top_mlp": [1]}))
    rc = main(["plan", "dlrm", "--config", str(cfg), "--gpus", "8", "--gpu", "V100", *args])
    assert rc == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


def test_cli_bad_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "dlrm.yaml"
    cfg.write_text("tables: [{rows: 10}]\n")
    rc = main(["plan", "dlrm", "--config", str(cfg), "--gpus", "2", "--gpu", "V100",
               "--batch", "8"])
    assert rc == 2
    assert "table 0 needs rows and dim" in capsys.readouterr().err


def test_cli_fit_host_from_trace(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = traces / "dlrm_8xv100"
    if not (root / "et").is_dir():
        pytest.skip("dlrm_8xv100 execution traces not available")
    rc = main(["plan", "dlrm", "--from-trace", str(root), "--optimizer", "adagrad",
               "--dense-optimizer", "adagrad", "--fit-host", "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    # the trace's host time per step (~12.6 ms, median over ranks) spread over the model's
    # 127 kernels per step, not the trace's ~262 launches: the model issues the same host
    # time as the trace (before: 48 us per launch x 127 kernels = 6.1 ms of 12.6)
    host_us = sorted(r["host_us"] for r in doc["host_fit"]["per_step"])
    median = (host_us[3] + host_us[4]) / 2
    assert doc["host_fit"]["launch_overhead_us"] == pytest.approx(median / 127)
    assert len(doc["host_fit"]["per_step"]) == 8
    assert any("in-sample" in n and "127 kernels" in n for n in doc["notes"])
    assert doc["breakdown_s"]["host_issue_max_s"] == pytest.approx(median * 1e-6, rel=1e-6)
    assert doc["iteration_time_s"] >= doc["breakdown_s"]["host_issue_max_s"]
    # in-sample: within 25% of the measured step (the waits for peers are not modelled)
    assert abs(doc["error_pct"]) < 25
    assert doc["kernels"]["optimizer"] == [64] * 8  # 16 tensors x 4 Adagrad kernels


def test_cli_from_trace_finds_sibling_et(traces: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    """``--from-trace DIR/kineto`` finds the execution traces in ``DIR/et`` (issue 18), and a
    folder without them says where it looked."""
    root = traces / "dlrm_8xv100"
    if not (root / "et").is_dir():
        pytest.skip("dlrm_8xv100 execution traces not available")
    rc = main(["plan", "dlrm", "--from-trace", str(root / "kineto"), "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["measured_step_s"] > 0
    assert doc["measured_step_statistic"] == "median over ranks and steps"
    # the catalog lookup model (eff 1, no latency) is put beside the trace's own lookups
    gap = next(n for n in doc["notes"] if n.startswith("lookups: "))
    assert "forward 6.50 us measured vs 0.05 us modelled" in gap
    assert gap.endswith("catalog defaults, --fit-embeddings fits them")
    rc = main(["plan", "dlrm", "--from-trace", str(traces / "hta" / "a100_2rank_nccl")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "no execution traces in" in err and str(traces / "hta" / "et") in err
    assert "--et-dir" in err
