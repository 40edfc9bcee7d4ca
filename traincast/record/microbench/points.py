"""The points a family is measured at: sizes drawn log-uniformly within per-family ranges and
caps (:func:`family_points`), and the key that identifies a measured point in a folder."""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from traincast.costs.kernel_families import FAMILIES, FamilySpec
from traincast.record.microbench.timing import COLD

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
    # tables up to 1 GiB in all: a training step's dense gradient of a table that size is
    # zeroed, faulted in and streamed past the last-level cache
    return z["T"] * z["E"] * z["D"] * 4 <= 2**30 and z["B"] * z["T"] * z["L"] <= 2.5e5


def _sparse_ok(z: dict[str, int], op: str) -> bool:
    return z["E"] * z["D"] * 4 <= 2**30


def _opt_ok(z: dict[str, int], op: str) -> bool:
    return z["n"] >= 64 * z["tensors"]


_SAMPLING: dict[str, _Sampling] = {
    "gemm": _Sampling({"B": (2, 32), "M": (8, 1024), "N": (8, 1024), "K": (8, 1024)},
                      {"B": (2, 4), "M": (8, 64), "N": (8, 64), "K": (8, 64)},
                      max_flops=6e7, fixed=_gemm_fixed, points=800),
    "conv2d": _Sampling({"N": (1, 8), "C": (3, 64), "K": (8, 64), "H": (7, 56), "R": [1, 3, 5]},
                        {"N": (1, 2), "C": (3, 8), "K": (8, 16), "H": (7, 12), "R": [1, 3]},
                        max_flops=1e8, points=400),
    # memory-bound families reach past the last-level cache (max_bytes 256 MB), as a training
    # step's parameter updates and dense embedding gradients do
    "embedding_bag": _Sampling({"B": (32, 1024), "E": (1000, 4_000_000), "T": (1, 8),
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
    "attention": _Sampling({"B": (1, 8), "H": (1, 8), "S": (16, 512),
                            "Dh": [8, 16, 32, 64, 128]},
                           {"B": (1, 2), "H": (1, 2), "S": (16, 64), "Dh": [32, 64]},
                           max_flops=5e7, points=240),
    "movement": _Sampling({"rows": (1, 4096), "cols": (1, 4096)},
                          {"rows": (1, 64), "cols": (1, 64)}, max_bytes=16e6, points=300),
    "memcpy": _Sampling({"nbytes": (1000, 128_000_000)}, {"nbytes": (1000, 100_000)},
                        max_bytes=256e6, points=100),
    "optimizer": _Sampling({"n": (1000, 8_000_000), "tensors": (1, 16)},
                           {"n": (1000, 20_000), "tensors": (1, 4)}, extra=_opt_ok,
                           max_bytes=256e6, points=160),
    # one parameter tensor updated in place: 64 elements (a bias) to 2^28 (a 1 GiB table)
    "update": _Sampling({"n": (64, 2**28)}, {"n": (64, 10_000)}, max_bytes=3.3e9, points=80),
    "sparse_update": _Sampling({"E": (1000, 4_000_000), "N": (16, 250_000), "D": (8, 128)},
                               {"E": (100, 1000), "N": (16, 256), "D": (8, 32)},
                               extra=_sparse_ok, max_bytes=1e9, points=60),
}

_QUICK_POINTS = 6


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
    doc = {"family": family, "op": point["op"], "dtype": point["dtype"],
           "dist": point["dist"], "sizes": point["sizes"], "device": device,
           "torch": torch_version, "threads": threads}
    cold = {d: how for (f, d), how in COLD.items() if f == family and device == "cpu"}
    if cold:  # measured cold: not the same point as a warm measurement of earlier versions
        doc["cold"] = cold
    blob = json.dumps(doc, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]
