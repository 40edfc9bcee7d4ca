"""Fitting the compute model: efficiency curves by constrained isotonic regression, peaks
from the hardware catalog or the trace, grouped cross-validation: :func:`fit_compute_model`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.compute.model import (
    _ERROR_COLUMNS,
    _HOST_FAMILY,
    _POOLED,
    ComputeModel,
    Curve,
    DeviceModel,
    _ape_table,
    _curve_family,
    _norm_key,
    is_host_transfer,
)
from traincast.costs.compute.observe import observations
from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.trace.schema import OP_FAMILIES
from traincast.trace.traceset import TraceSet

#: A family (or op) needs this many observations for a curve of its own (else the family's,
#: else the pooled curve) ...
MIN_SAMPLES = 8
#: ... at this many distinct sizes.
MIN_SIZES = 3
_TENSOR_CORE_FAMILIES = ("gemm", "conv", "attention")


def _pava() -> Any:
    """``f(y, sample_weight, increasing) -> fitted y``: weighted isotonic regression."""
    try:  # lazy: SciPy (~0.5 s to import) only when a model is fitted; >= 1.12 has it
        from scipy.optimize import isotonic_regression as scipy_iso

        def fit(y: np.ndarray, sample_weight: np.ndarray, increasing: bool) -> np.ndarray:
            return scipy_iso(y, weights=sample_weight, increasing=increasing).x
    except ImportError:  # SciPy < 1.12
        from sklearn.isotonic import isotonic_regression as fit  # type: ignore[no-redef]
    return fit


def _isotonic(x: np.ndarray, y: np.ndarray, tol: float = 1e-7, max_iter: int = 500
              ) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares fit of ``y`` (log10 efficiency) on ``x`` (log10 ideal ns) under two
    monotonicity constraints: efficiency never falls as ops grow, and neither does the predicted
    time ``x - u``. Returns the knots (distinct ``x``) and fitted ``u``.

    The fit is the weighted L2 projection of the per-size mean log time onto the intersection of
    both isotonic cones, by Dykstra's alternating projections, each a pool-adjacent-violators
    isotonic regression (SciPy's ``isotonic_regression``, which scikit-learn's
    ``IsotonicRegression`` wraps, called directly to skip per-call validation).
    """
    isotonic_regression = _pava()

    order = np.argsort(x, kind="stable")
    xs, inv, cnt = np.unique(x[order], return_inverse=True, return_counts=True)
    w = cnt.astype(np.float64)
    t = np.bincount(inv, weights=(x - y)[order]) / w  # mean log time per size
    if xs.size == 1:
        return xs, xs - t
    g = t.copy()
    p = np.zeros_like(g)
    q = np.zeros_like(g)
    for _ in range(max_iter):
        y1 = isotonic_regression(g + p, sample_weight=w, increasing=True)  # time non-decreasing
        p = g + p - y1
        z = y1 + q
        y2 = xs - isotonic_regression(xs - z, sample_weight=w, increasing=True)  # eff too
        q = z - y2
        done = float(np.max(np.abs(y2 - g))) < tol
        g = y2
        if done:
            break
    g = np.maximum.accumulate(g)  # exact, after the iteration's last rounding
    return xs, xs - g


def _peaks_for(name: str, obs: pd.DataFrame, peak_flops: float | None,
               bandwidth: float | None,
               catalog: dict[str, tuple[dict[str, float], float] | None]
               ) -> tuple[dict[str, float], float, str]:
    pk: dict[str, float] = {}
    bw = 0.0
    source = ""
    if peak_flops is None or bandwidth is None:
        if name not in catalog:
            catalog[name] = _catalog_peaks(name)
        cat = catalog[name]
        if cat is not None:
            pk, bw = cat
            source = "catalog"
    if peak_flops is not None:
        pk, source = {_POOLED: float(peak_flops)}, "given"
    if bandwidth is not None:
        bw, source = float(bandwidth), "given"
    sec = obs["measured_ns"].to_numpy(np.float64) * 1e-9
    if not pk:
        f = obs["flops"].to_numpy(np.float64)
        pk = {_POOLED: float(np.max(f / sec)) if (f > 0).any() else math.inf}
        source = source or "empirical"
    if not bw > 0:
        b = obs["bytes"].to_numpy(np.float64)
        bw = float(np.max(b / sec)) if (b > 0).any() else 1.0
        source = source if source in ("catalog", "given") else "empirical"
    return pk, bw, source


def _catalog_peaks(name: str) -> tuple[dict[str, float], float] | None:
    """Datasheet peaks of ``name`` from ``traincast.costs.hardware``, or None (no catalog yet,
    or the device is not in it). Any failure of the catalog counts as "not found"."""
    if name == "cpu":
        return None
    try:
        gpu = load_catalog().match_device(name)
    except Exception:  # noqa: BLE001 - catalog absent or broken: fall back to empirical peaks
        return None
    if gpu is None:
        return None
    try:
        peaks = {_norm_key(k): float(v) * 1e12
                 for k, v in dict(getattr(gpu, "peak_tflops", {}) or {}).items()
                 if v is not None and float(v) > 0}
        bw = float(getattr(gpu, "hbm_gbps", 0.0) or 0.0) * 1e9
    except (TypeError, ValueError):
        return None
    if not peaks:
        return None
    return peaks, bw


def _tensor_core_peaks(pk: dict[str, float], obs: pd.DataFrame) -> dict[str, float]:
    """fp32 GEMM-like ops faster than the fp32 peak ran on TF32 tensor cores (PyTorch's
    ``allow_tf32``, on by default for matmuls before 1.12 and for cuDNN convolutions): give
    those families the catalog's TF32 peak (``family:fp32`` entries)."""
    out = dict(pk)
    if "fp32" not in pk or "tf32" not in pk or pk["tf32"] <= pk["fp32"]:
        return out
    sec = obs["measured_ns"].to_numpy(np.float64) * 1e-9
    rate = obs["flops"].to_numpy(np.float64) / sec
    fam = obs["family"].astype(str).to_numpy(object)
    dt = obs["dtype"].astype(str).to_numpy(object)
    for f in _TENSOR_CORE_FAMILIES:
        sel = (fam == f) & (dt == "fp32")
        if sel.any() and float(rate[sel].max()) > pk["fp32"]:
            out[f"{f}:fp32"] = pk["tf32"]
    return out


def _fit_device(name: str, obs: pd.DataFrame, peak_flops: float | None,
                bandwidth: float | None, min_samples: int,
                catalog: dict[str, tuple[dict[str, float], float] | None]) -> DeviceModel:
    pk, bw, source = _peaks_for(name, obs, peak_flops, bandwidth, catalog)
    if source == "catalog":
        pk = _tensor_core_peaks(pk, obs)
    fam_all = obs["family"].astype(str).to_numpy(object)
    op_all = obs["op"].astype(str).to_numpy(object) if "op" in obs.columns else \
        np.full(len(obs), "", object)
    host = np.array([is_host_transfer(f, o) for f, o in zip(fam_all, op_all, strict=True)],
                    bool)
    rate = obs["bytes"].to_numpy(np.float64) / (obs["measured_ns"].to_numpy(np.float64) * 1e-9)
    link = float(rate[host].max()) if host.any() and rate[host].max() > 0 else bw
    dm = DeviceModel(name, pk, bw, link, source, {})
    ideal = dm.ideal_ns(obs["flops"].to_numpy(np.float64), obs["bytes"].to_numpy(np.float64),
                        obs["dtype"].astype(str).to_numpy(object), fam_all, op_all)
    meas = obs["measured_ns"].to_numpy(np.float64)
    ok = ideal > 0
    x = np.log10(ideal[ok])
    y = np.log10(ideal[ok] / meas[ok])
    fam = obs["family"].astype(str).to_numpy(object)[ok]
    op = (obs["op"].astype(str).to_numpy(object)[ok] if "op" in obs.columns
          else np.full(fam.size, "", object))
    if x.size == 0:
        raise ParameterError(f"no op with nonzero work on {name!r} to fit")
    # host<->device copies run on another resource: a family of their own, kept out of the
    # pooled curve (unless there is nothing else)
    cfam = np.array([_curve_family(f, o) for f, o in zip(fam, op, strict=True)], object)
    dev_side = cfam != _HOST_FAMILY
    base = dev_side if dev_side.any() else np.ones(x.size, bool)
    curves = {_POOLED: Curve(*_isotonic(x[base], y[base]), int(base.sum()))}
    for key, parent_key in ((cfam, None), (fam + "/" + op, cfam)):
        for k in np.unique(key):
            if str(k).endswith("/"):
                continue
            sel = key == k
            if sel.sum() >= min_samples and np.unique(x[sel]).size >= MIN_SIZES:
                pk_ = str(parent_key[sel][0]) if parent_key is not None else _POOLED
                raw = Curve(*_isotonic(x[sel], y[sel]), int(sel.sum()))
                curves[str(k)] = _compose(raw, curves.get(pk_) or curves[_POOLED])
    dm.curves = curves
    return dm


def _compose(child: Curve, parent: Curve, step: float = 0.05) -> Curve:
    """``child`` on its own range, tending to ``parent`` outside it, still monotone.

    A curve fitted on small ops only would otherwise keep their (latency-bound) efficiency for
    any larger op. Above the child's range the efficiency follows the parent's but rises no
    faster than the predicted time stays flat (slope <= 1 in log-log), below it falls toward
    the parent's no faster than that either, so predicted time never decreases with size.
    """
    cx0, cx1 = float(child.x[0]), float(child.x[-1])
    u0, u1 = float(child.u[0]), float(child.u[-1])
    lo, hi = min(cx0, float(parent.x[0])), max(cx1, float(parent.x[-1]))
    grid = np.unique(np.concatenate([child.x, parent.x, np.arange(lo, hi + step, step)]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    pu = parent.log_eff(grid)
    u = child.log_eff(grid)
    above = grid > cx1
    u[above] = np.minimum(np.maximum(u1, pu[above]), u1 + (grid[above] - cx1))
    below = grid < cx0
    u[below] = np.minimum(np.maximum(pu[below], u0 - (cx0 - grid[below])), u0)
    return Curve(*_thin(grid, u), child.n)


def _thin(x: np.ndarray, u: np.ndarray, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Drop knots that lie on the line through their neighbours (same interpolation)."""
    if x.size <= 2:
        return x, u
    slope = np.diff(u) / np.diff(x)
    keep = np.ones(x.size, bool)
    keep[1:-1] = np.abs(np.diff(slope)) > tol
    return x[keep], u[keep]


def _fit_all(obs: pd.DataFrame, peak_flops: float | None, bandwidth: float | None,
             min_samples: int, catalog: dict[str, tuple[dict[str, float], float] | None]
             ) -> dict[str, DeviceModel]:
    return {str(d): _fit_device(str(d), g, peak_flops, bandwidth, min_samples, catalog)
            for d, g in obs.groupby("device", sort=True)}


def _cross_validate(obs: pd.DataFrame, folds: int, peak_flops: float | None,
                    bandwidth: float | None, min_samples: int,
                    catalog: dict[str, tuple[dict[str, float], float] | None]
                    ) -> pd.DataFrame | None:
    from sklearn.model_selection import GroupKFold  # lazy: scikit-learn takes ~1.6 s to import

    sig = obs["device"].astype(str) + "|" + obs["family"].astype(str) + "|" + \
        obs["op"].astype(str) + "|" + obs["flops"].map(repr) + "|" + obs["bytes"].map(repr)
    groups = sig.factorize()[0]
    k = min(folds, int(groups.max()) + 1 if groups.size else 0)
    if k < 2:
        return None
    pred = np.full(len(obs), np.nan)
    for train, test in GroupKFold(n_splits=k).split(obs, groups=groups):
        model = ComputeModel(_fit_all(obs.iloc[train], peak_flops, bandwidth, min_samples,
                                      catalog))
        pred[test] = model.predict(obs.iloc[test])
    ok = np.isfinite(pred)
    return _ape_table(obs[ok], pred[ok])


def fit_compute_model(ts: TraceSet, *, device: str | None = None, events: Any = None,
                      peak_flops: float | None = None, bandwidth: float | None = None,
                      cv_folds: int = 5, min_samples: int = MIN_SAMPLES) -> ComputeModel:
    """Fit the compute cost model of the ops observed in ``ts``.

    Args:
        ts: a measured trace; ops need shapes (record_shapes or an execution trace).
        device: which ops and under what name (see :func:`observations`).
        events: fit only on these events (boolean mask over ``ts.events`` or row numbers);
            predict the others to measure held-out accuracy.
        peak_flops, bandwidth: the device's peaks (FLOP/s, bytes/s) if known and not in the
            catalog; they apply to every fitted device.
        cv_folds: folds of the grouped cross-validation behind :attr:`ComputeModel.cv` (0 or 1:
            none).
        min_samples: observations a family needs for its own curve.

    Raises:
        ParameterError: bad arguments, or no op with known work and a measured time.
    """
    if isinstance(cv_folds, bool) or not isinstance(cv_folds, int) or cv_folds < 0:
        raise ParameterError(f"cv_folds must be an int >= 0, got {cv_folds!r}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise ParameterError(f"min_samples must be an int >= 1, got {min_samples!r}")
    for k, v in (("peak_flops", peak_flops), ("bandwidth", bandwidth)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or
                              not math.isfinite(v) or v <= 0):
            raise ParameterError(f"{k} must be a positive number, got {v!r}")
    obs = observations(ts, device=device, events=events)
    if obs.empty:
        raise ParameterError(
            "no op with known work and a measured time to fit a compute model on (the trace "
            "needs record_shapes or a linked execution trace)")
    catalog: dict[str, tuple[dict[str, float], float] | None] = {}
    devices = _fit_all(obs, peak_flops, bandwidth, min_samples, catalog)
    model = ComputeModel(devices)
    pred = model.predict(obs)
    res = obs.copy()
    res["predicted_ns"] = pred
    res["rel_error"] = (pred - res["measured_ns"]) / res["measured_ns"]
    model.residuals = res
    model.cv = (_cross_validate(obs, cv_folds, peak_flops, bandwidth, min_samples, catalog)
                if cv_folds >= 2 else None)
    if model.cv is None:
        model.cv = pd.DataFrame(columns=_ERROR_COLUMNS)
    for f in sorted(set(obs["family"]) - set(OP_FAMILIES)):
        model.notes.append(f"family {f!r} is not one of OP_FAMILIES")
    return model
