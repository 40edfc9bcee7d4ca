"""Recording real training runs: torch profiler (Kineto) traces plus execution traces.

- :func:`record_demo` -- a short DDP run on CPU over gloo, one trace pair per rank.
- :func:`record_command` -- any training command, unmodified (``traincast record``);
  :func:`step` ends a step when it runs with ``--step-marker call`` (a no-op otherwise).
- :mod:`traincast.record.comm_bench` / :mod:`traincast.record.microbench` -- collective and
  kernel microbenchmarks (``traincast bench``); :mod:`traincast.record.local_group` -- the
  local process group they spawn.

torch is optional (``pip install 'traincast[record]'``) and imported only when recording.
"""

from __future__ import annotations

from traincast.record.demo import MODELS, RecordError, record_demo
from traincast.record.run import record_command, step

__all__ = ["MODELS", "RecordError", "record_command", "record_demo", "step"]
