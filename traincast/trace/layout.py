"""Where the traces of a run lie: the profiler traces one level down and the execution traces
beside them, in the layouts recorders write.

Conventional layouts found in the wild (and in ``../shared/data/traces``):

* ``RUN/kineto/rank-*.json.gz`` + ``RUN/et/rank-*.et.json.gz`` (PARAM / Chakra collection
  scripts; the DLRM 8x V100 set): the Kineto traces in one sub-folder, the execution traces
  (ET) in a sibling one.
* ``RUN/*.pt.trace.json[.gz]`` + ``RUN/*.et.json[.gz]`` (``traincast record`` and the demo): both
  in one folder; :func:`traincast.trace.load.discover` separates them by name.
* TensorBoard's profiler plugin: ``RUN/plugins/profile/<timestamp>/*.pt.trace.json[.gz]``
  is two levels down and is not searched: only one level is, so a folder of many runs is never
  merged into one job by accident.

:func:`find_layout` resolves a folder the user named into (profiler-trace folder,
execution-trace folder or None, a note saying what was chosen); it never reads a trace.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from traincast.errors import EmptyTraceDirError, NotRegularFileError
from traincast.util.fileio import file_kind

__all__ = ["ET_DIRS", "TRACE_DIRS", "find_layout", "is_et", "trace_files_in"]

#: names of sub-folders holding the profiler traces, most conventional first
TRACE_DIRS: tuple[str, ...] = ("kineto", "traces", "trace", "profiler", "pytorch_profiler")
#: names of sub-folders (or siblings of the trace folder) holding the execution traces
ET_DIRS: tuple[str, ...] = ("et", "execution_traces", "execution_trace", "chakra")

_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".otf2")
_ET_SUFFIXES = (".et.json", ".et.json.gz")
#: names of execution-trace files among the traces of a folder (``*.et.json[.gz]``)
_ET_NAME = re.compile(r"\.et\.json(\.gz)?$|(^|[-_.])et\.json(\.gz)?$", re.IGNORECASE)


def is_et(p: Path) -> bool:
    """Whether the file ``p`` is named as an execution trace (``*.et.json[.gz]``)."""
    return bool(_ET_NAME.search(p.name))


def trace_files_in(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of ``folder`` (not hidden) whose names end with one of ``suffixes``, sorted;
    sub-folders and dangling links are skipped, anything else that is not a regular file (a
    FIFO, a device, a socket) is refused rather than skipped silently.

    Raises:
        NotRegularFileError: such a file is not a regular file.
    """
    out = []
    with os.scandir(folder) as it:  # the entries' types: a stat only for links and oddities
        for e in it:
            if e.name.startswith(".") or not e.name.endswith(suffixes):
                continue
            f = folder / e.name
            try:
                if e.is_file():
                    out.append(f)
                    continue
                if e.is_dir():
                    continue
                mode = e.stat().st_mode
            except OSError:  # a dangling link, or gone since the listing
                continue
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise NotRegularFileError(f"not a regular file ({file_kind(mode)})", f)
            out.append(f)
    return sorted(out)


def _files(folder: Path) -> list[str]:
    """Names of the trace files in ``folder`` (from the directory entries' types: no stat
    per file, but for links)."""
    try:
        with os.scandir(folder) as it:
            return [e.name for e in it if not e.name.startswith(".")
                    and e.name.endswith(_TRACE_SUFFIXES) and _is_file(e)]
    except OSError:
        return []


def _is_file(e: os.DirEntry[str]) -> bool:
    """``Path.is_file`` of the entry ``e`` (False where it cannot be told)."""
    try:
        return e.is_file()
    except OSError:
        return False


def _has_traces(folder: Path) -> bool:
    """Whether ``folder`` holds a profiler trace (a trace file that is not an ET)."""
    return any(not f.endswith(_ET_SUFFIXES) for f in _files(folder))


def _has_ets(folder: Path) -> bool:
    return any(f.endswith(_ET_SUFFIXES) for f in _files(folder))


def _et_dir_in(folder: Path) -> Path | None:
    for name in ET_DIRS:
        d = folder / name
        if d.is_dir() and _has_ets(d):
            return d
    return None


def find_layout(path: str | Path) -> tuple[Path, Path | None, str | None]:
    """``(trace path, execution-trace folder or None, note or None)`` for ``path``.

    * A file, or a folder holding profiler traces: read as it is; its execution traces are
      those beside the traces in the folder (found by :func:`~traincast.trace.load.discover`),
      else a sibling folder named in :data:`ET_DIRS` (``RUN/et`` beside ``RUN/kineto``), which
      is linked and named in the note.
    * A folder holding no trace file: its sub-folder of profiler traces, one level down (a
      name in :data:`TRACE_DIRS` first, else the only sub-folder holding traces), with the
      execution traces of a sub-folder named in :data:`ET_DIRS`; the note names both.

    Raises:
        EmptyTraceDirError: ``path`` does not exist; or it holds no trace file and several of
            its sub-folders hold traces, none by a conventional name (the message lists them).
    """
    p = Path(path)
    if not p.exists():
        raise EmptyTraceDirError("no such file or folder", p)
    if not p.is_dir():
        return p, None, None
    if _has_traces(p):
        if _has_ets(p) or p.parent == p:
            return p, None, None
        sib = _et_dir_in(p.parent) if p.name in TRACE_DIRS else None
        if sib is None or sib == p:
            return p, None, None
        return p, sib, (f"execution traces linked from the sibling folder {sib} "
                        "(--et-dir to choose others)")
    subs = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith(".")
                  and _has_traces(d))
    if not subs:
        return p, None, None  # discover() says what the folder lacks
    named = [d for name in TRACE_DIRS for d in subs if d.name == name]
    if named:
        chosen = named[0]
    elif len(subs) == 1:
        chosen = subs[0]
    else:
        raise EmptyTraceDirError(
            "folder holds no trace file; its sub-folders "
            + ", ".join(d.name for d in subs[:6]) + (" ..." if len(subs) > 6 else "")
            + " hold traces: name one", p)
    et = None if _has_ets(chosen) else _et_dir_in(p)
    note = f"{p} holds no trace file: read {chosen} (one level down)"
    if et is not None:
        note += f", execution traces from {et}"
    return chosen, et, note
