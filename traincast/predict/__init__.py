"""Prediction: what-if predictions on the replay of a measured run, the step predicted from
an execution trace, and the verdict's simulated opportunities. The only layer that runs
what-if simulations; analyses below it are pure functions of a TraceSet or a
:class:`~traincast.simulate.replay.Replay`.

- :mod:`~traincast.predict.prediction`: :func:`predict` and :class:`Prediction` (a Replay
  with what-if changes, the per-step table and the JSON contract);
- :mod:`~traincast.predict.attribution`: a what-if's change split into causes;
- :mod:`~traincast.predict.from_et`: the step from an execution trace and kernel models;
- :mod:`~traincast.predict.verdict`: where a step goes and what fixing its problems buys.

``traincast.predict(ts)`` is :func:`traincast.predict.prediction.predict`.
"""

from __future__ import annotations

from traincast.util.callable_package import make_callable

# ``traincast.predict(ts)`` works after a submodule bound this package as the attribute
# ``predict`` of ``traincast``
make_callable(__name__, "traincast.predict.prediction", "predict")
