"""Compute cost model: a roofline with size-dependent efficiency, calibrated from a trace.

For every device the model predicts the time of an op from its :class:`Work`::

    ideal = max(flops / peak_flops[dtype], bytes / bandwidth)        # roofline time
    time  = ideal / eff(ideal)                                       # eff per op, family

i.e. ``time = max(flops/(peak·eff), bytes/(bw·eff))``: the roofline of Williams et al.
(CACM 2009) with an achieved fraction of peak that grows with problem size, as in the per-op
kernel models of Lin et al., "Towards Universal Performance Modeling for ML Training on
Multi-GPU Platforms" (arXiv 2404.12674, Sec. 4) and Calculon's (Isaev et al., SC'23)
size-dependent efficiency tables, here fitted instead of tabulated. The efficiency's argument
is the op's ideal (roofline) time, which puts compute-bound and memory-bound ops on one size
axis: whichever resource binds sets the size, and one efficiency scales both terms.

**Observations.** One per op: on a GPU trace, the summed duration of the device ops it launched
(kernels, memcpy, memset; :func:`~traincast.costs.work.event_work` links them) against the op's
work; on a CPU-only trace, the op's own time (its duration minus the time of nested ops with
known work; ops spending more than half their time in such nested ops are wrappers, e.g.
``aten::linear`` around ``aten::addmm``, and are left out). See :func:`observations`.

**Fit.** ``log10 efficiency`` against ``log10 ideal ns``, least squares under two constraints
at once: efficiency never falls as ops grow, and neither does the predicted time, i.e.
``0 <= d log eff / d log ideal <= 1`` (small ops tend to a fixed latency, large ones to a fixed
fraction of peak). The fit is Dykstra's alternating projection between two isotonic
regressions (pool-adjacent-violators, as in scikit-learn's ``IsotonicRegression``). There is a
curve per device for all ops pooled, per family (``gemm``, ``elementwise``...; host<->device
copies form ``memcpy:host``), and per op (``gemm/aten::addmm``; for memcpy the transfer, e.g.
``memcpy/Memcpy HtoD (Pinned -> Device)``) when it was seen ``MIN_SAMPLES`` times at
``MIN_SIZES`` sizes. Prediction uses the most specific curve. Outside the sizes a curve was
fitted on it tends to its parent's (op -> family -> pooled) without letting predicted time fall;
beyond all observed sizes efficiency stays constant, so time grows in proportion to work.
Predictions are typical (log-mean) times: on a noisy host with a heavy tail of slow calls they
fall below the mean (see the ``bias`` column of :attr:`ComputeModel.cv`).

**Peaks.** When a device is in the hardware catalog (``traincast.costs.hardware``, imported
lazily: ``load_catalog().match_device(name)`` giving ``peak_tflops`` per dtype and
``hbm_gbps``; absent or failing catalog = not found), its datasheet peaks are used
(``source == "catalog"``); fp32 GEMM/conv/attention ops observed faster than the fp32 peak
ran on TF32 tensor cores and get the TF32 peak. Peaks may be given instead (``peak_flops=``,
``bandwidth=``). Otherwise (the CPU, an unknown GPU) the peaks are the highest FLOP/s and
bytes/s any op of the trace achieved on that device (``"empirical"``): ``eff·peak`` is then
simply the fitted achieved throughput. Host<->device copies use the host link's bandwidth,
the fastest such copy observed.

**What-ifs.** :meth:`ComputeModel.ratio` (another batch size or shape on the same device) and
:meth:`ComputeModel.retarget` (another GPU, from the ratio of peaks).

**Accuracy.** :attr:`ComputeModel.cv` holds the error on held-out ops by ``cv_folds``-fold
cross-validation grouped by work signature (an op shape never appears on both sides, so
repeated calls of one shape cannot flatter the score: it measures new shapes). ``events=``
fits on a subset of events; :func:`observations` of the others and :meth:`ComputeModel.score`
measure the error on data the fit never saw.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.costs.work import Work, event_work
from traincast.errors import ParameterError
from traincast.trace.schema import GPU_WORK_KINDS, OP_FAMILIES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from traincast.trace.traceset import TraceSet

__all__ = ["ComputeModel", "Curve", "DeviceModel", "fit_compute_model", "is_host_transfer",
           "observations"]

#: A family (or op) needs this many observations for a curve of its own (else the family's,
#: else the pooled curve) ...
MIN_SAMPLES = 8
#: ... at this many distinct sizes.
MIN_SIZES = 3
#: A CPU op spending more than this fraction of its time in nested ops with known work is a
#: wrapper of them and is not an observation.
WRAPPER_FRACTION = 0.5
_POOLED = "*"
_HOST_FAMILY = "memcpy:host"
_HOST_LINK = re.compile(r"HtoD|DtoH|HtoH|Pageable|Pinned|Host", re.IGNORECASE)
_TENSOR_CORE_FAMILIES = ("gemm", "conv", "attention")
_FORMAT = "traincast.compute_model"
_ERROR_COLUMNS = ["device", "family", "n", "mape", "mdape", "wape", "bias"]
_VERSION = 1

# dtype of an op -> catalog peak keys to try, in order
_PEAK_KEYS: dict[str, tuple[str, ...]] = {
    "fp32": ("fp32",),
    "fp64": ("fp64", "fp32"),
    "fp16": ("fp16", "bf16"),
    "bf16": ("bf16", "fp16"),
    "fp8": ("fp8", "fp8e4m3", "fp16", "bf16"),
    "int8": ("int8", "fp32"),
}


def _norm_key(k: str) -> str:
    return "".join(ch for ch in str(k).lower() if ch.isalnum())


@dataclass
class Curve:
    """Efficiency against size: ``log10 eff`` at knots of ``log10 ideal ns`` (interpolated
    linearly, held constant outside). ``n`` is the number of observations it was fitted on."""

    x: np.ndarray
    u: np.ndarray
    n: int

    def log_eff(self, x: np.ndarray) -> np.ndarray:
        return np.interp(x, self.x, self.u)

    def to_dict(self) -> dict[str, Any]:
        return {"x": [round(float(v), 6) for v in self.x],
                "u": [round(float(v), 6) for v in self.u], "n": int(self.n)}

    @classmethod
    def from_dict(cls, d: Any) -> Curve:
        if not isinstance(d, dict) or not isinstance(d.get("x"), list) or \
                not isinstance(d.get("u"), list):
            raise ParameterError("compute model JSON: a curve needs lists 'x' and 'u'")
        x = np.asarray(d["x"], np.float64)
        u = np.asarray(d["u"], np.float64)
        if x.size == 0 or x.shape != u.shape or not np.all(np.isfinite(x)) or \
                not np.all(np.isfinite(u)) or np.any(np.diff(x) < 0):
            raise ParameterError("compute model JSON: curve knots must be finite, sorted and "
                                 "as many 'x' as 'u'")
        return cls(x, u, int(d.get("n", 0)))


def _curve_family(family: str, op: str) -> str:
    return _HOST_FAMILY if is_host_transfer(family, op) else family


def is_host_transfer(family: str, op: str) -> bool:
    """True for copies between host and device (``Memcpy HtoD (Pinned -> Device)``...): their
    speed is set by the host link (PCIe/NVLink-C2C), not by the device's memory."""
    return family == "memcpy" and bool(_HOST_LINK.search(op))


@dataclass
class DeviceModel:
    """Peaks and fitted efficiency curves of one device.

    Attributes:
        name: device name as recorded (``Tesla V100-SXM2-32GB``) or ``cpu``.
        peak_flops: FLOP/s per dtype (``fp32``, ``bf16``...; ``*`` for any; ``gemm:fp32``
            for a family that ran faster, see :meth:`peak`); ``inf`` when no op with FLOPs was
            observed (the compute term then vanishes).
        bandwidth: memory bandwidth, bytes/s.
        link_bandwidth: host link bandwidth, bytes/s: the roofline of host<->device copies
            (:func:`is_host_transfer`); the fastest such copy observed, else ``bandwidth``.
        source: ``catalog``, ``given``, ``empirical`` or ``retargeted``.
        curves: ``family`` or ``family/op`` -> :class:`Curve`; ``*`` is all families pooled.
    """

    name: str
    peak_flops: dict[str, float]
    bandwidth: float
    link_bandwidth: float
    source: str
    curves: dict[str, Curve]

    def peak(self, dtype: str, family: str = "") -> float:
        """Peak FLOP/s for ops of ``dtype`` (and ``family``): a ``family:dtype`` entry (fp32
        GEMMs that ran on TF32 tensor cores, see :func:`fit_compute_model`), else the entry
        for that type (bf16 falls back to fp16 and so on), else fp32, else the pooled ``*``
        value, else the largest."""
        pk = self.peak_flops
        if family and f"{family}:{dtype}" in pk:
            return pk[f"{family}:{dtype}"]
        for k in _PEAK_KEYS.get(dtype, ()) + ("fp32", _POOLED):
            if k in pk:
                return pk[k]
        return max(pk.values()) if pk else math.inf

    def ideal_ns(self, flops: np.ndarray, nbytes: np.ndarray, dtypes: Sequence[str],
                 families: Sequence[str] | None = None, ops: Sequence[str] | None = None
                 ) -> np.ndarray:
        """Roofline time (ns): ``max(flops / peak, bytes / bandwidth)``; host<->device copies
        use the host link's bandwidth."""
        n = len(dtypes)
        fams = [str(f) for f in families] if families is not None else [""] * n
        opl = [str(o) for o in ops] if ops is not None else [""] * n
        cache: dict[tuple[str, str], float] = {}
        peaks = np.empty(n, np.float64)
        bw = np.full(n, float(self.bandwidth))
        for i, (d, f, o) in enumerate(zip(dtypes, fams, opl, strict=True)):
            key = (str(d), f)
            if key not in cache:
                cache[key] = self.peak(*key)
            peaks[i] = cache[key]
            if f == "memcpy" and is_host_transfer(f, o):
                bw[i] = self.link_bandwidth
        t_f = np.where(flops > 0, flops / peaks, 0.0)
        t_b = np.where(bw > 0, nbytes / np.where(bw > 0, bw, 1.0), 0.0)
        return np.maximum(t_f, t_b) * 1e9

    def curve_for(self, family: str, op: str = "") -> Curve:
        """The most specific curve: the op's own, else its family's (host<->device copies:
        ``memcpy:host``, all such copies), else the pooled one."""
        fam = _curve_family(family, op)
        return (self.curves.get(f"{family}/{op}") if op else None) or \
            self.curves.get(fam) or self.curves.get(family) or self.curves[_POOLED]

    def predict_ns(self, flops: np.ndarray, nbytes: np.ndarray, families: Sequence[str],
                   dtypes: Sequence[str], ops: Sequence[str] | None = None) -> np.ndarray:
        """Predicted ns of each op (vectorised :meth:`ComputeModel.predict_ns`)."""
        fam = np.asarray([str(f) for f in families], dtype=object)
        op = (np.asarray([str(o) for o in ops], dtype=object) if ops is not None
              else np.full(fam.size, "", object))
        ideal = self.ideal_ns(flops, nbytes, dtypes, fam, op)
        out = np.zeros(ideal.size)
        pos = ideal > 0
        x = np.log10(np.where(pos, ideal, 1.0))
        key = fam + "/" + op
        for k in np.unique(key[pos]) if pos.any() else []:
            sel = pos & (key == k)
            f, o = str(k).split("/", 1)
            curve = self.curve_for(f, o)
            out[sel] = 10.0 ** (x[sel] - curve.log_eff(x[sel]))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_flops": {k: (None if not math.isfinite(v) else float(v))
                           for k, v in self.peak_flops.items()},
            "bandwidth": float(self.bandwidth),
            "link_bandwidth": float(self.link_bandwidth),
            "source": self.source,
            "curves": {k: c.to_dict() for k, c in self.curves.items()},
        }

    @classmethod
    def from_dict(cls, name: str, d: Any) -> DeviceModel:
        if not isinstance(d, dict):
            raise ParameterError(f"compute model JSON: device {name!r} is not an object")
        try:
            peaks = {str(k): (math.inf if v is None else float(v))
                     for k, v in dict(d["peak_flops"]).items()}
            bw = float(d["bandwidth"])
            link = float(d.get("link_bandwidth", bw))
            curves = {str(k): Curve.from_dict(v) for k, v in dict(d["curves"]).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ParameterError(f"compute model JSON: device {name!r}: {exc}") from None
        if _POOLED not in curves:
            raise ParameterError(f"compute model JSON: device {name!r} has no pooled curve")
        if not bw > 0 or not link > 0 or any(not v > 0 for v in peaks.values()):
            raise ParameterError(f"compute model JSON: device {name!r}: peaks must be > 0")
        return cls(name, peaks, bw, link, str(d.get("source", "")), curves)


def _ape_table(df: pd.DataFrame, pred: np.ndarray) -> pd.DataFrame:
    """Per (device, family) and per device overall: n, MAPE, median APE, WAPE and bias
    (sum predicted / sum measured - 1), all fractions."""
    import pandas as pd

    d = df[["device", "family"]].copy()
    d["family"] = d["family"].astype(str)
    meas = df["measured_ns"].to_numpy(np.float64)
    d["err"] = np.abs(pred - meas)
    d["ape"] = d["err"] / meas
    d["meas"] = meas
    d["pred"] = pred
    rows = []
    for (dev, fam), g in list(d.groupby(["device", "family"], sort=True)) + \
            [((dev, "all"), g) for dev, g in d.groupby("device", sort=True)]:
        rows.append({"device": dev, "family": fam, "n": len(g),
                     "mape": float(g["ape"].mean()), "mdape": float(g["ape"].median()),
                     "wape": float(g["err"].sum() / g["meas"].sum()),
                     "bias": float(g["pred"].sum() / g["meas"].sum() - 1.0)})
    return pd.DataFrame(rows, columns=_ERROR_COLUMNS)


@dataclass
class ComputeModel:
    """Fitted compute cost model (see the module docstring).

    Attributes:
        devices: device name -> :class:`DeviceModel`.
        cv: cross-validated error of held-out ops per (device, family) and per device
            (``family == "all"``): ``n``, ``mape``, ``mdape`` (median), ``wape`` (sum of
            absolute errors over sum of times), ``bias`` (sum of predicted over sum of
            measured times, minus 1), as fractions.
        residuals: the fitted observations with ``predicted_ns`` and ``rel_error``
            (in-sample); None after :meth:`from_json` and :meth:`retarget`.
        notes: what was assumed or changed (retargeting), one line each.
    """

    devices: dict[str, DeviceModel]
    cv: pd.DataFrame | None = None
    residuals: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    # -- prediction -------------------------------------------------------------------------

    def _device(self, device: str | None) -> DeviceModel:
        if device is None:
            if len(self.devices) == 1:
                return next(iter(self.devices.values()))
            raise ParameterError(
                f"the model covers several devices ({', '.join(sorted(self.devices))}); "
                "name one with device=")
        if device not in self.devices:
            raise ParameterError(
                f"no device {device!r} in the model (has {', '.join(sorted(self.devices))})")
        return self.devices[device]

    def predict_ns(self, work: Work, device: str | None = None) -> float:
        """Predicted time (ns) of an op with this work on ``device`` (the only one if None).

        Raises:
            ParameterError: ``work`` is not a known :class:`Work` with finite, non-negative
                FLOPs and bytes, or ``device`` is not in the model.
        """
        _check_work(work)
        dm = self._device(device)
        return float(dm.predict_ns(np.array([work.flops], np.float64),
                                   np.array([work.bytes], np.float64),
                                   [work.family], [work.dtype], [work.op])[0])

    def predict(self, obs: pd.DataFrame, device: str | None = None) -> np.ndarray:
        """Predicted ns for each row of a frame with ``flops``, ``bytes``, ``family`` (and
        ``dtype``, ``device``: rows of a device the model lacks get NaN)."""
        for col in ("flops", "bytes", "family"):
            if col not in obs.columns:
                raise ParameterError(f"predict: the frame has no column {col!r}")
        n = len(obs)
        out = np.full(n, np.nan)
        flops = obs["flops"].to_numpy(np.float64)
        nbytes = obs["bytes"].to_numpy(np.float64)
        fam = obs["family"].astype(str).to_numpy(object)
        dt = obs["dtype"].astype(str).to_numpy(object) if "dtype" in obs.columns else \
            np.full(n, "", object)
        ops = obs["op"].astype(str).to_numpy(object) if "op" in obs.columns else \
            np.full(n, "", object)
        if "device" in obs.columns and device is None:
            devs = obs["device"].astype(str).to_numpy(object)
        else:
            devs = np.full(n, self._device(device).name, object)
        for d in np.unique(devs) if n else []:
            if d not in self.devices:
                continue
            sel = devs == d
            out[sel] = self.devices[d].predict_ns(flops[sel], nbytes[sel], fam[sel], dt[sel],
                                                  ops[sel])
        return out

    def ratio(self, old: Work, new: Work, device: str | None = None) -> float:
        """Predicted time of ``new`` over that of ``old`` on the same device: the what-if of a
        changed batch size or shape. It is >= 1 when ``new`` has no less FLOPs and bytes, at
        most the ratio of ideal (roofline) times, and equal to it for ops larger than any
        observed.

        Raises:
            ParameterError: bad work, or ``old`` is predicted to take no time.
        """
        t_old = self.predict_ns(old, device)
        if not t_old > 0:
            raise ParameterError("ratio: the old work is predicted to take no time")
        return self.predict_ns(new, device) / t_old

    def score(self, obs: pd.DataFrame) -> pd.DataFrame:
        """Error of this model on observations (e.g. of events held out of the fit), per
        (device, family) and per device: ``n``, ``mape``, ``mdape``, ``wape``."""
        if "measured_ns" not in obs.columns or "device" not in obs.columns:
            raise ParameterError("score: expects a frame from observations()")
        pred = self.predict(obs)
        ok = np.isfinite(pred)
        return _ape_table(obs[ok], pred[ok])

    @property
    def cv_mape(self) -> dict[str, float]:
        """Cross-validated MAPE (fraction) per family, over all devices (``all`` = every op)."""
        if self.cv is None or self.cv.empty:
            return {}
        out: dict[str, float] = {}
        for fam, g in self.cv.groupby("family", sort=True):
            out[str(fam)] = float((g["mape"] * g["n"]).sum() / g["n"].sum())
        return out

    # -- what-if: another GPU ------------------------------------------------------------------

    def retarget(self, peak_flops: float, bandwidth: float, from_peak_flops: float,
                 from_bandwidth: float, *, device: str | None = None) -> ComputeModel:
        """The model on a device with other peaks: the what-if "another GPU".

        Peaks scale by ``rf = peak_flops / from_peak_flops`` (every dtype) and
        ``rb = bandwidth / from_bandwidth``; the efficiency curves are kept, as functions of
        the ideal time on the device they describe. An op's new ideal time follows its place on
        the roofline — a compute-bound op's shrinks by ``rf``, a memory-bound op's by ``rb``,
        an op near the ridge by less than either — and its efficiency is read at that new ideal
        time: the assumption is that kernels of equal ideal duration reach equal efficiency on
        both devices (launch latency and tail effects). Since predicted time never falls
        faster than ideal time, no op speeds up by more than ``max(rf, rb)``, a compute-bound
        op by at most ``rf``, a memory-bound one by at most ``rb``, and latency-bound small ops
        hardly at all. Copies between host and device keep their speed (the host link is
        not part of the what-if). ``device`` selects one device of the model (default: all).

        Raises:
            ParameterError: a peak is not a positive finite number, or ``device`` is unknown.
        """
        vals = {"peak_flops": peak_flops, "bandwidth": bandwidth,
                "from_peak_flops": from_peak_flops, "from_bandwidth": from_bandwidth}
        for k, v in vals.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                    not math.isfinite(v) or v <= 0:
                raise ParameterError(f"retarget: {k} must be a positive number, got {v!r}")
        rf = float(peak_flops) / float(from_peak_flops)
        rb = float(bandwidth) / float(from_bandwidth)
        names = [self._device(device).name] if device is not None else list(self.devices)
        devices = dict(self.devices)
        for nm in names:
            dm = devices[nm]
            devices[nm] = replace(dm, peak_flops={k: v * rf for k, v in dm.peak_flops.items()},
                                  bandwidth=dm.bandwidth * rb, source="retargeted")
        notes = self.notes + [f"retargeted {', '.join(names)}: FLOP/s x{rf:.4g}, "
                              f"bandwidth x{rb:.4g}"]
        return ComputeModel(devices, cv=self.cv, residuals=None, notes=notes)

    # -- persistence ---------------------------------------------------------------------------

    def to_json(self) -> str:
        """The model as JSON text (peaks, curves, cross-validated errors)."""
        doc = {
            "format": _FORMAT, "version": _VERSION,
            "devices": {k: v.to_dict() for k, v in self.devices.items()},
            "cv": [] if self.cv is None else [
                {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                for r in self.cv.to_dict("records")],
            "notes": list(self.notes),
        }
        return json.dumps(doc, allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> ComputeModel:
        """Read a model written by :meth:`to_json`.

        Raises:
            ParameterError: not JSON, or not a compute model of a known version.
        """
        import pandas as pd

        try:
            doc = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"compute model JSON: cannot parse ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise ParameterError("compute model JSON: not a traincast compute model")
        if doc.get("version") != _VERSION:
            raise ParameterError(f"compute model JSON: version {doc.get('version')!r} is not "
                                 f"supported (expected {_VERSION})")
        devs = doc.get("devices")
        if not isinstance(devs, dict) or not devs:
            raise ParameterError("compute model JSON: no devices")
        devices = {str(k): DeviceModel.from_dict(str(k), v) for k, v in devs.items()}
        cv_rows = doc.get("cv") or []
        cv = pd.DataFrame(cv_rows, columns=_ERROR_COLUMNS)
        return cls(devices, cv=cv, residuals=None, notes=[str(x) for x in doc.get("notes", [])])


def _check_work(work: Any) -> None:
    if not isinstance(work, Work):
        raise ParameterError(f"expected a Work, got {type(work).__name__}")
    if not work.known:
        raise ParameterError(f"work of family {work.family!r} is unknown (known=False)")
    for k in ("flops", "bytes"):
        v = getattr(work, k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
                v < 0:
            raise ParameterError(f"work.{k} must be a finite number >= 0, got {v!r}")


# ---------------------------------------------------------------------------------------------
# observations


def _event_mask(events: Any, n: int) -> np.ndarray:
    if events is None:
        return np.ones(n, bool)
    arr = np.asarray(events)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise ParameterError(f"events mask has {arr.size} entries, the trace {n} events")
        return arr
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ParameterError("events must be a boolean mask or an array of event rows")
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ParameterError(f"events rows must be in [0, {n})")
    mask = np.zeros(n, bool)
    mask[arr] = True
    return mask


def _device_names(ts: TraceSet, rank: np.ndarray, dev: np.ndarray) -> np.ndarray:
    out = np.empty(rank.size, object)
    for r in np.unique(rank).tolist():
        info = ts.ranks.get(int(r))
        names = list(info.devices) if info is not None else []
        sel = rank == r
        for d in np.unique(dev[sel]).tolist():
            if 0 <= d < len(names) and names[d]:
                nm = names[d]
            elif names and names[0]:
                nm = names[0]
            else:
                nm = "gpu"
            out[sel & (dev == d)] = nm
    return out


def observations(ts: TraceSet, *, device: str | None = None, events: Any = None,
                 work: pd.DataFrame | None = None) -> pd.DataFrame:
    """The (work, measured time) pairs a compute model is fitted on, one row per op.

    Args:
        ts: the trace.
        device: None picks the GPU ops when the trace has device ops with known work (named
            by the trace's device names, else ``gpu``), else the CPU ops (``cpu``). ``"cpu"``
            forces host ops; any other name labels the observations with it.
        events: boolean mask over ``ts.events`` rows, or row numbers: only these events are
            used (device ops on GPU traces, cpu ops on CPU traces). None: all.
        work: :func:`~traincast.costs.work.event_work` of ``ts`` if already computed.

    Returns:
        DataFrame ``event`` (the op's row), ``rank``, ``device``, ``family``, ``op`` (its
        name; for memcpy, the transfer as the device event names it, e.g.
        ``Memcpy HtoD (Pinned -> Device)``, as direction matters more than the ATen op),
        ``dtype``, ``flops``, ``bytes``, ``measured_ns``. On GPU traces an op's time is
        the sum of the durations of all device ops it launched (kernels, memsets, copies); on
        CPU traces it is the op's own time (see the module docstring).

    Raises:
        ParameterError: ``events`` does not fit the trace.
    """
    import pandas as pd

    from traincast.trace import arrow as A

    n = ts.events.num_rows
    mask = _event_mask(events, n)
    w = event_work(ts) if work is None else work
    kind_idx, kind_dict = A.dictionary_parts(ts.events.column("kind"))
    dur = A.to_numpy(ts.events.column("dur")).astype(np.float64)
    ev_rows = w["event"].to_numpy()
    kinds = np.asarray(kind_dict, dtype=object)[kind_idx[ev_rows]]
    is_dev = np.isin(kinds, GPU_WORK_KINDS)
    known = w["known"].to_numpy(bool)
    src = w["source_event"].to_numpy()
    gpu = is_dev & known & (src >= 0) & mask[ev_rows]
    use_gpu = (device is None or device != "cpu") and bool(gpu.any())
    cols = ["event", "rank", "device", "family", "op", "dtype", "flops", "bytes",
            "measured_ns"]
    name_idx, name_dict = A.dictionary_parts(ts.events.column("name"))
    names = np.asarray(name_dict, dtype=object)[name_idx]
    if use_gpu:
        g = w.loc[gpu, ["rank", "dtype", "flops", "bytes", "source_event"]].copy()
        g["measured_ns"] = dur[ev_rows[gpu]]
        dev = A.to_numpy(ts.events.column("device"))[ev_rows[gpu]]
        g["device"] = (_device_names(ts, g["rank"].to_numpy(), dev) if device is None
                       else device)
        g["family"] = w.loc[gpu, "family"].astype(str)
        g["op"] = names[g["source_event"].to_numpy()]
        copy = (g["family"] == "memcpy").to_numpy()
        g.loc[copy, "op"] = names[ev_rows[gpu][copy]]  # the transfer: Memcpy HtoD (...)
        # the op's family is that of its longest device op (a copy op running as a kernel
        # is elementwise, as a DMA transfer memcpy; see event_work)
        g = g.sort_values("measured_ns", ascending=False, kind="stable")
        agg = g.groupby(["source_event", "device"], sort=True, observed=True).agg(
            rank=("rank", "first"), family=("family", "first"), op=("op", "first"),
            dtype=("dtype", "first"), flops=("flops", "sum"), bytes=("bytes", "sum"),
            measured_ns=("measured_ns", "sum")).reset_index()
        agg = agg.rename(columns={"source_event": "event"})
    else:
        cpu = (kinds == "cpu_op") & known & mask[ev_rows]
        cpu &= (w["flops"].to_numpy() + w["bytes"].to_numpy()) > 0
        d = dur[ev_rows]
        nested = w["nested_dur"].to_numpy(np.float64)
        cpu &= nested <= WRAPPER_FRACTION * d
        agg = w.loc[cpu, ["event", "rank", "family", "dtype", "flops", "bytes"]].copy()
        agg["family"] = agg["family"].astype(str)
        agg["measured_ns"] = (d - nested)[cpu]
        agg["device"] = device or "cpu"
        agg["op"] = names[agg["event"].to_numpy()] if len(agg) else []
    agg = agg[agg["measured_ns"] > 0]
    return pd.DataFrame(agg[cols]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# fitting


def _pava() -> Any:
    """``f(y, sample_weight, increasing) -> fitted y``: weighted isotonic regression."""
    try:
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
        from traincast.costs.hardware import load_catalog  # type: ignore[import-not-found]

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
    from sklearn.model_selection import GroupKFold

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
    import pandas as pd

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
