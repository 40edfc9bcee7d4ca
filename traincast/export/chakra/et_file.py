"""Chakra ``.et`` files: length-delimited framing, reading, and the per-rank file names.

A file is a ``GlobalMetadata`` message, then one ``Node`` message per node, each preceded by
its length as a base-128 varint (the framing of Chakra's ``encode_message``/
``decode_message``, ``src/third_party/utils/protolib.py``); a zero length ends it. Files may
be gzip-compressed when read. One file per rank is named ``<prefix>.<rank>.et`` (what
ASTRA-sim opens).

Errors: :class:`~traincast.export.chakra.et_def.ChakraError` for unreadable, truncated or
non-Chakra data, or when protobuf is not installed.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traincast.export.chakra.et_def import ChakraError, schema


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_et(metadata: Any, nodes: Iterable[Any]) -> bytes:
    """One Chakra ET file: the metadata message, then every node, each length-prefixed."""
    parts: list[bytes] = []
    for msg in (metadata, *nodes):
        body = msg.SerializeToString()
        parts.append(_varint(len(body)))
        parts.append(body)
    return b"".join(parts)


def decode_et(data: bytes, path: str | Path | None = None) -> tuple[Any, list[Any]]:
    """Parse a Chakra ET file's bytes (gzip-compressed or not) into (metadata, nodes).

    Raises:
        ChakraError: truncated or not a Chakra ET file.
    """
    from google.protobuf.message import DecodeError  # protobuf is optional (``chakra`` extra)

    s = schema()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ChakraError(f"corrupt gzip data: {exc}", path) from None
    pos, n = 0, len(data)
    msgs: list[bytes] = []
    while pos < n:
        size, shift = 0, 0
        while True:
            if pos >= n:
                raise ChakraError("truncated Chakra ET file (inside a length prefix)", path)
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise ChakraError("not a Chakra ET file (bad length prefix)", path)
        if size == 0:  # Chakra's decoder stops at an empty message
            break
        if pos + size > n:
            raise ChakraError(f"truncated Chakra ET file (message of {size} bytes at offset "
                              f"{pos} runs past the end)", path)
        msgs.append(data[pos:pos + size])
        pos += size
    if not msgs:
        raise ChakraError("empty Chakra ET file (no GlobalMetadata)", path)
    try:
        meta = s.GlobalMetadata.FromString(msgs[0])
        nodes = [s.Node.FromString(m) for m in msgs[1:]]
    except DecodeError as exc:
        raise ChakraError(f"not a Chakra ET file: {exc}", path) from None
    return meta, nodes


def read_chakra(path: str | Path) -> tuple[Any, list[Any]]:
    """Read one ``.et`` file into (GlobalMetadata, [Node, ...]).

    Raises:
        ChakraError: unreadable, truncated or not a Chakra ET file.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ChakraError(f"cannot read: {exc.strerror or exc}", p) from None
    return decode_et(data, p)


def attrs(node: Any) -> dict[str, Any]:
    """A node's (or metadata's) attributes as ``{name: value}``."""
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        v = getattr(a, which) if which else None
        if which and which.endswith("_list"):
            v = list(v.values)
        out[a.name] = v
    return out


def et_paths(prefix: str | Path, ranks: Iterable[int]) -> dict[int, Path]:
    """``<prefix>.<rank>.et`` for each rank (the names ASTRA-sim opens)."""
    prefix = Path(prefix)
    return {r: prefix.parent / f"{prefix.name}.{r}.et" for r in ranks}


def find_et_files(prefix: str | Path) -> dict[int, Path]:
    """The ``<prefix>.<rank>.et`` files that exist, by rank."""
    prefix = Path(prefix)
    rx = re.compile(re.escape(prefix.name) + r"\.(\d+)\.et$")
    out = {}
    if prefix.parent.is_dir():
        for p in prefix.parent.iterdir():
            m = rx.match(p.name)
            if m:
                out[int(m.group(1))] = p
    return dict(sorted(out.items()))
