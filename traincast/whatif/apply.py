"""Apply a :class:`~traincast.whatif.spec.WhatIf` to an execution graph.

Every change is a change of durations (edge lags) or of dependencies on the measured run's
graph; the same simulator then gives the new times (DESIGN.md: one engine). Durations are
changed by *ratios* from the cost models (new predicted / old predicted for the same op), so
an unchanged op keeps its measured time and a model's absolute error largely cancels — the
approach of Lin et al. (arXiv 2404.12674, Sec. 5) of feeding per-op predictions through the
graph, applied as a correction to the measurement.

* Device ops and host collectives: their ``EXEC`` edge.
* Host ops: the ``THREAD`` segments they own (their self time, :mod:`traincast.graph.nesting`).
* Collectives: ``EXEC`` (transfer) and the ``COLLECTIVE`` edges into their end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from traincast.costs.comm import ALGORITHMS, collective_calls
from traincast.costs.embedding import (
    catalog_embedding_model,
    embedding_calls,
    embedding_observations,
    fit_embedding_efficiency,
)
from traincast.costs.ops import op_work
from traincast.costs.ops.join import event_work
from traincast.costs.ops.join import nest_shaped_ops as _nesting
from traincast.errors import ParameterError
from traincast.graph.model import EdgeKind, ExecutionGraph, compact_lags
from traincast.simulate.engine import kept_out_edges
from traincast.trace import arrow as A
from traincast.trace.run_config import recorded_config
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet
from traincast.whatif.collectives import (
    _recorded_ranks_per_node,
    recorded_links_gbit,
    rescale_collectives,
)
from traincast.whatif.gpu import gpu_factors
from traincast.whatif.match import EventValues, event_values
from traincast.whatif.recorded_batch import infer_recorded_batch
from traincast.whatif.scale import scale_lags
from traincast.whatif.spec import WhatIf
from traincast.whatif.speedup import speedup_factors


@dataclass
class Applied:
    """The transformed graph and what was done, for the report."""

    graph: ExecutionGraph
    notes: list[str] = field(default_factory=list)
    #: per event, the factor its own time was multiplied by (1 = unchanged)
    factor: np.ndarray | None = None
    #: relative standard error the models add to the step time (0 when nothing modelled)
    model_rel_err: float = 0.0
    changed_share: float = 0.0


# ----------------------------------------------------------------- batch size


def _recorded_batch(ts: TraceSet, what: WhatIf, cfg: dict[str, Any]) -> tuple[int, list[str]]:
    """(B0, notes): the recorded batch and how it was found (see :func:`batch_factors`)."""
    given = what.batch_size_from
    meta = cfg.get("batch_size")
    if given and meta and int(given) != int(meta):
        raise ParameterError(f"--what-if batch_size_from={given} contradicts the run metadata "
                             f"(.run.json beside the traces: batch_size {meta})")
    got = infer_recorded_batch(ts)
    if given and got is not None:
        if not got.admits(int(given)):
            raise ParameterError(
                f"--what-if batch_size_from={given} contradicts the trace: no dimension of the "
                f"model's first activations is a multiple of {given} ({got.evidence})")
        if got.batch % int(given) == 0 and got.batch != int(given):
            return int(given), [f"batch_size_from={given}: the trace's first ops have leading "
                                f"dimension {got.batch} = {got.batch // int(given)} x "
                                f"{given} (flattened frames/tokens, or check the value; "
                                f"{got.evidence})"]
    if given or meta:
        return int(given or meta), []
    if got is None:
        raise ParameterError("--what-if batch_size: the recorded batch size is unknown (no "
                             ".run.json beside the traces, and the trace's first ops carry no "
                             "shapes to read it from); pass batch_size_from=N")
    return got.batch, [f"recorded batch {got.batch} read from the trace ({got.evidence}); "
                       "pass batch_size_from=N if the leading dimension is not the batch"]


def _scaled_dims(dims: Any, targets: dict[int, int]) -> Any:
    """Replace every dimension found in ``targets`` (old -> new), recursively."""
    if isinstance(dims, list):
        return [_scaled_dims(d, targets) for d in dims]
    if isinstance(dims, int) and dims in targets:
        return targets[dims]
    return dims


def batch_factors(ts: TraceSet, what: WhatIf, compute: Any = None, *,
                  device_ops: bool = True) -> tuple[np.ndarray, list[str]]:
    """float[n_events]: time multipliers when the per-rank batch changes.

    The batch dimension of a tensor is recognised as a dimension equal to the recorded batch
    size B0 times any product of the recorded sequence length and number of attention heads
    (``.run.json``: ``batch_size``, ``seq_len``, ``dims.nhead``) — activations flatten the
    batch with those (``[B*S, d]``, ``[B*H, S, d_head]``); it becomes B1 times the same. Each op's new work is computed from the
    new shapes (:func:`traincast.costs.ops.op_work`) and its time multiplied by the work
    ratio new/old (FLOPs, else bytes: constant efficiency), or, when a compute model is given
    (``efficiency=fitted``), by the model's ratio (:meth:`ComputeModel.ratio`). Ops without
    shapes keep their time. On the recorded CPU runs (benchmarks/README.md) constant
    efficiency predicted better than the curve fitted on one noisy trace.

    fbgemm table-batched-embedding lookups (:func:`_embedding_batch_factors`) are rescaled by
    the data-distribution-aware embedding model instead: their GPU forward and backward
    kernels take ``model.ratio(p, p with batch·B1/B0)``, which grows sublinearly (unique rows,
    L2 reuse, fixed latency).

    Device ops (kernels, memcpy, memset) take the factor of the CPU op that launched them
    (:func:`_device_op_factors`; off with ``device_ops=False``): the launch's correlation id
    leads to the runtime call and the innermost shaped CPU op enclosing it, the linkage of
    :func:`traincast.costs.ops.event_work`; under nested ops (``aten::linear`` holding
    ``aten::addmm``) the innermost one with known work wins. The CPU op keeps scaling its own
    host time as before, so on CPU-only traces (no device ops) the factors are unchanged.
    Kernels of the TBE lookups belong to the embedding model and never take their op's
    factor.

    Collectives keep their time: collective sizes are not rescaled by a batch what-if. The
    all_to_all of model-parallel embeddings moves batch-proportional messages, but the trace
    records only its flattened 1-D input (no tensor identity links it to the lookups'
    ``[B, d]`` outputs), so which all_to_all grows with the batch (pooled embeddings, lengths)
    and which does not (or only on average: indices) cannot be told cleanly.

    The recorded batch ``B0``: ``.run.json``'s ``batch_size``, else ``batch_size_from``,
    else the leading dimension of the model's first ops
    (:func:`traincast.whatif.recorded_batch.infer_recorded_batch`). A ``batch_size_from``
    that contradicts the run metadata, or that no dimension of the first activations is a
    multiple of, is refused; one the trace's leading dimension is a larger multiple of
    (flattened frames or tokens, or a wrong value) is accepted with a note.

    Raises:
        ParameterError: the recorded batch size is unknown (no ``run.json``, no
            ``batch_size_from`` and no shapes to read it from), or ``batch_size_from``
            contradicts the run metadata or the trace.
    """
    cfg = recorded_config(ts)
    b0, notes = _recorded_batch(ts, what, cfg)
    b1 = int(what.batch_size)  # type: ignore[arg-type]
    # activations carry the batch alone or flattened with the sequence and head dimensions
    # ([B, ...], [B*S, ...], [B*H, S, d], [B*S*H ...]): those products are the batch dims
    dims_cfg = cfg.get("dims") or {}
    seq = cfg.get("seq_len") or dims_cfg.get("seq")
    heads = dims_cfg.get("nhead")
    mults = {1}
    for extra in (seq, heads):
        if extra:
            mults |= {m * int(extra) for m in mults}
    targets = {int(b0) * m: b1 * m for m in sorted(mults)}
    notes.append(f"batch size {b0} -> {b1} (dimensions {sorted(targets)} rescaled)")
    f = np.ones(ts.events.num_rows)
    if ts.shapes.num_rows == 0:
        notes.append("the traces have no shapes (record_shapes): batch size changes nothing")
        return f, notes
    rows = A.to_numpy(ts.shapes.column("event"))
    names = event_values(ts, "name").of(rows)  # the shaped ops' names, in shape-row order
    dims_l = ts.shapes.column("input_dims").to_pylist()
    types_l = ts.shapes.column("input_types").to_pylist()
    changed = 0
    workful = np.zeros(f.size, bool)  # ops whose work was computed here and is nonzero
    for row, name, dj, tj in zip(rows.tolist(), names, dims_l, types_l, strict=True):
        try:
            dims = orjson.loads(dj) if dj else []
            types = orjson.loads(tj) if tj else []
        except orjson.JSONDecodeError:
            continue
        new_dims = _scaled_dims(dims, targets)
        if new_dims == dims:
            continue
        old = op_work(name, dims, types)
        new = op_work(name, new_dims, types)
        if not old.known or (old.flops <= 0 and old.bytes <= 0):
            continue  # no work to scale (views, allocations) or unknown op: keep its time
        workful[row] = True
        r = float("nan")
        if compute is not None:
            try:
                r = float(compute.ratio(old, new))
            except ParameterError:
                r = float("nan")
        if not math.isfinite(r):
            r = new.flops / old.flops if old.flops > 0 else new.bytes / old.bytes
        if math.isfinite(r) and r > 0:
            f[row] = r
            changed += 1
    notes.append(f"{changed} ops rescaled from their shapes")
    calls = embedding_calls(ts)
    if device_ops:
        notes += _device_op_factors(ts, f, workful, calls)
    notes += _embedding_batch_factors(ts, f, int(b0), b1, calls)
    notes += _batch_reach(ts, f, b0, b1)
    return f, notes


def _batch_reach(ts: TraceSet, f: np.ndarray, b0: int, b1: int) -> list[str]:
    """A note on how much of the steps a batch change reaches: the device time rescaled and
    kept (with the largest kept kernel) and the host time, which keeps its time: a
    host-bound step barely moves however much the batch shrinks."""
    it = A.to_numpy(ts.events.column("iteration"))
    dur = A.to_numpy(ts.events.column("dur")).astype(np.float64)
    dev = event_values(ts, "kind").isin(GPU_WORK_KINDS) & (it >= 0)
    if not dev.any():
        return []
    steps = max(ts.iterations.num_rows, 1)
    moved = dev & (f != 1.0)
    kept = dev & ~moved
    new = float((dur[dev] * f[dev]).sum())
    note = (f"batch {b0} -> {b1} reaches {dur[moved].sum() / steps / 1e6:.3g} ms of the "
            f"{dur[dev].sum() / steps / 1e6:.3g} ms of device op time per step (to "
            f"{(new - dur[kept].sum()) / steps / 1e6:.3g} ms); "
            f"{dur[kept].sum() / steps / 1e6:.3g} ms keep their time (no batch dimension in "
            "their or their launching op's shapes, or work unknown: weights, optimizer, "
            "compiled regions)")
    if kept.any():  # the kept device time by the op that launched it
        w = event_work(ts)
        src = np.full(f.size, -1, np.int64)
        src[w["event"].to_numpy(np.int64)] = w["source_event"].to_numpy(np.int64)
        top, top_ns = _largest_launcher(event_values(ts, "name"), src, kept, dur)
        note += (f"; the largest part, {top_ns / steps / 1e6:.3g} ms, launched by "
                 f"{top[:60]}" + (" (a torch.compile region: its work is not known, so its "
                                  "kernels keep their time)" if "Compiled" in top else ""))
    note += ("; host ops keep their time (Python, dispatch, launches do not scale with the "
             "batch), so a host-bound step changes little; no op gets longer, yet the per-step "
             "split (op time, host waits: counterfactual replays) can show op time rising "
             "in a step where shorter kernels shift which waits bind")
    return [note]


def _largest_launcher(names: EventValues, src: np.ndarray, kept: np.ndarray,
                      dur: np.ndarray) -> tuple[str, float]:
    """(name, ns) of the launching op (``src``: per event, its launching event or -1) with the
    most ``dur`` among the ``kept`` events ("no launching op found" for those without one);
    ties go to the name met first in event order. Sums in event order, per name."""
    none = "no launching op found"
    ids = {v: i for i, v in enumerate(dict.fromkeys([*names.values, none]))}
    of_code = np.fromiter((ids[v] for v in names.values), np.int64, len(names.values))
    rows = np.flatnonzero(kept)
    s = src[rows]
    key = np.where(s >= 0, of_code[names.codes[np.maximum(s, 0)]] if of_code.size else 0,
                   ids[none])
    sums = np.bincount(key, weights=dur[rows], minlength=len(ids))
    keys, first = np.unique(key, return_index=True)
    best = keys[sums[keys] == sums[keys].max()]
    top = int(best[np.argmin(first[np.isin(keys, best)])])
    return list(ids)[top], float(sums[top])


def _device_op_factors(ts: TraceSet, f: np.ndarray, workful: np.ndarray,
                       calls: list[Any]) -> list[str]:
    """Give each device op the factor in ``f`` of the CPU op that launched it, in place.

    The launching op is the one :func:`traincast.costs.ops.event_work` attributes the device
    op's work to (``source_event``: kernel -> correlation -> runtime call -> innermost shaped
    CPU op enclosing the call); from there the nesting of shaped ops on the host thread is
    walked outwards to the innermost op with known, nonzero work (``event_work``'s, or scaled
    here: ``workful``), whose factor the device op takes. Device ops with no such op keep
    their time, and so do the kernels of the TBE lookups in ``calls`` and every device op
    under a lookup op: the embedding model sets or keeps those. Returns a note (none when the
    trace has no device ops).
    """
    w = event_work(ts)
    ev = w["event"].to_numpy(np.int64)
    src = w["source_event"].to_numpy(np.int64)
    is_dev = event_values(ts, "kind").isin(GPU_WORK_KINDS)[ev]
    if not is_dev.any():
        return []
    cpu = ev[~is_dev]
    # the innermost op with known work: event_work's (concrete inputs included) or ours
    has_work = workful.copy()
    known = w["known"].to_numpy(bool) & (w["flops"].to_numpy() + w["bytes"].to_numpy() > 0)
    has_work[cpu[known[~is_dev]]] = True
    col = A.to_numpy
    nest = _nesting(cpu, col(ts.events.column("rank")), col(ts.events.column("pid")),
                    col(ts.events.column("tid")), col(ts.events.column("ts")),
                    col(ts.events.column("dur")))
    at = np.full(f.size, -1, np.int64)  # event row -> index in nest.rows
    at[nest.rows] = np.arange(nest.rows.size)
    dev, s = ev[is_dev], src[is_dev]
    ok = s >= 0
    dev, j = dev[ok], at[s[ok]]
    todo = j >= 0
    todo[todo] = ~has_work[nest.rows[j[todo]]]
    while todo.any():
        j[todo] = nest.parent[j[todo]]
        todo &= j >= 0
        todo[todo] = ~has_work[nest.rows[j[todo]]]
    anchor = np.where(j >= 0, nest.rows[np.maximum(j, 0)], -1)
    emb_ops = np.zeros(f.size, bool)
    emb_kernels = np.zeros(f.size, bool)
    for c in calls:
        emb_ops[c.op] = True
        if c.forward is not None:
            emb_kernels[c.forward] = True
        emb_kernels[list(c.backward)] = True
    under_lookup = emb_ops[s[ok]] | emb_ops[np.maximum(anchor, 0)] & (anchor >= 0)
    use = (anchor >= 0) & ~emb_kernels[dev] & ~under_lookup
    use[use] = f[anchor[use]] != 1.0
    f[dev[use]] = f[anchor[use]]
    return [f"{int(use.sum())} kernels rescaled with their launching op"]


def _embedding_batch_factors(ts: TraceSet, f: np.ndarray, b0: int, b1: int,
                             calls: list[Any] | None = None) -> list[str]:
    """Set ``f`` of the fbgemm TBE lookup kernels for the batch ``b0 -> b1``; notes.

    Each call's parameters come from its ET node (:func:`traincast.costs.embedding.
    embedding_calls`); its forward kernel is multiplied by ``model.ratio(p, p', False, opt)``
    and its backward kernels by ``model.ratio(p, p', True, opt)``, with ``p'`` = ``p`` with
    batch ``round(p.batch·b1/b0)``. The model is :func:`~traincast.costs.embedding.
    fit_embedding_efficiency` on the trace itself, else (fit impossible) the catalog's
    un-fitted model; if neither, the kernels keep their time.

    The ET's batch of a call (bags / tables) is the number of samples that rank looks up in
    its tables: the local batch for data-parallel tables (DLRM's dense TBE, batch 16 on the
    8xV100 trace) but the *global* batch for model-parallel tables whose indices arrive by
    all_to_all (the split TBE, 128 = 8 ranks x 16). Both are proportional to the per-rank
    batch, so scaling every call by ``b1/b0`` is right for either layout (same world size).
    The index sort and other fbgemm helper kernels (bounds check, permute, cumsum) are not
    modelled here; like any kernel they take their launching op's factor
    (:func:`_device_op_factors`) when that op's work is known, which none of those fbgemm ops'
    is, so they keep their time.
    """
    if calls is None:
        calls = embedding_calls(ts)
    if not calls:
        return []
    usable = [c for c in calls if c.params is not None
              and (c.forward is not None or c.backward)]
    notes: list[str] = []
    if len(usable) < len(calls):
        notes.append(f"{len(calls) - len(usable)} embedding lookups keep their time (no "
                     "linked ET shapes or kernels not attributable)")
    if not usable:
        return notes
    try:
        model = fit_embedding_efficiency(ts, observations=embedding_observations(ts))
        how = "fitted on the trace"
    except ParameterError as exc:
        try:
            model = catalog_embedding_model(ts)
            how = f"not fitted ({exc}): catalog bandwidth and L2"
        except ParameterError as exc2:
            return [*notes, f"{len(usable)} embedding lookups keep their time: no "
                    f"embedding model ({exc2})"]
    fwd_r: list[float] = []
    bwd_r: list[float] = []
    for c in usable:
        p = c.params
        assert p is not None
        q = p.replace(batch=max(1, round(p.batch * b1 / b0)))
        try:
            if c.forward is not None:
                r = model.ratio(p, q, False, c.optimizer)
                f[c.forward] = r
                fwd_r.append(r)
            if c.backward:
                r = model.ratio(p, q, True, c.optimizer)
                f[list(c.backward)] = r
                bwd_r.append(r)
        except ParameterError:
            continue

    def span(rs: list[float]) -> str:
        if not rs:
            return "none"
        lo, hi = min(rs), max(rs)
        return f"x{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"x{lo:.3g}-{hi:.3g}"

    notes.append(f"{len(usable)} embedding lookups rescaled by the embedding model, {how} "
                 f"(forward {span(fwd_r)}, backward {span(bwd_r)})")
    return notes


# ----------------------------------------------------------------- apply


def apply_what_if(ts: TraceSet, graph: ExecutionGraph, what: WhatIf, *,
                  compute: Any = None, comm: Any = None,
                  factor: np.ndarray | None = None) -> Applied:
    """The graph of ``ts`` changed by ``what`` (see the module docstring).

    The changed graph shares with ``graph`` the arrays ``what`` leaves as they are: the
    anchors; the lags unless durations change; the edge arrays (``src``, ``dst``) and the
    structure derived from them (``graph.structure``: the simulator's CSR and order) unless
    ``what`` rewires edges (:func:`rewires`), so a what-if that changes durations only is
    simulated without re-deriving them. Copy it (:meth:`ExecutionGraph.copy`) before
    changing its arrays in place.

    Args:
        ts: the measured TraceSet the graph was built from.
        graph: its execution graph (e.g. ``traincast.predict(ts).graph``).
        what: the changes.
        compute: a fitted compute model (:mod:`traincast.costs.compute`), for batch size and
            GPU changes.
        comm: a fitted communication model (:mod:`traincast.costs.comm`), for world size and
            bandwidth changes.
        factor: the per-event factors of an earlier application of the same ``what`` to
            ``ts`` (:attr:`Applied.factor`, with the same models): used instead of computing
            them again (they do not depend on the graph); the notes of their computation
            are then left out.

    Raises:
        ParameterError: a change the models cannot support.
    """
    # arrays are copied below where they change, shared with ``graph`` elsewhere
    g = replace(graph, clock_offset=dict(graph.clock_offset),
                host_waits=list(graph.host_waits))
    if rewires(what):
        g.src = graph.src.copy()
        g.structure = {}  # edges rewired below: nothing derived from them is shared
    n = ts.events.num_rows
    notes: list[str] = list(what.node_notes)
    if what.speedups:
        notes.append("speedup " + ", ".join(s.describe() for s in what.speedups))
    factor = (event_factors(ts, what, compute, notes) if factor is None
              else np.array(factor, np.float64))
    network = bool(what.world_size or what.inter_node_gbps or what.intra_node_gbps
                   or what.comm_algorithm)
    narrow = graph.lag.dtype != np.int64
    if network or not np.all(factor == 1.0):
        # int64 while lags are written (a what-if may lengthen an edge past int32)
        g.lag = graph.lag.astype(np.int64)
    _scale_events(g, factor)
    if network:
        before = g.lag.copy()
        notes += rescale_collectives(ts, g, what, comm)
        notes += _network_notes(ts, what, unchanged=np.array_equal(before, g.lag))
        del before
    if narrow and g.lag is not graph.lag:  # back to the graph's type where every lag fits
        g.lag = compact_lags(g.lag)
    if what.overlap == "ideal":
        notes.append(_ideal_overlap(ts, g))
    changed = factor != 1.0
    return Applied(g, notes, factor, changed_share=float(changed.mean()) if n else 0.0)


def event_factors(ts: TraceSet, what: WhatIf, compute: Any = None,
                  notes: list[str] | None = None) -> np.ndarray:
    """float[n_events]: the factor each event's own time is multiplied by under ``what``
    (its speedups, batch size and GPU; 1 = unchanged), as :func:`apply_what_if` applies
    them; what was done is appended to ``notes``.

    Raises:
        ParameterError: as :func:`speedup_factors`, :func:`batch_factors`,
            :func:`traincast.whatif.gpu.gpu_factors`.
    """
    notes = [] if notes is None else notes
    factor = speedup_factors(ts, what, notes)
    if what.batch_size:
        bf, bn = batch_factors(ts, what, compute if what.efficiency == "fitted" else None)
        factor *= bf
        notes += bn
    if what.gpu:
        gf, gn = gpu_factors(ts, what.gpu, compute)
        factor *= gf
        notes += gn + _gpu_kept(ts, what)
    return factor


def rewires(what: WhatIf) -> bool:
    """True when applying ``what`` may move edges (``overlap=ideal``; a network change, which
    rewires a collective left with one member to its own start), False when it changes
    durations (edge lags) only."""
    return bool(what.overlap == "ideal" or what.world_size or what.inter_node_gbps
                or what.intra_node_gbps or what.comm_algorithm)


def _gpu_kept(ts: TraceSet, what: WhatIf) -> list[str]:
    """The note of what a ``gpu`` change keeps as recorded (host, network)."""
    if what.node:
        return []  # the node's notes say what it sets and keeps
    intra, inter = recorded_links_gbit(ts)
    net = []
    for key, rec, label in (("intra_node_gbps", intra, "intra-node"),
                            ("inter_node_gbps", inter, "inter-node")):
        if getattr(what, key) is None:
            net.append(f"{label} network as recorded"
                       + (f" ({rec:g} Gb/s per GPU in the catalog)" if rec else ""))
    kept = ", ".join(["host CPU as recorded (host ops, launches and Python time unchanged)",
                      *net])
    return [f"gpu={what.gpu} changes the GPU alone; kept: {kept}"
            " (node=NAME changes GPU, network and ranks per node together)"]


def _network_notes(ts: TraceSet, what: WhatIf, unchanged: bool) -> list[str]:
    """Where a network what-if (world_size, bandwidths, comm_algorithm) cannot act on this
    trace: a ``comm_algorithm`` that does not apply to some recorded collectives
    (:data:`traincast.costs.comm.ALGORITHMS`: they keep the fitted curve), and, when no
    collective's time changed (``unchanged``), why. [] when no collective was recorded (the
    rescaling says so)."""
    calls = collective_calls(ts)
    if calls.empty:
        return []
    counts = calls["collective"].value_counts()
    notes: list[str] = []
    if what.comm_algorithm:
        alg = what.comm_algorithm
        no_alg = {c: int(k) for c, k in counts.items() if alg not in ALGORITHMS.get(c, ())
                  and not (alg == "best" and ALGORITHMS.get(c))}
        if no_alg:
            notes.append(f"comm_algorithm={alg} does not apply to "
                         + ", ".join(f"{c} (x{k})" for c, k in no_alg.items())
                         + f": {sum(no_alg.values())} of the {len(calls)} collectives keep "
                         "the fitted curve's time")
    if not unchanged:
        return notes
    present = ", ".join(f"{c} x{int(k)}" for c, k in counts.items())
    per_node = what.ranks_per_node or _recorded_ranks_per_node(ts)
    biggest = int(calls["group_size"].max())
    why: list[str] = []
    if what.inter_node_gbps and (what.world_size or ts.world_size) <= per_node \
            and biggest <= per_node:
        why.append(f"inter_node_gbps acts only across nodes and every collective stays "
                   f"inside one node ({per_node} ranks per node): add world_size=N beyond it")
    if what.intra_node_gbps and per_node <= 1:
        why.append("intra_node_gbps: one rank per node, no collective stays inside a node")
    if what.comm_algorithm and not notes:
        why.append(f"comm_algorithm={what.comm_algorithm} times them as the fitted curve "
                   "does")
    if not why and not notes:
        why.append("the communication model predicts the same time for them")
    return [*notes, f"the network what-if leaves all {len(calls)} collectives ({present}) "
            "unchanged" + (": " + "; ".join(why) if why else "")]


def _scale_events(g: ExecutionGraph, factor: np.ndarray) -> None:
    """Multiply each event's own time by ``factor[event]`` (EXEC edges, owned THREAD
    segments), in place on ``g.lag``."""
    scale_lags(g, factor, g.lag)


def _ideal_overlap(ts: TraceSet, g: ExecutionGraph) -> str:
    """Nothing waits for a collective's transfer: edges leaving a collective's end (other
    than to the next op of its own stream/thread) leave from its start instead."""
    moved = ideal_overlap_edges(ts, g)
    g.src[moved] -= 1
    return f"ideal overlap: {moved.size} dependencies on collectives' ends removed"


def ideal_overlap_edges(ts: TraceSet, graph: ExecutionGraph) -> np.ndarray:
    """The edges ``overlap=ideal`` moves (ids, ascending): those leaving a collective's end
    point (``2 i + 1`` of a ``collective`` event ``i``) other than to the next op of its own
    stream or thread (``STREAM``, ``THREAD``); each then leaves the collective's start
    (``src - 1``)."""
    coll = np.flatnonzero(event_values(ts, "kind").equals("collective"))
    # the edges leaving the collectives' ends: from the simulator's CSR when it is kept
    moved = kept_out_edges(graph, 2 * coll + 1)
    if moved is None:
        is_coll_end = np.zeros(graph.n_points, bool)
        is_coll_end[2 * coll + 1] = True
        moved = np.flatnonzero(is_coll_end[graph.src])
    kind = graph.kind[moved]  # the kinds of these edges only
    return moved[(kind != int(EdgeKind.STREAM)) & (kind != int(EdgeKind.THREAD))]
