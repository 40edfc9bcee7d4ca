"""Tests of the link of PyTorch execution traces to Kineto events (traincast.trace.link.match), on
real traces."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from traincast.errors import ExecutionTraceMismatchError
from traincast.trace.link import link_execution_trace
from traincast.trace.readers.et import (
    ExecutionTrace,
    read_execution_trace,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
DLRM = DATA / "dlrm_8xv100"
LINEAR = DATA / "linear_1x2080ti"
HTA_ADD = DATA / "hta" / "et_simple_add"

needs_data = pytest.mark.skipif(not DLRM.is_dir(), reason="shared trace data not available")

_KIND = {
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "kernel": "kernel",
}


def kineto_events(path: Path) -> pa.Table:
    """Minimal Kineto events table (the columns link_execution_trace needs), row = event."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    cols: dict[str, list] = {
        k: [] for k in ("name", "kind", "ts", "dur", "tid", "external_id", "rf_id")
    }
    for e in orjson.loads(raw)["traceEvents"]:
        kind = _KIND.get(e.get("cat", ""))
        if e.get("ph") != "X" or kind is None:
            continue
        args = e.get("args", {})
        tid = e.get("tid")
        cols["name"].append(e["name"])
        cols["kind"].append(kind)
        cols["ts"].append(round(float(e["ts"]) * 1000))
        cols["dur"].append(round(float(e.get("dur", 0)) * 1000))
        cols["tid"].append(tid if isinstance(tid, int) else -1)
        cols["external_id"].append(int(args.get("External id", -1)))
        cols["rf_id"].append(int(args.get("Record function id", -1)))
    return pa.table(
        {
            "name": pa.array(cols["name"], pa.string()).dictionary_encode(),
            "kind": pa.array(cols["kind"], pa.string()).dictionary_encode(),
            "ts": pa.array(cols["ts"], pa.int64()),
            "dur": pa.array(cols["dur"], pa.int64()),
            "tid": pa.array(cols["tid"], pa.int64()),
            "external_id": pa.array(cols["external_id"], pa.int64()),
            "rf_id": pa.array(cols["rf_id"], pa.int64()),
        }
    )


def _names_agree(et: ExecutionTrace, events: pa.Table, link: pa.Table) -> bool:
    ids = et.nodes.column("id").to_pylist()
    names = dict(zip(ids, et.nodes.column("name").to_pylist(), strict=True))
    ev_names = events.column("name").cast(pa.string()).to_pylist()
    return all(
        names[n] == ev_names[e]
        for n, e in zip(
            link.column("node_id").to_pylist(), link.column("event").to_pylist(), strict=True
        )
    )


def _meta(link: pa.Table) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (link.schema.metadata or {}).items()}


# ------------------------------------------------------------------------------------------
# Linking to Kineto
# ------------------------------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("rank", range(8))
def test_link_dlrm_same_rank(rank: int) -> None:
    # No "Record function id" in these Kineto traces: matching is by name and order.
    # All 1672 candidate nodes (1675 minus process/thread roots) match on every rank.
    et = read_execution_trace(DLRM / "et" / f"rank-{rank}.et.json.gz")
    events = kineto_events(DLRM / "kineto" / f"rank-{rank}.pt.trace.json.gz")
    assert int(pa.compute.max(events["rf_id"]).as_py()) == -1
    link = link_execution_trace(et, events)
    meta = _meta(link)
    assert meta["method"] == "order"
    assert float(meta["match_fraction"]) == 1.0 and link.num_rows == 1672
    assert _names_agree(et, events, link)
    nodes = link.column("node_id").to_pylist()
    evs = link.column("event").to_pylist()
    assert nodes == sorted(nodes) and len(set(evs)) == len(evs)
    kinds = set(events["kind"].take(pa.array(evs)).cast(pa.string()).to_pylist())
    assert kinds <= {"cpu_op", "annotation"}


@needs_data
def test_link_linear_picks_one_iteration() -> None:
    # The Kineto trace holds 40 iterations, the ET one (identical to iterations 2..40).
    et = read_execution_trace(LINEAR / "et.json.gz")
    events = kineto_events(LINEAR / "kineto.pt.trace.json.gz")
    link = link_execution_trace(et, events)
    assert float(_meta(link)["match_fraction"]) == 1.0 and link.num_rows == 928
    assert _names_agree(et, events, link)
    ts = events["ts"].take(link["event"]).to_pylist()  # in node id order
    assert max(ts) - min(ts) < 30_000_000  # forward and backward threads in one ~16 ms step
    # ET ids are the global start order: the matched events start in that order too
    assert all(b >= a for a, b in zip(ts, ts[1:], strict=False))
    assert len(set(events["tid"].take(link["event"]).to_pylist())) == 2


@needs_data
def test_link_hta_simple_add() -> None:
    et = read_execution_trace(HTA_ADD / "et.json.gz")
    events = kineto_events(HTA_ADD / "kineto.json.gz")
    link = link_execution_trace(et, events)
    assert link.num_rows == 36 and _names_agree(et, events, link)


@needs_data
@pytest.mark.parametrize(
    ("et_path", "kineto_path"),
    [
        (LINEAR / "et.json.gz", DLRM / "kineto" / "rank-0.pt.trace.json.gz"),
        (DLRM / "et" / "rank-0.et.json.gz", LINEAR / "kineto.pt.trace.json.gz"),
        (HTA_ADD / "et.json.gz", DLRM / "kineto" / "rank-0.pt.trace.json.gz"),
    ],
)
def test_link_other_run_is_a_mismatch(et_path: Path, kineto_path: Path) -> None:
    et = read_execution_trace(et_path)
    events = kineto_events(kineto_path)
    with pytest.raises(ExecutionTraceMismatchError) as info:
        link_execution_trace(et, events, path=kineto_path)
    msg = str(info.value)
    assert "\n" not in msg and et_path.name in msg and info.value.path == str(kineto_path)


@needs_data
def test_link_mismatch_threshold_is_a_parameter() -> None:
    et = read_execution_trace(LINEAR / "et.json.gz")
    events = kineto_events(DLRM / "kineto" / "rank-0.pt.trace.json.gz")
    link = link_execution_trace(et, events, min_match_score=0.0)
    assert float(_meta(link)["score"]) < 0.3
    assert _names_agree(et, events, link)


def test_torch_link_by_rf_id(torch_traces: Path) -> None:
    et = read_execution_trace(torch_traces / "et.json")
    events = kineto_events(torch_traces / "kineto.json")
    assert int(pa.compute.max(events["rf_id"]).as_py()) > 0
    link = link_execution_trace(et, events)
    meta = _meta(link)
    assert meta["method"] == "rf_id" and float(meta["match_fraction"]) >= 0.95
    assert _names_agree(et, events, link)


def test_torch_link_rf_id_name_conflict(torch_traces: Path) -> None:
    et = read_execution_trace(torch_traces / "et.json")
    events = kineto_events(torch_traces / "kineto.json")
    names = events["name"].cast(pa.string()).to_pylist()
    shuffled = names[1:] + names[:1]  # same rf_ids, other names: a different run
    events = events.set_column(0, "name", pa.array(shuffled, pa.string()))
    with pytest.raises(ExecutionTraceMismatchError, match="record-function ids"):
        link_execution_trace(et, events)
