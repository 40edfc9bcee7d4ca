"""``read_kineto`` on real Kineto traces (../shared/data/traces) and on small synthetic ones.

Expected values come from SOURCES.md and from an independent ``json``/``gzip`` parse of the
same files (exact decimal arithmetic for the µs -> ns conversion).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from traincast.trace.readers import jsonscan
from traincast.trace.readers.kineto import KinetoFile, read_kineto

HOST_KINDS = {"cpu_op", "annotation", "python", "runtime"}
GPU_KINDS = {"kernel", "memcpy", "memset", "sync"}

#: Kineto ``cat`` -> canonical kind, as documented in DESIGN.md / schema.py (independent copy).
CAT_KIND = {
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "annotation",
    "python_function": "python",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"}

# SOURCES.md: ProfilerStep#2..#6 of hta/v100_2rank_allreduce/rank-1, µs
V100_STEPS_US = {2: 345770, 3: 365256, 4: 346097, 5: 344269, 6: 336328}


# ----------------------------------------------------------------------------- helpers


def _doc(path: Path) -> dict[str, Any]:
    """Independent parse; floats as Decimal so that µs -> ns is exact."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)


def _ns(us: int | Decimal) -> int:
    v = Decimal(us) * 1000
    assert v == v.to_integral_value(), f"{us} µs is not a whole number of ns"
    return int(v)


def _expected_rows(doc: dict[str, Any]) -> list[tuple]:
    """(kind, name, ts_ns, dur_ns, device, stream) of every complete event, from the JSON."""
    rows = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in CAT_KIND:
            continue
        cat, args = e["cat"], e.get("args", {})
        kind = CAT_KIND[cat]
        if kind == "kernel" and e["name"].startswith("nccl"):
            kind = "collective"
        if cat in DEVICE_CATS:
            device = args.get("device", e["pid"])
            stream = args.get("stream", e["tid"])
        else:
            device = stream = -1
        rows.append((kind, e["name"], _ns(e["ts"]), _ns(e["dur"]), int(device), int(stream)))
    return rows


def _rows(k: KinetoFile) -> list[tuple]:
    ev = k.events
    return list(zip(*(ev.column(c).to_pylist() for c in
                      ("kind", "name", "ts", "dur", "device", "stream")), strict=True))


def _kind_counts(k: KinetoFile) -> dict[str, int]:
    return dict(Counter(k.events.column("kind").to_pylist()))


def _assert_sorted_by_ts_then_longest_first(k: KinetoFile) -> None:
    ts = k.events.column("ts").to_numpy()
    dur = k.events.column("dur").to_numpy()
    assert np.all(np.diff(ts) >= 0)
    same = np.diff(ts) == 0
    assert np.all(np.diff(dur)[same] <= 0)


def _write_trace(path: Path, events: list[dict], **top: Any) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return path


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def v100(traces: Path) -> KinetoFile:
    return read_kineto(traces / "hta" / "v100_2rank_allreduce" / "rank-1.json.gz")


@pytest.fixture(scope="module")
def a100_path(traces: Path) -> Path:
    return traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz"


@pytest.fixture(scope="module")
def a100(a100_path: Path) -> KinetoFile:
    return read_kineto(a100_path)


@pytest.fixture(scope="module")
def a100_doc(a100_path: Path) -> dict[str, Any]:
    return _doc(a100_path)


# ----------------------------------------------------------------------------- v100: 216k events


def test_v100_event_counts_by_kind(v100: KinetoFile) -> None:
    # JSON cats: cpu_op 56680, cuda_runtime 42373, kernel 19370 (2020 of them NCCL),
    # user_annotation 2035, gpu_memcpy 2040, gpu_memset 880, plus one "Trace" span (dropped)
    assert _kind_counts(v100) == {
        "cpu_op": 56680,
        "runtime": 42373,
        "kernel": 17350,
        "collective": 2020,
        "annotation": 2035,
        "memcpy": 2040,
        "memset": 880,
    }
    assert v100.events.num_rows == 123378
    names = v100.events.column("name").to_pylist()
    assert "PyTorch Profiler (0)" not in names


def test_v100_profiler_steps_and_collective_kernels(v100: KinetoFile) -> None:
    ev = v100.events.to_pandas()
    steps = ev[ev["name"].astype(str).str.startswith("ProfilerStep#")]
    assert sorted(steps["name"].astype(str)) == [f"ProfilerStep#{n}" for n in range(2, 7)]
    assert (steps["kind"] == "annotation").all()
    for n, us in V100_STEPS_US.items():
        (dur,) = steps.loc[steps["name"] == f"ProfilerStep#{n}", "dur"].tolist()
        assert dur == us * 1000
    coll = ev[ev["kind"] == "collective"]
    assert len(coll) == 2020
    assert coll["name"].astype(str).str.startswith("ncclKernel_AllReduce").all()
    # streams from args: NCCL on stream 14, compute kernels on stream 7, all on GPU 1
    assert set(coll["stream"]) == {14}
    assert set(ev.loc[ev["kind"] == "kernel", "stream"]) == {7}
    assert set(ev.loc[ev["kind"].isin(["kernel", "collective", "memcpy", "memset"]),
                      "device"]) == {1}
    assert (coll["op_family"] == "comm").all()


def test_v100_schema_sort_order_and_host_device_columns(v100: KinetoFile) -> None:
    schema = v100.events.schema
    for col in ("ts", "dur", "pid", "tid", "correlation", "external_id", "rf_id"):
        assert schema.field(col).type == pa.int64(), col
    for col in ("rank", "iteration", "device", "stream"):
        assert schema.field(col).type == pa.int32(), col
    assert set(v100.events.column("rank").to_pylist()) == {-1}  # filled by load()
    _assert_sorted_by_ts_then_longest_first(v100)
    kind = np.asarray(v100.events.column("kind").to_pylist())
    device = v100.events.column("device").to_numpy()
    stream = v100.events.column("stream").to_numpy()
    host = np.isin(kind, list(HOST_KINDS))
    assert host.sum() == 56680 + 42373 + 2035
    assert np.all(device[host] == -1) and np.all(stream[host] == -1)
    assert np.all(device[~host] >= 0) and np.all(stream[~host] >= 0)


def test_v100_distributed_info_and_devices(v100: KinetoFile) -> None:
    assert v100.distributed_info == {"backend": "nccl", "rank": 1, "world_size": 2}
    assert [d["name"] for d in v100.device_properties] == ["Tesla V100-SXM2-32GB"] * 2
    assert v100.n_bytes > 50_000_000  # 54 MB of JSON, decompressed


# ----------------------------------------------------------------------------- exact times


def test_every_event_matches_the_json_exactly_fractional_us(a100: KinetoFile,
                                                            a100_doc: dict) -> None:
    """a100_2rank_nccl stores µs with 3 decimals (e.g. 4458676522690.655): ns must be exact."""
    expected = _expected_rows(a100_doc)
    assert len(expected) == 26932
    got = _rows(a100)
    assert sorted(got) == sorted(expected)
    some = [r for r in expected if r[0] == "collective"][:3]
    assert all(r in got for r in some)
    _assert_sorted_by_ts_then_longest_first(a100)


def test_a_few_events_against_the_json(a100: KinetoFile, a100_doc: dict) -> None:
    ev = a100.events
    ts = ev.column("ts").to_numpy()
    names = ev.column("name").to_pylist()
    raw = [e for e in a100_doc["traceEvents"] if e.get("ph") == "X"
           and e.get("cat") in ("kernel", "user_annotation", "cuda_runtime")]
    for e in (raw[0], raw[len(raw) // 2], raw[-1]):
        want = int(Decimal(e["ts"]) * 1000)
        rows = np.flatnonzero(ts == want)
        assert any(names[r] == e["name"] for r in rows), e["name"]
        r = next(r for r in rows if names[r] == e["name"])
        assert ev.column("dur")[int(r)].as_py() == int(Decimal(e["dur"]) * 1000)
        if "correlation" in e["args"]:
            assert ev.column("correlation")[int(r)].as_py() == e["args"]["correlation"]
        if "External id" in e["args"]:
            assert ev.column("external_id")[int(r)].as_py() == e["args"]["External id"]
    first = min(Decimal(e["ts"]) for e in raw)
    assert ts.min() == int(first * 1000)


def test_integer_us_trace_matches_the_json(traces: Path) -> None:
    path = traces / "dlrm_8xv100" / "kineto" / "rank-0.pt.trace.json.gz"
    doc = _doc(path)
    k = read_kineto(path)
    assert sorted(_rows(k)) == sorted(_expected_rows(doc))
    assert k.distributed_info == {"backend": "nccl", "rank": 0, "world_size": 8}
    step = [r for r in _rows(k) if r[1] == "ProfilerStep#10"]
    assert [r[3] for r in step] == [14455 * 1000]


def test_a100_distributed_info_threads_and_comm_args(a100: KinetoFile, a100_doc: dict) -> None:
    info = a100.distributed_info
    assert (info["rank"], info["world_size"], info["backend"]) == (0, 2, "nccl")
    assert info["pg_config"][0]["pg_name"] == "0" and info["pg_config"][0]["ranks"] == [0, 1]
    assert a100.base_time_ns == a100_doc["baseTimeNanoseconds"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in a100_doc["traceEvents"]
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert threads and a100.threads == threads
    with_args = [e for e in a100_doc["traceEvents"] if e.get("ph") == "X"
                 and "Collective name" in e.get("args", {})]
    assert a100.comm_args.num_rows == len(with_args) == 48
    assert sorted(a100.comm_args.column("in_nelems").to_pylist()) == sorted(
        e["args"]["In msg nelems"] for e in with_args)
    # comm_args rows point at the events that carry them
    names = a100.events.column("name").to_pylist()
    for row, coll in zip(a100.comm_args.column("event").to_pylist(),
                         a100.comm_args.column("coll_name").to_pylist(), strict=True):
        assert names[row] == "record_param_comms" or names[row].startswith("ncclKernel")
        assert coll in {"allreduce", "broadcast", "wait"}


def test_gpu_user_annotation_is_a_device_annotation(a100: KinetoFile, a100_doc: dict) -> None:
    want = Counter((e["name"], e["tid"]) for e in a100_doc["traceEvents"]
                   if e.get("cat") == "gpu_user_annotation")
    ev = a100.events.to_pandas()
    gpu_ann = ev[(ev["kind"] == "annotation") & (ev["device"] >= 0)]
    assert len(gpu_ann) == sum(want.values()) == 30
    assert Counter(zip(gpu_ann["name"].astype(str), gpu_ann["stream"], strict=True)) == want
    assert set(gpu_ann["device"]) == {0}
    host_ann = ev[(ev["kind"] == "annotation") & (ev["device"] < 0)]
    assert len(host_ann) == 42 and (host_ann["stream"] == -1).all()


# ----------------------------------------------------------------------------- formats


def test_plain_json_reads_like_gzip(tmp_path: Path, a100_path: Path, a100: KinetoFile) -> None:
    plain = tmp_path / "rank-0.json"
    plain.write_bytes(gzip.decompress(a100_path.read_bytes()))
    k = read_kineto(plain)
    assert k.events.num_rows == a100.events.num_rows > 0
    assert k.events.equals(a100.events)
    assert k.comm_args.equals(a100.comm_args)
    assert k.distributed_info == a100.distributed_info
    assert k.threads == a100.threads


def test_gzip_of_several_members_reads_like_one(tmp_path: Path, a100_path: Path,
                                                a100: KinetoFile) -> None:
    text = gzip.decompress(a100_path.read_bytes())
    third = len(text) // 3
    multi = tmp_path / "multi.json.gz"
    multi.write_bytes(b"".join(gzip.compress(text[i:i + third])
                               for i in range(0, len(text), third)))
    assert read_kineto(multi).events.equals(a100.events)


def test_rocm_trace(traces: Path) -> None:
    k = read_kineto(traces / "hta" / "edge" / "amd_mi250_minitoy.json.gz")
    assert _kind_counts(k) == {"cpu_op": 70, "annotation": 5, "runtime": 21, "memcpy": 2,
                               "kernel": 14}
    ev = k.events.to_pandas()
    runtime = ev[ev["kind"] == "runtime"]
    assert runtime["name"].astype(str).str.startswith("hip").all()
    # HIP runtime calls record "stream": "0x0"; they stay host events
    assert (runtime["device"] == -1).all() and (runtime["stream"] == -1).all()
    gpu = ev[ev["kind"].isin(["kernel", "memcpy"])]
    assert set(gpu["device"]) == {2} and set(gpu["stream"]) == {0}
    assert (gpu["correlation"] >= 0).all()
    names = set(ev.loc[ev["kind"] == "annotation", "name"].astype(str))
    assert {"ProfilerStep#1", "ProfilerStep#2", "Optimizer.step#SGD.step"} <= names
    gpu_ann = ev[(ev["kind"] == "annotation") & (ev["device"] == 2)]
    assert sorted(gpu_ann["name"].astype(str)) == ["Optimizer.step#SGD.step", "ProfilerStep#1"]
    assert k.distributed_info == {}


def test_cuda_sync_kind(traces: Path) -> None:
    path = traces / "hta" / "edge" / "cuda_event_sync_multi_stream.json.gz"
    k = read_kineto(path)
    ev = k.events.to_pandas()
    sync = ev[ev["kind"] == "sync"]
    assert Counter(sync["name"].astype(str)) == {"Event Sync": 3, "Stream Wait Event": 1,
                                                 "Context Sync": 1}
    assert set(sync["device"]) == {0}
    (wait_stream,) = sync.loc[sync["name"] == "Stream Wait Event", "stream"].tolist()
    assert wait_stream == 24  # args.stream of the cudaStreamWaitEvent
    assert _kind_counts(k) == {"cpu_op": 6, "runtime": 39, "sync": 5, "memset": 3, "kernel": 3}
    assert k.distributed_info == {"rank": 0}


def test_runtime_and_driver_calls_are_runtime(traces: Path) -> None:
    k = read_kineto(traces / "hta" / "edge" / "triton_example.json.gz")
    doc = _doc(traces / "hta" / "edge" / "triton_example.json.gz")
    want = sorted(e["name"] for e in doc["traceEvents"]
                  if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    assert len(want) == 2
    ev = k.events.to_pandas()
    assert sorted(ev.loc[ev["kind"] == "runtime", "name"].astype(str)) == want
    assert _kind_counts(k) == {"annotation": 1, "cpu_op": 3, "runtime": 2, "kernel": 1}


def test_python_functions_and_unknown_cats(traces: Path) -> None:
    k = read_kineto(traces / "tracelens" / "b200_8rank_rank0.json.gz")
    # cats: python_function 15230, cpu_op 4809, cuda_runtime 1151 + cuda_driver 221,
    # kernel 768 (one of them ncclDevKernel_AllGather), gpu_memcpy 161,
    # user/gpu_user_annotation 3 + 3, "overhead" 9 (dropped)
    assert _kind_counts(k) == {"python": 15230, "cpu_op": 4809, "runtime": 1372,
                               "kernel": 767, "collective": 1, "memcpy": 161, "annotation": 6}
    assert k.distributed_info["rank"] == 0 and k.distributed_info["world_size"] == 8


def test_cpu_only_trace(traces: Path) -> None:
    k = read_kineto(traces / "hta" / "edge" / "cpu_only_rank34.json.gz")
    assert _kind_counts(k) == {"annotation": 11, "cpu_op": 4}
    assert (k.events.column("device").to_numpy() == -1).all()
    assert (k.distributed_info["rank"], k.distributed_info["world_size"]) == (34, 300)
    assert k.base_time_ns == 1719853884000000000


# ----------------------------------------------------------------------------- synthetic


def test_begin_end_pairs_become_complete_events(tmp_path: Path) -> None:
    path = _write_trace(tmp_path / "be.json", [
        {"ph": "B", "cat": "user_annotation", "name": "outer", "pid": 1, "tid": 1, "ts": 10,
         "args": {"External id": 5}},
        {"ph": "B", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 12.5},
        {"ph": "B", "cat": "cpu_op", "name": "other thread", "pid": 1, "tid": 2, "ts": 11},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 15.25},
        {"ph": "X", "cat": "cpu_op", "name": "complete", "pid": 1, "tid": 1, "ts": 16,
         "dur": 1},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 20},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 30},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ])
    k = read_kineto(path)
    rows = k.events.select(["kind", "name", "ts", "dur", "tid", "external_id", "device"]
                           ).to_pylist()
    assert rows == [
        {"kind": "annotation", "name": "outer", "ts": 10_000, "dur": 10_000, "tid": 1,
         "external_id": 5, "device": -1},
        {"kind": "cpu_op", "name": "other thread", "ts": 11_000, "dur": 19_000, "tid": 2,
         "external_id": -1, "device": -1},
        {"kind": "cpu_op", "name": "inner", "ts": 12_500, "dur": 2_750, "tid": 1,
         "external_id": -1, "device": -1},
        {"kind": "cpu_op", "name": "complete", "ts": 16_000, "dur": 1_000, "tid": 1,
         "external_id": -1, "device": -1},
    ]
    assert k.threads == {(1, 1): "main"}


def _tricky_trace(n_bytes: int) -> tuple[bytes, list[str], list[tuple[int, int]]]:
    """A trace whose event names are long strings full of ``"},{"`` and escapes.

    Returns the document, the names in order and the byte span of each name's JSON string.
    """
    head = b'{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": ['
    parts, names, spans = [head], [], []
    pos = len(head)
    i = 0
    while pos < n_bytes:
        body = ('"},{"ph":"X"\\' * 3 + '\\"},{"') * (40 + i % 17)
        name = f"ev{i} {body}" + ("tail\\" if i % 2 else 'ü✓日本"},')
        ev = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1000 + i,
              "dur": 1, "args": {"External id": i, "Input Dims": [[1, 2], []]}}
        text = (b", " if i else b"") + json.dumps(ev, ensure_ascii=False).encode()
        enc = json.dumps(name, ensure_ascii=False).encode()
        at = text.index(b'"name": ' + enc) + len(b'"name": ')
        spans.append((pos + at, pos + at + len(enc)))
        parts.append(text)
        names.append(name)
        pos += len(text)
        i += 1
    parts.append(b'], "traceName": "x\\"},{\\""}')
    return b"".join(parts), names, spans


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
def test_chunk_boundaries_inside_strings(tmp_path: Path, gz: bool) -> None:
    doc, names, spans = _tricky_trace(int(3.5 * (1 << 20)))
    assert len(doc) > 3 * (1 << 20)
    # precondition: at every 1 MiB block boundary the last '},' lies inside an event name
    block = jsonscan._BLOCK
    starts = np.array([s for s, _ in spans])
    for b in range(block, len(doc), block):
        cut = doc.rfind(b"},", 0, b)
        k = int(np.searchsorted(starts, cut, "right")) - 1
        assert spans[k][0] < cut < spans[k][1], "test data does not exercise in-string cuts"
    path = tmp_path / ("big.json.gz" if gz else "big.json")
    path.write_bytes(gzip.compress(doc, 1) if gz else doc)
    k = read_kineto(path)
    assert k.events.num_rows == len(names)
    assert k.events.column("name").to_pylist() == names  # ts increase with i
    assert k.events.column("external_id").to_pylist() == list(range(len(names)))
    assert k.events.column("ts").to_pylist() == [(1000 + i) * 1000 for i in range(len(names))]
    assert k.distributed_info == {"rank": 0, "world_size": 1}
    assert k.shapes.num_rows == len(names)
    dims = k.shapes.column("input_dims").to_pylist()
    assert all(json.loads(d) == [[1, 2], []] for d in dims)


def test_jsonscan_yields_whole_events_in_several_chunks(tmp_path: Path) -> None:
    doc, names, _ = _tricky_trace(int(3.2 * (1 << 20)))
    path = tmp_path / "big.json"
    path.write_bytes(doc)
    result = jsonscan.ScanResult()
    events = [e for chunk in jsonscan.iter_event_chunks(path, result, json.loads) for e in chunk]
    assert [e["name"] for e in events] == names
    assert result.chunks >= 3
    assert result.n_bytes == len(doc)
    header = json.loads(result.header)
    assert header["traceEvents"] == [] and header["traceName"] == 'x"},{"'


def test_top_level_array_format(tmp_path: Path) -> None:
    """The Trace Event Format's "JSON Array Format": the document is the events array."""
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps([
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 11,
         "dur": 2},
    ]))
    k = read_kineto(p)
    assert k.events.column("name").to_pylist() == ["ProfilerStep#1", "aten::add"]
    assert k.events.column("ts").to_pylist() == [10_000, 11_000]


def test_negative_duration_becomes_zero(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": -3}]}))
    assert read_kineto(p).events.column("dur").to_pylist() == [0]


def test_all_streams_sentinel_is_no_stream(tmp_path: Path) -> None:
    """CUDA's all-streams value (an unsigned -1) in a cuda_sync record becomes -1."""
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": 7, "ts": 1,
         "dur": 2, "args": {"stream": 4294967295, "device": 0, "correlation": 3}}]}))
    assert read_kineto(p).events.column("stream").to_pylist() == [7]


def test_events_order_by_time_equals_lexsort() -> None:
    """The combined-key sort gives lexsort's order (start, longer first, position), and
    ranges too wide for one int64 key take lexsort itself."""
    from traincast.trace.readers.kineto import _by_time

    rng = np.random.default_rng(3)
    ts = rng.integers(0, 50, 2000).astype(np.int64) * 1000 + 1_694_128_201_435_404_000
    dur = rng.integers(0, 4, 2000).astype(np.int64) * 500
    assert np.array_equal(_by_time(ts, dur), np.lexsort((-dur, ts)))
    wide = np.array([-(2**62), 2**62, 0, 0], np.int64)
    d = np.array([0, 2**40, 5, 7], np.int64)
    assert np.array_equal(_by_time(wide, d), np.lexsort((-d, wide)))
    assert _by_time(np.empty(0, np.int64), np.empty(0, np.int64)).size == 0
