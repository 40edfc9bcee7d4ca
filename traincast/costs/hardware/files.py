"""Reading catalog files (TOML, format in :mod:`traincast.costs.hardware`): validation,
merging a user file over the packaged ``traincast/costs/data/hardware.toml``, and
:func:`load_catalog`.

Raises :class:`~traincast.errors.ParameterError` naming the file and the entry for a malformed
file (bad TOML, an unknown or missing field, a zero, negative or non-numeric number, a number
without a source).
"""

from __future__ import annotations

import difflib
import functools
import math
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from traincast.costs.hardware.catalog import _KINDS, Catalog
from traincast.costs.hardware.devices import DTYPES, GPU, Link, Node, _norm
from traincast.errors import ParameterError, TraincastError
from traincast.util.fileio import read_regular

#: most bytes of one catalog file (the shipped ones hold kilobytes)
_MAX_FILE_BYTES = 16 << 20

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_LINK_KINDS = ("gpu-gpu", "host", "network")

# Field specs: name -> (type, required-for-a-new-entry, numeric-needing-a-source).
_STR, _INT, _FLOAT, _STRLIST, _TABLE = "str", "int", "float", "list[str]", "table"
_FIELDS: dict[str, dict[str, tuple[str, bool, bool]]] = {
    "gpu": {
        "vendor": (_STR, True, False),
        "form_factor": (_STR, False, False),
        "patterns": (_STRLIST, False, False),
        "aliases": (_STRLIST, False, False),
        "peak_tflops": (_TABLE, True, True),
        "hbm_gbps": (_FLOAT, True, True),
        "hbm_gb": (_FLOAT, True, True),
        "l2_mb": (_FLOAT, False, True),
        "sm_count": (_INT, False, True),
        "min_kernel_ns": (_FLOAT, False, True),
        "launch_latency_ns": (_FLOAT, False, True),
        "hbm_efficiency": (_FLOAT, False, True),
        "gemm_efficiency": (_FLOAT, False, True),
        "host_link": (_STR, False, True),
        "note": (_STR, False, False),
    },
    "link": {
        "kind": (_STR, True, False),
        "scope": (_STR, True, False),
        "gbps_per_direction": (_FLOAT, True, True),
        "links": (_INT, False, True),
        "latency_us": (_FLOAT, False, True),
        "aliases": (_STRLIST, False, False),
        "note": (_STR, False, False),
    },
    "node": {
        "gpu": (_STR, True, False),
        "gpus_per_node": (_INT, True, True),
        "intra_link": (_STR, True, False),
        "intra_links_per_gpu": (_INT, False, True),
        "inter_link": (_STR, True, False),
        "nics_per_node": (_INT, True, True),
        "topology": (_STR, False, False),
        "aliases": (_STRLIST, False, False),
        "note": (_STR, False, False),
    },
}
_META = ("source", "sources")
#: fields that are fractions (0 < x <= 1)
_FRACTIONS = ("hbm_efficiency", "gemm_efficiency")


@dataclass
class _Record:
    """One entry while files are merged: raw fields plus a source per number."""

    kind: str
    name: str
    fields: dict[str, Any]
    sources: dict[str, str]
    source: str
    path: str


def _fail(path: str, kind: str, name: str, message: str) -> ParameterError:
    return ParameterError(f"{kind} {name!r}: {message}", path=path)


def _source_text(value: Any, path: str, kind: str, name: str, what: str) -> str:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        value = "; ".join(v.strip() for v in value)
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, kind, name, f"{what} must be a non-empty string (title + URL or id)")
    return value.strip()


def _check_number(value: Any, path: str, kind: str, name: str, what: str, integer: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, kind, name, f"{what} must be a number, got {value!r}")
    if integer and not (isinstance(value, int) or float(value).is_integer()):
        raise _fail(path, kind, name, f"{what} must be a whole number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise _fail(path, kind, name, f"{what} must be positive, got {value!r}")
    return int(value) if integer else float(value)


def _parse_entry(kind: str, name: str, raw: Any, path: str) -> _Record:
    """Validate one entry of one file; every number it sets must have a source."""
    if not isinstance(raw, dict):
        raise _fail(path, kind, name, "must be a table")
    spec = _FIELDS[kind]
    known = list(spec) + list(_META)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=2)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise _fail(path, kind, name, f"unknown field {key!r}{hint}")
    source = _source_text(raw["source"], path, kind, name, "source") if "source" in raw else ""
    per_value: dict[str, str] = {}
    if "sources" in raw:
        if not isinstance(raw["sources"], dict):
            raise _fail(path, kind, name, 'sources must be a table of field = "source"')
        for key, value in raw["sources"].items():
            head, _, dtype = key.partition(".")
            if head not in spec or not spec[head][2] or (dtype and head != "peak_tflops"):
                raise _fail(path, kind, name, f"sources names unknown value {key!r}")
            if dtype and dtype not in DTYPES:
                raise _fail(path, kind, name, f"sources names unknown dtype {dtype!r}")
            per_value[key] = _source_text(value, path, kind, name, f"sources.{key}")

    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, value in raw.items():
        if key in _META:
            continue
        ftype, _, numeric = spec[key]
        if ftype == _STR:
            if not isinstance(value, str):
                raise _fail(path, kind, name, f"{key} must be a string, got {value!r}")
            fields[key] = value.strip()
        elif ftype == _STRLIST:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(path, kind, name, f"{key} must be a list of strings")
            fields[key] = tuple(value)
        elif ftype == _TABLE:  # peak_tflops
            if not isinstance(value, dict) or not value:
                raise _fail(path, kind, name, f"{key} must be a non-empty table dtype = TFLOP/s")
            peaks: dict[str, float] = {}
            for dtype, number in value.items():
                if dtype not in DTYPES:
                    close = difflib.get_close_matches(dtype, DTYPES, n=2)
                    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
                    raise _fail(path, kind, name, f"unknown dtype {dtype!r} in {key}{hint}")
                what = f"{key}.{dtype}"
                peaks[dtype] = _check_number(number, path, kind, name, what, integer=False)
                src = per_value.get(what) or per_value.get(key) or source
                if not src:
                    raise _fail(path, kind, name, f"{what} has no source (add source or sources)")
                sources[what] = src
            fields[key] = peaks
        else:
            fields[key] = _check_number(value, path, kind, name, key, integer=ftype == _INT)
            if key in _FRACTIONS and fields[key] > 1:
                raise _fail(path, kind, name, f"{key} is a fraction (0..1], got {value!r}")
        if numeric and ftype != _TABLE:
            src = per_value.get(key) or source
            if not src:
                raise _fail(path, kind, name, f"{key} has no source (add source or sources.{key})")
            sources[key] = src
    if kind == "link" and "kind" in fields and fields["kind"] not in _LINK_KINDS:
        raise _fail(path, kind, name, f"kind must be one of {', '.join(_LINK_KINDS)}")
    for pattern in fields.get("patterns", ()):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _fail(path, kind, name, f"bad pattern {pattern!r}: {exc}") from None
    return _Record(kind, name, fields, sources, source, path)


def _read_file(path: Path) -> dict[str, dict[str, _Record]]:
    """Parse and validate one catalog file into records per kind (not yet merged)."""
    spath = str(path)
    try:
        data = tomllib.loads(read_regular(path, _MAX_FILE_BYTES).decode("utf-8"))
    except TraincastError as exc:  # a FIFO or a device (never read), or too large
        raise ParameterError(f"cannot read hardware catalog: {exc.message}",
                             path=spath) from None
    except FileNotFoundError:
        raise ParameterError("hardware catalog file not found", path=spath) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError(f"cannot read hardware catalog: {exc}", path=spath) from None
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError(f"bad TOML: {exc}", path=spath) from None
    out: dict[str, dict[str, _Record]] = {kind: {} for kind in _KINDS}
    for key, table in data.items():
        if key not in _KINDS:
            raise ParameterError(
                f"unknown section [{key}] (expected {', '.join(f'[{k}.NAME]' for k in _KINDS)})",
                path=spath,
            )
        if not isinstance(table, dict):
            raise ParameterError(f"[{key}] must hold tables [{key}.NAME]", path=spath)
        for name, raw in table.items():
            out[key][name] = _parse_entry(key, name, raw, spath)
    return out


def _merge(
    base: dict[str, dict[str, _Record]], extra: dict[str, dict[str, _Record]]
) -> dict[str, dict[str, _Record]]:
    """Entries of ``extra`` add to ``base`` or override the entry they name (or alias)."""
    merged = {kind: dict(records) for kind, records in base.items()}
    for kind in _KINDS:
        keys: dict[str, str] = {}
        for name, rec in merged[kind].items():
            for alias in rec.fields.get("aliases", ()):
                keys[_norm(alias)] = name
            keys[_norm(name)] = name
        for name, rec in extra[kind].items():
            target = keys.get(_norm(name))
            if target is None:
                merged[kind][name] = rec
                keys[_norm(name)] = name
                continue
            old = merged[kind][target]
            fields = dict(old.fields)
            sources = dict(old.sources)
            for key, value in rec.fields.items():
                if key == "peak_tflops":
                    fields[key] = {**old.fields.get(key, {}), **value}
                else:
                    fields[key] = value
            sources.update(rec.sources)
            changed = ", ".join(sorted(rec.sources)) or "descriptive fields"
            note = f"{changed} from {rec.path}" + (f": {rec.source}" if rec.source else "")
            merged[kind][target] = _Record(
                kind, target, fields, sources, f"{old.source}; overridden: {note}", rec.path
            )
    return merged


def _require(rec: _Record) -> None:
    for key, (_, required, _) in _FIELDS[rec.kind].items():
        if required and key not in rec.fields:
            raise _fail(rec.path, rec.kind, rec.name, f"missing field {key!r}")
    numeric = [k for k, (_, _, num) in _FIELDS[rec.kind].items() if num and k in rec.fields]
    if numeric and not rec.source and not rec.sources:
        raise _fail(rec.path, rec.kind, rec.name, "no source")


def _build(records: dict[str, dict[str, _Record]], files: tuple[str, ...]) -> Catalog:
    for kind in _KINDS:
        for rec in records[kind].values():
            _require(rec)
    gpus: dict[str, GPU] = {}
    for name, rec in records["gpu"].items():
        f = rec.fields
        gpus[name] = GPU(
            name=name,
            vendor=f["vendor"].lower(),
            peak_tflops=dict(f["peak_tflops"]),
            hbm_gbps=f["hbm_gbps"],
            hbm_gb=f["hbm_gb"],
            l2_mb=f.get("l2_mb"),
            sm_count=f.get("sm_count"),
            form_factor=f.get("form_factor", ""),
            patterns=tuple(f.get("patterns", ())),
            aliases=tuple(f.get("aliases", ())),
            source=rec.source or "see sources",
            sources=dict(rec.sources),
            note=f.get("note", ""),
            min_kernel_ns=f.get("min_kernel_ns"),
            launch_latency_ns=f.get("launch_latency_ns"),
            hbm_efficiency=f.get("hbm_efficiency"),
            gemm_efficiency=f.get("gemm_efficiency"),
            host_link=f.get("host_link", ""),
        )
    links: dict[str, Link] = {}
    for name, rec in records["link"].items():
        f = rec.fields
        links[name] = Link(
            name=name,
            kind=f["kind"],
            scope=f["scope"],
            gbps_per_direction=f["gbps_per_direction"],
            links=f.get("links"),
            latency_us=f.get("latency_us"),
            aliases=tuple(f.get("aliases", ())),
            source=rec.source or "see sources",
            sources=dict(rec.sources),
            note=f.get("note", ""),
        )
    partial = Catalog(gpus, links, {})
    for name, rec in records["gpu"].items():
        if "host_link" in rec.fields:
            try:
                link = partial.link(rec.fields["host_link"])
            except ParameterError as exc:
                raise _fail(rec.path, "gpu", name, f"host_link: {exc.message}") from None
            if link.kind != "host":
                raise _fail(rec.path, "gpu", name,
                            f"host_link {link.name!r} is a {link.kind} link, not a host link")
    nodes: dict[str, Node] = {}
    for name, rec in records["node"].items():
        f = rec.fields
        try:
            gpu = partial.gpu(f["gpu"])
            intra = partial.link(f["intra_link"])
            inter = partial.link(f["inter_link"])
        except ParameterError as exc:
            raise _fail(rec.path, "node", name, exc.message) from None
        nodes[name] = Node(
            name=name,
            gpu=gpu,
            gpus_per_node=f["gpus_per_node"],
            intra_link=intra,
            intra_links_per_gpu=f.get("intra_links_per_gpu", 1),
            inter_link=inter,
            nics_per_node=f["nics_per_node"],
            topology=f.get("topology", ""),
            aliases=tuple(f.get("aliases", ())),
            source=rec.source or "see sources",
            sources=dict(rec.sources),
            note=f.get("note", ""),
        )
    return Catalog(gpus, links, nodes, files)


def _packaged_path() -> Path:
    return Path(str(resources.files("traincast.costs").joinpath("data", "hardware.toml")))


@functools.lru_cache(maxsize=1)
def _packaged() -> tuple[dict[str, dict[str, _Record]], Catalog]:
    path = _packaged_path()
    records = _read_file(path)
    return records, _build(records, (str(path),))


def load_catalog(extra: str | Path | None = None) -> Catalog:
    """The packaged hardware catalog, plus the entries of a user file in the same format.

    Args:
        extra: a TOML file whose entries add to or override the packaged ones (see the module
            docstring for the format). None: the packaged catalog alone (read once, cached).

    Raises:
        ParameterError: the user file is missing or malformed; the message names the file and
            the entry.
    """
    records, catalog = _packaged()
    if extra is None:
        return catalog
    path = Path(extra)
    merged = _merge(records, _read_file(path))
    return _build(merged, (*catalog.files, str(path)))
