"""Parse workers started by a command before it imports what it runs, for the load it is
about to make.

:func:`prestart` is called by a command that will load ``path`` with the default executor
and parse cache (``traincast analyze``, ``traincast predict``) first thing, before its heavy
imports (the loader, the analyses, pandas: ~0.4 s). Where that load would parse its files
in a pool of worker processes of its own -- a folder of at least two profiler traces (no
execution traces, Nsight Systems or OTF2 files) holding at least
:data:`~traincast.trace.parse_server.PARALLEL_MIN_BYTES` of trace text, a guarded
``__main__``, two cores or more, a parse cache that holds no whole-job entry recorded for
the files as ``stat`` sees them (:mod:`traincast.trace.cache_key`) -- it starts them
(:class:`~traincast.trace.parse_server.Warmer`, the forkserver preloading the loader and the
compiled scanner) and holds them for that load
(:func:`~traincast.trace.parse_server.hold_early`): their start-up then overlaps the
command's imports instead of following them; meanwhile the files are read ahead into the
page cache (:func:`~traincast.trace.parse_server.read_ahead`). The load takes the workers
when it parses those very files (:func:`~traincast.trace.parse_server.take_early`) and
stops them otherwise (a job found by its content, other files); nothing else changes what
the load does or returns.

A job whose profiler traces are parsed in the loading process (below
:data:`~traincast.trace.parse_server.PARALLEL_MIN_BYTES`) gets a child process forked before
the heavy imports instead, where that is safe (:mod:`traincast.trace.prefetch`): it reads
the job's execution traces, if any, into the parse cache, then parses profiler traces
together with the load (below
:data:`~traincast.trace.readers.text_size.COMPILED_MIN_BYTES` and
:data:`~traincast.trace.cache_key.JOB_ONLY_MIN_FILES` files); not when a whole-job entry is
recorded for the traces (and ETs) as ``stat`` sees them.

Imports only light modules (no Arrow, no readers, no numba). Never raises: anything
unexpected (an unreadable folder, a bad cache setting) leaves the load to say it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from traincast.trace import prefetch
from traincast.trace.cache_key import (
    JOB_ONLY_MIN_FILES,
    cache_dir,
    job_entry,
    job_key_at,
    link_code_fingerprint,
    marker_text,
    stat_key,
)
from traincast.trace.layout import find_layout, is_et, trace_files_in
from traincast.trace.parse_server import (
    PARALLEL_MIN_BYTES,
    Warmer,
    hold_early,
    main_is_guarded,
    preload_parse_workers,
    read_ahead,
)
from traincast.trace.readers.text_size import COMPILED_MIN_BYTES, estimated_text_bytes

__all__ = ["prestart"]

log = logging.getLogger(__name__)

#: trace files that :func:`traincast.trace.load.discover` lists (the first two) and those of
#: other formats, whose loads are left to start their own workers
_TRACES = (".json", ".json.gz")
_OTHERS = (".sqlite", ".sqlite3", ".otf2")


def prestart(path: str | Path, *, iteration_marker: str | None = None,
             rank_map: Mapping[str, int] | None = None, workers: int | None = None,
             et_dir: str | Path | None = None) -> bool:
    """Start the parse workers of the coming ``traincast.load(path, et_dir=...,
    iteration_marker=..., rank_map=..., workers=...)`` (default executor and cache) when it
    would start them, or the read-ahead of its execution traces (module docstring); True
    when either started."""
    try:
        return _prestart(Path(path), iteration_marker, rank_map, workers,
                         None if et_dir is None else Path(et_dir))
    except Exception:  # noqa: BLE001 - the load itself says what is wrong
        log.debug("traincast: parse workers not started ahead", exc_info=True)
        return False


def _prestart(path: Path, iteration_marker: str | None, rank_map: Mapping[str, int] | None,
              workers: int | None, et_dir: Path | None) -> bool:
    if os.environ.get("TRAINCAST_COMPILED_MIN_BYTES"):  # the load decides the scanner alone
        return False
    root = cache_dir()
    if root is None or (workers or os.cpu_count() or 1) < 2:
        return False
    folder, found_et, _ = find_layout(path)
    if not folder.is_dir():
        return False
    files = trace_files_in(folder, _TRACES + _OTHERS)
    options = {"iteration_marker": marker_text(iteration_marker),
               "rank_map": sorted((str(k), int(v)) for k, v in (rank_map or {}).items())}
    ets = _ets_of(files, found_et, et_dir)
    if ets:
        return _read_ets_ahead(root, [f for f in files if not is_et(f)], ets, options,
                               bool(rank_map))
    if et_dir is not None:
        return False
    if len(files) < 2 or any(f.name.endswith(_OTHERS) for f in files):
        return False
    text = sum(map(estimated_text_bytes, files))
    small = text < PARALLEL_MIN_BYTES  # parsed in the loading process: shared with a child
    if not (_shares(files, text) if small else main_is_guarded()):
        return False
    if _job_recorded(root, files, options) is not False:
        return False  # the load reads the job's entry (or cannot stat a file: it says why)
    if small:
        return prefetch.start([], files)
    # the text is past PARALLEL_MIN_BYTES, itself past the compiled scanner's threshold
    hold_early(files, Warmer(workers, True, preload_parse_workers(True)))
    read_ahead(files)  # from disk while the command imports, where the page cache let go
    return True


def _ets_of(files: list[Path], found: Path | None, et_dir: Path | None) -> list[Path]:
    """The execution traces the load will read (:func:`traincast.trace.load.discover` and
    its ``et_dir``): those of ``et_dir`` when given, else those among ``files``, else those
    of the sibling folder ``found``."""
    if et_dir is not None:
        return trace_files_in(et_dir, _TRACES) if et_dir.is_dir() else [et_dir]
    own = [f for f in files if is_et(f)]
    if own or found is None:
        return own
    return trace_files_in(found, _TRACES)


def _read_ets_ahead(root: Path, files: list[Path], ets: list[Path],
                    options: dict[str, object], rank_map: bool) -> bool:
    """Start the read-ahead of ``ets`` and, below the compiled scanner's threshold, the
    shared parse of ``files`` (:func:`traincast.trace.prefetch.start`) for a job of profiler
    traces ``files`` small enough to be parsed in this process and with no job entry
    recorded for the files and ETs as ``stat`` sees them (the key
    :func:`traincast.trace.load.load` looks up for a job with ETs); where the parse is
    shared and no ``rank_map`` is given, each process then links the traces it parsed
    (:mod:`traincast.trace.link.ahead`)."""
    if not files or any(f.name.endswith(_OTHERS) for f in files) or not prefetch.can_fork():
        return False
    text = sum(map(estimated_text_bytes, files))
    if text >= PARALLEL_MIN_BYTES:
        return False  # parsed by a pool of workers on every core: nothing to overlap
    options = {**options, "execution_traces": True, "link_code": link_code_fingerprint()}
    if _job_recorded(root, [*files, *ets], options) is not False:
        return False  # the load reads the job's entry (or cannot stat a file: it says why)
    shared = _shares(files, text)
    return prefetch.start(ets, files if shared else None, link=shared and not rank_map)


def _job_recorded(root: Path, paths: list[Path], options: dict[str, object]) -> bool | None:
    """Whether a whole-job entry is recorded for ``paths`` and ``options`` as ``stat`` sees
    them (the load then reads it); None when a path cannot be stat'ed (the load says why)."""
    skey = stat_key(paths, options)
    if skey is None:
        return None
    jkey = job_key_at(root, skey)
    return jkey is not None and job_entry(root, jkey).is_file()


def _shares(files: list[Path], text: int) -> bool:
    """Whether the load's serial parse of ``files`` (``text`` bytes of trace text) is shared
    with a child (:func:`traincast.trace.prefetch.read_shared`): below the compiled scanner's
    threshold (the child imports no numba) and below
    :data:`~traincast.trace.cache_key.JOB_ONLY_MIN_FILES` files (the child stores per-file
    entries, as the load does for so few files), where a child can be forked."""
    return (text < COMPILED_MIN_BYTES and len(files) < JOB_ONLY_MIN_FILES
            and prefetch.can_fork())
