"""Mutation fuzzing of traincast's readers on the real traces of ``../shared/data``.

Shared by ``tests/fuzz/test_fuzz_readers.py`` (hypothesis draws the cases) and
``benchmarks/fuzz_readers.py`` (a seeded ``random.Random`` draws them): both build a
:class:`Case` and hand it to :func:`run_case`, which writes the mutated file, calls the readers
under a wall-clock alarm and classifies the outcome:

* ``ok``: the readers returned;
* ``own``: they raised a :class:`traincast.errors.TraincastError` (the only acceptable error);
* ``fail``: any other exception (a crash to fix);
* ``timeout``: the alarm fired (a hang to fix).

Seeds are small real files or the first events of big ones re-serialised (so every case runs
in milliseconds): Kineto traces, PyTorch execution traces (linked to their Kineto partner via
``traincast.load(..., et_dir=...)`` too), Nsight Systems SQLite exports (reduced copies), the
nccl-tests logs of ``tests/costs/data`` and the vTrain CSVs.

A case is ``(seed, layer, ops)``; every op is three integers ``(code, a, b)`` interpreted by the
layer, so any source of integers (hypothesis, ``random``) drives the same mutations:

* ``stored``: bytes of the file as stored (gzip stream, SQLite pages, text): truncation, byte
  flips, deleting/duplicating/overwriting chunks, inserting tokens, gzip-level corruption
  (header flags, CRC/size trailer, trailing garbage, concatenated members);
* ``text``: the same on the inflated JSON text, re-gzipped or written plain;
* ``json``: JSON-aware: a random value replaced by a wrong type, huge ints, NaN/Infinity,
  deeply nested arrays, long or invalid strings; keys removed or added; list items dropped or
  duplicated (re-gzipped or written plain);
* ``sql``: SQL-aware on an in-memory copy: cells/columns set to NULL, text, blobs, huge or
  non-finite numbers; tables dropped, emptied or replaced by views; columns dropped/renamed;
* ``lines``: line/token-aware for the text logs and CSVs.
"""

from __future__ import annotations

import gzip
import json
import random
import signal
import sqlite3
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
TRACES = SHARED / "traces"
COSTS_DATA = REPO / "tests" / "costs" / "data"

READERS = ("kineto", "et", "nsys", "nccl_tests", "vtrain_lut", "vtrain")

#: mutation layers per reader
LAYERS: dict[str, tuple[str, ...]] = {
    "kineto": ("stored", "text", "json", "json"),
    "et": ("stored", "text", "json", "json"),
    "nsys": ("stored", "sql", "sql"),
    "nccl_tests": ("stored", "lines", "lines"),
    "vtrain_lut": ("stored", "lines", "lines"),
    "vtrain": ("stored", "lines", "lines"),
}

Op = tuple[int, int, int]


@dataclass(frozen=True)
class Seed:
    """One real input: the file name to write (suffix and ``rank-N`` matter to ``load``)."""

    name: str
    data: bytes
    gz: bool = False
    pair: Path | None = None  # et: the real Kineto trace the ET belongs to


@dataclass(frozen=True)
class Case:
    seed: int
    layer: int
    ops: tuple[Op, ...]


@dataclass
class Outcome:
    status: str  # ok | own | fail | timeout
    reader: str
    seed: str
    layer: str
    ops: tuple[Op, ...]
    data: bytes
    name: str
    error: str = ""
    tb: str = ""

    def report(self) -> str:
        return (f"{self.reader} fuzz case {self.status}: seed {self.seed} layer {self.layer} "
                f"ops {list(self.ops)} ({len(self.data)} bytes)\n{self.error}\n{self.tb}")


# ----------------------------------------------------------------------------- seeds


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, 1, mtime=0)


def _trim_kineto(path: Path, per_cat: int = 40) -> bytes:
    """The document of ``path`` with a diverse sample of its events: metadata, step markers,
    events carrying collective arguments and the first ``per_cat`` events of each category."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    seen: dict[str, int] = {}
    keep = []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict):
            continue
        cat = str(e.get("cat", e.get("ph", "")))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        special = (e.get("ph") == "M" or str(e.get("name", "")).startswith("ProfilerStep")
                   or "Collective name" in args)
        n = seen.get(cat, 0)
        if n < per_cat or (special and n < 4 * per_cat):
            keep.append(e)
            seen[cat] = n + 1
    doc["traceEvents"] = keep
    return json.dumps(doc).encode()


def _trim_et(path: Path, n_nodes: int) -> bytes:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["nodes"] = doc["nodes"][:n_nodes]
    return json.dumps(doc).encode()


_NSYS_KEEP = ("StringIds", "ThreadNames", "TARGET_INFO_GPU", "TARGET_INFO_SYSTEM_ENV",
              "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
              "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
              "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE",
              "ENUM_NSYS_EVENT_CLASS", "ENUM_NSYS_EVENT_TYPE")


def _trim_nsys(path: Path, rows: int = 120) -> bytes:
    """A reduced copy of an export: only the tables the reader knows, the activity tables cut
    to their first ``rows`` rows (StringIds kept whole), vacuumed."""
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con = sqlite3.connect(":memory:")
    src.backup(con)
    src.close()
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for t in tables:
        if t not in _NSYS_KEEP:
            con.execute(f'DROP TABLE "{t}"')
        elif t.startswith(("CUPTI_", "NVTX_")):
            con.execute(f'DELETE FROM "{t}" WHERE rowid NOT IN '
                        f'(SELECT rowid FROM "{t}" ORDER BY rowid LIMIT {rows})')
    con.commit()
    con.execute("VACUUM")
    data = con.serialize()
    con.close()
    return data


def _head_lines(path: Path, n: int) -> bytes:
    return b"".join(path.read_bytes().splitlines(keepends=True)[:n])


@cache
def seeds(reader: str) -> tuple[Seed, ...]:
    """The seeds of ``reader`` (empty when the shared data is absent)."""
    t = TRACES
    out: list[Seed] = []
    if reader == "kineto" and t.is_dir():
        for rel in ("hta/edge/triton_example.json.gz", "hta/edge/cpu_only_rank34.json.gz",
                    "hta/et_simple_add/kineto.json.gz", "hta/edge/amd_mi250_minitoy.json.gz",
                    "hta/edge/cuda_event_sync_multi_stream.json.gz"):
            out.append(Seed(Path(rel).name, (t / rel).read_bytes(), gz=True))
        for rel, name in (("dlrm_8xv100/kineto/rank-0.pt.trace.json.gz", "rank-0.json.gz"),
                          ("hta/a100_2rank_nccl/rank-0.json.gz", "nccl-rank-0.json.gz"),
                          ("hta/sampled_128rank_sendrecv/rank-1.json.gz", "rank-1.json.gz"),
                          ("tracelens/b200_8rank_rank0.json.gz", "b200-rank0.json"),
                          ("hta/v100_2rank_allreduce/rank-1.json.gz", "v100-rank-1.json.gz")):
            text = _trim_kineto(t / rel)
            gz = name.endswith(".gz")
            out.append(Seed(name, _gz(text) if gz else text, gz=gz))
    elif reader == "et" and t.is_dir():
        out.append(Seed("et.json.gz", (t / "hta/et_simple_add/et.json.gz").read_bytes(), gz=True,
                        pair=t / "hta/et_simple_add/kineto.json.gz"))
        out.append(Seed("rank-0.et.json.gz",
                        (t / "dlrm_8xv100/et/rank-0.et.json.gz").read_bytes(), gz=True,
                        pair=t / "dlrm_8xv100/kineto/rank-0.pt.trace.json.gz"))
        out.append(Seed("linear.et.json", _trim_et(t / "linear_1x2080ti/et.json.gz", 150)))
    elif reader == "nsys" and t.is_dir():
        out.append(Seed("saxpy.sqlite", _trim_nsys(t / "nsys/saxpy_mpi_1xa100.sqlite")))
        out.append(Seed("cloverleaf.sqlite", _trim_nsys(t / "nsys/cloverleaf_4xa100.sqlite")))
    elif reader == "nccl_tests" and COSTS_DATA.is_dir():
        for p in sorted(COSTS_DATA.glob("*.log")):
            out.append(Seed(p.name, p.read_bytes()))
    elif reader == "vtrain_lut" and (SHARED / "measurements/vtrain").is_dir():
        out.append(Seed("vtrain_allreduce_lut.csv",
                        _head_lines(SHARED / "measurements/vtrain/vtrain_allreduce_lut.csv", 120)))
    elif reader == "vtrain" and (SHARED / "measurements/vtrain").is_dir():
        v = SHARED / "measurements/vtrain"
        out.append(Seed("multi.csv", (v / "vtrain_ground_truth_multi_a100.csv").read_bytes()))
        out.append(Seed("single.csv", _head_lines(v / "vtrain_ground_truth_single_a100.csv", 60)))
    return tuple(out)


# ----------------------------------------------------------------------------- byte layer

_TOKENS = (b'"', b"{", b"[", b"]", b"}", b",", b":", b"\\", b"\x00", b"\xff\xfe", b"NaN",
           b"Infinity", b"1e999", b"-", b"99999999999999999999999", b"\xc3", b'"traceEvents":',
           b"},", b'"\\ud800"', b"\n", b"null", b"#", b";", b"\r\n")


def _span(n: int, a: int, b: int) -> tuple[int, int]:
    """A chunk [p, q) of a buffer of ``n`` bytes: length 2**k, k uniform, so both single
    bytes and large runs occur."""
    if n == 0:
        return 0, 0
    p = a % n
    length = 1 << (b % max(1, n.bit_length()))
    return p, min(n, p + length)


def mutate_bytes(data: bytes, op: Op) -> bytes:
    code, a, b = op
    buf = bytearray(data)
    n = len(buf)
    code %= 9
    if code == 0:  # truncation at a random offset
        return bytes(buf[: a % (n + 1)])
    if n == 0:
        return bytes(_TOKENS[a % len(_TOKENS)])
    if code == 1:  # a few byte flips
        x = a
        for _ in range(1 + b % 8):
            buf[x % n] ^= (b % 255) + 1
            x = x * 6364136223846793005 + 1442695040888963407 & (2**64 - 1)
        return bytes(buf)
    p, q = _span(n, a, b)
    if code == 2:  # delete a chunk
        del buf[p:q]
    elif code == 3:  # duplicate a chunk
        buf[q:q] = buf[p:q]
    elif code == 4:  # insert a token
        buf[p:p] = _TOKENS[b % len(_TOKENS)]
    elif code == 5:  # overwrite a chunk with bytes from elsewhere
        src = (a ^ b) % n
        chunk = buf[src : src + (q - p)]
        buf[p : p + len(chunk)] = chunk
    elif code == 6:  # zero a chunk
        buf[p:q] = bytes(q - p)
    elif code == 7:  # gzip-level corruption
        sub = b % 6
        if sub == 0 and n > 8:  # CRC32 / ISIZE trailer
            buf[n - 8 + a % 8] ^= 0xFF
        elif sub == 1 and n > 3:  # header flags (FEXTRA, FNAME, FCOMMENT, FHCRC...)
            buf[3] = a % 256
        elif sub == 2:  # trailing garbage
            buf += bytes((a >> i) & 0xFF for i in range(0, 8 * (1 + b % 7), 8))
        elif sub == 3:  # a second member of garbage text
            buf += _gz(bytes(data[p:q]))
        elif sub == 4:  # last bytes missing
            del buf[max(0, n - 1 - a % 64) :]
        else:  # a second, corrupt member
            member = bytearray(_gz(bytes(data[p:q])))
            member[len(member) // 2] ^= 0x55
            buf += member
    else:  # a chunk of random bytes
        rnd = random.Random(a ^ (b << 32))
        buf[p:q] = rnd.randbytes(q - p)
    return bytes(buf)


# ----------------------------------------------------------------------------- JSON layer

_DEEP = "\x01DEEP\x01"
_PALETTE: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30,
    -(10**30), 10**400, 1e308, -1e308, 1.5, -0.0, float("nan"), float("inf"), float("-inf"),
    "", "x", "NaN", "nan", "inf", "-1", "0x10", "1e999", "[1, 2]", "[[", "\x00", "\ud800",
    "\u00e9\u4e2d", "a" * 100_000, [], {}, [None], {"": None}, [[1, [2]]], [1.5, "x", None],
    {"ph": "X"}, _DEEP,
)
_KEYS = ("", "ph", "ts", "dur", "name", "cat", "args", "pid", "tid", "id", "nodes",
         "traceEvents", "distributedInfo", "inputs", "outputs", "attrs", "x" * 300)


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _slots(doc: Any) -> list[tuple[Any, Any, int]]:
    """Every (container, key, depth) under ``doc`` (the document itself is the slot
    ``(None, None, 0)``)."""
    out: list[tuple[Any, Any, int]] = [(None, None, 0)]
    stack: list[tuple[Any, int]] = [(doc, 1)] if isinstance(doc, (dict, list)) else []
    while stack:
        node, d = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            out.append((node, k, d))
            if isinstance(v, (dict, list)):
                stack.append((v, d + 1))
    return out


def _pick(slots: list[tuple[Any, Any, int]], a: int) -> tuple[Any, Any, int]:
    """A slot; a third of the time one near the top (required keys live there)."""
    if a % 3 == 0:
        top = [s for s in slots if s[2] <= 2]
        if top:
            return top[(a // 3) % len(top)]
    return slots[(a // 3) % len(slots)]


def mutate_json(doc: Any, op: Op) -> Any:
    """Apply one JSON-aware mutation in place (the new root is returned)."""
    code, a, b = op
    slots = _slots(doc)
    parent, key, _ = _pick(slots, a)
    code %= 7
    value = _PALETTE[b % len(_PALETTE)]

    def put(v: Any) -> Any:
        if parent is None:
            return v
        parent[key] = v
        return doc

    if code in (0, 1):  # a value of the wrong type / an absurd value
        return put(value)
    if code == 2:  # remove a key (or list item)
        if parent is None:
            return {}
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
        return doc
    if code == 3:  # add a key to a dict / an item to a list
        target = parent[key] if parent is not None else doc
        if isinstance(target, dict):
            target[_KEYS[a % len(_KEYS)]] = value
        elif isinstance(target, list):
            target.insert(b % (len(target) + 1), value)
        else:
            return put([target, value])
        return doc
    if code == 4:  # duplicate a list item / dict value under another key
        target = parent[key] if parent is not None else doc
        if isinstance(target, list) and target:
            target.insert(b % (len(target) + 1), target[a % len(target)])
            return doc
        return put(value)
    if code == 5:  # the value wrapped in a list / replaced by deep nesting
        cur = parent[key] if parent is not None else doc
        return put(_DEEP if b % 2 else [cur])
    # code 6: swap two values
    p2, k2, _ = slots[b % len(slots)]
    if parent is None or p2 is None or (p2 is parent and k2 == key):
        return put(value)
    try:
        parent[key], p2[k2] = p2[k2], parent[key]
    except (KeyError, IndexError):
        pass
    return doc


def dump_json(doc: Any, op_seed: int) -> bytes:
    text = json.dumps(doc, ensure_ascii=bool(op_seed % 2))
    deep = json.dumps(_DEEP, ensure_ascii=bool(op_seed % 2))
    if deep in text:
        text = text.replace(deep, _deep_json((1000, 100_000)[op_seed % 2]))
    return text.encode("utf-8", "surrogatepass")


# ----------------------------------------------------------------------------- SQL layer

_SQL_VALUES = ("NULL", "'text'", "X'00FF'", "-1", "0", "9223372036854775807",
               "-9223372036854775808", "1e308", "-1e308", "'NaN'", "1.5", "'9e99'",
               "zeroblob(10)", "'" + "y" * 5000 + "'", "(1e308*10)", "-(1e308*10)")


def mutate_sqlite(data: bytes, ops: Sequence[Op]) -> bytes:
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        for code, a, b in ops:
            tables = [t for (t,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            if not tables:
                break
            # bias to the tables the reader reads: their names come first in _NSYS_KEEP
            known = [t for t in tables if t in _NSYS_KEEP] or tables
            t = known[a % len(known)]
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            col = cols[b % len(cols)] if cols else None
            val = _SQL_VALUES[(a >> 8) % len(_SQL_VALUES)]
            code %= 8
            try:
                if code in (0, 1) and col:  # one cell
                    con.execute(f'UPDATE "{t}" SET "{col}" = {val} WHERE rowid = '
                                f'(SELECT rowid FROM "{t}" LIMIT 1 OFFSET {b % 97})')
                elif code == 2 and col:  # a whole column
                    con.execute(f'UPDATE "{t}" SET "{col}" = {val}')
                elif code == 3:
                    con.execute(f'DROP TABLE "{t}"')
                elif code == 4:
                    con.execute(f'DELETE FROM "{t}"')
                elif code == 5 and col:
                    if b % 2:
                        con.execute(f'ALTER TABLE "{t}" DROP COLUMN "{col}"')
                    else:
                        con.execute(f'ALTER TABLE "{t}" RENAME COLUMN "{col}" TO "{col}_x"')
                elif code == 6:  # the table replaced by a view of the same name
                    con.execute(f'ALTER TABLE "{t}" RENAME TO "{t}_orig"')
                    con.execute(f'CREATE VIEW "{t}" AS SELECT * FROM "{t}_orig"')
                elif code == 7:  # duplicate rows
                    con.execute(f'INSERT INTO "{t}" SELECT * FROM "{t}" LIMIT {1 + b % 50}')
            except sqlite3.Error:
                pass  # e.g. a column that cannot be dropped, a UNIQUE clash
        con.commit()
        return con.serialize()
    finally:
        con.close()


# ----------------------------------------------------------------------------- lines layer

_WORDS = (b"NaN", b"nan", b"-1", b"0", b"1e999", b"99999999999999999999999", b"", b"x", b"N/A",
          b"#", b"inf", b"-", b"-0", b"1.5", b"0x10", b"size", b"time", b"\xff", b",", b'"')
_LINES = (b"# nThread 0 nGpus 0 minBytes 8 maxBytes 8", b"# Collective test starting: x_perf",
          b"#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong",
          b"#  Rank  0 Group  0 Pid 1 on h device  0 [0x00] GPU", b"# (ms)",
          b"# Avg bus bandwidth    : nan", b"hypercube_perf -b 8", b"alltoall_perf",
          b"# source: x", b"", b"," * 12, b"1,2,3", b"a" * 10000, b"\x00\xff")


def mutate_lines(data: bytes, op: Op) -> bytes:
    code, a, b = op
    lines = data.split(b"\n")
    n = len(lines)
    i = a % n
    code %= 8
    if code == 0:
        del lines[i]
    elif code == 1:
        lines.insert(i, lines[b % n])
    elif code == 2:
        j = b % n
        lines[i], lines[j] = lines[j], lines[i]
    elif code in (3, 4):  # replace one token (whitespace- or comma-separated)
        sep = b"," if b"," in lines[i] else None
        toks = lines[i].split(sep)
        if toks:
            toks[b % len(toks)] = _WORDS[(a >> 4) % len(_WORDS)]
            lines[i] = (sep or b" ").join(toks)
    elif code == 5:  # cut the line
        lines[i] = lines[i][: b % (len(lines[i]) + 1)]
    elif code == 6:
        lines.insert(i, _LINES[b % len(_LINES)])
    else:  # drop a field
        sep = b"," if b"," in lines[i] else None
        toks = lines[i].split(sep)
        if toks:
            del toks[b % len(toks)]
            lines[i] = (sep or b" ").join(toks)
    return b"\n".join(lines)


# ----------------------------------------------------------------------------- cases


def mutate(reader: str, case: Case) -> tuple[Seed, str, str, bytes]:
    """(seed, layer, file name, mutated bytes) of ``case``."""
    ss = seeds(reader)
    seed = ss[case.seed % len(ss)]
    layers = LAYERS[reader]
    layer = layers[case.layer % len(layers)]
    name = seed.name
    data = seed.data
    if layer == "stored":
        for op in case.ops:
            data = mutate_bytes(data, op)
        return seed, layer, name, data
    if layer == "sql":
        return seed, layer, name, mutate_sqlite(data, case.ops)
    if layer == "lines":
        for op in case.ops:
            data = mutate_lines(data, op)
        return seed, layer, name, data
    # text / json on the inflated document
    text = gzip.decompress(data) if seed.gz else data
    if layer == "text":
        for op in case.ops:
            text = mutate_bytes(text, op)
    else:
        doc = json.loads(text)
        for op in case.ops:
            doc = mutate_json(doc, op)
        text = dump_json(doc, case.ops[0][2])
    # the first op decides whether the file is written gzipped or plain
    gz_out = seed.gz if case.ops[0][1] % 4 else not seed.gz
    base = name.removesuffix(".gz")
    return seed, layer, base + ".gz" if gz_out else base, _gz(text) if gz_out else text


class FuzzTimeout(BaseException):
    """Raised by the alarm (a BaseException, so ``except Exception`` cannot swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise FuzzTimeout


def readers_of(reader: str) -> list[Callable[[Path, Seed], Any]]:
    """The calls a case of ``reader`` makes: the reader function, then ``traincast.load``."""
    from harness.vtrain import read_vtrain

    import traincast
    from traincast.costs.nccl_tests import read_nccl_tests_log, read_vtrain_lut
    from traincast.trace.readers.et import read_execution_trace
    from traincast.trace.readers.kineto import read_kineto
    from traincast.trace.readers.nsys import read_nsys

    if reader == "kineto":
        return [lambda p, s: read_kineto(p), lambda p, s: traincast.load(p)]
    if reader == "et":
        def link(p: Path, s: Seed) -> Any:
            return traincast.load(s.pair, et_dir=p) if s.pair is not None else None
        return [lambda p, s: read_execution_trace(p), link]
    if reader == "nsys":
        return [lambda p, s: read_nsys(p), lambda p, s: traincast.load(p)]
    if reader == "nccl_tests":
        return [lambda p, s: read_nccl_tests_log(p)]
    if reader == "vtrain_lut":
        return [lambda p, s: read_vtrain_lut(p)]
    if reader == "vtrain":
        return [lambda p, s: read_vtrain(p)]
    raise ValueError(reader)


def run_case(reader: str, case: Case, folder: Path, timeout: float = 10.0) -> Outcome:
    """Mutate, write under ``folder`` and read; never raises (the outcome says what
    happened). ``timeout`` bounds the whole case (wall clock, SIGALRM: main thread only)."""
    from traincast.errors import TraincastError

    seed, layer, name, data = mutate(reader, case)
    out = Outcome("ok", reader, seed.name, layer, case.ops, data, name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for call in readers_of(reader):
                call(path, seed)
    except FuzzTimeout:
        out.status, out.error = "timeout", f"no answer within {timeout} s"
    except TraincastError as exc:
        out.status, out.error = "own", f"{type(exc).__name__}: {exc}"[:500]
    except Exception as exc:  # noqa: BLE001 - the point: anything else is a failure
        out.status, out.error = "fail", f"{type(exc).__name__}: {exc}"[:2000]
        out.tb = traceback.format_exc()[-6000:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        path.unlink(missing_ok=True)
    return out


def random_case(rng: random.Random, reader: str, max_ops: int = 3) -> Case:
    """A case drawn from ``rng`` over the same space as the hypothesis strategy."""
    n_ops = 1 + rng.randrange(max_ops)
    ops = tuple((rng.randrange(256), rng.getrandbits(32), rng.getrandbits(32))
                for _ in range(n_ops))
    return Case(rng.randrange(len(seeds(reader))), rng.randrange(len(LAYERS[reader])), ops)
