"""Reading the entries of :mod:`traincast.trace.cache` (layout in its docstring): the
manifest, and the tables of a record, each block checked (CRC-32, rows, columns against the
manifest and, for ``events`` / ``shapes``, the canonical schema; a damaged entry raises
``ValueError``). :func:`read_deferred` checks a table's blocks but decompresses them only on
first use (:class:`~traincast.trace.traceset.Deferred`): a job's ``shapes`` stay in the entry
(0 bytes in memory instead of 84 MiB at 1,024 ranks) until something reads them; a reader of some
columns (:meth:`~traincast.trace.traceset.Deferred.columns`) decompresses only the blocks
holding them.

A deferred table holds none of its bytes in memory: its blocks are read and checked when the
entry is read, then only their places are kept with a duplicate of the reader's file
descriptor (:class:`HeldEntry`; from :data:`HOLD_MIN_BYTES` compressed bytes on), from
which they are read again (positional reads,
``os.pread``) and checked again when the table is made. The descriptor names the file that
was read even after a writer's rename (``os.replace``) or a trim deleted it; a block whose
bytes changed since (someone wrote into the file in place) raises
:class:`~traincast.errors.TraceFormatError` naming the entry. Where ``os.pread`` is missing
the blocks are kept in memory as read.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Any

import msgspec
import pyarrow as pa
from isal import isal_zlib  # CRC-32 as zlib's, ~3x faster (ISA-L)

from traincast.errors import TraceFormatError
from traincast.trace.cache_key import CACHE_SCHEMA
from traincast.trace.schema import EVENTS_SCHEMA, NARROW_INT_COLUMNS, SHAPES_SCHEMA
from traincast.trace.traceset import Deferred

#: last bytes of every entry file
_MAGIC = b"TCACHE03"
#: one LZ4 block per table or column (Arrow's per-buffer IPC compression costs ~20 µs per
#: buffer: 1.2 s of decompression calls for the 60,000 buffers of 1,024 ranks)
_CODEC = "lz4_raw"


def _type_name(t: pa.DataType) -> str:
    """A type's name, list item names left out (stable across writers and Arrow versions)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)


def _schema_list(schema: pa.Schema) -> list[list[str]]:
    """A schema as JSON: ``[[column, type], ...]``."""
    return [[f.name, _type_name(f.type)] for f in schema]


def _plain(t: pa.DataType) -> pa.DataType:
    """The value type of a dictionary column (the readers dictionary-encode names)."""
    return t.value_type if pa.types.is_dictionary(t) else t


#: the canonical schema each cached table of that name must hold (at least these columns)
_CANONICAL: dict[str, pa.Schema] = {"events": EVENTS_SCHEMA, "shapes": SHAPES_SCHEMA}


def _read_manifest(mm: Any, key: str) -> dict[str, Any]:
    """The manifest at the end of an entry (open file ``mm``), checked against ``key``.

    Raises:
        ValueError: not an entry, damaged, or another key's or schema's."""
    size = mm.size()
    mm.seek(size - 16)
    tail = mm.read(16)
    if tail[8:] != _MAGIC:
        raise ValueError("not a traincast cache entry")
    n = int.from_bytes(tail[:8], "little")
    if not 0 < n <= size - 16:
        raise ValueError("manifest length out of range")
    mm.seek(size - 16 - n)
    try:
        manifest = msgspec.json.decode(mm.read(n))
    except msgspec.DecodeError:
        raise ValueError("manifest is not JSON") from None
    if not isinstance(manifest, dict):
        raise ValueError("manifest is not a JSON object")
    if manifest.get("schema") != CACHE_SCHEMA or manifest.get("key") != key:
        raise ValueError("manifest does not match its key")
    return manifest


def _read_blocks(mm: Any, name: str, blocks: list[list[int]]) -> list[tuple[Any, int, int]]:
    """(compressed bytes, rows, size uncompressed) of each block, its CRC-32 checked."""
    out = []
    for offset, length, n_rows, crc, raw in blocks:
        mm.seek(int(offset))
        data = mm.read_buffer(int(length))
        if isal_zlib.crc32(data) != crc:  # LZ4 has no checksum: damaged bytes decode silently
            raise ValueError(f"{name}: CRC-32 differs from the manifest's")
        out.append((data, int(n_rows), int(raw)))
    if not out:
        raise ValueError(f"{name}: no data")
    return out


class HeldEntry:
    """An entry's file kept open for its deferred tables (module docstring): a duplicate of
    the descriptor of ``file`` (an open :class:`pyarrow.NativeFile`), closed when no block
    holds it any more."""

    def __init__(self, file: Any, path: str) -> None:
        self.path = path
        self.fd = os.dup(file.fileno())
        weakref.finalize(self, os.close, self.fd)

    def read(self, offset: int, length: int, crc: int, name: str) -> bytes:
        """``length`` bytes at ``offset``, their CRC-32 ``crc``.

        Raises:
            TraceFormatError: they differ from what was read before (the entry changed)."""
        data = os.pread(self.fd, length, offset)
        if len(data) != length or isal_zlib.crc32(data) != crc:
            raise TraceFormatError(f"cache entry changed on disk since it was read ({name} "
                                   f"block at byte {offset}); run the command again",
                                   self.path)
        return data


@dataclass(frozen=True)
class _HeldBlock:
    """A checked block of a deferred table, read again from ``entry`` when decoded."""

    entry: HeldEntry
    offset: int
    length: int
    crc: int
    name: str

    def read(self) -> bytes:
        return self.entry.read(self.offset, self.length, self.crc, self.name)


def _decode_group(name: str, parts: list[tuple[Any, int, int]]) -> pa.Table:
    """The columns of one group from its blocks (one block: no copy of the data)."""
    tables = []
    for data, n_rows, raw in parts:
        if isinstance(data, _HeldBlock):
            data = data.read()
        stream = pa.decompress(data, decompressed_size=raw, codec=_CODEC, asbytes=False)
        part = pa.ipc.open_stream(stream).read_all()
        del stream
        if part.num_rows != n_rows:
            raise ValueError(f"{name}: {part.num_rows} rows, manifest says {n_rows}")
        tables.append(part)
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()


def _plain_name(t: str) -> str:
    """:func:`_plain` of a type by its name (``dictionary<values=string, ...>``: string)."""
    head = "dictionary<values="
    return t[len(head):].split(",", 1)[0] if t.startswith(head) else t


def _check_schema(name: str, have: list[list[str]] | None) -> None:
    """``have`` (a schema as :func:`_schema_list` writes it) holds the canonical columns of
    table ``name``; raises ValueError if not."""
    canonical = _CANONICAL.get(name)
    if canonical is None:
        return
    types = {c: _plain_name(t) for c, t in (have or [])}
    bad = [f.name for f in canonical if types.get(f.name) != _type_name(_plain(f.type))
           and not (name == "events" and f.name in NARROW_INT_COLUMNS
                    and types.get(f.name) == "int32")]
    if bad:
        raise ValueError(f"{name}: columns {bad} missing or of another type")


def _table(name: str, groups: list[tuple[list[str], list[tuple[Any, int, int]]]],
           schema: list[list[str]] | None, rows: int | None) -> pa.Table:
    fields, arrays = [], []  # one block: arrays in its decompressed buffer (no copy)
    for cols, parts in groups:
        g = _decode_group(name, parts)
        if g.column_names != cols:
            raise ValueError(f"{name}: columns differ from the manifest's")
        fields.extend(g.schema)
        arrays.extend(c.chunk(0) if c.num_chunks == 1 else c for c in g.columns)
        del g
    t = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    if rows is not None and t.num_rows != rows:
        raise ValueError(f"{name}: {t.num_rows} rows, manifest says {rows}")
    if _schema_list(t.schema) != schema:
        raise ValueError(f"{name}: columns differ from the manifest's")
    return t


def _columns(names: tuple[str, ...], name: str,
             groups: list[tuple[list[str], list[tuple[Any, int, int]]]],
             schema: list[list[str]] | None, rows: int | None) -> pa.Table:
    """The columns ``names`` of the table :func:`_table` makes, only the blocks holding them
    decompressed (the same checks, on those columns)."""
    want = [(cols, parts) for cols, parts in groups if set(cols) & set(names)]
    t = _table(name, want, None if schema is None else
               [c for c in schema if c[0] in {n for cols, _ in want for n in cols}], rows)
    return t.select(list(names))


def _read_tables(mm: Any, meta: dict[str, Any], defer: tuple[str, ...] = (),
                 held: HeldEntry | None = None) -> dict[str, pa.Table]:
    """The tables one record's manifest entry lists, each checked (module docstring); those
    named in ``defer`` as :class:`~traincast.trace.traceset.Deferred` (bytes read and
    checked now, decompressed on first use: read again from ``held`` then, or kept in
    memory without it).

    Raises:
        ValueError: a check failed."""
    out: dict[str, Any] = {}
    schemas = meta.get("schemas") or {}
    rows = meta.get("rows") or {}
    for name, groups in meta["tables"].items():
        schema = schemas.get(name)
        _check_schema(name, schema)
        parts = [(cols, _read_blocks(mm, name, blocks)) for cols, blocks in groups]
        if name in defer and held is not None:  # checked: only their places are kept
            parts = [(cols, [(_HeldBlock(held, int(b[0]), int(b[1]), b[3], name), rows_, raw)
                             for b, (_, rows_, raw) in zip(blocks, read, strict=True)])
                     for (cols, blocks), (_, read) in zip(groups, parts, strict=True)]
        if name in defer:
            out[name] = Deferred(_table, name, parts, schema, rows.get(name), part=_columns,
                                 rows=rows.get(name))
        else:
            out[name] = _table(name, parts, schema, rows.get(name))
        del parts
    return out


#: compressed bytes of an entry's deferred tables from which their blocks are read again from
#: the entry's file held open rather than kept in memory (below it a descriptor per loaded
#: job would cost more than the bytes: a process holding many small jobs would run out of
#: descriptors before memory)
HOLD_MIN_BYTES = 1 << 20


def read_deferred(mm: Any, meta: dict[str, Any], defer: tuple[str, ...],
                  path: str | None = None) -> dict[str, Any]:
    """:func:`_read_tables` with the tables named in ``defer`` deferred: their blocks read
    again, when first used, from ``mm``'s file held open (:class:`HeldEntry`; ``path`` names
    it in errors) where they are :data:`HOLD_MIN_BYTES` or more and the platform reads at an
    offset (``os.pread``), else kept in memory."""
    size = sum(int(b[1]) for name in defer for _, blocks in meta["tables"].get(name, ())
               for b in blocks)
    held = HeldEntry(mm, path or "cache entry") if hasattr(os, "pread") and \
        size >= HOLD_MIN_BYTES else None
    return _read_tables(mm, meta, defer, held)
