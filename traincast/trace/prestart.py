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

Imports only light modules (no Arrow, no readers, no numba). Never raises: anything
unexpected (an unreadable folder, a bad cache setting) leaves the load to say it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from traincast.trace.cache_key import cache_dir, job_entry, job_key_at, marker_text, stat_key
from traincast.trace.layout import find_layout, is_et, trace_files_in
from traincast.trace.parse_server import (
    PARALLEL_MIN_BYTES,
    Warmer,
    hold_early,
    main_is_guarded,
    preload_parse_workers,
    read_ahead,
)
from traincast.trace.readers.text_size import estimated_text_bytes

__all__ = ["prestart"]

log = logging.getLogger(__name__)

#: trace files that :func:`traincast.trace.load.discover` lists (the first two) and those of
#: other formats, whose loads are left to start their own workers
_TRACES = (".json", ".json.gz")
_OTHERS = (".sqlite", ".sqlite3", ".otf2")


def prestart(path: str | Path, *, iteration_marker: str | None = None,
             rank_map: Mapping[str, int] | None = None, workers: int | None = None) -> bool:
    """Start the parse workers of the coming ``traincast.load(path, iteration_marker=...,
    rank_map=..., workers=...)`` (default executor and cache) when it would start them
    (module docstring); True when started."""
    try:
        return _prestart(Path(path), iteration_marker, rank_map, workers)
    except Exception:  # noqa: BLE001 - the load itself says what is wrong
        log.debug("traincast: parse workers not started ahead", exc_info=True)
        return False


def _prestart(path: Path, iteration_marker: str | None, rank_map: Mapping[str, int] | None,
              workers: int | None) -> bool:
    if os.environ.get("TRAINCAST_COMPILED_MIN_BYTES"):  # the load decides the scanner alone
        return False
    root = cache_dir()
    if root is None or (workers or os.cpu_count() or 1) < 2 or not main_is_guarded():
        return False
    folder, ets, _ = find_layout(path)
    if ets is not None or not folder.is_dir():
        return False
    files = trace_files_in(folder, _TRACES + _OTHERS)
    if len(files) < 2 or any(f.name.endswith(_OTHERS) or is_et(f) for f in files):
        return False
    options = {"iteration_marker": marker_text(iteration_marker),
               "rank_map": sorted((str(k), int(v)) for k, v in (rank_map or {}).items())}
    skey = stat_key(files, options)
    if skey is None:
        return False
    jkey = job_key_at(root, skey)
    if jkey is not None and job_entry(root, jkey).is_file():
        return False  # the load reads the job's entry
    if sum(map(estimated_text_bytes, files)) < PARALLEL_MIN_BYTES:
        return False
    # the text is past PARALLEL_MIN_BYTES, itself past the compiled scanner's threshold
    hold_early(files, Warmer(workers, True, preload_parse_workers(True)))
    read_ahead(files)  # from disk while the command imports, where the page cache let go
    return True
