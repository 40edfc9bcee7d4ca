"""Columnar cache of decoded trace files, so a second ``traincast.load`` of a run is cheap.

What is cached: the per-file result of a reader (:func:`~traincast.trace.readers.kineto.
read_kineto` gives one :class:`~traincast.trace.readers.kineto.KinetoFile`,
:func:`~traincast.trace.readers.nsys.read_nsys` one :class:`~traincast.trace.readers.nsys.
NsysFile` per profiled process), i.e. everything before ranks are assigned and the TraceSet
is assembled (iterations, collectives, execution-trace linking are recomputed on every load:
they depend on ``iteration_marker``, ``rank_map`` and the other files).

Layout: ``<root>/v<CACHE_SCHEMA>/<key[:2]>/<key>.arrows``, one file per trace file: every
Arrow table of every record as an Arrow IPC stream compressed as one LZ4 block, one after the
other, then the manifest (JSON: scalar metadata of every record -- distributed info, device
properties, threads, sizes -- and each table's byte range, row count, CRC-32 and size
uncompressed), then the manifest's length (8 bytes, little endian) and the magic
``TCACHE02``. One file, read through a memory map, costs well under a millisecond (four
Parquet files and a JSON file per trace cost ~3 ms: 1,024 ranks took 3 s to read back). An
entry is written to a temporary file next to it and renamed into place (``os.replace``), so
readers never see half an entry.

Key: blake2b (160 bits) of the file's bytes (read in 1 MiB pieces; about 10 ms for a 3 MB
gzipped 54 MB trace), its size, ``traincast.__version__``, :data:`CACHE_SCHEMA` and a
fingerprint of the reader source code (so an edit of a reader in a development checkout
invalidates older entries even without a version bump). The file's name and path are not part
of the key: the same bytes under another name hit the same entry (the record's ``path`` is set
to the file being loaded).

Sharing: entries get the permissions of the user's umask (like any file they create), so a
cache folder that a group can write (``chmod g+ws``, ``umask 002``) is shared by its members:
an entry one of them wrote is a hit for the others. With the common ``umask 022`` others can
read but not replace entries (an unreadable one is then re-parsed on every load).

Safety: no pickle; Arrow IPC and JSON only. A missing, truncated or otherwise unreadable entry
is ignored (the file is parsed again and the entry rewritten); a cache that cannot be written
(read-only or full disk) is skipped silently (logged at debug level). Metadata that does not
survive a JSON round trip unchanged is not cached. Each table's columns are checked against
the manifest and, for ``events`` and ``shapes``, against the canonical schema; an entry that
differs is parsed again and replaced. A cached gzipped trace whose inflated size
exceeds the current ``max_inflate_bytes`` limit is re-read, so the limit still refuses it.

Where: ``load(cache=PATH)``, else ``$TRAINCAST_CACHE_DIR``, else ``$XDG_CACHE_HOME/traincast``,
else ``~/.cache/traincast``. ``TRAINCAST_CACHE_DIR=off`` (or ``0``, ``none``, ``false``)
disables caching, as does ``load(cache=False)``. Size: about 1x to 2x the gzipped trace
(LZ4 Arrow). Nothing is evicted; delete the
folder (:func:`clear`) to reclaim space.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import zlib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from traincast.trace.readers.kineto import KinetoFile
from traincast.trace.readers.nsys import NsysFile
from traincast.trace.schema import EVENTS_SCHEMA, SHAPES_SCHEMA

__all__ = ["CACHE_SCHEMA", "TraceCache", "cache_dir", "clear", "file_key", "resolve"]

log = logging.getLogger(__name__)

#: bump when the entry layout or the meaning of a cached field changes
CACHE_SCHEMA = 2
#: last bytes of every entry file
_MAGIC = b"TCACHE02"
#: one LZ4 block per table (Arrow's per-buffer IPC compression costs ~20 µs per buffer:
#: 1.2 s of decompression calls for the 60,000 buffers of 1,024 ranks)
_CODEC = "lz4_raw"
_CHUNK = 1 << 20
_OFF = {"", "0", "off", "none", "false", "no"}
_RECORD_TYPES: dict[str, type[KinetoFile]] = {"kineto": KinetoFile, "nsys": NsysFile}
#: source files whose code decides what a reader returns (fingerprinted into the key)
_CODE_FILES = ("readers/*.py", "arrow.py", "schema.py", "families.py", "cache.py")


def cache_dir() -> Path | None:
    """The default cache folder, or None when ``TRAINCAST_CACHE_DIR`` disables caching."""
    from traincast.errors import ParameterError

    env = os.environ.get("TRAINCAST_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in _OFF:
            return None
        try:
            return Path(env).expanduser()
        except RuntimeError as exc:  # ~user of a user that does not exist
            raise ParameterError(f"TRAINCAST_CACHE_DIR={env!r}: {exc}") from None
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    except RuntimeError as exc:
        raise ParameterError(f"XDG_CACHE_HOME={xdg!r}: {exc} (set TRAINCAST_CACHE_DIR)"
                             if xdg else f"no home directory for the trace cache ({exc}); set "
                             "TRAINCAST_CACHE_DIR") from None
    return base / "traincast"


def resolve(cache: bool | str | os.PathLike[str] | None) -> TraceCache | None:
    """``load(cache=...)`` -> a TraceCache, or None for no caching."""
    if cache is False:
        return None
    root = cache_dir() if cache is None or cache is True else Path(cache).expanduser()
    return TraceCache(root) if root is not None else None


@lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    import traincast

    here = Path(__file__).resolve().parent
    h = hashlib.blake2b(digest_size=10)
    h.update(f"{traincast.__version__}|{CACHE_SCHEMA}".encode())
    for pattern in _CODE_FILES:
        for f in sorted(here.glob(pattern)):
            h.update(f.name.encode())
            try:
                h.update(f.read_bytes())
            except OSError:  # pragma: no cover - e.g. a zipped install: version only
                pass
    return h.hexdigest()


def file_key(path: Path) -> str:
    """Cache key of a trace file: content hash + size + traincast version + reader code."""
    h = hashlib.blake2b(digest_size=20)
    size = 0
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
            size += len(block)
    h.update(f"|{size}|{_code_fingerprint()}".encode())
    return h.hexdigest()


def clear(root: Path | None = None) -> int:
    """Delete the cache folder (default: :func:`cache_dir`); returns the bytes freed."""
    root = root if root is not None else cache_dir()
    if root is None or not root.is_dir():
        return 0
    n = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    shutil.rmtree(root, ignore_errors=True)
    return n


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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


def _json_exact(value: Any) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


class TraceCache:
    """Get and put the decoded records of one trace file, by :func:`file_key`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def _entry(self, key: str) -> Path:
        return self.root / f"v{CACHE_SCHEMA}" / key[:2] / f"{key}.arrows"

    # ------------------------------------------------------------------ read
    def get(self, path: Path, key: str) -> list[KinetoFile] | None:
        """The cached records of ``path`` (None on a miss or an unreadable entry)."""
        entry = self._entry(key)
        try:
            with pa.memory_map(str(entry), "r") as mm:
                size = mm.size()
                mm.seek(size - 16)
                tail = mm.read(16)
                if tail[8:] != _MAGIC:
                    raise ValueError("not a traincast cache entry")
                n = int.from_bytes(tail[:8], "little")
                if not 0 < n <= size - 16:
                    raise ValueError("manifest length out of range")
                mm.seek(size - 16 - n)
                manifest = json.loads(mm.read(n).decode("utf-8"))
                if manifest.get("schema") != CACHE_SCHEMA or manifest.get("key") != key:
                    raise ValueError("manifest does not match its key")
                records = [self._read_record(mm, r, path) for r in manifest["records"]]
        except FileNotFoundError:
            self.misses += 1
            return None
        except Exception as exc:  # noqa: BLE001 - any damage to an entry means "parse again"
            log.debug("traincast cache: ignoring unreadable entry %s (%s)", entry, exc)
            self.misses += 1
            return None
        self.hits += 1
        return records

    @staticmethod
    def _read_record(mm: Any, meta: dict[str, Any], path: Path) -> KinetoFile:
        cls = _RECORD_TYPES[meta["type"]]
        kw: dict[str, Any] = {"path": path}
        schemas = meta.get("schemas") or {}
        for name, (offset, length, n_rows, crc, raw) in meta["tables"].items():
            mm.seek(int(offset))
            data = mm.read_buffer(int(length))
            if zlib.crc32(data) != crc:  # LZ4 has no checksum: damaged bytes decode silently
                raise ValueError(f"{name}: CRC-32 differs from the manifest's")
            stream = pa.decompress(data, decompressed_size=int(raw), codec=_CODEC,
                                   asbytes=False)
            t = pa.ipc.open_stream(stream).read_all()
            if t.num_rows != n_rows:
                raise ValueError(f"{name}: {t.num_rows} rows, manifest says {n_rows}")
            if _schema_list(t.schema) != schemas.get(name):
                raise ValueError(f"{name}: columns differ from the manifest's")
            canonical = _CANONICAL.get(name)
            if canonical is not None:
                have = {f.name: _plain(f.type) for f in t.schema}
                bad = [f.name for f in canonical if have.get(f.name) != _plain(f.type)]
                if bad:
                    raise ValueError(f"{name}: columns {bad} missing or of another type")
            kw[name] = t
        kw["threads"] = {(int(p), int(t)): str(s) for p, t, s in meta["threads"]}
        kw.update(meta["scalars"])
        return cls(**kw)

    # ----------------------------------------------------------------- write
    def put(self, key: str, records: Sequence[KinetoFile]) -> bool:
        """Store the records of one file; False if they could not be cached."""
        try:
            metas = [self._record_meta(r) for r in records]
        except ValueError as exc:
            log.debug("traincast cache: not caching (%s)", exc)
            return False
        entry = self._entry(key)
        tmp: Path | None = None
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{key[:8]}-", dir=entry.parent)
            tmp = Path(name)
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from the group
            with os.fdopen(fd, "wb") as fh:
                sink = pa.PythonFile(fh, mode="w")
                pos = 0
                for r, meta in zip(records, metas, strict=True):
                    for name in list(meta["tables"]):
                        t = getattr(r, name)
                        buf = pa.BufferOutputStream()
                        with pa.ipc.new_stream(buf, t.schema) as w:
                            w.write_table(t)
                        raw = buf.getvalue()
                        data = pa.compress(raw, codec=_CODEC, asbytes=False)
                        sink.write(data)
                        meta["tables"][name] = [pos, data.size, t.num_rows,
                                                zlib.crc32(data), raw.size]
                        pos += data.size
                manifest = json.dumps({"schema": CACHE_SCHEMA, "key": key,
                                       "records": metas}).encode("utf-8")
                sink.write(manifest)
                sink.write(len(manifest).to_bytes(8, "little") + _MAGIC)
            try:
                os.replace(tmp, entry)  # atomic; a concurrent writer's identical entry loses
            except OSError:
                return False
            tmp = None
            self.writes += 1
            return True
        except OSError as exc:
            log.debug("traincast cache: cannot write %s (%s)", entry, exc)
            return False
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)

    @staticmethod
    def _record_meta(r: KinetoFile) -> dict[str, Any]:
        kind = next((k for k, c in _RECORD_TYPES.items() if type(r) is c), None)
        if kind is None:
            raise ValueError(f"unknown record type {type(r).__name__}")
        tables: dict[str, int] = {}
        scalars: dict[str, Any] = {}
        for f in dataclasses.fields(r):
            v = getattr(r, f.name)
            if f.name in ("path", "threads"):
                continue
            if isinstance(v, pa.Table):
                tables[f.name] = v.num_rows
            elif _json_exact(v):
                scalars[f.name] = v
            else:
                raise ValueError(f"field {f.name} does not round-trip through JSON")
        threads = [[int(p), int(t), str(s)] for (p, t), s in r.threads.items()]
        schemas = {name: _schema_list(getattr(r, name).schema) for name in tables}
        return {"type": kind, "tables": tables, "schemas": schemas, "scalars": scalars,
                "threads": threads}
