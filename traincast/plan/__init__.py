"""Planning: predict and search parallel layouts of LLM and DLRM training from a model config.

The planner generates per-rank execution graphs from a workload, a system and a layout and
runs them through the same simulator (:mod:`traincast.simulate.engine`) and cost models
(:mod:`traincast.costs`) as trace prediction.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _PlanModule(types.ModuleType):
    """``traincast.plan`` is both this package and the function
    :func:`traincast.plan.api.plan`: importing a submodule (``traincast.plan.spec``) binds the
    package as the attribute ``plan`` of ``traincast``, so the package itself is callable."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from traincast.plan.api import plan  # the package face stays cheap to import

        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _PlanModule
