"""Batch-size what-if of fbgemm TBE embedding lookups: the embedding model's ratios.

On the DLRM 8xV100 traces (../shared/data/traces/dlrm_8xv100, with their ETs) the per-rank
batch B0 is 16: the loss takes ``[16]`` logits, the data-parallel ``dense`` TBE looks up 16
bags per table, and the model-parallel ``split`` TBE, fed by all_to_all, 128 = 8 ranks x 16.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

import traincast
from traincast.costs import embedding as emb
from traincast.costs.embedding import (
    catalog_embedding_model,
    embedding_calls,
    embedding_observations,
    fit_embedding_efficiency,
)
from traincast.errors import ParameterError
from traincast.trace.load import TraincastWarning
from traincast.whatif import apply
from traincast.whatif.apply import batch_factors
from traincast.whatif.spec import parse_what_if


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    root = traces / "dlrm_8xv100"
    return traincast.load(root / "kineto", et_dir=root / "et")


@pytest.fixture(scope="module")
def b0(dlrm: traincast.TraceSet) -> int:
    """The recorded per-rank batch: the length of the loss's logits (ET/record shapes)."""
    names = dlrm.events.column("name").to_pylist()
    sizes = set()
    for row, dims in zip(dlrm.shapes.column("event").to_pylist(),
                         dlrm.shapes.column("input_dims").to_pylist(), strict=True):
        if names[row] == "aten::binary_cross_entropy_with_logits":
            sizes.add(orjson.loads(dims)[0][0])
    assert len(sizes) == 1
    return sizes.pop()


@pytest.fixture(scope="module")
def model(dlrm: traincast.TraceSet) -> emb.EmbeddingModel:
    return fit_embedding_efficiency(dlrm)


def _factors(ts: traincast.TraceSet, b1: int, b0: int) -> tuple[np.ndarray, list[str]]:
    return batch_factors(ts, parse_what_if({"batch_size": b1, "batch_size_from": b0}))


def test_tbe_batch_is_local_or_global(dlrm: traincast.TraceSet, b0: int) -> None:
    calls = embedding_calls(dlrm)
    assert len(calls) == 16  # 8 ranks x (split, dense)
    assert b0 == 16
    for c in calls:
        assert c.params is not None and c.forward is not None and len(c.backward) == 3
        # data-parallel tables: the local batch; model-parallel: all ranks' samples
        assert c.params.batch == (b0 if c.kind == "dense" else dlrm.world_size * b0)


def test_calls_are_the_observed_kernels(dlrm: traincast.TraceSet) -> None:
    obs = embedding_observations(dlrm)
    dur = dlrm.events.column("dur").to_numpy()
    for c in embedding_calls(dlrm):
        mine = obs[(obs["rank"] == c.rank) & (obs["kind"] == c.kind)].set_index("backward")
        assert mine.at[False, "dur_ns"] == dur[c.forward]
        assert mine.at[True, "dur_ns"] == dur[list(c.backward)].sum()


def test_double_batch_follows_the_model(dlrm: traincast.TraceSet, b0: int,
                                        model: emb.EmbeddingModel) -> None:
    pred = traincast.predict(dlrm, what_if={"batch_size": 2 * b0, "batch_size_from": b0})
    assert any("16 embedding lookups rescaled by the embedding model, fitted" in n
               for n in pred.what_if_notes)
    old = pred.baseline.timeline.events.column("dur").to_numpy().astype(float)
    new = pred.timeline.events.column("dur").to_numpy().astype(float)
    f, _ = _factors(dlrm, 2 * b0, b0)
    fwd_by_pooling = []
    for c in embedding_calls(dlrm):
        p = c.params
        assert p is not None and c.forward is not None
        q = p.replace(batch=2 * p.batch)
        r_f = model.ratio(p, q, False, c.optimizer)
        r_b = model.ratio(p, q, True, c.optimizer)
        # the factor is exactly the model's ratio; the simulated kernel is rounded to 1 ns
        assert f[c.forward] == r_f
        assert (f[list(c.backward)] == r_b).all()
        assert new[c.forward] == pytest.approx(old[c.forward] * r_f, abs=1.0)
        bwd = list(c.backward)
        assert new[bwd].sum() == pytest.approx(old[bwd].sum() * r_b, abs=len(bwd))
        # sublinear: the fitted latency floor (and, for small tables, the saturated unique
        # rows) keep twice the batch below twice the time
        assert 1.0 < r_f < 2.0 and 1.0 < r_b < 2.0
        if c.kind == "split":
            fwd_by_pooling.append((p.pooling, r_f))
    # more lookups per bag: more of the time is bytes, so the ratio is nearer to 2
    fwd_by_pooling.sort()
    ratios = [r for _, r in fwd_by_pooling]
    assert ratios[-1] == max(ratios) and ratios[0] == min(ratios)
    assert ratios[-1] > 1.8 and ratios[0] < 1.4
    assert (pred.iterations["predicted_ns"] > pred.iterations["replay_ns"]).all()


def test_same_batch_changes_nothing(dlrm: traincast.TraceSet, b0: int) -> None:
    f, notes = _factors(dlrm, b0, b0)
    assert (f == 1.0).all()
    assert any("embedding model" in n for n in notes)
    pred = traincast.predict(dlrm, what_if={"batch_size": b0, "batch_size_from": b0})
    assert (pred.iterations["predicted_ns"] == pred.iterations["replay_ns"]).all()


def test_smaller_batch_shrinks_the_lookups(dlrm: traincast.TraceSet, b0: int) -> None:
    f, _ = _factors(dlrm, b0 // 2, b0)
    rows = [c.forward for c in embedding_calls(dlrm)]
    assert ((f[rows] < 1.0) & (f[rows] > 0.5)).all()


def test_unfitted_catalog_model_when_the_fit_fails(dlrm: traincast.TraceSet, b0: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_a: object, **_k: object) -> None:
        raise ParameterError("no fit")

    monkeypatch.setattr(apply, "fit_embedding_efficiency", fail)  # where it is called
    f, notes = _factors(dlrm, 2 * b0, b0)
    assert any("not fitted (no fit)" in n for n in notes)
    cat = catalog_embedding_model(dlrm)
    c = embedding_calls(dlrm)[0]
    assert c.params is not None and c.forward is not None
    q = c.params.replace(batch=2 * c.params.batch)
    assert f[c.forward] == cat.ratio(c.params, q, False, c.optimizer)
    # no latency: the ratio is the DRAM-byte ratio, nearly the batch ratio for big tables
    assert 1.9 < f[c.forward] <= 2.0
    # no model at all: the kernels keep their time
    monkeypatch.setattr(apply, "catalog_embedding_model", fail)
    f, notes = _factors(dlrm, 2 * b0, b0)
    assert any("keep their time: no embedding model" in n for n in notes)
    assert (f[[c.forward for c in embedding_calls(dlrm)]] == 1.0).all()


def test_without_et_the_lookups_keep_their_time(traces: Path, b0: int) -> None:
    # the files alone: the folder would link the sibling et/ folder (trace/layout.py)
    ts = traincast.load(sorted((traces / "dlrm_8xv100" / "kineto").glob("*.json.gz")))
    calls = embedding_calls(ts)
    assert len(calls) == 16 and all(c.params is None for c in calls)
    f, notes = _factors(ts, 2 * b0, b0)
    assert any(n.startswith("16 embedding lookups keep their time") for n in notes)
    assert (f[[c.forward for c in calls]] == 1.0).all()


def test_trace_without_tbe_is_unaffected(traces: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(TraincastWarning, match="ProfilerStep"):
        ts = traincast.load(traces / "linear_1x2080ti")
    assert ts.et_links is not None and embedding_calls(ts) == []
    f, notes = _factors(ts, 1024, 512)
    assert not any("embedding" in n for n in notes)
    monkeypatch.setattr(apply, "_embedding_batch_factors", lambda *_a: [])
    f_shapes, _ = _factors(ts, 1024, 512)
    assert (f == f_shapes).all() and (f != 1.0).any()
