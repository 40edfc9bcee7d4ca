"""Host waits are modelled, not copied (issue 12): launch-queue back-pressure, blocking copies,
syncs and polling are dependencies plus the call's intrinsic cost.

Physics: GPU durations scaled by k give steady steps within 5% of a bound computed from the
trace alone (``benchmarks/whatif_physics.py``: host intrinsic time, k x the busiest stream,
exposed communication) or, for the synthetic trace, of its generator's own discrete-event
simulation with the kernels k times longer.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.errors import ParameterError
from traincast.graph.model import EdgeKind
from traincast.whatif.spec import parse_what_if

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
KS = (1 / 3, 1 / 2, 2.0, 3.0)


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return mod


gen = _module("make_queue_trace")
physics = _module("whatif_physics")


def _steady(values: np.ndarray) -> float:
    return float(np.median(values[values.size // 2:]))


@pytest.fixture(scope="module", params=[(True, 0), (False, 0), (False, 7)],
                ids=["sync", "nosync", "nosync-hidden-entries"])
def synthetic(request, tmp_path_factory):
    sync, hidden = request.param
    p = gen.Params(sync=sync, hidden_every=hidden)
    path = gen.write(tmp_path_factory.mktemp("queue") / "trace.json", p)
    return p, traincast.load(path)


def test_synthetic_replay_and_fitted_depth(synthetic) -> None:
    p, ts = synthetic
    exact = traincast.predict(ts, exact=True)
    assert exact.iterations["error_pct"].abs().max() < 1e-9
    pred = traincast.predict(ts)
    assert pred.iterations["error_pct"].abs().max() < 0.5
    (row,) = [w for w in pred.graph.host_waits if w[1] == "launch_queue"]
    depth = int(row[5].split()[1])
    assert "fitted" in row[5]
    assert row[3] > 100  # launches visibly blocked
    if p.hidden_every:  # entries the trace does not show take slots: fewer traced ones
        assert p.depth * (1 - 1.5 / p.hidden_every) <= depth < p.depth
    else:
        assert depth == p.depth  # the generator's queue depth
    assert (pred.graph.kind == int(EdgeKind.QUEUE)).sum() == p.steps * p.ops - depth


@pytest.mark.parametrize("k", KS)
def test_synthetic_follows_ground_truth(synthetic, k: float) -> None:
    """The what-if equals the generator's own simulation with kernels k times longer: the
    GPU-bound step follows the GPU both ways until the host's intrinsic time binds."""
    p, ts = synthetic
    truth = _steady(gen.steps_ns(p, k))
    pred = traincast.predict(ts, what_if=[f"speedup=kind:device={1 / k:.12g}"])
    got = _steady(pred.iterations["predicted_ns"].to_numpy())
    assert abs(got - truth) <= 0.05 * truth, (got, truth)
    # with host calls replayed as measured the step cannot shrink below the measurement
    if k < 1 and not p.sync:
        old = traincast.predict(ts, what_if=[f"speedup=kind:device={1 / k:.12g}"],
                                model_waits=False)
        assert _steady(old.iterations["predicted_ns"].to_numpy()) > 1.5 * truth


def test_change_attribution_adds_up(synthetic) -> None:
    _, ts = synthetic
    pred = traincast.predict(ts, what_if=["speedup=kind:device=3"])
    it = pred.iterations
    total = it["op_time_ns"] + it["host_waits_ns"] + it["comm_ns"]
    assert (total == it["predicted_ns"] - it["replay_ns"]).all()
    assert (it["host_waits_ns"] < 0).all()  # the freed waits shorten every step
    d = pred.to_dict()["ranks"][0]["iterations"][0]
    assert set(d["change_ns"]) == {"op_time", "host_waits", "comm"}


@pytest.mark.parametrize(("name", "rel", "regime"), physics.SHARED,
                         ids=[s[0] for s in physics.SHARED])
def test_shared_traces_against_bound(traces: Path, name: str, rel: str, regime: str) -> None:
    ts = traincast.load(traces / rel)
    base = traincast.predict(ts)
    assert base.iterations["error_pct"].abs().max() <= 0.1  # the replay stays as accurate
    terms = physics.step_terms(ts)
    for k in KS:
        bound = physics.bound_ms(terms, k, regime)
        pred = traincast.predict(ts, what_if=[f"speedup=kind:device={1 / k:.12g}"])
        got = physics.steady_ms(pred)
        assert abs(got - bound) <= 0.05 * bound, (k, got, bound)


def test_dlrm_replay_within_half_percent(traces: Path) -> None:
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    assert traincast.predict(ts).iterations["error_pct"].abs().max() <= 0.5


# --- unit cases on small hand-made traces ---------------------------------------------------


def _trace(tmp_path: Path, events: list[dict]) -> traincast.TraceSet:
    doc = {"schemaVersion": 1, "traceEvents": events,
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return traincast.load(path)


def _x(name: str, cat: str, ts: float, dur: float, *, gpu: bool = False, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
            "pid": 0 if gpu else 100, "tid": args.pop("stream", 7) if gpu else 100,
            "args": args}


def _step(ts0: float, dur: float) -> dict:
    return _x("ProfilerStep#1", "user_annotation", ts0, dur)


def _sync_edges_into(pred, row: int) -> np.ndarray:
    g = pred.graph
    return np.flatnonzero((g.dst == 2 * row + 1) & (g.kind == int(EdgeKind.SYNC)))


def _row(ts, name: str) -> int:
    names = ts.events.column("name").to_pylist()
    return names.index(name)


@pytest.mark.parametrize(("copy", "blocks"), [("Memcpy DtoH (Device -> Pageable)", True),
                                              ("Memcpy DtoH (Device -> Pinned)", False)])
def test_copy_to_pageable_memory_waits(tmp_path: Path, copy: str, blocks: bool) -> None:
    """cudaMemcpyAsync to pageable memory returns after the copy (CUDA runtime API,
    "API synchronization behavior"); to pinned memory it does not block."""
    ev = [_step(0, 200),
          _x("cudaLaunchKernel", "cuda_runtime", 1, 4, correlation=1),
          _x("gemm_kernel", "kernel", 6, 100, gpu=True, correlation=1, stream=7, device=0),
          _x("cudaMemcpyAsync", "cuda_runtime", 10, 100 if blocks else 5, correlation=2),
          _x(copy, "gpu_memcpy", 106, 3, gpu=True, correlation=2, stream=7, device=0)]
    if not blocks:
        ev[-1]["ts"] = 106
    ts = _trace(tmp_path, ev)
    pred = traincast.predict(ts)
    call = _row(ts, "cudaMemcpyAsync")
    assert bool(_sync_edges_into(pred, call).size) == blocks
    if blocks:  # the GPU 3x faster: the copy call no longer waits 100 us
        fast = traincast.predict(ts, what_if=["speedup=kind:device=3"])
        tl = fast.timeline.events.to_pandas()
        assert tl["dur"].iat[call] < 50_000


def test_device_sync_depends_on_every_stream(tmp_path: Path) -> None:
    ev = [_step(0, 300),
          _x("cudaLaunchKernel", "cuda_runtime", 1, 4, correlation=1),
          _x("k_a", "kernel", 6, 50, gpu=True, correlation=1, stream=7, device=0),
          _x("cudaLaunchKernel", "cuda_runtime", 10, 4, correlation=2),
          _x("k_b", "kernel", 15, 80, gpu=True, correlation=2, stream=9, device=0),
          _x("cudaDeviceSynchronize", "cuda_runtime", 20, 77, correlation=3)]
    ts = _trace(tmp_path, ev)
    pred = traincast.predict(ts)
    into = _sync_edges_into(pred, _row(ts, "cudaDeviceSynchronize"))
    src = {int(pred.graph.src[e]) // 2 for e in into}
    assert src == {_row(ts, "k_a"), _row(ts, "k_b")}
    # k_a ended before the sync was called: its edge has slack in the measurement
    slow = traincast.predict(ts, what_if=["speedup=k_a=0.1"])  # k_a 10x longer: 500 us
    tl = slow.timeline.events.to_pandas()
    r = _row(ts, "cudaDeviceSynchronize")
    assert tl["ts"].iat[r] + tl["dur"].iat[r] >= tl["ts"].iat[_row(ts, "k_a")] + 500_000


def test_polling_loop_is_a_wait(tmp_path: Path) -> None:
    ev = [_step(0, 400),
          _x("cudaLaunchKernel", "cuda_runtime", 1, 4, correlation=1),
          _x("long_kernel", "kernel", 6, 300, gpu=True, correlation=1, stream=7, device=0)]
    ev += [_x("cudaEventQuery", "cuda_runtime", 10 + 10 * i, 1, correlation=10 + i)
           for i in range(30)]  # polls until 301 us; the kernel ends at 306
    ev.append(_x("cudaEventQuery", "cuda_runtime", 307, 1, correlation=99))
    ts = _trace(tmp_path, ev)
    pred = traincast.predict(ts)
    (row,) = [w for w in pred.graph.host_waits if w[1] == "poll"]
    assert row[3] == 1
    fast = traincast.predict(ts, what_if=["speedup=kind:device=3"])
    tl = fast.timeline.events.to_pandas()
    last = len(ts.events) - 1
    end = tl["ts"].iat[last] + tl["dur"].iat[last] - tl["ts"].min()
    assert end < 150_000  # the loop ends when the 100-us kernel does, not at 308 us


def test_speedup_kind_spec() -> None:
    w = parse_what_if(["speedup=kind:device=2"])
    assert w.speedups[0].kinds == ("kernel", "memcpy", "memset")
    assert w.to_dict()["speedup"] == ["kind:device=2"]
    with pytest.raises(ParameterError, match="unknown event kind 'gpu'"):
        parse_what_if(["speedup=kind:gpu=2"])
