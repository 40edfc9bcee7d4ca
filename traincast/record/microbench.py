"""Kernel microbenchmarks: time op families over sampled sizes on the device torch sees.

:func:`run_bench` measures the families of :mod:`traincast.costs.kernel_families` (gemm,
conv2d, embedding_bag, elementwise, reduction, layer_norm, softmax, attention, movement, memcpy,
optimizer; their size parameters, shapes and work are documented there) and the host overheads
of :func:`measure_overheads`, into a folder:

- ``<family>.jsonl`` -- one JSON object per measured point, appended as soon as the point is
  done, so an interrupted run keeps every finished point. Fields: ``key`` (hash of family, op,
  dtype, sizes, device, torch version and threads), ``family``, ``op``, ``dtype``, ``dist``
  (embedding_bag), ``sizes`` (``{name: int}``), ``device`` (``cpu``/``cuda``/``rocm``),
  ``device_name``, ``torch``, ``threads``, ``ts`` (ISO time), and per direction (``fwd``,
  ``bwd``; absent or null when not measured) the statistics of the per-call time in ns:
  ``median_ns``, ``q1_ns``, ``q3_ns``, ``iqr_ns``, ``mad_ns``, ``min_ns``, ``mean_ns``,
  ``repeats`` (samples, all passes) and ``inner`` (calls per sample); ``passes``. A point
  that failed (e.g. out of memory) has ``error`` instead and is not retried.
- ``meta.json`` -- ``schema`` (``traincast.microbench/1``), ``device``, ``device_name``,
  ``torch``, ``threads``, ``python``, ``platform``, ``created``/``updated`` (ISO UTC),
  ``seed``, ``quick``, ``points`` (measured points per family).
- ``overheads.json`` -- see :func:`measure_overheads`.

**Timing.** Points are measured in chunks of 8; each of ``passes`` passes (3; quick 1) visits
every point of the chunk once (tensors built again, same data), so a burst of load from other
processes spreads over many points instead of spoiling one. Per visit and direction:
``warmup`` calls, then ``ceil(repeats / passes)`` samples; a sample times ``inner``
back-to-back calls (``inner`` chosen from a probe call so a sample lasts at least
``min_sample_ns``, 200 µs (quick 50 µs), at most 1000 calls) and records the mean per call.
The statistics are over all samples of all passes: the median is the point's typical time,
the min its least disturbed one, the IQR and the MAD (median absolute deviation) its spread,
the noise floor of the fitted models. On CPU the clock is :func:`time.perf_counter_ns` around
the calls, with ``torch.set_num_threads(threads)`` (1 by default: single-thread kernels are
far less noisy on a shared machine). On CUDA/ROCm (code path present, untested on this
CPU-only machine) CUDA events are recorded around the calls of a sample and synchronised.
Backward directions time ``torch.autograd.grad(out, inputs, grad_out, retain_graph=True)``.

**Sizes** are drawn log-uniformly (integers; a few sizes from a small list) within ranges that
run in milliseconds on one CPU thread, with a per-family cap on FLOPs and bytes, from a
``numpy`` generator seeded by ``seed`` and the family name: the same arguments give the same
points in the same order, which is what makes a re-run resume (points whose key is already in
the file are skipped). ``quick`` uses a small grid of small sizes (a few seconds per family).

**Not measured:** collectives. A process group cannot be created cheaply and meaningfully on
one CPU (gloo over loopback measures the loopback, not a network); the communication model
is calibrated from nccl-tests logs or traces instead (``traincast calibrate comm``).

torch is an optional dependency (``pip install 'traincast[record]'``); it is imported only
inside the functions that run it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from traincast.costs.kernel_families import FAMILIES, FamilySpec
from traincast.errors import ParameterError, TraincastError
from traincast.util.fileio import read_jsonl

__all__ = ["DEVICES", "SCHEMA", "BenchResult", "BenchSetupError", "family_points",
           "measure_overheads", "read_points", "run_bench"]

#: format tag of meta.json and of the point records
SCHEMA = "traincast.microbench/1"
#: format tag of overheads.json
OVERHEADS_SCHEMA = "traincast.overheads/1"
#: devices ``run_bench`` accepts
DEVICES = ("cpu", "cuda", "rocm")


class BenchSetupError(TraincastError):
    """The benchmark cannot run: torch missing, device absent, or the output folder holds
    measurements of another device/torch/thread count."""


Range = tuple[float, float] | list[int]


@dataclass(frozen=True)
class _Sampling:
    full: dict[str, Range]
    quick: dict[str, Range]
    max_flops: float = math.inf
    max_bytes: float = 64e6
    extra: Callable[[dict[str, int], str], bool] | None = None  # further constraint
    fixed: Callable[[dict[str, int], str], None] | None = None   # set sizes that depend on op
    points: int = 80  # default points per family (full)


def _gemm_fixed(z: dict[str, int], op: str) -> None:
    if op != "bmm":
        z["B"] = 1


def _embag_ok(z: dict[str, int], op: str) -> bool:
    return z["T"] * z["E"] * z["D"] * 4 <= 256e6 and z["B"] * z["T"] * z["L"] <= 2.5e5


def _opt_ok(z: dict[str, int], op: str) -> bool:
    return z["n"] >= 64 * z["tensors"]


_SAMPLING: dict[str, _Sampling] = {
    "gemm": _Sampling({"B": (2, 32), "M": (8, 1024), "N": (8, 1024), "K": (8, 1024)},
                      {"B": (2, 4), "M": (8, 64), "N": (8, 64), "K": (8, 64)},
                      max_flops=6e7, fixed=_gemm_fixed, points=800),
    "conv2d": _Sampling({"N": (1, 8), "C": (3, 64), "K": (8, 64), "H": (7, 56), "R": [1, 3, 5]},
                        {"N": (1, 2), "C": (3, 8), "K": (8, 16), "H": (7, 12), "R": [1, 3]},
                        max_flops=1e8, points=400),
    # memory-bound families reach past the last-level cache (32 MiB on the AMD EPYC the
    # benchmarks ran on): a training step's parameter updates and dense embedding gradients
    # stream from DRAM, and a model fitted only on cache-resident sizes under-predicts them
    "embedding_bag": _Sampling({"B": (32, 1024), "E": (1000, 500_000), "T": (1, 8),
                                "L": (1, 32), "D": (8, 128)},
                               {"B": (16, 64), "E": (100, 1000), "T": (1, 2), "L": (1, 8),
                                "D": (8, 32)},
                               extra=_embag_ok, max_bytes=256e6, points=400),
    "elementwise": _Sampling({"n": (100, 16_000_000)}, {"n": (100, 10_000)}, max_bytes=256e6,
                             points=240),
    "reduction": _Sampling({"rows": (1, 2048), "cols": (16, 16384)},
                           {"rows": (1, 32), "cols": (16, 256)}, max_bytes=8e6, points=200),
    "layer_norm": _Sampling({"rows": (1, 2048), "cols": (16, 8192)},
                            {"rows": (1, 32), "cols": (16, 256)}, max_bytes=8e6, points=200),
    "softmax": _Sampling({"rows": (1, 2048), "cols": (16, 8192)},
                         {"rows": (1, 32), "cols": (16, 256)}, max_bytes=8e6, points=200),
    "attention": _Sampling({"B": (1, 4), "H": (1, 8), "S": (16, 512), "Dh": [32, 64, 128]},
                           {"B": (1, 2), "H": (1, 2), "S": (16, 64), "Dh": [32, 64]},
                           max_flops=5e7, points=240),
    "movement": _Sampling({"rows": (1, 4096), "cols": (1, 4096)},
                          {"rows": (1, 64), "cols": (1, 64)}, max_bytes=16e6, points=300),
    "memcpy": _Sampling({"nbytes": (1000, 128_000_000)}, {"nbytes": (1000, 100_000)},
                        max_bytes=256e6, points=100),
    "optimizer": _Sampling({"n": (1000, 8_000_000), "tensors": (1, 16)},
                           {"n": (1000, 20_000), "tensors": (1, 4)}, extra=_opt_ok,
                           max_bytes=256e6, points=160),
}

_QUICK_POINTS = 6
#: points measured together: each pass visits every point of the chunk once, so a burst of
#: load from other processes spreads over many points instead of spoiling one
_CHUNK = 8


@dataclass
class BenchResult:
    """What :func:`run_bench` did: points measured and skipped (already in the folder) per
    family, the folder, and the wall time in seconds."""

    out_dir: Path
    measured: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    overheads: dict[str, Any] | None = None


# ---------------------------------------------------------------------------- point sampling

def _ops_for(spec: FamilySpec, device: str) -> tuple[str, ...]:
    ops = spec.categorical.get("op", ("",))
    if spec.name == "memcpy":
        return ("copy",) if device == "cpu" else ("copy", "h2d", "d2h")
    return ops


def family_points(name: str, *, quick: bool = False, n: int | None = None, seed: int = 0,
                  device: str = "cpu") -> list[dict[str, Any]]:
    """The points of family ``name`` in measuring order: dicts with ``op``, ``dtype``,
    ``dist`` (each None where the family has no such parameter) and ``sizes``. Deterministic
    for given arguments (a longer ``n`` extends a shorter one)."""
    spec = FAMILIES[name]
    smp = _SAMPLING[name]
    if n is None:
        n = _QUICK_POINTS if quick else smp.points
    ranges = smp.quick if quick else smp.full
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    ops = _ops_for(spec, device)
    dtypes = spec.categorical.get("dtype", ("",))
    dists = spec.categorical.get("dist", ("",))
    combos = [(o, d, s) for o in ops for d in dtypes for s in dists]
    out = []
    for i in range(n):
        op, dtype, dist = combos[i % len(combos)]
        for _ in range(1000):
            z: dict[str, int] = {}
            for s in spec.sizes:
                r = ranges[s]
                if isinstance(r, list):
                    z[s] = int(r[int(rng.integers(len(r)))])
                else:
                    lo, hi = math.log(r[0]), math.log(r[1])
                    z[s] = int(round(math.exp(rng.uniform(lo, hi))))
            if smp.fixed is not None:
                smp.fixed(z, op)
            cols = {k: np.array([float(v)]) for k, v in z.items()}
            cats = {"op": np.array([op or "x"]), "dtype": np.array([dtype or "float32"]),
                    "dist": np.array([dist])}
            flops, nbytes = spec.work(cols, cats)
            if (float(np.asarray(flops).reshape(-1)[0]) <= smp.max_flops
                    and float(np.asarray(nbytes).reshape(-1)[0]) <= smp.max_bytes
                    and (smp.extra is None or smp.extra(z, op))):
                break
        out.append({"index": i, "op": op or None, "dtype": dtype or None, "dist": dist or None,
                    "sizes": z})
    return out


def _key(family: str, point: dict[str, Any], device: str, torch_version: str,
         threads: int) -> str:
    blob = json.dumps({"family": family, "op": point["op"], "dtype": point["dtype"],
                       "dist": point["dist"], "sizes": point["sizes"], "device": device,
                       "torch": torch_version, "threads": threads}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


# ---------------------------------------------------------------------------- file handling

def read_points(path: str | Path) -> list[dict[str, Any]]:
    """The records of one ``<family>.jsonl`` (a torn last line, from an interrupted run, is
    ignored; :func:`traincast.util.fileio.read_jsonl`)."""
    return read_jsonl(path)


def _repair_tail(path: Path) -> None:
    """Cut a torn last line (no newline) so appending starts on a fresh line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as fh:
            fh.truncate(cut)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, obj: Any) -> None:
    from traincast.util.fileio import atomic_write

    atomic_write(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


# ---------------------------------------------------------------------------- torch side

def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise BenchSetupError("the microbenchmarks need torch: pip install "
                              "'traincast[record]'") from None
    return torch


def _resolve_device(torch: Any, device: str) -> tuple[Any, str]:
    if device not in DEVICES:
        raise ParameterError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "cpu":
        from traincast.record.overhead import cpu_name

        return torch.device("cpu"), cpu_name()
    hip = getattr(torch.version, "hip", None)
    if not torch.cuda.is_available() or (device == "rocm") != bool(hip):
        raise BenchSetupError(f"--device {device}: torch {torch.__version__} sees no "
                              f"{'ROCm' if device == 'rocm' else 'CUDA'} device")
    return torch.device("cuda"), torch.cuda.get_device_name(0)


def _stats(samples: list[float], inner: int) -> dict[str, float]:
    a = np.asarray(samples, dtype=float)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_ns": float(med), "q1_ns": float(q1), "q3_ns": float(q3),
            "iqr_ns": float(q3 - q1), "mad_ns": float(np.median(np.abs(a - med))),
            "min_ns": float(a.min()), "mean_ns": float(a.mean()), "repeats": len(a),
            "inner": inner}


class _Timer:
    """Times a callable on the CPU clock or with CUDA events."""

    def __init__(self, torch: Any, gpu: bool, warmup: int, repeats: int,
                 min_sample_ns: float) -> None:
        self.torch, self.gpu = torch, gpu
        self.warmup, self.repeats, self.min_sample_ns = warmup, repeats, min_sample_ns

    def __call__(self, fn: Callable[[], Any]) -> dict[str, float]:
        samples, inner = self.samples(fn, self.repeats)
        return _stats(samples, inner)

    def samples(self, fn: Callable[[], Any], repeats: int) -> tuple[list[float], int]:
        """``repeats`` per-call times (ns) of ``fn``, after the warm-up, and the calls per
        sample."""
        for _ in range(self.warmup):
            fn()
        if self.gpu:
            return self._gpu(fn, repeats)
        t0 = time.perf_counter_ns()
        fn()
        est = time.perf_counter_ns() - t0
        inner = max(1, min(1000, math.ceil(self.min_sample_ns / max(est, 1))))
        samples = []
        clock = time.perf_counter_ns
        for _ in range(repeats):
            t0 = clock()
            for _ in range(inner):
                fn()
            samples.append((clock() - t0) / inner)
        return samples, inner

    def _gpu(self, fn: Callable[[], Any], repeats: int
             ) -> tuple[list[float], int]:  # pragma: no cover - no GPU here
        cuda = self.torch.cuda
        cuda.synchronize()
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        est = start.elapsed_time(end) * 1e6
        inner = max(1, min(1000, math.ceil(self.min_sample_ns / max(est, 1.0))))
        samples = []
        for _ in range(repeats):
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e6 / inner)
        return samples, inner


def _grad_fn(torch: Any, out: Any, inputs: Iterable[Any]) -> Callable[[], Any]:
    inputs = tuple(inputs)
    g = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, g, retain_graph=True)


def _build(torch: Any, family: str, point: dict[str, Any], dev: Any, seed: int
           ) -> dict[str, Callable[[], Any]]:
    """Callables per direction for one point (tensors created here, outside the timing)."""
    F = torch.nn.functional
    z, op = point["sizes"], point["op"]
    dt = getattr(torch, point["dtype"]) if point["dtype"] else torch.float32
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int, grad: bool = False) -> Any:
        t = torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=dev, dtype=dt)
        return t.requires_grad_(grad)

    if family == "gemm":
        b, m, n, k = z["B"], z["M"], z["N"], z["K"]
        if op == "bmm":
            a, w = rand(b, m, k, grad=True), rand(b, k, n, grad=True)
            f = lambda: torch.bmm(a, w)  # noqa: E731
            ins = (a, w)
        elif op == "linear":
            a, w, bias = rand(m, k, grad=True), rand(n, k, grad=True), rand(n)
            f = lambda: F.linear(a, w, bias)  # noqa: E731
            ins = (a, w)
        else:
            a, w, bias = rand(m, k, grad=True), rand(k, n, grad=True), rand(n)
            f = (lambda: torch.addmm(bias, a, w)) if op == "addmm" else (lambda: torch.mm(a, w))
            ins = (a, w)
        return {"fwd": _nograd(torch, f), "bwd": _grad_fn(torch, f(), ins)}
    if family == "conv2d":
        x, w = rand(z["N"], z["C"], z["H"], z["H"], grad=True), rand(z["K"], z["C"], z["R"],
                                                                      z["R"], grad=True)
        pad = z["R"] // 2
        f = lambda: F.conv2d(x, w, padding=pad)  # noqa: E731
        return {"fwd": _nograd(torch, f), "bwd": _grad_fn(torch, f(), (x, w))}
    if family == "embedding_bag":
        b, e, t, ll, d = z["B"], z["E"], z["T"], z["L"], z["D"]
        rng = np.random.default_rng(seed)
        nidx = b * t * ll
        if point["dist"] == "zipf":
            p = 1.0 / np.arange(1, e + 1) ** 1.05
            ranks = rng.choice(e, size=nidx, p=p / p.sum())
            rows = rng.permutation(e)[ranks]
        else:
            rows = rng.integers(0, e, size=nidx)
        table = (np.arange(nidx) // ll) % t  # lookup k is in bag k // L, of table bag % T
        idx = torch.from_numpy((rows + table * e).astype(np.int64)).to(dev)
        offsets = torch.arange(0, nidx, ll, dtype=torch.int64, device=dev)
        w = rand(t * e, d, grad=True)
        f = lambda: F.embedding_bag(idx, w, offsets, mode="sum")  # noqa: E731
        return {"fwd": _nograd(torch, f), "bwd": _grad_fn(torch, f(), (w,))}
    if family == "elementwise":
        x, y = rand(z["n"]), rand(z["n"])
        fn = {"add": lambda: torch.add(x, y), "mul": lambda: torch.mul(x, y),
              "relu": lambda: torch.relu(x), "gelu": lambda: F.gelu(x)}[op]
        return {"fwd": _nograd(torch, fn)}
    if family == "reduction":
        x = rand(z["rows"], z["cols"])
        fn = (lambda: x.sum(-1)) if op == "sum" else (lambda: x.mean(-1))
        return {"fwd": _nograd(torch, fn)}
    if family in ("layer_norm", "softmax"):
        x = rand(z["rows"], z["cols"], grad=True)
        if family == "layer_norm":
            w, bias = rand(z["cols"], grad=True), rand(z["cols"], grad=True)
            f = lambda: F.layer_norm(x, (z["cols"],), w, bias)  # noqa: E731
            ins = (x, w, bias)
        else:
            f = lambda: torch.softmax(x, -1)  # noqa: E731
            ins = (x,)
        return {"fwd": _nograd(torch, f), "bwd": _grad_fn(torch, f(), ins)}
    if family == "attention":
        shape = (z["B"], z["H"], z["S"], z["Dh"])
        q, k, v = rand(*shape, grad=True), rand(*shape, grad=True), rand(*shape, grad=True)
        causal = op == "sdpa_causal"
        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        return {"fwd": _nograd(torch, f), "bwd": _grad_fn(torch, f(), (q, k, v))}
    if family == "movement":
        r, c = z["rows"], z["cols"]
        if op == "cat":
            a, b2 = rand(r, c), rand(r, c)
            fn = lambda: torch.cat((a, b2), 0)  # noqa: E731
        elif op == "transpose":
            a = rand(r, c)
            fn = lambda: a.t().contiguous()  # noqa: E731
        else:
            a = rand(2 * r, c)
            sel = torch.randint(0, 2 * r, (r,), generator=gen).to(dev)
            fn = lambda: torch.index_select(a, 0, sel)  # noqa: E731
        return {"fwd": _nograd(torch, fn)}
    if family == "memcpy":
        n = z["nbytes"]
        if op == "copy":
            src = torch.empty(n, dtype=torch.uint8, device=dev)
            dst = torch.empty(n, dtype=torch.uint8, device=dev)
        elif op == "h2d":  # pragma: no cover - GPU only
            src = torch.empty(n, dtype=torch.uint8).pin_memory()
            dst = torch.empty(n, dtype=torch.uint8, device=dev)
        else:  # pragma: no cover - GPU only
            src = torch.empty(n, dtype=torch.uint8, device=dev)
            dst = torch.empty(n, dtype=torch.uint8).pin_memory()
        src.random_(0, 255, generator=gen) if src.device.type == "cpu" else src.random_(0, 255)
        return {"fwd": lambda: dst.copy_(src, non_blocking=op != "copy")}
    if family == "optimizer":
        n, nt = z["n"], z["tensors"]
        sizes = [n // nt + (1 if i < n % nt else 0) for i in range(nt)]
        params = [torch.nn.Parameter(rand(s)) for s in sizes]
        for p in params:
            p.grad = rand(p.numel())
        opt = (torch.optim.SGD(params, lr=1e-3) if op == "sgd"
               else torch.optim.Adam(params, lr=1e-3))
        return {"fwd": opt.step}
    raise ParameterError(f"unknown kernel family {family!r}")  # pragma: no cover


def _nograd(torch: Any, f: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with torch.no_grad():
            return f()
    return run


# ---------------------------------------------------------------------------- overheads

def _loop_ns(fn: Callable[[], Any] | None, n: int, repeats: int) -> list[float]:
    out = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        if fn is None:
            t0 = clock()
            for _ in range(n):
                pass
            out.append((clock() - t0) / n)
        else:
            t0 = clock()
            for _ in range(n):
                fn()
            out.append((clock() - t0) / n)
    return out


def _summ(values: Iterable[float], method: str) -> dict[str, Any]:
    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        return {"median_ns": None, "iqr_ns": None, "n": 0, "method": method}
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_ns": float(med), "iqr_ns": float(q3 - q1), "n": int(a.size),
            "method": method}


def measure_overheads(device: str = "cpu", *, threads: int = 1, iterations: int = 2000,
                      repeats: int = 11) -> dict[str, Any]:
    """Host overheads in ns, in the terms of Lin et al., "Towards Universal Performance
    Modeling for Machine Learning Training on Multi-GPU Platforms" (arXiv:2404.12674, Sec. 4,
    overheads T1-T5), plus un-profiled loop timings.

    Returns the ``overheads.json`` object: ``schema`` (``traincast.overheads/1``), ``device``,
    ``device_name``, ``torch``, ``threads``, ``date``, ``units`` (``"ns"``) and

    - ``python_loop_iter`` -- one iteration of an empty Python ``for`` loop (un-profiled).
    - ``python_call`` -- calling a no-op Python function (loop time subtracted).
    - ``dispatch_tiny_op`` -- ``torch.add`` of two 1-element tensors on ``device``, per call,
      loop time subtracted (un-profiled): Python binding + dispatcher + the op (+ on a GPU the
      kernel launch, asynchronous).
    - ``T1_between_ops`` .. ``T5_between_launches`` -- from a torch-profiler trace of a loop of
      tiny ops (add, mul, relu, sum, layer_norm, softmax on 1x8 tensors): T1 the gap between
      consecutive top-level ``aten::`` ops on the thread; T2 op start to its first launch
      (``cudaLaunchKernel``/``hipLaunchKernel``); T3 end of its last launch to op end; T4 a
      launch call's duration; T5 the gap between consecutive launches inside one op. On CPU
      T2-T5 are null (no launches) with a ``reason``. Profiled values include the profiler's
      own overhead (as in the paper, whose numbers come from profiled traces).
    - ``cpu_op_tiny`` -- the profiled duration of the tiny top-level ops.

    Each entry: ``median_ns``, ``iqr_ns``, ``n`` (samples), ``method``; null ``median_ns``
    when not measurable.
    """
    torch = _import_torch()
    dev, dev_name = _resolve_device(torch, device)
    torch.set_num_threads(threads)
    gpu = dev.type == "cuda"
    out: dict[str, Any] = {"schema": OVERHEADS_SCHEMA, "device": device, "device_name": dev_name,
                           "torch": torch.__version__, "threads": threads, "date": _now(),
                           "units": "ns",
                           "source": "Lin et al., arXiv:2404.12674, host overheads T1-T5"}
    empty = _loop_ns(None, iterations, repeats)
    out["python_loop_iter"] = _summ(empty, f"empty for-loop, {iterations} iterations x "
                                           f"{repeats} repeats")
    base = statistics.median(empty)

    def noop() -> None:
        return None

    out["python_call"] = _summ([v - base for v in _loop_ns(noop, iterations, repeats)],
                               "no-op Python call in a loop, minus the empty loop")
    a = torch.ones(1, device=dev)
    b = torch.ones(1, device=dev)
    add = torch.add
    with torch.no_grad():
        for _ in range(100):
            add(a, b)
        times = _loop_ns(lambda: add(a, b), iterations, repeats)
        if gpu:  # pragma: no cover
            torch.cuda.synchronize()
    out["dispatch_tiny_op"] = _summ([v - base for v in times],
                                    "torch.add on 1-element tensors in a loop, minus the "
                                    "empty loop")

    from torch.profiler import ProfilerActivity, profile

    F = torch.nn.functional
    x = torch.randn(1, 8, device=dev)
    ops = [lambda: torch.add(x, x), lambda: torch.mul(x, x), lambda: torch.relu(x),
           lambda: x.sum(), lambda: F.layer_norm(x, (8,)), lambda: torch.softmax(x, -1)]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch.no_grad():
        for f in ops:
            f()
        with profile(activities=acts) as prof:
            for _ in range(max(20, iterations // 40)):
                for f in ops:
                    f()
            if gpu:  # pragma: no cover
                torch.cuda.synchronize()
    evs = prof.profiler.kineto_results.events()
    cpu_ops, launches = [], []
    for e in evs:
        name = e.name()
        if "LaunchKernel" in name:
            launches.append((e.start_ns(), e.end_ns()))
        elif name.startswith("aten::") and str(e.device_type()).endswith("CPU"):
            cpu_ops.append((e.start_ns(), e.end_ns(), e.start_thread_id()))
    cpu_ops.sort()
    top: list[tuple[int, int]] = []
    for s, e, _tid in cpu_ops:  # one thread runs the loop: nesting = containment in time
        if top and s < top[-1][1]:
            continue
        top.append((s, e))
    out["T1_between_ops"] = _summ([s2 - e1 for (_, e1), (s2, _) in pairwise(top)],
                                  "profiled gap between consecutive top-level aten ops")
    out["cpu_op_tiny"] = _summ([e - s for s, e in top], "profiled duration of tiny "
                                                        "top-level aten ops")
    if not launches:
        for k in ("T2_op_to_first_launch", "T3_last_launch_to_op_end", "T4_launch",
                  "T5_between_launches"):
            out[k] = {"median_ns": None, "iqr_ns": None, "n": 0,
                      "method": "profiled launches",
                      "reason": "no kernel launches on this device (CPU)"}
        return out
    launches.sort()  # pragma: no cover - GPU only below
    t2, t3, t5 = [], [], []
    li = 0
    for s, e in top:
        while li < len(launches) and launches[li][0] < s:
            li += 1
        inside = []
        j = li
        while j < len(launches) and launches[j][1] <= e:
            inside.append(launches[j])
            j += 1
        if inside:
            t2.append(inside[0][0] - s)
            t3.append(e - inside[-1][1])
            t5 += [b0 - a1 for (_, a1), (b0, _) in pairwise(inside)]
    out["T2_op_to_first_launch"] = _summ(t2, "profiled op start to its first launch")
    out["T3_last_launch_to_op_end"] = _summ(t3, "profiled end of last launch to op end")
    out["T4_launch"] = _summ([e - s for s, e in launches], "profiled launch call duration")
    out["T5_between_launches"] = _summ(t5, "profiled gap between launches inside one op")
    return out


# ---------------------------------------------------------------------------- runner

def run_bench(out_dir: str | Path, *, device: str = "cpu",
              families: Iterable[str] | None = None, quick: bool = False,
              repeats: int | None = None, warmup: int | None = None, threads: int = 1,
              points: int | None = None, seed: int = 0, max_seconds: float | None = None,
              min_sample_ns: float | None = None, passes: int | None = None,
              overheads: bool = True,
              progress: bool = True) -> BenchResult:
    """Measure ``families`` (all by default) on ``device`` into ``out_dir`` (created).

    ``points`` per family (default: the family's full count, 6 with ``quick``);
    ``repeats`` samples per point (15, quick 5), split over ``passes`` visits (3, quick 1),
    each after ``warmup`` calls (3, quick 1);
    ``max_seconds`` bounds the time spent per family (the rest is measured by a later run);
    ``threads`` for ``torch.set_num_threads``. Resumes: points already in ``out_dir`` are
    skipped. See the module docstring for the files.

    Raises:
        ParameterError: unknown family or device, bad counts.
        BenchSetupError: no torch, device absent, or ``out_dir`` holds another setup's data.
    """
    names = list(FAMILIES) if families is None else list(families)
    bad = [f for f in names if f not in FAMILIES]
    if bad:
        raise ParameterError(f"unknown kernel family {bad[0]!r}; known: {', '.join(FAMILIES)}")
    if device not in DEVICES:
        raise ParameterError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    repeats = repeats if repeats is not None else (5 if quick else 15)
    warmup = warmup if warmup is not None else (1 if quick else 3)
    passes = passes if passes is not None else (1 if quick else 3)
    if repeats < 1 or warmup < 0 or threads < 1 or passes < 1 or \
            (points is not None and points < 1):
        raise ParameterError("--repeats, --threads, --passes and --points must be >= 1, "
                             "--warmup >= 0")
    if min_sample_ns is None:
        min_sample_ns = 50_000 if quick else 200_000
    torch = _import_torch()
    dev, dev_name = _resolve_device(torch, device)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ParameterError(f"--out {out}: cannot create folder: {exc.strerror}") from None
    meta_path = out / "meta.json"
    meta: dict[str, Any] = {}
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        for k, v in (("device", device), ("torch", torch.__version__), ("threads", threads)):
            if k in meta and meta[k] != v:
                raise BenchSetupError(f"{out} holds measurements with {k}={meta[k]}, this run "
                                      f"has {k}={v}: use another --out folder")
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    meta.update({"schema": SCHEMA, "device": device, "device_name": dev_name,
                 "torch": torch.__version__, "threads": threads,
                 "python": sys.version.split()[0], "platform": platform.platform(),
                 "updated": _now(), "seed": seed, "quick": quick, "pid": os.getpid()})
    meta.setdefault("created", meta["updated"])
    _write_json(meta_path, meta)

    res = BenchResult(out)
    t_start = time.perf_counter()
    todo: list[tuple[str, list[tuple[dict[str, Any], str]]]] = []
    for name in names:
        done = {r.get("key") for r in read_points(out / f"{name}.jsonl")}
        pts = family_points(name, quick=quick, n=points, seed=seed, device=device)
        keyed = [(p, _key(name, p, device, torch.__version__, threads)) for p in pts]
        pending = [(p, k) for p, k in keyed if k not in done]
        res.skipped[name] = len(keyed) - len(pending)
        res.measured[name] = 0
        res.failed[name] = 0
        todo.append((name, pending))
    timer = _Timer(torch, dev.type == "cuda", warmup, repeats, min_sample_ns)
    per_pass = math.ceil(repeats / passes)
    total = sum(len(p) for _, p in todo)
    bar = _progress(progress, total)
    try:
        with bar:
            task = bar.add_task("microbench", total=total)
            for name, pending in todo:
                path = out / f"{name}.jsonl"
                _repair_tail(path)
                t_fam = time.perf_counter()
                directions = FAMILIES[name].directions
                for c0 in range(0, len(pending), _CHUNK):
                    chunk = pending[c0:c0 + _CHUNK]
                    if max_seconds is not None and time.perf_counter() - t_fam > max_seconds:
                        bar.update(task, advance=len(pending) - c0)
                        break
                    got: dict[str, dict[str, list[float]]] = {k: {} for _, k in chunk}
                    inner: dict[str, dict[str, int]] = {k: {} for _, k in chunk}
                    errors: dict[str, str] = {}
                    for _ in range(passes):
                        for p, key in chunk:
                            bar.update(task, description=f"{name} {p['op'] or ''}".strip())
                            if key in errors:
                                continue
                            try:
                                fns = _build(torch, name, p, dev, seed + p["index"])
                                for direction in directions:
                                    if direction in fns:
                                        smp, inn = timer.samples(fns[direction], per_pass)
                                        got[key].setdefault(direction, []).extend(smp)
                                        inner[key][direction] = inn
                                del fns
                            except (RuntimeError, MemoryError) as exc:
                                errors[key] = (str(exc).splitlines() or [type(exc).__name__]
                                               )[0][:300]
                            bar.update(task, advance=1 / passes)
                    with open(path, "a") as fh:
                        for p, key in chunk:
                            rec = {"key": key, "family": name, "op": p["op"],
                                   "dtype": p["dtype"], "dist": p["dist"], "sizes": p["sizes"],
                                   "device": device, "device_name": dev_name,
                                   "torch": torch.__version__, "threads": threads,
                                   "passes": passes, "ts": _now()}
                            if key in errors:
                                rec["error"] = errors[key]
                                res.failed[name] += 1
                            else:
                                for direction in directions:
                                    smp = got[key].get(direction)
                                    rec[direction] = (_stats(smp, inner[key][direction])
                                                      if smp else None)
                                res.measured[name] += 1
                            fh.write(json.dumps(rec, sort_keys=True) + "\n")
        if overheads:
            ov_path = out / "overheads.json"
            ov = None
            if ov_path.exists():
                try:
                    ov = json.loads(ov_path.read_text())
                except ValueError:
                    ov = None
            if not (isinstance(ov, dict) and ov.get("schema") == OVERHEADS_SCHEMA
                    and ov.get("torch") == torch.__version__ and ov.get("threads") == threads):
                ov = measure_overheads(device, threads=threads,
                                       iterations=500 if quick else 5000,
                                       repeats=5 if quick else 15)
                _write_json(ov_path, ov)
            res.overheads = ov
    finally:
        torch.set_num_threads(prev_threads)
    meta["points"] = {n: sum(1 for r in read_points(out / f"{n}.jsonl") if "error" not in r)
                      for n in sorted(set(names) | set(meta.get("points", {})))}
    meta["updated"] = _now()
    meta.pop("pid", None)
    _write_json(meta_path, meta)
    res.seconds = time.perf_counter() - t_start
    return res


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *a: Any, **k: Any) -> int:
        return 0

    def update(self, *a: Any, **k: Any) -> None:
        return None


def _progress(enabled: bool, total: int) -> Any:
    if not enabled or total == 0:
        return _NoBar()
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=False)
