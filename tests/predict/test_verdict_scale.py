"""The verdict's evidence computed on dictionary codes equals the pandas computation over
every event it replaced (fp32 GEMM share and kinds, device ops per step, device time per op
family and rank), on real traces of several kinds (GPU with sgemm and tensorop kernels,
host-only, many ranks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.costs.hardware import load_catalog
from traincast.predict.verdict import (
    FP32_GEMM,
    MIN_SHARE,
    _family_rank_time,
    _fp32_gemms,
    _launches_per_step,
)
from traincast.trace.schema import GPU_WORK_KINDS

TRACES = ["dlrm_8xv100/kineto", "hta/a100_2rank_nccl", "hta/v100_2rank_allreduce",
          "linear_1x2080ti/kineto.pt.trace.json.gz", "hta/edge/cpu_only_rank34.json.gz",
          "hta/sampled_128rank_sendrecv"]


def _old_fp32_top(ts) -> tuple[float, str, int] | None:  # noqa: ANN001
    """(share, top kernel, kinds) as the per-event pandas code had them."""
    ev = ts.events.select(["kind", "name", "dur", "iteration"]).to_pandas()
    dev = ev[ev["kind"].isin(GPU_WORK_KINDS) & (ev["iteration"] >= 0)]
    if dev.empty:
        return None
    names = dev["name"].astype(str)
    sg = names.str.contains(FP32_GEMM, regex=False) & ~names.str.contains("tensorop",
                                                                          regex=False)
    dur = dev["dur"].clip(lower=0)
    total = float(dur.sum())
    if total <= 0:
        return None
    share = float(dur[sg].sum()) / total
    if share < MIN_SHARE:
        return None
    top = dur[sg].groupby(names[sg]).sum().sort_values(ascending=False)
    return share, str(top.index[0]), len(top)


@pytest.mark.parametrize("name", TRACES)
def test_evidence_equals_per_event_pandas(traces: Path, name: str) -> None:
    ts = traincast.load(traces / name)
    ev = ts.events.select(["rank", "kind", "iteration"]).to_pandas()
    dev = ev[ev["kind"].isin(GPU_WORK_KINDS) & (ev["iteration"] >= 0)]
    old = 0.0 if dev.empty else float(dev.groupby(["rank", "iteration"]).size().median())
    assert _launches_per_step(ts) == old
    want = _old_fp32_top(ts)
    got = _fp32_gemms(ts)
    gpu = load_catalog().match_first(p for i in ts.ranks.values() for p in i.device_properties)
    if want is None or gpu is None:
        assert got is None
        return
    share, top, kinds = want
    factor = gpu.peak_flops("fp16") * gpu.gemm_efficiency / gpu.peak_flops("fp32")
    if factor <= 1.0:
        assert got is None
        return
    assert got is not None and got[0] == factor
    assert got[1].startswith(f"fp32 SIMT GEMM kernels ({top}, {kinds} kinds) take "
                             f"{100 * share:.0f}% of the device time")
    assert np.isfinite(got[0])


@pytest.mark.parametrize("name", TRACES)
def test_family_rank_time_equals_pandas(traces: Path, name: str) -> None:
    ts = traincast.load(traces / name)
    ev = ts.events.select(["rank", "kind", "op_family", "dur", "iteration"]).to_pandas()
    dev = ev[ev["kind"].isin(GPU_WORK_KINDS) & (ev["op_family"] != "comm")
             & (ev["iteration"] >= 0)]
    per = _family_rank_time(ts)
    assert per is not None
    got = per.to_frame()
    if dev.empty:
        assert got.empty
        return
    want = dev.groupby(["op_family", "rank"], observed=True)["dur"].sum().unstack(fill_value=0)
    assert [str(f) for f in want.index] == list(got.index)
    assert want.columns.tolist() == got.columns.tolist()
    np.testing.assert_array_equal(want.to_numpy(), got.to_numpy())
    assert got.to_numpy().dtype == np.int64
    np.testing.assert_array_equal(want.median(axis=1).to_numpy(), got.median(axis=1).to_numpy())


@pytest.mark.parametrize("name", ["dlrm_8xv100/kineto", "hta/sampled_128rank_sendrecv"])
def test_evidence_by_small_chunks(traces: Path, name: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The evidence passes over the events a chunk at a time: chunks that split ranks
    and steps give what one chunk gives."""
    from traincast.predict import verdict
    from traincast.whatif import match

    ts = traincast.load(traces / name)
    kinds = match.event_values(ts, "kind")
    one = (_launches_per_step(ts), _fp32_gemms(ts), _family_rank_time(ts),
           kinds.used.copy(), kinds.isin(GPU_WORK_KINDS))
    monkeypatch.setattr(verdict, "CHUNK", 777)
    monkeypatch.setattr(match, "CHUNK", 777)
    ts.memo.clear()
    kinds = match.event_values(ts, "kind")
    many = (_launches_per_step(ts), _fp32_gemms(ts), _family_rank_time(ts),
            kinds.used, kinds.isin(GPU_WORK_KINDS))
    assert many[0] == one[0] and many[1] == one[1]
    assert many[2].to_frame().equals(one[2].to_frame())
    assert np.array_equal(many[3], one[3]) and np.array_equal(many[4], one[4])
