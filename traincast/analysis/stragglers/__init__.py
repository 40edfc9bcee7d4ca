"""Stragglers: who arrives late at collectives, who waits, and what made the late ones late.

* :func:`collective_lateness` (:mod:`.lateness`): one row per rank per matched collective
  (columns :data:`LATENESS_COLUMNS`, times in ns on an aligned clock), with the op blamed for
  a late arrival.
* :func:`straggler_report` (:mod:`.report`): ``{"ranks", "flags", "imbalance"}`` DataFrames;
  the ``kind`` of a flag is one of :data:`FLAG_KINDS`; :func:`straggler_summary` (the same
  module): the parts of it the verdict reads, as numpy columns, without pandas.

Sources: C4 (Dong et al., "Boosting Large-scale Parallel Training Efficiency with C4: A
Communication-Driven Approach", arXiv 2406.04594, HPCA 2025) — collectives are periodic and
homogeneous, so a rank that keeps the others waiting, or a call whose period departs from the
others, points at a straggler; StragglerAnalysis (Lin et al., "Understanding Stragglers in
Large Model Training Using What-if Analysis", arXiv 2505.05713) — an op is identified across
workers by its type and sequence number, and judged against the cross-worker median duration;
the modified z-score of Iglewicz and Hoaglin (1993) for outliers (:func:`robust_z`).

The same functions run on a predicted timeline (``traincast.predict(ts).timeline`` keeps the
collectives table, renumbered). A TraceSet whose collectives cannot be matched across ranks
(single-rank traces, peers' traces absent) gives an empty lateness table; the step-time parts
of the report still work.
"""

from traincast.analysis.stragglers.lateness import LATENESS_COLUMNS, NEST_SHARE, collective_lateness
from traincast.analysis.stragglers.report import (
    FLAG_KINDS,
    MIN_LATE_FRACTION,
    REL_THRESHOLD,
    Z_THRESHOLD,
    robust_z,
    straggler_report,
    straggler_summary,
)

__all__ = ["FLAG_KINDS", "LATENESS_COLUMNS", "MIN_LATE_FRACTION", "NEST_SHARE", "REL_THRESHOLD",
           "Z_THRESHOLD", "collective_lateness", "robust_z", "straggler_report",
           "straggler_summary"]
