"""Tolerant decoding: surprising but unambiguous field types are coerced, the rest dropped,
every change counted; garbage is still refused."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest

from traincast.errors import TraceFormatError
from traincast.trace.readers.kineto import read_kineto
from traincast.trace.readers.tolerant import summary_line


def _trace(events: list) -> dict:
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
            "ts": 1000.0, "dur": 100.0}
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": [step, *events]}


def _write(tmp_path: Path, doc: dict | str, name: str = "rank-0.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def _op(**kw: object) -> dict:
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1010.0,
          "dur": 5.0}
    ev.update(kw)
    return ev


def test_clean_file_has_no_decode_stats(tmp_path: Path) -> None:
    k = read_kineto(_write(tmp_path, _trace([_op()])))
    assert k.decode_stats == {}
    assert k.events.num_rows == 2


def test_coerced_values_keep_their_meaning(tmp_path: Path) -> None:
    evs = [
        _op(ts="1010.5", args={"External id": "7", "Record function id": 3.0}),
        _op(name=12345, ts=1020.0, args={"External id": [8]}),
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1030.0,
         "dur": 2.0, "args": {"device": "0", "stream": 7, "correlation": "0x10"}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
         "ts": 1040.0, "dur": 1.0, "args": {"bytes": "1048576", "device": 0, "stream": 7}},
    ]
    k = read_kineto(_write(tmp_path, _trace(evs)))
    ev = k.events.to_pandas()
    mm = ev[ev["ts"] == 1_010_500].iloc[0]
    assert mm["external_id"] == 7 and mm["rf_id"] == 3
    assert "12345" in set(ev["name"]) and 8 in set(ev["external_id"])
    kern = ev[ev["name"] == "k"].iloc[0]
    assert kern["correlation"] == 16 and kern["device"] == 0
    c = k.decode_stats["coerced"]
    assert c == {"ts": 1, "args.External id": 2, "args.Record function id": 1, "name": 1,
                 "args.correlation": 1, "args.bytes": 1}  # device: int | str, parsed later
    assert "dropped_events" not in k.decode_stats


def test_ambiguous_values_are_dropped_and_counted(tmp_path: Path) -> None:
    evs = [
        _op(args={"External id": [1, 2]}),  # a list of two: which one? field dropped
        _op(ts=None),  # no time: event dropped
        _op(ts="soon"),  # no time: event dropped
        {"ph": "X", "cat": "cpu_op", "name": "no_dur", "pid": 1, "tid": 1, "ts": 1050.0},
        _op(args={"External id": None}),  # null: default
        42,  # not an event
        _op(args={"device": {"id": 0}}),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = read_kineto(_write(tmp_path, _trace(evs)))
    s = k.decode_stats
    assert s["dropped_fields"] == {"args.External id": 2, "args.device": 1}
    assert s["dropped_events"] == {"ts": 2, "dur": 1, "not an event": 1}
    assert k.events.num_rows == 1 + 3  # the step, the two ops with a dropped field, device
    line = summary_line(s, verbose=True)
    assert line.startswith("3 fields dropped (args.External id x2, args.device x1)")
    assert "4 events dropped" in line


def test_counts_reach_the_traceset_and_json_notes(tmp_path: Path) -> None:
    import traincast

    p = _write(tmp_path, _trace([_op(args={"External id": "7"})]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(p, cache=False)
        notes = traincast.predict(ts).to_dict()["notes"]
    assert ts.ranks[0].decode_stats == {"coerced": {"args.External id": 1}}
    assert any("tolerant decoding: 1 values coerced (args.External id x1)" in n for n in notes)


@pytest.mark.parametrize("text", [
    '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts": 3',  # truncated
    '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2},, ]}',  # broken JSON
    '{"hello": "world"}',  # not a trace
])
def test_garbage_is_still_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(TraceFormatError):
        read_kineto(_write(tmp_path, text))


def test_gzipped_tolerant_file(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json.gz"
    with gzip.open(p, "wt") as fh:
        json.dump(_trace([_op(args={"bytes": "12"})] * 3), fh)
    assert read_kineto(p).decode_stats == {"coerced": {"args.bytes": 3}}


def test_other_accelerators_load_as_device_events(tmp_path: Path) -> None:
    evs = [
        {"ph": "X", "cat": "mtia_runtime", "name": "launchKernel", "pid": 1, "tid": 1,
         "ts": 1010.0, "dur": 3.0, "args": {"correlation": 5}},
        {"ph": "X", "cat": "mtia_ccp_events", "name": "fused_op", "pid": 9, "tid": 2,
         "ts": 1015.0, "dur": 20.0, "args": {"correlation": 5}},
        {"ph": "X", "cat": "brand_new_category", "name": "x", "pid": 1, "tid": 1,
         "ts": 1050.0, "dur": 1.0},
        {"ph": "X", "cat": "Trace", "name": "whole", "pid": 1, "tid": 1, "ts": 1000.0,
         "dur": 100.0},
    ]
    k = read_kineto(_write(tmp_path, _trace(evs)))
    ev = k.events.to_pandas().set_index("name")
    assert ev.loc["launchKernel", "kind"] == "runtime" and ev.loc["launchKernel", "device"] == -1
    assert ev.loc["fused_op", "kind"] == "kernel"
    assert (ev.loc["fused_op", "device"], ev.loc["fused_op", "stream"]) == (9, 2)  # pid, tid
    # an unknown category is left out and counted; the whole-trace span is left out silently
    assert k.decode_stats == {"dropped_events": {"cat:brand_new_category": 1}}
