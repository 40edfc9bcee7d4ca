"""record_demo: a real 2-rank DDP run over gloo on CPU, recorded once for the whole module."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from traincast.errors import ParameterError  # noqa: E402
from traincast.record import record_demo  # noqa: E402

WORLD_SIZE = 2
WARMUP = 1
ACTIVE = 3


def _load(path: Path) -> Any:
    with gzip.open(path, "rb") as fh:
        return json.loads(fh.read())


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "traces"  # does not exist yet: must be created
    returned = record_demo(out, world_size=WORLD_SIZE, warmup=WARMUP, active=ACTIVE)
    assert returned == out
    return out


@pytest.fixture(scope="module")
def kineto(recording: Path) -> dict[int, Any]:
    return {r: _load(recording / f"rank-{r}.pt.trace.json.gz") for r in range(WORLD_SIZE)}


@pytest.fixture(scope="module")
def et(recording: Path) -> dict[int, Any]:
    return {r: _load(recording / f"rank-{r}.et.json.gz") for r in range(WORLD_SIZE)}


def _complete(trace: Any) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def test_writes_exactly_the_final_files(recording: Path) -> None:
    names = sorted(p.name for p in recording.iterdir())
    expected = sorted(
        [f"rank-{r}.pt.trace.json.gz" for r in range(WORLD_SIZE)]
        + [f"rank-{r}.et.json.gz" for r in range(WORLD_SIZE)]
    )
    assert names == expected  # no temporaries or logs left behind


def test_distributed_info_matches_file_name(kineto: dict[int, Any]) -> None:
    for rank, trace in kineto.items():
        info = trace["distributedInfo"]
        assert info["rank"] == rank
        assert info["world_size"] == WORLD_SIZE
        assert info["backend"] == "gloo"


def test_one_profiler_step_per_active_step(kineto: dict[int, Any]) -> None:
    for trace in kineto.values():
        steps = [e for e in _complete(trace) if e["name"].startswith("ProfilerStep#")]
        assert sorted(e["name"] for e in steps) == [
            f"ProfilerStep#{n}" for n in range(WARMUP, WARMUP + ACTIVE)
        ]
        assert all(e["dur"] > 0 for e in steps)


def test_gloo_allreduce_on_both_ranks(kineto: dict[int, Any]) -> None:
    sizes = {}
    for rank, trace in kineto.items():
        events = _complete(trace)
        main_tid = next(e["tid"] for e in events if e["name"].startswith("ProfilerStep#"))
        issued = sorted(
            (e for e in events if e["name"] == "c10d::allreduce_"), key=lambda e: e["ts"]
        )
        executed = [e for e in events if e["name"] == "gloo:all_reduce"]
        # DDP issues one allreduce per bucket per step, from the training thread ...
        assert len(issued) >= ACTIVE
        assert all(e["cat"] == "cpu_op" and e["tid"] == main_tid for e in issued)
        # ... and gloo runs each one on one of its own worker threads.
        assert len(executed) == len(issued)
        assert all(e["tid"] != main_tid for e in executed)
        sizes[rank] = [e["args"]["Input Dims"][0][0][0] for e in issued]
    # Both ranks reduce the same buckets in the same order.
    assert sizes[0] == sizes[1]


def test_execution_trace_pairs_with_kineto(kineto: dict[int, Any], et: dict[int, Any]) -> None:
    for rank in range(WORLD_SIZE):
        trace = et[rank]
        assert isinstance(trace["schema"], str) and trace["schema"]
        nodes = trace["nodes"]
        assert len(nodes) > 100
        names = {n["name"] for n in nodes}
        assert {"c10d::allreduce_", "gloo:all_reduce"} <= names
        rf_ids = {a["value"] for n in nodes for a in n["attrs"] if a["name"] == "rf_id"}
        kineto_ids = {
            e["args"]["Record function id"]
            for e in _complete(kineto[rank])
            if "Record function id" in e.get("args", {})
        }
        # The ET covers the same profiled steps: every Kineto op is in it.
        assert kineto_ids and kineto_ids <= rf_ids


@pytest.mark.parametrize(
    "kwargs",
    [
        {"world_size": 0},
        {"world_size": 9},
        {"active": 0},
        {"warmup": -1},
        {"model": "resnet"},
    ],
)
def test_absurd_parameters_raise(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ParameterError):
        record_demo(tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()
