"""Compute cost model: traincast.costs.compute (roofline with fitted efficiency)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.costs.compute import ComputeModel, fit_compute_model, observations
from traincast.costs.ops import Work
from traincast.errors import ParameterError
from traincast.trace.traceset import TraceSet

# A hand-made model: peaks 1 TFLOP/s and 100 GB/s; efficiency 3% for a 100 ns ideal op rising
# to 50% from 100 us on (log10 eff against log10 ideal ns).
TOY = {
    "format": "traincast.compute_model", "version": 1,
    "devices": {"toy": {
        "peak_flops": {"*": 1e12}, "bandwidth": 1e11, "link_bandwidth": 1e10,
        "source": "given",
        "curves": {"*": {"x": [2.0, 3.0, 4.0, 5.0], "u": [-1.5, -0.8, -0.4, -0.3], "n": 4}},
    }},
}


@pytest.fixture(scope="module")
def toy() -> ComputeModel:
    return ComputeModel.from_json(json.dumps(TOY))


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def dlrm_model(dlrm: TraceSet) -> ComputeModel:
    return fit_compute_model(dlrm)


def _baseline_ape(train: pd.DataFrame, test: pd.DataFrame) -> np.ndarray:
    """A size-blind predictor: the family's median time in the training ops."""
    med = train.groupby("family")["measured_ns"].median()
    pred = test["family"].map(med).fillna(train["measured_ns"].median()).to_numpy()
    return np.abs(pred - test["measured_ns"].to_numpy()) / test["measured_ns"].to_numpy()


# -- accuracy on real traces -----------------------------------------------------------------


def test_dlrm_cross_validated_error(dlrm_model: ComputeModel) -> None:
    m = dlrm_model
    (name, dm), = m.devices.items()
    assert "V100" in name and dm.source in ("catalog", "empirical")
    assert {"*", "gemm", "elementwise"} <= set(dm.curves)
    cv = m.cv_mape
    # measured (5-fold, grouped so that no op shape is on both sides): gemm 0.38,
    # elementwise 0.22, memcpy 0.13, all 0.23 (the trace's times are whole microseconds)
    assert cv["gemm"] < 0.5
    assert cv["elementwise"] < 0.3
    assert cv["memcpy"] < 0.3
    assert cv["all"] < 0.3
    assert set(m.cv.columns) >= {"device", "family", "n", "mape", "mdape", "wape", "bias"}
    r = m.residuals
    assert r is not None and len(r) == int(m.cv.loc[m.cv.family == "all", "n"].iloc[0])


def test_dlrm_holdout_ranks(dlrm: TraceSet) -> None:
    rank = dlrm.column("rank")
    fit_mask = rank < 4
    m = fit_compute_model(dlrm, events=fit_mask)
    train = observations(dlrm, events=fit_mask)
    test = observations(dlrm, events=~fit_mask)
    assert set(train["event"]).isdisjoint(test["event"])
    assert (rank[test["event"]] >= 4).all()
    score = m.score(test).set_index("family")
    # measured: all 0.14, gemm 0.22, elementwise 0.14
    assert score.loc["all", "mape"] < 0.2
    assert score.loc["gemm", "mape"] < 0.3
    assert score.loc["elementwise", "mape"] < 0.2
    ape = np.abs(m.predict(test) - test["measured_ns"]) / test["measured_ns"]
    assert ape.mean() == pytest.approx(score.loc["all", "mape"])
    assert ape.mean() < 0.85 * _baseline_ape(train, test).mean()  # baseline: 0.20


def test_demo_cpu_holdout(demo_traces: Path) -> None:
    ts = traincast.load(demo_traces)
    rank = ts.column("rank")
    m = fit_compute_model(ts, events=rank == 0)
    (name, dm), = m.devices.items()
    assert name == "cpu" and dm.source == "empirical"
    assert {"gemm", "elementwise"} <= set(dm.curves)
    train = observations(ts, events=rank == 0)
    test = observations(ts, events=rank == 1)
    assert len(test) > 300 and set(test["family"]) >= {"gemm", "attention", "norm"}
    score = m.score(test).set_index("family")
    # measured on this 2-core machine (two ranks and their gloo threads share the cores, so
    # one op shape takes 1x-10x its best time): all 0.35 against 2.2 for the baseline
    assert score.loc["all", "mape"] < 0.8
    assert score.loc["all", "mape"] < 0.5 * _baseline_ape(train, test).mean()
    assert "gemm" in m.cv_mape and math.isfinite(m.cv_mape["all"])


# -- what-ifs --------------------------------------------------------------------------------


def test_ratio_doubles_and_is_monotone(dlrm_model: ComputeModel, toy: ComputeModel) -> None:
    for m in (dlrm_model, toy):
        big = Work(2e13, 4e9, "gemm", True, "fp32")  # compute-bound, beyond anything seen
        assert m.ratio(big, Work(4e13, 8e9, "gemm", True, "fp32")) == pytest.approx(2.0)
        base = Work(1e6, 1e5, "gemm", True, "fp32")
        times = [m.predict_ns(Work(base.flops * k, base.bytes * k, "gemm", True, "fp32"))
                 for k in np.logspace(-3, 7, 61)]
        steps = np.array(times[1:]) / np.array(times[:-1])
        k_step = 10 ** (10 / 60)
        assert (steps >= 1 - 1e-12).all() and (steps <= k_step * (1 + 1e-9)).all()
    # a real op of the trace, twice and half as large
    r = dlrm_model.residuals
    row = r[r["family"] == "gemm"].sort_values("flops").iloc[-1]
    w = Work(row["flops"], row["bytes"], "gemm", True, row["dtype"], row["op"])
    w2 = Work(2 * row["flops"], 2 * row["bytes"], "gemm", True, row["dtype"], row["op"])
    assert 1.0 <= dlrm_model.ratio(w, w2) <= 2.0 + 1e-9


def _bound(m: ComputeModel, r: pd.DataFrame) -> np.ndarray:
    dm = next(iter(m.devices.values()))
    peaks = np.array([dm.peak(d, f) for d, f in zip(r["dtype"], r["family"], strict=True)])
    return r["flops"].to_numpy() / peaks >= r["bytes"].to_numpy() / dm.bandwidth


def test_retarget_twice_the_flops(dlrm_model: ComputeModel, toy: ComputeModel) -> None:
    for m in (dlrm_model, toy):
        fast = m.retarget(2.0, 1.0, 1.0, 1.0)  # 2x peak FLOP/s, same bandwidth
        assert next(iter(fast.devices.values())).source == "retargeted"
        big = Work(2e13, 4e9, "gemm", True, "fp32")
        assert m.predict_ns(big) / fast.predict_ns(big) == pytest.approx(2.0)
        mem = Work(1e6, 4e9, "elementwise", True, "fp32")  # memory-bound
        assert fast.predict_ns(mem) == pytest.approx(m.predict_ns(mem), rel=1e-12)
    # the trace's ops (all memory-bound at batch 16 on a V100) and the same ops with 100x
    # the FLOPs, which puts many past the ridge
    r = dlrm_model.residuals
    r = pd.concat([r, r.assign(flops=100 * r["flops"])], ignore_index=True)
    compute = _bound(dlrm_model, r)
    fast = dlrm_model.retarget(2.0, 1.0, 1.0, 1.0)
    speedup = dlrm_model.predict(r) / fast.predict(r)
    assert compute.any() and (~compute).any()
    assert (speedup[compute] >= 1 - 1e-12).all() and (speedup[compute] <= 2 + 1e-9).all()
    np.testing.assert_allclose(speedup[~compute], 1.0, rtol=1e-12)
    # a faster memory and the same FLOP/s: memory-bound ops speed up, by at most 3x
    wide = dlrm_model.retarget(1.0, 3.0, 1.0, 1.0)
    s2 = dlrm_model.predict(r) / wide.predict(r)
    assert (s2 >= 1 - 1e-12).all() and (s2 <= 3 + 1e-9).all() and s2[~compute].max() > 1.01


def test_json_round_trip(dlrm_model: ComputeModel) -> None:
    text = dlrm_model.to_json()
    back = ComputeModel.from_json(text)
    r = dlrm_model.residuals
    np.testing.assert_allclose(back.predict(r), dlrm_model.predict(r), rtol=1e-5)
    assert back.cv_mape == pytest.approx(dlrm_model.cv_mape)
    assert back.to_json() == text
    (name, dm), = back.devices.items()
    assert dm.peak_flops == dlrm_model.devices[name].peak_flops
    fast = dlrm_model.retarget(2.0, 1.0, 1.0, 1.0)
    w = Work(3e12, 1e9, "gemm", True, "fp32")
    assert ComputeModel.from_json(fast.to_json()).predict_ns(w) == \
        pytest.approx(fast.predict_ns(w))


def test_given_peaks(dlrm: TraceSet) -> None:
    m = fit_compute_model(dlrm, peak_flops=15.7e12, bandwidth=900e9, cv_folds=0)
    (dm,) = m.devices.values()
    assert dm.source == "given" and dm.peak("fp32") == 15.7e12 and dm.bandwidth == 900e9
    assert m.cv.empty and m.cv_mape == {}


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_bad_input(toy: ComputeModel, dlrm: TraceSet, traces: Path) -> None:
    with pytest.raises(ParameterError):
        toy.predict_ns(Work(0, 0, "gemm", False))  # unknown work
    with pytest.raises(ParameterError):
        toy.predict_ns(Work(-1, 0, "gemm", True))
    with pytest.raises(ParameterError):
        toy.predict_ns(Work(math.nan, 0, "gemm", True))
    with pytest.raises(ParameterError):
        toy.predict_ns((1.0, 2.0))  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        toy.predict_ns(Work(1, 1, "gemm", True), device="H100")
    with pytest.raises(ParameterError):
        toy.ratio(Work(0, 0, "gemm", True), Work(1, 1, "gemm", True))
    for bad in (0.0, -1.0, math.inf, math.nan, "2"):
        with pytest.raises(ParameterError):
            toy.retarget(bad, 1.0, 1.0, 1.0)  # type: ignore[arg-type]
    for text in ("not json", "[]", '{"format": "other"}',
                 json.dumps({**TOY, "version": 99}),
                 json.dumps({**TOY, "devices": {}}),
                 json.dumps({**TOY, "devices": {"toy": {"peak_flops": {"*": 1}, "bandwidth": 1,
                                                        "curves": {}}}}),
                 json.dumps({**TOY, "devices": {"toy": {
                     **TOY["devices"]["toy"],
                     "curves": {"*": {"x": [2, 1], "u": [0, 0]}}}}})):
        with pytest.raises(ParameterError):
            ComputeModel.from_json(text)
    with pytest.raises(ParameterError):
        fit_compute_model(dlrm, events=np.ones(5, bool))  # mask of another length
    with pytest.raises(ParameterError):
        fit_compute_model(dlrm, events=np.array([-1]))
    with pytest.raises(ParameterError):
        fit_compute_model(dlrm, cv_folds=-1)
    with pytest.raises(ParameterError):
        fit_compute_model(dlrm, peak_flops=0.0)
    with pytest.raises(ParameterError):
        fit_compute_model(dlrm, events=np.zeros(dlrm.events.num_rows, bool))  # nothing to fit
    no_shapes = traces / "hta" / "critical_path_simple_add" / "input.json.gz"
    if no_shapes.exists():
        with pytest.raises(ParameterError, match="record_shapes"):
            fit_compute_model(traincast.load(no_shapes))
