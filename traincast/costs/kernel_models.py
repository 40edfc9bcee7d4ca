"""Fitted kernel models: per op family and direction, the time of one call (ns) from its sizes.

Fitted by ``traincast fit`` on the output of ``traincast bench``
(:mod:`traincast.record.microbench`); loaded with :meth:`KernelModels.load` and queried with
:meth:`KernelModels.predict_ns` (one call) or :meth:`KernelModels.predict_frame` (a DataFrame).

**Size parameters per family** (element counts unless named otherwise; shapes, FLOPs and bytes
in :mod:`traincast.costs.kernel_families`). Categorical parameters are optional (default: the
first value):

- ``gemm``: ``B, M, N, K`` (``(B,M,K) @ (B,K,N)``; ``B=1`` except bmm); ``op`` mm | addmm |
  bmm | linear; ``dtype`` float32 | bfloat16. Directions fwd, bwd.
- ``conv2d``: ``N, C, K, H, R`` (input ``(N,C,H,H)``, weight ``(K,C,R,R)``, stride 1, same
  padding); fwd, bwd.
- ``embedding_bag``: ``B, E, T, L, D`` (batch, rows per table, tables, pooling factor, dim);
  ``dist`` uniform | zipf; fwd, bwd (dense weight gradient).
- ``elementwise``: ``n``; ``op`` add | mul | relu | gelu; ``dtype``. fwd.
- ``reduction``: ``rows, cols`` (reduce over cols); ``op`` sum | mean; ``dtype``. fwd.
- ``layer_norm``, ``softmax``: ``rows, cols`` (normalised over cols); ``dtype``. fwd, bwd.
- ``attention``: ``B, H, S, Dh`` (scaled_dot_product_attention); ``op`` sdpa | sdpa_causal;
  ``dtype``. fwd, bwd.
- ``movement``: ``rows, cols``; ``op`` cat | transpose | index_select; ``dtype``. fwd.
- ``memcpy``: ``nbytes`` (bytes); ``op`` copy | h2d | d2h. fwd.
- ``optimizer``: ``n`` (elements), ``tensors``; ``op`` sgd | adam. fwd.

Times are per call in **ns**, on the device, torch version and thread count of the benchmark
(``KernelModels.source``).

**Model.** Target ``ln(time_ns)`` of the per-point statistic chosen at loading (``min`` of
the repeats by default in ``traincast fit``). Every model has an analytical base, a roofline
with latency per combination of categorical values (op, dtype...)::

    t = c0 + c1·FLOPs + c2·bytes        (c >= 0, fitted by non-negative least squares
                                         on the relative error; FLOPs and bytes as in
                                         traincast.costs.kernel_families)

i.e. a fixed cost (dispatch, launch) plus compute and memory time at a fitted throughput,
the per-op form of Lin et al. (arXiv:2404.12674) and the roofline of Williams et al. (CACM
2009) written as a sum; beyond the measured sizes predictions follow it. On top an optional
learned residual of ``ln t``: gradient-boosted trees (scikit-learn
``GradientBoostingRegressor``, 300 trees of depth 3) or a small ReLU MLP (``MLPRegressor``)
on the features ``log2`` of every size, ``log2 FLOPs``, ``log2 bytes``, ``log2`` intensity and
one indicator per categorical value. The kind (``roofline``, ``roofline+gbdt``,
``roofline+mlp``; by default the first two are tried) is chosen per model by 4-fold
cross-validation on the training part; the reported error is on a held-out random
``test_fraction`` (20%, seeded) the selection never saw; the saved model is then refitted,
same kind and hyper-parameters, on all points.

**Error.** GMAE, the geometric mean absolute error: ``exp(mean(|ln(pred/true)|)) - 1``
(0.10 = predictions off by a factor 1.10 on geometric average, either way).

**Format** (``FORMAT``, version ``FORMAT_VERSION``), a folder:

- ``models.json`` -- ``format``, ``version``, ``created``, ``source`` (bench meta: device,
  device_name, torch, threads; the statistic), ``gmae_definition``, and ``models``: a list of
  ``family``, ``direction``, ``kind``, ``features`` (names), ``file`` and its ``sha256``,
  ``learning_rate`` (gbdt), ``n_points``, ``heldout_gmae``.
- ``<family>.<direction>.npz`` -- numeric arrays only: ``x_mean``, ``x_scale`` (feature
  standardisation, used by the MLP), ``base_coef`` (``(combinations, 3)``: ``c0, c1, c2``
  per combination of categorical values, in mixed-radix order of the indicator blocks);
  gbdt: ``tree_left``, ``tree_right`` (child node indices into the concatenated node arrays,
  -1 at leaves), ``tree_feature``, ``tree_threshold`` (go left when
  ``float32(x) <= threshold``), ``tree_value``, ``tree_roots``, ``tree_depth`` (residual =
  ``learning_rate ·`` sum of the trees' leaf values); mlp: ``mlp_layers``, ``mlp_W0..``,
  ``mlp_b0..`` (ReLU between layers, on the standardised features), ``y_scale`` (residual =
  ``y_scale ·`` network output).
- ``summary.json`` -- the held-out table (see :meth:`KernelModels.summary`).

Loading reads JSON and plain ``.npy`` arrays (no pickle, no code runs), checks each file's
sha256 and the array shapes; files are untrusted input: only regular files of at most
:data:`MAX_MODEL_BYTES` whose arrays inflate to at most as much (:mod:`traincast.util.npz`),
trees of at most :data:`MAX_TREE_DEPTH` levels without cycles. Inference is plain numpy (no
scikit-learn).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.kernel_families import FAMILIES, FamilySpec, family, feature_matrix
from traincast.errors import ParameterError, TraincastError
from traincast.util.fileio import atomic_write_many, read_jsonl, read_regular
from traincast.util.npz import NpzError, read_npz

__all__ = ["DEFAULT_KINDS", "FORMAT", "FORMAT_VERSION", "GMAE_DEFINITION", "KernelModels",
           "MIN_HELDOUT_POINTS", "ModelFormatError",
           "gmae", "load_measurements"]

FORMAT = "traincast.kernel_models"
FORMAT_VERSION = 1
GMAE_DEFINITION = "GMAE = exp(mean(|ln(predicted / measured)|)) - 1, on held-out points"
KINDS = ("roofline", "roofline+gbdt", "roofline+mlp")
#: the candidates :meth:`KernelModels.fit` tries by default (``roofline+mlp`` on request,
#: ``kinds=``)
DEFAULT_KINDS = ("roofline", "roofline+gbdt")
#: a family and direction with fewer measured points gets no held-out split (its error is not
#: measured) and the roofline kind
MIN_HELDOUT_POINTS = 10
#: most bytes a model file (and its arrays, inflated) or ``models.json`` may hold: fitted
#: models take kilobytes; a file past it is refused as hostile, not read
MAX_MODEL_BYTES = 256 << 20
#: most levels of a gbdt tree (the fitter's trees have 3): inference walks this many levels
MAX_TREE_DEPTH = 64
_DIRECTIONS = ("fwd", "bwd")


class ModelFormatError(TraincastError):
    """A kernel-models folder is missing, corrupt, of another format version, or altered."""


def gmae(pred: np.ndarray, true: np.ndarray) -> float:
    """Geometric mean absolute error ``exp(mean(|ln(pred/true)|)) - 1`` (NaN when empty)."""
    pred, true = np.asarray(pred, float), np.asarray(true, float)
    if pred.size == 0:
        return float("nan")
    return float(np.expm1(np.mean(np.abs(np.log(pred / true)))))


# ---------------------------------------------------------------------------- measurements

#: per-point statistics a model can be fitted to
STATS = ("median", "min", "q1", "mean")


def load_measurements(bench_dir: str | Path, families: Iterable[str] | None = None,
                      stat: str = "median") -> pd.DataFrame:
    """The measured points of a ``traincast bench`` folder, one row per point and direction:
    ``family``, ``direction``, ``op``, ``dtype``, ``dist``, every size column, ``time_ns``
    (the statistic ``stat`` of the repeats: median, min, q1 or mean; ns), ``rel_iqr``,
    ``rel_mad`` (spread of the repeats relative to the median).
    Failed points are left out.

    Raises:
        ParameterError: the folder does not exist or holds no measurement.
    """
    if stat not in STATS:
        raise ParameterError(f"unknown statistic {stat!r}; expected one of {', '.join(STATS)}")
    d = Path(bench_dir)
    if not d.is_dir():
        raise ParameterError(f"no such benchmark folder: {d}")
    names = list(FAMILIES) if families is None else list(families)
    for n in names:
        family(n)
    rows: list[dict[str, Any]] = []
    for n in names:
        for rec in read_jsonl(d / f"{n}.jsonl"):
            if "error" in rec or rec.get("family") != n:
                continue
            sizes = rec.get("sizes") or {}
            for direction in _DIRECTIONS:
                st = rec.get(direction)
                if not isinstance(st, dict) or not st.get("median_ns"):
                    continue
                med = float(st["median_ns"])
                val = float(st.get(f"{stat}_ns") or 0.0)
                if med <= 0 or val <= 0:
                    continue
                rows.append({"family": n, "direction": direction, "op": rec.get("op"),
                             "dtype": rec.get("dtype"), "dist": rec.get("dist"),
                             **{k: float(v) for k, v in sizes.items()},
                             "time_ns": val,
                             "rel_iqr": float(st.get("iqr_ns", 0.0)) / med,
                             "rel_mad": float(st.get("mad_ns", 0.0)) / med})
    if not rows:
        raise ParameterError(f"{d}: no measured point (expected <family>.jsonl files from "
                             "`traincast bench`)")
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- one model

@dataclass
class _Model:
    """One family/direction model: standardisation, roofline base, optional residual."""

    family: str
    direction: str
    kind: str
    features: list[str]
    arrays: dict[str, np.ndarray]
    learning_rate: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def combo_cols(self) -> tuple[int, list[tuple[int, int]]]:
        return _layout(FAMILIES[self.family])

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        a = self.arrays
        Z = (X - a["x_mean"]) / a["x_scale"]
        y = _roofline_log(a["base_coef"], X, self.combo_cols)
        if self.kind == "roofline+gbdt":
            y = y + self.learning_rate * _trees_predict(a, X)
        elif self.kind == "roofline+mlp":
            h = Z
            nl = int(a["mlp_layers"][0])
            for i in range(nl):
                h = h @ a[f"mlp_W{i}"] + a[f"mlp_b{i}"]
                if i < nl - 1:
                    h = np.maximum(h, 0.0)
            y = y + float(a["y_scale"][0]) * h[:, 0]
        return y


def _trees_predict(a: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    left, right, feat = a["tree_left"], a["tree_right"], a["tree_feature"]
    thr, val, roots = a["tree_threshold"], a["tree_value"], a["tree_roots"]
    Xf = X.astype(np.float32).astype(np.float64)  # sklearn compares float32(x) <= threshold
    n = X.shape[0]
    node = np.repeat(roots[:, None], n, axis=1)  # (trees, rows)
    cols = np.arange(n)[None, :]
    for _ in range(int(a["tree_depth"][0])):
        lf = left[node]
        leaf = lf < 0
        f = np.where(leaf, 0, feat[node])
        go_left = Xf[cols, f] <= thr[node]
        node = np.where(leaf, node, np.where(go_left, lf, right[node]))
    return val[node].sum(axis=0)


def _layout(spec: FamilySpec) -> tuple[int, list[tuple[int, int]]]:
    """Column of ``log2_flops`` (``log2_bytes`` follows) and the (first column, count) of each
    categorical indicator block in :meth:`FamilySpec.feature_names`."""
    s = len(spec.sizes)
    blocks, col = [], s + 3
    for values in spec.categorical.values():
        if len(values) > 1:
            blocks.append((col, len(values)))
            col += len(values)
    return s, blocks


def _combo(X: np.ndarray, blocks: list[tuple[int, int]]) -> np.ndarray:
    """Index of each row's combination of categorical values (mixed radix over blocks)."""
    idx = np.zeros(X.shape[0], dtype=np.int64)
    for col, k in blocks:
        idx = idx * k + np.argmax(X[:, col:col + k], axis=1)
    return idx


def _roofline_terms(X: np.ndarray, fcol: int) -> np.ndarray:
    """``[1, flops, bytes]`` per row (from the log2 feature columns)."""
    return np.column_stack([np.ones(X.shape[0]), np.exp2(X[:, fcol]), np.exp2(X[:, fcol + 1])])


def _roofline_log(coef: np.ndarray, X: np.ndarray,
                  layout: tuple[int, list[tuple[int, int]]]) -> np.ndarray:
    """``ln(c0 + c1·flops + c2·bytes)`` with the coefficients of each row's combination."""
    fcol, blocks = layout
    c = coef[_combo(X, blocks)]
    t = np.sum(c * _roofline_terms(X, fcol), axis=1)
    return np.log(np.maximum(t, 1e-3))


def _nnls_rel(T: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative ``c`` minimising ``sum(((T @ c - y) / y)^2)`` (relative error)."""
    from scipy.optimize import nnls  # lazy: SciPy only when fitting (inference is numpy)

    scale = np.maximum(np.abs(T).max(axis=0), 1e-300)
    A = (T / scale) / y[:, None]
    c, _ = nnls(A, np.ones(len(y)), maxiter=50 * A.shape[1])
    return c / scale


def _fit_roofline(X: np.ndarray, y: np.ndarray, spec: FamilySpec) -> np.ndarray:
    """Per combination of categorical values: latency + flops/throughput + bytes/bandwidth
    (non-negative, relative least squares); combinations with < 3 points use the pooled fit."""
    fcol, blocks = _layout(spec)
    n_combos = int(np.prod([k for _, k in blocks])) if blocks else 1
    T = _roofline_terms(X, fcol)
    t = np.exp(y)
    pooled = _nnls_rel(T, t)
    coef = np.tile(pooled, (n_combos, 1))
    combo = _combo(X, blocks)
    for c in np.unique(combo):
        m = combo == c
        if m.sum() >= 3:
            coef[c] = _nnls_rel(T[m], t[m])
    return coef


def _fit_one(X: np.ndarray, y: np.ndarray, kind: str, seed: int, spec: FamilySpec
             ) -> tuple[dict, float]:
    """Fit ``kind`` on features ``X`` and ``y = ln(time)``; the npz arrays and the gbdt
    learning rate."""
    if kind not in KINDS:
        raise ParameterError(f"unknown model kind {kind!r}; expected one of {', '.join(KINDS)}")
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale[scale < 1e-12] = 1.0
    Z = (X - mean) / scale
    coef = _fit_roofline(X, y, spec)
    arrays: dict[str, np.ndarray] = {"x_mean": mean, "x_scale": scale, "base_coef": coef}
    resid = y - _roofline_log(coef, X, _layout(spec))
    lr = 0.0
    if kind == "roofline+gbdt":
        # lazy: scikit-learn (~1.6 s to import) only when fitting; inference is numpy
        from sklearn.ensemble import GradientBoostingRegressor

        lr = 0.05
        gb = GradientBoostingRegressor(loss="squared_error", n_estimators=300,
                                       learning_rate=lr, max_depth=3, min_samples_leaf=3,
                                       subsample=0.8, init="zero", random_state=seed)
        gb.fit(X, resid)
        arrays.update(_export_trees(gb))
    elif kind == "roofline+mlp":
        from sklearn.neural_network import MLPRegressor  # lazy: as above

        ys = float(resid.std()) or 1.0
        mlp = MLPRegressor(hidden_layer_sizes=(32, 16), activation="relu", solver="lbfgs",
                           alpha=1e-2, max_iter=400, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mlp.fit(Z, resid / ys)
        arrays["mlp_layers"] = np.array([len(mlp.coefs_)], dtype=np.int64)
        for i, (W, b) in enumerate(zip(mlp.coefs_, mlp.intercepts_, strict=True)):
            arrays[f"mlp_W{i}"] = np.asarray(W, float)
            arrays[f"mlp_b{i}"] = np.asarray(b, float)
        arrays["y_scale"] = np.array([ys])
    return arrays, lr


def _export_trees(gb: Any) -> dict[str, np.ndarray]:
    lefts, rights, feats, thrs, vals, roots = [], [], [], [], [], []
    off, depth = 0, 0
    for est in gb.estimators_[:, 0]:
        t = est.tree_
        left = t.children_left.astype(np.int64)
        right = t.children_right.astype(np.int64)
        lefts.append(np.where(left >= 0, left + off, -1))
        rights.append(np.where(right >= 0, right + off, -1))
        feats.append(t.feature.astype(np.int64))
        thrs.append(t.threshold.astype(np.float64))
        vals.append(t.value.reshape(-1).astype(np.float64))
        roots.append(off)
        off += t.node_count
        depth = max(depth, int(t.max_depth))
    return {"tree_left": np.concatenate(lefts), "tree_right": np.concatenate(rights),
            "tree_feature": np.concatenate(feats), "tree_threshold": np.concatenate(thrs),
            "tree_value": np.concatenate(vals), "tree_roots": np.array(roots, dtype=np.int64),
            "tree_depth": np.array([depth], dtype=np.int64)}


def _model(spec: FamilySpec, direction: str, X: np.ndarray, y: np.ndarray, kind: str,
           seed: int) -> _Model:
    arrays, lr = _fit_one(X, y, kind, seed, spec)
    return _Model(spec.name, direction, kind, spec.feature_names(), arrays, lr)


def _cv_gmae(X: np.ndarray, y: np.ndarray, kind: str, folds: int, seed: int,
             spec: FamilySpec, direction: str) -> float:
    n = len(y)
    idx = np.random.default_rng(seed).permutation(n)
    errs = []
    for k in range(folds):
        te = idx[k::folds]
        tr = np.setdiff1d(idx, te)
        m = _model(spec, direction, X[tr], y[tr], kind, seed)
        errs.append(np.abs(m.predict_log(X[te]) - y[te]))
    return float(np.expm1(np.mean(np.concatenate(errs))))


# ---------------------------------------------------------------------------- the collection

class KernelModels:
    """Fitted kernel models, one per (family, direction); see the module docstring."""

    def __init__(self, models: Mapping[tuple[str, str], _Model],
                 source: Mapping[str, Any] | None = None,
                 summary: list[dict[str, Any]] | None = None) -> None:
        self._models = dict(models)
        #: the benchmark setup the models were fitted on (device, device_name, torch, threads)
        self.source = dict(source or {})
        #: per model: family, direction, kind, points, held-out GMAE, CV GMAE per kind, noise
        self.summary = list(summary or [])

    # ------------------------------------------------------------------ queries
    @property
    def keys(self) -> list[tuple[str, str]]:
        """The (family, direction) pairs that have a model."""
        return sorted(self._models)

    def _get(self, family_name: str, direction: str) -> _Model:
        spec = family(family_name)
        if direction not in spec.directions:
            raise ParameterError(f"{family_name}: unknown direction {direction!r}; expected "
                                 f"{', '.join(spec.directions)}")
        try:
            return self._models[(family_name, direction)]
        except KeyError:
            have = ", ".join(f"{f}/{d}" for f, d in self.keys) or "none"
            raise ParameterError(f"no model for {family_name}/{direction}; fitted: {have}"
                                 ) from None

    def predict_frame(self, family_name: str, direction: str, frame: Any) -> np.ndarray:
        """Predicted ns per row of ``frame`` (a DataFrame or a mapping of columns) holding the
        family's size columns (and optionally its categorical columns).

        Raises:
            ParameterError: unknown family/direction, no model fitted for it, a missing or
                non-positive size, an unknown categorical value.
        """
        m = self._get(family_name, direction)
        spec = FAMILIES[family_name]
        X = feature_matrix(spec, frame, direction=direction)
        return np.exp(m.predict_log(X))

    def predict_ns(self, family_name: str, direction: str = "fwd", **sizes: Any) -> float:
        """Predicted time of one call, ns. ``sizes``: the family's size parameters (and
        optionally its categorical ones, e.g. ``op="bmm"``, ``dtype="bfloat16"``).

        Raises:
            ParameterError: unknown family/direction or parameter, a missing size (the
                message names the expected ones).
        """
        spec = family(family_name)
        allowed = set(spec.sizes) | set(spec.categorical)
        extra = sorted(set(sizes) - allowed)
        if extra:
            raise ParameterError(f"{family_name}: unknown parameter(s) {', '.join(extra)}; "
                                 f"expected sizes {', '.join(spec.sizes)} and optionally "
                                 f"{', '.join(spec.categorical)}")
        cols = {k: [v] for k, v in sizes.items()}
        return float(self.predict_frame(family_name, direction, cols)[0])

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, data: pd.DataFrame, *, test_fraction: float = 0.2, seed: int = 0,
            kinds: Iterable[str] = DEFAULT_KINDS, folds: int = 4,
            source: Mapping[str, Any] | None = None) -> KernelModels:
        """Fit one model per (family, direction) present in ``data`` (the frame of
        :func:`load_measurements`; needs ``family``, ``direction``, ``time_ns`` and the size
        columns). Kind chosen by ``folds``-fold CV on the training part; GMAE measured on a
        seeded random ``test_fraction`` held out; final model refitted on all points.
        Groups of fewer than :data:`MIN_HELDOUT_POINTS` points get the ``roofline`` kind and no
        held-out error.

        Raises:
            ParameterError: missing columns, unknown family or kind, bad test_fraction.
        """
        kinds = tuple(kinds)
        for k in kinds:
            if k not in KINDS:
                raise ParameterError(f"unknown model kind {k!r}; expected one of "
                                     f"{', '.join(KINDS)}")
        if not 0.0 < test_fraction < 1.0:
            raise ParameterError("test_fraction must be in (0, 1)")
        need = [c for c in ("family", "direction", "time_ns") if c not in data.columns]
        if need:
            raise ParameterError(f"measurements lack column(s) {', '.join(need)}")
        models: dict[tuple[str, str], _Model] = {}
        summary: list[dict[str, Any]] = []
        for (fam, direction), g in data.groupby(["family", "direction"], sort=True):
            spec = family(str(fam))
            g = g.reset_index(drop=True)
            X = feature_matrix(spec, {c: g[c].to_numpy() for c in g.columns
                                      if c in spec.sizes or c in spec.categorical},
                               direction=str(direction))
            y = np.log(g["time_ns"].to_numpy(float))
            n = len(y)
            row: dict[str, Any] = {"family": fam, "direction": direction, "n_points": n}
            if n < MIN_HELDOUT_POINTS:
                kind, cv, ho, n_test = "roofline", {}, None, 0
            else:
                perm = np.random.default_rng(seed).permutation(n)
                n_test = max(2, int(round(test_fraction * n)))
                te, tr = perm[:n_test], perm[n_test:]
                cv = {k: _cv_gmae(X[tr], y[tr], k, min(folds, len(tr)), seed, spec, direction)
                      for k in kinds}
                kind = min(kinds, key=lambda k: (round(cv[k], 4), KINDS.index(k)))
                m = _model(spec, str(direction), X[tr], y[tr], kind, seed)
                ho = gmae(np.exp(m.predict_log(X[te])), np.exp(y[te]))
            models[(str(fam), str(direction))] = _model(spec, str(direction), X, y, kind, seed)
            row.update({"kind": kind, "n_train": n - n_test, "n_test": n_test,
                        "heldout_gmae": ho, "cv_gmae": cv,
                        "noise_rel_mad": float(g["rel_mad"].median())
                        if "rel_mad" in g else None,
                        "noise_rel_iqr": float(g["rel_iqr"].median())
                        if "rel_iqr" in g else None,
                        "meets_10pct": None if ho is None else bool(ho <= 0.10)})
            models[(str(fam), str(direction))].info = {"n_points": n, "heldout_gmae": ho}
            summary.append(row)
        if not models:
            raise ParameterError("no measurement to fit")
        return cls(models, source=source, summary=summary)

    # ------------------------------------------------------------------ files
    def save(self, out_dir: str | Path, inputs: Iterable[str | Path | None] = ()) -> Path:
        """Write the models (``models.json``, one ``.npz`` per model, ``summary.json``) into
        ``out_dir`` (created), all new or none changed; none may be one of ``inputs`` (files
        or folders: :class:`~traincast.errors.OutputError`). Returns the folder."""
        d = Path(out_dir)
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ParameterError(f"--out {d}: cannot create folder: {exc.strerror}") from None
        entries, files = [], []
        for (fam, direction), m in sorted(self._models.items()):
            buf = io.BytesIO()
            np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in m.arrays.items()})
            data = buf.getvalue()
            name = f"{fam}.{direction}.npz"
            files.append((d / name, data))
            entries.append({"family": fam, "direction": direction, "kind": m.kind,
                            "features": m.features, "file": name,
                            "sha256": hashlib.sha256(data).hexdigest(),
                            "learning_rate": m.learning_rate,
                            "target": "ln(time_ns)", **m.info})
        doc = {"format": FORMAT, "version": FORMAT_VERSION,
               "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "source": self.source, "gmae_definition": GMAE_DEFINITION, "models": entries}
        files.append((d / "models.json", (json.dumps(doc, indent=2) + "\n").encode()))
        summ = {"gmae_definition": GMAE_DEFINITION, "source": self.source,
                "models": self.summary}
        files.append((d / "summary.json", (json.dumps(summ, indent=2) + "\n").encode()))
        atomic_write_many(files, inputs=inputs)  # all new or all old: names and sha256 agree
        return d

    @classmethod
    def load(cls, models_dir: str | Path) -> KernelModels:
        """Read a folder written by :meth:`save` (JSON + ``numpy.load(allow_pickle=False)``).

        Raises:
            ModelFormatError: missing/corrupt files, another format or version, a field of
                ``models.json`` of the wrong type (or nested too deeply), a file whose sha256
                differs from ``models.json``, arrays of the wrong shape or dtype, a file that is
                not a regular file or is past the size limits, trees too deep or cyclic, NaN
                or infinite values (arrays, ``learning_rate``).
        """
        d = Path(models_dir)
        try:
            doc = json.loads(read_regular(d / "models.json", MAX_MODEL_BYTES))
        except FileNotFoundError:
            raise ModelFormatError("no models.json (not a kernel-models folder)", d) from None
        except TraincastError as exc:  # not a regular file, or too large
            raise ModelFormatError(exc.message, d / "models.json") from None
        except RecursionError:
            raise ModelFormatError("models.json is nested too deeply", d) from None
        except (OSError, ValueError) as exc:
            raise ModelFormatError(f"cannot read models.json: {exc}", d) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ModelFormatError(f"models.json is not a {FORMAT} file", d)
        if doc.get("version") != FORMAT_VERSION:
            raise ModelFormatError(f"format version {repr(doc.get('version'))[:40]}, this traincast "
                                   f"reads version {FORMAT_VERSION}", d)
        if not isinstance(doc.get("models", []), list):
            raise ModelFormatError("models.json: models must be a list", d)
        if not isinstance(doc.get("source") or {}, dict):
            raise ModelFormatError("models.json: source must be an object", d)
        models: dict[tuple[str, str], _Model] = {}
        for e in doc.get("models", []):
            fam, direction, kind, fname, lr = _entry(e, d)
            spec = FAMILIES[fam]
            path = d / fname
            try:
                data = read_regular(path, MAX_MODEL_BYTES)
            except TraincastError as exc:  # not a regular file, or too large
                raise ModelFormatError(exc.message, path) from None
            except OSError as exc:
                raise ModelFormatError(f"cannot read: {exc.strerror}", path) from None
            if hashlib.sha256(data).hexdigest() != e.get("sha256"):
                raise ModelFormatError("sha256 differs from models.json (file altered)", path)
            try:
                arrays = read_npz(data, MAX_MODEL_BYTES)
            except NpzError as exc:  # not an npz of plain arrays, or an inflate bomb
                raise ModelFormatError(f"not a numeric .npz: {exc}", path) from None
            feats = spec.feature_names()
            if e.get("features") != feats:
                raise ModelFormatError(f"features differ from this traincast's {fam} features",
                                       path)
            arrays = _check_arrays(arrays, kind, spec, path)
            if not math.isfinite(lr):
                raise ModelFormatError(f"models.json: learning_rate of {fam}/{direction} is "
                                       f"not a finite number ({lr!r})", d / "models.json")
            models[(fam, direction)] = _Model(fam, direction, kind, feats, arrays, lr,
                                              {"n_points": e.get("n_points"),
                                               "heldout_gmae": e.get("heldout_gmae")})
        summary = []
        try:
            summary = json.loads((d / "summary.json").read_text()).get("models", [])
        except (OSError, ValueError, AttributeError, RecursionError):
            pass
        return cls(models, source=doc.get("source"),
                   summary=summary if isinstance(summary, list) else [])


def _entry(e: Any, d: Path) -> tuple[str, str, str, str, float]:
    """``family, direction, kind, file, learning_rate`` of one ``models.json`` entry, checked
    (types, known family, direction and kind, a bare file name)."""
    if not isinstance(e, dict) or not all(isinstance(e.get(k), str)
                                          for k in ("family", "direction", "kind", "file")):
        raise ModelFormatError("models.json: an entry lacks family/direction/kind/file "
                               "(strings)", d)
    fam, direction, kind, fname = e["family"], e["direction"], e["kind"], e["file"]
    spec = FAMILIES.get(fam)
    if spec is None or direction not in spec.directions or kind not in KINDS or \
            Path(fname).name != fname:
        raise ModelFormatError(f"models.json: bad entry {fam[:40]!r}/{direction[:40]!r}", d)
    lr = e.get("learning_rate", 0.0)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        raise ModelFormatError(f"models.json: {fam}/{direction}: learning_rate must be a "
                               "number", d)
    return fam, direction, kind, fname, float(lr)


#: arrays used as indices (or counts): integers, converted to int64 once loaded
_INDEX_ARRAYS = ("tree_left", "tree_right", "tree_feature", "tree_roots", "tree_depth",
                 "mlp_layers")
#: arrays of one element
_SCALARS = ("tree_depth", "mlp_layers", "y_scale")


def _check_tree_depth(a: Mapping[str, np.ndarray], bad: Any) -> None:
    """``tree_depth`` is one number in ``[0, MAX_TREE_DEPTH]`` and no tree is deeper (a cycle
    in the child links is deeper than any bound): inference walks ``tree_depth`` levels."""
    depth = a["tree_depth"]
    if depth.shape != (1,) or not 0 <= float(depth[0]) <= MAX_TREE_DEPTH:  # NaN fails too
        raise bad(f"tree_depth must be one number from 0 to {MAX_TREE_DEPTH}")
    left, right = a["tree_left"].astype(np.int64), a["tree_right"].astype(np.int64)
    level = np.unique(a["tree_roots"].astype(np.int64))
    for _ in range(MAX_TREE_DEPTH + 1):
        level = level[left[level] >= 0]
        if not level.size:
            return
        level = np.unique(np.concatenate([left[level], right[level]]))
        level = level[level >= 0]
    raise bad(f"trees deeper than {MAX_TREE_DEPTH} levels (or child links forming a cycle)")


def _check_arrays(a: Mapping[str, np.ndarray], kind: str, spec: FamilySpec, path: Path
                  ) -> dict[str, np.ndarray]:
    """The arrays of one model, checked (shapes, dtypes, index ranges); index arrays as int64.

    Raises:
        ModelFormatError: naming ``path`` and the array at fault.
    """
    p = len(spec.feature_names())
    n_combos = int(np.prod([k for _, k in _layout(spec)[1]]))

    def bad(msg: str) -> ModelFormatError:
        return ModelFormatError(f"bad arrays: {msg}", path)

    for k in ("x_mean", "x_scale"):
        if k not in a or a[k].shape != (p,):
            raise bad(f"{k} must have shape ({p},)")
    if "base_coef" not in a or a["base_coef"].shape != (n_combos, 3):
        raise bad(f"base_coef must have shape ({n_combos}, 3)")
    for k, v in a.items():
        if v.dtype.kind not in "fiu":
            raise bad(f"{k} is not numeric")
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise bad(f"{k} holds NaN or infinite values")
        if k in _INDEX_ARRAYS and (v.dtype.kind not in "iu" or v.ndim != 1):
            raise bad(f"{k} must be a one-dimensional integer array")
        if k in _SCALARS and v.shape != (1,):
            raise bad(f"{k} must have shape (1,)")
    a = {k: v.astype(np.int64) if k in _INDEX_ARRAYS else v for k, v in a.items()}
    if kind == "roofline+gbdt":
        need = ("tree_left", "tree_right", "tree_feature", "tree_threshold", "tree_value",
                "tree_roots", "tree_depth")
        if any(k not in a for k in need):
            raise bad("missing tree arrays")
        nn = a["tree_left"].shape[0]
        if any(a[k].shape != (nn,) for k in need[:5]):
            raise bad("tree arrays differ in length")
        for k in ("tree_left", "tree_right"):
            if np.any((a[k] < -1) | (a[k] >= nn)):
                raise bad(f"{k} out of range")
        inner = a["tree_left"] >= 0
        if np.any((a["tree_feature"][inner] < 0) | (a["tree_feature"][inner] >= p)):
            raise bad("tree_feature out of range")
        if np.any((a["tree_roots"] < 0) | (a["tree_roots"] >= max(nn, 1))):
            raise bad("tree_roots out of range")
        _check_tree_depth(a, bad)
    elif kind == "roofline+mlp":
        if "mlp_layers" not in a or "y_scale" not in a:
            raise bad("missing mlp arrays")
        width = p
        for i in range(int(a["mlp_layers"][0])):
            W, b = a.get(f"mlp_W{i}"), a.get(f"mlp_b{i}")
            if W is None or b is None or W.ndim != 2 or W.shape[0] != width or \
                    b.shape != (W.shape[1],):
                raise bad(f"mlp layer {i} has the wrong shape")
            width = W.shape[1]
        if width != 1:
            raise bad("mlp output must be one value")
    return a
