"""The hardware catalog: GPUs, links and node presets, every number named and sourced.

The numbers live in ``traincast/costs/data/hardware.toml`` (shipped in the wheel); this module
loads and validates them. :func:`load_catalog` returns a :class:`Catalog`::

    from traincast.costs.hardware import load_catalog
    cat = load_catalog()                       # packaged catalog (cached)
    a100 = cat.gpu("A100")                     # alias -> A100-SXM4-80GB
    cat.peak_flops(a100, "bf16")               # 3.12e14 FLOP/s, dense
    cat.match_device("NVIDIA A100-SXM4-80GB")  # GPU from a Kineto deviceProperties name
    node = cat.node("DGX-A100")
    node.intra_gbps_per_gpu, node.inter_gbps_per_gpu   # 300.0, 25.0 GB/s per direction

Units (also in every field name):

- ``peak_tflops``: peak **dense** throughput in TFLOP/s (TOP/s for ``int8``), per dtype. Vendors
  quote 2:4-structured-sparsity figures for tensor/matrix cores at twice the dense rate; the
  catalog always holds the dense number. Keys (see :data:`DTYPES`): ``fp64``/``fp32`` are the
  vector (CUDA-core / SIMD) rates, ``fp64_tensor``/``fp32_tensor`` the tensor-/matrix-core rates
  for those types, ``tf32``, ``fp16``, ``bf16``, ``fp8``, ``fp4``, ``int8`` tensor-/matrix-core
  rates (``fp16`` with FP32 accumulation). A dtype the hardware lacks is absent.
- ``hbm_gbps`` / ``gbps_per_direction``: GB/s, 1 GB = 10^9 bytes. Network ports quoted in Gb/s
  are divided by 8 (HDR 200 Gb/s = 25 GB/s). Links are full duplex: ``gbps_per_direction`` is
  one direction, :attr:`Link.gbps_bidirectional` both.
- ``hbm_gb``: device memory as the vendor quotes it (HBM, or GDDR on consumer cards).
- ``l2_mb``: L2 cache in MB as the vendor states it (binary: 40960 KB = 40 MB).
- ``sm_count``: streaming multiprocessors (NVIDIA) or compute units (AMD).
- ``latency_us``: a vendor-quoted latency in microseconds, only where a source gives one.
- Kernel-model constants (optional per GPU; ``--what-if gpu=`` needs them, see
  :mod:`traincast.whatif.gpu`, and raises ParameterError naming the GPU and the missing fields
  when an entry lacks them): ``min_kernel_ns`` (ns, an almost empty kernel's device time),
  ``launch_latency_ns`` (ns, informational), ``hbm_efficiency`` and ``gemm_efficiency``
  (achievable fractions of ``hbm_gbps`` and of the dense tensor peak, 0..1], ``host_link`` (a
  catalog link of kind ``host``). Each has its own source; a value no source gives says
  ``assumed: ...`` in it.

Every number carries a source: the entry's ``source`` (vendor datasheet or whitepaper title and
URL or document id) or a per-value ``sources`` override. :meth:`GPU.source_of` tells which.

File format (the packaged file and user files alike; TOML)::

    [gpu.MyGPU]                      # a new GPU, or an override of an existing name/alias
    vendor = "nvidia"
    patterns = ['MyGPU-SXM']         # regexes (case-insensitive) on deviceProperties.name
    aliases = ["mine"]
    peak_tflops = { bf16 = 500.0, fp32 = 60.0 }
    hbm_gbps = 3000.0
    hbm_gb = 96.0
    l2_mb = 50.0                     # optional
    sm_count = 120                   # optional
    source = "MyGPU datasheet, doc DS-123"
    [gpu.MyGPU.sources]              # optional per-value sources
    l2_mb = "MyGPU whitepaper, table 2"
    "peak_tflops.bf16" = "measured with cuBLAS, 2025-01-01"

    [link.MyLink]
    kind = "network"                 # gpu-gpu | host | network
    scope = "per port"
    gbps_per_direction = 50.0
    latency_us = 0.6                 # optional
    source = "..."

    [node.MyNode]
    gpu = "MyGPU"
    gpus_per_node = 8
    intra_link = "NVLink4"
    intra_links_per_gpu = 1          # optional, default 1
    inter_link = "IB-NDR"
    nics_per_node = 8
    source = "..."

A user entry whose name (or an alias) matches a packaged entry overrides the fields it sets
(``peak_tflops`` key by key) and must source the numbers it sets. A malformed file (bad TOML, an
unknown or missing field, a zero, negative or non-numeric bandwidth/peak/size, a number without
a source) raises :class:`~traincast.errors.ParameterError` naming the file and the entry.

The machine's CPU is a device too: :func:`host_cpu` describes it from what the machine reports.
Its peak FLOP/s is not known (no source for an arbitrary CPU), so the compute model calibrates
CPU durations from the traces instead.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from traincast.errors import ParameterError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "CPU",
    "DTYPES",
    "GPU",
    "Catalog",
    "Link",
    "Node",
    "KERNEL_MODEL_FIELDS",
    "host_cpu",
    "load_catalog",
    "normalize_dtype",
]

#: dtype keys of :attr:`GPU.peak_tflops` (dense; TOP/s for int8).
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

_KINDS = ("gpu", "link", "node")
_KIND_LABEL = {"gpu": "GPU", "link": "link", "node": "node"}
_LINK_KINDS = ("gpu-gpu", "host", "network")

# Field specs: name -> (type, required-for-a-new-entry, numeric-needing-a-source).
_STR, _INT, _FLOAT, _STRLIST, _TABLE = "str", "int", "float", "list[str]", "table"
_FIELDS: dict[str, dict[str, tuple[str, bool, bool]]] = {
    "gpu": {
        "vendor": (_STR, True, False),
        "form_factor": (_STR, False, False),
        "patterns": (_STRLIST, False, False),
        "aliases": (_STRLIST, False, False),
        "peak_tflops": (_TABLE, True, True),
        "hbm_gbps": (_FLOAT, True, True),
        "hbm_gb": (_FLOAT, True, True),
        "l2_mb": (_FLOAT, False, True),
        "sm_count": (_INT, False, True),
        "min_kernel_ns": (_FLOAT, False, True),
        "launch_latency_ns": (_FLOAT, False, True),
        "hbm_efficiency": (_FLOAT, False, True),
        "gemm_efficiency": (_FLOAT, False, True),
        "host_link": (_STR, False, True),
        "note": (_STR, False, False),
    },
    "link": {
        "kind": (_STR, True, False),
        "scope": (_STR, True, False),
        "gbps_per_direction": (_FLOAT, True, True),
        "links": (_INT, False, True),
        "latency_us": (_FLOAT, False, True),
        "aliases": (_STRLIST, False, False),
        "note": (_STR, False, False),
    },
    "node": {
        "gpu": (_STR, True, False),
        "gpus_per_node": (_INT, True, True),
        "intra_link": (_STR, True, False),
        "intra_links_per_gpu": (_INT, False, True),
        "inter_link": (_STR, True, False),
        "nics_per_node": (_INT, True, True),
        "topology": (_STR, False, False),
        "aliases": (_STRLIST, False, False),
        "note": (_STR, False, False),
    },
}
_META = ("source", "sources")
#: fields that are fractions (0 < x <= 1)
_FRACTIONS = ("hbm_efficiency", "gemm_efficiency")
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


# --------------------------------------------------------------------------- catalog


class Catalog:
    """GPUs, links and node presets, looked up by name or alias (case-insensitive).

    Build it with :func:`load_catalog`. ``gpus``/``links``/``nodes`` map catalog names to
    entries; ``files`` lists the files it was read from.
    """

    def __init__(
        self,
        gpus: Mapping[str, GPU],
        links: Mapping[str, Link],
        nodes: Mapping[str, Node],
        files: tuple[str, ...] = (),
    ) -> None:
        self.gpus: Mapping[str, GPU] = dict(gpus)
        self.links: Mapping[str, Link] = dict(links)
        self.nodes: Mapping[str, Node] = dict(nodes)
        self.files = files
        self._keys: dict[str, dict[str, str]] = {}
        for kind, table in (("gpu", self.gpus), ("link", self.links), ("node", self.nodes)):
            keys: dict[str, str] = {}
            for name, entry in table.items():
                for alias in entry.aliases:
                    keys[_norm(alias)] = name
            for name in table:  # names win over aliases
                keys[_norm(name)] = name
            self._keys[kind] = keys
        self._patterns = [
            (re.compile(p, re.IGNORECASE), gpu) for gpu in self.gpus.values() for p in gpu.patterns
        ]

    def __repr__(self) -> str:
        return (
            f"Catalog({len(self.gpus)} GPUs, {len(self.links)} links, {len(self.nodes)} nodes"
            f" from {', '.join(self.files) or 'memory'})"
        )

    def _lookup(self, kind: str, name: str) -> str:
        keys = self._keys[kind]
        found = keys.get(_norm(str(name)))
        if found is not None:
            return found
        table = {"gpu": self.gpus, "link": self.links, "node": self.nodes}[kind]
        close = difflib.get_close_matches(_norm(str(name)), list(keys), n=5, cutoff=0.5)
        suggestions = list(dict.fromkeys(keys[c] for c in close))
        label = _KIND_LABEL[kind]
        if suggestions:
            raise ParameterError(
                f"unknown {label} {name!r}; close matches: {', '.join(suggestions)}"
            )
        raise ParameterError(f"unknown {label} {name!r}; known: {', '.join(sorted(table))}")

    def gpu(self, name: str) -> GPU:
        """The GPU called ``name`` (catalog name or alias, case-insensitive)."""
        return self.gpus[self._lookup("gpu", name)]

    def link(self, name: str) -> Link:
        """The link called ``name`` (catalog name or alias, case-insensitive)."""
        return self.links[self._lookup("link", name)]

    def node(self, name: str) -> Node:
        """The node preset called ``name`` (catalog name or alias, case-insensitive)."""
        return self.nodes[self._lookup("node", name)]

    def names(self) -> dict[str, tuple[str, ...]]:
        """Catalog names by kind: ``{"gpu": (...), "link": (...), "node": (...)}``."""
        return {
            "gpu": tuple(sorted(self.gpus)),
            "link": tuple(sorted(self.links)),
            "node": tuple(sorted(self.nodes)),
        }

    def peak_flops(self, gpu: GPU | CPU | str, dtype: object) -> float:
        """Peak dense FLOP/s (OP/s for int8) of ``gpu`` (an entry or a name) for ``dtype``."""
        device = self.gpu(gpu) if isinstance(gpu, str) else gpu
        return device.peak_flops(dtype)

    def match_device(
        self,
        trace_name: str,
        *,
        num_sms: int | None = None,
        memory_bytes: int | None = None,
    ) -> GPU | None:
        """The GPU whose patterns match a Kineto ``deviceProperties.name``, else None.

        When several patterns match, the longest match wins (on a tie, the entry defined last,
        i.e. a user file's). A generic name that matches no pattern (ROCm reports some
        Instinct parts as ``AMD Radeon Graphics``, some vLLM runs on MI300X record ``""``)
        is resolved from the other recorded properties: ``num_sms`` (``numSms``: SMs or CUs)
        and ``memory_bytes`` (``totalGlobalMem``), both required for an empty name. The GPUs
        of a compatible vendor with that SM/CU count and, when given, a capacity within 10%
        (GB or GiB) are the candidates: one candidate is the answer; several are accepted
        only when they are the same part for every cost model (same SM/CU count, memory
        bandwidth and capacity, peaks within 1% for every dtype; e.g. MI210 and one MI250
        GCD), and then the first defined is returned; else None.
        """
        name = str(trace_name or "").strip()
        if not name:
            if num_sms is None or memory_bytes is None:
                return None
            return self._match_properties("", num_sms, memory_bytes)
        best: tuple[int, GPU] | None = None
        for regex, gpu in self._patterns:
            m = regex.search(name)
            if m and (best is None or len(m.group(0)) >= best[0]):  # ties: later entry
                best = (len(m.group(0)), gpu)
        if best is not None:
            return best[1]
        if num_sms is None:
            return None
        return self._match_properties(name, num_sms, memory_bytes)

    def match_recorded(self, props: Mapping[str, Any]) -> GPU | None:
        """:meth:`match_device` on one Kineto ``deviceProperties`` entry (``name``, ``numSms``,
        ``totalGlobalMem``); values of the wrong type are ignored. None when nothing matches."""

        def _int(key: str) -> int | None:
            v = props.get(key)
            try:
                return int(v) if v is not None and not isinstance(v, bool) else None
            except (TypeError, ValueError, OverflowError):
                return None

        return self.match_device(str(props.get("name") or ""), num_sms=_int("numSms"),
                                 memory_bytes=_int("totalGlobalMem"))

    def match_first(self, props: Iterable[Mapping[str, Any]]) -> GPU | None:
        """The first of several ``deviceProperties`` entries that :meth:`match_recorded`
        resolves (e.g. every entry of every rank of a TraceSet), else None."""
        for p in props:
            gpu = self.match_recorded(p)
            if gpu is not None:
                return gpu
        return None

    def _match_properties(self, name: str, num_sms: int, memory_bytes: int | None) -> GPU | None:
        vendor = _vendor_of(name)
        candidates = [
            g
            for g in self.gpus.values()
            if g.sm_count == num_sms
            and (not vendor or g.vendor == vendor)
            and (memory_bytes is None or _capacity_close(g.hbm_gb, memory_bytes))
        ]
        if not candidates:
            return None
        first = candidates[0]
        return first if all(_equivalent(first, g) for g in candidates[1:]) else None


def _equivalent(a: GPU, b: GPU) -> bool:
    """Same part for every cost model: SMs, memory, bandwidth equal, peaks within 1%."""
    if (a.sm_count, a.hbm_gb, a.hbm_gbps) != (b.sm_count, b.hbm_gb, b.hbm_gbps):
        return False
    if set(a.peak_tflops) != set(b.peak_tflops):
        return False
    return all(abs(a.peak_tflops[k] - b.peak_tflops[k]) <= 0.01 * a.peak_tflops[k]
               for k in a.peak_tflops)


def _vendor_of(name: str) -> str:
    low = name.lower()
    if any(w in low for w in ("amd", "radeon", "instinct")):
        return "amd"
    if any(w in low for w in ("nvidia", "tesla", "geforce", "quadro")):
        return "nvidia"
    return ""


def _capacity_close(hbm_gb: float, memory_bytes: int) -> bool:
    return any(abs(memory_bytes - hbm_gb * unit) <= 0.1 * hbm_gb * unit for unit in (1e9, 2**30))


# --------------------------------------------------------------------------- loading


@dataclass
class _Record:
    """One entry while files are merged: raw fields plus a source per number."""

    kind: str
    name: str
    fields: dict[str, Any]
    sources: dict[str, str]
    source: str
    path: str


def _fail(path: str, kind: str, name: str, message: str) -> ParameterError:
    return ParameterError(f"{kind} {name!r}: {message}", path=path)


def _source_text(value: Any, path: str, kind: str, name: str, what: str) -> str:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        value = "; ".join(v.strip() for v in value)
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, kind, name, f"{what} must be a non-empty string (title + URL or id)")
    return value.strip()


def _check_number(value: Any, path: str, kind: str, name: str, what: str, integer: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, kind, name, f"{what} must be a number, got {value!r}")
    if integer and not (isinstance(value, int) or float(value).is_integer()):
        raise _fail(path, kind, name, f"{what} must be a whole number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise _fail(path, kind, name, f"{what} must be positive, got {value!r}")
    return int(value) if integer else float(value)


def _parse_entry(kind: str, name: str, raw: Any, path: str) -> _Record:
    """Validate one entry of one file; every number it sets must have a source."""
    if not isinstance(raw, dict):
        raise _fail(path, kind, name, "must be a table")
    spec = _FIELDS[kind]
    known = list(spec) + list(_META)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=2)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise _fail(path, kind, name, f"unknown field {key!r}{hint}")
    source = _source_text(raw["source"], path, kind, name, "source") if "source" in raw else ""
    per_value: dict[str, str] = {}
    if "sources" in raw:
        if not isinstance(raw["sources"], dict):
            raise _fail(path, kind, name, 'sources must be a table of field = "source"')
        for key, value in raw["sources"].items():
            head, _, dtype = key.partition(".")
            if head not in spec or not spec[head][2] or (dtype and head != "peak_tflops"):
                raise _fail(path, kind, name, f"sources names unknown value {key!r}")
            if dtype and dtype not in DTYPES:
                raise _fail(path, kind, name, f"sources names unknown dtype {dtype!r}")
            per_value[key] = _source_text(value, path, kind, name, f"sources.{key}")

    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, value in raw.items():
        if key in _META:
            continue
        ftype, _, numeric = spec[key]
        if ftype == _STR:
            if not isinstance(value, str):
                raise _fail(path, kind, name, f"{key} must be a string, got {value!r}")
            fields[key] = value.strip()
        elif ftype == _STRLIST:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(path, kind, name, f"{key} must be a list of strings")
            fields[key] = tuple(value)
        elif ftype == _TABLE:  # peak_tflops
            if not isinstance(value, dict) or not value:
                raise _fail(path, kind, name, f"{key} must be a non-empty table dtype = TFLOP/s")
            peaks: dict[str, float] = {}
            for dtype, number in value.items():
                if dtype not in DTYPES:
                    close = difflib.get_close_matches(dtype, DTYPES, n=2)
                    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
                    raise _fail(path, kind, name, f"unknown dtype {dtype!r} in {key}{hint}")
                what = f"{key}.{dtype}"
                peaks[dtype] = _check_number(number, path, kind, name, what, integer=False)
                src = per_value.get(what) or per_value.get(key) or source
                if not src:
                    raise _fail(path, kind, name, f"{what} has no source (add source or sources)")
                sources[what] = src
            fields[key] = peaks
        else:
            fields[key] = _check_number(value, path, kind, name, key, integer=ftype == _INT)
            if key in _FRACTIONS and fields[key] > 1:
                raise _fail(path, kind, name, f"{key} is a fraction (0..1], got {value!r}")
        if numeric and ftype != _TABLE:
            src = per_value.get(key) or source
            if not src:
                raise _fail(path, kind, name, f"{key} has no source (add source or sources.{key})")
            sources[key] = src
    if kind == "link" and "kind" in fields and fields["kind"] not in _LINK_KINDS:
        raise _fail(path, kind, name, f"kind must be one of {', '.join(_LINK_KINDS)}")
    for pattern in fields.get("patterns", ()):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _fail(path, kind, name, f"bad pattern {pattern!r}: {exc}") from None
    return _Record(kind, name, fields, sources, source, path)


def _read_file(path: Path) -> dict[str, dict[str, _Record]]:
    """Parse and validate one catalog file into records per kind (not yet merged)."""
    spath = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParameterError("hardware catalog file not found", path=spath) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError(f"cannot read hardware catalog: {exc}", path=spath) from None
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError(f"bad TOML: {exc}", path=spath) from None
    out: dict[str, dict[str, _Record]] = {kind: {} for kind in _KINDS}
    for key, table in data.items():
        if key not in _KINDS:
            raise ParameterError(
                f"unknown section [{key}] (expected {', '.join(f'[{k}.NAME]' for k in _KINDS)})",
                path=spath,
            )
        if not isinstance(table, dict):
            raise ParameterError(f"[{key}] must hold tables [{key}.NAME]", path=spath)
        for name, raw in table.items():
            out[key][name] = _parse_entry(key, name, raw, spath)
    return out


def _merge(
    base: dict[str, dict[str, _Record]], extra: dict[str, dict[str, _Record]]
) -> dict[str, dict[str, _Record]]:
    """Entries of ``extra`` add to ``base`` or override the entry they name (or alias)."""
    merged = {kind: dict(records) for kind, records in base.items()}
    for kind in _KINDS:
        keys: dict[str, str] = {}
        for name, rec in merged[kind].items():
            for alias in rec.fields.get("aliases", ()):
                keys[_norm(alias)] = name
            keys[_norm(name)] = name
        for name, rec in extra[kind].items():
            target = keys.get(_norm(name))
            if target is None:
                merged[kind][name] = rec
                keys[_norm(name)] = name
                continue
            old = merged[kind][target]
            fields = dict(old.fields)
            sources = dict(old.sources)
            for key, value in rec.fields.items():
                if key == "peak_tflops":
                    fields[key] = {**old.fields.get(key, {}), **value}
                else:
                    fields[key] = value
            sources.update(rec.sources)
            changed = ", ".join(sorted(rec.sources)) or "descriptive fields"
            note = f"{changed} from {rec.path}" + (f": {rec.source}" if rec.source else "")
            merged[kind][target] = _Record(
                kind, target, fields, sources, f"{old.source}; overridden: {note}", rec.path
            )
    return merged


def _require(rec: _Record) -> None:
    for key, (_, required, _) in _FIELDS[rec.kind].items():
        if required and key not in rec.fields:
            raise _fail(rec.path, rec.kind, rec.name, f"missing field {key!r}")
    numeric = [k for k, (_, _, num) in _FIELDS[rec.kind].items() if num and k in rec.fields]
    if numeric and not rec.source and not rec.sources:
        raise _fail(rec.path, rec.kind, rec.name, "no source")


def _build(records: dict[str, dict[str, _Record]], files: tuple[str, ...]) -> Catalog:
    for kind in _KINDS:
        for rec in records[kind].values():
            _require(rec)
    gpus: dict[str, GPU] = {}
    for name, rec in records["gpu"].items():
        f = rec.fields
        gpus[name] = GPU(
            name=name,
            vendor=f["vendor"].lower(),
            peak_tflops=dict(f["peak_tflops"]),
            hbm_gbps=f["hbm_gbps"],
            hbm_gb=f["hbm_gb"],
            l2_mb=f.get("l2_mb"),
            sm_count=f.get("sm_count"),
            form_factor=f.get("form_factor", ""),
            patterns=tuple(f.get("patterns", ())),
            aliases=tuple(f.get("aliases", ())),
            source=rec.source or "see sources",
            sources=dict(rec.sources),
            note=f.get("note", ""),
            min_kernel_ns=f.get("min_kernel_ns"),
            launch_latency_ns=f.get("launch_latency_ns"),
            hbm_efficiency=f.get("hbm_efficiency"),
            gemm_efficiency=f.get("gemm_efficiency"),
            host_link=f.get("host_link", ""),
        )
    links: dict[str, Link] = {}
    for name, rec in records["link"].items():
        f = rec.fields
        links[name] = Link(
            name=name,
            kind=f["kind"],
            scope=f["scope"],
            gbps_per_direction=f["gbps_per_direction"],
            links=f.get("links"),
            latency_us=f.get("latency_us"),
            aliases=tuple(f.get("aliases", ())),
            source=rec.source or "see sources",
            sources=dict(rec.sources),
            note=f.get("note", ""),
        )
    partial = Catalog(gpus, links, {})
    for name, rec in records["gpu"].items():
        if "host_link" in rec.fields:
            try:
                link = partial.link(rec.fields["host_link"])
            except ParameterError as exc:
                raise _fail(rec.path, "gpu", name, f"host_link: {exc.message}") from None
            if link.kind != "host":
                raise _fail(rec.path, "gpu", name,
                            f"host_link {link.name!r} is a {link.kind} link, not a host link")
    nodes: dict[str, Node] = {}
    for name, rec in records["node"].items():
        f = rec.fields
        try:
            gpu = partial.gpu(f["gpu"])
            intra = partial.link(f["intra_link"])
            inter = partial.link(f["inter_link"])
        except ParameterError as exc:
            raise _fail(rec.path, "node", name, exc.message) from None
        nodes[name] = Node(
            name=name,
            gpu=gpu,
            gpus_per_node=f["gpus_per_node"],
            intra_link=intra,
            intra_links_per_gpu=f.get("intra_links_per_gpu", 1),
            inter_link=inter,
            nics_per_node=f["nics_per_node"],
            topology=f.get("topology", ""),
            aliases=tuple(f.get("aliases", ())),
            source=rec.source or "see sources",
            sources=dict(rec.sources),
            note=f.get("note", ""),
        )
    return Catalog(gpus, links, nodes, files)


def _packaged_path() -> Path:
    return Path(str(resources.files("traincast.costs").joinpath("data", "hardware.toml")))


@functools.lru_cache(maxsize=1)
def _packaged() -> tuple[dict[str, dict[str, _Record]], Catalog]:
    path = _packaged_path()
    records = _read_file(path)
    return records, _build(records, (str(path),))


def load_catalog(extra: str | Path | None = None) -> Catalog:
    """The packaged hardware catalog, plus the entries of a user file in the same format.

    Args:
        extra: a TOML file whose entries add to or override the packaged ones (see the module
            docstring for the format). None: the packaged catalog alone (read once, cached).

    Raises:
        ParameterError: the user file is missing or malformed; the message names the file and
            the entry.
    """
    records, catalog = _packaged()
    if extra is None:
        return catalog
    path = Path(extra)
    merged = _merge(records, _read_file(path))
    return _build(merged, (*catalog.files, str(path)))
