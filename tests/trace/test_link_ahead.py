"""Links found ahead of the assembly (:mod:`traincast.trace.link.ahead`): each parsed trace
linked to the ET of the rank it records, stored where the assembly's cached link finds it,
equal to the assembly's own; every case it cannot be sure of is left to the assembly."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import traincast
from traincast.trace import cache as C
from traincast.trace import cache_et
from traincast.trace.cache_et import read_et_cached
from traincast.trace.link import ahead, cache_link
from traincast.trace.link.ahead import et_of_rank, link_ahead
from traincast.trace.readers.kineto import read_kineto

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
DLRM = DATA / "dlrm_8xv100"
LINEAR_ET = DATA / "linear_1x2080ti" / "et.json.gz"

pytestmark = pytest.mark.skipif(not DLRM.is_dir(), reason="shared trace data not available")


def _links(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("c/v*/et-link/*/*.arrows"))


def test_links_ahead_are_the_assemblys_own(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the ETs read by this process, half found in the cache: all eight traces linked
    ahead; the assembly then computes no link and holds the links a load without a cache
    finds."""
    store = C.TraceCache(tmp_path / "c")
    ets = sorted((DLRM / "et").iterdir())
    known = {e: read_et_cached(e, store) for e in ets[:4]}
    for e in ets[4:]:
        read_et_cached(e, store)
    for f in sorted((DLRM / "kineto").iterdir()):
        assert link_ahead(read_kineto(f), f, ets, store, known)
    assert len(_links(tmp_path)) == 8
    calls: list[int] = []
    linked = cache_link.link_execution_trace
    monkeypatch.setattr(cache_link, "link_execution_trace",
                        lambda *a, **k: calls.append(1) or linked(*a, **k))
    with pytest.warns(traincast.errors.TraincastWarning):  # (the sibling et/ folder)
        ts = traincast.load(DLRM / "kineto", cache=tmp_path / "c")
    assert calls == []
    monkeypatch.setattr(cache_link, "link_execution_trace", linked)
    with pytest.warns(traincast.errors.TraincastWarning):
        ref = traincast.load(DLRM / "kineto", cache=False)
    assert ts.et_links.equals(ref.et_links)
    assert ts.shapes.equals(ref.shapes)


def test_what_it_cannot_be_sure_of_is_left_to_the_assembly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = C.TraceCache(tmp_path / "c")
    f = DLRM / "kineto" / "rank-0.pt.trace.json.gz"
    rec = read_kineto(f)
    ets = sorted((DLRM / "et").iterdir())
    # the ET neither read here nor in the cache: not read here either
    monkeypatch.setattr(cache_et, "read_execution_trace",
                        lambda *a, **k: pytest.fail("an ET was read"))
    assert not link_ahead(rec, f, ets, store)
    monkeypatch.undo()
    read_et_cached(ets[0], store)
    # no rank recorded
    no_rank = dataclasses.replace(rec, distributed_info={})
    assert not link_ahead(no_rank, f, ets, store)
    # two ETs name rank 0
    twin = tmp_path / "worker_0.et.json.gz"
    shutil.copy(ets[0], twin)
    assert et_of_rank(0, [*ets, twin]) is None and et_of_rank(0, ets) == ets[0]
    assert not link_ahead(rec, f, [*ets, twin], store)
    # a gloo call: its range becomes a collective in the assembly (its kind changes)
    names = rec.events.column("name").to_pylist()
    names[int(np.flatnonzero([n.startswith("nccl:") for n in names])[0])] = "gloo:all_reduce"
    ev = rec.events.set_column(rec.events.schema.get_field_index("name"), "name",
                               pa.array(names).dictionary_encode())
    assert ahead._has_gloo_calls(dataclasses.replace(rec, events=ev))
    assert not ahead._has_gloo_calls(rec)
    assert not link_ahead(dataclasses.replace(rec, events=ev), f, ets, store)
    assert _links(tmp_path) == []
    assert link_ahead(rec, f, ets, store)  # all in order: stored
    assert len(_links(tmp_path)) == 1


@pytest.mark.skipif(not LINEAR_ET.is_file(), reason="shared trace data not available")
def test_a_refused_link_stores_nothing(tmp_path: Path) -> None:
    """Another run's ET named as rank 0's: the match refuses it, nothing is stored (the
    assembly links it again and raises)."""
    store = C.TraceCache(tmp_path / "c")
    other = tmp_path / "rank-0.et.json.gz"
    shutil.copy(LINEAR_ET, other)
    f = DLRM / "kineto" / "rank-0.pt.trace.json.gz"
    known = {other: read_et_cached(other, store)}
    assert not link_ahead(read_kineto(f), f, [other], store, known)
    assert _links(tmp_path) == []
