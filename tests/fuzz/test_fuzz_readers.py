"""Robustness and security of the readers.

* Fuzzing: mutated and truncated real inputs (``fuzz_engine``: byte-, gzip-, JSON-, SQL- and
  line-level mutations of the traces in ``../shared/data``) only ever make the readers and
  ``traincast.load`` raise a :class:`~traincast.errors.TraincastError`, never another
  exception, and never hang (each case runs under a wall-clock alarm). Hypothesis draws the
  cases, derandomized and without an example database, so CI is deterministic; the budget keeps
  the file well under a minute. ``benchmarks/fuzz_readers.py`` runs the same fuzzers for
  thousands of cases.
* Regressions: one hand-made input per crash the fuzzers found, each with its root cause.
* Gzip bombs: refused by size (``max_inflate_bytes`` / ``TRAINCAST_MAX_INFLATE_BYTES``) or by
  inflate ratio before memory grows.
* Audit: no ``pickle``/``marshal``/``eval``/``exec``/unsafe ``yaml`` in ``traincast/``, and
  SQLite opened read-only.
"""

from __future__ import annotations

import ast
import gzip
import json
import sys
import time
import tracemalloc
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_engine as F  # noqa: E402

import traincast  # noqa: E402
from traincast.costs.nccl_tests import read_nccl_tests_log, read_vtrain_lut  # noqa: E402
from traincast.errors import (  # noqa: E402
    InputTooLargeError,
    ParameterError,
    TraceFormatError,
    TraincastError,
)
from traincast.trace.readers import jsonscan  # noqa: E402
from traincast.trace.readers.et import read_execution_trace  # noqa: E402
from traincast.trace.readers.kineto import read_kineto  # noqa: E402
from traincast.trace.readers.nsys import read_nsys  # noqa: E402

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    given = None

# ----------------------------------------------------------------------------- fuzzing

#: examples per reader: about 12 s for the six on a loaded 2-core machine
EXAMPLES = {"kineto": 400, "et": 100, "nsys": 200, "nccl_tests": 200, "vtrain_lut": 150,
            "vtrain": 150}
#: wall-clock bound of one case (cases take milliseconds; a hang fails instead of blocking)
CASE_TIMEOUT = 10.0


@pytest.mark.parametrize("reader", F.READERS)
def test_fuzzed_inputs_raise_only_traincast_errors(reader: str, tmp_path: Path) -> None:
    if given is None:
        pytest.skip("hypothesis is not installed (pip install .[test])")
    seeds = F.seeds(reader)
    if not seeds:
        pytest.skip(f"no seed files for {reader} (../shared/data missing?)")
    op = st.tuples(st.integers(0, 255), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
    cases = st.builds(F.Case, st.integers(0, len(seeds) - 1),
                      st.integers(0, len(F.LAYERS[reader]) - 1),
                      st.lists(op, min_size=1, max_size=3).map(tuple))

    @settings(max_examples=EXAMPLES[reader], deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case=cases)
    def run(case: F.Case) -> None:
        out = F.run_case(reader, case, tmp_path, timeout=CASE_TIMEOUT)
        assert out.status in ("ok", "own"), out.report()

    run()


# ----------------------------------------------------------------------------- regressions
# Each crash the fuzzers found, rebuilt by hand: (file name, bytes, call, expected) where
# expected is the TraincastError subclass now raised, or None when the input now loads.


def _kineto_doc(traces: Path, rel: str = "hta/a100_2rank_nccl/rank-0.json.gz") -> dict:
    return json.loads(F._trim_kineto(traces / rel))


def _et_doc(traces: Path) -> dict:
    return json.loads(gzip.decompress((traces / "hta/et_simple_add/et.json.gz").read_bytes()))


def _comm_event(doc: dict) -> dict:
    return next(e for e in doc["traceEvents"]
                if isinstance(e.get("args"), dict) and "Process Group Ranks" in e["args"])


def _deep(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


def _dumps_with(doc: dict, marker: str, raw: str) -> bytes:
    return json.dumps(doc).replace(json.dumps(marker), raw).encode()


Regression = tuple[str, bytes, Callable[[Path], Any], type[TraincastError] | None]


def pg_config_ranks_not_ints(t: Path) -> Regression:
    # load -> collectives: int() of each pg_config rank (TypeError / ValueError)
    doc = _kineto_doc(t)
    doc["distributedInfo"]["pg_config"][0]["ranks"] = [[0], "0x10"]
    return "rank-0.json", json.dumps(doc).encode(), traincast.load, TraceFormatError


def world_size_absurd(t: Path) -> Regression:
    # load built list(range(world_size)): 2**31-1 ranks exhausted memory
    doc = _kineto_doc(t)
    doc["distributedInfo"]["world_size"] = 2**31 - 1
    return "rank-0.json", json.dumps(doc).encode(), traincast.load, TraceFormatError


def header_nested_too_deep(t: Path) -> Regression:
    # msgspec raised RecursionError (not a DecodeError) decoding the header's free-form parts
    doc = _kineto_doc(t)
    doc["distributedInfo"]["extra"] = "DEEP"
    return "rank-0.json", _dumps_with(doc, "DEEP", _deep()), read_kineto, TraceFormatError


def event_nested_too_deep(t: Path) -> Regression:
    doc = _kineto_doc(t)
    _comm_event(doc)["args"]["Process Group Ranks"] = "DEEP"
    return "rank-0.json", _dumps_with(doc, "DEEP", _deep()), read_kineto, TraceFormatError


def event_id_beyond_int64(t: Path) -> Regression:
    # msgspec's int accepts uint64: array('q').extend raised OverflowError
    doc = _kineto_doc(t)
    next(e for e in doc["traceEvents"] if e.get("ph") == "X")["args"]["External id"] = 2**64 - 1
    return "rank-0.json", json.dumps(doc).encode(), read_kineto, TraceFormatError


def header_not_utf8(t: Path) -> Regression:
    # msgspec raised UnicodeDecodeError decoding the text after traceEvents
    doc = _kineto_doc(t)
    doc["host_name"] = "HOST"
    return ("rank-0.json", json.dumps(doc).encode().replace(b"HOST", b"\xff\xfe"), read_kineto,
            TraceFormatError)


def comm_input_dims_not_a_list(t: Path) -> Regression:
    # load -> collectives: iterating a TensorList item 5 (TypeError); such shapes are dropped
    doc = _kineto_doc(t, "hta/edge/cpu_only_rank34.json.gz")
    for ev in doc["traceEvents"]:
        if "Input Dims" in ev.get("args", {}):
            ev["args"]["Input Dims"] = [[[4], 5]]
    return "rank-34.json", json.dumps(doc).encode(), traincast.load, None


def comm_group_ranks_not_ints(t: Path) -> Regression:
    # Process Group Ranks items went through int() (ValueError on "[0, 1]")
    doc = _kineto_doc(t)
    _comm_event(doc)["args"]["Process Group Ranks"] = ["[0, 1]"]
    return "rank-0.json", json.dumps(doc).encode(), traincast.load, None


def et_id_beyond_int64(t: Path) -> Regression:
    # pa.array(ids, int64) raised OverflowError
    doc = _et_doc(t)
    doc["nodes"][1]["id"] = 2**64 - 1
    return "et.json", json.dumps(doc).encode(), read_execution_trace, TraceFormatError


def et_scope_beyond_int32(t: Path) -> Regression:
    doc = _et_doc(t)
    doc["nodes"][1]["scope"] = 2**40
    return "et.json", json.dumps(doc).encode(), read_execution_trace, TraceFormatError


def et_not_utf8(t: Path) -> Regression:
    # input_types is kept as raw JSON text: decoding it raised UnicodeDecodeError
    doc = _et_doc(t)
    next(n for n in doc["nodes"] if n.get("input_types"))["input_types"] = ["BAD"]
    return ("et.json", json.dumps(doc).encode().replace(b"BAD", b"\xc3("),
            read_execution_trace, TraceFormatError)


def et_nested_too_deep(t: Path) -> Regression:
    doc = _et_doc(t)
    doc["nodes"][1]["inputs"] = "DEEP"
    return "et.json", _dumps_with(doc, "DEEP", _deep()), read_execution_trace, TraceFormatError


def nsys_schema_not_utf8(t: Path) -> Regression:
    # sqlite3 quotes the corrupt schema in its error message and fails to decode it
    data = F.seeds("nsys")[0].data
    i = data.find(b"CREATE TABLE StringIds") + 5
    return "saxpy.sqlite", data[:i] + b"\xfe" + data[i + 1 :], read_nsys, TraceFormatError


def _nccl_log(name: str = "all_reduce_perf_2node_gb10.log") -> str:
    return (F.COSTS_DATA / name).read_text()


def _nccl_row(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.strip()[:1].isdigit())


def nccl_root_nan(t: Path) -> Regression:
    # int(float("nan")) raised ValueError (inf: OverflowError)
    text = _nccl_log()
    row = _nccl_row(text)
    toks = row.split()
    toks[4] = "nan"
    return ("all_reduce_perf.log", text.replace(row, " ".join(toks)).encode(),
            read_nccl_tests_log, TraceFormatError)


def nccl_size_beyond_int64(t: Path) -> Regression:
    # astype(int64) of a 23-digit size raised OverflowError
    text = _nccl_log()
    row = _nccl_row(text)
    toks = row.split()
    toks[0] = "99999999999999999999999"
    return ("all_reduce_perf.log", text.replace(row, " ".join(toks)).encode(),
            read_nccl_tests_log, TraceFormatError)


def nccl_avg_busbw_not_a_number(t: Path) -> Regression:
    # float() of what the regex let through ("0.65-1") raised ValueError
    text = _nccl_log()
    line = next(ln for ln in text.splitlines() if "Avg bus bandwidth" in ln)
    return ("all_reduce_perf.log", text.replace(line, "# Avg bus bandwidth : 0.65-1").encode(),
            read_nccl_tests_log, TraceFormatError)


def vtrain_lut_gpus_not_a_number(t: Path) -> Regression:
    # astype(int64) of "0x10" raised ValueError
    lines = (F.SHARED / "measurements/vtrain/vtrain_allreduce_lut.csv").read_text().splitlines()
    header = lines[1].split(",")
    row = lines[2].split(",")
    row[header.index("num_gpus")] = "0x10"
    text = "\n".join([lines[0], lines[1], ",".join(row), *lines[3:20]])
    return "lut.csv", text.encode(), read_vtrain_lut, TraceFormatError


REGRESSIONS = [pg_config_ranks_not_ints, world_size_absurd, header_nested_too_deep,
               event_nested_too_deep, event_id_beyond_int64, header_not_utf8,
               comm_input_dims_not_a_list, comm_group_ranks_not_ints, et_id_beyond_int64,
               et_scope_beyond_int32, et_not_utf8, et_nested_too_deep, nsys_schema_not_utf8,
               nccl_root_nan, nccl_size_beyond_int64, nccl_avg_busbw_not_a_number,
               vtrain_lut_gpus_not_a_number]


@pytest.mark.parametrize("build", REGRESSIONS, ids=lambda f: f.__name__)
def test_fuzz_found_crash_is_fixed(build: Callable[[Path], Regression], tmp_path: Path,
                                   shared_data: Path) -> None:
    name, data, call, expected = build(shared_data / "traces")
    path = tmp_path / name
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if expected is None:
            call(path)
            return
        with pytest.raises(expected) as info:
            call(path)
    msg = str(info.value)
    assert name in msg and "\n" not in msg, msg


# ----------------------------------------------------------------------------- gzip bombs


def _bomb(path: Path, prefix: bytes, fill: bytes, mib: int, suffix: bytes = b"]}") -> Path:
    """A gzip file of ``prefix`` + ``mib`` MiB of ``fill`` (streamed: never held whole)."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    chunk = fill * ((1 << 20) // len(fill))
    with path.open("wb") as fh:
        fh.write(c.compress(prefix))
        for _ in range(mib):
            fh.write(c.compress(chunk))
        fh.write(c.compress(suffix) + c.flush())
    return path


@pytest.fixture(scope="module")
def zero_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Kineto-looking trace whose 200 MiB of spaces gzip to about 200 KB."""
    return _bomb(tmp_path_factory.mktemp("bomb") / "rank-0.json.gz", b'{"traceEvents": [', b" ",
                 200)


def _peak(fn: Callable[[], Any]) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - returned to the test
        return exc, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return None, 0


@pytest.mark.parametrize("reader", ["load", "kineto", "et"])
def test_gzip_bomb_is_refused_at_the_size_limit(zero_bomb: Path, reader: str) -> None:
    assert zero_bomb.stat().st_size < 1 << 20
    limit = 2 << 20
    call = {"load": lambda: traincast.load(zero_bomb, max_inflate_bytes=limit),
            "kineto": lambda: read_kineto(zero_bomb, max_inflate_bytes=limit),
            "et": lambda: read_execution_trace(zero_bomb, max_inflate_bytes=limit)}[reader]
    exc, peak = _peak(call)
    assert isinstance(exc, InputTooLargeError), exc
    assert isinstance(exc, TraceFormatError)  # callers catching TraceFormatError see it too
    assert zero_bomb.name in str(exc) and "2,097,152" in str(exc)
    assert peak < limit + (6 << 20), peak  # the limit plus a piece, not the 200 MiB


def test_inflate_limit_from_the_environment(zero_bomb: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv("TRAINCAST_MAX_INFLATE_BYTES", "1M")
    with pytest.raises(InputTooLargeError, match="1,048,576 bytes"):
        traincast.load(zero_bomb)
    with pytest.raises(InputTooLargeError, match="1,048,576 bytes"):
        read_execution_trace(zero_bomb)
    monkeypatch.setenv("TRAINCAST_MAX_INFLATE_BYTES", "lots")
    with pytest.raises(ParameterError, match="TRAINCAST_MAX_INFLATE_BYTES"):
        traincast.load(zero_bomb)
    with pytest.raises(ParameterError, match="max_inflate_bytes"):
        traincast.load(zero_bomb, max_inflate_bytes=0)


def test_gzip_bomb_is_refused_by_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # whole tiny events, so only the ratio check can stop it (floor lowered from 64 MiB)
    monkeypatch.setattr(jsonscan, "_RATIO_FLOOR", 4 << 20)
    bomb = _bomb(tmp_path / "rank-0.json.gz", b'{"traceEvents": [', b'{"ph": "i"},', 100,
                 b'{"ph": "i"}]}')
    exc, peak = _peak(lambda: traincast.load(bomb))
    assert isinstance(exc, InputTooLargeError) and "250x" in str(exc), exc
    assert peak < 32 << 20, peak
    exc, _ = _peak(lambda: read_execution_trace(bomb))
    assert isinstance(exc, InputTooLargeError) and "250x" in str(exc), exc
    # the ratio check can be turned off; the size limit still holds
    monkeypatch.setenv("TRAINCAST_MAX_INFLATE_RATIO", "0")
    with pytest.raises(InputTooLargeError, match="8,388,608 bytes"):
        read_kineto(bomb, max_inflate_bytes=8 << 20)


def test_default_limits_refuse_bombs_fast(zero_bomb: Path, tmp_path: Path) -> None:
    """Defaults alone: spaces stop at 16 MiB without an event; a string of ``},`` (a cut that
    never decodes) too, in linear time; the ET reader by ratio beyond 64 MiB."""
    t0 = time.perf_counter()
    with pytest.raises(TraceFormatError, match="without a complete trace event"):
        read_kineto(zero_bomb)
    cuts = _bomb(tmp_path / "cuts.json.gz", b'{"traceEvents": [{"name": "', b"},", 40)
    with pytest.raises(TraceFormatError, match="without a complete trace event"):
        read_kineto(cuts)
    with pytest.raises(InputTooLargeError, match="250x"):
        read_execution_trace(zero_bomb)
    assert time.perf_counter() - t0 < 20


def test_real_traces_are_far_below_the_limits(shared_data: Path) -> None:
    """The defaults leave real traces alone: they inflate 7-22x, the ratio limit is 250x."""
    p = shared_data / "traces/dlrm_8xv100/kineto/rank-0.pt.trace.json.gz"
    n = len(gzip.decompress(p.read_bytes()))
    assert n / p.stat().st_size < jsonscan.DEFAULT_MAX_INFLATE_RATIO / 10
    assert read_kineto(p, max_inflate_bytes=n).n_bytes == n
    with pytest.raises(InputTooLargeError):
        read_kineto(p, max_inflate_bytes=n - 1)


# ----------------------------------------------------------------------------- audit

PACKAGE = Path(traincast.__file__).resolve().parent
_BANNED_MODULES = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
_BANNED_BUILTINS = {"eval", "exec", "compile", "__import__"}
#: (file, what) -> why it is safe. pickle in the executor only round-trips TraincastError
#: objects between this package's own worker processes (what ProcessPoolExecutor does anyway);
#: no file or user input ever reaches it.
ALLOWED = {("util/executor.py", "import pickle"): "worker IPC of TraincastError objects",
           ("util/executor.py", "pickle.loads"): "worker IPC of TraincastError objects",
           ("util/executor.py", "pickle.dumps"): "worker IPC of TraincastError objects"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _findings(tree: ast.AST) -> list[tuple[int, str]]:
    """Unsafe deserialisation and dynamic code in one module (real calls, not text)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, f"import {a.name}") for a in node.names
                    if a.name.split(".")[0] in _BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in _BANNED_MODULES:
                out.append((node.lineno, f"from {node.module} import"))
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            root, _, attr = name.rpartition(".")
            if name in _BANNED_BUILTINS:
                out.append((node.lineno, name))
            elif root.split(".")[0] in _BANNED_MODULES:
                out.append((node.lineno, name))
            elif name in ("yaml.load", "yaml.load_all", "yaml.unsafe_load", "yaml.full_load",
                          "yaml.unsafe_load_all", "yaml.full_load_all"):
                out.append((node.lineno, name))
            elif attr in ("read_pickle", "to_pickle") or name == "torch.load":
                out.append((node.lineno, name))
            elif any(k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant)
                                                      and k.value.value is False)
                     for k in node.keywords):
                out.append((node.lineno, f"{name}(allow_pickle=...)"))
            elif name.endswith("sqlite3.connect"):
                consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                uri = any(k.arg == "uri" and isinstance(k.value, ast.Constant)
                          and k.value.value is True for k in node.keywords)
                if not (uri and any(isinstance(c, str) and "mode=ro" in c for c in consts)):
                    out.append((node.lineno, f"{name} without mode=ro"))
    return out


def test_audit_finds_what_it_looks_for() -> None:
    src = ("import pickle\nimport yaml, sqlite3\nx = eval('1')\nexec('y = 1')\n"
           "pickle.loads(b'')\nyaml.load('a')\nyaml.safe_load('a')\n"
           "sqlite3.connect('f.db')\nsqlite3.connect('file:f?mode=ro', uri=True)\n"
           "import numpy as np\nnp.load('f', allow_pickle=True)\n"
           "'''eval(x) in a docstring'''\n# exec(x) in a comment\n")
    found = [what for _, what in _findings(ast.parse(src))]
    assert found == ["import pickle", "eval", "exec", "pickle.loads", "yaml.load",
                     "sqlite3.connect without mode=ro", "np.load(allow_pickle=...)"], found


def test_no_unsafe_deserialisation_or_dynamic_code() -> None:
    found, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, what in _findings(ast.parse(path.read_text(), str(path))):
            if (rel, what) in ALLOWED:
                used.add((rel, what))
            else:
                found.append(f"traincast/{rel}:{line}: {what}")
    assert not found, "unsafe calls:\n" + "\n".join(found)
    assert used == set(ALLOWED), f"stale allow-list entries: {set(ALLOWED) - used}"


def test_sqlite_is_opened_read_only(shared_data: Path, tmp_path: Path) -> None:
    """The nsys reader leaves the file it reads byte for byte as it was (mode=ro, query_only:
    no journal, no WAL checkpoint, no schema upgrade)."""
    p = tmp_path / "saxpy.sqlite"
    p.write_bytes((shared_data / "traces/nsys/saxpy_mpi_1xa100.sqlite").read_bytes())
    before = p.read_bytes()
    read_nsys(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no ProfilerStep markers
        traincast.load(p)
    assert p.read_bytes() == before
    assert sorted(f.name for f in tmp_path.iterdir()) == ["saxpy.sqlite"]
