"""Data-distribution-aware model of pooled embedding-bag lookups (fbgemm TBE kernels).

The model follows the embedding-lookup model of Lin et al., "Building a Performance Model for
Deep Learning Recommendation Model Training on GPUs" (HiPC 2022) and its continuation
(Lin et al., arXiv:2404.12674), as implemented in ``owensgroup/ml_perf_model``
(``analysis/inference.py``, commit 044a2896: ``embedding_forward_predictor`` /
``get_cached_row_count``): a lookup kernel is bound by
device-memory traffic, and the traffic of the table rows depends on how many *distinct* rows
the indices touch and how many of the re-touched rows still sit in L2. There, the probability
that a row of a table of ``E`` rows is never touched by ``B·L`` uniform lookups is
``binom.pmf(0, B·L, 1/E) = (1 − 1/E)^(B·L)``, so the unique rows are ``E·(1 − (1 − 1/E)^(B·L))``
(balls in bins), the L2 hit rate of the row reads is ``1 − unique/(B·L)`` while the unique rows
fit in the L2 share of the table, and DRAM traffic is indices + offsets + output + the missed
row reads. This module keeps that structure, generalises the index distribution to Zipf, and
replaces the paper's per-GPU bandwidth curve by a bandwidth efficiency fitted on a trace.

Assumptions (all stated so they can be challenged):

* Tables of one TBE call are equal: ``tables`` tables of ``rows`` rows and width ``dim`` each;
  every bag pools ``pooling`` rows (the mean pooling factor); lookups of different tables never
  share rows. Index draws are independent (uniform, or Zipf over the rows' popularity ranks).
* First touch of every unique row is a DRAM read (cold L2 at kernel start, as in the paper's
  "cold start considered" branch).
* A re-touch (a lookup of a row already read in this kernel) hits L2 with probability
  ``min(1, l2_bytes / (unique_rows·dim·itemsize))``: the fraction of the kernel's unique-row
  footprint that L2 can hold. This is the paper's two-branch hit rate written as one
  expression. Differences from the reference: it gives each table ``0.9·L2 / tables_in_flight``
  (tables in flight from SM count × resident warps / batch) and, when the unique rows overflow
  that share ``X``, uses ``hr = 1 − (X + (B·L − X)(E − X)/E) / (B·L)``; we use the whole L2
  against the whole footprint of the call, and do not round traffic to 32-byte sectors or apply
  its empirical small-``D`` factor (1.55 for D ≤ 32) -- the fitted ``eff`` absorbs those.
* Indices are int64 (8 B, as fbgemm records them), offsets int64, ``batch·tables + 1`` of them;
  the pooled output ``batch·tables·dim·itemsize`` is written once.
* Backward (fbgemm's fused ``split_embedding_backward_codegen_<optimizer>`` kernels): the
  gradient of the output is read once; after the index sort the gradients of a row are summed
  on chip, so each *unique* row is read and written once (``2·unique·row_bytes``) plus the
  optimizer state of that row (read + write): ``sgd`` none, ``rowwise_adagrad`` one fp32 per
  row, ``adagrad`` one fp32 per element (the DLRM traces' ``momentum1_dev`` has the size of the
  weights). ``optimizer="none"`` (the dense/non-fused backward) writes the unique rows'
  gradients only. Indices are read twice (sort + kernel), the sort itself is not modelled.
* time = ``latency_ns + bytes / (bw·eff)``; ``latency_ns`` (kernel launch/tail) defaults to 0,
  ``eff`` to 1 (peak bandwidth). :func:`fit_embedding_efficiency` fits both on a trace; their
  combination is a bandwidth efficiency that rises monotonically with the bytes moved.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.trace.traceset import TraceSet

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "EmbeddingCall",
    "EmbeddingModel",
    "EmbeddingParams",
    "catalog_embedding_model",
    "embedding_bytes",
    "embedding_calls",
    "embedding_lookup_time_ns",
    "embedding_observations",
    "expected_unique_rows",
    "fit_embedding_efficiency",
]

_CHUNK = 1 << 20
_INDEX_BYTES = 8
_OPT_STATE = {"none": None, "sgd": 0, "rowwise_adagrad": 1, "adagrad": 2}


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(float(value)) or value < minimum:
        raise ParameterError(f"{name} must be >= {minimum}, got {value!r}")
    return int(round(float(value)))


def _check_pos(name: str, value: Any, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ParameterError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v


def _check_dist(distribution: str, alpha: float | None) -> float:
    """Validate the index distribution; the Zipf exponent (0 for uniform)."""
    if distribution == "uniform":
        if alpha is not None:
            raise ParameterError("alpha applies to the zipf distribution only")
        return 0.0
    if distribution != "zipf":
        raise ParameterError(f"unknown distribution {distribution!r} (uniform, zipf)")
    if alpha is None:
        raise ParameterError("zipf needs alpha > 0")
    return _check_pos("alpha", alpha)


def expected_unique_rows(rows: int, lookups: float, distribution: str = "uniform",
                         alpha: float | None = None) -> float:
    """Expected number of distinct rows touched by ``lookups`` independent draws.

    ``uniform``: ``rows·(1 − (1 − 1/rows)^lookups)`` (balls in bins; the complement of
    ``binom.pmf(0, lookups, 1/rows)`` in Lin et al.'s model). ``zipf``: row of popularity rank
    ``i`` drawn with ``p_i = i^(−alpha) / Σ_j j^(−alpha)``; the expectation
    ``Σ_i 1 − (1 − p_i)^lookups`` is summed numerically in chunks of 2^20 rows. ``lookups``
    may be fractional (a mean).
    """
    e = _check_int("rows", rows, 1)
    n = _check_pos("lookups", lookups, allow_zero=True)
    a = _check_dist(distribution, alpha)
    if n == 0:
        return 0.0
    if distribution == "uniform":
        if e == 1:
            return 1.0
        return float(-e * math.expm1(n * math.log1p(-1.0 / e)))
    norm = 0.0
    for lo in range(1, e + 1, _CHUNK):
        r = np.arange(lo, min(lo + _CHUNK, e + 1), dtype=np.float64)
        norm += float(np.sum(r ** -a))
    total = 0.0
    for lo in range(1, e + 1, _CHUNK):
        r = np.arange(lo, min(lo + _CHUNK, e + 1), dtype=np.float64)
        p = np.minimum(r ** -a / norm, 1.0)
        # 1 − (1 − p)^n, stable for tiny p
        with np.errstate(divide="ignore"):
            total += float(np.sum(-np.expm1(n * np.log1p(-p))))
    return min(total, float(e), n)


@dataclass(frozen=True)
class EmbeddingParams:
    """Work of one pooled embedding-bag call (all tables of one TBE launch).

    ``rows`` is the rows per table (None = unknown: then every lookup is counted as a distinct
    row, the "pooling-only" bytes of :func:`traincast.costs.ops.event_work`).
    """

    batch: int
    tables: int
    pooling: float
    dim: float
    rows: int | None
    itemsize: int = 4
    distribution: str = "uniform"
    alpha: float | None = None

    def replace(self, **kw: Any) -> EmbeddingParams:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d.update(kw)
        return EmbeddingParams(**d)


def embedding_bytes(batch: int, tables: int, pooling: float, dim: float, rows: int | None,
                    itemsize: int, l2_bytes: float, distribution: str = "uniform",
                    alpha: float | None = None, backward: bool = False,
                    optimizer: str = "sgd") -> float:
    """DRAM bytes of one lookup (forward) or fused backward call; see the module docstring."""
    b = _check_int("batch", batch, 1)
    t = _check_int("tables", tables, 1)
    pool = _check_pos("pooling", pooling, allow_zero=True)
    d = _check_pos("dim", dim)
    size = _check_int("itemsize", itemsize, 1)
    l2 = _check_pos("l2_bytes", l2_bytes, allow_zero=True)
    if optimizer not in _OPT_STATE:
        raise ParameterError(f"unknown optimizer {optimizer!r} ({', '.join(_OPT_STATE)})")
    lookups = b * pool  # per table
    _check_dist(distribution, alpha)
    if rows is None:
        uniq = lookups
    else:
        _check_int("rows", rows, 1)
        uniq = expected_unique_rows(rows, lookups, distribution, alpha)
    row_bytes = d * size
    unique_all = t * uniq
    lookups_all = t * lookups
    out = b * t * d * size
    idx = lookups_all * _INDEX_BYTES + (b * t + 1) * _INDEX_BYTES
    if not backward:
        footprint = unique_all * row_bytes
        hit = 1.0 if footprint <= 0 else min(1.0, l2 / footprint)
        retouch = max(lookups_all - unique_all, 0.0)
        return float(unique_all * row_bytes + retouch * (1.0 - hit) * row_bytes + out + idx)
    state = _OPT_STATE[optimizer]
    if state is None:  # gradient only: write the unique rows' gradients
        rows_traffic = unique_all * row_bytes
    else:
        state_bytes = (0.0, 4.0, 4.0 * d)[state]
        rows_traffic = 2.0 * unique_all * (row_bytes + state_bytes)
    return float(out + rows_traffic + 2.0 * idx)


def embedding_lookup_time_ns(batch: int, tables: int, pooling: float, dim: float,
                             rows: int | None, itemsize: int, device_bw_gbps: float,
                             l2_bytes: float, distribution: str = "uniform",
                             alpha: float | None = None, eff: float = 1.0,
                             backward: bool = False, *, optimizer: str = "sgd",
                             latency_ns: float = 0.0) -> float:
    """Time (ns) of a pooled embedding lookup: ``latency_ns + bytes / (bw·eff)``.

    ``bytes`` from :func:`embedding_bytes` (GB/s = 10^9 B/s, so ``bytes / gbps`` is ns).
    """
    bw = _check_pos("device_bw_gbps", device_bw_gbps)
    e = _check_pos("eff", eff)
    lat = _check_pos("latency_ns", latency_ns, allow_zero=True)
    nbytes = embedding_bytes(batch, tables, pooling, dim, rows, itemsize, l2_bytes,
                             distribution, alpha, backward, optimizer)
    return lat + nbytes / (bw * e)


# ---------------------------------------------------------------------------------------------
# observations in a trace


_FWD = {"split": "split_embedding_codegen_forward", "dense": "dense_embedding_codegen_forward"}
_BWD = {"split": "split_embedding_backward_codegen_", "dense":
        "split_embedding_backward_codegen_dense_"}


def _op_kind(name: str) -> tuple[str, str] | None:
    """(kind, optimizer) of an fbgemm TBE lookup op name, else None."""
    if "dense_embedding_codegen_lookup" in name:
        return "dense", "none"
    if "split_embedding_codegen_lookup_" in name:
        opt = name.split("split_embedding_codegen_lookup_", 1)[1].rsplit("_function", 1)[0]
        if opt in ("sgd", "adagrad", "rowwise_adagrad"):
            return "split", opt
        if opt == "exact_rowwise_adagrad":
            return "split", "rowwise_adagrad"
        return "split", "sgd"
    return None


def _params_from_et(node: Any, kind: str) -> tuple[EmbeddingParams, str] | None:
    """Parameters of one TBE call from its ET node (input and output shapes)."""
    try:
        ins = json.loads(node["input_shapes"])
        outs = json.loads(node["output_shapes"])
    except (TypeError, ValueError, KeyError):
        return None
    w_i, doff_i, idx_i, off_i = (1, 6, 11, 12) if kind == "split" else (0, 2, 7, 8)
    try:
        weights = math.prod(ins[w_i])
        tables = math.prod(ins[doff_i]) - 1
        n_idx = math.prod(ins[idx_i])
        bags = math.prod(ins[off_i]) - 1
    except (IndexError, TypeError):
        return None
    if tables < 1 or bags < tables:
        return None
    batch = bags // tables
    note = ""
    total_d = None
    if outs and isinstance(outs[0], list) and len(outs[0]) == 2 and outs[0][0] == batch:
        total_d = outs[0][1]
    if not total_d:
        return None
    dim = total_d / tables
    rows: int | None = int(weights / total_d) if weights > 0 else None
    if rows is not None and rows < 1:
        rows, note = None, "table rows unknown (weights not on device); pooling-only bytes"
    pooling = n_idx / bags
    return EmbeddingParams(batch, tables, pooling, dim, rows, 4), note


@dataclass(frozen=True)
class EmbeddingCall:
    """One fbgemm TBE lookup call of a trace and the GPU kernels that ran it.

    ``op`` is the event row of the ``fbgemm::*_embedding_codegen_lookup_*`` CPU op; ``forward``
    the row of its forward lookup kernel (matched in launch order when the (rank, iteration)
    has as many ``_FWD`` kernels as calls of that kind, else None); ``backward`` the rows of
    the ``split_embedding_backward_*`` kernels of the same (rank, iteration), given only when
    the call is the only one of its kind there (else empty: the kernels cannot be attributed).
    ``params`` is None when the op has no linked ET node with usable shapes.
    """

    rank: int
    iteration: int
    kind: str
    optimizer: str
    op: int
    params: EmbeddingParams | None
    forward: int | None
    backward: tuple[int, ...]


def embedding_calls(ts: TraceSet) -> list[EmbeddingCall]:
    """The fbgemm TBE calls of a trace with their kernel event rows and ET parameters."""
    return _calls(ts, ts.events.to_pandas())


def _calls(ts: TraceSet, ev: pd.DataFrame) -> list[EmbeddingCall]:
    names = ev["name"].astype(str)
    out: list[EmbeddingCall] = []
    kinds = ev["kind"].astype(str)
    is_op = (kinds == "cpu_op") & names.str.contains("embedding_codegen_lookup", regex=False)
    if not is_op.any():
        return out
    links = ts.et_links.to_pandas().set_index("event") if ts.et_links is not None else None
    et_tables = {r: et.nodes.to_pandas().set_index("id") for r, et in (ts.et_nodes or {}).items()}
    is_kernel = kinds == "kernel"
    fwd_mask = {k: is_kernel & names.str.contains(v, regex=False) for k, v in _FWD.items()}
    bwd_mask = {k: is_kernel & names.str.contains(v, regex=False) for k, v in _BWD.items()}
    bwd_mask["split"] = bwd_mask["split"] & ~bwd_mask["dense"]
    relevant = is_op | is_kernel
    sub = ev[relevant]
    for (rank, it), grp in sub.groupby(["rank", "iteration"], observed=True, sort=True):
        gnames = names.loc[grp.index]
        for kind in ("split", "dense"):
            ops = [(i, k[1]) for i in grp.index[is_op.loc[grp.index]]
                   if (k := _op_kind(gnames[i])) and k[0] == kind]
            if not ops:
                continue
            fwd = grp.index[fwd_mask[kind].loc[grp.index]]
            bwd = tuple(int(i) for i in grp.index[bwd_mask[kind].loc[grp.index]])
            for j, (i, opt) in enumerate(ops):
                p = None
                if links is not None and i in links.index and rank in et_tables:
                    nid = links.loc[i, "node_id"]
                    nid = int(nid.iloc[0]) if hasattr(nid, "iloc") else int(nid)
                    if nid in et_tables[rank].index:
                        got = _params_from_et(et_tables[rank].loc[nid], kind)
                        p = got[0] if got is not None else None
                out.append(EmbeddingCall(
                    int(rank), int(it), kind, opt, int(i), p,
                    int(fwd[j]) if len(fwd) == len(ops) else None,
                    bwd if len(ops) == 1 else ()))
    return out


def embedding_observations(ts: TraceSet) -> pd.DataFrame:
    """Measured fbgemm TBE kernels of a trace with the work recovered from its ET.

    One row per forward lookup kernel and per backward call (the ``split_embedding_backward_*``
    kernels of the same (rank, iteration) summed; index sort/linearise kernels excluded):
    ``rank, iteration, kind, optimizer, backward, batch, tables, pooling, dim, rows, dur_ns``.
    The dimension needs ``total_D`` (the op's output width), which only the ET's output shape
    records; calls without a linked ET node are left out. The calls and their kernel rows:
    :func:`embedding_calls`.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    rows_out: list[dict[str, Any]] = []
    if ts.et_links is None or not ts.et_nodes:
        return pd.DataFrame(rows_out)
    ev = ts.events.to_pandas()
    dur = ev["dur"]
    for c in _calls(ts, ev):
        if c.params is None:
            continue
        base = {"rank": c.rank, "iteration": c.iteration, "kind": c.kind,
                "optimizer": c.optimizer}
        if c.forward is not None:
            rows_out.append({**base, "backward": False, **_pdict(c.params),
                             "dur_ns": float(dur.at[c.forward])})
        if c.backward:
            rows_out.append({**base, "backward": True, **_pdict(c.params),
                             "dur_ns": float(dur.loc[list(c.backward)].sum())})
    return pd.DataFrame(rows_out)


def _pdict(p: EmbeddingParams) -> dict[str, Any]:
    return {"batch": p.batch, "tables": p.tables, "pooling": p.pooling, "dim": p.dim,
            "rows": p.rows, "itemsize": p.itemsize}


# ---------------------------------------------------------------------------------------------
# fitted model


@dataclass
class EmbeddingModel:
    """Fitted lookup model: per direction a bandwidth efficiency and a fixed latency.

    ``eff``/``latency_ns`` are keyed ``"forward"``/``"backward"``. ``cv_mape`` is the
    leave-one-shape-out error (mean |pred − meas| / meas over held-out kernels), ``fit_mape``
    the in-sample error, ``n_obs``/``n_groups`` what the fit saw.
    """

    device_bw_gbps: float
    l2_bytes: float
    eff: dict[str, float] = field(default_factory=lambda: {"forward": 1.0, "backward": 1.0})
    latency_ns: dict[str, float] = field(
        default_factory=lambda: {"forward": 0.0, "backward": 0.0})
    cv_mape: dict[str, float] = field(default_factory=dict)
    fit_mape: dict[str, float] = field(default_factory=dict)
    n_obs: dict[str, int] = field(default_factory=dict)
    n_groups: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def predict_ns(self, params: EmbeddingParams, backward: bool = False,
                   optimizer: str = "sgd") -> float:
        """Predicted kernel time (ns) of one call with ``params``."""
        d = "backward" if backward else "forward"
        return embedding_lookup_time_ns(
            params.batch, params.tables, params.pooling, params.dim, params.rows,
            params.itemsize, self.device_bw_gbps, self.l2_bytes, params.distribution,
            params.alpha, self.eff[d], backward, optimizer=optimizer,
            latency_ns=self.latency_ns[d])

    def ratio(self, old_params: EmbeddingParams, new_params: EmbeddingParams,
              backward: bool = False, optimizer: str = "sgd") -> float:
        """``predict(new) / predict(old)``: the factor to scale a measured kernel by."""
        return (self.predict_ns(new_params, backward, optimizer)
                / self.predict_ns(old_params, backward, optimizer))


def _device_of(ts: TraceSet) -> tuple[float, float, str]:
    cat = load_catalog()
    gpu = cat.match_first(p for info in ts.ranks.values() for p in info.device_properties)
    if gpu is not None:
        l2 = (gpu.l2_mb or 0.0) * 1024 * 1024
        return float(gpu.hbm_gbps), float(l2), gpu.name
    raise ParameterError("no GPU of the trace matches the hardware catalog")


def _fit(nbytes: np.ndarray, dur: np.ndarray, bw: float) -> tuple[float, float]:
    """Non-negative least squares of relative error: dur ≈ a + bytes·s; eff = 1/(s·bw)."""
    from scipy.optimize import nnls  # lazy: SciPy (~0.5 s to import) only when fitting

    w = 1.0 / dur
    design = np.column_stack([np.ones_like(nbytes), nbytes]) * w[:, None]
    (a, s), _ = nnls(design, np.ones_like(dur))
    s = max(s, 1e-12 / bw)  # keep eff finite when bytes explain nothing
    return float(a), float(1.0 / (s * bw))


def catalog_embedding_model(ts: TraceSet) -> EmbeddingModel:
    """The un-fitted model of the trace's GPU: the catalog's HBM bandwidth and L2 size,
    ``eff`` 1 and no latency (ratios are then DRAM-byte ratios).

    Raises:
        ParameterError: no GPU of the trace is in the hardware catalog.
    """
    bw, l2, name = _device_of(ts)
    model = EmbeddingModel(bw, l2)
    model.notes.append(f"not fitted: {name} peak bandwidth, no latency")
    return model


def fit_embedding_efficiency(ts: TraceSet, device_bw_gbps: float | None = None,
                             l2_bytes: float | None = None, *,
                             observations: pd.DataFrame | None = None) -> EmbeddingModel:
    """Fit ``eff`` and a latency per direction on a trace's fbgemm TBE kernels.

    Work comes from :func:`embedding_observations` (uniform index distribution assumed: the
    traces do not record index values; ``observations`` passes them in when already
    computed). Bandwidth and L2 size come from the catalog entry of
    the trace's GPU unless given. The held-out error is leave-one-group-out with groups =
    distinct (kind, batch, tables, pooling, dim, rows) shapes.
    """
    obs = embedding_observations(ts) if observations is None else observations
    if obs.empty:
        raise ParameterError("the trace has no fbgemm embedding kernels with ET shapes")
    if device_bw_gbps is None or l2_bytes is None:
        bw0, l20, _ = _device_of(ts)
        device_bw_gbps = bw0 if device_bw_gbps is None else device_bw_gbps
        l2_bytes = l20 if l2_bytes is None else l2_bytes
    model = EmbeddingModel(float(device_bw_gbps), float(l2_bytes))
    if obs["rows"].isna().any():
        model.notes.append("some table row counts unknown: pooling-only bytes used for them")
    nb = np.array([
        embedding_bytes(r.batch, r.tables, r.pooling, r.dim,
                        None if r.rows is None or r.rows != r.rows else int(r.rows),
                        r.itemsize, model.l2_bytes, backward=bool(r.backward),
                        optimizer=r.optimizer)
        for r in obs.itertuples()])
    obs = obs.assign(bytes=nb)
    for direction, bwd in (("forward", False), ("backward", True)):
        sub = obs[obs["backward"] == bwd]
        if sub.empty:
            continue
        x, y = sub["bytes"].to_numpy(float), sub["dur_ns"].to_numpy(float)
        a, e = _fit(x, y, model.device_bw_gbps)
        model.eff[direction], model.latency_ns[direction] = e, a
        pred = a + x / (model.device_bw_gbps * e)
        model.fit_mape[direction] = float(np.mean(np.abs(pred - y) / y))
        groups = sub[["kind", "batch", "tables", "pooling", "dim", "rows"]].astype(str)
        gid = groups.apply("|".join, axis=1).to_numpy()
        uniq = np.unique(gid)
        model.n_obs[direction], model.n_groups[direction] = len(sub), len(uniq)
        if len(uniq) >= 3:
            errs = np.empty(len(sub))
            for g in uniq:
                test = gid == g
                a_g, e_g = _fit(x[~test], y[~test], model.device_bw_gbps)
                errs[test] = np.abs(a_g + x[test] / (model.device_bw_gbps * e_g) - y[test]) / y[test]
            model.cv_mape[direction] = float(np.mean(errs))
    return model
