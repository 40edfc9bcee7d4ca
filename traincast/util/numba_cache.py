"""Loading numba's cached machine code without its per-process compiler set-up.

A numba dispatcher with ``cache=True`` looks for machine code on disk the first time it is
called with new argument types (``Dispatcher.compile`` -> ``Cache.load_overload``). Before
it reads the cache, numba's ``load_overload`` calls ``target_context.refresh()``: the first
time in a process that imports and installs every typing and lowering registry of numba
(``numba.np.arraymath``, ``npyimpl``, ``numba.typed``, ``jitclass`` ...) and scans the
installed packages' entry points for extensions. Compiling needs all of that; loading
machine code does not. The library is rebuilt from the cached object code
(``codegen.unserialize_library``), linked against symbols already registered by numba's
CPU target (the C math and helper functions) and by the NRT (numba's runtime for arrays
allocated inside a kernel, which the loader initialises: :func:`load_cached`).

:func:`quick_loads` gives the dispatchers of a kernel module a loader that reads the cache
exactly as numba does (the same index, the same source stamp and bytecode checks, so a
kernel whose source changed misses and recompiles) but does not refresh the compiler's
context. On a miss it returns None and numba compiles as always; its compiler refreshes the
context itself (``CompilerBase.__init__``), after :func:`traincast.util.numba_blas.
skip_blas_probe` has run, so the compile does not import scipy (nor does a cached kernel
whose functions come from ``numba.np.arraymath``: :func:`quick_loads` installs
:func:`~traincast.util.numba_blas.skip_blas_probe_on_import`). The extension entry points
that ``_compile_for_args`` scans before typing the arguments are skipped as well (every
argument of a kernel is a numpy array or a Python scalar; numba's own ``typeof`` handles
them); a compile scans them in its refresh.

After each kernel it loads, :func:`load_cached` gives back the pages of LLVM's library that
loading touched (:func:`traincast.util.numba_pages.release_llvm_pages`).

If numba's internals are not as expected (another numba version), :func:`quick_loads`
leaves the dispatchers as they are: numba's own loader then runs, only slower.
"""

from __future__ import annotations

import types
from typing import Any

from numba.core.dispatcher import Dispatcher
from numba.core.runtime import rtsys

from traincast.util.numba_blas import skip_blas_probe, skip_blas_probe_on_import
from traincast.util.numba_pages import release_llvm_pages

__all__ = ["load_cached", "quick_loads"]


def load_cached(cache: Any, sig: Any, target_context: Any) -> Any:
    """numba's ``Cache.load_overload(sig, target_context)`` without its context refresh
    (module docstring): the compile result rebuilt from the cache, or None on a miss."""
    rtsys.initialize(target_context)  # the NRT: kernels allocating arrays link against it
    with cache._guard_against_spurious_io_errors():
        cres = cache._load_overload(sig, target_context)
    if cres is None:  # numba compiles next: its refresh imports numba.np.arraymath
        skip_blas_probe()
    else:  # LLVM's code ran to link it, and will not run again until the next load
        release_llvm_pages()
    return cres


def _no_entry_points() -> None:
    """The dispatcher's ``_compilation_chain_init_hook`` for kernels (module docstring)."""


def quick_loads(module: types.ModuleType) -> int:
    """Give every caching numba dispatcher of ``module`` the loader of :func:`load_cached`
    (once each), and skip numba's BLAS probe whenever ``numba.np.arraymath`` is imported
    (:func:`~traincast.util.numba_blas.skip_blas_probe_on_import`: a cached kernel using
    its functions imports it); returns how many dispatchers have the loader now."""
    skip_blas_probe_on_import()
    done = 0
    for fn in list(vars(module).values()):
        if not isinstance(fn, Dispatcher):
            continue
        cache = getattr(fn, "_cache", None)
        if getattr(cache, "_quick", False):
            done += 1
            continue
        if not (callable(getattr(cache, "_load_overload", None))
                and callable(getattr(cache, "_guard_against_spurious_io_errors", None))
                and callable(getattr(fn, "_compilation_chain_init_hook", None))):
            continue  # no cache (cache=False) or unknown internals: numba's own loader
        cache.load_overload = types.MethodType(load_cached, cache)
        cache._quick = True
        fn._compilation_chain_init_hook = _no_entry_points
        done += 1
    return done
