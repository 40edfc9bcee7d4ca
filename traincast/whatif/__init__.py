"""What-if transforms on an execution graph (durations changed, structure kept).

:func:`parse_what_if` reads ``--what-if KEY=VALUE`` changes into a :class:`WhatIf`
(:mod:`traincast.whatif.spec`); :func:`apply_what_if` applies one to a graph built from a
measured TraceSet, giving an :class:`Applied` (the changed graph and notes;
:mod:`traincast.whatif.apply`); :func:`unprofiled_graph` removes the profiler's own host
cost from a graph (:mod:`traincast.whatif.unprofiled`).
"""

from traincast.whatif.apply import Applied, apply_what_if
from traincast.whatif.spec import Speedup, WhatIf, parse_what_if
from traincast.whatif.unprofiled import Unprofiled, unprofiled_graph

__all__ = ["Applied", "Speedup", "Unprofiled", "WhatIf", "apply_what_if", "parse_what_if",
           "unprofiled_graph"]
