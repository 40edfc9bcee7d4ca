"""The step without the profiler: remove the profiler's own host cost from a graph.

A profiled run is slower than the same run without the profiler: every host event the
profiler records costs the recording thread some time (:mod:`traincast.costs.profiler_overhead`),
and a replay of the trace reproduces the *profiled* step. Following Lin et al. (arXiv
2404.12674, Sec. 6), who subtract the profiler's cost per CPU event (about 2 us in their
setup) before predicting, each host event (``cpu_op``, ``annotation``, ``runtime``,
``python`` on a host thread) loses its per-event cost from the ``THREAD`` segments it owns
(:func:`traincast.graph.nesting.thread_edge_owner`): half from the segment that starts at its
start record, half from the segment that ends at its end record (the same segment for an
event without children), never below 0. The simulator then gives the unprofiled step: a host
that waited for the GPU still waits (its blocking call ends with the GPU op, a ``SYNC`` or
``QUEUE`` edge, :mod:`traincast.graph.waits`), so removing the overhead only shortens steps
whose critical path runs through the host.

The per-event cost depends on how the trace was recorded (:func:`detect_profiler_settings`):
``record_shapes`` (shapes recorded by Kineto), ``with_stack`` (``python_function`` events),
an execution-trace observer (an ET linked to the trace, or a ``.run.json`` that says so).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from traincast.costs.profiler_overhead import (
    FEATURES,
    ProfilerOverhead,
    dominant_setting,
    host_scale,
    kind_costs,
    overhead_table,
)
from traincast.errors import ParameterError
from traincast.graph.jit import kernel
from traincast.graph.model import EdgeKind, ExecutionGraph, NodeRange
from traincast.simulate.replay import simulated_step_ns
from traincast.trace import arrow as A
from traincast.trace.run_config import recorded_config
from traincast.trace.traceset import TraceSet, shape_columns, shape_rows
from traincast.util.allocator import release_memory
from traincast.util.distinct import sorted_distinct

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: kinds of host events the profiler records with a per-event cost
HOST_KINDS: tuple[str, ...] = ("cpu_op", "annotation", "runtime", "python")

#: the cost class (:data:`traincast.costs.profiler_overhead.FEATURES`) of each host kind
_CLASS_OF_KIND = {"cpu_op": 0, "annotation": 0, "runtime": 1, "python": 2}

# quoted type names only Kineto's ``Input type`` writes (the ET writes "Tensor(float)", "Int")
_KINETO_TYPES = ('"float"', '"double"', '"long"', '"int"', '"Scalar"', '"ScalarList"',
                 '"TensorList"', '"c10::Half"', '"c10::BFloat16"', '"bool"')


@dataclass
class ProfilerSettings:
    """How a trace was recorded, as far as the trace tells, and why."""

    record_shapes: bool = False
    with_stack: bool = False
    execution_trace: bool = False
    device: str = "cpu"
    evidence: list[str] = field(default_factory=list)
    #: the recorder when it is not the PyTorch profiler (``Score-P/OTF2``): its per-event
    #: cost is not measured, and ``unprofiled_ns`` is the profiled step
    other_recorder: str = ""

    def describe(self) -> str:
        if self.other_recorder:
            return self.other_recorder
        on = ["kineto"] + [k for k in ("record_shapes", "with_stack", "execution_trace")
                           if getattr(self, k)]
        return "+".join(on)


#: ops that only make a view (metadata, no data): medians of 0.2-4.8 us per trace under
#: Kineto with or without shapes or stacks, 4.8-28.5 us (all but one program 7.6 us or more)
#: when an execution-trace observer writes its node in the same window; measured on a 2-core
#: AMD EPYC (7 programs), an H200 host's Xeon (7 programs, 3 models) and the kept H100 runs
#: (``benchmarks/data/profiler_cost``, ``benchmarks/data/gpu_runs``)
VIEW_OPS: frozenset[str] = frozenset({
    "aten::view", "aten::t", "aten::detach", "detach", "aten::as_strided",
    "aten::transpose", "aten::_reshape_alias", "aten::expand", "aten::permute",
    "aten::unsqueeze", "aten::select", "aten::slice", "aten::alias"})
#: median duration of view-like ops from which an execution-trace observer is inferred
ET_VIEW_OP_NS = 6_000
#: fewest view-like ops for that inference
ET_VIEW_OP_MIN = 20


def view_op_median_ns(ts: TraceSet) -> float | None:
    """Median duration (ns) of the trace's view-like host ops, None with too few of them;
    found once per events table (kept in ``ts.memo``: the settings and the host-speed
    factor both read it)."""
    hit = ts.memo.get("view_op_median_ns")
    if hit is not None and hit[0] is ts.events:
        return hit[1]
    out = _view_op_median_ns(ts)
    ts.memo["view_op_median_ns"] = (ts.events, out)
    return out


def _view_op_median_ns(ts: TraceSet) -> float | None:
    names = ts.events.column("name").combine_chunks()
    if hasattr(names, "dictionary"):
        ndict = names.dictionary.to_pylist()
        want = np.array([n in VIEW_OPS for n in ndict] or [False])
        hit = want[A.to_numpy(names.indices)]
    else:
        hit = np.isin(np.asarray(names.to_pylist(), dtype=object), list(VIEW_OPS))
    hit &= A.to_numpy(ts.events.column("device")) < 0
    if int(hit.sum()) < ET_VIEW_OP_MIN:
        return None
    return float(np.median(A.to_numpy(ts.events.column("dur"))[hit]))


def detect_profiler_settings(ts: TraceSet, config: dict | None = None) -> ProfilerSettings:
    """The profiler settings ``ts`` was recorded with.

    * ``with_stack``: the trace holds ``python_function`` events.
    * ``execution_trace``: an execution trace is linked to the trace (ET nodes), or the run's
      ``.run.json`` says the ET observer ran in the profiled window (``profiler.
      execution_trace == "same"``); an ET recorded in a separate step (``"separate"``) does
      not count. Without either, view-like ops (:data:`VIEW_OPS`, at least
      :data:`ET_VIEW_OP_MIN`) taking a median of :data:`ET_VIEW_OP_NS` or more: the
      observer writes a node per op, which no Kineto setting alone costs.
    * ``record_shapes``: the trace has shapes that the ET did not give: shapes on events the
      ET does not link, or Kineto's ``Input type`` spelling (``"float"``, ``"Scalar"``; the
      ET writes ``"Tensor(float)"``); without an ET, any shapes. ``.run.json``'s
      ``profiler.record_shapes`` wins when present.
    * ``device``: ``cuda`` when the trace holds GPU events, else ``cpu``.
    * ``other_recorder``: every rank was read from an OTF2 trace (Score-P and other HPC
      tracers), whose per-event cost traincast has not measured.

    ``config``: the run's ``.run.json`` (:func:`traincast.trace.run_config.recorded_config`),
    read when None.
    """
    s = ProfilerSettings()
    paths = [info.path for info in ts.ranks.values()]
    if paths and all(p is not None and str(p).lower().endswith(".otf2") for p in paths):
        s.other_recorder = "Score-P/OTF2"
        s.evidence.append("OTF2 traces: the recorder's per-event cost is not measured")
    kinds = ts.events.column("kind").combine_chunks()
    kdict = kinds.dictionary.to_pylist()
    present = {kdict[i] for i in sorted_distinct(A.to_numpy(kinds.indices))}
    if "python" in present:
        s.with_stack = True
        s.evidence.append("python_function events (with_stack)")
    dev = A.to_numpy(ts.events.column("device"))
    if (dev >= 0).any():
        s.device = "cuda"
    linked = ts.et_links is not None and ts.et_links.num_rows > 0 and bool(ts.et_nodes)
    if linked:
        s.execution_trace = True
        s.evidence.append("execution trace linked (ET observer assumed in the window)")
    else:
        slow = view_op_median_ns(ts)
        if slow is not None and slow >= ET_VIEW_OP_NS:
            s.execution_trace = True
            s.evidence.append(f"view-like ops take a median {slow / 1e3:.1f} us (>= "
                              f"{ET_VIEW_OP_NS / 1e3:.0f} us: an execution-trace observer in "
                              "the window)")
    if shape_rows(ts):
        if not linked:
            s.record_shapes = True
            s.evidence.append("Kineto shapes (record_shapes)")
        else:
            shapes = shape_columns(ts, "event", "input_types")
            ev = A.to_numpy(shapes.column("event"))
            linked_ev = A.to_numpy(ts.et_links.column("event"))  # type: ignore[union-attr]
            unlinked = ~np.isin(ev, linked_ev)
            kineto_types = any(any(t in (x or "") for t in _KINETO_TYPES) for x in
                               shapes.column("input_types").slice(0, 2000).to_pylist())
            del shapes
            if unlinked.any() or kineto_types:
                s.record_shapes = True
                s.evidence.append("Kineto shapes beside the ET's (record_shapes)")
    prof = (recorded_config(ts) if config is None else config).get("profiler")
    if isinstance(prof, dict):
        if "record_shapes" in prof:
            s.record_shapes = bool(prof["record_shapes"])
        if "with_stack" in prof:
            s.with_stack = bool(prof["with_stack"])
        if "execution_trace" in prof:
            s.execution_trace = prof["execution_trace"] in (True, "same")
        s.evidence.append(f".run.json profiler settings {prof}")
    return s


def default_overhead(ts: TraceSet, device: str = "cpu", config: dict | None = None
                     ) -> ProfilerOverhead:
    """The shipped overhead table for the trace's torch version (``.run.json`` ``torch``;
    the newest entry when unknown) and ``device`` (falls back to the CPU entry); ``config``:
    the run's ``.run.json``, read when None."""
    version = (recorded_config(ts) if config is None else config).get("torch")
    try:
        return overhead_table(version, device)
    except ParameterError:
        return overhead_table(version, "cpu")


#: bytes of input-dims texts above which their memory is handed back once they are encoded
_LARGE_TEXTS = 16 << 20
#: shape texts up to this many rows are coded in Python (a few ms at most), more by Arrow
_PY_ENCODED_ROWS = 1 << 16


def _count_inputs(text: object) -> float:
    if not isinstance(text, str) or not text:
        return np.nan
    try:
        v = json.loads(text)
    except ValueError:
        return np.nan
    return float(len(v)) if isinstance(v, list) else np.nan


def host_event_classes(ts: TraceSet) -> tuple[np.ndarray, np.ndarray]:
    """Each event's profiler-cost class and its number of inputs.

    Returns:
        ``(cls, n_inputs)``: int8[n_events], the index in
        :data:`~traincast.costs.profiler_overhead.FEATURES` (0 op: ``cpu_op`` and
        ``annotation``; 1 runtime call; 2 Python frame) of a host event, -1 for device
        events; float[n_events], the inputs recorded for the event (Kineto's or the execution
        trace's shapes: the length of its ``input_dims`` list), NaN where none were recorded.
    """
    kinds = ts.events.column("kind").combine_chunks()
    kdict = kinds.dictionary.to_pylist()
    codes = A.to_numpy(kinds.indices)
    host = A.to_numpy(ts.events.column("device")) < 0
    cls_of_code = np.array([_CLASS_OF_KIND.get(k, -1) for k in kdict] or [-1], np.int8)
    cls = np.where(host, cls_of_code[codes], -1).astype(np.int8) if codes.size else \
        np.zeros(0, np.int8)
    n_in = np.full(cls.size, np.nan)
    if shape_rows(ts):
        # only the two columns, not kept by ts when deferred (no inflated input types)
        shapes = shape_columns(ts, "event", "input_dims")
        ev = A.to_numpy(shapes.column("event"))
        # each distinct text parsed once; Arrow's codes (no Python string per row)
        dims = shapes.column("input_dims")
        large = dims.nbytes > _LARGE_TEXTS
        del shapes
        if pa.types.is_dictionary(dims.type):
            dims = dims.combine_chunks()
            codes_d = A.filled(dims.indices, -1)
            texts = dims.dictionary.to_pylist()
        elif len(dims) <= _PY_ENCODED_ROWS:
            # a few texts: coded here, cheaper than importing Arrow's compute functions for
            # dictionary_encode (~65 ms, once per process)
            index: dict[str, int] = {}
            codes_d = np.fromiter((-1 if t is None else index.setdefault(t, len(index))
                                   for t in A.take_strings(dims, np.arange(len(dims)))),
                                  np.int64, len(dims))
            texts = list(index)
        else:  # chunk by chunk, one dictionary for all (no joined copy of the texts)
            dims = dims.dictionary_encode()
            codes_d = np.concatenate(
                [A.filled(c.indices, -1) for c in dims.chunks]
                or [np.empty(0, np.int32)])
            # (the last chunk's dictionary holds every code: codes go by first sight)
            texts = dims.chunk(dims.num_chunks - 1).dictionary.to_pylist() \
                if dims.num_chunks else []
        del dims
        if large:  # the decompressed texts, back to the OS before the costing's arrays
            release_memory()
        counts = np.array([_count_inputs(u) for u in texts] + [np.nan])
        ok = (ev >= 0) & (ev < cls.size)
        if ok.all():  # (no filtered copies)
            n_in[ev] = counts[codes_d]
        else:
            n_in[ev[ok]] = counts[codes_d[ok]]
    return cls, n_in


def step_features(ts: TraceSet) -> pd.DataFrame:
    """Host events per step by profiler-cost class: one row per (rank, iteration) of
    ``ts.iterations`` with the counts of :data:`~traincast.costs.profiler_overhead.FEATURES`
    (``input``: the inputs of op events; NaN when no shapes were recorded)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    cls, n_in = host_event_classes(ts)
    rank = A.to_numpy(ts.events.column("rank"))
    it = A.to_numpy(ts.events.column("iteration"))
    df = pd.DataFrame({"rank": rank, "iteration": it, "cls": cls, "n_in": n_in})
    df = df[(df["cls"] >= 0) & (df["iteration"] >= 0)]
    rows = []
    for (r, i), g in df.groupby(["rank", "iteration"], sort=True):
        c = np.bincount(g["cls"].to_numpy(), minlength=3)
        ops = g["n_in"].to_numpy()[g["cls"].to_numpy() == 0]
        rows.append({"rank": int(r), "iteration": int(i), "op": int(c[0]),
                     "runtime": int(c[1]), "python": int(c[2]),
                     "input": float(np.nansum(ops)) if np.isfinite(ops).any() else np.nan})
    return pd.DataFrame(rows, columns=["rank", "iteration", *FEATURES])


def trace_host_scale(ts: TraceSet, overhead: ProfilerOverhead,
                     settings: ProfilerSettings) -> float:
    """:func:`~traincast.costs.profiler_overhead.host_scale` of the trace: its view-like ops'
    median duration against the table's for the setting that dominates its cost."""
    setting = dominant_setting(record_shapes=settings.record_shapes,
                               with_stack=settings.with_stack,
                               execution_trace=settings.execution_trace)
    if setting not in overhead.view_op_ns:
        return 1.0
    return host_scale(overhead.view_op_ns, setting, view_op_median_ns(ts))


def event_costs(ts: TraceSet, overhead: ProfilerOverhead, settings: ProfilerSettings) -> np.ndarray:
    """float[n_events]: the profiler's host cost of each event (ns; 0 for device events).

    With a per-kind table (``overhead.per_kind``): an op event costs the op figure plus the
    input figure times its inputs (the table's mean inputs per op where the trace recorded
    none), a runtime call the runtime figure, a Python frame the Python figure
    (:func:`~traincast.costs.profiler_overhead.kind_costs`), all times the host-speed factor
    (:func:`trace_host_scale`) where the table has its reference. Without one, every host event
    costs the per-event figure of the settings."""
    if settings.other_recorder:
        return np.zeros(ts.events.num_rows)
    if overhead.per_kind:
        c = kind_costs(overhead.per_kind, record_shapes=settings.record_shapes,
                       with_stack=settings.with_stack,
                       execution_trace=settings.execution_trace)
        cls, n_in = host_event_classes(ts)
        per_cls = np.array([c["op"], c["runtime"], c["python"], 0.0])
        out = per_cls[np.where(cls >= 0, cls, 3)]
        op = cls == 0
        del cls
        n_op = n_in[op]
        del n_in
        # (in place: the inputs of ops without any recorded take the table's mean)
        np.copyto(n_op, overhead.inputs_per_op, where=~np.isfinite(n_op))
        n_op *= c["input"]
        out[op] += n_op
        del n_op, op
        out *= trace_host_scale(ts, overhead, settings)
        return out
    kinds = ts.events.column("kind").combine_chunks()
    kdict = kinds.dictionary.to_pylist()
    codes = A.to_numpy(kinds.indices)
    host = A.to_numpy(ts.events.column("device")) < 0
    per_op = overhead.per_event_ns(record_shapes=settings.record_shapes,
                                   execution_trace=settings.execution_trace)
    per_py = overhead.per_event_ns(python=True)
    cost_of_code = np.zeros(max(len(kdict), 1))
    for i, k in enumerate(kdict):
        if k in HOST_KINDS:
            cost_of_code[i] = per_py if k == "python" else per_op
    return np.where(host, cost_of_code[codes], 0.0) if codes.size else np.zeros(0)


def remove_overhead(graph: ExecutionGraph, node_cost: np.ndarray) -> ExecutionGraph:
    """A copy of ``graph`` with each node's cost ``node_cost[node]`` (ns) taken off the
    THREAD segments around it: half from the one leaving its start, the rest from the one
    entering its end; what a segment cannot hold (a segment never goes below 0) from the
    one leaving its start again, then the one entering its start and the one leaving its
    end (the cost of a profiled op falls partly outside its recorded interval: its
    callbacks run before its start and after its end timestamps)."""
    return removed_overhead(graph, node_cost)[0]


def removed_overhead(graph: ExecutionGraph, node_cost: np.ndarray
                     ) -> tuple[ExecutionGraph, int]:
    """:func:`remove_overhead`, and the ns of cost that found no room."""
    g = graph.copy_lags()
    if not np.any(node_cost > 0):
        return g, 0
    cost = np.asarray(node_cost, np.float64)
    compiled = kernel("traincast.graph.numba_kernels", "thread_cost_spread", 2 * cost.size)
    # (the kernel holds edge ids in the type of the point ids: they must fit)
    if compiled is not None and g.src.size <= np.iinfo(g.src.dtype).max:
        lost = compiled(g.src, g.dst, g.kind, g.lag, cost, int(EdgeKind.THREAD),
                        g.n_event_points)
    else:
        lost = _spread_py(g, cost)
    return g, int(lost)


def _spread_py(g: ExecutionGraph, cost: np.ndarray) -> int:
    """:func:`traincast.graph.numba_kernels.thread_cost_spread` without numba."""
    n_ev = g.n_event_points
    th = g.edges_of_kind(EdgeKind.THREAD)
    out_e = np.full(n_ev, -1, np.int64)
    in_e = np.full(n_ev, -1, np.int64)
    s_ok = g.src[th] < n_ev
    out_e[g.src[th][s_ok]] = th[s_ok]
    d_ok = g.dst[th] < n_ev
    in_e[g.dst[th][d_ok]] = th[d_ok]
    idx = np.flatnonzero(cost > 0)
    idx = idx[2 * idx + 1 < n_ev]
    if not idx.size:
        return 0
    rems = np.rint(cost[idx]).astype(np.int64)
    # a node whose start leads straight to its end (one THREAD edge, touched by no other
    # node: the edges a node takes from are named by its own points) and whose edge holds
    # its whole cost: the first two takes come off that edge, nothing is lost
    own = out_e[2 * idx]
    leaf = (own >= 0) & (own == in_e[2 * idx + 1]) & (rems > 0)
    leaf[leaf] = g.lag[own[leaf]] >= rems[leaf]
    g.lag[own[leaf]] -= rems[leaf]
    idx, rems = idx[~leaf], rems[~leaf]
    if not idx.size:
        return 0
    # the five edges each node takes from, in order, as local ids into a Python list of the
    # touched edges' lags, written back once; a missing edge is the last slot, lag 0
    steps = np.stack([out_e[2 * idx], in_e[2 * idx + 1], out_e[2 * idx], in_e[2 * idx],
                      out_e[2 * idx + 1]])
    used = steps >= 0
    edges = sorted_distinct(steps[used])
    local = np.full(steps.shape, edges.size, np.int64)
    local[used] = np.searchsorted(edges, steps[used])
    lag = g.lag[edges].tolist() + [0]
    lost = 0
    # (the kernel's steps with the minima spelled out: one comparison per take)
    for rem, e0, e1, e2, e3, e4 in zip(rems.tolist(), *local.tolist(), strict=True):
        if rem <= 0:
            continue
        lg = lag[e0]
        if lg > 0:
            take = (rem + 1) // 2
            if take >= lg:
                lag[e0] = 0
                rem -= lg
            else:
                lag[e0] = lg - take
                rem -= take
        for e in (e1, e2, e3, e4):
            lg = lag[e]
            if lg > 0:
                if rem < lg:
                    lag[e] = lg - rem
                    rem = 0
                    break
                lag[e] = 0
                rem -= lg
                if rem == 0:
                    break
        lost += rem
    g.lag[edges] = lag[:-1]
    return lost


@dataclass
class Unprofiled:
    """The graph without the profiler's cost, and what was assumed."""

    graph: ExecutionGraph
    settings: ProfilerSettings
    overhead: ProfilerOverhead
    per_event_ns: float
    n_events: int
    notes: list[str] = field(default_factory=list)
    #: int64[(rank, iteration) rows]: simulated step durations, once simulated
    step_ns: np.ndarray | None = None


def unprofiled_graph(ts: TraceSet, graph: ExecutionGraph,
                     overhead: ProfilerOverhead | None = None,
                     settings: ProfilerSettings | None = None) -> Unprofiled:
    """``graph`` (of ``ts``, replay or what-if) without the profiler's host cost.

    Args:
        ts: the measured TraceSet the graph was built from.
        graph: its execution graph.
        overhead: a :class:`~traincast.costs.profiler_overhead.ProfilerOverhead` (a
            measurement, :func:`traincast.record.overhead.measure_profiler_overhead`);
            default: the shipped table (:func:`default_overhead`).
        settings: how the trace was recorded; default :func:`detect_profiler_settings`.
    """
    # the run's .run.json read once (a look beside every rank's file)
    config = recorded_config(ts) if settings is None or overhead is None else {}
    settings = detect_profiler_settings(ts, config) if settings is None else settings
    if overhead is None:
        overhead = default_overhead(ts, settings.device, config)
    cost_ev = event_costs(ts, overhead, settings)
    stored = graph.__dict__.get("_node_event")  # the builder's node i is event row i
    if isinstance(stored, NodeRange) and stored.size == cost_ev.size:
        node_cost = cost_ev  # (no gathered copy)
    else:
        node_cost = cost_ev[graph.node_event] if cost_ev.size else np.zeros(graph.n_nodes)
    del cost_ev
    release_memory()  # the costing's temporaries, back to the OS before the lags are copied
    g, lost = removed_overhead(graph, node_cost)
    n = int(np.count_nonzero(node_cost))
    if overhead.per_kind:  # the mean over the events costed
        per = float(node_cost[node_cost > 0].mean()) if n else 0.0
    else:
        per = overhead.per_event_ns(record_shapes=settings.record_shapes,
                                    execution_trace=settings.execution_trace)
    if settings.other_recorder:
        return Unprofiled(g, settings, overhead, 0.0, 0, [
            f"unprofiled_ns: recorded by {settings.other_recorder}, whose per-event cost is "
            "not measured: unprofiled_ns is the profiled step"])
    how = "per event kind, mean" if overhead.per_kind else "x"
    notes = [f"unprofiled_ns: {n} host events {how} {per / 1e3:.2f} us profiler cost removed "
             f"(settings {settings.describe()}: "
             f"{'; '.join(settings.evidence) or 'Kineto only'}); overhead table: "
             f"{overhead.source} (torch {overhead.torch or '?'}, {overhead.device})"]
    if lost > 0.01 * max(float(node_cost.sum()), 1.0):
        notes.append(f"unprofiled_ns: {lost / 1e6:.3f} ms of the profiler's cost found no "
                     "host time around its events to come off (events shorter than their cost)")
    if settings.device != overhead.device:
        notes.append(f"unprofiled_ns: no {settings.device} overhead entry, the "
                     f"{overhead.device} figures were used")
    return Unprofiled(g, settings, overhead, per, n, notes)


def unprofiled_steps(ts: TraceSet, graph: ExecutionGraph,
                     overhead: ProfilerOverhead | None = None) -> Unprofiled:
    """:func:`unprofiled_graph` simulated: its ``step_ns`` holds the step durations (ns) in
    the order of ``ts.iterations``."""
    u = unprofiled_graph(ts, graph, overhead)
    release_memory()  # the lag spreading's temporaries, back to the OS before the simulation
    u.step_ns = simulated_step_ns(ts, u.graph)
    return u
