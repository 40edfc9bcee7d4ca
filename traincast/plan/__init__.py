"""Planning: predict and search parallel layouts of LLM and DLRM training from a model config.

The planner generates per-rank execution graphs from a workload, a system and a layout and
runs them through the same simulator (:mod:`traincast.simulate.engine`) and cost models
(:mod:`traincast.costs`) as trace prediction.
"""

from __future__ import annotations

from traincast.util.callable_package import make_callable

# ``traincast.plan(model, system, layout)`` works after a submodule bound this package as the
# attribute ``plan`` of ``traincast``
make_callable(__name__, "traincast.plan.api", "plan")
