"""Reader of PyTorch profiler (Kineto) Chrome-trace JSON files, plain or gzipped.

Format facts (pytorch/kineto ``libkineto/src/output_json.cpp``; PyTorch
``torch/autograd/profiler_util.py``): one JSON object per rank with ``traceEvents`` (complete
events ``ph: "X"`` with ``ts``/``dur`` in microseconds, flows ``s``/``f``, metadata ``M``),
``distributedInfo`` (``rank``, ``world_size``, ``pg_config``), ``deviceProperties`` and, on
newer versions, ``baseTimeNanoseconds``. GPU activities carry ``args.device``/``args.stream``
and the ``correlation`` id of the runtime call that launched them; CPU ops carry ``External
id`` and ``Record function id`` (the ``rf_id`` of the execution trace).

Decoding goes chunk by chunk (:mod:`traincast.trace.readers.jsonscan`) straight into typed
``msgspec`` structs that keep only the fields used, then into numpy columns, so peak memory is
about one chunk of text plus the final columns. With ``compiled`` (large inputs by default) a
numba scanner writes the columns of each chunk without Python objects per event
(:mod:`traincast.trace.readers.kineto_fast`); a chunk it does not accept takes the typed path,
so both give the same tables and the same errors.
"""

from __future__ import annotations

import functools
import gc
from array import array
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, Union

import msgspec
import numpy as np
import pyarrow as pa

from traincast.errors import TraceFormatError
from traincast.trace import arrow as A
from traincast.trace.arrow import Interner
from traincast.trace.readers import kineto_fast as F
from traincast.trace.readers.base import TraceFile
from traincast.trace.readers.jsonscan import (
    ScanResult,
    env_size,
    estimated_text_bytes,
    iter_event_chunks,
)
from traincast.trace.readers.kineto_comm import comm_table, waits_table
from traincast.trace.readers.kineto_names import dictionary, fixed_strings, name_facts
from traincast.trace.readers.kineto_shapes import PairPart, ShapePart, part_of_rows, shapes_table
from traincast.trace.readers.text_size import COMPILED_MIN_BYTES
from traincast.trace.readers.tolerant import DecodeStats, decode_tolerant, summary_line
from traincast.trace.schema import KINDS, OP_FAMILIES

_NORAW = msgspec.Raw(b"")
_NAN = float("nan")


class _Args(msgspec.Struct, frozen=True, gc=False, rename={
    "external_id": "External id",
    "rf_id": "Record function id",
    "coll_name": "Collective name",
    "pg_name": "Process Group Name",
    "pg_ranks": "Process Group Ranks",
    "group_size": "Group size",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "input_dims": "Input Dims",
    "input_type": "Input type",
    "seq": "Seq",
}):
    external_id: int = -1
    correlation: int = -1
    device: int | str = -1
    stream: int | str = -1  # ROCm runtime events carry "0x0"
    rf_id: int = -1
    bytes: int = -1
    coll_name: str = ""
    pg_name: str = ""
    pg_ranks: Any = None
    group_size: int = -1
    in_nelems: int = -1
    out_nelems: int = -1
    dtype: str = ""
    seq: int = -1
    input_dims: msgspec.Raw = _NORAW
    input_type: msgspec.Raw = _NORAW
    wait_on_stream: int = -1
    wait_on_cuda_event_record_corr_id: int = -1
    name: str = ""  # thread_name / process_name metadata
    labels: str = ""  # process_labels metadata


_NOARGS = _Args()


class _Phase(msgspec.Struct, tag_field="ph", gc=False):
    """Base of the events, tagged by their ``ph`` (Trace Event Format phase)."""


class _Event(_Phase, tag="X"):
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = _NAN  # missing: NaN, dropped (and counted) when the columns are built
    dur: float = _NAN
    args: _Args = _NOARGS


class _Begin(_Event, tag="B"):
    pass


class _End(_Event, tag="E"):
    pass


class _Meta(_Phase, tag="M"):
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    args: _Args = _NOARGS


# Every other phase (flows s/t/f, instants i/I, counters C, async b/n/e, objects, marks...)
# decodes into an empty struct: its fields are skipped without building Python objects.
_SKIPPED = tuple(
    msgspec.defstruct(f"_Skip{ord(t)}", [], bases=(_Phase,), tag=t)
    for t in "ACDFGHIJKLNOPQRSTUVWYZabcdefghijklmnopqrstuvwxyz()"
)


class _Header(msgspec.Struct):
    distributedInfo: dict[str, Any] | None = None  # noqa: N815 - JSON key
    deviceProperties: list[dict[str, Any]] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    host_name: str = ""
    otherData: dict[str, Any] | None = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    traceEvents: list[Any] | None = None  # noqa: N815


_EVENT = Union[(_Event, _Begin, _End, _Meta, *_SKIPPED)]  # noqa: UP007
_DECODER = msgspec.json.Decoder(list[_EVENT])
_ONE_DECODER = msgspec.json.Decoder(_EVENT)
_HEADER_DECODER = msgspec.json.Decoder(_Header)

#: ranks are int32 columns
_Rank = Annotated[int, msgspec.Meta(ge=0, lt=2**31)]
#: load() lists every rank of the world: more than 2**20 ranks is no recorded job
_WorldSize = Annotated[int, msgspec.Meta(ge=0, le=1 << 20)]


class _ProcessGroup(msgspec.Struct):
    ranks: list[_Rank] = []


class _DistributedInfo(msgspec.Struct):
    """The ``distributedInfo`` fields used downstream, to validate (numeric strings pass)."""

    rank: _Rank | None = None
    world_size: _WorldSize | None = None
    pg_config: list[_ProcessGroup] | None = None


def _distributed_info(info: dict[str, Any] | None, path: Path) -> dict[str, Any]:
    """``distributedInfo`` with ``rank``, ``world_size`` and ``pg_config[].ranks`` checked
    and made ints."""
    if not info:
        return {}
    try:
        d = msgspec.convert(info, _DistributedInfo, strict=False)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(f"invalid distributedInfo ({exc})", path) from None
    for key in ("rank", "world_size"):
        if getattr(d, key) is not None:
            info[key] = getattr(d, key)
    if d.pg_config is not None:
        info["pg_config"] = [{**pg, "ranks": v.ranks} if "ranks" in pg else pg
                             for pg, v in zip(info["pg_config"], d.pg_config, strict=True)]
    return info


#: Kineto ``cat`` -> canonical ``kind`` (None: not an event of the ``events`` table).
CAT_TO_KIND: dict[str, str] = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "annotation",
    "python_function": "python",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
    # other accelerators (pytorch/kineto libkineto/src/ActivityType.cpp): host-side runtime
    # calls and device-side ops, loaded as device events without GPU assumptions
    "mtia_runtime": "runtime",
    "xpu_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "mtia_ccp_events": "kernel",
}

_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync",
                       "mtia_ccp_events"})

#: complete-event categories left out of the tables on purpose: the whole-trace span
#: (``Trace``), CUPTI's own overhead, profiler ranges; any other unknown category is counted
#: in the decode stats (``dropped_events["cat:<name>"]``)
_IGNORED_CATS = frozenset({"Trace", "overhead", "cuda_profiler_range", "external_correlation",
                           ""})


@dataclass
class KinetoFile(TraceFile):
    """One rank's Kineto trace, decoded (:class:`~traincast.trace.readers.base.TraceFile`:
    ``comm_args`` from ``record_param_comms`` ops and NCCL kernels, ``stream_waits`` from the
    ``cuda_sync`` records that name a stream and the cudaEventRecord they wait on, ``shapes``
    from ``Input Dims`` / ``Input type``)."""


#: ``args`` keys kept as raw JSON text (:class:`msgspec.Raw`) -> attribute of ``_Args``
_RAW_ARGS = {"Input Dims": "input_dims", "Input type": "input_type"}


def _decode_chunk(chunk: bytes, stats: DecodeStats) -> list[Any]:
    """Typed decode of a chunk of events; a chunk rejected for a value's *type* is decoded
    again tolerantly (:mod:`traincast.trace.readers.tolerant`), counting into ``stats``."""
    try:
        return _DECODER.decode(chunk)
    except msgspec.ValidationError:
        return decode_tolerant(chunk, _EVENT, stats, _RAW_ARGS)


def _as_int(v: int | str) -> int:
    if isinstance(v, int):
        return v
    try:
        return int(v, 0)
    except ValueError:
        return -1


_INT_RANGE = {"i": (-(2**31), 2**31 - 1), "q": (-(2**63), 2**63 - 1)}


def _extend_ints(dst: array, values: list[Any]) -> None:
    """Append ints, or strings such as "7" / "0x0", to ``dst``; -1 where not a number or
    out of the column's range (CUDA's all-streams value 4294967295 in a stream column)."""
    try:
        dst.extend(array(dst.typecode, values))
    except (TypeError, OverflowError):
        lo, hi = _INT_RANGE[dst.typecode]
        dst.extend(array(dst.typecode, (v if lo <= v <= hi else -1
                                        for v in map(_as_int, values))))


def _raw(a: np.ndarray) -> memoryview:
    """The bytes of C-contiguous ``a`` (no copy), for ``array.frombytes``."""
    return memoryview(np.ascontiguousarray(a)).cast("B")


class _Columns:
    """Accumulates columns chunk by chunk in growable C arrays (``array.array``).

    One contiguous buffer per column (grown by realloc, so large buffers are mmap'd and
    returned to the OS when freed) keeps the heap from fragmenting into per-chunk pieces.
    """

    def __init__(self) -> None:
        self.cat = Interner()
        self.name = Interner()
        self.cat_codes = array("i")
        self.name_codes = array("i")
        self.ts = array("d")
        self.dur = array("d")
        self.pid = array("q")
        self.tid = array("q")
        self.ext = array("q")
        self.corr = array("q")
        self.device = array("i")
        self.stream = array("i")
        self.rf = array("q")
        self.n = 0
        self.comm: list[tuple[int, _Args]] = []
        self.shapes: list[tuple[int, bytes, bytes]] = []
        self.shape_parts: list[ShapePart | PairPart] = []
        self.stream_waits: list[tuple[int, int, int]] = []
        self.threads: dict[tuple[int, int], str] = {}
        self.begin_end: list[_Event] = []

    def add(self, evs: list[_Event] | F.FastChunk) -> None:
        if isinstance(evs, F.FastChunk):
            self._add_fast(evs)
            return
        x = _Event
        keep = [e for e in evs if type(e) is x]
        if len(keep) != len(evs):
            self._add_others(evs)
        self._add_complete(keep)

    def _add_others(self, evs: list[Any]) -> None:
        """Thread names of ``M`` events; ``B``/``E`` events kept to pair later."""
        for e in evs:
            t = type(e)
            if t is _Meta:
                if e.name == "thread_name" and e.args.name:
                    self.threads[(_as_int(e.pid), _as_int(e.tid))] = e.args.name
            elif t is _Begin or t is _End:
                self.begin_end.append(e)

    def _add_fast(self, fc: F.FastChunk) -> None:
        """A chunk scanned by the compiled path: the same columns as :meth:`add` of its
        decoded events."""
        if fc.others:
            self._add_others(fc.others)
        n = fc.n
        if not n:
            return
        # the scanner's row-major columns transposed once, then appended as raw bytes
        self.cat_codes.frombytes(_raw(F.intern(self.cat, fc, 0)))
        self.name_codes.frombytes(_raw(F.intern(self.name, fc, 1)))
        flts = np.ascontiguousarray(fc.flts.T)
        self.ts.frombytes(_raw(flts[0]))
        self.dur.frombytes(_raw(flts[1]))
        ints = np.ascontiguousarray(fc.ints.T)
        for j, col in enumerate((self.pid, self.tid, self.ext, self.corr, self.device,
                                 self.stream, self.rf)):
            v = ints[j]
            col.frombytes(_raw(v.astype(np.int32) if col.typecode == "i" else v))
        base = self.n
        for r, e in fc.special:
            a = e.args
            if a.coll_name or a.pg_name:
                self.comm.append((base + r, a))
            if a.wait_on_cuda_event_record_corr_id >= 0:
                self.stream_waits.append(
                    (base + r, a.wait_on_stream, a.wait_on_cuda_event_record_corr_id))
        part = F.shape_part(F.kernels(), fc, base)
        if part is not None:
            self.shape_parts.append(part)
        self.n += n

    def _add_complete(self, keep: list[_Event]) -> None:
        n = len(keep)
        if not n:
            return
        g = attrgetter
        self.cat_codes.frombytes(self.cat.encode(list(map(g("cat"), keep))).tobytes())
        self.name_codes.frombytes(self.name.encode(list(map(g("name"), keep))).tobytes())
        self.ts.extend(map(g("ts"), keep))
        self.dur.extend(map(g("dur"), keep))
        _extend_ints(self.pid, list(map(g("pid"), keep)))
        _extend_ints(self.tid, list(map(g("tid"), keep)))
        args = list(map(g("args"), keep))
        self.ext.extend(map(g("external_id"), args))
        self.corr.extend(map(g("correlation"), args))
        _extend_ints(self.device, list(map(g("device"), args)))
        _extend_ints(self.stream, list(map(g("stream"), args)))
        self.rf.extend(map(g("rf_id"), args))
        base = self.n
        for i, a in enumerate(args):
            if a is _NOARGS:
                continue
            if a.coll_name or a.pg_name:
                self.comm.append((base + i, a))
            if a.wait_on_cuda_event_record_corr_id >= 0:
                self.stream_waits.append(
                    (base + i, a.wait_on_stream, a.wait_on_cuda_event_record_corr_id))
            if a.input_dims:
                self.shapes.append((base + i, bytes(a.input_dims), bytes(a.input_type)))
        self.n += n

    def merge_begin_end(self, path: Path) -> None:
        """Pair ``B``/``E`` events per (pid, tid) into complete events."""
        stacks: dict[tuple[Any, Any], list[_Event]] = {}
        out: list[_Event] = []
        for e in sorted(self.begin_end, key=attrgetter("ts")):
            key = (e.pid, e.tid)
            if type(e) is _Begin:
                stacks.setdefault(key, []).append(e)
            else:
                st = stacks.get(key)
                if not st:
                    continue
                b = st.pop()
                out.append(
                    _Event(b.cat, b.name, b.pid, b.tid, b.ts, e.ts - b.ts, b.args)
                )
        self.begin_end = []
        self._add_complete(out)


def compiled_min_bytes() -> int:
    """:data:`COMPILED_MIN_BYTES`, or ``TRAINCAST_COMPILED_MIN_BYTES`` when set."""
    return env_size("TRAINCAST_COMPILED_MIN_BYTES", COMPILED_MIN_BYTES)
#: decompressed bytes per chunk on the compiled path (its chunks cost no Python objects per
#: event, so larger ones only save calls)
_FAST_BLOCK = 1 << 20


def _decoder(stats: DecodeStats, compiled: bool) -> dict[str, Any]:
    """The chunk decoding arguments of :func:`~traincast.trace.readers.jsonscan.
    iter_event_chunks` for the compiled path when ``compiled`` and it loads, else for the
    typed Python path."""
    slow = functools.partial(_decode_chunk, stats=stats)
    k = F.kernels() if compiled else None
    if k is None:
        return {"decode": slow}
    one = _ONE_DECODER.decode

    def decode(chunk: bytes) -> Any:
        fc = F.scan(chunk, k, one)
        return slow(chunk) if fc is None else fc

    def ends_of(text: bytes) -> tuple[np.ndarray, int]:
        return k.event_ends(np.frombuffer(text, np.uint8))

    def decode_tail(text: memoryview, start: int) -> tuple[F.FastChunk, int] | None:
        return F.scan_tail(np.frombuffer(text, np.uint8), start, k, one)

    return {"decode": decode, "block": _FAST_BLOCK, "ends_of": ends_of,
            "decode_tail": decode_tail}


def read_kineto(path: str | Path, *, max_inflate_bytes: int | None = None,
                compiled: bool | None = None) -> KinetoFile:
    """Read one Kineto trace file (``.json`` or ``.json.gz``) into canonical columns.

    Times are converted from microseconds (float) to integer nanoseconds exactly for integer
    microsecond inputs: ``ts_ns = base_us * 1000 + rint((ts_us - base_us) * 1000)``.
    The ``rank`` and ``iteration`` columns are left at -1; :func:`traincast.trace.load.load`
    fills them. A gzipped file may inflate to ``max_inflate_bytes`` (default: see
    :func:`traincast.trace.readers.jsonscan.max_inflate_bytes`, 8 GiB). ``compiled``: scan
    the events with the numba path (:mod:`traincast.trace.readers.kineto_fast`; same tables,
    same errors); default: when the file holds :func:`compiled_min_bytes` of text or more.

    Raises:
        TraceFormatError: unreadable, truncated or corrupt file, or not a Kineto trace
            (:class:`~traincast.errors.InputTooLargeError` past the inflate limit).
    """
    path = Path(path)
    scan = ScanResult()
    cols = _Columns()
    stats = DecodeStats()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived acyclic objects: collection passes only cost time
    try:
        if compiled is None:
            compiled = estimated_text_bytes(path) >= compiled_min_bytes()
        for evs in iter_event_chunks(path, scan, max_inflate_bytes=max_inflate_bytes,
                                     **_decoder(stats, compiled)):
            cols.add(evs)
            del evs
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: absurd nesting
        raise TraceFormatError(f"invalid trace events ({exc})", path) from None
    except OverflowError as exc:  # an id beyond int64 (msgspec's int allows uint64)
        raise TraceFormatError(f"a number out of range in the trace events ({exc})",
                               path) from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"text is not UTF-8 ({exc.reason} at byte {exc.start} of a "
                               "chunk)", path) from None
    finally:
        if gc_was_enabled:
            gc.enable()
    dropped = sum(stats.dropped_events.values())
    if dropped and (cols.n + len(cols.begin_end) == 0 or
                    stats.dropped_events["not an event"] + stats.dropped_events["ph"] > cols.n):
        # tolerance is for real traces with surprising fields, not for arrays of junk
        raise TraceFormatError(f"not a profiler trace: {dropped} of the traceEvents items are "
                               f"not usable events ({summary_line(stats.to_dict())})", path)
    try:
        header = _HEADER_DECODER.decode(scan.header)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"invalid JSON outside traceEvents ({exc})", path) from None
    if (header.otherData or {}).get("generator") == "traincast":
        raise TraceFormatError("a timeline written by traincast, not a profiler trace "
                               "(keep exported timelines out of trace folders)", path)
    try:
        if cols.begin_end:
            cols.merge_begin_end(path)
        events, comm, shapes, waits = _finish(cols, path, stats)
    except (OverflowError, pa.ArrowInvalid) as exc:  # e.g. a group size beyond int32
        raise TraceFormatError(f"a number out of range in the trace events ({exc})",
                               path) from None
    except UnicodeDecodeError as exc:  # Input Dims / Input type are kept as raw JSON text
        raise TraceFormatError(f"text is not UTF-8 ({exc.reason})", path) from None
    return KinetoFile(
        path=path,
        events=events,
        distributed_info=_distributed_info(header.distributedInfo, path),
        device_properties=header.deviceProperties or [],
        base_time_ns=header.baseTimeNanoseconds,
        host_name=header.host_name,
        comm_args=comm,
        stream_waits=waits,
        shapes=shapes,
        threads=cols.threads,
        n_bytes=scan.n_bytes,
        decode_stats=stats.to_dict(),
    )


def _by_time(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``np.lexsort((-dur, ts))``: by start, longer first, then position; one stable sort of
    a combined int64 key when the ranges allow it."""
    if ts.size:
        t0, t1, d0, d1 = int(ts.min()), int(ts.max()), int(dur.min()), int(dur.max())
        if (t1 - t0 + 1) * (d1 - d0 + 1) < 2**62:
            return np.argsort((ts - t0) * (d1 - d0 + 1) + (d1 - dur), kind="stable")
    return np.lexsort((-dur, ts))


#: |ts| and dur beyond this many µs (~285 years) cannot be a trace: int64 ns would overflow
_MAX_US = 9.0e15


def _finish(cols: _Columns, path: Path, stats: DecodeStats
            ) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    n = cols.n

    def cat_np(attr: str, dtype: Any) -> np.ndarray:
        """The accumulated column ``attr`` as numpy (a view of the C array, no copy); the
        _Columns attribute is emptied so the buffer is freed with the last view."""
        buf = getattr(cols, attr)
        setattr(cols, attr, array(buf.typecode))
        return np.frombuffer(buf, dtype=dtype) if len(buf) else np.empty(0, dtype)

    cat_idx, cat_names = cat_np("cat_codes", np.int32), cols.cat.values
    kinds = list(KINDS)
    kind_code = np.array(
        [kinds.index(CAT_TO_KIND[c]) if c in CAT_TO_KIND else -1 for c in cat_names] or [-1],
        np.int32,
    )
    codes = kind_code[cat_idx]
    if n:
        unknown = [i for i, c in enumerate(cat_names)
                   if c not in CAT_TO_KIND and c not in _IGNORED_CATS]
        if unknown:
            counts = np.bincount(cat_idx, minlength=len(cat_names))
            for i in unknown:
                if counts[i]:
                    stats.dropped_events[f"cat:{cat_names[i]}"] += int(counts[i])
    gpu_cats = np.array([c in _GPU_CATS for c in cat_names] or [False], bool)
    on_gpu = gpu_cats[cat_idx] if n else np.zeros(0, bool)
    del cat_idx
    name_idx, name_dict = cat_np("name_codes", np.int32), cols.name.values

    ts_us = cat_np("ts", np.float64)
    dur_us = cat_np("dur", np.float64)
    # a complete event without a usable ts or dur (missing, null, NaN) cannot be placed on
    # the timeline: dropped and counted; a finite but absurd value is not a trace
    ts_ok = np.isfinite(ts_us)
    timed = ts_ok & np.isfinite(dur_us)
    all_timed = bool(timed.all())
    if all_timed:  # (the usual case) nothing to drop or blank
        codes = codes.astype(np.int32)
    else:
        counted = codes >= 0
        for name, bad in (("ts", ~ts_ok), ("dur", ts_ok & ~timed)):
            k = int(np.count_nonzero(bad & counted))
            if k:
                stats.dropped_events[name] += k
        codes = np.where(timed, codes, -1).astype(np.int32)
        ts_us = np.where(timed, ts_us, 0.0)
        dur_us = np.where(timed, dur_us, 0.0)
    for label, vals in (("timestamp ts", ts_us), ("duration dur", dur_us)):
        # (finite values) |v| >= _MAX_US somewhere iff max >= _MAX_US or min <= -_MAX_US
        if vals.size and (vals.max() >= _MAX_US or vals.min() <= -_MAX_US):
            absurd = np.abs(vals) >= _MAX_US
            raise TraceFormatError(f"absurd {label}={float(vals[absurd][0])!r} µs", path)
    if all_timed:
        base = float(np.floor(ts_us.min())) if ts_us.size else 0.0
    else:
        base = float(np.floor(ts_us[timed].min())) if timed.any() else 0.0
    ts = np.int64(base) * 1000 + np.rint((ts_us - base) * 1000.0).astype(np.int64)
    del ts_us
    # negative durations (clock glitches in some profilers) become zero-length events
    dur = np.rint(np.maximum(dur_us, 0.0) * 1000.0).astype(np.int64)
    del dur_us, timed

    # Collective kernels (NCCL/RCCL) become kind "collective".
    comm_name, family_of_name, name_strings = name_facts(name_dict)
    kernel_code = kinds.index("kernel")
    is_comm_kernel = (codes == kernel_code) & comm_name[name_idx] if n else np.zeros(0, bool)
    codes = np.where(is_comm_kernel, kinds.index("collective"), codes).astype(np.int32)

    keep = codes >= 0
    fam_idx = family_of_name[name_idx]
    is_copy = (codes == kinds.index("memcpy")) | (codes == kinds.index("memset"))
    fams = list(OP_FAMILIES)
    fam_idx = np.where(is_copy, fams.index("memcpy"), fam_idx).astype(np.int32)
    fam_idx = np.where(codes == kinds.index("collective"), fams.index("comm"), fam_idx)

    rows = np.flatnonzero(keep)
    order = rows[_by_time(ts[rows], dur[rows])]
    del rows, keep
    old_to_new = np.full(n, -1, np.int64)
    old_to_new[order] = np.arange(order.size)

    def reorder(a: np.ndarray) -> np.ndarray:
        return a[order]

    m = order.size
    columns: dict[str, Any] = {
        "rank": np.full(m, -1, np.int32),
        "iteration": np.full(m, -1, np.int32),
        "kind": dictionary(reorder(codes), fixed_strings(KINDS)),
        "name": dictionary(reorder(name_idx), name_strings),
    }
    del codes, name_idx
    columns["ts"] = reorder(ts)
    columns["dur"] = reorder(dur)
    del ts, dur
    # Device-side events: Kineto puts the device in ``pid`` and the stream in ``tid``;
    # gpu_user_annotation has no args for them. Host events get -1.
    pid = cat_np("pid", np.int64)
    device = cat_np("device", np.int32)
    device = np.where(on_gpu, np.where(device >= 0, device, pid), -1).astype(np.int32)
    columns["pid"] = reorder(pid)
    del pid
    tid = cat_np("tid", np.int64)
    stream = cat_np("stream", np.int32)
    stream = np.where(on_gpu, np.where(stream >= 0, stream, tid), -1).astype(np.int32)
    columns["tid"] = reorder(tid)
    del tid
    columns["device"] = reorder(device)
    columns["stream"] = reorder(stream)
    del device, stream
    columns["correlation"] = reorder(cat_np("corr", np.int64))
    columns["external_id"] = reorder(cat_np("ext", np.int64))
    columns["op_family"] = dictionary(reorder(fam_idx), fixed_strings(OP_FAMILIES))
    columns["rf_id"] = reorder(cat_np("rf", np.int64))
    events = pa.Table.from_arrays(
        [A.from_numpy(v) if isinstance(v, np.ndarray) else v for v in columns.values()],
        names=list(columns),
    )

    comm = comm_table([(int(old_to_new[i]), a) for i, a in cols.comm if old_to_new[i] >= 0])
    if cols.shapes:
        cols.shape_parts.append(part_of_rows(cols.shapes))
    shapes = shapes_table(cols.shape_parts, old_to_new)
    waits = waits_table([(int(old_to_new[i]), w, c) for i, w, c in cols.stream_waits
                         if old_to_new[i] >= 0])
    return events, comm, shapes, waits
