"""What-if "another GPU": rescale each device op by the resource its kernel class is bound by.

Model (per device op: kernel, memcpy, memset). A kernel's device time is a fixed floor plus
its work at an achievable rate::

    t = t_min + W / R

- ``t_min`` is the GPU's minimum kernel duration (catalog ``min_kernel_ns``: an almost empty
  kernel's device time); ``R`` the achievable rate of the resource that bounds the kernel's
  class (below). This is the latency-plus-throughput ("alpha-beta") form of Hockney's model
  applied to kernels, as in the per-op kernel models of Lin et al. (arXiv 2404.12674) and the
  roofline's "achievable" ceilings (Williams et al., "Roofline", CACM 2009).
- The recorded op gives its own split: its floor part is ``f_old = min(t_old, t_min_old)``,
  its work part ``t_old - f_old = W / R_old``. On the new GPU::

      t_new = f_old * t_min_new / t_min_old + (t_old - f_old) * R_old / R_new

  so an op at or below the old floor scales with the ratio of the minima, not the peaks
  (a 2 us kernel does not get 3x faster on a 3x-peak GPU), and a long op scales with the
  rate ratio. On the same GPU every factor is exactly 1. Copies (memcpy, memset) keep their
  floor part as recorded (``t_min_new / t_min_old`` taken as 1): the copy engines' fixed cost
  is not the kernel floor, and no per-GPU source for it was found.
- ``R`` per kernel class (:func:`classify_kernel`, from the kernel name, then the event's
  ``op_family``):

  ============  ===============================================================  =========
  class         kernels                                                          rate
  ============  ===============================================================  =========
  gemm          cuBLAS/cuBLASLt (``sm90_xmma_gemm``, ``ampere_*gemm``, ``nvjet``),  compute
                CUTLASS, rocBLAS/hipBLASLt Tensile (``Cijk_*``), cuDNN / MIOpen
                convolutions (``implicit_gemm``, ``*conv*``), Triton ``mm``
  attention     FlashAttention (``flash*``), ``fmha*``, ``*attn*``/``*attention*``   compute
  memory        elementwise, ``vectorized*``, reductions, norms, softmax, copies,   HBM
                gather/scatter/index, Triton pointwise/reduction, GEMV
  other         device kernels no rule recognises: taken as memory-bound         HBM
  comm          NCCL/RCCL kernels and collectives: unchanged (the network is     --
                another what-if)
  host_copy     memcpy HtoD / DtoH (pinned or pageable)                          host link
  device_copy   memcpy DtoD, memset                                              HBM
  ============  ===============================================================  =========

  compute rate ``= peak_flops(dtype) * gemm_efficiency``; the dtype is read from the kernel
  name (``bf16``, ``f16``/``h16816``, ``tf32``, ``sgemm``, ``e4m3``, Tensile ``_BBS_``/``_HHS_``/
  ``_SS_``...), else the dtype of the op that launched it (shapes), else the trace's dominant
  dtype. Tensor/matrix-core peaks are kept apart from vector peaks: ``fp32`` runs on the vector
  units (``peak_tflops.fp32``) unless the GPU has fp32 matrix cores (``fp32_tensor``, AMD CDNA)
  or the kernel name says ``tf32``; a tensor dtype the GPU lacks falls back (``tf32`` ->
  ``fp32``, ``bf16`` on Volta -> ``fp32``, ``fp8`` -> ``bf16``/``fp16``), and the fallback is
  named in the notes. HBM rate ``= hbm_gbps * hbm_efficiency``; host-link rate = the host
  link's ``gbps_per_direction``.
- Where the trace has shapes (the work of a gemm/attention op is known,
  :func:`traincast.costs.ops.event_work`), ``R_old / R_new`` is replaced by the ratio of the
  op's achievable roofline times ``max(F / C, B / M)`` on the two GPUs (``C``, ``M`` the compute
  and HBM rates above), so an op whose arithmetic intensity is below the new GPU's machine
  balance (e.g. a decode GEMM) scales with bandwidth there (Williams et al. 2009).
- Host time is unchanged (same host); so are the recorded launch-to-start gaps
  (``launch_latency_ns`` is in the catalog for reports only).

This replaces the earlier path that retargeted the compute model fitted on the trace
(:func:`traincast.costs.compute.fit_compute_model`): that model's efficiency curve is fitted
on the recorded GPU, so its latency floor was divided by the peak ratio when moved, and ops
without known work (most kernels of traces without shapes) had no floor at all. The
per-GPU ``min_kernel_ns`` and achievable fractions of the catalog now carry both, with a
source each. ``compute`` is still accepted and ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from traincast.costs.hardware import load_catalog
from traincast.costs.ops import event_work
from traincast.errors import ParameterError
from traincast.trace import arrow as A
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet

__all__ = ["KERNEL_CLASSES", "classify_kernel", "dominant_dtype", "gpu_breakdown", "gpu_factors"]

#: Kineto/ET dtype names -> catalog dtype keys
_DTYPE = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp64",
          "Half": "fp16", "BFloat16": "bf16", "Float": "fp32"}

#: kernel classes, in breakdown order
KERNEL_CLASSES: tuple[str, ...] = ("gemm", "attention", "memory", "other", "comm", "host_copy",
                                   "device_copy")
_COMPUTE = ("gemm", "attention")
_HBM = ("memory", "other", "device_copy")

# Rules on the lower-cased kernel name; the first match wins.
_COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|"
                   r"sendrecv|cross_device_reduce|msccl|\bbroadcast")
_TRITON_MEM = re.compile(r"triton_(poi|red|per)_")
_ATTN = re.compile(r"flash|fmha|attn|attention|\bmha|paged_?attention|unified_attention")
_MEM_FIRST = re.compile(r"gemv|splitkreduce|split_k_reduce|gemmsn_reduce|reduce_kernel|"
                        r"nchwtonhwc|nhwctonchw|epilogue|create_\w*indices|"
                        r"elementwise|vectorized|unrolled|triton_(poi|red|per)_")
_GEMM = re.compile(r"gemm|cutlass|xmma|nvjet|cijk_|wgmma|wmma|mfma|tensorop|cublas|hipblaslt|"
                   r"rocblas|\bconv|conv2d|convolve|winograd|implicit_gemm|cudnn|miopen|"
                   r"matmul|triton_(tem_|mm|bmm)|_mm_|\bmm_|sm\d+_.*_(tn|nt|nn|tt)_|"
                   r"(ampere|volta|turing|hopper)_.*_(tn|nt|nn|tt)\b")
_MEM = re.compile(r"norm|softmax|copy|cat|index|gather|scatter|fill|reduce|sum|mean|max|min|"
                  r"adam|sgd|optim|multi_tensor|embedding|emb|rope|rotary|act|relu|gelu|silu|"
                  r"dropout|cast|transpose|permute|pad|arange|where|mask|topk|sort|cumsum|"
                  r"triton_|kernel_with_index")


# Name rules in order, the first match wins; then the op family decides.
_NAME_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (_COMM, "comm"), (_TRITON_MEM, "memory"), (_ATTN, "attention"), (_MEM_FIRST, "memory"),
    (_GEMM, "gemm"), (_MEM, "memory"))
_FAMILY_CLASS = {"gemm": "gemm", "conv": "gemm", "attention": "attention", "comm": "comm"}


def classify_kernel(name: str, op_family: str = "other", kind: str = "kernel") -> str:
    """The kernel class (one of :data:`KERNEL_CLASSES`) of one device op.

    Args:
        name: the event name as recorded (kernel symbol or ``Memcpy HtoD (...)``).
        op_family: the event's ``op_family`` (:mod:`traincast.trace.families`), used when no
            name rule matches (gemm/conv -> ``gemm``, attention -> ``attention``, comm ->
            ``comm``; anything else -> ``other``).
        kind: ``kernel``, ``memcpy`` or ``memset``.

    Returns the class name; see the module docstring for the rules and their rates.
    """
    low = name.lower().replace("fbgemm", "fbg_")  # FBGEMM's sparse ops are not GEMMs
    if kind == "memset" or low.startswith("memset"):
        return "device_copy"
    if kind == "memcpy" or low.startswith("memcpy"):
        if "ptop" in low or "peer" in low:
            return "comm"  # GPU-GPU over NVLink/xGMI: the network what-if's business
        if "dtod" in low or "device -> device" in low:
            return "device_copy"
        return "host_copy"
    for rx, cls in _NAME_RULES:
        if rx.search(low):
            return cls
    return _FAMILY_CLASS.get(op_family, "other")


_NAME_DTYPE: list[tuple[str, re.Pattern[str]]] = [
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8|_f8_")),
    ("bf16", re.compile(r"bf16|bfloat16|_bbs_|_bb_|_bss_")),
    ("tf32", re.compile(r"tf32|xf32|tensorop_s1688|tensorop_s16816|tensorop_s1684")),
    ("fp16", re.compile(r"fp16|f16f16|_f16|h16816|h1688|h884|hgemm|c10::half|__half|_hhs_|_hh_|"
                        r"_hss_|\bhalf")),
    ("fp32", re.compile(r"sgemm|f32f32_f32|_ss_|_sb_|s884gemm|simt_s")),
]


def _name_dtype(name: str) -> str:
    """The compute dtype a kernel name states, else ''."""
    low = name.lower()
    for dtype, rx in _NAME_DTYPE:
        if rx.search(low):
            return dtype
    return ""


# --------------------------------------------------------------------------- rates


@dataclass(frozen=True)
class _Rates:
    """Achievable rates of one GPU for the model (FLOP/s, B/s) and its floor (ns)."""

    gpu: Any
    t_min: float
    hbm: float
    host: float

    def compute(self, dtype: str) -> tuple[float, str]:
        """(achievable FLOP/s, the peak key used) for ``dtype`` on this GPU."""
        peaks = self.gpu.peak_tflops
        chain = {
            "fp8": ("fp8", "bf16", "fp16", "fp32_tensor", "fp32"),
            "bf16": ("bf16", "fp16", "fp32_tensor", "fp32"),
            "fp16": ("fp16", "bf16", "fp32_tensor", "fp32"),
            "tf32": ("tf32", "fp32_tensor", "fp32"),
            "fp32": ("fp32_tensor", "fp32"),
            "fp64": ("fp64_tensor", "fp64"),
        }.get(dtype, ("fp32_tensor", "fp32"))
        for key in chain:
            if key in peaks:
                return peaks[key] * 1e12 * float(self.gpu.gemm_efficiency), key
        raise ParameterError(f"GPU {self.gpu.name!r} has no peak for {dtype} (or a fallback) "
                             "in the hardware catalog")


def _rates(cat: Any, gpu: Any, what: str, need_host: bool) -> _Rates:
    """The model's rates for ``gpu``; ParameterError naming the GPU and the missing fields."""
    fields = ["min_kernel_ns", "hbm_efficiency", "gemm_efficiency"]
    if need_host:
        fields.append("host_link")
    missing = gpu.missing(fields)
    if missing:
        raise ParameterError(
            f"--what-if gpu={what}: GPU {gpu.name!r} lacks {', '.join(missing)} in the hardware "
            "catalog (needed by the per-kernel-class model of traincast.whatif.gpu); add them, "
            "each with a source, in a user catalog file")
    host = cat.link(gpu.host_link).gbps_per_direction * 1e9 if need_host else 1.0
    return _Rates(gpu, float(gpu.min_kernel_ns), gpu.hbm_gbps * 1e9 * float(gpu.hbm_efficiency),
                  host)


# --------------------------------------------------------------------------- model


@dataclass
class _Model:
    """Per device op: row, class, old and new duration; plus the two GPUs' rates."""

    rows: np.ndarray
    cls: np.ndarray
    old: np.ndarray
    new: np.ndarray
    ratio: np.ndarray  # work-part rate ratio R_old / R_new
    r_old: _Rates | None
    r_new: _Rates | None
    dtype: np.ndarray
    key_old: dict[str, str]
    key_new: dict[str, str]


def _model(ts: TraceSet, gpu_name: str, catalog: Any = None) -> _Model:
    cat = catalog if catalog is not None else load_catalog()
    new = cat.gpu(gpu_name)
    recorded = cat.match_first(p for info in ts.ranks.values() for p in info.device_properties)
    if recorded is None:
        names = sorted({d for i in ts.ranks.values() for d in i.devices})
        raise ParameterError(f"--what-if gpu={gpu_name}: the recorded device "
                             f"({', '.join(names) or 'a CPU'}) is not in the hardware catalog; "
                             "add it with a user catalog file")
    ev = ts.events
    kind_idx, kind_dict = A.dictionary_parts(ev.column("kind"))
    name_idx, name_dict = A.dictionary_parts(ev.column("name"))
    fam_idx, fam_dict = A.dictionary_parts(ev.column("op_family"))
    dev_codes = [i for i, k in enumerate(kind_dict) if k in GPU_WORK_KINDS]
    rows = np.flatnonzero(np.isin(kind_idx, dev_codes))
    dur = A.to_numpy(ev.column("dur"))[rows].astype(float)
    # class per distinct (name, family, kind), not per event
    triples = np.stack([name_idx[rows], fam_idx[rows], kind_idx[rows]], axis=1)
    uniq, inv = (np.unique(triples, axis=0, return_inverse=True) if rows.size
                 else (np.zeros((0, 3), np.int64), np.zeros(0, np.int64)))
    inv = np.asarray(inv).reshape(-1)
    u_cls = np.array([classify_kernel(name_dict[n], fam_dict[f], kind_dict[k])
                      for n, f, k in uniq], dtype=object)
    u_dt = np.array([_name_dtype(name_dict[n]) for n, _, _ in uniq], dtype=object)
    cls = u_cls[inv] if rows.size else np.zeros(0, dtype=object)
    dtype = u_dt[inv] if rows.size else np.zeros(0, dtype=object)
    need_host = bool(np.any(cls == "host_copy"))
    r_old = _rates(cat, recorded, gpu_name, need_host)
    r_new = _rates(cat, new, gpu_name, need_host)
    if recorded.name == new.name:
        return _Model(rows, cls, dur, dur.copy(), np.ones(rows.size), r_old, r_new, dtype, {}, {})

    # dtype of compute ops: the name's, else the launching op's, else the trace's
    comp = np.isin(cls, _COMPUTE)
    flops = np.zeros(rows.size)
    nbytes = np.zeros(rows.size)
    if comp.any():
        work = event_work(ts)
        if not work.empty:
            pos = np.searchsorted(rows, work["event"].to_numpy(np.int64))
            ok = (pos < rows.size) & (rows[np.minimum(pos, rows.size - 1)] ==
                                      work["event"].to_numpy(np.int64))
            pos, w = pos[ok], work[ok]
            known = w["known"].to_numpy(bool)
            flops[pos[known]] = w["flops"].to_numpy(float)[known]
            nbytes[pos[known]] = w["bytes"].to_numpy(float)[known]
            wd = w["dtype"].astype(str).to_numpy(object)
            fill = (dtype[pos] == "") & np.isin(wd, ["fp8", "bf16", "fp16", "tf32", "fp32",
                                                      "fp64"])
            dtype[pos[fill]] = wd[fill]
        default = dominant_dtype(ts)
        dtype[comp & (dtype == "")] = default if default in ("bf16", "fp16", "fp64") else "fp32"

    ratio = np.ones(rows.size)
    hbm = np.isin(cls, _HBM)
    ratio[hbm] = r_old.hbm / r_new.hbm
    ratio[cls == "host_copy"] = r_old.host / r_new.host
    key_old: dict[str, str] = {}
    key_new: dict[str, str] = {}
    for d in sorted(set(dtype[comp].tolist())):
        c_old, k_old = r_old.compute(d)
        c_new, k_new = r_new.compute(d)
        key_old[d], key_new[d] = k_old, k_new
        sel = comp & (dtype == d)
        ratio[sel] = c_old / c_new
        # known work: achievable roofline time on each GPU (new machine balance decides)
        kw = sel & (flops > 0) & (nbytes > 0)
        if kw.any():
            t_o = np.maximum(flops[kw] / c_old, nbytes[kw] / r_old.hbm)
            t_n = np.maximum(flops[kw] / c_new, nbytes[kw] / r_new.hbm)
            ratio[kw] = t_n / t_o
    floor = np.minimum(dur, r_old.t_min)
    # kernels: the floor scales with the GPUs' minimum kernel times; copies (copy engines,
    # DMA setup) keep their recorded floor: no per-GPU source gives a copy's fixed cost
    floor_ratio = np.where(np.isin(cls, ("host_copy", "device_copy")), 1.0,
                           r_new.t_min / r_old.t_min)
    new_dur = floor * floor_ratio + (dur - floor) * ratio
    keep = cls == "comm"
    new_dur[keep] = dur[keep]
    return _Model(rows, cls, dur, new_dur, ratio, r_old, r_new, dtype, key_old, key_new)


def gpu_breakdown(ts: TraceSet, gpu_name: str, *, catalog: Any = None) -> Any:
    """Per kernel class: what moving the device ops of ``ts`` to ``gpu_name`` does.

    Returns a pandas DataFrame with one row per class present (order of
    :data:`KERNEL_CLASSES`) and columns ``class``, ``count``, ``old_ns`` (recorded device time,
    summed over ops), ``new_ns`` (predicted), ``ratio`` (``new_ns / old_ns``; < 1 is faster)
    and ``rate`` (the rates used, old -> new). Sums are over op durations, not a step: overlap
    and host time are the simulator's business.

    Args:
        ts: a measured TraceSet whose recorded GPU is in the catalog.
        gpu_name: a catalog name or alias.
        catalog: a :class:`~traincast.costs.hardware.Catalog` (e.g. ``load_catalog(extra=...)``);
            the packaged one when None.

    Raises:
        ParameterError: unknown GPU, recorded GPU not in the catalog, or either GPU lacks a
            field of the model (``min_kernel_ns``, ``hbm_efficiency``, ``gemm_efficiency``,
            ``host_link`` when the trace has host copies); the message names the GPU and fields.
    """
    import pandas as pd

    m = _model(ts, gpu_name, catalog)
    out = []
    for c in KERNEL_CLASSES:
        sel = m.cls == c
        if not sel.any():
            continue
        old, new = float(m.old[sel].sum()), float(m.new[sel].sum())
        out.append({"class": c, "count": int(sel.sum()), "old_ns": old, "new_ns": new,
                    "ratio": new / old if old > 0 else 1.0, "rate": _rate_text(m, c)})
    return pd.DataFrame(out, columns=["class", "count", "old_ns", "new_ns", "ratio", "rate"])


def _rate_text(m: _Model, c: str) -> str:
    o, n = m.r_old, m.r_new
    if o is None or n is None:
        return ""
    if c == "comm":
        return "unchanged"
    if c in _HBM:
        return f"HBM {o.hbm / 1e9:.0f} -> {n.hbm / 1e9:.0f} GB/s achievable"
    if c == "host_copy":
        return f"host link {o.host / 1e9:.1f} -> {n.host / 1e9:.1f} GB/s"
    parts = []
    for d in sorted(set(m.dtype[m.cls == c].tolist())):
        if d in m.key_old:
            co, cn = o.compute(d)[0], n.compute(d)[0]
            parts.append(f"{d}: {m.key_old[d]} {co / 1e12:.0f} -> {m.key_new[d]} "
                         f"{cn / 1e12:.0f} TFLOP/s achievable")
    return "; ".join(parts) or "same GPU"


def gpu_factors(ts: TraceSet, gpu_name: str, compute: Any = None, *, catalog: Any = None
                ) -> tuple[np.ndarray, list[str]]:
    """float[n_events] time multipliers for running the device ops of ``ts`` on ``gpu_name``.

    Device ops (kernel, memcpy, memset) get ``t_new / t_old`` from the per-kernel-class model
    of the module docstring; every other event (host ops, annotations, collectives' host side)
    and communication kernels get 1.0; a zero-duration op keeps 1.0.

    Args:
        ts: the measured TraceSet.
        gpu_name: the target GPU, a catalog name or alias.
        compute: accepted for symmetry with the other what-ifs and ignored (see the module
            docstring for why the fitted compute model is no longer retargeted).
        catalog: the hardware catalog to use (default: the packaged one).

    Returns:
        (factors, notes): factors as float64[n_events]; notes, one line for the move and one per
        kernel class (count, old -> new ms, ratio, rates).

    Raises:
        ParameterError: unknown GPU name, the recorded GPU is not in the catalog, or either GPU
            lacks a field the model needs (the message names the GPU and the fields).
    """
    del compute
    m = _model(ts, gpu_name, catalog)
    f = np.ones(ts.events.num_rows)
    pos = m.old > 0
    f[m.rows[pos]] = m.new[pos] / m.old[pos]
    o, n = m.r_old, m.r_new
    head = (f"gpu {o.gpu.name} -> {n.gpu.name}: device ops modelled as t_min + work/rate per "
            f"kernel class (t_min {o.t_min:.0f} -> {n.t_min:.0f} ns, HBM "
            f"{o.hbm / 1e9:.0f} -> {n.hbm / 1e9:.0f} GB/s achievable)") if o and n else ""
    notes = [head]
    for c in KERNEL_CLASSES:
        sel = m.cls == c
        if not sel.any():
            continue
        old, new = m.old[sel].sum(), m.new[sel].sum()
        ratio = new / old if old > 0 else 1.0
        notes.append(f"  {c}: {int(sel.sum())} ops, {old / 1e6:.3f} -> {new / 1e6:.3f} ms "
                     f"(x{ratio:.2f}); {_rate_text(m, c)}")
    return f, notes


def dominant_dtype(ts: TraceSet) -> str:
    """The floating dtype most tensors of the recorded ops have (catalog key; fp32 default)."""
    if ts.shapes.num_rows == 0:
        return "fp32"
    counts: dict[str, int] = {}
    for text in ts.shapes.column("input_types").to_pylist():
        for k, v in _DTYPE.items():
            n = text.count(f'"{k}"') + text.count(f"Tensor({k})")
            if n:
                counts[v] = counts.get(v, 0) + n
    return max(counts, key=counts.get) if counts else "fp32"
