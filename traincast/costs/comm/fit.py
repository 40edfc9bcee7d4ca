"""Fitting one :class:`~traincast.costs.comm.curve.Curve` to measured collective times.

Fitting (:func:`fit_curve`; :meth:`~traincast.costs.comm.model.CommModel.fit` fits the
curves of a model with it): least squares on ``log t`` (relative errors) with
:func:`scipy.optimize.least_squares` (bounded trust-region reflective, analytic Jacobian),
started from a non-negative linear least-squares fit of ``t = alpha0 + alpha1 (n-1) + S f /
B_link + S gamma`` (:func:`scipy.optimize.nnls`). By default each sample is weighted by the
inverse number of samples of its (collective, group size) within half an octave of its size,
so that every octave of sizes counts alike (a 1 MiB-step grid would otherwise be all large
messages).

Inputs are arrays of one length: sizes ``S`` (bytes, > 0), group sizes ``n`` (>= 1), bus
factors ``f(n)`` (>= 0, :func:`traincast.trace.comm_vocab.bus_factor`) and times (ns, > 0);
anything else raises :class:`~traincast.errors.ParameterError`.
"""

from __future__ import annotations

import math

import numpy as np

from traincast.costs.comm.curve import _LK_MAX, _LN10, KINDS, Curve
from traincast.errors import ParameterError

__all__ = ["fit_curve", "log_density_weights"]


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
        from scipy.special import expit  # lazy: import cost, as in curve.py (fitting only)

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
    """Fit one :class:`Curve` to samples (module docstring; the curve: :mod:`traincast.costs.comm.curve`); returns it and notes.

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
