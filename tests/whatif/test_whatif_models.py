"""What-ifs that use the cost models: another GPU, another batch size."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.trace.traceset.TraceSet:  # type: ignore[name-defined]
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


def test_same_gpu_reproduces_the_replay(dlrm) -> None:  # noqa: ANN001
    pred = traincast.predict(dlrm, what_if=["gpu=V100-SXM2-32GB"])
    it = pred.iterations
    assert np.allclose(it["predicted_ns"], it["replay_ns"], rtol=0.02)
    assert (it["predicted_ns"] == it["replay_ns"]).all()  # every ratio is exactly 1


@pytest.mark.parametrize("gpu", ["A100-SXM4-80GB", "H100-SXM", "B200"])
def test_faster_gpu_is_bounded_by_the_peak_ratios(dlrm, gpu: str) -> None:  # noqa: ANN001
    cat = load_catalog()
    old, new = cat.gpu("V100-SXM2-32GB"), cat.gpu(gpu)
    bound = max(cat.peak_flops(new, "fp32") / cat.peak_flops(old, "fp32"),
                new.hbm_gbps / old.hbm_gbps)
    t0 = time.perf_counter()
    pred = traincast.predict(dlrm, what_if=[f"gpu={gpu}"])
    elapsed = time.perf_counter() - t0
    it = pred.iterations
    assert (it["predicted_ns"] <= it["replay_ns"]).all()
    assert (it["predicted_ns"] >= it["replay_ns"] / bound).all()
    # device op times themselves never shrink by more than the larger peak ratio
    dev = (pred.measured.column("device") >= 0)
    m_dur = pred.baseline.timeline.events.column("dur").to_numpy()
    p_dur = pred.timeline.events.column("dur").to_numpy()
    kinds = np.asarray(pred.timeline.events.column("kind").to_pylist())
    k = np.isin(kinds, ["kernel", "memcpy", "memset"]) & (m_dur > 0)
    assert (p_dur[k] >= np.floor(m_dur[k] / bound) - 1).all()
    assert dev.any()
    assert elapsed < 2.0  # the what-if over the 8 DLRM ranks (target: under 2 s)


def test_unknown_gpu_is_a_parameter_error(dlrm) -> None:  # noqa: ANN001
    with pytest.raises(ParameterError, match="H1000"):
        traincast.predict(dlrm, what_if=["gpu=H1000"])


def test_batch_size_on_the_demo(demo_traces: Path) -> None:
    ts = traincast.load(demo_traces)
    base = traincast.predict(ts)
    # the demo fixture records the default batch (8 sequences) without .run.json
    with pytest.raises(ParameterError, match="batch_size_from"):
        traincast.predict(ts, what_if=["batch_size=16"])
    big = traincast.predict(ts, what_if=["batch_size=16", "batch_size_from=8"])
    small = traincast.predict(ts, what_if=["batch_size=4", "batch_size_from=8"])
    b, g, s = (p.iterations["predicted_ns"].sum() for p in (base, big, small))
    assert s < b < g < 2 * b  # monotone, and fixed costs keep it below proportional
    fitted = traincast.predict(ts, what_if=["batch_size=16", "batch_size_from=8",
                                            "efficiency=fitted"])
    assert fitted.iterations["predicted_ns"].sum() > b
