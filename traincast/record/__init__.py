"""Recording real training runs: torch profiler (Kineto) traces plus execution traces.

- :func:`record_demo` -- a short DDP run on CPU over gloo, one trace pair per rank.

torch is optional (``pip install 'traincast[record]'``) and imported only when recording.
"""

from __future__ import annotations

from traincast.record.demo import MODELS, RecordError, record_demo

__all__ = ["MODELS", "RecordError", "record_demo"]
