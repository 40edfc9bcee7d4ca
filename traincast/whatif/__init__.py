"""What-if transforms on an execution graph (durations changed, structure kept).

:func:`parse_what_if` reads ``--what-if KEY=VALUE`` changes into a :class:`WhatIf`
(:mod:`traincast.whatif.spec`); :func:`apply_what_if` applies one to a graph built from a
measured TraceSet, giving an :class:`Applied` (the changed graph and notes;
:mod:`traincast.whatif.apply`); :func:`unprofiled_graph` removes the profiler's own host
cost from a graph (:mod:`traincast.whatif.unprofiled`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from traincast.whatif.apply import Applied, apply_what_if
    from traincast.whatif.spec import Speedup, WhatIf, parse_what_if
    from traincast.whatif.unprofiled import Unprofiled, unprofiled_graph

#: name -> the module that holds it, imported on first use: a plain replay (``traincast
#: predict`` without a what-if) reads the unprofiled step and the spec, not the transforms
_HOME = {"Applied": "apply", "apply_what_if": "apply", "Speedup": "spec", "WhatIf": "spec",
         "parse_what_if": "spec", "Unprofiled": "unprofiled", "unprofiled_graph": "unprofiled"}

__all__ = ["Applied", "Speedup", "Unprofiled", "WhatIf", "apply_what_if", "parse_what_if",
           "unprofiled_graph"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"traincast.whatif.{_HOME[name]}"), name)
    raise AttributeError(f"module 'traincast.whatif' has no attribute {name!r}")
