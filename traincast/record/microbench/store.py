"""The files of a benchmark folder: format tags, reading ``<family>.jsonl`` records, writing
JSON atomically."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from traincast.util.fileio import atomic_write, read_jsonl

#: format tag of meta.json and of the point records
SCHEMA = "traincast.microbench/1"
#: format tag of overheads.json
OVERHEADS_SCHEMA = "traincast.overheads/1"


def read_points(path: str | Path) -> list[dict[str, Any]]:
    """The records of one ``<family>.jsonl`` (a torn last line, from an interrupted run, is
    ignored; :func:`traincast.util.fileio.read_jsonl`)."""
    return read_jsonl(path)


def _repair_tail(path: Path) -> None:
    """Cut a torn last line (no newline) so appending starts on a fresh line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as fh:
            fh.truncate(cut)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, obj: Any) -> None:
    atomic_write(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())
