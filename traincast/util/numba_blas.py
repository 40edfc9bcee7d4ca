"""numba without its BLAS probe's import of scipy.

``numba.np.arraymath`` calls ``numba.np.linalg.ensure_blas()`` when it is imported (numba's
CPU target imports it before the first kernel of a process compiles or loads from its
cache), and that imports ``scipy.linalg.cython_blas``: ~0.13-0.25 s per process. No
kernel of traincast uses BLAS. :func:`skip_blas_probe` imports ``numba.np.arraymath`` with
the probe replaced by a no-op, so its flag ``_HAVE_BLAS`` is True, as the probe makes it
(scipy is a dependency), then puts numba's ``ensure_blas`` back: linear algebra compiled
later imports scipy then. Import this module before ``numba.njit`` kernels are used.
"""

from __future__ import annotations

import importlib
import sys

import numba.np.linalg as _nb_linalg

__all__ = ["skip_blas_probe"]


def skip_blas_probe() -> None:
    """Import ``numba.np.arraymath`` with its BLAS probe skipped (module docstring). Does
    nothing if it is already imported or numba has no such probe."""
    real = getattr(_nb_linalg, "ensure_blas", None)
    if "numba.np.arraymath" in sys.modules or real is None:
        return
    _nb_linalg.ensure_blas = lambda: None
    try:  # importlib: the import must happen while the probe is replaced
        importlib.import_module("numba.np.arraymath")
    finally:
        _nb_linalg.ensure_blas = real


skip_blas_probe()
