"""The collective communication cost model: :class:`CommModel`, the time of one collective
from its type, message size, group size and topology.

Curves (:mod:`traincast.costs.comm.curve`) per collective and link class ("intra" = within a
node, "inter" = between nodes), fitted by :mod:`traincast.costs.comm.fit`, combined over nodes
and optionally replaced by an analytic algorithm as :mod:`traincast.costs.comm.algorithms`
describes. Sizes are nccl-tests' ``S`` (bytes), times ns, curve bandwidths GB/s, link speeds
Gb/s per direction per GPU.

Each collective gets a pooled curve over all its group sizes (this is what carries to an
unseen ``n``) and, when several group sizes were measured, one curve per group size, used
for exactly that ``n``.

Collectives without samples use the all_reduce curve of the same link class with their own
bus factor: same ``alpha(n)`` and bus-bandwidth curve, ``t = alpha(n) + S f_c(n) / B``. That is
the premise of busbw (PERFORMANCE.md: "Using this bus bandwidth, we can compare it with the
hardware peak bandwidth, independently of the number of ranks used"); it ignores per-collective
latency and algorithm differences.

Errors: :class:`~traincast.errors.ParameterError` for bad arguments, samples or JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from traincast.costs.comm.algorithms import (
    ALGORITHMS,
    _check_algorithm,
    _phase_plan,
    algorithm_terms,
    step_latency_ns,
)
from traincast.costs.comm.curve import KINDS, Curve, CurveSet
from traincast.costs.comm.fit import fit_curve, log_density_weights
from traincast.errors import ParameterError, TraincastError
from traincast.trace.comm_vocab import COLLECTIVES, bus_factor, check_collective
from traincast.util.fileio import read_regular

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["FORMAT", "LINKS", "CommModel", "inter_gbps_per_gpu"]

LINKS = ("intra", "inter")
FORMAT = "traincast.comm_model/1"


def inter_gbps_per_gpu(nics_per_node: int, nic_gbps: float, gpus_per_node: int) -> float:
    """Inter-node bandwidth per GPU (Gb/s per direction): ``nics x nic_gbps / gpus``."""
    for name, v in (("nics_per_node", nics_per_node), ("nic_gbps", nic_gbps),
                    ("gpus_per_node", gpus_per_node)):
        if not v > 0:
            raise ParameterError(f"{name} must be > 0, got {v}")
    return nics_per_node * nic_gbps / gpus_per_node


class CommModel:
    """Time of collectives per type, size, group size and topology (module docstring;
    :mod:`traincast.costs.comm.algorithms` for the phases over nodes and the algorithms).

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
            check_collective(c)
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
        on what is left after the predicted intra-node phases (:mod:`traincast.costs.comm.algorithms` "Topology"), which needs
        intra-node curves from the samples or ``base``.

        Raises:
            ParameterError: missing columns, an unknown collective or kind, no usable sample,
                or multi-node samples without any intra-node calibration.
        """
        import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

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
        check_collective(collective)
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
        """Time (ns) of one phase run with an analytic algorithm
        (:mod:`~traincast.costs.comm.algorithms`); ``steps`` / ``factor`` override the algorithm's (all_to_all phases)."""
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
        check_collective(collective)
        _check_algorithm(collective, "best")
        times = {a: self.predict_ns(collective, size_bytes, group_size,
                                    ranks_per_node=ranks_per_node, algorithm=a)
                 for a in ALGORITHMS[collective]}
        return min(times, key=times.__getitem__)  # min keeps the first on a tie

    def predict(self, collective: str, size_bytes: float | np.ndarray, group_size: int, *,
                ranks_per_node: int | None = None, algorithm: str | None = None) -> np.ndarray:
        """Predicted times (ns) for an array of sizes of one collective and group
        (``algorithm``: as :meth:`predict_ns`; "best" picks per size)."""
        check_collective(collective)
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
                (:meth:`choose_algorithm`). See :mod:`traincast.costs.comm.algorithms`.
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
        import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

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
        import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

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
            try:  # a FIFO or a device is refused, never read
                text = read_regular(text, 64 << 20).decode()
            except TraincastError as exc:
                raise ParameterError(f"comm model {text}: {exc.message}") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise ParameterError(f"comm model {text}: cannot read ({exc})") from None
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
