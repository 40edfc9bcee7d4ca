"""The compiled path of the Kineto reader: chunks of ``traceEvents`` scanned into columns.

:func:`scan` runs :func:`traincast.trace.readers.jsonfast_kernels.scan_chunk` on a chunk and
returns a :class:`FastChunk` (numpy columns of its complete events, the few events the caller
decodes as ``msgspec`` structs), or None when the chunk holds anything the scanner does not
accept (see that module): the caller then decodes the chunk with its typed Python path, so
both paths give the same tables (and the same errors). :func:`kernels` gives the compiled
module, or None when numba is missing or broken or ``TRAINCAST_NO_NUMBA`` is set.

Strings (``cat``, ``name``) are interned per chunk by the scanner, by their raw bytes, in
order of first appearance; each distinct raw text is decoded once here and looked up in the
reader's :class:`~traincast.trace.arrow.Interner`, so the dictionary codes equal those of
the Python path. A file's first chunk whose distinct raw texts (none escaped) equal those of
a first chunk met before in this process, in the same order, takes that chunk's dictionary
without decoding them (the ranks of a job meet the same names in the same order).
``Input Dims`` / ``Input type`` texts go to this thread's
:class:`~traincast.trace.readers.kineto_shapes.PairTable` (:func:`shape_part`).

The scanner's arrays are sized for events of 64 bytes on average (Kineto's take 230 or more);
a chunk of smaller ones is scanned again with arrays large enough for any.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import msgspec
import numpy as np

from traincast.trace.arrow import Interner
from traincast.trace.readers.kineto_shapes import PairPart, pair_table

_KERNELS: list[ModuleType | None] = []
#: bytes per event the scanner's arrays are first sized for (Kineto's events take 230 or
#: more: rows for a chunk of smaller ones cost a second scan)
_EVENT_BYTES = 64


def kernels() -> ModuleType | None:
    """:mod:`traincast.trace.readers.jsonfast_kernels`, or None (numba missing or broken, or
    ``TRAINCAST_NO_NUMBA`` set)."""
    if os.environ.get("TRAINCAST_NO_NUMBA"):
        return None
    if not _KERNELS:
        try:  # imported on first use: numba and its compiled cache are a start-up cost
            _KERNELS.append(importlib.import_module("traincast.trace.readers.jsonfast_kernels"))
        except Exception:  # noqa: BLE001 - numba missing or broken: the Python path
            _KERNELS.append(None)
    return _KERNELS[0]


@dataclass
class FastChunk:
    """One scanned chunk: ``buf`` its bytes (uint8), ``n`` complete events whose columns are
    the first ``n`` rows of ``spans`` / ``ints`` / ``flts`` / ``flags`` / ``codes``
    (:mod:`~traincast.trace.readers.jsonfast_kernels`), ``firsts`` the first row of each
    distinct raw ``cat`` and ``name`` text (in order of appearance), ``others`` the
    ``B``/``E``/``M`` events decoded (in order), ``special`` (row, decoded event) of the
    complete events whose collective or stream-wait arguments the caller reads from the
    struct."""

    buf: np.ndarray
    n: int
    spans: np.ndarray
    ints: np.ndarray
    flts: np.ndarray
    flags: np.ndarray
    codes: np.ndarray
    firsts: tuple[np.ndarray, np.ndarray]
    others: list[Any] = field(default_factory=list)
    special: list[tuple[int, Any]] = field(default_factory=list)


def scan(chunk: bytes, k: ModuleType, decode_one: Callable[[bytes], Any]) -> FastChunk | None:
    """The columns of ``chunk`` (``[...]`` of whole events), or None when the Python path
    must decode it. ``decode_one`` decodes one event's text into the typed struct (raising
    ``msgspec.ValidationError`` where the typed decoder of the whole chunk would)."""
    got = scan_tail(np.frombuffer(chunk, np.uint8), -1, k, decode_one, tail=False)
    return None if got is None else got[0]


def scan_tail(b: np.ndarray, start: int, k: ModuleType, decode_one: Callable[[bytes], Any],
              *, tail: bool = True) -> tuple[FastChunk, int] | None:
    """(columns, offset of the array's closing ``]``) of the text ``b`` (uint8, read-only):
    from ``start`` >= 0 the elements of the array (-1: ``[`` and its elements), the closing
    ``]`` and, with ``tail``, any text after it; None when the Python path must decode it."""
    # arrays sized for events of _EVENT_BYTES on average stay small (larger ones are backed
    # by huge pages, and zeroing those costs more than the scan); a chunk of smaller events
    # is scanned again with room for any (every event takes 8 bytes or more)
    for cap in (b.size // _EVENT_BYTES + 64, b.size // 8 + 2):
        spans = np.empty((cap, 8), np.int64)
        ints = np.empty((cap, 7), np.int64)
        flts = np.empty((cap, 2), np.float64)
        flags = np.empty(cap, np.uint8)
        codes = np.empty((cap, 2), np.int32)
        firsts = np.empty((cap, 2), np.int64)
        others = np.empty((cap, 3), np.int64)
        evspan = np.empty((cap, 2), np.int64)
        status, n, no, end, ncat, nname = k.scan_chunk(b, start, spans, ints, flts, flags,
                                                       codes, firsts, others, evspan, tail)
        if status != k.FULL:
            break
    if status != 0:
        return None
    fc = FastChunk(b, n, spans[:n], ints[:n], flts[:n], flags[:n], codes[:n],
                   (firsts[:ncat, 0], firsts[:nname, 1]))
    try:
        mv = memoryview(b)  # copied out: the structs' raw fields must not keep the chunk
        fc.others = [decode_one(bytes(mv[s:e])) for _, s, e in others[:no].tolist()]
        rows = np.flatnonzero(fc.flags & 4).tolist()
        fc.special = [(r, decode_one(bytes(mv[evspan[r, 0]:evspan[r, 1]]))) for r in rows]
    except msgspec.ValidationError:
        return None
    return fc, end


#: the texts of a first chunk's distinct ``cat`` / ``name`` raw texts without escapes (the
#: ranks of a job meet the same names in the same order), by those raw texts: an empty
#: interner given them becomes this dictionary (text -> code, codes in order)
_FIRSTS: dict[bytes, dict[str, int]] = {}
_MAX_FIRSTS = 64


def _raw_key(fc: FastChunk, col: int, rows: np.ndarray) -> bytes | None:
    """The lengths and bytes of the raw texts of ``rows`` in column ``col`` (None when over
    1 MiB)."""
    s, e = fc.spans[rows, 2 * col], fc.spans[rows, 2 * col + 1]
    ln = np.where(s >= 0, e - s, 0)
    if int(ln.sum()) > 1 << 20:
        return None
    mv = memoryview(fc.buf)  # an absent text (-1, -1) is the empty slice [0:0]
    starts, ends = np.maximum(s, 0).tolist(), np.maximum(e, 0).tolist()
    return b"".join([ln.tobytes(), *(mv[a:z] for a, z in zip(starts, ends, strict=True))])


def intern(interner: Interner, fc: FastChunk, col: int) -> np.ndarray:
    """int32 codes of column ``col`` (0 ``cat``, 1 ``name``) of the chunk's events, adding its
    new strings to ``interner`` in order of first appearance (as ``Interner.encode``)."""
    rows = fc.firsts[col]
    escaped = (fc.flags[rows] & (1 << col)).tolist()
    key = None
    if not interner.codes and not any(escaped):
        # distinct raw texts without escapes are distinct texts: codes 0, 1, ... in order
        key = _raw_key(fc, col, rows)
        known = None if key is None else _FIRSTS.get(key)
        if known is not None:
            interner.codes.update(known)
            return np.ascontiguousarray(fc.codes[:, col])
    starts = fc.spans[rows, 2 * col].tolist()
    ends = fc.spans[rows, 2 * col + 1].tolist()
    codes = interner.codes
    mv = memoryview(fc.buf)  # slices of a memoryview decode without numpy's per-slice cost
    got = []
    for s, e, esc in zip(starts, ends, escaped, strict=True):
        if s < 0:
            text = ""
        elif esc:
            text = msgspec.json.decode(b'"' + bytes(mv[s:e]) + b'"')
        else:
            text = str(mv[s:e], "ascii")  # the scanner accepts ASCII strings only
        c = codes.get(text)
        if c is None:
            c = codes[text] = len(codes)
        got.append(c)
    if key is not None:
        if len(_FIRSTS) >= _MAX_FIRSTS:
            _FIRSTS.clear()
        _FIRSTS[key] = dict(codes)
    return np.array(got, np.int32)[fc.codes[:, col]]


def shape_part(k: ModuleType, fc: FastChunk, base: int) -> PairPart | None:
    """The chunk's events that carry ``Input Dims`` (event rows from ``base``, ids of their
    texts in this thread's :class:`~traincast.trace.readers.kineto_shapes.PairTable`; a
    large table starts again at a file's first chunk, ``base`` 0), or None when none does."""
    rows = np.flatnonzero(fc.spans[:, 4] >= 0)
    if not rows.size:
        return None
    table = pair_table(base == 0)
    return PairPart(rows + base, table.ids(k, fc.buf, fc.spans, rows), table, k)


#: two complete events of one name, one with shapes and no collective or stream-wait
#: arguments (nothing for ``decode_one``): scanning them runs each kernel a parse runs
_WARM_CHUNK = (b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,'
               b'"args":{"Input Dims":[[1]],"Input type":["float"]}},'
               b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":2,"dur":1}]')


def warm() -> bool:
    """Load the compiled kernels in this process (numba's import and its cached code, ~0.5 s
    once), as the first chunk of a parse would, by scanning a tiny chunk; False when the
    compiled path is not available."""
    k = kernels()
    if k is None:
        return False
    fc = scan(_WARM_CHUNK, k, msgspec.json.decode)
    part = None if fc is None else shape_part(k, fc, 0)
    if part is not None:
        part.bytes_part()
    return True
