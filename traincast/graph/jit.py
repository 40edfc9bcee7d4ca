"""Loading the numba-compiled loops of :mod:`traincast.graph.numba_kernels`,
:mod:`traincast.simulate.numba_kernels` and :mod:`traincast.analysis.numba_kernels`: a kernel,
or None, in which case the caller takes its numpy/Python path, which gives the same result.

:func:`kernel` gives None when

- numba is missing or broken, or ``TRAINCAST_NO_NUMBA`` is set (to a non-empty value);
- the call is small: ``size`` (the points of the graph the call works on, two per event, or
  the rows it loops over) is below :func:`min_size` (:data:`MIN_SIZE`, or the integer in
  ``TRAINCAST_NUMBA_MIN_SIZE``; 0 takes the compiled path for every size). Importing numba and
  loading its cached machine code costs a fixed ~0.5-0.7 s of CPU per process, more than the
  compiled loops save on a job of ~8 ranks (~40,000 points); a small job then never imports
  numba, and never waits for it to compile.

The kernel modules are imported here by name, on first use, not at the top of their callers:
numba is an optional dependency, and importing it with its compiled cache is a start-up cost
that only the large graphs it speeds up should pay. numba compiles a kernel on its first call
with a new argument type and caches the machine code on disk (``__pycache__`` beside the module,
or ``NUMBA_CACHE_DIR``) for later processes; when a kernel module is first loaded without a
usable cache, one line on stderr (a terminal only) says that the compiled paths are being built
once, before the wait. Each kernel module hands its dispatchers to
:func:`traincast.util.numba_cache.quick_loads`: a cached kernel then loads without numba's
compiler set-up (its registries), which only a compile needs.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

#: default :func:`min_size`: graph points (two per event) below which a call takes the numpy path
MIN_SIZE = 65_536

#: kernel modules whose cache was checked in this process (the progress line prints once each)
_CHECKED: set[str] = set()


def min_size() -> int:
    """The size below which :func:`kernel` gives None: ``TRAINCAST_NUMBA_MIN_SIZE`` when it is
    a non-negative integer, else :data:`MIN_SIZE`."""
    text = os.environ.get("TRAINCAST_NUMBA_MIN_SIZE", "").strip()
    return int(text) if text.isdigit() else MIN_SIZE


def worth_compiling(size: int | None) -> bool:
    """False when a call over ``size`` elements takes the numpy path (see the module
    docstring); None: no size given, the compiled path whenever numba is available."""
    return size is None or size >= min_size()


def kernel(module: str, name: str, size: int | None = None) -> Callable[..., Any] | None:
    """``module.name`` when it compiles and ``size`` is worth it, else None (see the module
    docstring)."""
    if os.environ.get("TRAINCAST_NO_NUMBA") or not worth_compiling(size):
        return None
    try:
        fn = getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - numba missing or broken: the numpy/Python path
        return None
    if module not in _CHECKED:
        _CHECKED.add(module)
        announce_compile(module, fn)
    return fn


def read_only(*arrays: Any) -> tuple[Any, ...]:
    """The numpy arrays among ``arrays`` as read-only views (other values as they are), for a
    kernel that only reads them. numba compiles and caches one machine code per argument
    type, and an array's writability is part of its type: the same column is writable when
    freshly parsed or predicted and read-only when loaded from the parse cache, and each
    variant would be compiled (seconds) on the first run that meets it. Passing read-only
    views gives one variant whatever the source."""
    out = []
    for a in arrays:
        if isinstance(a, np.ndarray) and a.flags.writeable:
            a = a.view()
            a.flags.writeable = False
        out.append(a)
    return tuple(out)


def load_on_empty(fn: Callable[..., Any], *args: Any) -> bool:
    """Call the kernel ``fn`` on empty views of ``args`` (each numpy array cut to length 0
    along its first axis; other values as they are), so that it loads (or compiles) its
    machine code for these argument types now: a caller then allocates its large buffers
    after the load's transient pages are gone, not under them. Only for a kernel that does
    nothing on empty inputs; ``args`` holds stand-ins (of the same dtype and dimensions) for
    buffers not allocated yet. Skipped (False) where a view would not have its array's type
    in numba (an array that is not C-contiguous)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    if not all(a.flags.c_contiguous for a in arrays):
        return False
    fn(*(a[:0] if isinstance(a, np.ndarray) else a for a in args))
    return True


def cache_is_warm(fn: Any) -> bool | None:
    """Whether numba's on-disk cache holds machine code of the dispatcher ``fn`` for its source
    as it is now (True), holds none (False: the first call compiles), or None when that cannot
    be told (not a caching dispatcher, or numba's cache layout unknown)."""
    try:
        return bool(fn._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - numba internals: no answer rather than an error
        return None


def announce_compile(module: str, fn: Any, stream: TextIO | None = None) -> bool:
    """Print one line on ``stream`` (stderr when it is a terminal) when ``fn``, a kernel of
    ``module``, has no cached machine code: the wait that follows is numba compiling the
    module's kernels, once. True when the line was printed."""
    if cache_is_warm(fn) is not False:
        return False
    if stream is None:
        stream = sys.stderr
        if not stream.isatty():
            return False
    stream.write(f"traincast: compiling the fast paths of {module.rsplit('.', 2)[-2]} once "
                 "(numba, up to a few seconds each; later runs load them from its cache)\n")
    stream.flush()
    return True
