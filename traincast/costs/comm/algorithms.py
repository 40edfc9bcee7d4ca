"""Topology and algorithms: how a collective splits into phases over nodes, and the
textbook alpha-beta time of ring, tree and pairwise algorithms.

Topology. ``ranks_per_node`` ``r`` is how many of the group's ranks share a node (default:
:attr:`CommModel.gpus_per_node`, else the whole group is in one node). A group with ``n <=
r`` uses the intra curves. A group spanning ``m = ceil(n / r)`` nodes is modelled
hierarchically, each phase on its own link class, the intra-node phases over ``r`` ranks and
the inter-node phases over ``m`` ranks on per-GPU shards, as in the hierarchical all-reduce
of Jia et al., "Highly Scalable Deep Learning Training System with Mixed-Precision" (arXiv
1807.11205, Sec. 3.3: intra-node reduce, inter-node all-reduce, intra-node broadcast) and
Horovod's ``HOROVOD_HIERARCHICAL_ALLREDUCE``; NCCL's own tree (NCCL 2.4) likewise chains the
GPUs of a node and runs the double binary tree between nodes, and its rings cross the network
once per node per channel, so either way each GPU moves its ``1/r`` share across the network:

- all_reduce: reduce_scatter intra (``S``, ``r``) + all_reduce inter (``S/r``, ``m``) +
  all_gather intra (``S``, ``r``)
- reduce_scatter (scatter): reduce_scatter intra (``S``, ``r``) + inter (``S/r``, ``m``)
- all_gather (gather): all_gather inter (``S/r``, ``m``) + all_gather intra (``S``, ``r``)
- broadcast, reduce, send, recv: inter (``S/r``, ``m``, factor 1) + intra (``S``, ``r``)
- all_to_all: each rank sends ``S (n-r)/n`` across the network and ``S (r-1)/n`` inside the
  node, concurrently: ``max(alpha_inter(m) + S (n-r)/n / B_inter, alpha_intra(r) + S (r-1)/n
  / B_intra)``
- barrier: ``alpha_inter(m) + alpha_intra(r)``

Phases are added: no pipelining between them. NCCL's rings and trees pipeline the intra-
and inter-node parts, so when the two take comparable time this overestimates large messages
(by up to 2x; the pipelined time is nearer the larger phase).

Algorithms (``algorithm=`` of :meth:`CommModel.predict_ns`). By default (``None`` or
"auto") a prediction is the fitted curve, which already reflects whatever algorithm and
protocol NCCL chose when the data was measured. "ring", "tree" and "pairwise" instead
evaluate the textbook alpha-beta time of that algorithm, with a per-step latency
``alpha`` and the bus bandwidth ``B`` taken from the curve (below), so that one can ask
"what if NCCL used tree at 256 ranks?"; "best" takes the faster of those that apply
(:meth:`CommModel.choose_algorithm`), as NCCL's tuner picks the algorithm its own
latency + size / bandwidth model says is fastest (NVIDIA/nccl ``src/graph/tuning.cc``,
``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``). With ``beta = 1 / B`` and ``S`` the
nccl-tests size over ``n`` ranks::

    all_reduce      ring   2(n-1) alpha + 2(n-1)/n S beta
                    tree   2 log2(n) alpha + 2 S beta
    broadcast,      ring   (n-1) alpha + S beta        (pipelined chain)
    reduce          tree   log2(n) alpha + S beta      (pipelined double binary tree)
    all_gather,     ring   (n-1) alpha + (n-1)/n S beta
    reduce_scatter
    all_to_all      pairwise  (n-1) alpha + (n-1)/n S beta

- Ring: Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations
  in MPICH", IJHPCA 2005 (ring allgather ``(p-1) alpha + (p-1)/p n beta``; ring allreduce
  = reduce-scatter + allgather ``2(p-1) alpha + 2(p-1)/p n beta``; pairwise-exchange
  all-to-all ``(p-1) alpha + n beta (p-1)/p`` for long messages; there ``n`` is the data
  per process). NCCL's tuner uses the same step counts: ``nsteps = 2(n-1)``
  (all_reduce), ``n-1`` (all_gather, reduce_scatter), and converts busbw to algbw with
  ``n / nsteps`` for ring (tuning.cc, as read at NVIDIA/nccl commit 01afd20).
- Tree: NCCL 2.4's double binary tree (Jeaugey, "Massively Scale Your Deep Learning
  Training with NCCL 2.4", NVIDIA developer blog, 2019), after Sanders, Speck & Traeff,
  "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel
  Computing 35(12), 2009: two complementary binary trees, each carrying half the data,
  so every rank sends and receives ``S`` per direction of the tree (full bandwidth) and
  the pipelined latency is logarithmic. An all_reduce is a reduce up the trees then a
  broadcast down: ``2 log2(n)`` steps and ``2 S`` bytes per rank. tuning.cc models it the
  same way: algbw = busbw x 0.5 for tree (``ratio = .5``), latency ``2 x ((ranks per node
  - 1) x intraLat + log2(nNodes) x interLat)``. (NCCL also caps and derates the tree's busbw
  and corrects it for medium sizes; that is not modelled: both algorithms get the same
  ``B``.) So for large messages the tree is *slower* than the ring by ``n / (n-1)``
  (2x at n = 2, 1.14x at n = 8, -> 1 for large n), and for small messages faster once
  ``2 log2(n) < 2(n-1)``, i.e. from n = 3 on, by a margin growing as ``n / log2(n)``.

``alpha`` and ``B`` from the curve the prediction would use (same link class, collective
curve or the all_reduce one, per-group curve if fitted): ``B`` is its saturated busbw
(:meth:`Curve.saturated_busbw_gbps` at the curve's own bus factor; no size ramp: the
analytic algorithms are pure alpha-beta). The curve's latency ``alpha(n) = alpha0 +
alpha1 (n-1)`` is read as a ring's: ``alpha0`` fixed (launch) plus ``c (n-1)`` steps of
``alpha`` each, ``c`` = 2 for an all_reduce curve and 1 otherwise, so ``alpha = alpha1 /
c``. When ``alpha1`` was not fitted (one group size ``n0``, or an unfitted curve from
:meth:`CommModel.from_links` / :meth:`CommModel.with_bandwidth`, taken as ``n0 = 2``), the
whole latency is put on the steps: ``alpha = alpha(n0) / (c (n0-1))`` and no fixed part
(NCCL's tuning.cc base latency is a small share of a ring's at 8 ranks: 8.4 us of 56 us
for Simple on NVLink). Either way the ring reproduces the curve's latency at the measured
group sizes. Across nodes the algorithm applies to each phase of the hierarchical plan
("Topology" above) that it applies to, the others (intra-node reduce_scatter / all_gather
of an all_reduce) being rings: a tree all_reduce over ``m`` nodes of ``r`` ranks takes
``2(r-1) alpha_intra + 2 log2(m) alpha_inter`` of latency, tuning.cc's tree latency; a
pairwise all_to_all takes ``n - r`` inter-node and ``r - 1`` intra-node steps.

The inter-node bandwidth is per GPU: the node's NICs shared by its GPUs,
:func:`inter_gbps_per_gpu` (``NICs per node x NIC Gb/s / GPUs per node``). Link speeds given
to :meth:`CommModel.from_links` and :meth:`CommModel.with_bandwidth` are in Gb/s per
"""

from __future__ import annotations

import math

import numpy as np

from traincast.costs.comm.curve import Curve
from traincast.errors import ParameterError

__all__ = ["ALGORITHMS", "algorithm_terms", "step_latency_ns"]

#: analytic algorithms per collective (module docstring "Algorithms"); the first is the
#: one ``best`` keeps on a tie
ALGORITHMS = {"all_reduce": ("ring", "tree"), "broadcast": ("ring", "tree"),
              "reduce": ("ring", "tree"), "all_gather": ("ring",),
              "reduce_scatter": ("ring",), "all_to_all": ("pairwise",)}
_ALGORITHM_NAMES = ("auto", "best", "ring", "tree", "pairwise")


def _phase_plan(collective: str, s: np.ndarray, n: int, r: int) -> list[tuple]:
    """Phases of a collective over ``m = ceil(n/r)`` nodes: (collective, link, size, group,
    factor); module docstring "Topology". Combined by sum, except all_to_all (max)."""
    m = -(-n // r)
    half_r, half_m = (r - 1) / r, (m - 1) / m
    if collective == "all_reduce":
        return [("reduce_scatter", "intra", s, r, half_r),
                ("all_reduce", "inter", s / r, m, 2.0 * half_m),
                ("all_gather", "intra", s, r, half_r)]
    if collective in ("reduce_scatter", "scatter"):
        return [(collective, "intra", s, r, half_r), (collective, "inter", s / r, m, half_m)]
    if collective in ("all_gather", "gather"):
        return [(collective, "inter", s / r, m, half_m), (collective, "intra", s, r, half_r)]
    if collective == "all_to_all":
        return [("all_to_all", "inter", s, m, (n - r) / n),
                ("all_to_all", "intra", s, r, (r - 1) / n)]
    if collective == "barrier":
        return [("barrier", "inter", s * 0.0, m, 0.0), ("barrier", "intra", s * 0.0, r, 0.0)]
    return [(collective, "inter", s / r, m, 1.0), (collective, "intra", s, r, 1.0)]


def _check_algorithm(collective: str, algorithm: str | None) -> str:
    """``algorithm`` normalised ("auto" for None); raises if unknown or not applicable."""
    if algorithm is None:
        return "auto"
    if not isinstance(algorithm, str) or algorithm.lower() not in _ALGORITHM_NAMES:
        raise ParameterError(f"unknown algorithm {algorithm!r} "
                             f"(known: {', '.join(_ALGORITHM_NAMES)})")
    algorithm = algorithm.lower()
    if algorithm == "auto":
        return algorithm
    have = ALGORITHMS.get(collective, ())
    if algorithm not in have and not (algorithm == "best" and have):
        raise ParameterError(f"algorithm {algorithm!r} does not apply to {collective} "
                             f"(applies: {', '.join(have) or 'none, use algorithm=None'})")
    return algorithm


def algorithm_terms(collective: str, algorithm: str, n: float) -> tuple[float, float]:
    """``(steps, bytes factor)`` of an analytic algorithm over ``n`` ranks: its time is
    ``steps x alpha + factor x S / B`` (module docstring "Algorithms").

    Raises:
        ParameterError: an algorithm that does not apply to the collective.
    """
    if algorithm not in ALGORITHMS.get(collective, ()):
        raise ParameterError(f"algorithm {algorithm!r} does not apply to {collective}")
    if n <= 1:
        return 0.0, 0.0
    if collective == "all_reduce":
        return ((2.0 * (n - 1.0), 2.0 * (n - 1.0) / n) if algorithm == "ring"
                else (2.0 * math.log2(n), 2.0))
    if collective in ("broadcast", "reduce"):
        return (n - 1.0, 1.0) if algorithm == "ring" else (math.log2(n), 1.0)
    return n - 1.0, (n - 1.0) / n  # all_gather, reduce_scatter ring; all_to_all pairwise


def step_latency_ns(curve: Curve, owner: str) -> tuple[float, float]:
    """``(fixed, per-step)`` latency (ns) of a curve fitted to ``owner`` collectives, read
    as a ring's (module docstring "Algorithms")."""
    c = 2.0 if owner == "all_reduce" else 1.0
    if curve.alpha1_ns > 0:
        return curve.alpha0_ns, curve.alpha1_ns / c
    n0 = max(curve.group_sizes) if curve.group_sizes else 2
    n0 = max(n0, 2)
    return 0.0, float(curve.latency_ns(n0)) / (c * (n0 - 1.0))
