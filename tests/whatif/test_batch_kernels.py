"""Batch-size what-if on GPU traces: kernels take the factor of the CPU op that launched them.

The GPU trace is ../shared/data/traces/hta/a100_16rank_5streams (rank 0 of a 16-rank
torchrec-style DLRM on A100s, recorded with record_shapes; the one GPU-bound shared trace, see
benchmarks/README.md). Its per-rank batch B0 is 4096: the loss takes ``[4096]`` logits and
the MLP GEMMs ``[4096, K]`` activations. The CPU-only trace is the recorded demo run.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import orjson
import pytest

import traincast
from traincast.costs.embedding import embedding_calls
from traincast.costs.ops import event_work, op_work
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.whatif import apply
from traincast.whatif.apply import _scaled_dims, batch_factors
from traincast.whatif.spec import parse_what_if


@pytest.fixture(scope="module")
def a100(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "hta" / "a100_16rank_5streams")


@pytest.fixture(scope="module")
def b0(a100: traincast.TraceSet) -> int:
    """The recorded per-rank batch: the length of the loss's logits (record_shapes)."""
    names = a100.events.column("name").to_pylist()
    sizes = {orjson.loads(d)[0][0]
             for row, d in zip(a100.shapes.column("event").to_pylist(),
                               a100.shapes.column("input_dims").to_pylist(), strict=True)
             if names[row] == "aten::binary_cross_entropy_with_logits"}
    assert len(sizes) == 1
    return sizes.pop()


def _what(b1: int, b0: int) -> traincast.whatif.spec.WhatIf:
    return parse_what_if({"batch_size": b1, "batch_size_from": b0})


@pytest.fixture(scope="module")
def doubled(a100: traincast.TraceSet, b0: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Factors for 2·B0 with and without propagation to device ops, and the notes."""
    f, notes = batch_factors(a100, _what(2 * b0, b0))
    f_off, _ = batch_factors(a100, _what(2 * b0, b0), device_ops=False)
    return f, notes, f_off


@pytest.fixture(scope="module")
def work(a100: traincast.TraceSet):  # noqa: ANN201
    return event_work(a100)


def _device(ts: traincast.TraceSet) -> np.ndarray:
    return np.isin(np.asarray(ts.events.column("kind").to_pylist(), object), GPU_WORK_KINDS)


def _expected_ratio(ts: traincast.TraceSet, row: int, b0: int, b1: int) -> float:
    """FLOP ratio of the op at ``row`` with its batch dimension B0 -> B1, from op_work."""
    i = ts.shapes.column("event").to_pylist().index(row)
    dims = orjson.loads(ts.shapes.column("input_dims")[i].as_py())
    types = orjson.loads(ts.shapes.column("input_types")[i].as_py())
    name = ts.events.column("name")[row].as_py()
    old = op_work(name, dims, types)
    new = op_work(name, _scaled_dims(dims, {b0: b1}), types)
    assert old.known and old.flops > 0
    return new.flops / old.flops


def test_gemm_kernel_takes_its_ops_factor(a100: traincast.TraceSet, b0: int, work,  # noqa: ANN001
                                          doubled: tuple) -> None:
    f, notes, f_off = doubled
    names = np.asarray(a100.events.column("name").to_pylist(), object)
    dev = work[_device(a100)[work["event"]]]
    gemm_ops = np.isin(names[dev["source_event"].clip(0)], ["aten::addmm", "aten::mm"]) & (
        dev["source_event"] >= 0)
    gemms = dev[gemm_ops & np.array(["gemm" in n for n in names[dev["event"]]])]
    assert len(gemms) >= 20
    # the first cutlass GEMM launched by aten::addmm(bias, [B0, K], [K, 64]), itself nested in
    # an aten::linear (FLOPs 2·B0·64·K + B0·64 on both: the kernel must take the inner op's)
    k = next(int(e) for e, s in zip(gemms["event"], gemms["source_event"], strict=True)
             if names[s] == "aten::addmm" and "cutlass" in names[e])
    src = int(dev.set_index("event").at[k, "source_event"])
    col = {c: a100.events.column(c).to_numpy() for c in ("ts", "dur", "tid")}
    outer = np.flatnonzero((names == "aten::linear") & (col["tid"] == col["tid"][src])
                           & (col["ts"] <= col["ts"][src])
                           & (col["ts"] + col["dur"] >= col["ts"][src] + col["dur"][src]))
    assert outer.size == 1 and f[outer[0]] == f[src]
    r = _expected_ratio(a100, src, b0, 2 * b0)
    assert r == pytest.approx(2.0)
    assert f[k] == r and f[src] == r
    assert f_off[k] == 1.0  # before: the kernel kept its measured time
    # every GEMM kernel launched by a rescaled addmm/mm takes exactly its op's factor
    ev, so = gemms["event"].to_numpy(), gemms["source_event"].to_numpy()
    assert (f[so] != 1.0).all() and (f[ev] == f[so]).all()
    # the CPU ops keep their own factors; only device ops changed
    changed = f != f_off
    assert changed.any() and _device(a100)[changed].all()
    n = [int(m.group(1)) for m in map(re.compile(r"^(\d+) kernels rescaled with their "
                                                 r"launching op$").match, notes) if m]
    assert n == [int(changed.sum())]


def test_innermost_op_with_known_work_wins(a100: traincast.TraceSet, b0: int,
                                           work) -> None:  # noqa: ANN001
    """aten::linear holds aten::addmm; a model giving linear another ratio must not reach the
    kernels, which take addmm's."""

    class Compute:
        def ratio(self, old, new) -> float:  # noqa: ANN001
            return 3.0 if old.op == "aten::linear" else float("nan")  # nan: FLOP ratio

    f, _ = batch_factors(a100, _what(2 * b0, b0), Compute())
    names = np.asarray(a100.events.column("name").to_pylist(), object)
    dev = work[_device(a100)[work["event"]] & (work["source_event"] >= 0)]
    under_addmm = dev[names[dev["source_event"]] == "aten::addmm"]
    assert len(under_addmm)
    linears = np.flatnonzero(names == "aten::linear")
    assert (f[linears] == 3.0).all()
    assert (f[under_addmm["event"].to_numpy()] == 2.0).all()
    assert (f[under_addmm["source_event"].to_numpy()] == 2.0).all()


def test_double_batch_grows_the_gpu_bound_step(a100: traincast.TraceSet, b0: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    wi = {"batch_size": 2 * b0, "batch_size_from": b0}
    it = traincast.predict(a100, what_if=wi).iterations
    assert (it["predicted_ns"] > it["replay_ns"]).all()
    monkeypatch.setattr(apply, "batch_factors",
                        functools.partial(apply.batch_factors, device_ops=False))
    before = traincast.predict(a100, what_if=wi).iterations
    # host-time scaling alone grew the 5 steps by ~1.6%; with the kernels ~3.7%
    growth = it["predicted_ns"].sum() / it["replay_ns"].sum() - 1
    growth_before = before["predicted_ns"].sum() / before["replay_ns"].sum() - 1
    assert growth > growth_before + 0.01
    assert (it["predicted_ns"] > before["predicted_ns"]).all()


def test_same_batch_is_the_replay(a100: traincast.TraceSet, b0: int) -> None:
    f, notes = batch_factors(a100, _what(b0, b0))
    assert (f == 1.0).all()
    assert "0 kernels rescaled with their launching op" in notes
    it = traincast.predict(a100, what_if={"batch_size": b0, "batch_size_from": b0}).iterations
    assert (it["predicted_ns"] == it["replay_ns"]).all()


def test_embedding_kernels_are_not_propagated(a100: traincast.TraceSet,
                                              doubled: tuple, work) -> None:  # noqa: ANN001
    """The TBE lookups (no ET here, so the embedding model leaves them) keep their time even
    though their launching op's work is known."""
    f, notes, _ = doubled
    calls = embedding_calls(a100)
    assert calls and any("embedding lookups keep their time" in n for n in notes)
    ops = [c.op for c in calls]
    under = work[work["source_event"].isin(ops) & _device(a100)[work["event"]]]
    rows = [c.forward for c in calls if c.forward is not None]
    rows += [b for c in calls for b in c.backward] + under["event"].tolist()
    assert rows and (f[rows] == 1.0).all()


def test_cpu_only_trace_is_unchanged(demo_traces: Path) -> None:
    """No device ops: propagation changes no factor and adds no note (the CPU sweep of
    benchmarks/whatif_accuracy.py was validated on exactly these factors)."""
    ts = traincast.load(demo_traces)
    assert not _device(ts).any()
    for b1 in (4, 16):
        f, notes = batch_factors(ts, _what(b1, 8))
        f_off, notes_off = batch_factors(ts, _what(b1, 8), device_ops=False)
        assert (f != 1.0).any()
        np.testing.assert_array_equal(f, f_off)
        assert notes == notes_off
