"""Analyses: pure functions from a TraceSet (measured or predicted) to pandas DataFrames.

:func:`analyze` runs a selection of them and returns ``{table name: DataFrame}``; rendering
(terminal, JSON, HTML) lives in :mod:`traincast.report`.

:func:`analyze`, :data:`ANALYSES`, :data:`NEED_REPLAY`, :data:`USE_REPLAY` and
:func:`split_names` live in :mod:`traincast.analysis.run` and are reached here on first use, so
importing one analysis module (``traincast predict`` imports the replay's step table) does not
import every analysis and pandas with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from traincast.analysis.run import (
        ANALYSES,
        NEED_REPLAY,
        USE_REPLAY,
        analyze,
        split_names,
    )

__all__ = ["ANALYSES", "NEED_REPLAY", "USE_REPLAY", "analyze", "split_names"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("traincast.analysis.run"), name)
    raise AttributeError(f"module 'traincast.analysis' has no attribute {name!r}")
