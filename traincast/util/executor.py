"""Run one function over many items: in this process, in local worker processes, or on Ray.

:func:`map_tasks` is the execution layer of the planner's layout search (and of parallel trace
ingestion). It returns the results in the order of the items, whatever the executor:

* ``"serial"``  -- a plain loop in the calling process (tiny inputs, tests, debugging).
* ``"process"`` -- a :class:`concurrent.futures.ProcessPoolExecutor` on this machine.
* ``"ray"``     -- Ray tasks, on a local Ray instance or on a cluster given by ``address``
  (optional dependency: ``pip install 'traincast[ray]'``).

Items are sent in chunks (by default about :data:`CHUNKS_PER_WORKER` chunks per worker) so that
inter-process traffic is paid per chunk, not per item. An input that fits in one chunk runs
serially in the calling process.

Start method of the worker processes: ``forkserver`` (:data:`START_METHOD`); the pool is kept
for reuse by later calls with the same number of workers, and :func:`shutdown` stops it.
Threads of one process share that pool: a call never stops a pool another call is using (a
call asking for another number of workers while the kept pool is busy gets a pool of its own,
stopped when it returns). Workers end when the process that started their pool ends, however
it ends (a watch thread in each worker); the fork server and the resource tracker follow.
Workers ignore SIGINT (Ctrl-C is the caller's); a ``KeyboardInterrupt`` in the caller during
:func:`map_tasks` terminates the pool's workers at once and is re-raised.

Errors: an exception raised by ``fn`` is re-raised in the caller with its own type if it is a
:class:`~traincast.errors.TraincastError` (it is pickled back from the worker); any other
exception becomes an :class:`ExecutorError` naming the item index, with the worker's traceback
as its ``__cause__``. When one item fails, chunks that have not started are cancelled.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import pickle
import re
import select
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    CancelledError,
    Future,
    ProcessPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from typing import Any, NamedTuple, TypeVar

from traincast.errors import TraincastError
from traincast.util.allocator import release_memory

__all__ = ["EXECUTORS", "ExecutorError", "map_tasks", "shutdown"]

T = TypeVar("T")
R = TypeVar("R")

#: valid values of ``map_tasks(executor=...)``
EXECUTORS = ("process", "ray", "serial")
#: default number of chunks per worker (more chunks balance load better, fewer cost less IPC)
CHUNKS_PER_WORKER = 4
#: multiprocessing start method of the ``"process"`` executor (see the module docstring)
START_METHOD = "forkserver"
#: seconds allowed for the TCP reachability check of a Ray ``address``
RAY_CONNECT_TIMEOUT_S = 5.0

RAY_MISSING = "--executor ray needs Ray: pip install 'traincast[ray]'"


class ExecutorError(TraincastError):
    """A task failed in a worker, a worker died, or the executor cannot run (bad name, no Ray)."""


# ----------------------------------------------------------------------------- worker side


class _Failure(NamedTuple):
    """What a worker sends back when ``fn`` raised on an item."""

    index: int
    type_name: str
    message: str
    traceback: str
    payload: bytes | None  # the pickled exception, for TraincastError subclasses only


class _RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in a worker (set as ``__cause__``)."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0]) if self.args else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _failure(index: int, exc: Exception) -> _Failure:
    payload = None
    if isinstance(exc, TraincastError):
        try:
            payload = pickle.dumps(exc)
            pickle.loads(payload)  # it must round-trip, or the caller could not rebuild it
        except Exception:
            payload = None
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return _Failure(index, type(exc).__qualname__, _one_line(str(exc)), tb, payload)


def _run_chunk(fn: Callable[[Any], Any], start: int, chunk: Sequence[Any]
               ) -> tuple[list[Any], _Failure | None]:
    """Apply ``fn`` to a chunk whose first item has index ``start``; stop at the first error.

    Afterwards the memory the items freed goes back to the OS
    (:func:`traincast.util.allocator.release_memory`), so the idle workers of a kept pool do not each
    hold the high-water mark of their last chunk (~70 MiB per parse worker after a
    1,024-rank load, against 60 MiB of imports)."""
    out: list[Any] = []
    try:
        for offset, item in enumerate(chunk):
            try:
                out.append(fn(item))
            except Exception as exc:
                return out, _failure(start + offset, exc)
        return out, None
    finally:
        release_memory()


def _end_with_parent(parent: int) -> None:
    """Pool worker initializer: end this worker when process ``parent`` (the one that started
    the pool) ends, however it ends (SIGKILL, the OOM killer). Workers of a ``forkserver``
    pool are children of the fork server, and an idle one waits on a queue whose writing end
    it holds itself, so nothing else would end it; with the workers gone, the fork server and
    the resource tracker see their pipes close and end too. Linux: a pidfd polled by a daemon
    thread; elsewhere the parent's pid is probed once a second."""
    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
        except ProcessLookupError:
            os._exit(1)
        except (AttributeError, OSError):  # no pidfd (not Linux, or a kernel before 5.3)
            fd = None
        if fd is not None:
            select.select([fd], [], [])  # readable once the process has ended
            os._exit(1)
        while True:
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(1)
            except OSError:  # EPERM: alive
                pass
            time.sleep(1.0)

    threading.Thread(target=watch, name="traincast-parent-watch", daemon=True).start()


# ----------------------------------------------------------------------------- caller side


def _item_error(index: int, type_name: str, message: str) -> ExecutorError:
    return ExecutorError(f"task failed on item {index}: {type_name}: {message}"
                         if message else f"task failed on item {index}: {type_name}")


def _raise_failure(failure: _Failure) -> None:
    cause = _RemoteTraceback(failure.traceback)
    if failure.payload is not None:
        try:
            exc = pickle.loads(failure.payload)
        except Exception:
            exc = None
        if isinstance(exc, TraincastError):
            raise exc from cause
    raise _item_error(failure.index, failure.type_name, failure.message) from cause


def _store(results: list[Any], start: int, out: list[Any], failure: _Failure | None) -> int:
    """Put one chunk's results at ``start`` of ``results``, or raise the failure its worker
    reported; returns the chunk's item count."""
    if failure is not None:
        _raise_failure(failure)
    results[start:start + len(out)] = out
    return len(out)

def _report(progress: Callable[[int, int], None] | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def _run_serial(fn: Callable[[T], R], items: Sequence[T],
                progress: Callable[[int, int], None] | None) -> list[R]:
    results: list[R] = []
    total = len(items)
    for index, item in enumerate(items):
        try:
            results.append(fn(item))
        except TraincastError:
            raise
        except Exception as exc:
            raise _item_error(index, type(exc).__qualname__, _one_line(str(exc))) from exc
        _report(progress, index + 1, total)
    return results


def _span(start: int, size: int, total: int) -> str:
    stop = min(start + size, total) - 1
    return f"item {start}" if stop == start else f"items {start}-{stop}"


# -- process pool, kept for reuse

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_workers = 0
#: calls running on the kept pool now (it is replaced or stopped only when none is)
_pool_users = 0


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers,
                               mp_context=multiprocessing.get_context(START_METHOD),
                               initializer=_worker_init, initargs=(os.getpid(),))


def _acquire_pool(workers: int) -> tuple[ProcessPoolExecutor, bool]:
    """A pool of ``workers`` processes for one call, and whether it is the kept one (then
    :func:`_release_pool` must follow; else the caller's own pool, stopped after it)."""
    global _pool, _pool_workers, _pool_users
    with _lock:
        broken = _pool is not None and getattr(_pool, "_broken", False)
        if _pool is not None and _pool_workers == workers and not broken:
            _pool_users += 1
            return _pool, True
        if _pool is None or _pool_users == 0 or broken:
            # a pool whose worker died is marked broken: replace it (its users fail on it)
            _shutdown_pool_locked(wait=not broken)
            _pool, _pool_workers, _pool_users = _new_pool(workers), workers, 1
            return _pool, True
    return _new_pool(workers), False  # the kept pool is busy with another worker count


def _release_pool(pool: ProcessPoolExecutor, kept: bool) -> None:
    global _pool_users
    if not kept:
        pool.shutdown(wait=False, cancel_futures=True)
        return
    with _lock:
        if _pool is pool:
            _pool_users = max(0, _pool_users - 1)


def _worker_init(parent: int) -> None:
    """Pool worker initializer: ignore SIGINT (Ctrl-C is sent to the terminal's whole process
    group and is the caller's to handle; a worker that took it would print its own traceback)
    and end with the process that started the pool (:func:`_end_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent(parent)


def _terminate_pool_locked(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now, its workers killed mid-chunk (they ignore SIGINT).

    No future is cancelled: the pool's manager thread marks every pending future broken when it
    sees the killed workers, and on Python 3.11 it raises ``InvalidStateError`` (printed as a
    thread traceback) on a future cancelled before it got there (CPython gh-107219;
    3.11.7 still has it)."""
    global _pool, _pool_workers, _pool_users
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=False)
    if _pool is pool:
        _pool, _pool_workers, _pool_users = None, 0, 0


def _shutdown_pool_locked(wait: bool = True) -> None:
    global _pool, _pool_workers, _pool_users
    if _pool is not None:
        _pool.shutdown(wait=wait, cancel_futures=True)
    _pool, _pool_workers, _pool_users = None, 0, 0


def _run_process(fn: Callable[[T], R], items: Sequence[T], workers: int, size: int,
                 progress: Callable[[int, int], None] | None) -> list[R]:
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise ExecutorError(f"--executor process needs a picklable top-level function, "
                            f"not {fn!r}: {_one_line(str(exc))}") from exc
    total = len(items)
    pool, kept = _acquire_pool(workers)
    futures: dict[Future[Any], int] = {}
    results: list[Any] = [None] * total
    done = 0
    interrupted = False
    try:
        for start in range(0, total, size):
            futures[pool.submit(_run_chunk, fn, start, items[start:start + size])] = start
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=futures.__getitem__):
                start = futures[future]
                try:
                    out, failure = future.result()
                except BrokenProcessPool:
                    raise
                except CancelledError:  # shutdown() from another thread
                    raise ExecutorError("the worker pool was shut down while "
                                        f"{_span(start, size, total)} waited") from None
                except Exception as exc:  # item or result not picklable, ...
                    raise ExecutorError(f"{_span(start, size, total)} could not be sent to or "
                                        f"returned from a worker: {type(exc).__qualname__}: "
                                        f"{_one_line(str(exc))}") from exc
                done += _store(results, start, out, failure)
                _report(progress, done, total)
    except BrokenProcessPool as exc:  # from result() or from a submit() after the death
        with _lock:
            if _pool is pool:
                _shutdown_pool_locked(wait=False)
        raise ExecutorError("a worker process died (killed, out of memory or crashed); the "
                            "next call starts new workers") from exc
    except KeyboardInterrupt:  # the workers ignore SIGINT: stop them, or they finish first
        interrupted = True
        with _lock:
            _terminate_pool_locked(pool)
        raise
    finally:
        if not interrupted:  # a killed pool marks its own futures broken (see above)
            for future in futures:
                future.cancel()
        _release_pool(pool, kept)
    return results


# -- Ray

_ray_started = False
_ray_chunk_task: Any = None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(RAY_MISSING) from exc
    return ray


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` (or ``ray://host:port``) nobody listens on.

    ``ray.init`` retries an unreachable address for minutes before giving up.
    """
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local" or a form Ray itself will judge
    host = host.strip("[]") or "127.0.0.1"
    try:
        with socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ExecutorError(f"cannot connect to Ray at {address}: "
                            f"{_one_line(exc.strerror or str(exc)) or type(exc).__name__}"
                            ) from exc


def _ray_messages_to_stderr() -> None:
    """Send what Ray prints on the driver (its error listener's ``(raylet) A worker
    died...`` lines, which Ray writes to stdout) to stderr: stdout holds the command's
    output alone. Done once, when traincast starts Ray itself (``log_to_driver=False``
    already keeps the workers' own output away)."""
    try:
        from ray._private import worker as ray_worker  # lazy: Ray is optional and heavy
    except ImportError:  # pragma: no cover - a Ray without this module: nothing to route
        return
    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_traincast_stderr", False):
        return

    def to_stderr(data: dict, *args: Any, **kwargs: Any) -> Any:
        return original({**data, "is_err": True}, *args, **kwargs)

    to_stderr._traincast_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def _ensure_ray(ray: Any, address: str | None, workers: int | None) -> None:
    global _ray_started
    if ray.is_initialized():
        return  # the caller's instance or connection, or ours from an earlier call
    _ray_messages_to_stderr()
    common = {"log_to_driver": False, "ignore_reinit_error": True,
              "logging_level": logging.WARNING}
    if address is None:
        # A local instance of our own: never phone home (Ray reports usage stats by default);
        # an explicit RAY_USAGE_STATS_ENABLED set by the user wins.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            # address="local": start a new instance even when RAY_ADDRESS is set
            ray.init(address="local", num_cpus=workers or os.cpu_count() or 1,
                     include_dashboard=False, **common)
        except Exception as exc:
            raise ExecutorError(f"could not start a local Ray instance: "
                                f"{type(exc).__qualname__}: {_one_line(str(exc))}") from exc
    else:
        _check_reachable(address)
        try:
            ray.init(address=address, **common)
        except Exception as exc:
            raise ExecutorError(f"cannot connect to Ray at {address}: "
                                f"{type(exc).__qualname__}: {_one_line(str(exc))}") from exc
    _ray_started = True


def _ray_error_summary(exc: BaseException) -> str:
    """One line for a Ray error: the underlying cause of a RayTaskError, without colour codes."""
    cause = getattr(exc, "cause", None)
    err = cause if isinstance(cause, BaseException) else exc
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    lines = [line for line in text.splitlines() if line.strip()]
    summary = f"{type(err).__qualname__}: {_one_line(lines[0]) if lines else ''}".rstrip(": ")
    if "No module named" in text:
        summary += (" (Ray workers import code from the driver's working directory and "
                    "installed packages)")
    return summary


def _run_ray(ray: Any, fn: Callable[[T], R], items: Sequence[T], size: int,
             progress: Callable[[int, int], None] | None) -> list[R]:
    global _ray_chunk_task
    if _ray_chunk_task is None:
        _ray_chunk_task = ray.remote(_run_chunk)
    total = len(items)
    fn_ref = ray.put(fn)
    pending: dict[Any, int] = {}
    results: list[Any] = [None] * total
    done = 0
    try:
        for start in range(0, total, size):
            pending[_ray_chunk_task.remote(fn_ref, start, items[start:start + size])] = start
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                start = pending.pop(ref)
                try:
                    out, failure = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise ExecutorError(f"Ray task for {_span(start, size, total)} failed: "
                                        f"{_ray_error_summary(exc)}") from exc
                done += _store(results, start, out, failure)
                _report(progress, done, total)
    finally:
        for ref in pending:
            try:
                ray.cancel(ref)
            except Exception:  # already finished or gone: nothing to cancel
                pass
    return results


# ----------------------------------------------------------------------------- public API


def map_tasks(fn: Callable[[T], R], items: Sequence[T], *, executor: str = "process",
              address: str | None = None, workers: int | None = None,
              chunksize: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[R]:
    """Apply ``fn`` to every item, in parallel, and return the results in the order of ``items``.

    Args:
        fn: a function of one item. For ``"process"`` it must be picklable, i.e. defined at
            the top level of an importable module (or of the ``__main__`` script, under an
            ``if __name__ == "__main__":`` guard). Ray also accepts closures, but its workers
            import modules from the driver's working directory and installed packages only.
        items: the inputs; each one and each result must be picklable (except for "serial").
        executor: ``"serial"``, ``"process"`` or ``"ray"`` (see :data:`EXECUTORS`).
        address: Ray only: the cluster to connect to (``"host:port"``, ``"ray://host:port"``
            or ``"auto"``). ``None`` starts a local Ray instance with ``workers`` CPUs. If
            Ray is already initialised in this process, that instance is used and ``address``
            is ignored. A Ray instance or connection started here stays up for later calls
            until :func:`shutdown`.
        workers: number of worker processes ("process", default ``os.cpu_count()``) or CPUs
            of a local Ray instance ("ray", default ``os.cpu_count()``; on an existing
            instance the default is its CPU count, and ``workers`` only sets the chunking).
        chunksize: items per task; default ``ceil(len(items) / (CHUNKS_PER_WORKER *
            workers))``. An input of at most one chunk runs serially in this process.
        progress: called in this process as ``progress(done, total)`` each time items
            complete (per chunk; per item when run serially). It is not called for an empty
            input.

    Returns:
        ``[fn(item) for item in items]``.

    Raises:
        TraincastError: the error ``fn`` raised, with its own type, for TraincastError
            subclasses (on the first failing item seen; with parallel executors not
            necessarily the lowest index).
        ExecutorError: ``fn`` raised another exception (the message names the item index
            and the worker traceback is the ``__cause__``); an unknown executor;
            ``workers`` or ``chunksize`` < 1; ``fn`` not picklable; a worker died; Ray not
            installed, cannot start, or ``address`` unreachable.
    """
    if executor not in EXECUTORS:
        raise ExecutorError(f"unknown executor {executor!r}: choose one of "
                            f"{', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ExecutorError(f"workers must be >= 1, got {workers}")
    if chunksize is not None and chunksize < 1:
        raise ExecutorError(f"chunksize must be >= 1, got {chunksize}")
    items = list(items)
    total = len(items)
    if executor == "serial" or total == 0:
        return _run_serial(fn, items, progress)

    ray = None
    if executor == "ray":
        ray = _import_ray()
        _ensure_ray(ray, address, workers)
        n_workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    else:
        n_workers = workers or os.cpu_count() or 1
    size = chunksize or max(1, math.ceil(total / (CHUNKS_PER_WORKER * n_workers)))
    if total <= size:
        return _run_serial(fn, items, progress)
    if ray is not None:
        return _run_ray(ray, fn, items, size, progress)
    return _run_process(fn, items, n_workers, size, progress)


def local_pool_running() -> bool:
    """Whether the kept pool of local worker processes (``executor="process"``) exists."""
    with _lock:
        return _pool is not None


def stop_local_pool() -> None:
    """Stop the kept pool of local worker processes without waiting for them to exit (Ray is
    left alone); a later ``map_tasks`` starts a new pool. For one-off bursts such as
    a parallel trace load, whose idle workers would otherwise each keep their working set
    (~120 MiB per parse worker) for the life of the process."""
    with _lock:
        if _pool_users == 0:  # another thread's call still running on it: leave it
            _shutdown_pool_locked(wait=False)


def shutdown() -> None:
    """Stop what :func:`map_tasks` started: its worker processes and its Ray instance.

    A Ray instance (or cluster connection) that was already initialised when ``map_tasks``
    first ran belongs to the caller and is left running. Safe to call more than once; a later
    ``map_tasks`` starts afresh.
    """
    global _ray_started, _ray_chunk_task
    with _lock:
        _shutdown_pool_locked()
    if _ray_started:
        _ray_started = False
        _ray_chunk_task = None
        try:
            import ray
        except ImportError:  # pragma: no cover - it was importable when started
            return
        ray.shutdown()
