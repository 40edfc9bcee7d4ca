"""Batched planner search (issue 16): layouts sharing a step graph are simulated together
(one graph template, a duration vector per layout) and give exactly what one layout at a
time gives; the batched engine equals the one-graph engine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import traincast.simulate.engine as E
from traincast.plan.costs import PlanCosts
from traincast.plan.search import SearchSpace, _evaluate, enumerate_layouts, plan_search
from traincast.plan.spec import SystemSpec, TransformerSpec
from traincast.plan.step import build_transformer_graph
from traincast.simulate.engine import CyclicGraphError, simulate, simulate_batch

MODEL = TransformerSpec(layers=8, hidden=1024, heads=16, seq=1024, vocab=32000)
SYSTEM = SystemSpec.from_catalog(16, node="DGX-A100")


def test_batched_search_equals_one_layout_at_a_time() -> None:
    res = plan_search(MODEL, SYSTEM, 64, executor="serial")
    assert len(res.table) > 200
    one = pd.DataFrame([_evaluate((MODEL, SYSTEM, lay, None, None))
                        for lay in enumerate_layouts(MODEL, SYSTEM, 64)[0]])
    one = one[one["describe"].isin(res.table["describe"])]
    one = one.sort_values(["iteration_time_s", "memory_gib_per_gpu"], kind="stable")
    pd.testing.assert_frame_equal(res.table, one[res.table.columns].reset_index(drop=True),
                                  check_exact=True)


def test_moe_and_zero3_groups_equal_too() -> None:
    moe = TransformerSpec(layers=8, hidden=1024, heads=16, seq=1024, vocab=32000, experts=8,
                          top_k=2, moe_every=2)
    space = SearchSpace(zero=(0, 3), recompute=("none", "full"))
    res = plan_search(moe, SYSTEM, 32, space=space, executor="serial")
    lays = enumerate_layouts(moe, SYSTEM, 32, space)[0]
    one = {r["describe"]: r for r in (_evaluate((moe, SYSTEM, lay, None, None))
                                      for lay in lays)}
    for row in res.table.to_dict(orient="records"):
        assert row == one[row["describe"]]


@pytest.mark.parametrize("compiled", [True, False])
def test_simulate_batch_equals_simulate(compiled: bool, monkeypatch) -> None:
    if compiled:
        monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # however small the graph
    else:
        monkeypatch.setattr(E, "_KERNEL", [None])  # the numpy path
    lays = enumerate_layouts(MODEL, SYSTEM, 64)[0]
    pc = PlanCosts.build(SYSTEM, MODEL.dtype, None, None)
    rng = np.random.default_rng(0)
    for lay in lays[::97]:
        step = build_transformer_graph(MODEL, lay, pc)
        dur = step.template.durations(step.values)
        g = step.template.graph(dur)
        lags = np.stack([g.lag, 3 * g.lag, (g.lag * rng.uniform(0, 2, g.lag.size)).astype(
            np.int64)])
        want = np.stack([simulate(g, lag).times for lag in lags])
        np.testing.assert_array_equal(simulate_batch(g, lags), want)


def test_simulate_batch_refuses_cycles_and_bad_shapes() -> None:
    pc = PlanCosts.build(SYSTEM, MODEL.dtype, None, None)
    lay = enumerate_layouts(MODEL, SYSTEM, 64)[0][0]
    step = build_transformer_graph(MODEL, lay, pc)
    g = step.template.graph(step.template.durations(step.values))
    with pytest.raises(ValueError, match="lags must be"):
        simulate_batch(g, g.lag[None, :-1])
    g.src = np.append(g.src, 1)
    g.dst = np.append(g.dst, 0)  # end of op 0 -> start of op 0: a cycle
    g.lag = np.append(g.lag, 0)
    g.kind = np.append(g.kind, g.kind[0])
    with pytest.raises(CyclicGraphError):
        simulate_batch(g, g.lag[None, :])
