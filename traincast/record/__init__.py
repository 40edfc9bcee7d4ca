"""Recording real training runs: torch profiler (Kineto) traces plus execution traces.

- :func:`record_demo` -- a short DDP run on CPU over gloo, one trace pair per rank.
- :func:`record_config` / :func:`record_set` -- random DLRM and Transformer configurations
  (:mod:`traincast.record.random_models`) trained on CPU: unprofiled step times plus one
  step's execution trace and one step's Kineto trace each.

torch is optional (``pip install 'traincast[record]'``) and imported only when recording.
"""

from __future__ import annotations

from traincast.record.demo import MODELS, RecordError, record_demo
from traincast.record.random_models import (
    random_dlrm_configs,
    random_transformer_configs,
    record_config,
    record_set,
)

__all__ = ["MODELS", "RecordError", "random_dlrm_configs", "random_transformer_configs",
           "record_config", "record_demo", "record_set"]
