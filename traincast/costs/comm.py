"""Collective communication cost model: time of one collective from its size, group and links.

Vocabulary and definitions are nccl-tests' (https://github.com/NVIDIA/nccl-tests,
``doc/PERFORMANCE.md``; see also :mod:`traincast.analysis.comm`): a collective of message size
``S`` bytes (nccl-tests' ``size``: the all_reduce buffer, the all_gather *output*, the
reduce_scatter *input*, ...) over ``n`` ranks takes ``t``; ``algbw = S / t``; ``busbw = algbw *
f(n)`` with the bus factor ``f`` = ``2(n-1)/n`` (all_reduce), ``(n-1)/n`` (all_gather,
reduce_scatter, all_to_all, gather, scatter), ``1`` (broadcast, reduce, send, recv). The
model predicts ``t`` (the algbw-based time nccl-tests reports; for a trace, the time the data
moves once every rank has arrived, :func:`samples_from_trace`).

Model (one *curve* per collective and link class, "intra" = within a node, "inter" = between
nodes; times in ns, bandwidths in GB/s = bytes/ns)::

    t(S, n) = alpha(n) + S * f(n) / B(S, n)
    alpha(n) = alpha0 + alpha1 * (n - 1)                               latency floor
    1 / B(S, n) = (1 / B_link + gamma / f(n)) * ramp(S)               bus bandwidth

- ``alpha(n)``: a ring collective takes ``2(n-1)`` (all_reduce) or ``n-1`` steps, each with a
  fixed latency, on top of a launch overhead (Thakur, Rabenseifner & Gropp, "Optimization of
  collective communication operations in MPICH", IJHPCA 2005, Sec. 2: ``T = 2(p-1)alpha +
  2((p-1)/p) n beta`` for ring allreduce). ``alpha1`` is fitted only when the samples hold more
  than one group size, else 0.
- ``B_link``: the saturated bus bandwidth of the link (the "hardware bottleneck" busbw is
  meant to measure, PERFORMANCE.md). ``gamma`` (ns/byte) is a per-byte cost that does not
  scale with the bus factor; it makes the saturated busbw grow with ``n`` the way NVSwitch
  measurements do (vTrain A100, 2..8 GPUs: 193 -> 227 GB/s; one ``B_link`` = 292 GB/s and
  ``1/gamma`` = 520 GB/s reproduce all seven group sizes within 1.6%). Fitted only when the
  samples hold more than one bus factor, else 0.
- ``ramp(S)`` (sigmoid kind only): the size dependence of the bandwidth, as in Lin et al.,
  "Towards Universal Performance Modeling for Machine Learning Training on Multi-GPU
  Platforms" (arXiv 2404.12674, Sec. 4.3), whose code (owensgroup/ml_perf_model,
  ``analysis/memory_bw_utils.py``: ``sigmoid``, ``fit_sigmoid_bw_predictor``) fits
  ``log10(busbw) = L / (1 + exp(-k (log2 S - x0))) + b`` with ``scipy.optimize.curve_fit``.
  Here the same sigmoid in ``log2 S`` multiplies the bandwidth term, ``ramp(S) = 10 ** (L *
  (1 - sigmoid(k (log2 S - x0))))`` (1 when saturated, ``10**L`` far below ``x0``), so that
  the latency floor ``alpha`` stays a separate term for every size (the reference switches
  to a constant "overhead" below its fitted range instead). ``L * k`` is bounded by ``4 ln 2
  / ln 10`` so busbw never grows faster than the size and ``t`` is non-decreasing in ``S``.
  The alpha-beta kind has ``ramp = 1``.

Fitting (:meth:`CommModel.fit`): least squares on ``log t`` (relative errors) with
:func:`scipy.optimize.least_squares` (bounded trust-region reflective, analytic Jacobian),
started from a non-negative linear least-squares fit of ``t = alpha0 + alpha1 (n-1) + S f /
B_link + S gamma`` (:func:`scipy.optimize.nnls`). By default each sample is weighted by the
inverse number of samples of its (collective, group size) within half an octave of its size,
so that every octave of sizes counts alike (a 1 MiB-step grid would otherwise be all large
messages). Each collective gets a pooled curve over all its group sizes (this is what carries
to an unseen ``n``) and, when several group sizes were measured, one curve per group size,
used for exactly that ``n``.

Collectives without samples use the all_reduce curve of the same link class with their own
bus factor: same ``alpha(n)`` and bus-bandwidth curve, ``t = alpha(n) + S f_c(n) / B``. That is
the premise of busbw (PERFORMANCE.md: "Using this bus bandwidth, we can compare it with the
hardware peak bandwidth, independently of the number of ranks used"); it ignores per-collective
latency and algorithm differences.

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
(below) that it applies to, the others (intra-node reduce_scatter / all_gather of an
all_reduce) being rings: a tree all_reduce over ``m`` nodes of ``r`` ranks takes
``2(r-1) alpha_intra + 2 log2(m) alpha_inter`` of latency, tuning.cc's tree latency; a
pairwise all_to_all takes ``n - r`` inter-node and ``r - 1`` intra-node steps.

The inter-node bandwidth is per GPU: the node's NICs shared by its GPUs,
:func:`inter_gbps_per_gpu` (``NICs per node x NIC Gb/s / GPUs per node``). Link speeds given
to :meth:`CommModel.from_links` and :meth:`CommModel.with_bandwidth` are in Gb/s per
direction per GPU (catalog units; busbw GB/s = Gb/s / 8); curves are in GB/s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

from traincast.costs.nccl_tests import read_nccl_tests_log, read_vtrain_lut
from traincast.errors import ParameterError

__all__ = ["ALGORITHMS", "COLLECTIVES", "CommModel", "Curve", "CurveSet", "bus_factor", "inter_gbps_per_gpu",
           "read_nccl_tests_log", "read_vtrain_lut", "samples_from_trace"]

#: collectives the model knows (traincast's canonical names)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
               "reduce", "send", "recv", "gather", "scatter", "barrier")
#: analytic algorithms per collective (module docstring "Algorithms"); the first is the
#: one ``best`` keeps on a tie
ALGORITHMS = {"all_reduce": ("ring", "tree"), "broadcast": ("ring", "tree"),
              "reduce": ("ring", "tree"), "all_gather": ("ring",),
              "reduce_scatter": ("ring",), "all_to_all": ("pairwise",)}
_ALGORITHM_NAMES = ("auto", "best", "ring", "tree", "pairwise")
_HALF = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
_ONE = ("broadcast", "reduce", "send", "recv")
KINDS = ("alpha_beta", "sigmoid")
LINKS = ("intra", "inter")
#: largest L*k: d ln(busbw) / d ln(S) <= 1, so t is non-decreasing in S
_LK_MAX = 4.0 * math.log(2.0) / math.log(10.0)
_LN10 = math.log(10.0)
FORMAT = "traincast.comm_model/1"


def _check_collective(collective: str) -> str:
    if collective not in COLLECTIVES:
        raise ParameterError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    return collective


def bus_factor(collective: str, group_size: int | np.ndarray) -> float | np.ndarray:
    """nccl-tests busbw / algbw factor ``f(n)`` (PERFORMANCE.md "Summary"); 0 for barrier.

    Raises:
        ParameterError: unknown collective or a group size < 1.
    """
    _check_collective(collective)
    n = np.asarray(group_size, dtype=np.float64)
    if np.any(n < 1) or not np.all(np.isfinite(n)):
        raise ParameterError(f"group_size must be >= 1, got {group_size}")
    if collective == "all_reduce":
        f = 2.0 * (n - 1.0) / n
    elif collective in _HALF:
        f = (n - 1.0) / n
    elif collective in _ONE:
        f = np.ones_like(n)
    else:  # barrier: no payload
        f = np.zeros_like(n)
    return float(f) if np.ndim(f) == 0 else f


def inter_gbps_per_gpu(nics_per_node: int, nic_gbps: float, gpus_per_node: int) -> float:
    """Inter-node bandwidth per GPU (Gb/s per direction): ``nics x nic_gbps / gpus``."""
    for name, v in (("nics_per_node", nics_per_node), ("nic_gbps", nic_gbps),
                    ("gpus_per_node", gpus_per_node)):
        if not v > 0:
            raise ParameterError(f"{name} must be > 0, got {v}")
    return nics_per_node * nic_gbps / gpus_per_node


# --------------------------------------------------------------------------------------------
# one curve


@dataclass(frozen=True)
class Curve:
    """``t(S, n, f) = alpha0 + alpha1 (n-1) + S (f / busbw_gbps + gamma) ramp(S)`` (ns).

    Attributes:
        kind: "alpha_beta" (``ramp = 1``) or "sigmoid".
        alpha0_ns, alpha1_ns: latency floor ``alpha(n) = alpha0 + alpha1 (n-1)``.
        busbw_gbps: ``B_link``, saturated bus bandwidth (GB/s) of the factor-scaled term.
        gamma_ns_per_byte: per-byte cost not scaled by the bus factor.
        ramp: ``(L, k, x0, x_max)`` of ``ramp(S) = 10**(L (1 - sigmoid(k (min(log2 S, x_max)
            - x0))))``; ``x_max`` = log2 of the largest fitted size: above it the bandwidth
            stays at its value there (no extrapolated growth).
        group_sizes: the group sizes it was fitted on (empty if not fitted).
        samples: number of samples it was fitted on.
    """

    kind: str
    alpha0_ns: float
    busbw_gbps: float
    alpha1_ns: float = 0.0
    gamma_ns_per_byte: float = 0.0
    ramp: tuple[float, float, float, float] | None = None
    group_sizes: tuple[int, ...] = ()
    samples: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ParameterError(f"unknown curve kind {self.kind!r} (known: {', '.join(KINDS)})")
        if not (self.busbw_gbps > 0 and math.isfinite(self.busbw_gbps)):
            raise ParameterError(f"bus bandwidth must be > 0 GB/s, got {self.busbw_gbps}")
        for name in ("alpha0_ns", "alpha1_ns", "gamma_ns_per_byte"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ParameterError(f"{name} must be >= 0, got {v}")

    def latency_ns(self, n: float | np.ndarray) -> float | np.ndarray:
        """``alpha(n)``."""
        return self.alpha0_ns + self.alpha1_ns * (np.asarray(n, np.float64) - 1.0)

    def slowdown(self, size_bytes: float | np.ndarray) -> np.ndarray:
        """``ramp(S)`` >= 1: factor by which the bandwidth is below its saturated value."""
        s = np.asarray(size_bytes, np.float64)
        if self.ramp is None:
            return np.ones_like(s)
        big_l, k, x0, x_max = self.ramp
        x = np.minimum(np.log2(np.maximum(s, 1e-300)), x_max)
        return 10.0 ** (big_l * (1.0 - expit(k * (x - x0))))

    def time_ns(self, size_bytes: float | np.ndarray, n: float | np.ndarray,
                factor: float | np.ndarray) -> np.ndarray:
        """Predicted time (ns) of a phase moving ``S * factor`` bytes per rank."""
        s = np.asarray(size_bytes, np.float64)
        per_byte = np.asarray(factor, np.float64) / self.busbw_gbps + self.gamma_ns_per_byte
        return self.latency_ns(n) + s * per_byte * self.slowdown(s)

    def saturated_busbw_gbps(self, factor: float) -> float:
        """busbw (GB/s) for large messages at bus factor ``factor`` (> 0)."""
        return factor / (factor / self.busbw_gbps + self.gamma_ns_per_byte)

    def scaled(self, ratio: float) -> Curve:
        """The same curve with every per-byte cost divided by ``ratio`` (latency kept)."""
        return replace(self, busbw_gbps=self.busbw_gbps * ratio,
                       gamma_ns_per_byte=self.gamma_ns_per_byte / ratio)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "alpha0_ns": self.alpha0_ns, "alpha1_ns": self.alpha1_ns,
                "busbw_gbps": self.busbw_gbps, "gamma_ns_per_byte": self.gamma_ns_per_byte,
                "ramp": list(self.ramp) if self.ramp is not None else None,
                "group_sizes": list(self.group_sizes), "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict) -> Curve:
        try:
            return cls(kind=d["kind"], alpha0_ns=float(d["alpha0_ns"]),
                       busbw_gbps=float(d["busbw_gbps"]), alpha1_ns=float(d["alpha1_ns"]),
                       gamma_ns_per_byte=float(d["gamma_ns_per_byte"]),
                       ramp=tuple(float(v) for v in d["ramp"]) if d.get("ramp") else None,
                       group_sizes=tuple(int(v) for v in d.get("group_sizes", ())),
                       samples=int(d.get("samples", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ParameterError(f"bad curve in comm model JSON: {exc}") from exc


@dataclass(frozen=True)
class CurveSet:
    """A pooled curve over all measured group sizes plus one curve per measured size."""

    pooled: Curve
    by_n: dict[int, Curve] = field(default_factory=dict)

    def pick(self, n: int) -> Curve:
        return self.by_n.get(int(n), self.pooled)

    def scaled(self, ratio: float) -> CurveSet:
        return CurveSet(self.pooled.scaled(ratio), {n: c.scaled(ratio) for n, c in self.by_n.items()})

    def to_dict(self) -> dict:
        return {"pooled": self.pooled.to_dict(),
                "by_n": {str(n): c.to_dict() for n, c in sorted(self.by_n.items())}}

    @classmethod
    def from_dict(cls, d: dict) -> CurveSet:
        try:
            return cls(Curve.from_dict(d["pooled"]),
                       {int(n): Curve.from_dict(c) for n, c in d.get("by_n", {}).items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ParameterError(f"bad curve set in comm model JSON: {exc}") from exc


# --------------------------------------------------------------------------------------------
# fitting one curve


def log_density_weights(size_bytes: np.ndarray) -> np.ndarray:
    """1 / (samples within half an octave of each size), scaled to mean 1."""
    x = np.log2(np.asarray(size_bytes, np.float64))
    xs = np.sort(x)
    count = np.searchsorted(xs, x + 0.5, side="right") - np.searchsorted(xs, x - 0.5)
    w = 1.0 / count
    return w / w.mean()


#: order of the internal parameter vector (``s`` = L k / _LK_MAX, the steepest log-log slope)
_P_NAMES = ("alpha0", "alpha1", "log10_busbw", "gamma", "k", "s", "x0")


def _model_and_jac(p: np.ndarray, s: np.ndarray, nm1: np.ndarray, f: np.ndarray,
                   x: np.ndarray, sigmoid: bool) -> tuple[np.ndarray, np.ndarray]:
    """Predicted t and d t / d p for the full parameter vector (see ``_P_NAMES``)."""
    a0, a1, lb, g, k, sl, x0 = p
    inv_b = 10.0 ** (-lb)
    per = s * (f * inv_b + g)
    jac = np.empty((s.size, 7))
    if sigmoid:
        big_l = _LK_MAX * sl / k
        sig = expit(k * (x - x0))
        r = 10.0 ** (big_l * (1.0 - sig))
        dr_dl = r * _LN10 * (1.0 - sig)
        dr_dsig = -r * _LN10 * big_l
        dsig = sig * (1.0 - sig)
        jac[:, 4] = per * (dr_dl * (-big_l / k) + dr_dsig * dsig * (x - x0))
        jac[:, 5] = per * dr_dl * (_LK_MAX / k)
        jac[:, 6] = per * dr_dsig * (-k * dsig)
    else:
        r = np.ones_like(s)
        jac[:, 4:] = 0.0
    t = a0 + a1 * nm1 + per * r
    jac[:, 0] = 1.0
    jac[:, 1] = nm1
    jac[:, 2] = -_LN10 * s * f * inv_b * r
    jac[:, 3] = s * r
    return t, jac


def fit_curve(size_bytes: np.ndarray, group_size: np.ndarray, factor: np.ndarray,
              time_ns: np.ndarray, *, kind: str = "sigmoid", weights: np.ndarray | None = None,
              init: Curve | None = None) -> tuple[Curve, list[str]]:
    """Fit one :class:`Curve` to samples (see the module docstring); returns it and notes.

    ``init`` warm-starts the optimiser from a curve (one start instead of four for the
    sigmoid, whose midpoint ``x0`` starts at four points spread over the log-size range).
    """
    if kind not in KINDS:
        raise ParameterError(f"unknown model kind {kind!r} (known: {', '.join(KINDS)})")
    s = np.asarray(size_bytes, np.float64)
    n = np.asarray(group_size, np.float64)
    f = np.asarray(factor, np.float64)
    t = np.asarray(time_ns, np.float64)
    if not (s.shape == n.shape == f.shape == t.shape) or s.size == 0:
        raise ParameterError("size_bytes, group_size, factor and time_ns must be non-empty "
                             "arrays of one length")
    if not (np.all(s > 0) and np.all(t > 0) and np.all(np.isfinite(s)) and np.all(np.isfinite(t))
            and np.all(n >= 1) and np.all(f >= 0)):
        raise ParameterError("fit_curve needs sizes > 0, times > 0, group sizes >= 1 and bus "
                             "factors >= 0")
    notes: list[str] = []
    w = np.ones_like(t) if weights is None else np.asarray(weights, np.float64)
    if w.shape != t.shape or not np.all(w > 0):
        raise ParameterError("weights must be > 0, one per sample")
    sw = np.sqrt(w / w.mean())
    x = np.log2(s)
    distinct_sizes = np.unique(s).size
    if kind == "sigmoid" and distinct_sizes < 6:
        notes.append(f"{distinct_sizes} distinct sizes: alpha-beta instead of sigmoid")
        kind = "alpha_beta"
    if distinct_sizes < 2:
        notes.append("one message size: latency and bandwidth are not separable")
    multi_n = np.unique(n).size > 1
    multi_f = np.unique(np.round(f, 12)).size > 1
    nm1 = n - 1.0
    # linear start: t = a0 + a1 (n-1) + S f / B + S g, relative (1/t) weights
    cols = [np.ones_like(t), nm1, s * f, s]
    use = [True, multi_n, True, multi_f]
    a = np.column_stack([c for c, u in zip(cols, use, strict=True) if u]) * (sw / t)[:, None]
    from scipy.optimize import nnls  # fitting only: keeps prediction imports light

    coef, _ = nnls(a, sw, maxiter=50 * a.shape[1])
    full = np.zeros(4)
    full[np.array(use)] = coef
    if full[2] <= 0:  # NNLS put it all on latency/gamma: start from the median busbw
        full[2] = 1.0 / max(np.median(s * f / t), 1e-6)
    p0 = np.array([full[0], full[1], -np.log10(full[2]), full[3], 1.0, 0.5, x.mean()])
    tmax = float(t.max())
    lo = np.array([0.0, 0.0, -4.0, 0.0, 0.05, 0.0, x.min() - 6.0])
    hi = np.array([tmax, tmax, 6.0, 10.0, 8.0, 0.98, x.max() + 2.0])
    free = np.array([True, multi_n, True, multi_f] + [kind == "sigmoid"] * 3)
    starts = []
    if init is not None:
        q = p0.copy()
        q[0] = init.alpha0_ns if multi_n else float(init.latency_ns(n.mean()))
        q[1] = init.alpha1_ns
        if multi_f:
            q[2], q[3] = math.log10(init.busbw_gbps), init.gamma_ns_per_byte
        else:
            q[2], q[3] = math.log10(init.saturated_busbw_gbps(float(f.mean()) or 1.0)), 0.0
        if init.ramp is not None:
            big_l, k, x0, _ = init.ramp
            q[4], q[5], q[6] = k, big_l * k / _LK_MAX, x0
        starts.append(q)
    else:
        if kind == "sigmoid":  # ramp midpoints spread over the log-size range
            for x0 in np.linspace(x.min(), x.max(), 4):
                q = p0.copy()
                q[6] = x0
                starts.append(q)
        else:
            starts.append(p0)
    sigmoid = kind == "sigmoid"
    log_t = np.log(t)

    def residuals(q: np.ndarray, base: np.ndarray) -> np.ndarray:
        p = base.copy()
        p[free] = q
        pred, _ = _model_and_jac(p, s, nm1, f, x, sigmoid)
        return sw * (np.log(np.maximum(pred, 1e-30)) - log_t)

    def jacobian(q: np.ndarray, base: np.ndarray) -> np.ndarray:
        p = base.copy()
        p[free] = q
        pred, jac = _model_and_jac(p, s, nm1, f, x, sigmoid)
        return (sw / np.maximum(pred, 1e-30))[:, None] * jac[:, free]

    best = None
    for q0 in starts:
        q0 = np.clip(q0, lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
        q0[1] = q0[1] if free[1] else 0.0  # alpha1, gamma: 0 unless identifiable
        q0[3] = q0[3] if free[3] else 0.0
        from scipy.optimize import least_squares  # fitting only

        res = least_squares(residuals, q0[free], jac=jacobian, bounds=(lo[free], hi[free]),
                            args=(q0,), x_scale="jac", method="trf")
        if best is None or res.cost < best[0].cost:
            best = (res, q0)
    res, base = best
    p = base.copy()
    p[free] = res.x
    a0, a1, lb, g, k, sl, x0 = (float(v) for v in p)
    ramp = (_LK_MAX * sl / k, k, x0, float(x.max())) if sigmoid else None
    curve = Curve(kind=kind, alpha0_ns=a0, alpha1_ns=a1 if multi_n else 0.0,
                  busbw_gbps=10.0 ** lb, gamma_ns_per_byte=g if multi_f else 0.0, ramp=ramp,
                  group_sizes=tuple(int(v) for v in np.unique(n)), samples=int(t.size))
    return curve, notes


# --------------------------------------------------------------------------------------------
# the model


def _phase_plan(collective: str, s: np.ndarray, n: int, r: int) -> list[tuple]:
    """Phases of a collective over ``m = ceil(n/r)`` nodes: (collective, link, size, group,
    factor); see the module docstring. Combined by sum, except all_to_all (max)."""
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


class CommModel:
    """Time of collectives per type, size, group size and topology (module docstring).

    Build one with :meth:`fit` (measurements), :meth:`from_links` (catalog numbers) or
    :meth:`from_json`; derive what-ifs with :meth:`with_bandwidth`. Immutable.

    Attributes:
        kind: "alpha_beta" or "sigmoid" (of fitted curves; from_links curves are alpha-beta).
        curves: ``{(collective, link): CurveSet}``.
        gpus_per_node: ranks per node assumed when ``ranks_per_node`` is not given (None:
            a group is in one node).
        intra_gbps, inter_gbps: nominal link speeds (Gb/s per direction per GPU) the curves
            correspond to; :meth:`with_bandwidth` scales by new / nominal.
        notes: what the fit or construction assumed.
    """

    def __init__(self, curves: dict[tuple[str, str], CurveSet], *, kind: str = "sigmoid",
                 gpus_per_node: int | None = None, intra_gbps: float | None = None,
                 inter_gbps: float | None = None, notes: list[str] | tuple[str, ...] = (),
                 source: str = "") -> None:
        if kind not in KINDS:
            raise ParameterError(f"unknown model kind {kind!r} (known: {', '.join(KINDS)})")
        for (c, link) in curves:
            _check_collective(c)
            if link not in LINKS:
                raise ParameterError(f"unknown link class {link!r} (known: intra, inter)")
        if gpus_per_node is not None and not gpus_per_node >= 1:
            raise ParameterError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
        for name, v in (("intra_gbps", intra_gbps), ("inter_gbps", inter_gbps)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise ParameterError(f"{name} must be > 0, got {v}")
        self.curves = dict(curves)
        self.kind = kind
        self.gpus_per_node = int(gpus_per_node) if gpus_per_node is not None else None
        self.intra_gbps = intra_gbps
        self.inter_gbps = inter_gbps
        self.notes = list(notes)
        self.source = source

    def __repr__(self) -> str:
        keys = ", ".join(f"{c}/{link}" for c, link in sorted(self.curves))
        return (f"CommModel(kind={self.kind!r}, curves=[{keys}], gpus_per_node="
                f"{self.gpus_per_node}, intra_gbps={self.intra_gbps}, inter_gbps="
                f"{self.inter_gbps})")

    # ---- construction

    @classmethod
    def from_links(cls, intra_gbps: float, inter_gbps: float | None = None,
                   latency_us: float | None = None, *, inter_latency_us: float | None = None,
                   gpus_per_node: int | None = None, efficiency: float = 1.0) -> CommModel:
        """An uncalibrated alpha-beta model from catalog link speeds.

        Args:
            intra_gbps: intra-node bandwidth per GPU, Gb/s per direction (e.g. a catalog
                ``Link.gbps_per_direction``); busbw = ``intra_gbps / 8 * efficiency`` GB/s.
            inter_gbps: inter-node bandwidth per GPU (see :func:`inter_gbps_per_gpu`); None:
                groups spanning nodes cannot be predicted.
            latency_us: latency floor ``alpha`` of every collective (required).
            inter_latency_us: of the inter-node phases (default: ``latency_us``).
            gpus_per_node: default ranks per node.
            efficiency: achieved fraction of the line rate (1.0 = catalog number as is;
                NCCL reaches ~80% of NVLink's line rate by NVIDIA's account in
                NVIDIA/nccl-tests issue 212).
        """
        if latency_us is None:
            raise ParameterError("latency_us is required (the latency floor of a collective)")
        for name, v in (("intra_gbps", intra_gbps), ("inter_gbps", inter_gbps),
                        ("efficiency", efficiency)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise ParameterError(f"{name} must be > 0, got {v}")
        if efficiency > 1.0:
            raise ParameterError(f"efficiency must be <= 1, got {efficiency}")
        for name, v in (("latency_us", latency_us), ("inter_latency_us", inter_latency_us)):
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise ParameterError(f"{name} must be >= 0, got {v}")
        curves = {("all_reduce", "intra"): CurveSet(Curve(
            "alpha_beta", alpha0_ns=latency_us * 1e3, busbw_gbps=intra_gbps / 8.0 * efficiency))}
        if inter_gbps is not None:
            lat = latency_us if inter_latency_us is None else inter_latency_us
            curves[("all_reduce", "inter")] = CurveSet(Curve(
                "alpha_beta", alpha0_ns=lat * 1e3, busbw_gbps=inter_gbps / 8.0 * efficiency))
        return cls(curves, kind="alpha_beta", gpus_per_node=gpus_per_node,
                   intra_gbps=intra_gbps, inter_gbps=inter_gbps,
                   notes=[f"from links: intra {intra_gbps} Gb/s, inter {inter_gbps} Gb/s per "
                          f"GPU, latency {latency_us} us, efficiency {efficiency}"],
                   source="links")

    @classmethod
    def fit(cls, samples: pd.DataFrame, *, kind: str = "sigmoid",
            base: CommModel | None = None, gpus_per_node: int | None = None,
            weights: str | None = "log_density", init: CommModel | None = None,
            intra_gbps: float | None = None, inter_gbps: float | None = None) -> CommModel:
        """Fit curves per collective and link class to measured samples.

        Args:
            samples: columns ``collective``, ``size_bytes`` (nccl-tests ``S``),
                ``group_size``, ``time_ns``, optional ``ranks_per_node`` (NaN or absent: the
                group is in one node, or ``gpus_per_node`` ranks per node). Rows with a
                non-positive size or time, a group of 1, missing values, or barrier are
                dropped (counted in ``notes``).
            kind: "sigmoid" (default) or "alpha_beta".
            base: a model whose curves are kept where the samples have none (e.g.
                :meth:`from_links` for the inter-node links); also used for the intra-node
                phases when fitting multi-node samples without single-node ones.
            gpus_per_node: default ranks per node of the fitted model.
            weights: "log_density" (each octave of sizes weighs alike, per collective and
                group size) or None (every sample alike).
            init: a model to warm-start from (same kind): faster refits, e.g. cross-validation.
            intra_gbps, inter_gbps: nominal link speeds (Gb/s) the measurements correspond
                to, the reference of :meth:`with_bandwidth`; default: ``base``'s, else 8 x
                the saturated busbw of the pooled all_reduce curve at the largest fitted
                group size (the achieved bus bandwidth, not the line rate: pass the catalog
                number to state a what-if in catalog terms).

        Multi-node samples (``ranks_per_node < group_size``) calibrate the inter-node curves
        on what is left after the predicted intra-node phases (module docstring), which needs
        intra-node curves from the samples or ``base``.

        Raises:
            ParameterError: missing columns, an unknown collective or kind, no usable sample,
                or multi-node samples without any intra-node calibration.
        """
        if kind not in KINDS:
            raise ParameterError(f"unknown model kind {kind!r} (known: {', '.join(KINDS)})")
        if weights not in ("log_density", None):
            raise ParameterError(f"weights must be 'log_density' or None, got {weights!r}")
        if not isinstance(samples, pd.DataFrame):
            raise ParameterError("samples must be a pandas DataFrame")
        missing = [c for c in ("collective", "size_bytes", "group_size", "time_ns")
                   if c not in samples.columns]
        if missing:
            raise ParameterError(f"samples lack columns {missing}")
        if gpus_per_node is None and base is not None:
            gpus_per_node = base.gpus_per_node
        df = pd.DataFrame({
            "collective": samples["collective"].astype(str).to_numpy(),
            "size_bytes": pd.to_numeric(samples["size_bytes"], errors="coerce").to_numpy(float),
            "group_size": pd.to_numeric(samples["group_size"], errors="coerce").to_numpy(float),
            "time_ns": pd.to_numeric(samples["time_ns"], errors="coerce").to_numpy(float),
            "ranks_per_node": (pd.to_numeric(samples["ranks_per_node"], errors="coerce")
                               .to_numpy(float) if "ranks_per_node" in samples.columns
                               else np.full(len(samples), np.nan)),
        })
        unknown = sorted(set(df["collective"]) - set(COLLECTIVES))
        if unknown:
            raise ParameterError(f"unknown collective(s) {unknown} in samples "
                                 f"(known: {', '.join(COLLECTIVES)})")
        notes: list[str] = []
        ok = (df[["size_bytes", "group_size", "time_ns"]].notna().all(axis=1)
              & (df["size_bytes"] > 0) & (df["time_ns"] > 0) & (df["group_size"] >= 2)
              & (df["collective"] != "barrier"))
        if (~ok).any():
            notes.append(f"dropped {int((~ok).sum())} of {len(df)} samples (size or time <= 0, "
                         f"group of 1, missing values, or barrier)")
        df = df[ok].reset_index(drop=True)
        if df.empty:
            raise ParameterError("no usable samples (need size_bytes > 0, time_ns > 0, "
                                 "group_size >= 2)")
        n = df["group_size"].to_numpy()
        rpn = df["ranks_per_node"].to_numpy()
        default_r = n if gpus_per_node is None else np.minimum(n, gpus_per_node)
        rpn = np.where(np.isnan(rpn), default_r, rpn)
        if np.any(rpn < 1):
            raise ParameterError("ranks_per_node must be >= 1")
        df["ranks_per_node"] = rpn
        df["link"] = np.where(rpn >= n, "intra", "inter")
        curves: dict[tuple[str, str], CurveSet] = {}
        if base is not None:
            curves.update(base.curves)

        def fit_set(coll: str, link: str, s: np.ndarray, g: np.ndarray, fac: np.ndarray,
                    t: np.ndarray) -> CurveSet:
            w = np.ones_like(t)
            if weights == "log_density":
                for gv in np.unique(g):
                    m = g == gv
                    w[m] = log_density_weights(s[m])
            prior = init.curves.get((coll, link)) if init is not None else None
            pooled, pn = fit_curve(s, g, fac, t, kind=kind, weights=w,
                                   init=prior.pooled if prior is not None else None)
            notes.extend(f"{coll}/{link}: {x}" for x in pn)
            by_n: dict[int, Curve] = {}
            sizes = np.unique(g)
            if sizes.size > 1:
                for gv in sizes:
                    m = g == gv
                    start = prior.by_n.get(int(gv)) if prior is not None else None
                    c, cn = fit_curve(s[m], g[m], fac[m], t[m], kind=kind, weights=w[m],
                                      init=start if start is not None else pooled)
                    notes.extend(f"{coll}/{link} n={int(gv)}: {x}" for x in cn)
                    by_n[int(gv)] = c
            else:
                by_n[int(sizes[0])] = pooled
            return CurveSet(pooled, by_n)

        intra = df[df["link"] == "intra"]
        for coll, d in intra.groupby("collective", sort=True):
            g = d["group_size"].to_numpy()
            curves[(coll, "intra")] = fit_set(coll, "intra", d["size_bytes"].to_numpy(), g,
                                              np.asarray(bus_factor(coll, g)),
                                              d["time_ns"].to_numpy())
        inter = df[df["link"] == "inter"]
        if len(inter):
            staged = cls(curves, kind=kind)
            multi = inter["ranks_per_node"].fillna(1).to_numpy(float) > 1 \
                if "ranks_per_node" in inter else np.ones(len(inter), bool)
            if not any(link == "intra" for (_, link) in curves) and multi.any():
                raise ParameterError(
                    "multi-node samples with several ranks per node need an intra-node "
                    "calibration to subtract the intra-node phases: add a single-node "
                    "nccl-tests log of the same collective (CLI: a second source), or from "
                    "the API pass base=CommModel.from_links(...)")
            for coll, d in inter.groupby("collective", sort=True):
                parts_s, parts_m, parts_f, parts_t = [], [], [], []
                dropped = 0
                for (nv, rv), dd in d.groupby(["group_size", "ranks_per_node"]):
                    s = dd["size_bytes"].to_numpy()
                    t = dd["time_ns"].to_numpy()
                    plan = _phase_plan(coll, s, int(nv), int(rv))
                    inter_phase = [ph for ph in plan if ph[1] == "inter"][0]
                    rest = np.zeros_like(t)
                    if coll != "all_to_all":  # all_to_all phases run concurrently
                        for ph in plan:
                            if ph[1] == "intra":
                                rest = rest + staged._phase(*ph)
                    resid = t - rest
                    keep = resid > 0.02 * t
                    dropped += int((~keep).sum())
                    parts_s.append(np.broadcast_to(inter_phase[2], s.shape)[keep])
                    parts_m.append(np.full(int(keep.sum()), float(inter_phase[3])))
                    parts_f.append(np.full(int(keep.sum()), float(inter_phase[4])))
                    parts_t.append(resid[keep])
                if dropped:
                    notes.append(f"{coll}/inter: {dropped} samples left <= 2% after the "
                                 f"predicted intra-node phases; dropped")
                s_all = np.concatenate(parts_s)
                if s_all.size == 0:
                    continue
                curves[(coll, "inter")] = fit_set(coll, "inter", s_all, np.concatenate(parts_m),
                                                  np.concatenate(parts_f),
                                                  np.concatenate(parts_t))

        def nominal(link: str, given: float | None, from_base: float | None) -> float | None:
            if given is not None:
                return given
            if from_base is not None:
                return from_base
            key = ("all_reduce", link) if ("all_reduce", link) in curves else next(
                (k for k in sorted(curves) if k[1] == link), None)
            if key is None:
                return None
            pooled = curves[key].pooled
            n_top = max(pooled.group_sizes or (2,))
            return 8.0 * pooled.saturated_busbw_gbps(float(bus_factor(key[0], n_top)) or 1.0)

        return cls(curves, kind=kind, gpus_per_node=gpus_per_node,
                   intra_gbps=nominal("intra", intra_gbps, base.intra_gbps if base else None),
                   inter_gbps=nominal("inter", inter_gbps, base.inter_gbps if base else None),
                   notes=(base.notes if base is not None else []) + notes,
                   source=str(samples.attrs.get("source", "")))

    def with_bandwidth(self, intra_gbps: float | None = None, inter_gbps: float | None = None,
                       *, inter_latency_us: float | None = None) -> CommModel:
        """What-if: another network. Per-byte costs of the link class scale by new / nominal
        bandwidth (:attr:`intra_gbps`, :attr:`inter_gbps`); latencies are kept.

        A model without inter-node curves gets an alpha-beta one from ``inter_gbps`` (busbw
        ``inter_gbps / 8``) with the latency of the intra-node all_reduce curve, or
        ``inter_latency_us``.
        """
        for name, v in (("intra_gbps", intra_gbps), ("inter_gbps", inter_gbps)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise ParameterError(f"{name} must be > 0, got {v}")
        if inter_latency_us is not None and not inter_latency_us >= 0:
            raise ParameterError(f"inter_latency_us must be >= 0, got {inter_latency_us}")
        curves = dict(self.curves)
        notes = list(self.notes)
        new_intra, new_inter = self.intra_gbps, self.inter_gbps
        if intra_gbps is not None:
            if self.intra_gbps is None or not any(lk == "intra" for (_, lk) in curves):
                raise ParameterError("the model has no intra-node curve to rescale")
            ratio = intra_gbps / self.intra_gbps
            curves = {k: (v.scaled(ratio) if k[1] == "intra" else v) for k, v in curves.items()}
            notes.append(f"intra-node bandwidth {self.intra_gbps:.4g} -> {intra_gbps:.4g} Gb/s")
            new_intra = intra_gbps
        if inter_gbps is not None:
            has_inter = any(lk == "inter" for (_, lk) in curves)
            if has_inter and self.inter_gbps is not None:
                ratio = inter_gbps / self.inter_gbps
                curves = {k: (v.scaled(ratio) if k[1] == "inter" else v)
                          for k, v in curves.items()}
                notes.append(f"inter-node bandwidth {self.inter_gbps:.4g} -> {inter_gbps:.4g} "
                             f"Gb/s")
            else:
                ref = curves.get(("all_reduce", "intra"))
                if inter_latency_us is not None:
                    a0, a1 = inter_latency_us * 1e3, 0.0
                elif ref is not None:
                    a0, a1 = ref.pooled.alpha0_ns, ref.pooled.alpha1_ns
                else:
                    raise ParameterError("no latency for the new inter-node link: pass "
                                         "inter_latency_us")
                curves = {k: v for k, v in curves.items() if k[1] != "inter"}
                curves[("all_reduce", "inter")] = CurveSet(Curve(
                    "alpha_beta", alpha0_ns=a0, alpha1_ns=a1, busbw_gbps=inter_gbps / 8.0))
                notes.append(f"inter-node link {inter_gbps:.4g} Gb/s per GPU (alpha-beta, "
                             f"latency {a0 / 1e3:.3g} us + {a1 / 1e3:.3g} us per extra node)")
            new_inter = inter_gbps
        return CommModel(curves, kind=self.kind, gpus_per_node=self.gpus_per_node,
                         intra_gbps=new_intra, inter_gbps=new_inter, notes=notes,
                         source=self.source)

    # ---- prediction

    def curve_set(self, collective: str, link: str = "intra") -> tuple[CurveSet, str]:
        """The curves used for ``collective`` on ``link`` and the collective they belong to
        (``all_reduce`` for a collective without its own: module docstring)."""
        _check_collective(collective)
        if (collective, link) in self.curves:
            return self.curves[(collective, link)], collective
        if ("all_reduce", link) in self.curves:
            return self.curves[("all_reduce", link)], "all_reduce"
        have = sorted(f"{c}/{lk}" for c, lk in self.curves)
        hint = (" (the group spans nodes: give an inter-node link with with_bandwidth("
                "inter_gbps=...) or from_links, or fit multi-node samples)"
                if link == "inter" else "")
        what = collective if collective == "all_reduce" else f"{collective} nor all_reduce"
        raise ParameterError(f"no {link}-node curve for {what} "
                             f"(model has: {', '.join(have) or 'none'}){hint}")

    def _phase(self, collective: str, link: str, size: np.ndarray, group: int,
               factor: float) -> np.ndarray:
        size = np.asarray(size, np.float64)
        if group <= 1:
            return np.zeros_like(size)
        cs, _ = self.curve_set(collective, link)
        return cs.pick(group).time_ns(size, group, factor)

    def _analytic_phase(self, collective: str, link: str, size: np.ndarray, group: int,
                        algorithm: str, steps: float | None = None,
                        factor: float | None = None) -> np.ndarray:
        """Time (ns) of one phase run with an analytic algorithm (module docstring
        "Algorithms"); ``steps`` / ``factor`` override the algorithm's (all_to_all phases)."""
        size = np.asarray(size, np.float64)
        if group <= 1:
            return np.zeros_like(size)
        cs, owner = self.curve_set(collective, link)
        cv = cs.pick(group)
        fixed, per_step = step_latency_ns(cv, owner)
        busbw = cv.saturated_busbw_gbps(float(bus_factor(owner, group)))
        k, f = algorithm_terms(collective, algorithm, group)
        k = k if steps is None else steps
        f = f if factor is None else factor
        return fixed + k * per_step + f * size / busbw

    def _predict_algorithm(self, collective: str, s: np.ndarray, n: int, r: int,
                           algorithm: str) -> np.ndarray:
        """:meth:`predict` with an analytic algorithm (``n >= 2``)."""
        if collective == "all_to_all":  # pairwise: n-r steps off the node, r-1 on it
            if n <= r:
                return self._analytic_phase(collective, "intra", s, n, algorithm)
            m = -(-n // r)
            return np.maximum(
                self._analytic_phase(collective, "inter", s, m, algorithm, steps=n - r,
                                     factor=(n - r) / n),
                self._analytic_phase(collective, "intra", s, r, algorithm, steps=r - 1,
                                     factor=(r - 1) / n))
        if n <= r:
            return self._analytic_phase(collective, "intra", s, n, algorithm)
        total = np.zeros_like(s)
        # the plan's phases (their ring factors are the algorithms' own); a phase the
        # algorithm does not apply to (the intra-node halves of an all_reduce) is a ring
        for coll, link, size, group, _ in _phase_plan(collective, s, n, r):
            alg = algorithm if algorithm in ALGORITHMS[coll] else "ring"
            total = total + self._analytic_phase(coll, link, size, group, alg)
        return total

    def choose_algorithm(self, collective: str, size_bytes: float, group_size: int,
                         ranks_per_node: int | None = None) -> str:
        """The analytic algorithm (:data:`ALGORITHMS`) with the smallest predicted time for
        one call, as NCCL's tuner picks the fastest by its own model (NVIDIA/nccl
        ``src/graph/tuning.cc``); the first listed ("ring") on a tie, e.g. for one rank.

        Raises:
            ParameterError: as :meth:`predict_ns`, or a collective without an analytic
                algorithm (send, recv, gather, scatter, barrier).
        """
        _check_collective(collective)
        _check_algorithm(collective, "best")
        times = {a: self.predict_ns(collective, size_bytes, group_size,
                                    ranks_per_node=ranks_per_node, algorithm=a)
                 for a in ALGORITHMS[collective]}
        return min(times, key=times.__getitem__)  # min keeps the first on a tie

    def predict(self, collective: str, size_bytes: float | np.ndarray, group_size: int, *,
                ranks_per_node: int | None = None, algorithm: str | None = None) -> np.ndarray:
        """Predicted times (ns) for an array of sizes of one collective and group
        (``algorithm``: as :meth:`predict_ns`; "best" picks per size)."""
        _check_collective(collective)
        algorithm = _check_algorithm(collective, algorithm)
        s = np.asarray(size_bytes, np.float64)
        if np.any(~np.isfinite(s)) or np.any(s < 0):
            raise ParameterError("size_bytes must be finite and >= 0")
        if isinstance(group_size, float) and not group_size.is_integer():
            raise ParameterError(f"group_size must be an integer, got {group_size}")
        try:
            n = int(group_size)
        except (TypeError, ValueError):
            raise ParameterError(f"group_size must be an integer, got {group_size!r}") from None
        if n < 1:
            raise ParameterError(f"group_size must be >= 1, got {group_size}")
        if ranks_per_node is not None:
            r = int(ranks_per_node)
            if r < 1:
                raise ParameterError(f"ranks_per_node must be >= 1, got {ranks_per_node}")
        else:
            r = n if self.gpus_per_node is None else self.gpus_per_node
        if n == 1:
            cs, _ = self.curve_set(collective, "intra")
            return np.full_like(s, float(cs.pick(1).latency_ns(1)))
        if algorithm == "best":
            return np.min([self._predict_algorithm(collective, s, n, r, a)
                           for a in ALGORITHMS[collective]], axis=0)
        if algorithm != "auto":
            return self._predict_algorithm(collective, s, n, r, algorithm)
        if n <= r:
            cs, _ = self.curve_set(collective, "intra")
            return cs.pick(n).time_ns(s, n, bus_factor(collective, n))
        phases = [self._phase(*ph) for ph in _phase_plan(collective, s, n, r)]
        if collective == "all_to_all":
            return np.maximum(phases[0], phases[1])
        return np.sum(phases, axis=0)

    def predict_ns(self, collective: str, size_bytes: float, group_size: int, *,
                   ranks_per_node: int | None = None, algorithm: str | None = None) -> float:
        """Predicted time (ns) of one collective call.

        Args:
            collective: traincast name (:data:`COLLECTIVES`).
            size_bytes: nccl-tests message size ``S`` (bytes, >= 0).
            group_size: ranks in the process group (>= 1).
            ranks_per_node: the group's ranks per node (default :attr:`gpus_per_node`, else
                the whole group in one node).
            algorithm: None or "auto": the fitted curve (whatever NCCL chose when it was
                measured); "ring", "tree" (all_reduce, broadcast, reduce) or "pairwise"
                (all_to_all): that algorithm's alpha-beta time with the curve's step latency
                and saturated busbw; "best": the fastest of those
                (:meth:`choose_algorithm`). See the module docstring "Algorithms".
                A group of one rank takes the latency floor whatever the algorithm.

        Raises:
            ParameterError: unknown collective, negative size, group_size < 1,
                ranks_per_node < 1, no curve for a link the call needs, an unknown
                algorithm or one that does not apply to the collective.
        """
        return float(self.predict(collective, np.asarray([size_bytes], np.float64), group_size,
                                  ranks_per_node=ranks_per_node, algorithm=algorithm)[0])

    def predict_frame(self, samples: pd.DataFrame) -> np.ndarray:
        """Predicted time (ns) per row of a samples frame (columns as :meth:`fit` takes)."""
        out = np.empty(len(samples))
        rpn = (samples["ranks_per_node"] if "ranks_per_node" in samples.columns
               else pd.Series(np.nan, index=samples.index))
        keys = pd.DataFrame({"c": samples["collective"].astype(str).to_numpy(),
                             "n": samples["group_size"].to_numpy(),
                             "r": pd.to_numeric(rpn, errors="coerce").fillna(-1).to_numpy()})
        for (c, n, r), idx in keys.groupby(["c", "n", "r"]).indices.items():
            out[idx] = self.predict(c, samples["size_bytes"].to_numpy(np.float64)[idx], int(n),
                                    ranks_per_node=None if r < 0 else int(r))
        return out

    def describe(self) -> pd.DataFrame:
        """One row per curve: collective, link, group size ("pooled" or n), parameters."""
        rows = []
        for (c, link), cs in sorted(self.curves.items()):
            entries = [("pooled", cs.pooled)] + [(str(n), cv) for n, cv in sorted(cs.by_n.items())
                                                 if cv is not cs.pooled]
            for label, cv in entries:
                big_l, k, x0, _ = cv.ramp if cv.ramp is not None else (np.nan,) * 4
                rows.append({"collective": c, "link": link, "n": label, "kind": cv.kind,
                             "alpha0_us": cv.alpha0_ns / 1e3, "alpha1_us": cv.alpha1_ns / 1e3,
                             "busbw_gbps": cv.busbw_gbps,
                             "gamma_gbps": (1.0 / cv.gamma_ns_per_byte
                                            if cv.gamma_ns_per_byte > 0 else np.inf),
                             "ramp_L": big_l, "ramp_k": k, "ramp_x0": x0,
                             "samples": cv.samples})
        return pd.DataFrame(rows)

    # ---- persistence

    def to_json(self) -> str:
        """JSON text of the model (round-trips through :meth:`from_json`)."""
        return json.dumps({
            "format": FORMAT, "kind": self.kind, "gpus_per_node": self.gpus_per_node,
            "intra_gbps": self.intra_gbps, "inter_gbps": self.inter_gbps,
            "source": self.source, "notes": self.notes,
            "curves": [{"collective": c, "link": link, **cs.to_dict()}
                       for (c, link), cs in sorted(self.curves.items())],
        }, indent=1)

    @classmethod
    def from_json(cls, text: str | Path) -> CommModel:
        """A model from :meth:`to_json` text (or a path to a file holding it)."""
        if isinstance(text, Path):
            text = text.read_text()
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ParameterError(f"comm model JSON does not parse: {exc}") from exc
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ParameterError(f"not a comm model (expected format {FORMAT!r})")
        try:
            curves = {(e["collective"], e["link"]): CurveSet.from_dict(e) for e in d["curves"]}
        except (KeyError, TypeError) as exc:
            raise ParameterError(f"bad curves in comm model JSON: {exc}") from exc
        return cls(curves, kind=d.get("kind", "sigmoid"), gpus_per_node=d.get("gpus_per_node"),
                   intra_gbps=d.get("intra_gbps"), inter_gbps=d.get("inter_gbps"),
                   notes=d.get("notes", []), source=d.get("source", ""))


# --------------------------------------------------------------------------------------------
# calibration sources


def samples_from_trace(ts) -> pd.DataFrame:
    """Calibration samples from a trace: one per collective call matched across ranks.

    Uses :func:`traincast.analysis.comm.collective_calls`: ``time_ns`` is ``transfer_ns``
    (end minus the last member's arrival: the time the data moves once every rank is in),
    ``size_bytes`` the nccl-tests message size. Calls with an unknown size (0), an unmatched
    call (no transfer time), a non-positive time, or a collective the model does not know
    are left out. ``ranks_per_node`` is NaN (a trace does not say where ranks ran).

    Returns:
        ``collective``, ``size_bytes``, ``group_size``, ``time_ns`` (float), ``ranks_per_node``,
        ``rank``, ``iteration``.
    """
    from traincast.analysis.comm import collective_calls

    calls = collective_calls(ts)
    keep = (calls["transfer_ns"].notna() & (calls["size_bytes"] > 0)
            & calls["collective"].isin([c for c in COLLECTIVES if c != "barrier"]))
    c = calls[keep]
    t = c["transfer_ns"].astype("float64")
    c, t = c[t > 0], t[t > 0]
    out = pd.DataFrame({
        "collective": c["collective"].astype(str).to_numpy(),
        "size_bytes": c["size_bytes"].to_numpy(np.int64),
        "group_size": c["group_size"].to_numpy(np.int64),
        "time_ns": t.to_numpy(np.float64),
        "ranks_per_node": np.full(len(c), np.nan),
        "rank": c["rank"].to_numpy(np.int64),
        "iteration": c["iteration"].to_numpy(np.int64),
    })
    out.attrs["notes"] = list(calls.attrs.get("notes", [])) + [
        f"{int((~keep).sum())} of {len(calls)} calls left out (unmatched, size unknown, or "
        f"barrier)"]
    return out
