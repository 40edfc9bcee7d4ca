"""The verdict (issue 15): step, parts, and opportunities whose gains come from the simulator,
each reproduced by the `traincast predict --what-if` command printed beside it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pandas as pd
import pytest

from traincast.cli import main
from traincast.predict.verdict import job_step_ns


@pytest.fixture(scope="module")
def dlrm_verdict(traces: Path) -> tuple[Path, dict]:
    import traincast
    from traincast.predict.verdict import verdict

    src = traces / "dlrm_8xv100" / "kineto"
    ts = traincast.load(src)
    pred = traincast.predict(ts)
    tables = traincast.analyze(ts, "breakdown,idle,stragglers", prediction=pred)
    return src, verdict(ts, tables, pred, str(src))


def test_verdict_names_all_to_all_and_imbalance(dlrm_verdict: tuple[Path, dict]) -> None:
    _, v = dlrm_verdict
    opp = v["opportunities"]
    titles = " | ".join(opp["opportunity"])
    assert "all_to_all" in titles and "balance rank" in titles
    assert opp["predicted_ns"].is_monotonic_increasing  # best first
    assert (opp["gain_ns"] == opp["replay_ns"] - opp["predicted_ns"]).all()
    summary = dict(zip(v["verdict"]["metric"], v["verdict"]["value"], strict=True))
    assert summary["step (measured, slowest rank, median over iterations)"] == pytest.approx(
        19.901)  # rank 1's 19.901 ms step (the trace's ProfilerStep#10)


def test_each_gain_is_what_predict_says(dlrm_verdict: tuple[Path, dict], capsys) -> None:
    """Run every printed command and recompute the job step from its JSON: it must equal the
    verdict's predicted step (same simulator, same inputs)."""
    _, v = dlrm_verdict
    for r in v["opportunities"].itertuples():
        argv = shlex.split(r.command)[1:] + ["--format", "json"]
        assert main(argv) == 0
        doc = json.loads(capsys.readouterr().out)
        rows = [dict(it, rank=rank["rank"]) for rank in doc["ranks"]
                for it in rank["iterations"]]
        got = job_step_ns(pd.DataFrame(rows), "predicted_ns")
        assert got == pytest.approx(r.predicted_ns, abs=1.0), r.opportunity


def test_cli_verdict_first_tables_on_request(traces: Path, capsys) -> None:
    src = str(traces / "dlrm_8xv100" / "kineto")
    assert main(["analyze", src]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step ") and "opportunities, simulated" in out
    assert "breakdown (" not in out  # tables only with --all / --what
    assert main(["analyze", src, "--all"]) == 0
    assert "breakdown (" in capsys.readouterr().out
    assert main(["analyze", src, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["verdict"]) == {"summary", "opportunities"}
    assert doc["verdict"]["opportunities"][0]["command"].startswith("traincast predict ")
    assert "breakdown" in doc


def test_rank_speedup_what_if(traces: Path, capsys) -> None:
    src = str(traces / "dlrm_8xv100" / "kineto")
    assert main(["predict", src, "--what-if", "speedup=rank:99:family:gemm=2"]) == 2
    assert "rank 99 is not in the traces" in capsys.readouterr().err
    assert main(["predict", src, "--what-if", "speedup=rank:x:family:gemm=2"]) == 2


@pytest.mark.parametrize("width", [60, 80, 120])
def test_tables_fit_the_width_without_cutting_numbers(traces: Path, width: int) -> None:
    """Terminal tables drop columns that do not fit instead of cutting numbers (issue 15)."""
    import io

    from rich.console import Console

    import traincast
    from traincast.report.tables import render_tables

    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    tables = traincast.analyze(ts, "breakdown,stragglers,collectives")
    buf = io.StringIO()
    render_tables(tables, Console(file=buf, width=width, no_color=True))
    text = buf.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    assert "19.901" in text  # rank 1's step, whole


def test_notebook_reprs_escape_names(traces: Path, tmp_path: Path) -> None:
    import gzip

    import traincast
    from traincast.plan.api import plan
    from traincast.plan.spec import Layout, SystemSpec, TransformerSpec

    ts = traincast.load(traces / "hta" / "a100_2rank_nccl")
    html = ts._repr_html_()
    assert "TraceSet" in html and "<table" in html and len(ts.rank_table()) == len(ts.ranks)
    assert "MAPE" in traincast.predict(ts)._repr_html_()
    evil = tmp_path / "<script>x<\\script>.json"
    evil.write_bytes(gzip.decompress(
        (traces / "hta" / "critical_path_simple_add" / "input.json.gz").read_bytes()))
    html = traincast.load(evil)._repr_html_()
    assert "<script>x" not in html and "&lt;script&gt;" in html
    res = plan(TransformerSpec(layers=4, hidden=512, heads=8, seq=512),
               SystemSpec.from_catalog(8, node="DGX-A100"),
               Layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8))
    assert "iteration_time_s" in res._repr_html_()


def test_fp32_gemms_on_tensor_cores(dlrm_verdict: tuple[Path, dict], traces: Path) -> None:
    """V100 runs fp32 SIMT GEMMs (volta_sgemm): the opportunity is simulated with the
    catalog's half-precision peak x GEMM fraction / fp32 peak; the A100 trace's GEMMs are
    already TF32 tensor-core kernels (tensorop): no such opportunity."""
    import traincast
    from traincast.costs.hardware import load_catalog
    from traincast.predict.verdict import _fp32_gemms

    _, v = dlrm_verdict
    opp = v["opportunities"]
    row = opp[opp["opportunity"].str.startswith("GEMMs in fp32")].iloc[0]
    gpu = load_catalog().gpu("V100-SXM2-32GB")
    factor = gpu.peak_flops("fp16") * gpu.gemm_efficiency / gpu.peak_flops("fp32")
    assert row["what_if"] == [f"speedup=sgemm={factor:.4g}"]
    assert "volta_sgemm" in row["evidence"] and "V100" in row["evidence"]
    # host-bound step: faster GEMMs cannot shorten it by more than they take
    assert 0 <= row["gain_ns"] <= row["replay_ns"]
    a100 = traincast.load(traces / "hta" / "a100_2rank_nccl")
    assert _fp32_gemms(a100) is None


def _shares(v: dict) -> dict[str, float]:
    s = v["verdict"]
    rows = s[s["metric"].str.endswith("(share of the step)")]
    return dict(zip(rows["metric"], rows["value"], strict=True))


#: every shared trace (dlrm_8xv100: test_dlrm_exposed_communication_is_mostly_waiting)
SHARED_TRACES = [
    *(f"hta/edge/{n}.json.gz" for n in ("amd_mi250_minitoy", "cpu_only_rank34",
                                         "cuda_event_sync_multi_stream", "no_distributed_info",
                                         "triton_example")),
    *(f"tracelens/wild/{n}.json.gz" for n in (
        "h100_Falconsai_nsfw_image_detection__1016002", "h100_Qwen_Qwen1.5-0.5B-Chat__1016005",
        "h100_facebook_timesformer-base-finetuned-k400__1016002",
        "h100_gaunernst_bert-small-uncased__1016001",
        "h100_google_owlv2-large-patch14-ensemble__1016001",
        "inference_sglang_decode_capture_traces_bs_32_rank0",
        "inference_sglang_decode_sglang_Qwen3-8B_decode",
        "inference_sglang_prefilldecode_sglang_Qwen3-8B_prefilldecode",
        "inference_vllm_decode_full_capture_traces_graph_capture_rank_0",
        "inference_vllm_decode_full_graph_execution",
        "inference_vllm_prefilldecode_piecewise_capture_traces_graph_capture_rank_0",
        "inference_vllm_prefilldecode_piecewise_graph_execution",
        "mi210_gpu_only_trace_gpu_only_trace",
        "perf_model_normalization_normalization_layer_test", "torch_compile_triton_trace")),
    "tracelens/b200_8rank_rank0.json.gz", "hta/trace_diff/control.json.gz",
    "hta/trace_diff/test.json.gz", "hta/a100_2rank_nccl", "hta/v100_2rank_allreduce",
    "hta/et_simple_add", "hta/critical_path_simple_add/input.json.gz",
    "linear_1x2080ti/kineto.pt.trace.json.gz", "nsys/cloverleaf_4xa100.sqlite",
    "nsys/saxpy_mpi_1xa100.sqlite", "otf2/ping-pong-otf2", "otf2/ping-pong-otf2-papi",
    "hta/a100_16rank_5streams", "hta/sampled_128rank_sendrecv"]


@pytest.mark.parametrize("name", SHARED_TRACES)
def test_where_it_goes_sums_to_the_step(traces: Path, name: str) -> None:
    """Every share is named and the shares tile the step (issue 27)."""
    import warnings

    import traincast
    from traincast.predict.verdict_tables import parts as _parts

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(traces / name)
    pred = traincast.predict(ts)
    parts = _parts(traincast.analyze(ts, "breakdown,idle", prediction=pred))
    assert sum(parts.values()) == pytest.approx(1.0, abs=1e-9)
    assert all(v >= 0 for v in parts.values())


def test_stream_waits_named_and_zero_gain_explained(traces: Path, capsys) -> None:
    """cuda_event_sync_multi_stream: 18.8 of 19.9 ms wait on another stream; the fp32-GEMM
    what-if gains ~0 and says why (the GEMMs are off the critical path)."""
    src = traces / "hta" / "edge" / "cuda_event_sync_multi_stream.json.gz"
    assert main(["analyze", str(src)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the verdict wraps at the width
    assert "stream dependencies 94.4%" in out and "summing to 100%" in out
    assert "job step: the slowest rank's" in out
    assert "yet simulated it gains 0.0%: it is 2% of the critical path (last step, slowest rank)" in out


def test_few_kernels_not_told_cuda_graphs(traces: Path, capsys) -> None:
    """amd_mi250_minitoy: host-bound 97% of the step but 16 device ops: no CUDA graphs."""
    src = traces / "hta" / "edge" / "amd_mi250_minitoy.json.gz"
    assert main(["analyze", str(src)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the verdict wraps at the width
    assert "CUDA graphs or fewer kernels" not in out
    assert "only 16 device ops" in out and "CUDA graphs are not suggested" in out


def test_dlrm_exposed_communication_is_mostly_waiting(dlrm_verdict: tuple[Path, dict]) -> None:
    """dlrm_8xv100: rank 7 enters step 10 late; its peers' all_to_alls wait for it, which
    the shares name as waiting for peers, not as transfer."""
    _, v = dlrm_verdict
    shares = _shares(v)
    assert sum(shares.values()) == pytest.approx(100.0)
    wait = shares["waiting for peers (in or before collectives) (share of the step)"]
    transfer = shares["exposed communication (transfer) (share of the step)"]
    assert wait > 30 and transfer < 5
    opp = v["opportunities"]
    ev = opp.loc[opp["what_if"].map(lambda w: w == ["overlap=ideal"]), "evidence"].iloc[0]
    assert "waiting for the last member to arrive" in ev
    assert "launch-bound host" in " ".join(opp["opportunity"])  # 254 device ops per step


def test_capture_trace_says_what_other_idle_is(traces: Path, capsys) -> None:
    """SGLang decode capture: 2 kernels in the first ms of a 33.7 ms step; the rest is idle
    after the last device op, named as such (issue 27: the shares summed to 3%)."""
    src = traces / "tracelens" / "wild" / "inference_sglang_decode_capture_traces_bs_32_rank0.json.gz"
    assert main(["analyze", str(src)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the verdict wraps at the width
    assert "other idle (step end, unexplained) 97.1%" in out
    assert "97% of the step comes after its last device op" in out
