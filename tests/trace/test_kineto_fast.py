"""The compiled scanner of the Kineto reader (``read_kineto(compiled=True)``) gives the same
tables and the same errors as the typed Python path: on real traces, on events it hands back
to the Python path (texts with digits in ``pid``, ``\\u`` escapes, non-ASCII, repeated keys,
wrong types), and without numba (``TRAINCAST_NO_NUMBA``)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from traincast.errors import TraceFormatError
from traincast.trace.readers import jsonscan, kineto_fast
from traincast.trace.readers.kineto import KinetoFile, read_kineto

pytest.importorskip("numba")
K = kineto_fast.kernels()
pytestmark = pytest.mark.skipif(K is None, reason="compiled scanner unavailable")

REAL = ["dlrm_8xv100/kineto/rank-3.pt.trace.json.gz", "hta/a100_2rank_nccl/rank-0.json.gz",
        "hta/v100_2rank_allreduce/rank-1.json.gz", "tracelens/b200_8rank_rank0.json.gz",
        "hta/edge/amd_mi250_minitoy.json.gz", "hta/edge/cuda_event_sync_multi_stream.json.gz",
        "linear_1x2080ti/kineto.pt.trace.json.gz"]


def _same(a: KinetoFile, b: KinetoFile) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if hasattr(x, "equals"):
            assert x.schema == y.schema and x.equals(y), f.name
        else:
            assert x == y, f.name


def _both(path: Path) -> tuple[object, object]:
    out = []
    for compiled in (False, True):
        try:
            out.append(read_kineto(path, compiled=compiled))
        except TraceFormatError as exc:
            out.append(str(exc))
    return out[0], out[1]


@pytest.mark.parametrize("name", REAL)
def test_compiled_equals_python_on_real_traces(traces: Path, name: str) -> None:
    slow, fast = _both(traces / name)
    assert isinstance(slow, KinetoFile) and isinstance(fast, KinetoFile)
    _same(slow, fast)


def _trace(tmp_path: Path, events: list[str], name: str = "t.json.gz") -> Path:
    """A trace whose events are given as JSON texts (written as they are)."""
    text = ('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},\n'
            '"traceEvents": [\n' + ",\n".join(events) + '\n], "traceName": "x"}')
    p = tmp_path / name
    p.write_bytes(gzip.compress(text.encode("utf-8", "surrogatepass")))
    return p


_BASE = [
    '{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 7, "tid": 8, '
    '"ts": 100, "dur": 900, "args": {"External id": 1, "Record function id": 3}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 101.5, '
    '"dur": 10.25, "args": {"External id": 2, "Input Dims": [[2, 3], [3, 4]], '
    '"Input type": ["float", "float"], "Ev Idx": 5}}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8, '
    '"ts": 102, "dur": 3, "args": {"correlation": 11, "external id": 2}}',
    '{"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 110.125,'
    ' "dur": 20, "args": {"device": 0, "stream": 7, "correlation": 11, "grid": [1, 2, 3]}}',
    '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 9, '
    '"ts": 140, "dur": 30, "args": {"device": 0, "stream": 9, "correlation": 12}}',
    '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "tid": 8, '
    '"ts": 130, "dur": 5, "args": {"Collective name": "allreduce", "Process Group Name": "0",'
    ' "Process Group Ranks": "[0]", "Group size": 1, "In msg nelems": 4, "Out msg nelems": 4,'
    ' "dtype": "Float", "Seq": 1}}',
    '{"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 9, '
    '"ts": 135, "dur": 0, "args": {"device": 0, "stream": 9, "wait_on_stream": 7, '
    '"wait_on_cuda_event_record_corr_id": 11}}',
    '{"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}}',
    '{"ph": "B", "cat": "user_annotation", "name": "region", "pid": 7, "tid": 8, "ts": 150}',
    '{"ph": "E", "cat": "user_annotation", "name": "region", "pid": 7, "tid": 8, "ts": 160}',
    '{"ph": "f", "id": 1, "pid": 7, "tid": 8, "ts": 102, "cat": "ac2g", "name": "ac2g", '
    '"bp": "e"}',
    '{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", '
    '"tid": "PyTorch Profiler", "ts": 100, "dur": 1000, "args": {"Op count": 0}}',
    '{"ph": "X", "cat": "kernel", "name": "esc\\"aped\\\\name\\t", "pid": 0, "tid": 7, '
    '"ts": 200, "dur": 1, "args": {"device": 0, "stream": "0x0", "correlation": -1}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 1.5e2, '
    '"dur": 0.0, "args": {"Input Dims": [[], [[1], [2]]], "Input type": []}}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": 1, "dur": 1, '
    '"args": {"device": 4294967295, "stream": 4294967295}}',
]

#: events the scanner hands back to the Python path (the file must load the same anyway)
_ODD = {
    "pid text with digits": '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": "12", "tid": 1,'
                            ' "ts": 1, "dur": 1}',
    "unicode escape": '{"ph": "X", "cat": "cpu_op", "name": "caf\\u00e9", "pid": 1, "tid": 1,'
                      ' "ts": 1, "dur": 1}',
    "non-ascii": '{"ph": "X", "cat": "cpu_op", "name": "café ✓", "pid": 1, "tid": 1, '
                 '"ts": 1, "dur": 1}',
    "repeated key": '{"ph": "X", "cat": "cpu_op", "name": "a", "name": "b", "pid": 1, '
                    '"tid": 1, "ts": 1, "dur": 1}',
    "float id": '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, '
                '"dur": 1, "args": {"External id": 1.0}}',
    "null ts": '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": null, '
               '"dur": 1}',
    "many digits": '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
                   '"ts": 1.00000000000000000000001, "dur": 123456789012345678901}',
    "unknown phase": '{"ph": "?", "name": "a"}',
}


def test_compiled_equals_python_on_synthetic_events(tmp_path: Path) -> None:
    slow, fast = _both(_trace(tmp_path, _BASE))
    assert isinstance(slow, KinetoFile) and isinstance(fast, KinetoFile)
    _same(slow, fast)
    assert fast.comm_args.num_rows == 1 and fast.stream_waits.num_rows == 1
    assert fast.shapes.num_rows == 2 and fast.threads == {(7, 8): "main"}


@pytest.mark.parametrize("what", sorted(_ODD))
def test_chunks_the_scanner_refuses_load_the_same(tmp_path: Path, what: str) -> None:
    chunk = kineto_fast.scan(("[" + ",".join([*_BASE, _ODD[what]]) + "]").encode(), K,
                             lambda b: json.loads(b))
    assert chunk is None  # handed back to the Python path
    slow, fast = _both(_trace(tmp_path, [*_BASE, _ODD[what]]))
    if isinstance(slow, str):
        assert slow == fast
    else:
        assert isinstance(fast, KinetoFile)
        _same(slow, fast)


@pytest.mark.parametrize("cut", [0.3, 0.5, 0.97, 1.0])
def test_truncated_and_corrupt_files_give_the_same_errors(tmp_path: Path, cut: float) -> None:
    text = gzip.decompress(_trace(tmp_path, _BASE * 50).read_bytes())
    bad = tmp_path / "bad.json"
    bad.write_bytes(text[: int(len(text) * cut)] + (b"" if cut < 1 else b"}garbage"))
    slow, fast = _both(bad)
    assert slow == fast if isinstance(slow, str) else isinstance(fast, KinetoFile)
    if isinstance(slow, KinetoFile):
        _same(slow, fast)  # type: ignore[arg-type]


def test_many_chunks_equal_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several compiled chunks in one file (interning across chunks, shapes in order)."""
    monkeypatch.setattr("traincast.trace.readers.kineto._FAST_BLOCK", 1 << 12)
    events = [e.replace('"aten::mm"', f'"op{i % 37}"') for i in range(300) for e in _BASE[:4]]
    slow, fast = _both(_trace(tmp_path, events))
    assert isinstance(fast, KinetoFile)
    _same(slow, fast)  # type: ignore[arg-type]


def test_numbers_convert_like_msgspec() -> None:
    import msgspec

    texts = ["0", "-0", "1", "-1", "1234567890123456", "1.5", "-0.0", "0.1", "1e3", "1E-3",
             "1694128201435.125", "1694128201435.404", "9007199254740991", "2.5e+2",
             "123.456e-5", "0.000001", "4.35", "1725052896377.339"]
    for t in texts:
        b = np.frombuffer(t.encode() + b",", np.uint8)
        end, v = K._float(b, 0, b.size)
        assert end == len(t) and v == msgspec.json.decode(t.encode(), type=float), t
        assert np.signbit(v) == np.signbit(float(t)), t
    for t in ["123456789012345678", "1.00000000000000000001", "1e23", "1e-23"]:  # not exact
        b = np.frombuffer(t.encode() + b",", np.uint8)
        assert K._float(b, 0, b.size)[0] == -1, t


def test_event_ends_equals_numpy_cut() -> None:
    texts = [b'{"a": 1}, {"b": [1, {"c": "}"}]}, {"d": "\\\\"}, {"e": "\\""}], "x": {}',
             b' {"a": "\\\\\\""}, {"b": 2} ', b'{"a": [}}]]]', b'']
    for t in texts:
        e1, c1 = jsonscan._event_ends(t)
        e2, c2 = K.event_ends(np.frombuffer(t, np.uint8))
        assert c1 == c2 and e1.tolist() == e2.tolist(), t


def test_no_numba_falls_back_to_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCAST_NO_NUMBA", "1")
    assert kineto_fast.kernels() is None
    calls = []
    monkeypatch.setattr(kineto_fast, "scan_tail", lambda *a, **k: calls.append(1))
    path = _trace(tmp_path, _BASE)
    fast = read_kineto(path, compiled=True)
    assert not calls
    monkeypatch.delenv("TRAINCAST_NO_NUMBA")
    _same(read_kineto(path, compiled=False), fast)


def test_kernels_load_without_scipy_blas_probe() -> None:
    """Importing the scanner's kernels (and running one) in a fresh process does not import
    scipy.linalg (numba's BLAS probe is skipped), sets numba's BLAS flag as the probe would,
    and leaves numba's own ``ensure_blas`` in place."""
    code = (
        "import sys, numba.np.linalg as L\n"
        "real = L.ensure_blas\n"
        "import traincast.trace.readers.jsonfast_kernels as K\n"
        "import numba.np.arraymath as AM\n"
        "assert L.ensure_blas is real\n"
        "assert AM._HAVE_BLAS is True\n"
        "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def _event(name: str, args: str = '{"External id": 1}', key: str = "name") -> str:
    return (f'{{"ph": "X", "cat": "cpu_op", "{key}": "{name}", "pid": 7, "tid": 8, '
            f'"ts": 100, "dur": 9, "args": {args}}}')


def test_names_of_every_length_and_escape_position_intern_like_python(tmp_path: Path) -> None:
    """Names are read 8 bytes at a time while they can: texts of every length, with an
    escape or a quote at every offset of a word, and long texts that differ in one byte
    only, get the codes of the Python path (equal texts equal codes, wherever they lie)."""
    names = ["x" * k for k in range(0, 26)]
    names += ["p" * k + '\\"' + "s" * (17 - k) for k in range(0, 17)]
    names += ["autograd::engine::evaluate_function: " + "ab"[k % 2] * 3 + f"{k:02d}Backward0"
              for k in range(40)]
    names += ["same prefix and same suffix " + c + " same prefix and same suffix"
              for c in "abcdefgh"]
    events = [_event(n) for n in names]
    events = [e for pair in zip(events, reversed(events), strict=True) for e in pair]
    slow, fast = _both(_trace(tmp_path, events))
    assert isinstance(fast, KinetoFile)
    _same(slow, fast)  # type: ignore[arg-type]
    chunk = ("[" + ",".join(events) + "]").encode()
    assert kineto_fast.scan(chunk, K, json.loads) is not None


@pytest.mark.parametrize("bad", ["\u00e9", "\x7f", "\\u0041", "\\x"])
def test_refused_bytes_at_every_offset_of_a_word(bad: str) -> None:
    """A byte the scanner does not accept (non-ASCII, DEL is accepted, \\u and invalid escapes
    are not) is seen wherever it lies in a name read 8 bytes at a time."""
    for k in range(0, 20):
        chunk = ("[" + _event("n" * k + bad + "m" * 9) + "]").encode()
        got = kineto_fast.scan(chunk, K, json.loads)
        assert (got is not None) == (bad == "\x7f"), (bad, k)


def test_truncated_chunks_are_refused() -> None:
    """A chunk cut anywhere (inside a long name, a key, a number) is refused, not misread."""
    chunk = ("[" + _event("a" * 30 + "::" + "b" * 20) + "]").encode()
    assert kineto_fast.scan(chunk, K, json.loads) is not None
    for cut in range(1, len(chunk)):
        assert kineto_fast.scan(chunk[:cut], K, json.loads) is None, cut


@pytest.mark.parametrize("key", ["pi", "phx", "p", "nam", "names", "Name", "argss", "ts ",
                                 "Input Dimss", "Input", "Input Dim", "devic", "streams",
                                 "correlation\\t", "External Id", "t\\/s"])
def test_keys_near_the_known_ones_load_like_python(tmp_path: Path, key: str) -> None:
    """Keys are matched in place against the known ones with the same first byte: keys that
    differ from one by a byte, a prefix or a suffix are unknown keys (or refused ones when
    escaped), as on the Python path."""
    events = [_event("a", args=f'{{"External id": 1, "{key}": [1, {{"x": "y"}}]}}'),
              _event("b", key=key), *_BASE]
    slow, fast = _both(_trace(tmp_path, events))
    assert type(slow) is type(fast)
    if isinstance(slow, str):
        assert slow == fast
    else:
        _same(slow, fast)  # type: ignore[arg-type]
    got = kineto_fast.scan(("[" + ",".join(events[:2]) + "]").encode(), K, json.loads)
    assert (got is None) == ("\\" in key)


def test_spaces_around_colons_are_read() -> None:
    """Whitespace before and after a key's colon is allowed (the in-place key match reads
    the colon after the closing quote, or skips whitespace to it)."""
    spaced = _event("a").replace('": ', '" :\t\n ')
    tight = _event("a").replace('": ', '":')
    for text in (spaced, tight):
        got = kineto_fast.scan(("[" + text + "]").encode(), K, json.loads)
        assert got is not None and got.n == 1
        assert got.ints[0, :3].tolist() == [7, 8, 1]
        assert got.flts[0].tolist() == [100.0, 9.0]
