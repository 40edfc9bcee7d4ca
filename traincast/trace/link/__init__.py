"""Execution traces (ET) joined to profiler traces: which ET file belongs to which rank
(:mod:`~traincast.trace.link.pair`) and which ET node is which Kineto event
(:mod:`~traincast.trace.link.match`).

- :func:`attach_execution_traces` -- read, pair, link and store the ETs of a TraceSet.
- :func:`pair_files` -- rank -> ET file, by the rank number in the file names.
- :func:`link_execution_trace` -- (node_id, event) pairs of one ET and one rank's events
  (:data:`LINK_SCHEMA`), refusing an ET of another run (:data:`MIN_MATCH_SCORE`,
  :data:`MAX_NAME_CONFLICT_FRACTION`).
"""

from __future__ import annotations

from traincast.trace.link.match import (
    LINK_SCHEMA,
    MAX_NAME_CONFLICT_FRACTION,
    MIN_MATCH_SCORE,
    link_execution_trace,
)
from traincast.trace.link.pair import attach_execution_traces, pair_files

__all__ = ["LINK_SCHEMA", "MAX_NAME_CONFLICT_FRACTION", "MIN_MATCH_SCORE",
           "attach_execution_traces", "link_execution_trace", "pair_files"]
