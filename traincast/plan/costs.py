"""Op and collective durations for planned graphs.

Compute (per op, on the system's GPU; Williams et al., "Roofline", CACM 2009)::

    ideal = max(flops / peak[dtype], bytes / hbm_bandwidth)            # ns
    time  = latency[family] + ideal / eff[family]

``peak`` and ``hbm_bandwidth`` come from the hardware catalog (:mod:`traincast.costs.hardware`,
each number sourced). ``eff`` (the achieved fraction of the roofline for large ops) and
``latency`` (a per-kernel floor: launch and tail effects) are per op family, the two-parameter
form of the size-dependent efficiency of :mod:`traincast.costs.compute` (efficiency rises with
size and tends to ``eff``; time tends to ``latency`` for tiny ops). They come from a
:class:`PlanCalibration`: fitted to measured iteration times (``benchmarks/harness/calibrate.py``) or
given. Efficiencies are fractions of the GPU's *own* peaks, so a calibration made on one GPU
carries to another by the ratio of catalog peaks — the assumption Calculon (Isaev et al., SC'23)
and the gpu what-if make.

Communication: a :class:`~traincast.costs.comm.CommModel` (nccl-tests' algbw time of each
collective; hierarchical for groups spanning nodes). Default: alpha-beta from the system's
link bandwidths times ``PlanCalibration.comm_efficiency`` with latency
``PlanCalibration.comm_latency_us``; or a model fitted on nccl-tests logs / the vTrain table
(``traincast calibrate comm``) passed as ``comm=``.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from traincast.costs.comm import CommModel
from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError, TraincastError
from traincast.plan.spec import DTYPE_BYTES, PlanError, SystemSpec
from traincast.util.fileio import atomic_write, read_regular

#: op families the planner emits
FAMILIES = ("gemm", "attention", "elementwise", "optimizer", "embedding")


@dataclass
class FamilyEfficiency:
    """``time = latency_ns + ideal / eff`` for one op family."""

    eff: float = 1.0
    latency_ns: float = 0.0

    def __post_init__(self) -> None:
        if not (0 < self.eff <= 1.5) or not math.isfinite(self.eff):
            raise PlanError(f"efficiency must be in (0, 1.5], got {self.eff}")
        if not (self.latency_ns >= 0) or not math.isfinite(self.latency_ns):
            raise PlanError(f"latency must be >= 0 ns, got {self.latency_ns}")


@dataclass
class PlanCalibration:
    """Per-family efficiencies and communication parameters of the planner.

    Attributes:
        families: family -> :class:`FamilyEfficiency` (missing families use ``default``).
        default: efficiency of families without their own entry.
        comm_efficiency: achieved fraction of each link's line rate (busbw / line rate).
        comm_latency_us: latency floor of a collective, µs.
        pass_overhead_us: fixed time of every forward or backward pass of one micro-batch
            through one pipeline stage (framework work per pass: hooks, p2p setup, host
            launches that do not overlap), µs.
        step_overhead_us: fixed time per step before the optimizer (gradient clipping,
            loss-scale checks, logging), µs.
        launch_overhead_us: host time to issue one kernel or collective (framework dispatch
            + CUDA launch), µs; a pass takes at least its kernels times this (eager PyTorch
            is host-bound for small kernels), overlapping the device time otherwise.
        source: where the numbers came from (a fit's description or "uncalibrated").
        fit: free-form details of the fit (data, split, error).
    """

    families: dict[str, FamilyEfficiency] = field(default_factory=dict)
    default: FamilyEfficiency = field(default_factory=FamilyEfficiency)
    comm_efficiency: float = 1.0
    comm_latency_us: float = 0.0
    pass_overhead_us: float = 0.0
    step_overhead_us: float = 0.0
    launch_overhead_us: float = 0.0
    source: str = "uncalibrated: catalog peaks, efficiency 1"
    fit: dict[str, Any] = field(default_factory=dict)

    def family(self, name: str) -> FamilyEfficiency:
        return self.families.get(name, self.default)

    def to_dict(self) -> dict[str, Any]:
        return {"families": {k: asdict(v) for k, v in self.families.items()},
                "default": asdict(self.default), "comm_efficiency": self.comm_efficiency,
                "comm_latency_us": self.comm_latency_us,
                "pass_overhead_us": self.pass_overhead_us,
                "step_overhead_us": self.step_overhead_us,
                "launch_overhead_us": self.launch_overhead_us, "source": self.source,
                "fit": self.fit}

    @classmethod
    def from_dict(cls, d: Any) -> PlanCalibration:
        if not isinstance(d, dict):
            raise PlanError("plan calibration JSON must be an object")
        try:
            return cls(
                families={str(k): FamilyEfficiency(**v)
                          for k, v in dict(d.get("families", {})).items()},
                default=FamilyEfficiency(**d.get("default", {})),
                comm_efficiency=float(d.get("comm_efficiency", 1.0)),
                comm_latency_us=float(d.get("comm_latency_us", 0.0)),
                pass_overhead_us=float(d.get("pass_overhead_us", 0.0)),
                step_overhead_us=float(d.get("step_overhead_us", 0.0)),
                launch_overhead_us=float(d.get("launch_overhead_us", 0.0)),
                source=str(d.get("source", "")), fit=dict(d.get("fit", {})))
        except (TypeError, ValueError) as exc:
            raise PlanError(f"plan calibration JSON: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> PlanCalibration:
        """Read a calibration written by :meth:`save`.

        Raises:
            PlanError: unreadable or malformed file (the message names it).
        """
        p = Path(path)
        try:
            d = json.loads(read_regular(p, 64 << 20))
        except TraincastError as exc:  # a FIFO or a device (never read), or too large
            raise PlanError(f"{p}: cannot read plan calibration: {exc.message}") from None
        except (OSError, ValueError) as exc:
            raise PlanError(f"{p}: cannot read plan calibration: {exc}") from None
        try:
            return cls.from_dict(d)
        except PlanError as exc:
            raise PlanError(f"{p}: {exc}") from None

    def save(self, path: str | Path) -> None:
        atomic_write(Path(path), json.dumps(self.to_dict(), indent=1).encode())


def default_calibration() -> PlanCalibration:
    """The calibration shipped with traincast (``plan/data/calibration.json``, fitted on
    vTrain's A100 measurements by ``benchmarks/plan_vtrain.py``), else an uncalibrated one.
    Read once per process (every planned layout uses it); callers derive variants with
    :func:`dataclasses.replace` rather than changing it."""
    return _shipped_calibration()


@functools.lru_cache(maxsize=1)
def _shipped_calibration() -> PlanCalibration:
    p = Path(__file__).with_name("data") / "calibration.json"
    if p.exists():
        return PlanCalibration.load(p)
    return PlanCalibration()


@dataclass
class PlanCosts:
    """Durations of the planner's ops on one system.

    Attributes:
        system: the system.
        calibration: efficiencies (see module docstring).
        comm: collective model (built from the system's links when not given; a model
            without inter-node curves, e.g. fitted on one node, gets them from the links).
        peak_flops: FLOP/s of the GPU for the workload dtype (catalog).
        hbm_bps: memory bandwidth, bytes/s (catalog).
        hbm_bytes: memory capacity, bytes (catalog).
    """

    system: SystemSpec
    calibration: PlanCalibration
    comm: CommModel
    peak_flops: float
    hbm_bps: float
    hbm_bytes: float
    dtype: str

    @classmethod
    def build(cls, system: SystemSpec, dtype: str = "bf16",
              calibration: PlanCalibration | None = None,
              comm: CommModel | None = None) -> PlanCosts:
        """Look the GPU up in the catalog and assemble the models.

        Raises:
            PlanError: unknown GPU, or the GPU has no peak for ``dtype``.
        """
        cal = calibration or default_calibration()
        try:
            gpu = load_catalog().gpu(system.gpu)
        except (KeyError, ParameterError) as exc:
            raise PlanError(f"unknown GPU {system.gpu!r}: {str(exc).strip(chr(39))}") from None
        peak = gpu.peak_flops(dtype)
        if not (peak and peak > 0 and math.isfinite(peak)):
            raise PlanError(f"{gpu.name} has no catalog peak for {dtype}")
        inter = system.inter_node_gbps / system.gpus_per_node
        links = CommModel.from_links(
            system.intra_node_gbps, inter, latency_us=cal.comm_latency_us,
            gpus_per_node=system.gpus_per_node, efficiency=min(1.0, cal.comm_efficiency))
        if comm is None:
            comm = links
        elif ("all_reduce", "inter") not in comm.curves:
            # a model measured inside one node (nccl-tests, vTrain's table): the network
            # phases of groups spanning nodes come from the links
            curves = dict(comm.curves)
            curves[("all_reduce", "inter")] = links.curves[("all_reduce", "inter")]
            comm = CommModel(curves, kind=comm.kind, gpus_per_node=system.gpus_per_node,
                             intra_gbps=comm.intra_gbps, inter_gbps=inter,
                             notes=[*comm.notes, "inter-node curve from the links"],
                             source=comm.source)
        return cls(system, cal, comm, float(peak), gpu.hbm_gbps * 1e9,
                   gpu.hbm_gb * 1e9, dtype)

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def ideal_ns(self, flops: float, nbytes: float) -> float:
        """Roofline time, ns."""
        return max(flops / self.peak_flops, nbytes / self.hbm_bps) * 1e9

    def compute_ns(self, family: str, flops: float, nbytes: float, kernels: int = 1) -> float:
        """Time (ns) of ``kernels`` kernels of ``family`` totalling ``flops`` and ``nbytes``."""
        fe = self.calibration.family(family)
        return kernels * fe.latency_ns + self.ideal_ns(flops, nbytes) / fe.eff

    def comm_ns(self, collective: str, size_bytes: float, group: int,
                ranks_per_node: int | None = None) -> float:
        """Time (ns) of one collective (nccl-tests size convention); 0 for a group of 1."""
        if group <= 1 or size_bytes <= 0:
            return 0.0
        # a search asks the same few sizes thousands of times (buckets, TP activations)
        memo = self.__dict__.setdefault("_comm_memo", {})
        key = (collective, size_bytes, group, ranks_per_node)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = self.comm.predict_ns(collective, size_bytes, group,
                                                   ranks_per_node=ranks_per_node)
        return hit
