"""A GPU-bound step in which nearly every host call waits (issue 27): ``speedup=kind:device=3``
lands within [max(device work / 3, host own work), that + 25%] on synthetic traces whose
ground truth is known (benchmarks/make_queue_trace.py: a queue that frees space in batches,
copies to pageable memory)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import traincast

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _gen():
    spec = importlib.util.spec_from_file_location("make_queue_trace", BENCH / "make_queue_trace.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_queue_trace", mod)
    spec.loader.exec_module(mod)
    return mod


gen = _gen()


def _steady(v: np.ndarray) -> float:
    return float(np.median(v[v.size // 2:]))


@pytest.mark.parametrize("kw", [{"copy_every": 0, "drain": 8}, {"copy_every": 0, "drain": 32},
                                {"drain": 8}, {"copy_every": 0}],
                         ids=["batched-drain", "batched-drain-32", "pageable-copies",
                              "queue-full"])
def test_gpu_bound_speedup_within_bounds(tmp_path: Path, kw: dict) -> None:
    p = gen.gpu_bound(**kw)
    ts = traincast.load(gen.write(tmp_path / "t.json", p))
    sim = gen.simulate(p)
    copies = np.where(sim["copy_start"] >= 0, sim["copy_end"] - sim["copy_start"], 0)
    device = float((sim["kernel_end"] - sim["kernel_start"]).sum() + copies.sum()) / p.steps
    host_own = _steady(gen.steps_ns(p, 1e-3))  # kernels ~free: the host's own work binds
    lo = max(device / 3, host_own)
    pred = traincast.predict(ts, what_if=["speedup=kind:device=3"])
    got = _steady(pred.iterations["predicted_ns"].to_numpy())
    assert lo * 0.98 <= got <= 1.25 * lo, (got, lo)
    truth = _steady(gen.steps_ns(p, 1 / 3))
    assert abs(got - truth) <= 0.05 * truth, (got, truth)


def test_batched_drain_is_a_wait(tmp_path: Path) -> None:
    """Launches that waited for a batch of entries to drain are waits, not host work."""
    p = gen.gpu_bound(copy_every=0, drain=8)
    ts = traincast.load(gen.write(tmp_path / "t.json", p))
    pred = traincast.predict(ts)
    (row,) = [w for w in pred.graph.host_waits if w[1] == "launch_queue"]
    assert "fitted" in row[5]
    sim = gen.simulate(p)
    blocked = (sim["launch_end"] - sim["launch_start"]) > p.launch_ns
    recorded = np.arange(blocked.size) >= p.unrecorded * p.ops
    assert row[3] >= 0.9 * (blocked & recorded).sum()  # nearly every blocked launch found
