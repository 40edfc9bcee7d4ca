"""traincast: execution traces of distributed ML training -> analyses and a performance model.

Public API (imported lazily so ``import traincast`` stays cheap):

- :func:`load` -- read trace files into a :class:`~traincast.trace.traceset.TraceSet`.
- :func:`predict` -- replay a TraceSet through the simulator, giving a
  :class:`~traincast.predict.prediction.Prediction` (a
  :class:`~traincast.simulate.replay.Replay` with what-if changes on top).
- :func:`analyze` -- run analyses (breakdown, idle, kernels, collectives, critical path,
  stragglers) on a TraceSet, giving ``{name: DataFrame}``.
- :func:`plan` / :func:`plan_search` -- predict / search parallel layouts of a model config
  (:mod:`traincast.plan`).
"""

from __future__ import annotations

import importlib
from typing import Any

from traincast.version import __version__

#: subpackages reachable as attributes of ``traincast`` without importing them first
SUBPACKAGES = ("analysis", "costs", "export", "graph", "plan", "predict", "record", "report",
               "simulate", "trace", "whatif")

__all__ = ["load", "predict", "analyze", "plan", "plan_search", "__version__"]


def __getattr__(name: str) -> Any:
    # every import here is lazy on purpose: ``import traincast`` loads none of the layers
    if name == "load":
        from traincast.trace.load import load  # lazy face, by design (see above)

        return load
    if name == "predict":  # the package, callable as traincast.predict.prediction.predict
        return importlib.import_module("traincast.predict")
    if name == "analyze":
        from traincast.analysis import analyze  # lazy face, by design

        return analyze
    if name == "plan":  # the package, callable as traincast.plan.api.plan
        return importlib.import_module("traincast.plan")
    if name == "plan_search":
        from traincast.plan.search import plan_search  # lazy face, by design

        return plan_search
    if name in SUBPACKAGES:  # ``import traincast; traincast.export.to_hatchet(ts)``
        return importlib.import_module(f"traincast.{name}")
    raise AttributeError(f"module 'traincast' has no attribute {name!r}")
