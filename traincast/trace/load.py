"""``traincast.load``: trace files of one run -> :class:`~traincast.trace.traceset.TraceSet`."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path

from traincast.errors import EmptyTraceDirError, RankError, TraceFormatError, TraincastWarning
from traincast.trace import cache as C
from traincast.trace import cache_stat as S
from traincast.trace import prefetch
from traincast.trace.assemble import assemble
from traincast.trace.cache import TraceCache, file_key, resolve
from traincast.trace.cache_job import JobEntryWriter, within_limits
from traincast.trace.cache_key import (
    JOB_ONLY_MIN_FILES,
    link_code_fingerprint,
    mark_job,
    marker_text,
    paths_key,
)
from traincast.trace.layout import find_layout
from traincast.trace.layout import is_et as _is_et
from traincast.trace.layout import trace_files_in as _trace_files_in
from traincast.trace.parse_server import (
    PARALLEL_MIN_BYTES,
    preload_parse_workers,
    read_ahead,
    take_early,
)
from traincast.trace.parse_server import Warmer as _Warmer
from traincast.trace.parse_server import main_is_guarded as _main_is_guarded
from traincast.trace.rank_part import RankPart, rank_part, rank_steps, world_tuple
from traincast.trace.readers.base import TraceFile
from traincast.trace.readers.jsonscan import (
    estimated_text_bytes,
    inflate_limit,
    max_inflate_bytes,
    within_inflate_limits,
)
from traincast.trace.readers.kineto import KinetoFile, compiled_min_bytes, read_kineto
from traincast.trace.readers.nsys import (
    NSYS_SUFFIXES,
    is_nsys,
    read_nsys,
)
from traincast.trace.readers.otf2 import OTF2_SUFFIXES, is_otf2, read_otf2
from traincast.trace.shipped import Shipped, spool
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import keep_heap_in_worker, release_memory, small_pages
from traincast.util.executor import (
    CHUNKS_PER_WORKER,
    EXECUTORS,
    ExecutorError,
    local_pool_running,
    map_tasks,
    stop_local_pool,
)
from traincast.util.fileio import check_regular

log = logging.getLogger(__name__)

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_TRACE_SUFFIXES = (".json", ".json.gz")



def discover(path: str | Path | Iterable[str | Path]) -> tuple[list[Path], list[Path]]:
    """Kineto trace files and execution-trace files under ``path``.

    ``path`` is a file, a folder (non-recursive; hidden files skipped) or a list of files.
    Files named ``*.et.json[.gz]`` are execution traces. Only regular files are traces.

    Raises:
        EmptyTraceDirError: the path does not exist or holds no trace file.
        NotRegularFileError: a file given, or a file with a trace's name in the folder, is a
            FIFO, a device, a socket (or, given as a file in a list, a folder).
    """
    if isinstance(path, (str, Path)):
        p = Path(path)
        if not p.exists():
            raise EmptyTraceDirError("no such file or folder", p)
        if p.is_dir():
            files = _trace_files_in(p, _TRACE_SUFFIXES + NSYS_SUFFIXES + OTF2_SUFFIXES)
            # + Nsight Systems exports and OTF2 anchor files
            if not files:
                raise EmptyTraceDirError(
                    "folder holds no trace file (*.json, *.json.gz, *.sqlite, *.otf2)", p)
        else:
            files = [p]
    else:
        files = [Path(f) for f in path]
        if not files:
            raise EmptyTraceDirError("no trace file given")
    for f in files:
        try:
            check_regular(f)
        except OSError:  # missing or unreadable: the reader says so
            pass
    kineto = [f for f in files if not _is_et(f)]
    ets = [f for f in files if _is_et(f)]
    if not kineto:
        where = path if isinstance(path, (str, Path)) else None
        raise EmptyTraceDirError("no profiler trace file, only execution traces", where)
    return kineto, ets


def _rank_from_name(p: Path) -> int | None:
    m = _RANK_IN_NAME.search(p.name)
    return int(m.group(1)) if m else None


def _rank_hint(f: Path, rank_map: Mapping[str, int] | None) -> int | None:
    """The rank of file ``f`` when its trace records none (as :func:`_load` tells it)."""
    rank = rank_map.get(f.name, rank_map.get(str(f))) if rank_map else None
    return _rank_from_name(f) if rank is None else rank


def load(
    path: str | Path | Iterable[str | Path],
    *,
    et_dir: str | Path | None = None,
    iteration_marker: str | None = None,
    rank_map: Mapping[str, int] | None = None,
    progress: Callable[[int, int, Path], None] | None = None,
    max_inflate_bytes: int | None = None,
    cache: bool | str | Path | None = None,
    executor: str | None = None,
    workers: int | None = None,
    address: str | None = None,
) -> TraceSet:
    """Read the profiler traces of one run (one file per rank) into a TraceSet.

    Args:
        path: a trace file, a folder of them (``.json`` or ``.json.gz``), or a list of files.
            Execution traces named ``*.et.json[.gz]`` in the same folder are picked up.
            Nsight Systems SQLite exports (``.sqlite``) are read too, one rank per profiled
            process (:mod:`traincast.trace.readers.nsys`).
        et_dir: folder of PyTorch execution traces (``rank-N.et.json[.gz]``) to link.
        iteration_marker: annotation name or regex delimiting steps when the trace has no
            ``ProfilerStep#N``.
        rank_map: file name -> rank, for files that record no rank.
        progress: called as ``progress(done, total, path)`` after each file is read.
        max_inflate_bytes: most bytes one gzipped file may inflate to (default: the
            ``TRAINCAST_MAX_INFLATE_BYTES`` environment variable, else 8 GiB); a file past it,
            or inflating more than 250x beyond its first 64 MiB, is refused as a gzip bomb.
        cache: reuse decoded files from the columnar cache (:mod:`traincast.trace.cache`):
            None or True for the default folder (``$TRAINCAST_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/traincast``, else ``~/.cache/traincast``;
            ``TRAINCAST_CACHE_DIR=off`` disables it), a folder, or False for no cache. A job
            of :data:`JOB_ONLY_MIN_FILES` files or more is stored as one whole-job entry only.
        executor: how files missing from the cache are parsed: ``"serial"``, ``"process"``
            (one worker process per core) or ``"ray"`` (:func:`traincast.util.executor.map_tasks`).
            Default: ``"process"`` when at least 2 files are to be parsed and they hold more
            than about :data:`PARALLEL_MIN_BYTES` of trace text, else ``"serial"``.
        workers: worker processes for ``"process"``/``"ray"`` (default: the CPU count).
        address: ``"ray"`` only: the Ray cluster to parse on (``"host:port"``, ``"auto"``;
            default: a local Ray instance), as in :func:`traincast.util.executor.map_tasks`.

    The rank of a file comes from ``distributedInfo.rank``, else ``rank_map``, else the file
    name (``rank-N``, ``rankN``, ``workerN``); a single file without any is rank 0.

    Raises:
        EmptyTraceDirError: nothing to read.
        TraceFormatError: a file is truncated, corrupt or not a trace
            (:class:`~traincast.errors.InputTooLargeError`: it inflates past the limit;
            :class:`~traincast.errors.NotRegularFileError`: a FIFO, a device or a socket).
        RankError: a rank cannot be told, ranks repeat, or world sizes disagree.
        ExecutionTraceMismatchError: an execution trace belongs to another run.
        IterationError: ``iteration_marker`` matches nothing.
    """
    token = _TEXT_BYTES.set({})
    try:
        with inflate_limit(max_inflate_bytes), small_pages(), _no_cycle_collection():
            return _load(path, et_dir, iteration_marker, rank_map, progress, cache, executor,
                         workers, address)
    finally:
        _TEXT_BYTES.reset(token)


#: :func:`~traincast.trace.readers.jsonscan.estimated_text_bytes` of the files of the load
#: running in this context (one ``stat`` per file, not one per question asked of them)
_TEXT_BYTES: ContextVar[dict[Path, int] | None] = ContextVar("traincast_text_bytes",
                                                             default=None)


def _text_bytes(f: Path) -> int:
    """:func:`~traincast.trace.readers.jsonscan.estimated_text_bytes` of ``f``, once per
    load."""
    memo = _TEXT_BYTES.get()
    if memo is None:
        return estimated_text_bytes(f)
    n = memo.get(f)
    if n is None:
        n = memo[f] = estimated_text_bytes(f)
    return n


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """No cyclic garbage collection while a load runs (it was enabled again after): the
    objects a load makes (records, parts, rank infos) hold no cycles, yet their number made
    the interpreter scan every object it holds, for nothing, several times a load (~0.3 s
    at 1,024 ranks, 0.1-0.2 s of it after the last file). Reference counting still frees
    everything as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --- parallel per-file parsing + columnar cache (traincast.trace.cache) ----------------------
#: trace text per parse task of the process pool: a task returns its records in one message,
#: and messages of hundreds of MB cost more to send and receive than the parsing they carry
#: (``benchmarks/scale.py``)
TASK_TEXT_BYTES = 12 << 20


def _read_file(item: tuple[str, int] | tuple[str, int, str | None, str | None]
               | tuple[str, int, str | None, str | None, bool | None]) -> list[TraceFile]:
    """Parse one trace file (runs in a worker process under ``executor="process"``), and
    store its records in the cache at ``root`` under ``key`` when both are given (in the
    worker: the writes run in parallel too). The 5th item, when given, is ``compiled`` of
    :func:`~traincast.trace.readers.kineto.read_kineto`."""
    path, limit = item[:2]
    f = Path(path)
    with inflate_limit(limit):
        if is_otf2(f):
            recs: list[TraceFile] = list(read_otf2(f))
        else:
            compiled = item[4] if len(item) > 4 else None
            recs = (list(read_nsys(f)) if is_nsys(f) else
                    [read_kineto(f) if compiled is None else read_kineto(f, compiled=compiled)])
    if len(item) >= 4 and item[2] is not None and item[3] is not None:
        TraceCache(Path(item[2])).put(item[3], recs)
    return recs


def _key_of(path: str) -> str | None:
    """:func:`~traincast.trace.cache.file_key` of ``path``, None where it cannot be read
    (its reader then says why)."""
    try:
        return file_key(Path(path))
    except (OSError, TraceFormatError):
        return None


def _read_keyed(item: ParseItem) -> tuple[str | None, list[Shipped]]:
    """:func:`_read_task` of ``item`` after the cache key of its file is computed here, in
    the parse worker (it is stored under that key when ``item`` names a cache root); the
    key (None: unreadable) and the records."""
    key = _key_of(item[0])
    return key, _read_task((item[0], item[1], item[2], key, item[4], item[5], item[6]))


def _read_keyed_here(item: ParseItem) -> tuple[str | None, list[Shipped]]:
    """:func:`_read_keyed` without the rank parts, in the loading process (the pool failed)."""
    key = _key_of(item[0])
    return key, [Shipped(k) for k in _read_file((*item[:3], key, item[4]))]


#: a parse task: (path, inflate limit, cache root, cache key, compiled, part request,
#: spool folder)
ParseItem = tuple[str, int, str | None, str | None, bool | None,
                  tuple[int | None, str | None] | None, str | None]


def _read_task(item: ParseItem) -> list[Shipped]:
    """:func:`_read_file` of ``item[:5]`` in a worker process; with a part request
    ``(rank from rank_map or the name, iteration_marker)``, each Kineto record that says its
    world size also gets its rank part (:mod:`traincast.trace.rank_part`), computed here
    where the parse runs in parallel. A part that cannot be computed (no rank, a step
    marker matching nothing...) is left to the loading process, which then raises or warns
    in its own order. The records' tables go back through the spool folder ``item[6]``
    when given (:mod:`traincast.trace.shipped`)."""
    keep_heap_in_worker()
    recs = _read_file(item[:5])
    want = item[5]
    return [Shipped(k, _worker_part(k, *want) if want is not None else None, item[6])
            for k in recs]


#: member tuples shared by the calls this worker process extracts
_WORKER_MEMBERS: dict[bytes, tuple[int, ...]] = {}


def _worker_part(k: TraceFile, fallback_rank: int | None, marker: str | None
                 ) -> RankPart | None:
    if not isinstance(k, KinetoFile):
        return None
    info = k.distributed_info
    try:
        rank = info.get("rank")
        rank = int(fallback_rank if rank is None else rank)
        world = int(info["world_size"])
        if not 0 <= rank < world < 2**31:
            return None
        world_ranks = world_tuple(world)
        if len(_WORKER_MEMBERS) > 1 << 12:
            _WORKER_MEMBERS.clear()
        steps, cols = rank_steps(k, marker)
        return rank_part(rank, k, steps, cols, world, world_ranks, _WORKER_MEMBERS)
    except Exception:  # noqa: BLE001 - the loading process assembles this rank itself
        return None


def _maybe_warm(files: list[Path], executor: str | None, workers: int | None
                ) -> _Warmer | None:
    """Parse workers started ahead (:class:`_Warmer`) when a load would parse ``files`` in
    a pool of its own (the default executor chooses ``"process"``), else None."""
    if executor is not None or local_pool_running() or \
            choose_executor(None, files, workers) != "process":
        return None
    compiled = sum(map(_text_bytes, files)) >= compiled_min_bytes() or None
    own_server = preload_parse_workers(compiled)
    return _Warmer(workers, compiled, own_server)


def choose_executor(executor: str | None, todo: list[Path], workers: int | None) -> str:
    """``executor`` if given, else ``"process"`` for at least two files holding more than
    :data:`PARALLEL_MIN_BYTES` of trace text (on a machine with several cores, from a
    guarded ``__main__``), else ``"serial"``."""
    if executor is not None:
        return executor
    if len(todo) < 2 or (workers or os.cpu_count() or 1) < 2 or not _main_is_guarded():
        return "serial"
    return ("process" if sum(map(_text_bytes, todo)) >= PARALLEL_MIN_BYTES
            else "serial")


def _read_files(files: list[Path], progress: Callable[[int, int, Path], None] | None,
                cache: bool | str | Path | None, executor: str | None,
                workers: int | None, address: str | None = None,
                known_keys: list[str | None] | None = None, store_files: bool = True,
                part_requests: list[tuple[int | None, str | None]] | None = None,
                parts: dict[int, RankPart] | None = None, warmer: _Warmer | None = None,
                keys_in_workers: bool = False) -> list[list[TraceFile]]:
    """Records of every file, in order: from the cache where it holds them, else parsed
    (serially or in parallel) and then, with ``store_files``, stored in the cache.
    ``known_keys`` (one per file, None: not known) gets the cache key of every file.
    ``keys_in_workers``: no file can be in the cache (:func:`_keys_later`); when they are
    parsed in a pool of processes, each worker computes its file's key.
    ``part_requests`` (one per file): parse workers also compute the rank parts of the
    records they parse (:func:`_read_task`), put in ``parts`` by ``id(record)``; only when
    no per-file entry is stored from these records. ``warmer``: the workers started ahead
    (:class:`_Warmer`), whose pool this call then owns."""
    if executor is not None and executor not in EXECUTORS:
        raise ExecutorError(f"unknown executor {executor!r}: choose one of "
                            f"{', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ExecutorError(f"workers must be >= 1, got {workers}")
    store = resolve(cache)
    limit = max_inflate_bytes()
    out: list[list[TraceFile] | None] = [None] * len(files)
    keys: list[str | None] = [None] * len(files)
    done = 0
    if keys_in_workers and (store is None or choose_executor(
            executor, files, workers) != "process" or len(files) < 2):
        keys_in_workers = False  # hashed here, looked up as usual

    def lookup(i: int) -> list[TraceFile] | None:
        f = files[i]
        hit = store.get(f, keys[i]) if store is not None and keys[i] else None
        if hit is not None and f.name.endswith(".gz") and not all(
                within_inflate_limits(k.n_bytes, f.stat().st_size, limit) for k in hit):
            hit = None  # past the size or ratio limit in force: let the reader refuse it
        return hit

    if store is not None and not keys_in_workers:
        for i, f in enumerate(files):
            if is_otf2(f):  # its events live in other files the cache key does not see
                continue
            try:
                keys[i] = (known_keys[i] if known_keys is not None and known_keys[i]
                           else file_key(f))
            except OSError:  # unreadable: let the reader raise its own error
                continue
            if known_keys is not None:
                known_keys[i] = keys[i]
            hit = lookup(i)
            if hit is not None:
                out[i] = hit
                done += 1
                if progress is not None:
                    progress(done, len(files), f)
    todo = [i for i, r in enumerate(out) if r is None]
    how = choose_executor(executor, [files[i] for i in todo], workers)
    if warmer is not None and (how != "process" or len(todo) < 2):
        warmer.cancel()  # nothing to parse in a pool after all
        warmer = None
    # the compiled scanner pays numba's import once per process: for enough text in all
    compiled = sum(_text_bytes(files[i]) for i in todo) >= compiled_min_bytes() or None
    if how == "serial" or len(todo) < 2:
        # shared with the child a command started ahead, if any (traincast.trace.prefetch)
        shared = None if compiled else prefetch.read_shared(
            files, todo, lambda i: _read_file((str(files[i]), limit, None, None, None)),
            lookup)
        for i in todo:
            out[i] = shared[0][i] if shared else \
                _read_file((str(files[i]), limit, None, None, compiled))
            done += 1
            if progress is not None:
                progress(done, len(files), files[i])
        if shared:
            todo = [i for i in todo if i not in shared[1]]  # (stored by the child)
    else:
        base = done
        # a pool this load starts on its own is stopped after it: idle parse workers would
        # each keep ~120 MiB (their imports and working set) while the caller analyses
        own_pool = how == "process" and executor is None and (
            warmer is not None or not local_pool_running())

        def _progress(n: int, _total: int) -> None:
            if progress is not None:
                progress(base + n, len(files), files[todo[n - 1]])

        # local workers store their files' entries themselves (Ray workers may be on other
        # machines: the entries are written here)
        local = how == "process" and store is not None and store_files
        ask = part_requests is not None and parts is not None and not (
            store is not None and store_files)
        # records come back through files in memory, not the pipes (local workers only)
        spooled = spool() if how == "process" else None
        items: list[ParseItem] = [
            (str(files[i]), limit, str(store.root) if local and store else None, keys[i],
             compiled, part_requests[i] if ask and part_requests else None,
             None if spooled is None else str(spooled)) for i in todo]
        try:
            text = sum(_text_bytes(files[i]) for i in todo)
            per_task = max(1, int(TASK_TEXT_BYTES * len(todo) // max(text, 1)))
            default = -(-len(todo) // (CHUNKS_PER_WORKER * (workers or os.cpu_count() or 1)))
            results = map_tasks(_read_keyed if keys_in_workers else _read_task, items,
                                executor=how, workers=workers, progress=_progress,
                                address=address, chunksize=min(per_task, default))
        except ExecutorError:
            if executor is not None:
                raise
            # chosen automatically and the pool failed (not a trace error, which keeps its
            # own type): parse here instead
            results = [_read_keyed_here(item) if keys_in_workers else
                       [Shipped(k) for k in _read_file(item[:5])] for item in items]
        finally:
            if spooled is not None:  # files of tasks whose results never arrived
                shutil.rmtree(spooled, ignore_errors=True)
            if warmer is not None:
                warmer.done()
            if own_pool and warmer is not None:
                warmer.stop()
            elif own_pool:
                stop_local_pool()
        shipped: list[list[Shipped]] = []
        for i, res in zip(todo, results, strict=True):
            if keys_in_workers:
                keys[i], res = res
                if known_keys is not None:
                    known_keys[i] = keys[i]
            shipped.append(res)
        del results
        for i, got in zip(todo, shipped, strict=True):
            recs = []
            for s in got:
                s.record.path = files[i]  # as given (the worker got a string)
                recs.append(s.record)
                if s.part is not None and parts is not None:
                    parts[id(s.record)] = s.part
            out[i] = recs
        if local:
            todo = []  # cached by the workers
    if store is not None and store_files:
        for i in todo:
            key = keys[i]
            if key is not None:
                store.put(key, out[i] or [])
    return [r or [] for r in out]
# --- end of parallel parsing + cache -----------------------------------------------------


def _load(path: str | Path | Iterable[str | Path], et_dir: str | Path | None,
          iteration_marker: str | None, rank_map: Mapping[str, int] | None,
          progress: Callable[[int, int, Path], None] | None,
          cache: bool | str | Path | None = None, executor: str | None = None,
          workers: int | None = None, address: str | None = None) -> TraceSet:
    if isinstance(path, (str, Path)):  # the traces one level down, their ETs beside them
        given = Path(path)
        path, found_et, note = find_layout(given)
        if et_dir is None and found_et is not None:
            et_dir = found_et
        elif path == given:  # the ETs named by the caller, the folder as given: nothing to say
            note = None
        elif note and found_et is not None:
            note = f"{given} holds no trace file: read {path} (one level down)"
        if note:
            warnings.warn(note, TraincastWarning, stacklevel=3)
    files, ets = discover(path)
    if et_dir is not None:
        d = Path(et_dir)
        if d.exists() and not d.is_dir():
            check_regular(d)
            ets = [d]
        elif d.is_dir():
            ets = _trace_files_in(d, _TRACE_SUFFIXES)
            if not ets:
                raise EmptyTraceDirError("folder holds no execution trace (*.json[.gz])", d)
        else:
            raise EmptyTraceDirError("no such execution-trace file or folder", d)
    # a whole job assembled before from the same bytes, names and options: one entry

    store = C.resolve(cache)
    keys: list[str | None] = [None] * len(files)
    jkey = skey = None
    warmer = None
    later = False  # the files' keys computed by the parse workers (_keys_later)
    # workers a command started ahead for these files (traincast.trace.prestart), if any:
    # used where this load would start its own, else stopped
    early = take_early(files if store is not None and not ets else None, workers)
    options = {"iteration_marker": marker_text(iteration_marker),
               "rank_map": sorted((str(k), int(v)) for k, v in (rank_map or {}).items())}
    if store is not None and not ets:
        # files unchanged since a load recorded their job key: one stat each, no hashing
        skey = None if any(map(is_otf2, files)) else S.stat_key(files, options)
        jkey = S.job_key_by_stat(store, skey) if skey is not None else None
        hit = C.get_job(store, jkey) if jkey is not None else None
        if hit is None:
            jkey = None
            # not found by stat: the parse workers start while the files are hashed
            warmer = early if early is not None and executor is None else \
                _maybe_warm(files, executor, workers)
            if early is not None and warmer is not early:
                early.cancel()
            if warmer is not None and warmer is not early:  # (prestart read them ahead)
                read_ahead(files)
            early = None
            later = skey is not None and _keys_later(store, files, options, executor, workers)
            try:
                if not later:
                    keys = [None if is_otf2(f) else C.file_key(f) for f in files]
            except OSError:  # unreadable: let the reader raise its own error
                keys = [None] * len(files)
            except BaseException:
                if warmer is not None:
                    warmer.cancel()
                raise
        if early is not None:  # found by stat: nothing to parse
            early.cancel()
        if hit is None and not later and all(k is not None for k in keys):
            jkey = C.job_key([k or "" for k in keys], files, options)
            hit = C.get_job(store, jkey)
            if hit is not None and skey is not None:
                S.put_stat_key(store, skey, jkey)
        if hit is not None and within_limits(hit):
            if warmer is not None:
                warmer.cancel()
            return _job_hit(hit, files, progress)
    elif store is not None and not any(map(is_otf2, files)):
        # a job with execution traces: its entry holds the ETs and their links too (the
        # files', the ETs' and the links' own entries are kept as well)
        options |= {"execution_traces": True, "link_code": link_code_fingerprint()}
        skey = S.stat_key([*files, *ets], options)
        jkey = S.job_key_by_stat(store, skey) if skey is not None else None
        hit = C.get_job(store, jkey) if jkey is not None else None
        if hit is None:
            try:
                keys = [C.file_key(f) for f in files]
                jkey = C.job_key([*keys, *(C.file_key(e) for e in ets)], [*files, *ets],
                                 options)
            except (OSError, TraceFormatError):  # unreadable: let the reader raise its own
                keys, jkey = [None] * len(files), None
            hit = C.get_job(store, jkey) if jkey is not None else None
            if hit is not None and skey is not None:
                S.put_stat_key(store, skey, jkey)
        if hit is not None and within_limits(hit):
            return _job_hit(hit, files, progress)
    parsed: list[tuple[int, TraceFile]] = []
    # Nsight Systems SQLite exports hold one record per profiled process (readers/nsys.py);
    # a multi-process file gives each its rank in ``distributed_info``
    parts: dict[int, RankPart] = {}
    requests = [(_rank_hint(f, rank_map), iteration_marker) for f in files]
    per_file = _read_files(files, progress, cache, executor, workers, address, keys,
                           store_files=(jkey is None and not later) or
                           len(files) < JOB_ONLY_MIN_FILES,
                           part_requests=requests, parts=parts, warmer=warmer,
                           keys_in_workers=later)
    if later and store is not None and all(k is not None for k in keys):
        jkey = C.job_key([k or "" for k in keys], files, options)
    for f, records in zip(files, per_file, strict=True):
        for k in records:
            rank = k.distributed_info.get("rank")
            if rank is None and rank_map:
                rank = rank_map.get(f.name, rank_map.get(str(f)))
            if rank is None:
                rank = _rank_from_name(f)
            if rank is None:
                if len(files) > 1:
                    raise RankError(
                        "no rank in distributedInfo or the file name; pass a rank map "
                        "(--rank-map FILE=RANK)", f
                    )
                rank = 0
            if not 0 <= int(rank) < 2**31:
                raise RankError(f"rank {rank} is not a valid rank number", f)
            parsed.append((int(rank), k))
    seen: dict[int, Path] = {}
    for rank, k in parsed:
        if rank in seen:
            raise RankError(f"rank {rank} appears twice (also in {seen[rank].name})", k.path)
        seen[rank] = k.path
    sizes = {k.distributed_info.get("world_size") for _, k in parsed} - {None}
    if len(sizes) > 1:
        first = parsed[0][1]
        for _, k in parsed:
            ws = k.distributed_info.get("world_size")
            if ws is not None and ws != first.distributed_info.get("world_size", ws):
                raise RankError(
                    f"world size {ws} differs from {first.distributed_info.get('world_size')} "
                    f"in {first.path.name}", k.path
                )
    for rank, k in parsed:
        ws = k.distributed_info.get("world_size")
        if ws is not None and not 0 <= rank < int(ws):
            raise RankError(f"rank {rank} is outside world size {ws}", k.path)
    parsed.sort(key=lambda x: x[0])
    # the job entry is written on a thread from the events' first combined column on,
    # while the assembly and then the caller go on
    writer = None
    try:
        if jkey is not None and store is not None:
            writer = JobEntryWriter(store, jkey)
        if ets:
            prefetch.wait_for(ets)  # read ahead by the command (traincast.trace.prestart)
        ts = assemble(parsed, ets, iteration_marker, store, parts,
                      writer.events_column if writer is not None else None)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is not None:
        writer.finish(ts)
    if writer is not None and store is not None and jkey is not None and not ets:
        S.put_paths_key(store, paths_key(files, options), jkey)  # a job entry of these paths
    # the records' tables (mapped spool files) are let go while the entry is written
    del parsed, per_file, parts
    if jkey is not None and store is not None and skey is not None:
        S.put_stat_key(store, skey, jkey)
    if writer is not None and store is not None and jkey is not None:
        mark_job(ts, store.root, jkey)  # derived results (its graph) kept beside its entry
    release_memory()
    return ts


def _job_hit(hit: TraceSet, files: list[Path],
             progress: Callable[[int, int, Path], None] | None) -> TraceSet:
    """A job read from its entry, as the load returns it: every file reported to
    ``progress``, the entry's warnings repeated."""
    for i, f in enumerate(files):
        if progress is not None:
            progress(i + 1, len(files), f)
    for msg in hit.warnings:
        warnings.warn(msg, TraincastWarning, stacklevel=4)
    release_memory()
    return hit


def _keys_later(store: TraceCache, files: list[Path], options: dict[str, object],
                executor: str | None, workers: int | None) -> bool:
    """Whether the cache keys of ``files`` can wait until their parse in a pool of
    processes (:func:`choose_executor`), whose workers then compute them
    (:func:`_read_keyed`): no cache entry can hold them
    (:func:`~traincast.trace.cache_stat.no_entry_for`), so hashing them first, in this
    process, would find nothing while the parse waited."""
    return len(files) >= 2 and choose_executor(executor, files, workers) == "process" and \
        S.no_entry_for(store, files, paths_key(files, options))
