"""The ``shapes`` table of a Kineto file: ``Input Dims`` / ``Input type`` texts per event.

Rows come in parts: from the compiled scanner (:mod:`traincast.trace.readers.kineto_fast`)
as :class:`PairPart` (event rows, ids of their pairs of texts in this thread's
:class:`PairTable`, which keeps each distinct pair's texts and verdict across files), from
the decoded structs of the typed path as :data:`ShapePart` (event rows, texts as bytes with
offsets). :func:`shapes_table` orders them by event, keeps the rows whose texts pass
:func:`shapes_ok` (checked once per distinct pair of texts) and whose event is kept, and
gives the texts as Arrow ``string`` columns (UTF-8 checked by Arrow's cast; the compiled
scanner accepts ASCII texts only).
"""

from __future__ import annotations

import functools
import threading
from types import ModuleType
from typing import NamedTuple

import msgspec
import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A

#: (event rows int64, dims bytes uint8, dims offsets int64[rows+1], types bytes, offsets)
ShapePart = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@functools.lru_cache(maxsize=1 << 16)
def _dims_ok(dims: bytes) -> bool:
    """Whether ``Input Dims`` is a list of shapes (lists; a TensorList's items all lists)."""
    try:
        v = msgspec.json.decode(dims)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return False
    return isinstance(v, list) and all(
        isinstance(e, list) and (all(isinstance(x, list) for x in e)
                                 or not any(isinstance(x, list) for x in e))
        for e in v)


@functools.lru_cache(maxsize=1 << 16)
def _types_ok(types: bytes) -> bool:
    """Whether ``Input type`` is a JSON list in UTF-8."""
    try:
        ok = isinstance(msgspec.json.decode(types), list)
        types.decode()
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return False
    return ok


def shapes_ok(dims: bytes, types: bytes) -> bool:
    """Whether ``Input Dims`` is a list of shapes and ``Input type`` a list (or absent): other
    values are left out of ``shapes``, as unknown shapes, so that no consumer has to guard
    against them. Memoised per distinct text across files (the ranks of a job repeat the
    same few hundred)."""
    return _dims_ok(dims) and (not types or _types_ok(types))


#: shapes_ok of each distinct pair of texts seen in this process (a job repeats a few hundred)
_VERDICTS: dict[tuple[bytes, bytes], bool] = {}


def _verdicts(pairs: list[tuple[bytes, bytes]]) -> list[bool]:
    """:func:`shapes_ok` of each pair, memoised per pair."""
    known = _VERDICTS
    if len(known) > 1 << 16:
        known.clear()
    out = []
    for pair in pairs:
        v = known.get(pair)
        if v is None:
            v = known[pair] = shapes_ok(*pair)
        out.append(v)
    return out


#: a pair table past this many ids or bytes of texts starts again at the next file
_MAX_PAIRS = 1 << 18
_MAX_PAIR_BYTES = 64 << 20


class PairTable:
    """Distinct (``Input Dims``, ``Input type``) pairs of raw texts met by the compiled
    scanner in this thread, with their ids, texts and :func:`shapes_ok` verdicts (the arrays
    of :mod:`traincast.trace.readers.jsonfast_pairs`)."""

    def __init__(self) -> None:
        self.table = np.full(1024, -1, np.int64)
        self.hashes = np.empty(256, np.uint64)
        self.pos = np.empty((256, 3), np.int64)
        self.store = np.empty(64 << 10, np.uint8)
        self.counts = np.zeros(3, np.int64)
        self.verdict = np.empty(0, bool)

    def ids(self, k: ModuleType, b: np.ndarray, spans: np.ndarray, rows: np.ndarray
            ) -> np.ndarray:
        """Ids of the pairs of texts of ``rows`` of a scanned chunk (``spans`` columns 4-7
        into ``b``), adding the new ones."""
        gids = np.empty(rows.size, np.int64)
        at = 0
        while True:
            at = k.intern_pairs(b, spans, rows, at, gids, self.table, self.hashes, self.pos,
                                self.store, self.counts)
            if at == rows.size:
                return gids
            r = rows[at]
            need = int(self.counts[1]) + sum(max(int(spans[r, c + 1] - spans[r, c]), 0)
                                             for c in (4, 6) if spans[r, c] >= 0)
            n = int(self.counts[0])
            if n >= self.hashes.size:
                self.hashes = np.resize(self.hashes, 2 * self.hashes.size)
                self.pos = np.resize(self.pos, (2 * self.pos.shape[0], 3))
            if need > self.store.size:
                self.store = np.resize(self.store, max(2 * self.store.size, need))
            if 2 * (n + 1) > self.table.size:
                self.table = np.full(2 * self.table.size, -1, np.int64)
                self.counts[2] = 0  # the kernel places the ids in the new table

    def verdicts(self, gids: np.ndarray) -> np.ndarray:
        """:func:`shapes_ok` of the pairs ``gids`` (bool), checked once per pair."""
        n, have = int(self.counts[0]), self.verdict.size
        if have < n:
            st, pos = self.store, self.pos
            new = [shapes_ok(st[pos[g, 0]:pos[g, 1]].tobytes(), st[pos[g, 1]:pos[g, 2]].tobytes())
                   for g in range(have, n)]
            self.verdict = np.concatenate([self.verdict, np.array(new, bool)])
        return self.verdict[gids]

    def texts(self, k: ModuleType, gids: np.ndarray, which: int) -> tuple[np.ndarray,
                                                                           np.ndarray]:
        """The texts ``which`` (0 dims, 1 types) of ``gids``: bytes and int64 offsets."""
        return k.gather_pairs(self.store, self.pos, gids, which)


class PairPart(NamedTuple):
    """Rows of the compiled scanner: event rows, their pair ids in ``table``."""

    rows: np.ndarray
    gids: np.ndarray
    table: PairTable
    k: ModuleType

    def bytes_part(self) -> ShapePart:
        """The same rows as a :data:`ShapePart`."""
        d, doff = self.table.texts(self.k, self.gids, 0)
        t, toff = self.table.texts(self.k, self.gids, 1)
        return self.rows, d, doff, t, toff


_LOCAL = threading.local()


def pair_table(new_file: bool) -> PairTable:
    """This thread's :class:`PairTable`; a new one for a ``new_file`` once it is large."""
    t = getattr(_LOCAL, "table", None)
    if t is None or new_file and (t.counts[0] > _MAX_PAIRS or t.counts[1] > _MAX_PAIR_BYTES):
        t = _LOCAL.table = PairTable()
    return t


def _strings(data: np.ndarray, off: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.string(), off.size - 1,
                                 [None, pa.py_buffer(off.astype(np.int32)), pa.py_buffer(data)])


def _pairs_table(parts: list[PairPart], old_to_new: np.ndarray) -> pa.Table | None:
    """:func:`shapes_table` of parts of one pair table, or None past 2 GiB of texts."""
    if len(parts) == 1:  # (one chunk) its rows are in order already (np.flatnonzero)
        idx, gids = parts[0].rows, parts[0].gids
    else:
        idx = np.concatenate([p.rows for p in parts])
        gids = np.concatenate([p.gids for p in parts])
        order = np.argsort(idx, kind="stable")
        if (np.diff(order) < 0).any():
            idx, gids = idx[order], gids[order]
    new = old_to_new[idx]
    t, k = parts[0].table, parts[0].k
    keep = np.flatnonzero(t.verdicts(gids) & (new >= 0))
    dims, dims_off = t.texts(k, gids[keep], 0)
    types, types_off = t.texts(k, gids[keep], 1)
    if dims_off[-1] >= 2**31 or types_off[-1] >= 2**31:
        return None
    return pa.Table.from_arrays([A.from_numpy(new[keep]), _strings(dims, dims_off),
                                 _strings(types, types_off)],
                                names=["event", "input_dims", "input_types"])


def part_of_rows(rows: list[tuple[int, bytes, bytes]]) -> ShapePart:
    """A part from (event row, dims text, types text) tuples."""
    idx = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    out = [idx]
    for j in (1, 2):
        texts = [r[j] for r in rows]
        off = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)), out=off[1:])
        out += [np.frombuffer(b"".join(texts), np.uint8), off]
    return out[0], out[1], out[2], out[3], out[4]


def _concat(parts: list[ShapePart], j: int) -> tuple[np.ndarray, np.ndarray]:
    """Texts ``j`` (1: dims, 3: types) of every part, one after the other."""
    data = np.concatenate([p[j] for p in parts])
    sizes = np.concatenate([np.diff(p[j + 1]) for p in parts])
    off = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    return data, off


def shapes_table(parts: list[ShapePart | PairPart], old_to_new: np.ndarray) -> pa.Table:
    """The ``shapes`` table: (new event row, ``Input Dims`` text, ``Input type`` text) of the
    kept events whose texts pass :func:`shapes_ok`, in the order of the events in the file.

    Raises:
        UnicodeDecodeError: a kept text is not UTF-8.
    """
    parts = [p for p in parts if p[0].size]
    if not parts:
        empty = A.strings([])
        return pa.Table.from_arrays([A.from_numpy(np.empty(0, np.int64)), empty, empty],
                                    names=["event", "input_dims", "input_types"])
    pairs = [p for p in parts if isinstance(p, PairPart)]
    if len(pairs) == len(parts) and all(p.table is pairs[0].table for p in pairs):
        got = _pairs_table(pairs, old_to_new)
        if got is not None:
            return got
    parts = [p.bytes_part() if isinstance(p, PairPart) else p for p in parts]
    idx = np.concatenate([p[0] for p in parts])
    dims, types = _concat(parts, 1), _concat(parts, 3)
    order = np.argsort(idx, kind="stable")
    if (np.diff(order) < 0).any():  # merged begin/end events come after later chunks
        idx = idx[order]
    else:
        order = None
    new = old_to_new[idx]
    dtexts, ttexts = _texts(*dims, order), _texts(*types, order)
    rows = list(zip(dtexts, ttexts, strict=True))
    distinct = list(dict.fromkeys(rows))
    verdict = dict(zip(distinct, _verdicts(distinct), strict=True))
    ok = np.fromiter(map(verdict.__getitem__, rows), bool, len(rows))
    keep = np.flatnonzero(ok & (new >= 0))
    cols = [_text_column([texts[i] for i in keep.tolist()], large=int(col[1][-1]) >= 2**31)
            for texts, col in ((dtexts, dims), (ttexts, types))]
    return pa.Table.from_arrays([A.from_numpy(new[keep]), *cols],
                                names=["event", "input_dims", "input_types"])


def _texts(data: np.ndarray, off: np.ndarray, order: np.ndarray | None) -> list[bytes]:
    """Row ``i`` of bytes ``data`` split at int64 ``off`` (rows+1), rows taken in ``order``
    (all, as they are, when None)."""
    raw = data.tobytes()
    o = off.tolist()
    texts = [raw[a:b] for a, b in zip(o[:-1], o[1:], strict=True)]
    return texts if order is None else [texts[i] for i in order.tolist()]


def _text_column(texts: list[bytes], large: bool) -> pa.Array:
    """A ``string`` column (``large_string`` when ``large``) of UTF-8 ``texts``.

    Raises:
        UnicodeDecodeError: a text is not UTF-8 (each distinct text is checked).
    """
    for t in set(texts):
        try:
            t.decode()
        except UnicodeDecodeError:  # read_kineto reports it as text that is not UTF-8
            raise UnicodeDecodeError("utf-8", b"", 0, 1, "invalid UTF-8 in Input Dims or "
                                     "Input type") from None
    n = len(texts)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, texts), np.int64, n), out=offsets[1:])
    if large:
        return pa.Array.from_buffers(pa.large_string(), n, [
            None, pa.py_buffer(offsets), pa.py_buffer(b"".join(texts))])
    return pa.Array.from_buffers(pa.string(), n, [
        None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(texts))])
