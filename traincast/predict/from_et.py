"""Predict a training step from its PyTorch execution trace alone.

Input: one execution trace (``torch.profiler.ExecutionTraceObserver``; read by
:func:`traincast.trace.readers.et.read_execution_trace`), captured on any machine, and the
kernel models fitted on the target device by ``traincast bench`` + ``traincast fit``
(:class:`traincast.costs.kernel_models.KernelModels`). No Kineto trace of the workload is
used: every op's time comes from the models, every host overhead from the overhead table
``traincast bench`` measured (``overheads.json``).

Method (Lin et al., arXiv 2404.12674, Sec. 4-5: per-op kernel models plus host overheads
T1-T5 on the execution graph), as applied here:

* **The step.** The ops under the step marker (an annotation named ``ProfilerStep#N``, or
  ``step_marker``); without one, every op of the trace.
* **Parameter updates** (:mod:`traincast.predict.et_updates`), when the models have the
  families: in-place binary ops under an ``Optimizer.step#...`` annotation by ``update``; a
  table's sparse gradient and its update by ``movement`` and ``sparse_update`` (the
  looked-up rows only).
* **Ops to models.** Walking each thread's op tree from the top, the outermost op that maps
  to a kernel family (:func:`op_family`: ``aten::linear``/``addmm``/``mm``/``bmm``/
  ``matmul`` -> gemm, ``embedding_bag`` and its backward, elementwise, reductions,
  ``layer_norm``, ``softmax``, ``scaled_dot_product_attention`` and its backward,
  ``cat``/``index_select``/
  ``contiguous``, ``copy_``, ``Optimizer.step#...`` -> optimizer) is timed by its model,
  which was measured on the whole call (so its children are not visited). An op without a
  family costs the per-op dispatch overhead of the table and its children are visited.
* **Host overheads.** Between consecutive top-level ops of a thread: ``T1_between_ops``
  (median); every op node visited without a model: ``cpu_op_tiny`` (the profiled duration
  of a tiny op). Both from ``overheads.json`` (``traincast bench``); without it, 0 and a
  note.
* **Timeline.** On a CPU the ops of every thread run inline on the host; the CPU autograd
  engine runs the backward while the calling thread waits, so the threads' ops are serial:
  the step is the sum over threads. GPU execution (launch queue, streams) is not modelled by
  this predictor yet; a GPU ET is refused rather than mis-timed.

Shapes come from the ET's ``input_shapes``/``input_types`` (scalars' values are not kept by
the reader: a size only an integer argument carries is taken from an output shape where one
exists, else the op keeps only its dispatch cost and is counted in ``unmodelled``).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.comm import CommModel
from traincast.costs.kernel_models import KernelModels
from traincast.errors import ParameterError, TraincastWarning
from traincast.plan.spec import PlanError
from traincast.predict.et_updates import inplace_update, is_dims, shape_list, sparse_updates
from traincast.trace.readers.et import read_execution_trace
from traincast.util.user_regex import compile_user_regex
from traincast.whatif.recorded_batch import FIRST_OPS, MODEL_OPS, agreed_batch

_DTYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16",
           "double": "float32"}
_BINARY = {"aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_",
           "aten::div", "aten::div_", "aten::threshold_backward", "aten::where",
           "aten::sigmoid_backward", "aten::tanh_backward", "aten::addcmul_",
           "aten::addcdiv_", "aten::lerp_"}
_UNARY = {"aten::relu", "aten::relu_", "aten::sigmoid", "aten::sigmoid_", "aten::tanh",
          "aten::tanh_", "aten::neg", "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt",
          "aten::fill_", "aten::zero_", "aten::clamp", "aten::clamp_", "aten::abs"}
_GELU = {"aten::gelu", "aten::gelu_backward", "aten::silu", "aten::silu_backward"}
_MARKER = re.compile(r"^ProfilerStep#\d+$")
_SDPA_BWD = ("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
             "aten::_scaled_dot_product_flash_attention_backward",
             "aten::_scaled_dot_product_efficient_attention_backward")


@dataclass
class EtPrediction:
    """A step predicted from an execution trace.

    Attributes:
        step_ns: the predicted step (int ns).
        ops: one row per op node timed: ``id, name, tid, family, direction, model_ns``
            (the model's time, 0 for unmodelled ops), ``overhead_ns`` (dispatch/between-op
            cost charged to it).
        notes: how the step and the overheads were found, what was not modelled.
        modelled_share: share of ``step_ns`` that comes from kernel models.
        comm_ns: with ``world_size`` > 1, what data parallelism adds to the step: the
            gradient all_reduce time not hidden behind the backward plus DDP's bucket copies
            (included in ``step_ns``); 0 otherwise.
        buckets: with ``world_size`` > 1, one row per DDP gradient bucket: ``bytes``,
            ``ready_ns`` (when its last gradient is ready, from the step start),
            ``start_ns``, ``end_ns`` (its all_reduce), ``allreduce_ns``.
    """

    step_ns: int
    ops: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    modelled_share: float = 0.0
    comm_ns: int = 0
    buckets: pd.DataFrame | None = None


def _dtype(types_text: str) -> str:
    m = re.search(r"Tensor\(([^)]+)\)", types_text or "")
    return _DTYPES.get(m.group(1), "float32") if m else "float32"


def _numel(shape: Any) -> int:
    if not isinstance(shape, list) or not all(isinstance(x, int) for x in shape):
        return 0
    return int(np.prod(shape)) if shape else 1


def op_family(name: str, shapes: list[Any], types: str, out_shapes: list[Any]
              ) -> tuple[str, str, dict[str, Any]] | None:
    """``(family, direction, parameters)`` of one ET op for :class:`KernelModels`, or None
    when no family fits (see the module docstring for the mapping and the size names of
    :mod:`traincast.costs.kernel_families`)."""
    dt = _dtype(types)
    s = shapes
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul"):
        if name == "aten::addmm" and len(s) >= 3 and is_dims(s[1], 2) and is_dims(s[2], 2):
            (m, k), (_, n) = s[1], s[2]
            return "gemm", "fwd", {"B": 1, "M": m, "N": n, "K": k, "op": "addmm", "dtype": dt}
        if name in ("aten::mm", "aten::matmul") and len(s) >= 2 and is_dims(s[0], 2) \
                and is_dims(s[1], 2):
            (m, k), (_, n) = s[0], s[1]
            return "gemm", "fwd", {"B": 1, "M": m, "N": n, "K": k, "op": "mm", "dtype": dt}
        if name in ("aten::bmm", "aten::matmul") and len(s) >= 2 and is_dims(s[0], 3) \
                and is_dims(s[1], 3):
            (b, m, k), (_, _, n) = s[0], s[1]
            return "gemm", "fwd", {"B": b, "M": m, "N": n, "K": k, "op": "bmm", "dtype": dt}
        if name in ("aten::linear", "aten::matmul") and len(s) >= 2 and is_dims(s[0]) \
                and is_dims(s[1], 2) and len(s[0]) >= 2:
            k = s[0][-1]
            m = int(np.prod(s[0][:-1]))
            n = s[1][0] if name == "aten::linear" else s[1][1]
            return "gemm", "fwd", {"B": 1, "M": m, "N": n, "K": k,
                                   "op": "linear" if name == "aten::linear" else "mm",
                                   "dtype": dt}
        return None
    if name in ("aten::embedding_bag", "aten::_embedding_bag"):
        if len(s) >= 3 and is_dims(s[0], 2) and is_dims(s[1], 1) and is_dims(s[2], 1):
            (e, d), (n,), (b,) = s[0], s[1], s[2]
            return "embedding_bag", "fwd", {"B": b, "E": e, "T": 1, "L": max(n / b, 1.0),
                                            "D": d, "dtype": "float32"}
        return None
    if name in ("aten::embedding_bag_backward", "aten::_embedding_bag_backward",
                "aten::_embedding_bag_dense_backward"):
        if len(s) >= 2 and is_dims(s[0], 2) and is_dims(s[1], 1) and out_shapes \
                and is_dims(out_shapes[0], 2):
            (b, d), (n,) = s[0], s[1]
            e = out_shapes[0][0]
            return "embedding_bag", "bwd", {"B": b, "E": e, "T": 1, "L": max(n / b, 1.0),
                                            "D": d, "dtype": "float32"}
        return None
    if name in _BINARY or name in _UNARY or name in _GELU:
        n = _numel(s[0]) if s else 0
        if n <= 0:
            return None
        op = "gelu" if name in _GELU else ("relu" if name in _UNARY else
                                           ("mul" if "mul" in name else "add"))
        return "elementwise", "fwd", {"n": n, "op": op, "dtype": dt}
    if name in ("aten::sum", "aten::mean"):
        n = _numel(s[0]) if s else 0
        if n <= 0:
            return None
        cols = s[0][-1] if is_dims(s[0]) else n
        return "reduction", "fwd", {"rows": max(n // max(cols, 1), 1), "cols": cols,
                                    "op": name.split("::")[1], "dtype": dt}
    if name in ("aten::layer_norm", "aten::native_layer_norm",
                "aten::native_layer_norm_backward"):
        x = s[1] if name.endswith("backward") and len(s) > 1 else (s[0] if s else None)
        if not is_dims(x) or len(x) < 2:
            return None
        return "layer_norm", "bwd" if name.endswith("backward") else "fwd", {
            "rows": int(np.prod(x[:-1])), "cols": x[-1], "dtype": dt}
    if name in ("aten::softmax", "aten::_softmax", "aten::_softmax_backward_data"):
        x = s[0] if s else None
        if not is_dims(x) or len(x) < 2:
            return None
        return "softmax", "bwd" if name.endswith("backward_data") else "fwd", {
            "rows": int(np.prod(x[:-1])), "cols": x[-1], "dtype": dt}
    if name in ("aten::scaled_dot_product_attention", *_SDPA_BWD):
        if s and is_dims(s[0], 4):  # q (forward) or the output's gradient (backward)
            b, h, sq, dh = s[0]
            return "attention", "bwd" if name in _SDPA_BWD else "fwd", {
                "B": b, "H": h, "S": sq, "Dh": dh, "op": "sdpa", "dtype": dt}
        return None
    if name in ("aten::cat", "aten::index_select", "aten::contiguous", "aten::clone"):
        x = s[0] if s else None
        if name == "aten::cat" and isinstance(x, list) and x and all(is_dims(t) for t in x):
            total = sum(_numel(t) for t in x)
            cols = x[0][-1]
            return "movement", "fwd", {"rows": max(total // (2 * cols), 1), "cols": cols,
                                       "op": "cat", "dtype": dt}
        if is_dims(x) and len(x) >= 2:
            rows, cols = int(np.prod(x[:-1])), x[-1]
            op = "index_select" if name == "aten::index_select" else "transpose"
            return "movement", "fwd", {"rows": rows, "cols": cols, "op": op, "dtype": dt}
        return None
    if name == "aten::copy_":
        n = _numel(s[0]) if s else 0
        if n <= 0:
            return None
        return "memcpy", "fwd", {"nbytes": n * (2 if dt in ("bfloat16", "float16") else 4),
                                 "op": "copy"}
    return None


def _optimizer_params(rows: pd.DataFrame, children: dict[int, list[int]], node: int,
                      name: str) -> dict[str, Any] | None:
    """``optimizer`` parameters of an ``Optimizer.step#X.step`` annotation: the parameters'
    total elements and count, from the first tensor-list input of its ops."""
    best: list[list[int]] = []
    stack = list(children.get(node, []))
    while stack:
        c = stack.pop()
        sh = shape_list(rows.at[c, "input_shapes"])
        if sh and isinstance(sh[0], list) and sh[0] and all(is_dims(t) for t in sh[0]):
            if len(sh[0]) > len(best):
                best = sh[0]
        stack.extend(children.get(c, []))
    if not best:
        return None
    op = "adam" if "adam" in name.lower() else "sgd"
    return {"n": sum(_numel(t) for t in best), "tensors": len(best), "op": op,
            "dtype": "float32"}


def _subtree_ids(children: dict[int, list[int]], tops: list[int]) -> list[int]:
    """Node ids under ``tops`` (included), in id (start) order."""
    out, stack = [], list(tops)
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(children.get(n, []))
    return sorted(out)


def _models_device(km: Any) -> str:
    """Where kernel models were measured, in words (``AMD EPYC (cpu, torch 2.13.0+cpu)``)."""
    src = km.source
    name = src.get("device_name") or src.get("device") or "an unrecorded device"
    extra = ", ".join(str(src[k]) for k in ("device", "torch") if src.get(k))
    return f"{name} ({extra})" if extra else str(name)


def load_overheads(path: str | Path | None) -> tuple[dict[str, float], str]:
    """(``{"T1_between_ops": ns, "cpu_op_tiny": ns}``, where from) from a ``traincast bench``
    ``overheads.json``; zeros when ``path`` is None or absent."""
    if path is None or not Path(path).is_file():
        return {"T1_between_ops": 0.0, "cpu_op_tiny": 0.0}, "no overheads.json: 0"
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ParameterError(f"{path}: not a readable overheads.json ({exc})") from None
    out = {}
    for key in ("T1_between_ops", "cpu_op_tiny"):
        v = raw.get(key, 0.0)
        if isinstance(v, dict):
            v = v.get("median_ns", v.get("median", 0.0))
        try:
            v = float(v)
        except (TypeError, ValueError):
            v = 0.0
        out[key] = v if math.isfinite(v) and v >= 0 else 0.0
    return out, str(path)


def _scaled(v: Any, b0: int, b1: int) -> Any:
    """``v`` (nested shape lists) with every dimension equal to ``b0`` replaced by ``b1``."""
    if isinstance(v, list):
        return [_scaled(x, b0, b1) for x in v]
    return b1 if isinstance(v, int) and not isinstance(v, bool) and v == b0 else v


_EMB_INDICES = {"aten::embedding_bag": 1, "aten::_embedding_bag": 1,
                "aten::embedding_bag_backward": 1, "aten::_embedding_bag_backward": 1,
                "aten::_embedding_bag_dense_backward": 1}


def _et_batch(df: pd.DataFrame, ids: list[int]) -> Any:
    """The batch of the step (:func:`traincast.whatif.recorded_batch.agreed_batch` of the
    first model ops' activation inputs), or None."""
    found: list[tuple[str, list[int]]] = []
    for i in ids:
        name = df.at[i, "name"]
        pos = MODEL_OPS.get(name)
        if pos is None:
            continue
        sh = shape_list(df.at[i, "input_shapes"])
        if len(sh) > pos and is_dims(sh[pos]):
            found.append((name, sh[pos]))
        if len(found) >= FIRST_OPS:
            break
    return agreed_batch(found)


def predict_from_et(et_path: str | Path, models: Any, *, overheads: str | Path | None = None,
                    step_marker: str | None = None, batch_size: int | None = None,
                    batch_size_from: int | None = None, world_size: int | None = None,
                    comm: Any = None, corun: dict[str, Any] | None = None) -> EtPrediction:
    """Predict the step recorded in ``et_path`` with kernel models (module docstring).

    Args:
        et_path: a PyTorch execution trace (JSON, optionally gzipped).
        models: a :class:`~traincast.costs.kernel_models.KernelModels` or the folder
            ``traincast fit`` wrote.
        overheads: ``overheads.json`` of ``traincast bench``; default: ``overheads.json`` in
            the models folder, else in the bench folder the models name as their source.
        step_marker: annotation name (regex) delimiting the step; default ``ProfilerStep#N``.
        batch_size: predict the step at this batch instead of the recorded one: the recorded
            batch ``B0`` is the leading dimension the first model ops agree on; every
            dimension equal to ``B0`` becomes ``batch_size`` and an embedding bag's index
            count scales with it (its pooling factor kept). Dimensions that flatten the batch
            with another one (``[B*S, d]``) are not recognised and keep their size (noted).
        batch_size_from: the recorded batch, when the leading dimension is not it (a
            sequence-first model, ``[S, B, d]``); it must divide a non-feature dimension of
            the first model ops' inputs.
        world_size: predict the step of data-parallel training on this many ranks
            (PyTorch DDP, the per-rank batch unchanged) from the ET of one rank: see
            :func:`ddp_allreduce`. Needs ``comm``.
        comm: a :class:`traincast.costs.comm.CommModel` (``traincast calibrate comm`` or
            ``traincast bench --collective-ranks N``) for ``world_size`` > 1.
        corun: with ``world_size`` > 1 and ranks sharing one host's CPU cores, the measured
            slowdown of each rank's work when they run at once
            (:func:`traincast.record.comm_bench.measure_corun`: ``compute_slowdown`` for
            gemm/conv/attention and host overheads, ``memory_slowdown`` for the other
            families); None: ranks do not share compute (one device each).

    Raises:
        ParameterError: unreadable ET or models; ``world_size`` < 1 or > 1 without ``comm``
            or without gradients in the ET. PlanError: a GPU ET (not modelled yet).
    """
    if world_size is not None and (isinstance(world_size, bool) or int(world_size) < 1):
        raise ParameterError(f"world_size must be >= 1, got {world_size!r}")
    if world_size is not None and world_size > 1 and comm is None:
        raise ParameterError("world_size > 1 needs a communication model (traincast calibrate "
                             "comm, or traincast bench --collective-ranks N)")
    km = models if isinstance(models, KernelModels) else KernelModels.load(models)
    if overheads is None and not isinstance(models, KernelModels):
        cand = Path(models) / "overheads.json"
        overheads = cand if cand.is_file() else None
    if overheads is None and km.source.get("bench_dir"):
        cand = Path(str(km.source["bench_dir"])) / "overheads.json"
        overheads = cand if cand.is_file() else None
    ovh, ovh_src = load_overheads(overheads)
    et = read_execution_trace(et_path)
    df = et.nodes.to_pandas().set_index("id", drop=False)
    gpu_devices = sorted(d for d in et.devices if d not in ("cpu", "meta"))
    if gpu_devices or df["input_types"].str.contains("Device\\(cuda|cuda:", regex=True).any() or \
            df["name"].str.contains(r"^\[param\|cuda\]$|cudaLaunch", regex=True).any():
        raise PlanError(f"{et_path}: the execution trace ran on a GPU "
                        f"({', '.join(gpu_devices) or 'cuda'} tensors); predict_from_et models CPU "
                        "execution only (GPU launches and streams are not modelled yet), and "
                        f"the kernel models were fitted on {_models_device(km)}")
    notes = []
    fitted_on = str(km.source.get("device") or "")
    if fitted_on and fitted_on != "cpu":
        msg = (f"the kernel models were fitted on {_models_device(km)}, but the execution trace "
               "ran on the CPU: the prediction is for the models' hardware, not the trace's")
        warnings.warn(msg, TraincastWarning, stacklevel=2)
        notes.append(msg)
    children: dict[int, list[int]] = {}
    for nid, par in zip(df["id"].tolist(), df["parent"].tolist(), strict=True):
        children.setdefault(int(par), []).append(int(nid))
    if step_marker:
        marker = compile_user_regex(step_marker, "step marker")
    else:
        marker = _MARKER
    steps = df[df["name"].map(lambda n: marker.match(n) is not None).astype(bool)
               & ~df["is_op"]]
    if len(steps):
        root = int(steps["id"].iloc[0])
        tops = [root]
        notes.append(f"step: '{steps['name'].iloc[0]}' (node {root}"
                     + (f"; {len(steps)} markers, the first used" if len(steps) > 1 else "")
                     + ")")
    else:
        tops = [int(i) for i in df.index if int(df.at[i, "parent"]) in (-1, 1)
                or df.at[i, "name"].endswith("|thread]")]
        notes.append("no step marker: every op of the trace")
    rows: list[dict[str, Any]] = []
    unmodelled: dict[str, int] = {}
    scale: tuple[int, int] | None = None
    if batch_size is not None:
        if batch_size < 1:
            raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
        under = _subtree_ids(children, tops)
        got = _et_batch(df, under)
        if batch_size_from is not None:
            b0 = int(batch_size_from)
            if got is not None and not got.admits(b0):
                raise ParameterError(f"batch_size_from={b0} contradicts the execution trace: "
                                     f"no non-feature dimension of {got.evidence} is a "
                                     "multiple")
            how = f"given; the first ops: {got.evidence}" if got else "given"
        elif got is None:
            raise ParameterError(f"{et_path}: the recorded batch cannot be read from the "
                                 "execution trace (no two model ops agree on a leading "
                                 "dimension): give batch_size_from")
        else:
            b0, how = got.batch, f"read from {got.evidence}"
        scale = (b0, int(batch_size))
        notes.append(f"batch {b0} -> {batch_size} (recorded batch {how}; every dimension "
                     "equal to it rescaled, flattened ones not)")

    def shapes_of(node: int, col: str) -> list[Any]:
        sh = shape_list(df.at[node, col])
        if scale is None:
            return sh
        b0, b1 = scale
        out = _scaled(sh, b0, b1)
        name = df.at[node, "name"]
        pos = _EMB_INDICES.get(name)
        if col == "input_shapes" and pos is not None and len(sh) > pos and is_dims(sh[pos], 1):
            out[pos] = [max(1, round(sh[pos][0] * b1 / b0))]  # indices: pooling kept
        return out

    have_update = ("update", "fwd") in km.keys
    sparse = (sparse_updates(df, children, _subtree_ids(children, tops))
              if ("sparse_update", "fwd") in km.keys else {})

    def visit(node: int, top_level: bool, in_opt: bool) -> list[tuple[int, bool, bool]]:
        """Model ``node``; the children to visit next (none when it is modelled whole)."""
        name = df.at[node, "name"]
        is_op = bool(df.at[node, "is_op"])
        fam = None
        if name.startswith("Optimizer.step#"):
            p = _optimizer_params(df, children, node, name)
            fam = ("optimizer", "fwd", p) if p else None
        elif is_op and node in sparse:  # sparse gradients: the looked-up rows only
            fam = sparse[node]
        elif is_op:
            fam = inplace_update(name, op_family(name, shapes_of(node, "input_shapes"),
                                                 df.at[node, "input_types"],
                                                 shapes_of(node, "output_shapes")),
                                 have_update and in_opt)
        between = ovh["T1_between_ops"] if top_level and is_op else 0.0
        if fam is not None:
            f, d, params = fam
            try:
                t = km.predict_ns(f, d, **params)
            except ParameterError:
                t = None
            if t is not None and math.isfinite(t):
                rows.append({"id": node, "name": name, "tid": int(df.at[node, "tid"]),
                             "family": f, "direction": d, "model_ns": t,
                             "overhead_ns": between})
                return []
            unmodelled[f"{f}/{d}"] = unmodelled.get(f"{f}/{d}", 0) + 1
        if is_op:
            rows.append({"id": node, "name": name, "tid": int(df.at[node, "tid"]),
                         "family": "", "direction": "", "model_ns": 0.0,
                         "overhead_ns": between + ovh["cpu_op_tiny"]})
        below = (top_level and not is_op, in_opt or name.startswith("Optimizer.step#"))
        return [(c, *below) for c in children.get(node, [])]

    # depth first in id order, on an explicit stack (nesting of any depth)
    stack: list[tuple[int, bool, bool]] = [(t, True, False) for t in reversed(tops)]
    while stack:
        stack.extend(reversed(visit(*stack.pop())))
    ops = pd.DataFrame(rows, columns=["id", "name", "tid", "family", "direction", "model_ns",
                                      "overhead_ns"])
    model_ns = float(ops["model_ns"].sum())
    step = model_ns + float(ops["overhead_ns"].sum())
    if not len(ops):
        raise PlanError(f"{et_path}: no operator in the step")
    fams = ops[ops["family"] != ""].groupby(["family", "direction"])["model_ns"].agg(
        ["size", "sum"])
    notes.append("modelled: " + ", ".join(f"{f}/{d} {int(r['size'])} ops "
                                          f"{r['sum'] / 1e6:.3g} ms"
                                          for (f, d), r in fams.iterrows()))
    if unmodelled:
        notes.append("families without a model (dispatch cost only): "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(unmodelled.items())))
    notes.append(f"host overheads: between top-level ops {ovh['T1_between_ops']:.0f} ns, "
                 f"per unmodelled op {ovh['cpu_op_tiny']:.0f} ns ({ovh_src}); CPU execution "
                 "(threads serial)")
    comm_ns, buckets = 0.0, None
    if world_size is not None and world_size > 1 and corun:
        cs, ms = float(corun["compute_slowdown"]), float(corun["memory_slowdown"])
        if not (0.5 <= cs <= 100 and 0.5 <= ms <= 100):
            raise ParameterError(f"corun slowdowns out of range: compute {cs}, memory {ms}")
        compute = ops["family"].isin(["gemm", "conv2d", "attention"]).to_numpy()
        ops["model_ns"] = ops["model_ns"] * np.where(compute, cs, ms)
        ops["overhead_ns"] = ops["overhead_ns"] * cs
        model_ns = float(ops["model_ns"].sum())
        step = model_ns + float(ops["overhead_ns"].sum())
        notes.append(f"{world_size} ranks share this host's cores (measured for "
                     f"{corun.get('world', '?')} ranks): compute x{cs:.2f}, memory-bound "
                     f"x{ms:.2f}")
    if world_size is not None and world_size > 1:
        grads = _gradients(df, _subtree_ids(children, tops), scale)
        if not grads:
            raise ParameterError(f"{et_path}: no gradient in the step (no "
                                 "torch::autograd::AccumulateGrad node): world_size needs the "
                                 "backward pass")
        ends = (ops["model_ns"] + ops["overhead_ns"]).cumsum().to_numpy()
        ids = ops["id"].to_numpy()
        order = np.argsort(ids, kind="stable")  # the walk visits ids in order; be sure
        ids, ends = ids[order], ends[order]
        ready = [(float(ends[max(0, int(np.searchsorted(ids, g, "right")) - 1)]), b)
                 for g, b in grads]
        bwd_end = float(ends[-1])
        under = set(_subtree_ids(children, tops))
        opt = [int(i) for i in df.index[df["name"].str.startswith("Optimizer.step#")]
               if int(i) in under]
        if opt:  # the optimizer step waits for the last all_reduce
            first = int(np.searchsorted(ids, min(opt), "left"))
            bwd_end = float(ends[first - 1]) if first > 0 else 0.0
        comm_ns, buckets, note = ddp_allreduce(ready, int(world_size), comm, bwd_end)
        notes.append(note)
        src = str(getattr(comm, "source", "") or "")
        notes.append(f"communication model from {src or 'an unrecorded source'}: it must be "
                     "measured where the run will be (this execution trace ran on the CPU, so "
                     "gloo on this host; nccl-tests logs of GPUs describe another network)")
        if "nccl" in src.lower():
            warnings.warn(f"the communication model comes from {src} (NCCL, GPUs) but the "
                          "execution trace ran on the CPU", TraincastWarning, stacklevel=2)
        # DDP copies each gradient into its bucket, divides the reduced bucket by the world
        # size and copies it back (gradient_as_bucket_view=False, the default): host work
        copy = _bucket_copies(km, buckets["bytes"].tolist())
        if copy is None:
            notes.append("bucket copies not modelled (no memcpy/elementwise model)")
        else:
            cs = float(corun["memory_slowdown"]) if corun else 1.0
            buckets["copy_ns"] = [c * cs for c in copy]
            comm_ns += float(buckets["copy_ns"].sum())
            notes.append(f"DDP bucket copies and averaging {buckets['copy_ns'].sum() / 1e6:.3g} "
                         "ms")
        step += comm_ns
    return EtPrediction(int(round(step)), ops, notes, model_ns / step if step else 0.0,
                        int(round(comm_ns)), buckets)


#: PyTorch DDP's gradient bucket sizes (``torch.nn.parallel.DistributedDataParallel``:
#: ``bucket_cap_mb=25``; ``dist._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB, for the first bucket)
DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 2**20


def _gradients(df: pd.DataFrame, under: list[int], scale: tuple[int, int] | None
               ) -> list[tuple[int, int]]:
    """``(node id, bytes)`` of every gradient accumulated in the step, in the order they are
    ready: the ``torch::autograd::AccumulateGrad`` nodes (one per parameter; their input is
    the gradient). A batch change does not change them."""
    out = []
    for n in sorted(under):
        if df.at[n, "name"] != "torch::autograd::AccumulateGrad":
            continue
        sh = shape_list(df.at[n, "input_shapes"])
        if not sh or not is_dims(sh[0]) and sh[0] != []:
            continue
        item = {"bfloat16": 2, "float16": 2}.get(_dtype(df.at[n, "input_types"]), 4)
        out.append((int(n), _numel(sh[0]) * item))
    return out


def _bucket_copies(km: Any, sizes: list[int]) -> list[float] | None:
    """Per bucket of ``sizes`` bytes (float32): copy in, divide, copy out, ns; None without
    the memcpy or elementwise model."""
    try:
        return [2 * km.predict_ns("memcpy", "fwd", nbytes=max(1, b), op="copy")
                + km.predict_ns("elementwise", "fwd", n=max(1, b // 4), op="mul")
                for b in sizes]
    except ParameterError:
        return None


def ddp_allreduce(ready: list[tuple[float, int]], world_size: int, comm: Any,
                  backward_end_ns: float) -> tuple[float, pd.DataFrame, str]:
    """The gradient all_reduce of data-parallel training as PyTorch DDP runs it (Li et al.,
    "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020,
    Sec. 3.2): gradients, in the order they become ready, fill buckets (the first up to
    :data:`DDP_FIRST_BUCKET_BYTES`, then :data:`DDP_BUCKET_BYTES`; a gradient is never
    split); a bucket's all_reduce starts when its last gradient is ready and the previous
    bucket's is done (one communication stream), overlapping the rest of the backward.

    Args:
        ready: ``(ready time ns from the step start, bytes)`` per gradient, in ready order.
        world_size: data-parallel ranks.
        comm: :class:`traincast.costs.comm.CommModel` (``predict_ns("all_reduce", bytes,
            world_size)``).
        backward_end_ns: when the backward (the last gradient's compute) ends; the
            optimizer waits for the last all_reduce.

    Returns:
        ``(exposed ns, buckets table, note)``: the all_reduce time past ``backward_end_ns``
        (what data parallelism adds to the step), one row per bucket (``bytes``,
        ``ready_ns``, ``start_ns``, ``end_ns``, ``allreduce_ns``), a one-line note.
    """
    buckets: list[list[float]] = []  # [bytes, ready]
    cap = DDP_FIRST_BUCKET_BYTES
    for t, b in ready:
        if buckets and buckets[-1][0] + b <= cap:
            buckets[-1][0] += b
            buckets[-1][1] = max(buckets[-1][1], t)
        else:
            if buckets:
                cap = DDP_BUCKET_BYTES
            buckets.append([float(b), t])
    rows, free = [], 0.0
    for nbytes, t in buckets:
        ar = float(comm.predict_ns("all_reduce", nbytes, world_size))
        start = max(t, free)
        free = start + ar
        rows.append({"bytes": int(nbytes), "ready_ns": t, "start_ns": start, "end_ns": free,
                     "allreduce_ns": ar})
    table = pd.DataFrame(rows, columns=["bytes", "ready_ns", "start_ns", "end_ns",
                                        "allreduce_ns"])
    exposed = max(0.0, free - backward_end_ns)
    total = float(table["allreduce_ns"].sum())
    note = (f"data parallel x{world_size} (DDP): {table['bytes'].sum() / 2**20:.3g} MiB of "
            f"gradients in {len(table)} buckets, all_reduce {total / 1e6:.3g} ms, "
            f"{exposed / 1e6:.3g} ms not hidden behind the backward")
    return exposed, table, note


def data_parallel_inputs(models: Path, comm_model: Path | None
                         ) -> tuple[CommModel, dict[str, Any] | None]:
    """The communication model and co-run slowdowns of :func:`predict_from_et` with
    ``world_size`` > 1: ``comm_model``, else the ``comm.json`` that
    ``traincast bench --collective-ranks`` wrote beside ``models`` (``models/comm.json``,
    then ``models/../bench/comm.json``); ``corun.json`` beside that model when it exists.

    Returns ``(CommModel, corun dict or None)``. Raises :class:`ParameterError` when no model
    is found or a file is not what it should be.
    """
    if comm_model is None:
        for cand in (models / "comm.json", models.parent / "bench" / "comm.json"):
            if cand.is_file():
                comm_model = cand
                break
    if comm_model is None:
        raise ParameterError("--world-size needs --comm-model FILE (traincast calibrate "
                             "comm, or traincast bench --collective-ranks N)")
    if not comm_model.exists():  # a FIFO or a device: from_json refuses it
        raise ParameterError(f"no such communication model file: {comm_model}")
    comm = CommModel.from_json(comm_model)
    corun = None
    corun_file = comm_model.parent / "corun.json"
    if corun_file.is_file():
        try:
            corun = json.loads(corun_file.read_text())
            float(corun["compute_slowdown"]), float(corun["memory_slowdown"])
        except (ValueError, KeyError, TypeError):
            raise ParameterError(f"{corun_file}: not a co-run measurement") from None
    return comm, corun
