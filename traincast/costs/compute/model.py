"""The fitted compute model: per device, roofline peaks and efficiency curves
(:class:`Curve`, :class:`DeviceModel`, :class:`ComputeModel`), prediction and JSON I/O."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.ops import Work
from traincast.errors import ParameterError

_POOLED = "*"
_HOST_FAMILY = "memcpy:host"
_HOST_LINK = re.compile(r"HtoD|DtoH|HtoH|Pageable|Pinned|Host", re.IGNORECASE)
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
