"""numba without its BLAS probe's import of scipy.

``numba.np.arraymath`` calls ``numba.np.linalg.ensure_blas()`` when it is imported (numba's
CPU target imports it when it prepares to compile, in ``refresh()``), and that imports
``scipy.linalg.cython_blas``: ~0.13-0.25 s per process. No kernel of traincast uses BLAS.
:func:`skip_blas_probe` imports ``numba.np.arraymath`` with the probe replaced by a no-op,
so its flag ``_HAVE_BLAS`` is True, as the probe makes it (scipy is a dependency), then puts
numba's ``ensure_blas`` back: linear algebra compiled later imports scipy then.

Nothing is imported when this module is: loading kernels from numba's cache needs neither
``numba.np.linalg`` nor ``numba.np.arraymath`` (~0.15 s together), so
:func:`traincast.util.numba_cache.load_cached` calls :func:`skip_blas_probe` only before a
compile. A compile that comes another way (a kernel module's dispatcher called without
:func:`~traincast.util.numba_cache.quick_loads`) imports scipy as numba does: the same
result, ~0.2 s slower.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["skip_blas_probe"]


def skip_blas_probe() -> None:
    """Import ``numba.np.arraymath`` with its BLAS probe skipped (module docstring). Does
    nothing if it is already imported or numba has no such probe."""
    if "numba.np.arraymath" in sys.modules:
        return
    # lazy: numba.np.linalg costs ~0.1 s to import, needed only when a kernel compiles
    import numba.np.linalg as nb_linalg

    real = getattr(nb_linalg, "ensure_blas", None)
    if real is None:
        return
    nb_linalg.ensure_blas = lambda: None
    try:  # importlib: the import must happen while the probe is replaced
        importlib.import_module("numba.np.arraymath")
    finally:
        nb_linalg.ensure_blas = real
