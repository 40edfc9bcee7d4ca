"""Op families of the kernel microbenchmarks and fitted kernel models: their size parameters,
categorical parameters, directions, and derived work (FLOPs, bytes moved).

This is the one definition shared by the benchmark runner (:mod:`traincast.record.microbench`,
which runs torch) and the fitted models (:mod:`traincast.costs.kernel_models`, numpy only).
Sizes are element counts (not bytes) unless the name says otherwise; times are ns.

=============  =====================  ==========================================  ==========
family         sizes                  categorical (first value = default)         directions
=============  =====================  ==========================================  ==========
gemm           B, M, N, K             op: mm, addmm, bmm, linear;                 fwd, bwd
                                      dtype: float32, bfloat16
conv2d         N, C, K, H, R          dtype: float32                              fwd, bwd
embedding_bag  B, E, T, L, D          dist: uniform, zipf; dtype: float32         fwd, bwd
elementwise    n                      op: add, mul, relu, gelu; dtype             fwd
reduction      rows, cols             op: sum, mean; dtype                        fwd
layer_norm     rows, cols             dtype                                       fwd, bwd
softmax        rows, cols             dtype                                       fwd, bwd
attention      B, H, S, Dh            op: sdpa, sdpa_causal; dtype                fwd, bwd
movement       rows, cols             op: cat, transpose, index_select; dtype     fwd
memcpy         nbytes                 op: copy, h2d, d2h                          fwd
optimizer      n, tensors             op: sgd, adam; dtype: float32               fwd
update         n                      dtype: float32                              fwd
sparse_update  E, N, D                dtype: float32                              fwd
=============  =====================  ==========================================  ==========

Shapes (``dtype`` is float32 or bfloat16 where listed; ``s`` its size in bytes):

* **gemm** -- ``mm``/``addmm``: ``(M,K) @ (K,N)`` (+ bias ``N``); ``linear``: input ``(M,K)``,
  weight ``(N,K)``, bias ``N``; ``bmm``: ``(B,M,K) @ (B,K,N)``. ``B`` is 1 except for bmm.
  FLOPs ``2·B·M·N·K``; bytes ``s·B·(M·K + K·N + M·N)``. Backward: the gradients of both
  operands (two GEMMs, twice the FLOPs).
* **conv2d** -- input ``(N,C,H,H)``, weight ``(K,C,R,R)``, stride 1, padding ``R//2`` (output
  ``(N,K,H,H)``). FLOPs ``2·N·K·C·R²·H²``; bytes ``s·(N·C·H² + K·C·R² + N·K·H²)``. Backward:
  gradients of input and weight.
* **embedding_bag** -- ``T`` tables of ``E`` rows of width ``D`` stored as one ``(T·E, D)``
  weight (as fbgemm's TBE does), ``B·T`` bags of ``L`` lookups each (pooling factor), ``sum``
  pooling, int64 indices drawn uniform or Zipf (exponent 1.05, popularity ranks shuffled) in
  each table's rows. FLOPs ``B·T·L·D``; bytes ``s·B·T·D·(L+1) + 8·B·T·L``. Backward: the dense
  weight gradient (``sparse=False``), which also zeroes and writes the whole ``(T·E, D)``
  gradient: bytes ``+ 2·s·T·E·D``.
* **elementwise** -- ``n`` elements; add/mul binary, relu/gelu unary. Bytes ``s·n·3`` (binary)
  or ``s·n·2`` (unary).
* **reduction** -- ``(rows, cols)`` reduced over ``cols``. Bytes ``s·rows·(cols+1)``.
* **layer_norm** / **softmax** -- over the last dim of ``(rows, cols)``. Bytes
  ``2·s·rows·cols`` (forward), ``3·s·rows·cols`` (backward).
* **attention** -- ``scaled_dot_product_attention`` on q, k, v of ``(B,H,S,Dh)``; ``sdpa_causal``
  with ``is_causal=True``. FLOPs ``4·B·H·S²·Dh`` (halved when causal); bytes ``4·s·B·H·S·Dh``.
* **movement** -- ``cat``: two ``(rows, cols)`` along dim 0; ``transpose``:
  ``x.t().contiguous()`` of ``(rows, cols)``; ``index_select``: ``rows`` random rows of a
  ``(2·rows, cols)`` tensor. Bytes ``2·s·rows·cols``.
* **memcpy** -- ``nbytes`` bytes; ``copy`` is a same-device ``Tensor.copy_``; ``h2d``/``d2h``
  copy between pinned host memory and the GPU. Bytes ``nbytes`` (read) + ``nbytes`` (write).
* **optimizer** -- one ``optimizer.step()`` (torch.optim, default implementation) over
  ``tensors`` parameter tensors of ``n`` elements in all. ``sgd`` without momentum (bytes
  ``3·s·n``), ``adam`` (bytes ``7·s·n``).
* **update** -- the in-place parameter update of one tensor as ``torch.optim.SGD`` runs it on a
  CPU (``param.add_(grad, alpha=-lr)``, no new tensor allocated): ``n`` elements, FLOPs
  ``2·n``, bytes ``3·s·n`` (read both, write ``param``). Measured with the caches flushed
  before every call (:mod:`traincast.record.microbench.timing`), as a step meets a parameter
  it last touched a whole step earlier.

* **sparse_update** -- ``param.add_(grad, alpha=-lr)`` of a ``(E, D)`` table with the sparse
  COO gradient ``nn.EmbeddingBag(sparse=True)`` makes for ``N`` looked-up rows (uncoalesced,
  as SGD receives it): FLOPs ``2·N·D``, bytes ``s·N·D·3`` + ``8·N`` (the rows read and
  written, the values read, the indices).

Measured cold (each call alone, after the last-level cache is flushed): ``update``, and
``sparse_update``, ``embedding_bag`` in both directions; its backward, when the dense weight gradient reaches
32 MiB, also after the freed heap is returned to the system, so the gradient is faulted in
page by page as in a training step (glibc maps a block that large afresh each time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from traincast.errors import ParameterError

__all__ = ["DTYPE_BYTES", "FAMILIES", "FamilySpec", "feature_matrix", "family"]

#: bytes per element of each dtype the benchmarks use
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}

_FLOAT = ("float32", "bfloat16")


@dataclass(frozen=True)
class FamilySpec:
    """One op family: the names of its size parameters, its categorical parameters (allowed
    values, the first the default), the directions measured, and its work function
    ``work(sizes, cats) -> (flops, bytes)`` on columns (numpy arrays)."""

    name: str
    sizes: tuple[str, ...]
    categorical: Mapping[str, tuple[str, ...]]
    directions: tuple[str, ...]
    work: Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]],
                   tuple[np.ndarray, np.ndarray]] = field(repr=False)

    def feature_names(self) -> list[str]:
        """The model features, in order: ``log2(size)`` per size, ``log2 flops``,
        ``log2 bytes``, ``log2 (flops/bytes)`` (arithmetic intensity), then one indicator per
        value of each categorical parameter that has more than one value."""
        names = [f"log2_{s}" for s in self.sizes] + ["log2_flops", "log2_bytes",
                                                      "log2_intensity"]
        for cat, values in self.categorical.items():
            if len(values) > 1:
                names += [f"{cat}={v}" for v in values]
        return names


def _s(cats: Mapping[str, np.ndarray]) -> np.ndarray:
    dt = cats["dtype"]
    return np.array([DTYPE_BYTES[str(d)] for d in dt], dtype=float)


def _gemm(z, c):
    b, m, n, k = z["B"], z["M"], z["N"], z["K"]
    return 2 * b * m * n * k, _s(c) * b * (m * k + k * n + m * n)


def _conv(z, c):
    n, ci, k, h, r = z["N"], z["C"], z["K"], z["H"], z["R"]
    return 2 * n * k * ci * r * r * h * h, _s(c) * (n * ci * h * h + k * ci * r * r + n * k * h * h)


def _embag(z, c):
    b, t, ll, d = z["B"], z["T"], z["L"], z["D"]
    nbytes = _s(c) * b * t * d * (ll + 1) + 8 * b * t * ll
    if c.get("_direction") == "bwd":  # the dense weight gradient is zeroed and written
        nbytes = nbytes + 2 * _s(c) * t * z["E"] * d
    return b * t * ll * d, nbytes


def _elementwise(z, c):
    binary = np.isin(c["op"], ["add", "mul"])
    return z["n"] * 1.0, _s(c) * z["n"] * np.where(binary, 3, 2)


def _reduction(z, c):
    return z["rows"] * z["cols"], _s(c) * z["rows"] * (z["cols"] + 1)


def _rowwise(flops_per_elem: float):
    def work(z, c):
        e = z["rows"] * z["cols"]
        return flops_per_elem * e, 2 * _s(c) * e
    return work


def _attention(z, c):
    b, h, s, d = z["B"], z["H"], z["S"], z["Dh"]
    causal = np.asarray(c["op"]) == "sdpa_causal"
    return 4 * b * h * s * s * d * np.where(causal, 0.5, 1.0), 4 * _s(c) * b * h * s * d


def _movement(z, c):
    e = z["rows"] * z["cols"]
    return 0 * e, 2 * _s(c) * e


def _memcpy(z, c):
    return 0 * z["nbytes"], 2.0 * z["nbytes"]


def _update(z, c):
    return 2.0 * z["n"], 3 * _s(c) * z["n"]


def _sparse_update(z, c):
    nd = z["N"] * z["D"]
    return 2.0 * nd, 3 * _s(c) * nd + 8 * z["N"]


def _optimizer(z, c):
    adam = np.asarray(c["op"]) == "adam"
    n = z["n"]
    return n * np.where(adam, 12, 2), _s(c) * n * np.where(adam, 7, 3)


#: every family, by name (see the module docstring for shapes and units)
FAMILIES: dict[str, FamilySpec] = {f.name: f for f in (
    FamilySpec("gemm", ("B", "M", "N", "K"),
               {"op": ("mm", "addmm", "bmm", "linear"), "dtype": _FLOAT}, ("fwd", "bwd"), _gemm),
    FamilySpec("conv2d", ("N", "C", "K", "H", "R"), {"dtype": ("float32",)}, ("fwd", "bwd"),
               _conv),
    FamilySpec("embedding_bag", ("B", "E", "T", "L", "D"),
               {"dist": ("uniform", "zipf"), "dtype": ("float32",)}, ("fwd", "bwd"), _embag),
    FamilySpec("elementwise", ("n",), {"op": ("add", "mul", "relu", "gelu"), "dtype": _FLOAT},
               ("fwd",), _elementwise),
    FamilySpec("reduction", ("rows", "cols"), {"op": ("sum", "mean"), "dtype": _FLOAT},
               ("fwd",), _reduction),
    FamilySpec("layer_norm", ("rows", "cols"), {"dtype": _FLOAT}, ("fwd", "bwd"), _rowwise(8)),
    FamilySpec("softmax", ("rows", "cols"), {"dtype": _FLOAT}, ("fwd", "bwd"), _rowwise(5)),
    FamilySpec("attention", ("B", "H", "S", "Dh"),
               {"op": ("sdpa", "sdpa_causal"), "dtype": _FLOAT}, ("fwd", "bwd"), _attention),
    FamilySpec("movement", ("rows", "cols"),
               {"op": ("cat", "transpose", "index_select"), "dtype": _FLOAT}, ("fwd",),
               _movement),
    FamilySpec("memcpy", ("nbytes",), {"op": ("copy", "h2d", "d2h")}, ("fwd",), _memcpy),
    FamilySpec("optimizer", ("n", "tensors"), {"op": ("sgd", "adam"), "dtype": ("float32",)},
               ("fwd",), _optimizer),
    FamilySpec("update", ("n",), {"dtype": ("float32",)}, ("fwd",), _update),
    FamilySpec("sparse_update", ("E", "N", "D"), {"dtype": ("float32",)}, ("fwd",),
               _sparse_update),
)}


def family(name: str) -> FamilySpec:
    """The spec of family ``name``.

    Raises:
        ParameterError: unknown family (the message lists the known ones).
    """
    try:
        return FAMILIES[name]
    except KeyError:
        raise ParameterError(f"unknown kernel family {name!r}; known: "
                             f"{', '.join(FAMILIES)}") from None


def feature_matrix(spec: FamilySpec, columns: Mapping[str, object], n: int | None = None,
                   direction: str = "fwd") -> np.ndarray:
    """The ``(rows, features)`` float64 matrix of :meth:`FamilySpec.feature_names` from a
    mapping of column name -> values (a DataFrame works). Categorical columns may be absent,
    or hold None/NaN, for their default; sizes must be present and positive.

    Raises:
        ParameterError: a size is missing or not positive, a categorical value is unknown.
    """
    missing = [s for s in spec.sizes if s not in columns]
    if missing:
        raise ParameterError(f"{spec.name}: missing size parameter(s) {', '.join(missing)}; "
                             f"expected sizes {', '.join(spec.sizes)} and optionally "
                             + ", ".join(f"{k} in {{{', '.join(v)}}}"
                                         for k, v in spec.categorical.items()))
    z: dict[str, np.ndarray] = {}
    for s in spec.sizes:
        try:
            v = np.asarray(columns[s], dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ParameterError(f"{spec.name}: size {s} must be a number") from None
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ParameterError(f"{spec.name}: size {s} must be a positive number")
        z[s] = v
    rows = n if n is not None else len(next(iter(z.values())))
    cats: dict[str, np.ndarray] = {}
    for cat, values in spec.categorical.items():
        if cat in columns and columns[cat] is not None:
            raw = np.asarray(columns[cat], dtype=object).reshape(-1)
            v = np.array([values[0] if x is None or (isinstance(x, float) and x != x)
                          else str(x) for x in raw], dtype=object)  # None/NaN: the default
            if len(v) == 1 and rows > 1:
                v = np.repeat(v, rows)
            bad = sorted(set(v) - set(values))
            if bad:
                raise ParameterError(f"{spec.name}: {cat}={bad[0]!r} unknown; expected one of "
                                     f"{', '.join(values)}")
        else:
            v = np.array([values[0]] * rows, dtype=object)
        cats[cat] = v
    flops, nbytes = spec.work(z, {**cats, "_direction": direction})
    cols = [np.log2(z[s]) for s in spec.sizes]
    lf = np.log2(np.maximum(np.broadcast_to(flops, (rows,)), 1.0))
    lb = np.log2(np.maximum(np.broadcast_to(nbytes, (rows,)), 1.0))
    cols += [lf, lb, lf - lb]
    for cat, values in spec.categorical.items():
        if len(values) > 1:
            cols += [(cats[cat] == v).astype(float) for v in values]
    return np.column_stack(cols).astype(float)

