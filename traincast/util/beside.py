"""Run steps on a second thread beside the calling thread's work, and take their results back
in a fixed order, as if they had run on the calling thread.

:class:`Beside` starts one thread that runs its steps (``name -> function()``) in the order
given, stopping at the first that raises. The calling thread does its own work meanwhile and
then :meth:`Beside.take` s each step by name, in the order a serial run would have run them:
``take`` waits for that step only, re-emits the warnings it raised (held while the thread ran,
:func:`warnings.showwarning` in its place, see below) and returns its value or raises its
exception (the same object: type, message and attributes as a serial run gives). Leaving the
``with`` block always waits for the thread: a failure of the calling thread's own work is
raised after it ends (its unfinished steps are dropped), and no step runs on past the block.

Only work that releases the GIL gains from the second thread: numba kernels compiled with
``nogil=True``, NumPy on large arrays (ufuncs, sorts, copies), Arrow compute. Python-level
work of both threads takes turns on the GIL.

Memory: in a process that owns its C library heap (:func:`traincast.util.allocator.own_heap`,
the ``traincast`` command), the thread shares the heap and large blocks are mapped on their own
while it runs (:func:`~traincast.util.allocator.heap_for_thread`), so the steps' freed
memory does not stay in the heap under the calling thread's work.

Warnings: while the block is open, :func:`warnings.showwarning` is a router that passes the
calling threads' warnings on at once and holds the second thread's, each with its step, for
:meth:`~Beside.take` to pass on; Python's warning filters and the once-per-location registry
apply when a warning is raised, as always.

:func:`threads_allowed` says when to use it: ``TRAINCAST_SERIAL`` set to a non-empty value
other than ``0`` runs everything on the calling thread (the output is the same either way),
as does a job below a size or a process restricted to one CPU.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from traincast.util.allocator import heap_after_thread, heap_for_thread

__all__ = ["SERIAL_ENV", "Beside", "NotRun", "serial_forced", "threads_allowed"]

#: environment variable that, set (not empty, not ``0``), keeps all work on one thread
SERIAL_ENV = "TRAINCAST_SERIAL"

_MISSING = object()


def serial_forced() -> bool:
    """True when ``TRAINCAST_SERIAL`` is set to a value other than empty or ``0``."""
    return os.environ.get(SERIAL_ENV, "") not in ("", "0")


def _cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def threads_allowed(size: int, min_size: int) -> bool:
    """Whether work of ``size`` (events, rows) should use a second thread: ``size >=
    min_size``, more than one CPU, and not :func:`serial_forced`."""
    return size >= min_size and not serial_forced() and _cpus() > 1


class NotRun(RuntimeError):
    """:meth:`Beside.take` of a step the thread did not run (an earlier step failed)."""


class _Step:
    __slots__ = ("done", "error", "name", "value", "warned")

    def __init__(self, name: str) -> None:
        self.name = name
        self.done = threading.Event()
        self.value: Any = _MISSING
        self.error: BaseException | None = None
        self.warned: list[tuple[Any, ...]] = []


class Beside:
    """``with Beside([(name, fn), ...]) as side: ...; side.take(name)`` (module docstring).

    Args:
        steps: ``(name, function of no argument)`` pairs, run in this order on the thread;
            names are unique.
        then: a function of no argument the thread calls after its steps (whether or not
            one failed), e.g. a memory hint; what it raises is ignored.
    """

    def __init__(self, steps: Sequence[tuple[str, Callable[[], Any]]], *,
                 then: Callable[[], Any] | None = None) -> None:
        self._then = then
        self._fns = list(steps)
        self._steps = {name: _Step(name) for name, _ in self._fns}
        if len(self._steps) != len(self._fns):
            raise ValueError("step names must be unique")
        self._current: _Step | None = None
        self._thread = threading.Thread(target=self._run, name="traincast-beside",
                                        daemon=True)
        self._router: Iterator[None] | None = None

    def __contains__(self, name: object) -> bool:
        return name in self._steps

    def _run(self) -> None:
        for name, fn in self._fns:
            step = self._steps[name]
            self._current = step
            try:
                step.value = fn()
            except BaseException as exc:  # noqa: BLE001 - raised again by take()
                step.error = exc
            step.done.set()
            if step.error is not None:
                break
        self._current = None
        heap_after_thread()
        if self._then is not None:
            try:
                self._then()
            except Exception:  # noqa: BLE001 - a hint: the steps' results stand
                pass
        for step in self._steps.values():  # the steps not run: take() says so
            step.done.set()

    @contextmanager
    def _route_warnings(self) -> Iterator[None]:
        shown = warnings.showwarning
        me = self._thread

        def route(*args: Any, **kwargs: Any) -> None:
            step = self._current
            if threading.current_thread() is me and step is not None:
                step.warned.append((args, kwargs))
            else:
                shown(*args, **kwargs)

        warnings.showwarning = route  # type: ignore[assignment]
        self._shown = shown
        try:
            yield
        finally:
            if warnings.showwarning is route:
                warnings.showwarning = shown  # type: ignore[assignment]

    def __enter__(self) -> Beside:
        self._router = self._route_warnings()
        self._router.__enter__()
        heap_for_thread()
        try:
            self._thread.start()
        except BaseException:
            heap_after_thread()
            self._router.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._thread.join()
        finally:
            assert self._router is not None
            self._router.__exit__(None, None, None)

    def take(self, name: str) -> Any:
        """Step ``name``'s value once it is done; its warnings are shown first. Raises what
        the step raised; :class:`NotRun` when it never ran (an earlier step failed: a caller
        that takes the steps in another order than the thread ran them runs it itself)."""
        step = self._steps[name]
        step.done.wait()
        warned, step.warned = step.warned, []
        for args, kwargs in warned:
            self._shown(*args, **kwargs)
        if step.error is not None:
            err, step.error = step.error, None
            raise err
        if step.value is _MISSING:
            raise NotRun(f"step {name!r} did not run: an earlier step failed")
        value, step.value = step.value, _MISSING  # the thread holds no reference after
        return value
