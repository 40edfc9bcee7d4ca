"""The ``shapes`` table of a Kineto file: ``Input Dims`` / ``Input type`` texts per event.

Rows come in parts of columns (event rows, texts as bytes with offsets), from the compiled
scanner (:mod:`traincast.trace.readers.kineto_fast`) or from the decoded structs of the typed
path; :func:`shapes_table` orders them by event, keeps the rows whose texts pass
:func:`shapes_ok` (checked once per distinct pair of texts) and whose event is kept, and
gives the texts as Arrow ``string`` columns (UTF-8 checked by Arrow's cast).
"""

from __future__ import annotations

import functools

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


def _binary(data: np.ndarray, off: np.ndarray) -> pa.Array:
    n = off.size - 1
    if off[-1] < 2**31:
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(off.astype(np.int32)),
                                                      pa.py_buffer(data)])
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(off),
                                                        pa.py_buffer(data)])


def _concat(parts: list[ShapePart], j: int) -> tuple[np.ndarray, np.ndarray]:
    """Texts ``j`` (1: dims, 3: types) of every part, one after the other."""
    data = np.concatenate([p[j] for p in parts])
    sizes = np.concatenate([np.diff(p[j + 1]) for p in parts])
    off = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    return data, off


def shapes_table(parts: list[ShapePart], old_to_new: np.ndarray) -> pa.Table:
    """The ``shapes`` table: (new event row, ``Input Dims`` text, ``Input type`` text) of the
    kept events whose texts pass :func:`shapes_ok`, in the order of the events in the file.

    Raises:
        UnicodeDecodeError: a kept text is not UTF-8.
    """
    parts = [p for p in parts if p[0].size]
    if not parts:
        empty = pa.array([], pa.string())
        return pa.Table.from_arrays([A.from_numpy(np.empty(0, np.int64)), empty, empty],
                                    names=["event", "input_dims", "input_types"])
    idx = np.concatenate([p[0] for p in parts])
    dims = _binary(*_concat(parts, 1))
    types = _binary(*_concat(parts, 3))
    order = np.argsort(idx, kind="stable")
    if (np.diff(order) < 0).any():  # merged begin/end events come after later chunks
        take_o = A.from_numpy(order)
        idx, dims, types = idx[order], dims.take(take_o), types.take(take_o)
    new = old_to_new[idx]
    de, te = dims.dictionary_encode(), types.dictionary_encode()
    di = A.to_numpy(de.indices).astype(np.int64)
    ti = A.to_numpy(te.indices).astype(np.int64)
    nt = max(len(te.dictionary), 1)
    pairs, inv = np.unique(di * nt + ti, return_inverse=True)
    dvals, tvals = de.dictionary.to_pylist(), te.dictionary.to_pylist()
    verdict = np.array(_verdicts([(dvals[p // nt], tvals[p % nt]) for p in pairs.tolist()]),
                       bool)
    ok = verdict[inv.reshape(-1)]
    keep = np.flatnonzero(ok & (new >= 0))
    take = A.from_numpy(keep)
    try:
        as_text = [col.take(take).cast(pa.string()) for col in (dims, types)]
    except pa.ArrowInvalid:  # read_kineto reports it as text that is not UTF-8
        raise UnicodeDecodeError("utf-8", b"", 0, 1, "invalid UTF-8 in Input Dims or "
                                 "Input type") from None
    return pa.Table.from_arrays([A.from_numpy(new[keep]), *as_text],
                                names=["event", "input_dims", "input_types"])
