"""numba without its BLAS probe's import of scipy.

``numba.np.arraymath`` calls ``numba.np.linalg.ensure_blas()`` when it is imported, and that
imports ``scipy.linalg.cython_blas``: ~0.13-0.25 s per process. numba imports
``numba.np.arraymath`` when it prepares to compile (``refresh()``), and loading a cached
kernel imports it when the kernel uses one of its functions (``np.sort``, ``np.partition``
...: the kernel's environment names the module). No kernel of traincast uses BLAS.

:func:`skip_blas_probe` imports ``numba.np.arraymath`` with the probe replaced by a no-op,
so its flag ``_HAVE_BLAS`` is True, as the probe makes it (scipy is a dependency), then puts
numba's ``ensure_blas`` back: linear algebra compiled later imports scipy then.
:func:`skip_blas_probe_on_import` does the same whenever ``numba.np.arraymath`` is next
imported, by anyone, and costs nothing until then (an import hook for that one module):
the kernel modules install it (:mod:`traincast.util.numba_cache`), so a warm run that
never needs ``numba.np.arraymath`` (nor ``numba.np.linalg``, ~0.15 s together) does not
import it, and one that does skips the probe.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["skip_blas_probe", "skip_blas_probe_on_import"]

_TARGET = "numba.np.arraymath"


def _without_probe(run: Any) -> None:
    """Call ``run()`` with ``numba.np.linalg.ensure_blas`` replaced by a no-op."""
    # lazy: numba.np.linalg costs ~0.1 s to import, needed only with numba.np.arraymath
    import numba.np.linalg as nb_linalg

    real = getattr(nb_linalg, "ensure_blas", None)
    if real is None:
        run()
        return
    nb_linalg.ensure_blas = lambda: None
    try:
        run()
    finally:
        nb_linalg.ensure_blas = real


def skip_blas_probe() -> None:
    """Import ``numba.np.arraymath`` with its BLAS probe skipped (module docstring). Does
    nothing if it is already imported."""
    if _TARGET not in sys.modules:  # importlib: the import must happen inside the swap
        _without_probe(lambda: importlib.import_module(_TARGET))


class _Loader(importlib.abc.Loader):
    """The module's own loader, run with the probe skipped."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        _without_probe(lambda: self.real.exec_module(module))

    def __getattr__(self, name: str) -> Any:  # get_source, get_code ...: the real loader's
        return getattr(self.real, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``numba.np.arraymath`` once, with :class:`_Loader` around its loader."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != _TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one use: the next finders give the real spec
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def skip_blas_probe_on_import() -> None:
    """Skip the probe when ``numba.np.arraymath`` is next imported (module docstring).
    Does nothing if it is already imported or the hook is in place."""
    if _TARGET in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
