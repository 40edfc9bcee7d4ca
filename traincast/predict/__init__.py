"""Prediction: replay of a measured run and what-if predictions on it, the step predicted
from an execution trace, and the verdict's simulated opportunities. The only layer that runs
what-if simulations; analyses below it are pure functions of a TraceSet or Timeline.

``traincast.predict(ts)`` is :func:`traincast.predict.prediction.predict`.
"""

from __future__ import annotations

from traincast.util.callable_package import make_callable

# ``traincast.predict(ts)`` works after a submodule bound this package as the attribute
# ``predict`` of ``traincast``
make_callable(__name__, "traincast.predict.prediction", "predict")
