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
from traincast.costs.hardware.catalog import Catalog
from traincast.costs.hardware.devices import (
    CPU,
    DTYPES,
    GPU,
    KERNEL_MODEL_FIELDS,
    Link,
    Node,
    host_cpu,
    normalize_dtype,
)
from traincast.costs.hardware.files import load_catalog

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
