"""Collective communication cost model: time of one collective from its size, group and links.

Vocabulary and definitions are nccl-tests' (https://github.com/NVIDIA/nccl-tests,
``doc/PERFORMANCE.md``), in :mod:`traincast.trace.comm_vocab`: a collective of message size
``S`` bytes (nccl-tests' ``size``: the all_reduce buffer, the all_gather *output*, the
reduce_scatter *input*, ...) over ``n`` ranks takes ``t``; ``algbw = S / t``; ``busbw = algbw *
f(n)`` with the bus factor ``f``. The model predicts ``t`` (the algbw-based time nccl-tests
reports; for a trace, the time the data moves once every rank has arrived,
:func:`~traincast.costs.comm.calls.samples_from_trace`). Times in ns, curve bandwidths in
GB/s = bytes/ns, link speeds in Gb/s per direction per GPU.

Modules, by concept:

- :mod:`~traincast.costs.comm.curve`: one bus-bandwidth curve ``t(S, n)`` (latency floor,
  saturated busbw, size ramp) and the set of curves of one collective and link class.
- :mod:`~traincast.costs.comm.fit`: fitting a curve to measured times.
- :mod:`~traincast.costs.comm.algorithms`: phases over nodes (topology) and the analytic
  ring / tree / pairwise algorithms.
- :mod:`~traincast.costs.comm.model`: :class:`CommModel`, curves per collective and link
  class, prediction, what-if bandwidths, JSON persistence.
- :mod:`~traincast.costs.comm.calls`: the call table of a trace (per-call timing and
  cross-rank match) that calibration, analysis and what-ifs read; samples from it.
- :mod:`~traincast.costs.comm.calibrate`: measurements gathered from files and folders,
  fitted and scored (``traincast calibrate comm``). Not imported by this package: it reads
  trace folders, which pulls in every trace reader.
"""

from traincast.costs.comm.algorithms import ALGORITHMS, algorithm_terms, step_latency_ns
from traincast.costs.comm.calls import CALL_COLUMNS, collective_calls, samples_from_trace
from traincast.costs.comm.curve import KINDS, Curve, CurveSet
from traincast.costs.comm.fit import fit_curve, log_density_weights
from traincast.costs.comm.model import FORMAT, LINKS, CommModel, inter_gbps_per_gpu
from traincast.costs.nccl_tests import read_nccl_tests_log, read_vtrain_lut
from traincast.trace.comm_vocab import COLLECTIVES, bus_factor

__all__ = ["ALGORITHMS", "CALL_COLUMNS", "COLLECTIVES", "FORMAT", "KINDS", "LINKS",
           "CommModel", "Curve", "CurveSet", "algorithm_terms", "bus_factor",
           "collective_calls", "fit_curve", "inter_gbps_per_gpu", "log_density_weights",
           "read_nccl_tests_log", "read_vtrain_lut", "samples_from_trace", "step_latency_ns"]
