"""Devices of the hardware catalog: :class:`GPU`, :class:`CPU`, :class:`Link`, :class:`Node`,
the dtype keys of peak throughputs (:data:`DTYPES`, :func:`normalize_dtype`) and the
machine's own CPU (:func:`host_cpu`). Units are in the field names (see
:mod:`traincast.costs.hardware`)."""

from __future__ import annotations

import difflib
import os
import platform
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from traincast.errors import ParameterError

DTYPES: tuple[str, ...] = (
    "fp64",
    "fp64_tensor",
    "fp32",
    "fp32_tensor",
    "tf32",
    "fp16",
    "bf16",
    "fp8",
    "fp4",
    "int8",
)

_DTYPE_ALIASES: dict[str, str] = {
    "float64": "fp64",
    "double": "fp64",
    "f64": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "float8e4m3fn": "fp8",
    "float8e4m3fnuz": "fp8",
    "float8e5m2": "fp8",
    "float8e5m2fnuz": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "f8": "fp8",
    "float4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "i8": "int8",
    "qint8": "int8",
}

#: the GPU fields of the per-kernel-class model of ``--what-if gpu=`` (traincast.whatif.gpu)
KERNEL_MODEL_FIELDS: tuple[str, ...] = (
    "min_kernel_ns",
    "hbm_efficiency",
    "gemm_efficiency",
    "host_link",
)


def _norm(name: str) -> str:
    """Lookup key of a name: lower case without spaces, '-' and '_'."""
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


def normalize_dtype(dtype: object) -> str:
    """Map a dtype spelling to a :data:`DTYPES` key.

    Accepts the catalog keys and common spellings: ``torch.bfloat16``, ``c10::Half``,
    ``float32``, ``double``, ``float8_e4m3fn``... Raises ParameterError for anything else.
    """
    text = str(dtype).strip().lower()
    for prefix in ("torch.", "c10::", "at::"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    if text in DTYPES:
        return text
    key = text.replace("_", "").replace("-", "").replace(" ", "")
    if key in DTYPES:
        return key
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    close = difflib.get_close_matches(text, list(DTYPES) + list(_DTYPE_ALIASES), n=3)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    raise ParameterError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)}){hint}")


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class GPU:
    """One accelerator (an NVIDIA GPU, an AMD GPU package or GCD) as a rank sees it.

    Attributes:
        name: catalog name, e.g. ``A100-SXM4-80GB``.
        vendor: ``nvidia`` or ``amd``.
        peak_tflops: dtype -> peak dense TFLOP/s (TOP/s for int8); keys from :data:`DTYPES`.
        hbm_gbps: peak device-memory bandwidth, GB/s (10^9 bytes/s).
        hbm_gb: device memory as quoted by the vendor, GB.
        l2_mb: L2 cache, MB (None when no source gives it).
        sm_count: SMs (NVIDIA) or compute units (AMD); None when no source gives it.
        min_kernel_ns: device time of an (almost) empty kernel, ns: the floor of every kernel
            (None when the entry does not give it).
        launch_latency_ns: launch call start to kernel start, ns (informational; None if
            not given).
        hbm_efficiency: achievable fraction of ``hbm_gbps`` for streaming kernels (0..1].
        gemm_efficiency: achievable fraction of the dense tensor/matrix peak for large GEMMs
            (0..1]; also used for attention kernels and for vector-unit GEMMs.
        host_link: catalog name of the GPU's host link (a :class:`Link` of kind ``host``),
            "" when not given.
        form_factor: SXM2, SXM4, PCIe, OAM, GCD...
        patterns: regexes (case-insensitive) matching Kineto ``deviceProperties.name``.
        aliases: other names :meth:`Catalog.gpu` accepts.
        source: where the numbers come from (title + URL or document id).
        sources: per-value source, key = field name or ``peak_tflops.<dtype>``; complete for
            every number of the entry.
        note: caveats (what a figure means, what was derived and how).
    """

    name: str
    vendor: str
    peak_tflops: dict[str, float] = field(hash=False)
    hbm_gbps: float
    hbm_gb: float
    source: str
    l2_mb: float | None = None
    sm_count: int | None = None
    form_factor: str = ""
    patterns: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, hash=False, repr=False)
    note: str = field(default="", repr=False)
    min_kernel_ns: float | None = None
    launch_latency_ns: float | None = None
    hbm_efficiency: float | None = None
    gemm_efficiency: float | None = None
    host_link: str = ""

    kind = "gpu"

    def missing(self, fields: Iterable[str] = KERNEL_MODEL_FIELDS) -> list[str]:
        """The ``fields`` this entry leaves unset (None or ""), in the given order."""
        return [f for f in fields if getattr(self, f) in (None, "")]

    def peak_flops(self, dtype: object) -> float:
        """Peak dense FLOP/s (OP/s for int8) for ``dtype``; ParameterError if not known."""
        key = normalize_dtype(dtype)
        if key not in self.peak_tflops:
            known = ", ".join(k for k in DTYPES if k in self.peak_tflops)
            raise ParameterError(
                f"GPU {self.name!r} has no {key} peak in the catalog (has: {known})"
            )
        return self.peak_tflops[key] * 1e12

    def source_of(self, what: str) -> str:
        """Source of one value: a field name (``hbm_gbps``) or ``peak_tflops.<dtype>``."""
        return _source_of(self.sources, self.source, what)


@dataclass(frozen=True)
class CPU:
    """The recording machine's CPU as a device (see :func:`host_cpu`).

    ``peak_tflops`` is empty and ``mem_gbps`` None: no source gives them for an arbitrary CPU,
    so the compute model calibrates CPU durations from traces instead.
    """

    name: str
    cores: int
    source: str
    vendor: str = ""
    peak_tflops: dict[str, float] = field(default_factory=dict, hash=False)
    mem_gbps: float | None = None

    kind = "cpu"

    def peak_flops(self, dtype: object) -> float:
        """Peak FLOP/s for ``dtype`` -- unknown for a CPU unless a user file gives it."""
        key = normalize_dtype(dtype)
        if key not in self.peak_tflops:
            raise ParameterError(
                f"peak {key} FLOP/s of CPU {self.name!r} is not known; the compute model "
                "calibrates CPU op durations from traces"
            )
        return self.peak_tflops[key] * 1e12


@dataclass(frozen=True)
class Link:
    """An interconnect: a GPU's NVLink/Infinity Fabric, a PCIe slot or a network port.

    Attributes:
        name: catalog name, e.g. ``NVLink3``, ``IB-HDR``.
        kind: ``gpu-gpu``, ``host`` (CPU-GPU) or ``network``.
        scope: what one instance is: ``per GPU, all links`` (NVLink), ``per port`` (NIC),
            ``per link`` (one Infinity Fabric link), ``per x16 slot`` (PCIe).
        gbps_per_direction: peak bandwidth in one direction, GB/s.
        links: number of physical links/lanes the figure aggregates (None if not applicable).
        latency_us: vendor-quoted latency, microseconds (None when no source gives one).
        source, sources, note, aliases: as in :class:`GPU`.
    """

    name: str
    kind: str
    scope: str
    gbps_per_direction: float
    source: str
    links: int | None = None
    latency_us: float | None = None
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, hash=False, repr=False)
    note: str = field(default="", repr=False)

    @property
    def gbps_bidirectional(self) -> float:
        """Both directions together, GB/s (all catalog links are full duplex)."""
        return 2.0 * self.gbps_per_direction

    @property
    def gbit_s_per_direction(self) -> float:
        """One direction in Gb/s (network convention)."""
        return 8.0 * self.gbps_per_direction

    def source_of(self, what: str) -> str:
        """Source of one value (a field name)."""
        return _source_of(self.sources, self.source, what)


@dataclass(frozen=True)
class Node:
    """A node preset: GPUs per node and how they talk inside and across nodes.

    Attributes:
        name: catalog name, e.g. ``DGX-A100``.
        gpu: the GPU (a GCD for MI250X nodes: what one rank sees).
        gpus_per_node: GPUs (ranks) per node.
        intra_link: the GPU-GPU link; ``intra_links_per_gpu`` instances of it per GPU.
        inter_link: the network port; ``nics_per_node`` compute NICs per node.
        topology: how the GPUs are wired, in words.
        source, sources, note, aliases: as in :class:`GPU`.
    """

    name: str
    gpu: GPU
    gpus_per_node: int
    intra_link: Link
    inter_link: Link
    nics_per_node: int
    source: str
    intra_links_per_gpu: int = 1
    topology: str = ""
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, hash=False, repr=False)
    note: str = field(default="", repr=False)

    @property
    def intra_gbps_per_gpu(self) -> float:
        """Peak GPU-GPU bandwidth one GPU can inject inside the node, GB/s per direction."""
        return self.intra_link.gbps_per_direction * self.intra_links_per_gpu

    @property
    def inter_gbps_per_node(self) -> float:
        """Peak network bandwidth of the node (all compute NICs), GB/s per direction."""
        return self.inter_link.gbps_per_direction * self.nics_per_node

    @property
    def inter_gbps_per_gpu(self) -> float:
        """Node network bandwidth shared evenly by its GPUs, GB/s per direction."""
        return self.inter_gbps_per_node / self.gpus_per_node

    def source_of(self, what: str) -> str:
        """Source of one value (a field name)."""
        return _source_of(self.sources, self.source, what)


def _source_of(sources: Mapping[str, str], default: str, what: str) -> str:
    if what in sources:
        return sources[what]
    head = what.split(".", 1)[0]
    return sources.get(head, default)


# --------------------------------------------------------------------------- host CPU


def host_cpu() -> CPU:
    """The machine's CPU, from ``os.cpu_count()`` and ``/proc/cpuinfo`` (or ``platform``).

    Peak FLOP/s and memory bandwidth stay unknown (None/empty): no source gives them for an
    arbitrary CPU, and the compute model calibrates CPU durations from traces.
    """
    model = ""
    vendor = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        try:
            text = cpuinfo.read_text(errors="replace")
        except OSError:
            text = ""
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() not in fields:
                fields[key.strip()] = value.strip()
        model = fields.get("model name") or fields.get("Hardware") or fields.get("cpu model", "")
        vendor = fields.get("vendor_id", "")
    source = "this machine: os.cpu_count()"
    if model:
        source += ", /proc/cpuinfo"
    else:
        model = platform.processor() or platform.machine() or "unknown CPU"
        source += ", platform.processor()"
    return CPU(name=model, cores=os.cpu_count() or 1, vendor=vendor, source=source)
