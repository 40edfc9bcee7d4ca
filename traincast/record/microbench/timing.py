"""The torch side of the microbenchmarks: the device, each family's op built for a point
(tensors created outside the timing), and the timer (CPU clock or CUDA events).

Cold measurements (:data:`COLD`, on the CPU): each sample is one call, timed alone, after
the last-level cache was flushed by writing a buffer twice its size (as PARAM's operator
benchmarks ``clear_cache`` before each timed call, facebookresearch/param
``train/compute/python/lib/pytorch/op_executor.py``), then the same op run once on tiny
tensors (``<direction>_code``): the flush also evicts the dispatcher's code and data, which a
training step keeps hot, so only the op's own tensors start cold. ``"flush+trim"`` also
returns the freed heap to the system first (glibc ``malloc_trim(0)``), so an op that
allocates a large fresh tensor pays its page faults, as the op does inside a training step.

torch is an optional dependency (``pip install 'traincast[record]'``), imported by
:func:`_import_torch` when a benchmark runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from traincast.errors import ParameterError, TraincastError
from traincast.record.overhead import cpu_name

#: devices ``run_bench`` accepts
DEVICES = ("cpu", "cuda", "rocm")

#: (family, direction) -> how the caches are prepared before each timed call on the CPU
COLD: dict[tuple[str, str], str] = {("update", "fwd"): "flush+code",
                                    ("sparse_update", "fwd"): "flush+code",
                                    ("embedding_bag", "fwd"): "flush+code",
                                    ("embedding_bag", "bwd"): "flush+code+trim>=32MiB"}

#: a fresh tensor at least this large is faulted in page by page in every training step:
#: glibc serves it with its own mmap (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit systems)
#: and returns it to the system when freed; smaller ones come from the heap, whose pages the
#: previous step's gradient left mapped (the dynamic mmap threshold rises to the largest
#: freed chunk up to that size)
TRIM_MIN_BYTES = 32 * 2**20


def cold_how(family: str, direction: str, sizes: dict[str, int]) -> str | None:
    """How a point is prepared before each timed call (None: timed warm, in a loop):
    ``"flush+code"`` or ``"flush+code+trim"`` (the embedding-bag backward whose dense
    gradient ``T·E·D`` float32 reaches :data:`TRIM_MIN_BYTES`)."""
    how = COLD.get((family, direction))
    if how is None or "+trim" not in how:
        return how
    grad = 4 * sizes.get("T", 1) * sizes.get("E", 1) * sizes.get("D", 1)
    return "flush+code+trim" if grad >= TRIM_MIN_BYTES else "flush+code"

#: last-level cache size assumed when the system does not say
_LLC_DEFAULT = 32 * 2**20


def llc_bytes() -> int:
    """The largest CPU cache of cpu0 (Linux sysfs), else 32 MiB."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in os.listdir(base):
            try:
                with open(os.path.join(base, d, "size")) as fh:
                    txt = fh.read().strip().upper()
            except OSError:
                continue
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(txt[-1:], 1)
            try:
                best = max(best, int(txt.rstrip("KMG")) * mult)
            except ValueError:
                continue
    except OSError:
        pass
    return best or _LLC_DEFAULT


def _malloc_trim() -> Callable[[], Any]:
    """``malloc_trim(0)`` of the C library, or a no-op where there is none (not glibc)."""
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        fn = None
    return (lambda: fn(0)) if fn is not None else (lambda: None)


def cold_prep(torch: Any, how: str) -> Callable[[], None]:
    """The callable run before each cold sample: ``"flush..."`` writes a float32 buffer of
    twice the last-level cache; ``"...+trim"`` first calls ``malloc_trim(0)``."""
    buf = torch.zeros(2 * llc_bytes() // 4)
    trim = _malloc_trim() if "+trim" in how else None

    def prep() -> None:
        if trim is not None:
            trim()
        buf.add_(1.0)
    return prep


class BenchSetupError(TraincastError):
    """The benchmark cannot run: torch missing, device absent, or the output folder holds
    measurements of another device/torch/thread count."""


def _import_torch() -> Any:
    try:
        import torch  # lazy: an optional dependency, ~1.7 s to import
    except ImportError:
        raise BenchSetupError("the microbenchmarks need torch: pip install "
                              "'traincast[record]'") from None
    return torch


def _resolve_device(torch: Any, device: str) -> tuple[Any, str]:
    if device not in DEVICES:
        raise ParameterError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "cpu":
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

    def samples(self, fn: Callable[[], Any], repeats: int,
                prep: Callable[[], Any] | None = None,
                code: Callable[[], Any] | None = None) -> tuple[list[float], int]:
        """``repeats`` per-call times (ns) of ``fn``, after the warm-up, and the calls per
        sample. With ``prep`` (CPU only): every sample is one call, timed alone after
        ``prep()`` and then ``code()`` (when given) ran untimed."""
        for _ in range(self.warmup):
            fn()
        if self.gpu:
            return self._gpu(fn, repeats)
        if prep is not None:
            clock = time.perf_counter_ns
            out = []
            for _ in range(repeats):
                prep()
                if code is not None:
                    code()
                t0 = clock()
                fn()
                out.append(float(clock() - t0))
            return out, 1
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
        ws, idxs = rand(8, d, grad=True), idx[:4] % 8
        offs = torch.tensor([0, 2], dtype=torch.int64, device=dev)
        fs = lambda: F.embedding_bag(idxs, ws, offs, mode="sum")  # noqa: E731
        return {"fwd": _nograd(torch, f), "bwd": _grad_fn(torch, f(), (w,)),
                "fwd_code": _nograd(torch, fs), "bwd_code": _grad_fn(torch, fs(), (ws,))}
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
    if family == "update":
        x, y = rand(z["n"]), rand(z["n"])
        xs, ys = rand(16), rand(16)
        return {"fwd": _nograd(torch, lambda: x.add_(y, alpha=-1e-3)),
                "fwd_code": _nograd(torch, lambda: xs.add_(ys, alpha=-1e-3))}
    if family == "sparse_update":
        e, nr, d = z["E"], z["N"], z["D"]
        w = rand(e, d)

        def sparse_grad(rows: int, n: int) -> Any:
            emb = torch.nn.EmbeddingBag(rows, d, mode="sum", sparse=True).to(dev)
            idx = torch.randint(0, rows, (n,), generator=gen).to(dev)
            emb(idx, torch.arange(0, n, 1, device=dev)).sum().backward()
            return emb.weight.grad  # uncoalesced, as SGD receives it

        g, ws, gs = sparse_grad(e, nr), rand(8, d), sparse_grad(8, 4)
        return {"fwd": _nograd(torch, lambda: w.add_(g, alpha=-1e-3)),
                "fwd_code": _nograd(torch, lambda: ws.add_(gs, alpha=-1e-3))}
    raise ParameterError(f"unknown kernel family {family!r}")  # pragma: no cover


def _nograd(torch: Any, f: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with torch.no_grad():
            return f()
    return run
