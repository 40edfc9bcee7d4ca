"""Stream the ``traceEvents`` array of a Chrome-trace JSON file in chunks of whole events.

A Kineto trace is one JSON object whose ``traceEvents`` member holds almost all of the bytes.
Decoding the whole document at once needs the full text plus every decoded event in memory.
Here the (possibly gzipped) file is decompressed block by block and each block is cut at the
last complete event, so at most one block of text and its decoded events are alive at a time.
A block is searched for the array where it came in, and the text after the array's ``[`` is
copied out of it only when the next block must be appended (a document that fits in one
block is scanned in place).

The cut points are found without a Python loop per byte: numpy locates the quotes, decides
which structural characters lie outside strings by the parity of unescaped quotes before them,
and a cumulative sum of ``{[`` (+1) and ``}]`` (-1) gives the nesting depth. An event ends
where a ``}`` brings the depth back to the level of the array's elements. Every chunk starts
at an event boundary, outside any string, so no state has to be carried between chunks except
the leftover bytes of the one incomplete event.

Hostile input is bounded: a gzipped file may inflate to ``TRAINCAST_MAX_INFLATE_BYTES`` (8 GiB
by default) and, past 64 MiB, to 250x its compressed size; text without a complete event, or
after the array, is bounded too (see the constants below). Past a bound the file is refused
with :class:`~traincast.errors.InputTooLargeError` or :class:`~traincast.errors.TraceFormatError`.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np

from traincast.errors import InputTooLargeError, ParameterError, TraceFormatError
from traincast.trace.readers.text_size import (  # noqa: F401 - re-exported, as before
    GZIP_RATIO,
    estimated_text_bytes,
)
from traincast.util.fileio import open_regular

T = TypeVar("T")

try:  # Intel ISA-L's inflate: same API as zlib, about 3x faster (pycompression/python-isal)
    from isal import isal_zlib as _zlib

    _ZLIB_ERRORS: tuple[type[Exception], ...] = (zlib.error, _zlib.error)
except ImportError:  # pragma: no cover - optional speed-up
    _zlib = zlib  # type: ignore[no-redef]
    _ZLIB_ERRORS = (zlib.error,)
_GZ_PIECE = 16 << 10  # compressed bytes per inflate call (keeps outputs small)

_BLOCK = 1 << 17  # decompressed bytes per chunk (128 KiB: lowest peak memory, same speed)
_KEY = b'"traceEvents"'
_QUOTE, _BSLASH = 34, 92
_OPEN = (123, 91)  # { [
_CLOSE = (125, 93)  # } ]

# Gzip bombs. A gzipped trace is refused, before it can exhaust memory or time, when it inflates
# past a size limit (8 GiB by default: a per-rank Kineto trace is tens of MB to a few GB of
# JSON; 8 GiB of JSON already needs several GB of columns) or, beyond its first 64 MiB, past a
# ratio of 250 inflated bytes per compressed byte (real traces inflate 7-22x; deflate's maximum
# is 1032x, reached by runs of one byte). Raise the size with ``TRAINCAST_MAX_INFLATE_BYTES``
# (bytes, or with a K/M/G/T suffix; 0: no limit) or ``load(..., max_inflate_bytes=N)``; change
# the ratio with ``TRAINCAST_MAX_INFLATE_RATIO`` (0 turns the ratio check off). Plain (not
# gzipped) files are not limited: their size is on disk for all to see.
DEFAULT_MAX_INFLATE_BYTES = 8 << 30
DEFAULT_MAX_INFLATE_RATIO = 250
_RATIO_FLOOR = 64 << 20  # inflated bytes before the ratio is checked
#: longest text without a complete event (Kineto's largest are KBs; each new block re-scans
#: the pending text, so this also bounds the time a crafted file can take)
_MAX_PENDING = 16 << 20
#: longest text after the ``traceEvents`` array (Kineto writes a few KB of metadata there)
_MAX_TRAILER = 64 << 20
#: most nested ``"traceEvents"`` keys skipped while looking for the top-level one
_MAX_NESTED_KEYS = 1000
_max_inflate: ContextVar[int | None] = ContextVar("traincast_max_inflate_bytes", default=None)
_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def env_size(name: str, default: int) -> int:
    """The size in the environment variable ``name`` (bytes, or with a K/M/G/T suffix), else
    ``default``. Raises ParameterError when it is not a size or negative."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    text = raw.upper().removesuffix("IB").removesuffix("B")
    scale = _SUFFIX.get(text[-1:], 1)
    try:
        value = int(float(text[:-1] if scale > 1 else text) * scale)
    except (ValueError, OverflowError):
        raise ParameterError(f"{name}={raw!r} is not a size (e.g. 16G or 17179869184)") from None
    if value < 0:
        raise ParameterError(f"{name}={raw!r} is negative")
    return value


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ParameterError(f"max_inflate_bytes must be a positive integer, not {limit!r}")
    return limit


def max_inflate_bytes(override: int | None = None) -> int:
    """Inflate limit in force: ``override``, else the one set by :func:`inflate_limit`
    (``load(..., max_inflate_bytes=)``), else ``TRAINCAST_MAX_INFLATE_BYTES`` (0: no limit),
    else 8 GiB."""
    if override is None:
        override = _max_inflate.get()
    if override is not None:
        return _check_limit(override)
    return env_size("TRAINCAST_MAX_INFLATE_BYTES", DEFAULT_MAX_INFLATE_BYTES)


@contextmanager
def inflate_limit(limit: int | None) -> Iterator[None]:
    """Within the block, gzipped files inflate to at most ``limit`` bytes (None: unchanged)."""
    token = _max_inflate.set(_check_limit(limit) if limit is not None else _max_inflate.get())
    try:
        yield
    finally:
        _max_inflate.reset(token)


def within_inflate_limits(inflated: int, compressed: int, limit: int | None = None) -> bool:
    """Whether a gzipped file of ``compressed`` bytes that inflated to ``inflated`` bytes
    passes the size and ratio limits in force (as :func:`_inflate` checks them while
    reading): a cache hit must not let through what a parse would refuse."""
    limit = max_inflate_bytes(limit)
    ratio = env_size("TRAINCAST_MAX_INFLATE_RATIO", DEFAULT_MAX_INFLATE_RATIO)
    if limit and inflated > limit:
        return False
    return not (ratio and inflated > _RATIO_FLOOR and inflated > ratio * compressed)


def _inflate(f: BinaryIO, path: Path, limit: int | None = None, piece: int = _BLOCK
             ) -> Iterator[bytes]:
    """Inflate the gzip stream of ``f`` (one or more members) in pieces of at most ``piece``
    bytes (reading ``piece / 8`` compressed bytes at a time, at least 16 KiB), refusing it
    with :class:`InputTooLargeError` once it passes the size or ratio limit (so at most one
    piece past the limit is ever held)."""
    limit = max_inflate_bytes(limit)
    read = max(_GZ_PIECE, piece >> 3)
    ratio = env_size("TRAINCAST_MAX_INFLATE_RATIO", DEFAULT_MAX_INFLATE_RATIO)
    d = _zlib.decompressobj(16 + zlib.MAX_WBITS)
    n_in = n_out = 0

    def pieces(raw: bytes) -> Iterator[bytes]:
        nonlocal d
        while raw:
            try:
                out = d.decompress(raw, piece)
            except _ZLIB_ERRORS as exc:
                raise TraceFormatError(f"corrupt gzip data ({exc})", path) from None
            raw = d.unconsumed_tail
            if d.eof and d.unused_data:  # concatenated gzip members
                raw = d.unused_data
                d = _zlib.decompressobj(16 + zlib.MAX_WBITS)
            if out:
                yield out

    def checked(out: bytes) -> bytes:
        nonlocal n_out
        n_out += len(out)
        if limit and n_out > limit:
            raise InputTooLargeError(
                f"gzip data inflates past the limit of {limit:,} bytes (a gzip bomb? raise "
                "TRAINCAST_MAX_INFLATE_BYTES or pass max_inflate_bytes= for a larger trace)",
                path)
        if ratio and n_out > _RATIO_FLOOR and n_out > ratio * n_in:
            raise InputTooLargeError(
                f"gzip data inflates more than {ratio}x ({n_out:,} bytes from {n_in:,}): a "
                "gzip bomb, not a trace (TRAINCAST_MAX_INFLATE_RATIO=0 allows it)", path)
        return out

    while True:
        raw = f.read(read)
        if not raw:
            break
        n_in += len(raw)
        for out in pieces(raw):
            yield checked(out)
    while not d.eof:  # output still held back by the piece size
        try:
            out = d.decompress(b"", piece)
        except _ZLIB_ERRORS as exc:
            raise TraceFormatError(f"corrupt gzip data ({exc})", path) from None
        if not out:
            break
        yield checked(out)
    if not d.eof:
        raise TraceFormatError("truncated gzip file (unexpected end of stream)", path)


def read_maybe_gzipped(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path``, inflated if it is gzipped (by magic number), within the
    inflate limit. Raises TraceFormatError (InputTooLargeError past the limit)."""
    try:
        f = open_regular(path)  # closed in finally; a FIFO or device is refused
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path) from None
    try:
        if f.read(2) != b"\x1f\x8b":
            f.seek(0)
            return f.read()
        f.seek(0)
        return b"".join(_inflate(f, path, limit))
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path) from None
    finally:
        f.close()


@dataclass
class ScanResult:
    """What remains of the document once the events are streamed out.

    ``header`` is the document with the ``traceEvents`` array emptied (``[]``), small enough to
    decode whole for ``distributedInfo``, ``deviceProperties`` and ``baseTimeNanoseconds``.
    """

    header: bytes = b""
    n_bytes: int = 0
    chunks: int = 0
    pieces: list[bytes] = field(default_factory=list)


def _open_stream(path: Path, limit: int | None = None, block: int = _BLOCK
                 ) -> Iterator[bytes]:
    """Yield decompressed blocks of ``path`` of about ``block`` bytes (gzip detected by
    magic number, not by name)."""
    try:
        f = open_regular(path)  # closed in finally; a FIFO or device is refused
    except OSError as exc:
        raise TraceFormatError(f"cannot open: {exc.strerror}", path) from None
    try:
        magic = f.read(2)
        f.seek(0)
        if magic == b"\x1f\x8b":
            pending: list[bytes] = []
            size = 0
            for out in _inflate(f, path, limit, block):
                pending.append(out)
                size += len(out)
                if size >= block:
                    yield b"".join(pending)
                    pending, size = [], 0
            if pending:
                yield b"".join(pending)
        else:
            while True:
                raw = f.read(block)
                if not raw:
                    break
                yield raw
    except (gzip.BadGzipFile, EOFError) as exc:
        raise TraceFormatError(f"corrupt gzip file ({exc})", path) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path) from None
    finally:
        f.close()


def _unescaped_quotes(a: np.ndarray) -> np.ndarray:
    """Offsets of the ``"`` in ``a`` that delimit strings (not escaped by a backslash)."""
    q = np.flatnonzero(a == _QUOTE)
    if q.size:
        # a quote preceded by an odd run of backslashes is escaped (rare: check in Python)
        cand = q[q > 0]
        cand = cand[a[cand - 1] == _BSLASH]
        escaped = []
        for pos in cand.tolist():
            k = pos - 1
            while k >= 0 and a[k] == _BSLASH:
                k -= 1
            if (pos - 1 - k) % 2 == 1:
                escaped.append(pos)
        if escaped:
            q = np.setdiff1d(q, np.asarray(escaped, dtype=q.dtype), assume_unique=True)
    return q


def _event_ends(buf: bytes) -> tuple[np.ndarray, int]:
    """Offsets just past each complete top-level element of an array body starting in ``buf``.

    ``buf`` starts inside the array (depth 0 = between elements), outside any string.
    Returns (ends, close) where ``close`` is the offset of the array's closing ``]`` or -1.
    """
    a = np.frombuffer(buf, dtype=np.uint8)
    q = _unescaped_quotes(a)
    s = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93))
    if q.size:
        outside = (np.searchsorted(q, s) & 1) == 0
        s = s[outside]
    step = np.where((a[s] == 123) | (a[s] == 91), 1, -1).astype(np.int32)
    depth = np.cumsum(step, dtype=np.int32)
    closes = s[(depth == 0) & (step == -1)]
    below = np.flatnonzero(depth < 0)
    if below.size:
        close = int(s[below[0]])
        closes = closes[closes < close]
        return closes + 1, close
    return closes + 1, -1


def _top_level_key(doc: bytes | bytearray, pos: int) -> bool:
    """Whether the quote at ``pos`` opens a key of the top-level object (depth 1, outside
    strings), found with the same quote-parity scan as :func:`_event_ends`."""
    a = np.frombuffer(bytes(doc[:pos]), dtype=np.uint8)
    q = _unescaped_quotes(a)
    if q.size % 2:
        return False  # inside a string
    s = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93))
    if q.size:
        s = s[(np.searchsorted(q, s) & 1) == 0]
    c = a[s]
    depth = int(np.count_nonzero((c == 123) | (c == 91)) - np.count_nonzero((c == 125) | (c == 93)))
    return depth == 1 and bool(s.size) and a[s[0]] == 123


def _body_start(b: bytearray | memoryview, end: int) -> int:
    """Offset of the first event in ``b[:end]`` (past whitespace, commas and ``[``)."""
    start = 0
    while start < end and b[start] in b" \t\r\n,[":
        start += 1
    return start


def iter_event_chunks(
    path: str | Path, result: ScanResult, decode: Callable[[bytes], T],
    max_inflate_bytes: int | None = None, block: int | None = None,
    ends_of: Callable[[bytes], tuple[np.ndarray, int]] | None = None,
    decode_tail: Callable[[memoryview, int], tuple[T, int] | None] | None = None,
) -> Iterator[T]:
    """Decode the ``traceEvents`` array of ``path`` chunk by chunk.

    ``decode`` receives a JSON array (bytes ``[...]``) of consecutive whole events and its
    result is yielded. Chunks are cut cheaply at the last ``},`` of each decompressed block;
    such a cut can only decode if it lies between two events (a cut inside a string or inside
    an event leaves the array unterminated), so a decode error there falls back to the exact
    numpy scan before it is treated as corrupt input. ``result.header`` is filled at the end.
    A gzipped file inflates to at most ``max_inflate_bytes`` (see :func:`max_inflate_bytes`).
    ``block``: decompressed bytes per read (default 128 KiB); ``ends_of``: the exact cut
    (default :func:`_event_ends`; a compiled equivalent may be given); ``decode_tail``:
    given the last text (a read-only view: the end of the array and the rest of the
    document) and the offset of its first event, the decoded events and the offset of the
    array's ``]``, or None to cut it exactly and ``decode`` it.

    Raises:
        TraceFormatError: the file cannot be read, is truncated or corrupt, has no
            ``traceEvents`` array, holds 256 MiB of text without a complete event, or
            256 MiB after the array.
        InputTooLargeError: a gzipped file inflates past the limit (a gzip bomb).
        msgspec.DecodeError (or whatever ``decode`` raises): corrupt events, after the
            exact re-scan.
    """
    path = Path(path)
    stream = _open_stream(path, max_inflate_bytes, block or _BLOCK)
    head = bytearray()
    buf = bytearray()
    # the text after the array's '[' while it is still the block it came in (not copied
    # until another block must be appended to it)
    rest: memoryview | None = None
    found = False
    # 1. the header, up to and including the '[' of traceEvents (or of a top-level array:
    #    the Trace Event Format's "JSON Array Format")
    search_from = 0
    nested = 0
    for block in stream:
        result.n_bytes += len(block)
        if head:
            head += block
            doc: bytes | bytearray = head
        else:  # the first block is searched in place, kept in head only if not enough
            doc = block
        lead = bytes(doc[:64]).lstrip()
        if lead.startswith(b"["):
            k = doc.index(b"[")
            rest = memoryview(doc)[k + 1 :]
            head = bytearray(b'{"traceEvents": []}')
            found = True
            break
        i = doc.find(_KEY, search_from)
        while i >= 0 and not _top_level_key(doc, i):
            nested += 1
            if nested > _MAX_NESTED_KEYS:
                raise TraceFormatError(f"over {_MAX_NESTED_KEYS} nested 'traceEvents' keys "
                                       "before the top-level one: not a profiler trace", path)
            i = doc.find(_KEY, i + 1)
        if i < 0:
            search_from = max(0, len(doc) - len(_KEY))
            if doc is block:
                head += block
            if len(head) > (64 << 20):
                break
            continue
        j = i + len(_KEY)
        while j < len(doc) and doc[j] in b" \t\r\n:":
            j += 1
        if j >= len(doc):
            search_from = i
            if doc is block:
                head += block
            continue
        if doc[j] != 91:
            raise TraceFormatError("'traceEvents' is not a JSON array", path)
        rest = memoryview(doc)[j + 1 :]
        head = bytearray(doc[:j])
        head += b"[]"
        found = True
        break
    if not found:
        stripped = bytes(head[:64]).lstrip()
        if not stripped:
            raise TraceFormatError("empty file", path)
        if not stripped.startswith((b"{", b"[")):
            raise TraceFormatError("not JSON (does not start with '{')", path)
        raise TraceFormatError("no 'traceEvents' array: not a Chrome/Kineto trace", path)

    def body_of(b: bytearray, end: int) -> bytes:
        """``[`` + the events in ``b[:end]`` + ``]``, copying the text once."""
        start = _body_start(b, end)
        with memoryview(b) as mv:
            return b"".join((b"[", mv[start:end], b"]"))

    # 2. the events, then the trailer of the document
    closed = False
    exhausted = False
    retry_at = 0  # after a pass that found no whole event: wait until the text doubles
    while not closed:
        block = next(stream, None)
        if block is None:
            exhausted = True
        else:
            result.n_bytes += len(block)
            if rest is not None:
                buf = bytearray(rest)
                rest = None
            buf += block
            if len(buf) > _MAX_PENDING:
                raise TraceFormatError(f"{_MAX_PENDING >> 20} MiB of text without a complete "
                                       "trace event: not a profiler trace", path)
        if not exhausted:
            if len(buf) < retry_at:
                continue
            # only the new block can hold a later cut than the one already tried
            cut = buf.rfind(b"},", max(0, len(buf) - len(block) - 1))
            if cut < 0:
                continue
            try:
                out = decode(body_of(buf, cut + 1))
            except Exception:  # noqa: BLE001 - re-cut exactly below
                out = None
            if out is not None:
                result.chunks += 1
                del buf[: cut + 1]
                yield out
                out = None
                continue
        if exhausted and decode_tail is not None:
            text = memoryview(buf) if rest is None else rest
            start = _body_start(text, len(text))
            got = decode_tail(text.toreadonly(), start)
            if got is not None:  # the view is not released here: buf is not resized again
                out, close = got
                got = None
                if start < close:
                    result.chunks += 1
                    yield out
                out = None
                head += text[close + 1:]
                buf = bytearray()
                rest = None
                break
            text = None
        if rest is not None:
            buf = bytearray(rest)
            rest = None
        ends, close = (ends_of or _event_ends)(bytes(buf))
        if close >= 0:
            closed = True
            body_end = close
        elif exhausted:
            raise TraceFormatError("truncated JSON: the traceEvents array is not closed", path)
        else:
            body_end = int(ends[-1]) if ends.size else 0
        if bytes(buf[:body_end]).strip(b" \t\r\n,"):
            result.chunks += 1
            yield decode(body_of(buf, body_end))
        # no whole event in the text (one huge event, or junk): scanning it again on every
        # block would take quadratic time, so wait until it has doubled
        retry_at = 2 * len(buf) if body_end == 0 and not closed else 0
        if closed:
            head += buf[close + 1 :]
        del buf[:body_end]
    for block in stream:
        result.n_bytes += len(block)
        head += block
        if len(head) > _MAX_TRAILER:
            raise TraceFormatError(f"more than {_MAX_TRAILER >> 20} MiB of text after the "
                                   "traceEvents array: not a profiler trace", path)
    result.header = bytes(head)
