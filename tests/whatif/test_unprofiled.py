"""unprofiled_ns: the profiler's per-event host cost removed from the graph, then simulated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.costs.profiler_overhead import (
    ProfilerOverhead,
    fit_profiler_cost,
    overhead_table,
    per_event_ns,
)
from traincast.errors import ParameterError
from traincast.whatif.unprofiled import (
    ProfilerSettings,
    detect_profiler_settings,
    event_costs,
    host_event_classes,
    remove_overhead,
    step_features,
    unprofiled_graph,
)

COST_NS = 1000.0  # a round per-event cost, so expected times are exact


def _cost(kineto: float = COST_NS, **extra: float) -> ProfilerOverhead:
    return ProfilerOverhead(ns_per_event={"kineto": kineto, **extra}, source="test")


def _trace(tmp_path: Path, events: list[dict], name: str = "t.json") -> traincast.TraceSet:
    doc = {"schemaVersion": 1, "traceEvents": events,
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return traincast.load(path, cache=False)


def _x(name: str, cat: str, ts: float, dur: float, *, gpu: bool = False, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
            "pid": 0 if gpu else 100, "tid": args.pop("stream", 7) if gpu else 100,
            "args": args}


def _host_chain(n: int, op_us: float = 10.0, gap_us: float = 1.0, **args) -> list[dict]:
    """One step of ``n`` back-to-back CPU ops of ``op_us`` (µs), ``gap_us`` apart."""
    ev = []
    t = 2.0
    for i in range(n):
        ev.append(_x(f"aten::op{i % 3}", "cpu_op", t, op_us, **args))
        t += op_us + gap_us
    ev.insert(0, _x("ProfilerStep#1", "user_annotation", 0, t + 2.0))
    return ev


def test_host_bound_step_loses_count_times_cost(tmp_path: Path) -> None:
    n = 20
    ts = _trace(tmp_path, _host_chain(n))
    pred = traincast.predict(ts, overhead=_cost())
    it = pred.iterations
    assert it["predicted_ns"].iat[0] == it["measured_ns"].iat[0]  # replay is exact here
    events = n + 1  # the ops and the ProfilerStep annotation
    assert it["unprofiled_ns"].iat[0] == it["predicted_ns"].iat[0] - events * COST_NS
    assert pred.unprofiled.n_events == events
    assert pred.unprofiled.settings.describe() == "kineto"


def test_json_field_and_notes(tmp_path: Path) -> None:
    ts = _trace(tmp_path, _host_chain(5))
    doc = traincast.predict(ts, overhead=_cost()).to_dict()
    item = doc["ranks"][0]["iterations"][0]
    assert isinstance(item["unprofiled_ns"], int)
    assert item["unprofiled_ns"] == item["predicted_ns"] - 6 * int(COST_NS)
    assert any(n.startswith("unprofiled_ns:") and "settings kineto" in n for n in doc["notes"])


def test_shipped_table_is_used_by_default(tmp_path: Path) -> None:
    ts = _trace(tmp_path, _host_chain(5))
    pred = traincast.predict(ts)
    table = overhead_table()
    assert pred.unprofiled.overhead.ns_per_event == table.ns_per_event
    # the CPU entry has no per-kind part: every host event costs the per-event figure
    assert not table.per_kind
    assert pred.unprofiled.per_event_ns == table.ns_per_event["kineto"]
    assert any("profiler_overhead.toml" in n for n in pred.notes)
    it = pred.iterations
    assert it["unprofiled_ns"].iat[0] == pytest.approx(
        it["predicted_ns"].iat[0] - 6 * table.ns_per_event["kineto"], abs=6)


def test_gpu_bound_step_does_not_shrink(tmp_path: Path) -> None:
    """20 CPU ops launch 50 µs kernels each (the GPU runs 1 ms, the host 0.2 ms), then the
    host syncs: removing 1 µs per host event frees the host only, the GPU bounds the step."""
    ev = [_x("ProfilerStep#1", "user_annotation", 0, 1020)]
    t = 5.0
    for i in range(20):
        ev.append(_x("aten::mm", "cpu_op", t, 8))
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 2, 4, correlation=i + 1))
        ev.append(_x("gemm_kernel", "kernel", 10 + 50 * i, 50, gpu=True, correlation=i + 1,
                     stream=7, device=0))
        t += 10
    ev.append(_x("cudaDeviceSynchronize", "cuda_runtime", t, 1010 - t))
    ts = _trace(tmp_path, ev)
    pred = traincast.predict(ts, overhead=_cost())
    it = pred.iterations
    events = 20 + 20 + 2  # ops, launches, the sync, the step annotation
    assert pred.unprofiled.n_events == events
    shrink = it["predicted_ns"].iat[0] - it["unprofiled_ns"].iat[0]
    assert 0 <= shrink <= 3 * COST_NS  # the first launch and the step's edges at most
    # the same host work without the GPU bound shrinks by every event's cost
    assert shrink < events * COST_NS / 10


def test_cost_larger_than_the_segments_never_goes_negative(tmp_path: Path) -> None:
    ts = _trace(tmp_path, _host_chain(4, op_us=0.5))
    pred = traincast.predict(ts, overhead=_cost(kineto=50_000.0))
    g = pred.unprofiled.graph
    assert (g.lag >= 0).all()
    assert 0 <= pred.iterations["unprofiled_ns"].iat[0] < pred.iterations["predicted_ns"].iat[0]


def test_remove_overhead_splits_between_start_and_end(tmp_path: Path) -> None:
    """A parent with one child: the parent's cost comes off the segment after its start and
    the one before its end, the child's off its own segment."""
    ev = [_x("ProfilerStep#1", "user_annotation", 0, 100),
          _x("aten::linear", "cpu_op", 10, 50),
          _x("aten::addmm", "cpu_op", 20, 30)]
    ts = _trace(tmp_path, ev)
    graph = traincast.predict(ts).graph
    cost = np.zeros(graph.n_nodes)
    names = ts.events.column("name").to_pylist()
    lin, mm = names.index("aten::linear"), names.index("aten::addmm")
    cost[lin], cost[mm] = 4000, 2000
    g = remove_overhead(graph, cost)
    diff = graph.lag - g.lag
    assert diff[(graph.src == 2 * lin) & (graph.dst == 2 * mm)].tolist() == [2000]
    assert diff[(graph.src == 2 * mm + 1) & (graph.dst == 2 * lin + 1)].tolist() == [2000]
    assert diff[(graph.src == 2 * mm) & (graph.dst == 2 * mm + 1)].tolist() == [2000]
    assert int(diff.sum()) == 6000


def test_settings_detected_from_the_trace(tmp_path: Path) -> None:
    ev = _host_chain(3, **{"Input Dims": [[4], [4], []], "Input type": ["float", "float",
                                                                       "Scalar"]})
    ev.append(_x("<built-in method add>", "python_function", 3, 1))
    ts = _trace(tmp_path, ev)
    s = detect_profiler_settings(ts)
    assert (s.record_shapes, s.with_stack, s.execution_trace, s.device) == (
        True, True, False, "cpu")
    plain = detect_profiler_settings(_trace(tmp_path, _host_chain(3), "plain.json"))
    assert (plain.record_shapes, plain.with_stack, plain.execution_trace) == (
        False, False, False)


def test_costs_per_setting_add_up(tmp_path: Path) -> None:
    table = {"kineto": 400.0, "record_shapes": 600.0, "with_stack": 250.0,
             "execution_trace": 10_400.0}
    assert per_event_ns(table) == 400.0
    assert per_event_ns(table, record_shapes=True) == 600.0
    assert per_event_ns(table, record_shapes=True, execution_trace=True) == 10_600.0
    assert per_event_ns(table, python=True) == 250.0
    ts = _trace(tmp_path, _host_chain(3))
    u = unprofiled_graph(ts, traincast.predict(ts).graph, _cost(**{"record_shapes": 3000.0}),
                         ProfilerSettings(record_shapes=True))
    assert u.per_event_ns == 3000.0 and u.n_events == 4


def test_what_if_gets_unprofiled_of_its_own_graph(tmp_path: Path) -> None:
    ts = _trace(tmp_path, _host_chain(10))
    pred = traincast.predict(ts, what_if=["speedup=kind:cpu_op=2"], overhead=_cost())
    it = pred.iterations
    assert it["predicted_ns"].iat[0] < it["replay_ns"].iat[0]
    assert it["unprofiled_ns"].iat[0] == it["predicted_ns"].iat[0] - 11 * COST_NS
    assert "unprofiled_ns" in pred.to_dict()["ranks"][0]["iterations"][0]


def test_gpu_trace_takes_the_cuda_entry_cpu_trace_the_cpu_entry(tmp_path: Path) -> None:
    """The shipped table has a CUDA entry (measured on an H100 host, several times the CPU
    build's cost per event); a trace with GPU events uses it, a host-only trace does not."""
    cuda, cpu = overhead_table(None, "cuda"), overhead_table(None, "cpu")
    assert cuda.device == "cuda" and cpu.device == "cpu"
    assert cuda.ns_per_event["kineto"] > cpu.ns_per_event["kineto"]
    host = _host_chain(3)
    gpu = host + [_x("gemm", "kernel", 4.0, 50.0, gpu=True, device=0, stream=7,
                     correlation=1)]
    p_gpu = traincast.predict(_trace(tmp_path, gpu, "gpu.json"))
    p_cpu = traincast.predict(_trace(tmp_path, host, "cpu.json"))
    assert p_gpu.unprofiled.settings.device == "cuda"
    assert p_gpu.unprofiled.overhead.device == "cuda"
    assert p_gpu.unprofiled.per_event_ns == pytest.approx(cuda.per_kind["kineto"]["op"])
    assert p_cpu.unprofiled.overhead.device == "cpu"
    assert p_cpu.unprofiled.per_event_ns == cpu.ns_per_event["kineto"]
    assert not any("no cuda overhead entry" in n for n in p_gpu.notes)


def test_per_kind_costs_by_event_class_and_inputs(tmp_path: Path) -> None:
    """Per-kind table: an op costs its figure plus its inputs times the input figure, a
    runtime call the runtime figure; each option adds its part."""
    ev = _host_chain(4, **{"Input Dims": [[2, 3], [3]], "Input type": ["float", "float"]})
    ev.append(_x("cudaLaunchKernel", "cuda_runtime", 3.0, 0.5, correlation=1))
    ts = _trace(tmp_path, ev)
    per_kind = {"kineto": {"op": 1000.0, "runtime": 3000.0},
                "record_shapes": {"op": 200.0, "input": 50.0},
                "with_stack": {"op": 7.0, "python": 9.0},
                "execution_trace": {"op": 5.0, "input": 5.0}}
    ov = ProfilerOverhead(ns_per_event={}, per_kind=per_kind, inputs_per_op=1.0)
    cost = event_costs(ts, ov, ProfilerSettings(record_shapes=True))
    cls, n_in = host_event_classes(ts)
    ops = np.flatnonzero((cls == 0) & (n_in == 2))
    assert ops.size == 4
    assert np.all(cost[ops] == 1000 + 200 + 2 * 50)
    assert cost[cls == 1].tolist() == [3000.0]
    step = np.flatnonzero((cls == 0) & np.isnan(n_in))  # ProfilerStep: no shapes recorded
    assert cost[step].tolist() == [1000 + 200 + 1 * 50]  # the table's mean inputs per op
    kineto_only = event_costs(ts, ov, ProfilerSettings())
    assert np.all(kineto_only[ops] == 1000)
    f = step_features(ts)
    assert f[["op", "runtime", "python"]].iloc[0].tolist() == [5, 1, 0]
    assert f["input"].iat[0] == 8


def test_fit_recovers_known_costs() -> None:
    """NNLS on synthetic samples whose extras are exact sums recovers the coefficients."""
    rng = np.random.default_rng(0)
    truth = {"kineto": {"op": 500.0, "runtime": 2000.0},
             "record_shapes": {"op": 100.0, "input": 40.0},
             "with_stack": {"op": 50.0, "python": 300.0},
             "execution_trace": {"op": 9000.0, "input": 200.0}}
    samples = []
    for i in range(6):
        feats = {"op": float(rng.integers(50, 500)), "runtime": float(rng.integers(0, 200)),
                 "python": float(rng.integers(0, 600)), "input": float(rng.integers(50, 1500))}
        for part, coef in truth.items():
            samples.append({"program": f"p{i}", "part": part, "features": feats,
                            "extra_ns": sum(c * feats[f] for f, c in coef.items())})
    per_kind, report = fit_profiler_cost(samples)
    for part, coef in truth.items():
        for f, c in coef.items():
            assert per_kind[part][f] == pytest.approx(c, rel=1e-3)
    assert all(r["loo_ns"] == pytest.approx(r["extra_ns"], rel=1e-3) for r in report)
    with pytest.raises(ParameterError):
        fit_profiler_cost([s for s in samples if s["part"] != "with_stack"])


def test_execution_trace_observer_inferred_from_slow_view_ops(tmp_path: Path) -> None:
    """View-like ops taking >= 6 us each (an ET observer writing a node per op) mark the
    trace as recorded with an execution trace; the same ops at 1 us do not."""
    def trace(view_us: float, name: str) -> traincast.TraceSet:
        ev = [_x("aten::view", "cpu_op", 2.0 + 20.0 * i, view_us) for i in range(25)]
        ev.insert(0, _x("ProfilerStep#1", "user_annotation", 0, 600.0))
        return _trace(tmp_path, ev, name)

    slow = detect_profiler_settings(trace(10.0, "slow.json"))
    assert slow.execution_trace and "view-like ops take a median 10.0 us" in slow.evidence[0]
    fast = detect_profiler_settings(trace(1.0, "fast.json"))
    assert not fast.execution_trace
    few = detect_profiler_settings(_trace(tmp_path, _host_chain(5, op_us=10.0), "few.json"))
    assert not few.execution_trace


def test_cost_beyond_an_events_own_time_comes_off_the_gaps_around_it(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """An op shorter than its cost: what its own interval cannot hold comes off the host
    time before and after it (the profiler's callbacks run outside the recorded interval);
    the numba kernel and the plain-Python path agree."""
    from traincast.whatif import unprofiled as unp

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the kernel, however small the graph

    ts = _trace(tmp_path, _host_chain(6, op_us=1.0, gap_us=4.0))
    pred = traincast.predict(ts, overhead=_cost(kineto=3000.0))
    measured = pred.iterations["measured_ns"].iat[0]
    events = 7  # the six ops and the ProfilerStep annotation
    # 1 us ops with 4 us gaps: the 3 us cost per op fits only with the gaps
    assert pred.iterations["unprofiled_ns"].iat[0] <= measured - 6 * 3000
    cost = np.full(pred.graph.n_nodes, 0.0)
    cost[:events] = 3000.0
    g_fast, lost_fast = unp.removed_overhead(pred.graph, cost)
    g_slow = pred.graph.copy()
    lost_slow = unp._spread_py(g_slow, cost)
    np.testing.assert_array_equal(g_fast.lag, g_slow.lag)
    assert lost_fast == lost_slow


@pytest.mark.parametrize("scale_ns", [50.0, 3000.0, 200_000.0])
def test_plain_spread_equals_the_kernel_on_a_real_graph(traces: Path, monkeypatch,
                                                        scale_ns: float) -> None:
    """The plain path (leaf ops vectorised, the rest one pass over Python lists) takes the
    same ns from the same THREAD edges as the numba kernel: small costs that each op's own
    edge holds, and large ones that spill onto the gaps around it and are partly lost."""
    pytest.importorskip("numba")
    import warnings

    from traincast.graph.build import build_graph
    from traincast.whatif import unprofiled as unp

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the kernel, however small the graph
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(sorted((traces / "dlrm_8xv100" / "kineto").glob("*.json*"))[:1])
    graph = build_graph(ts)
    rng = np.random.default_rng(7)
    cost = rng.uniform(0.0, 2.0 * scale_ns, graph.n_nodes)
    cost[rng.random(graph.n_nodes) < 0.3] = 0.0
    g_fast, lost_fast = unp.removed_overhead(graph, cost)
    g_slow = graph.copy()
    lost_slow = unp._spread_py(g_slow, cost)
    np.testing.assert_array_equal(g_fast.lag, g_slow.lag)
    assert lost_fast == lost_slow
