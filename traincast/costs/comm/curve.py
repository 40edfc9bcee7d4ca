"""One bus-bandwidth curve: time of a collective phase from its size and group size.

Vocabulary (message size ``S``, bus factor ``f(n)``, ``algbw = S / t``, ``busbw = algbw *
f(n)``) is nccl-tests', in :mod:`traincast.trace.comm_vocab`. Times in ns, bandwidths in
GB/s = bytes/ns.

Model (one *curve* per collective and link class, "intra" = within a node, "inter" = between
nodes)::

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
  measurements do (docs/design/comm.md). Fitted only when the samples hold more than one bus
  factor, else 0.
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

Raises :class:`~traincast.errors.ParameterError` on invalid parameters (non-positive
bandwidth, negative latency or per-byte cost, unknown kind) and on bad JSON dicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from traincast.errors import ParameterError

__all__ = ["KINDS", "Curve", "CurveSet"]

KINDS = ("alpha_beta", "sigmoid")
#: largest L*k: d ln(busbw) / d ln(S) <= 1, so t is non-decreasing in S
_LK_MAX = 4.0 * math.log(2.0) / math.log(10.0)
_LN10 = math.log(10.0)


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
        # lazy: scipy.special costs ~0.15 s to import and every analysis imports this package
        # (the collective-call table); only a curve with a ramp evaluates it
        from scipy.special import expit

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
