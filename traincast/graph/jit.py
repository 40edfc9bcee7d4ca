"""Loading the numba-compiled loops of :mod:`traincast.graph.numba_kernels` and
:mod:`traincast.simulate.numba_kernels`: a kernel, or None when numba is missing or broken, or when
``TRAINCAST_NO_NUMBA`` is set (every caller has a numpy/Python path giving the same result).

The kernel modules are imported here by name, on first use, not at the top of their callers:
numba is an optional dependency, and importing it with its compiled cache is a start-up cost
that only the large graphs it speeds up should pay."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any


def kernel(module: str, name: str) -> Callable[..., Any] | None:
    """``module.name`` when it compiles, else None (see the module docstring)."""
    if os.environ.get("TRAINCAST_NO_NUMBA"):
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - numba missing or broken: the numpy/Python path
        return None
