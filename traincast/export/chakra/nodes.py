"""Conversion of a replayed traincast run into Chakra nodes, per rank (:func:`to_chakra`).

Input: a :class:`~traincast.predict.prediction.Prediction` (graph and replayed times) or a
measured TraceSet (replayed here). Output: a :class:`ChakraTrace`, ``GlobalMetadata`` and
``Node`` messages per rank (schema: :mod:`traincast.export.chakra.et_def`). A node has an id,
a name, a type (``COMP_NODE``, ``COMM_COLL_NODE``, ``COMM_SEND_NODE``/``COMM_RECV_NODE``), a
duration in whole microseconds, the ids of the nodes it waits for (``data_deps``) and named
attributes (``is_cpu_op``, ``comm_type``, ``comm_size``, ``num_ops``, ``tensor_size`` ...).

Mapping from the :class:`~traincast.graph.model.ExecutionGraph` (points with lags) to Chakra
nodes (durations) and dependencies, per rank:

* **GPU ops** (kernel, memset, memcpy) become ``COMP_NODE`` with ``is_cpu_op=false`` and the
  op's ``EXEC`` duration; ``num_ops``/``tensor_size`` (FLOPs and bytes, from
  :func:`traincast.costs.ops.event_work`) when the launching op's shapes are known. A memcpy
  is a ``COMP_NODE`` too: the schema's ``MEM_LOAD_NODE``/``MEM_STORE_NODE`` stand for accesses
  to remote memory that ASTRA-sim times from ``tensor_size`` alone.
* **Collectives** (NCCL kernels, gloo ranges) become ``COMM_COLL_NODE`` with ``comm_type``
  (``all_reduce`` -> ``ALL_REDUCE`` ...), ``comm_size`` (input bytes of the call, as Chakra's
  PyTorch converter counts it), ``pg_name`` when the process group's name is a number (the
  ids of ASTRA-sim's communicator-group file; ``<prefix>.comm_groups.json`` lists the ranks of
  each) and their duration: the transfer time after the last member arrived for matched
  collectives, the measured time for unmatched ones. ``send``/``recv`` between two ranks
  become ``COMM_SEND_NODE``/``COMM_RECV_NODE`` with ``comm_src``/``comm_dst``. A GPU
  communication kernel with no recorded call keeps its time as a ``COMP_NODE``.
* **Host threads** are collapsed: the chain of start/end points of a thread's events is cut
  only at points that something on another thread or stream waits for or that wait for
  something; the CPU time between two cuts (the sum of the ``THREAD`` lags, idle gaps
  included) is one ``COMP_NODE`` with ``is_cpu_op=true``, named after the event that took most
  of that time (``traincast::idle`` for time outside every event), each depending on the
  previous one of its thread.
* **Dependencies** all go to ``data_deps``, the field ASTRA-sim's feeder schedules by (it does
  not read ``ctrl_deps``, which stays empty). Edge kinds: ``THREAD`` -> the chain above;
  ``STREAM`` and ``CROSS_STREAM`` -> the GPU op on the previous (or the other) stream;
  ``LAUNCH`` -> the GPU op waits for the CPU node that ends with the launching runtime call
  (``cudaLaunchKernel`` returning); ``SYNC``/``WAIT``/``DATA``/``ISSUE`` -> the CPU node after
  the waiting point waits for the GPU op, collective or CPU node that ends at the source. A
  point both waited for and waiting gets a zero-length ``traincast::join`` node. ``EXEC`` is
  the node's duration; ``COLLECTIVE`` (another rank's arrival) is not a dependency in a
  per-rank file: Chakra consumers synchronise a collective's members themselves.
* **Anchors**: a thread's first event or a GPU op with no recorded launch cannot start before
  its measured time. These become a per-rank chain of ``traincast::delay`` CPU nodes (one per
  distinct delay, each as long as the gap to the previous) that such nodes wait for, so the
  DAG starts them at the same offset from the run's start as the replay (``anchors=False``
  drops them).

Not representable: the lags of dependency edges (launch latency, wake-up after a sync, the
autograd engine's pick-up of a backward and its wake-up of the caller, unexplained gaps kept on
``STREAM`` edges) are dropped, which is why the critical path of the
exported DAG is slightly shorter than the replay
(:func:`~traincast.export.chakra.check.check_chakra` measures it); and durations are whole
microseconds (rounded so that the sum along every thread and stream stays within 1 µs of the
exact sum). ASTRA-sim runs one CPU node and one GPU compute node of a rank at a time, so
threads and streams that overlapped in the trace serialise there.

Errors: :class:`~traincast.export.chakra.et_def.ChakraError` (protobuf missing),
:class:`~traincast.errors.ParameterError` (``iteration`` selects no event).
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.costs.ops import event_work
from traincast.errors import ParameterError
from traincast.export.chakra.et_def import (
    CHAKRA_VERSION,
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    NODE_TYPE_NAMES,
    ChakraError,
    schema,
)
from traincast.export.chakra.et_file import encode_et
from traincast.graph.model import EdgeKind
from traincast.graph.nesting import point_owner
from traincast.predict.prediction import Prediction, predict
from traincast.trace import arrow as A
from traincast.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from traincast.trace.traceset import TraceSet

#: traincast's normalised collective names -> CollectiveCommType
COLLECTIVE_TO_COMM_TYPE = {
    "all_reduce": 0, "reduce": 1, "all_gather": 2, "gather": 3, "scatter": 4, "broadcast": 5,
    "all_to_all": 6, "reduce_scatter": 7, "barrier": 9,
}

IDLE_NAME = "traincast::idle"
JOIN_NAME = "traincast::join"
DELAY_NAME = "traincast::delay"
#: attribute holding the index of a matched collective (the same on every member's rank)
COLLECTIVE_ATTR = "traincast_collective"


@dataclass
class ChakraTrace:
    """Chakra nodes of one run, per rank, before encoding.

    Attributes:
        metadata: rank -> GlobalMetadata message.
        nodes: rank -> Node messages, ids 0..n-1 in a topological order.
        comm_groups: ASTRA-sim communicator groups ``{pg_name: [ranks]}`` of the numeric
            process groups used (empty when every collective uses the default group).
        stats: what the export did: node counts by type, dependencies by edge kind
            (``dep_edges``), the summed lags of those edges, which Chakra cannot carry
            (``dependency_lag_ns``; only the part on the critical path shortens it), and the
            replayed span of the exported events from the earliest one (``replay_span_ns``,
            and per rank ``replay_span_rank_ns``).
    """

    metadata: dict[int, Any]
    nodes: dict[int, list[Any]]
    comm_groups: dict[str, list[int]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    def encode(self, rank: int) -> bytes:
        """The ``.et`` file of one rank."""
        return encode_et(self.metadata[rank], self.nodes[rank])


@dataclass
class _N:
    """A node being built."""

    rank: int
    name: str
    type: int
    dur_ns: int
    res: tuple  # resource whose durations are rounded together (thread, stream, clock)
    t0: int  # replayed start (ns), for ordering
    attrs: list[tuple[str, str, Any]] = field(default_factory=list)
    deps: set[int] = field(default_factory=set)
    dur_us: int = 0
    is_join: bool = False


def _as_prediction(source: Any, exact: bool) -> Prediction:
    if isinstance(source, Prediction):
        return source
    return predict(source, exact=exact)


def to_chakra(source: Prediction | TraceSet, *, iteration: int | None = None,
              anchors: bool = True, work: bool = True, exact: bool = False) -> ChakraTrace:
    """Chakra nodes of a replayed run (see the module docstring for the mapping).

    Args:
        source: a :class:`~traincast.predict.prediction.Prediction` (its graph and replayed times are
            used) or a measured TraceSet (replayed here with ``exact``).
        iteration: export only the events of this step (``events.iteration``); edges from
            earlier events become delays at their replayed times.
        anchors: keep anchored start times as ``traincast::delay`` nodes.
        work: add ``num_ops``/``tensor_size`` to GPU ops whose work is known.

    Raises:
        ChakraError: protobuf is missing.
        ParameterError: ``iteration`` selects no event.
    """
    pred = _as_prediction(source, exact)
    sch = schema()
    g = pred.graph
    T = pred.result.times[:pred.graph.n_event_points]  # without collective barrier points
    ts = pred.measured
    ev = ts.events
    n = g.n_nodes
    kind_idx, kind_dict = A.dictionary_parts(ev.column("kind"))
    name_idx, name_dict = A.dictionary_parts(ev.column("name"))
    device = A.to_numpy(ev.column("device"))
    stream = A.to_numpy(ev.column("stream"))
    tid = A.to_numpy(ev.column("tid"))
    pid = A.to_numpy(ev.column("pid"))
    ev_iter = A.to_numpy(ev.column("iteration"))
    rank_of = g.node_rank.astype(np.int64)
    # collectives are comm nodes, not edges: leave out their barrier points (ARRIVE/COLLECTIVE)
    on_events = (g.src < 2 * n) & (g.dst < 2 * n)
    src, dst, lag, ek = g.src[on_events], g.dst[on_events], g.lag[on_events], g.kind[on_events]

    def kcode(k: str) -> int:
        return kind_dict.index(k) if k in kind_dict else -99

    # ---- what is exported
    exec_e = g.exec_edge_of_node()
    has_exec = exec_e >= 0
    thr = np.flatnonzero(ek == int(EdgeKind.THREAD))
    in_chain_pt = np.zeros(2 * n, bool)
    in_chain_pt[src[thr]] = True
    in_chain_pt[dst[thr]] = True
    keep_ev = has_exec | in_chain_pt[0::2] | in_chain_pt[1::2]
    if iteration is not None:
        keep_ev &= ev_iter == int(iteration)
        if not keep_ev.any():
            its = sorted({int(i) for i in np.unique(ev_iter) if i >= 0})
            raise ParameterError(f"iteration {iteration} has no simulated event (iterations: "
                                 f"{', '.join(map(str, its)) or 'none'})")
    keep_pt = np.repeat(keep_ev, 2)
    reached = T >= 0
    keep_pt &= reached
    keep_ev = keep_pt[0::2] & keep_pt[1::2]
    keep_pt = np.repeat(keep_ev, 2)
    gpu_ev = has_exec & (device >= 0) & keep_ev
    host_coll = has_exec & (device < 0) & keep_ev
    origin = int(T[keep_pt].min()) if keep_pt.any() else 0

    # ---- thread chains
    next_pt = np.full(2 * n, -1, np.int64)
    next_pt[src[thr]] = dst[thr]
    prev_pt = np.full(2 * n, -1, np.int64)
    prev_pt[dst[thr]] = src[thr]
    thr_lag = np.zeros(2 * n, np.int64)
    thr_lag[src[thr]] = lag[thr]

    # ---- dependency edges (not THREAD/EXEC, same rank), LAUNCH from the runtime call's end
    oth = np.flatnonzero((ek != int(EdgeKind.THREAD)) & (ek != int(EdgeKind.EXEC))
                         & (ek != int(EdgeKind.COLLECTIVE))
                         & (rank_of[src // 2] == rank_of[dst // 2]))
    o_launch = ek[oth] == int(EdgeKind.LAUNCH)
    o_src = np.where(o_launch, src[oth] + 1, src[oth])
    o_dst = dst[oth]
    internal = keep_pt[o_src] & keep_pt[o_dst]
    cut = ~keep_pt[src[oth]] & keep_pt[o_dst] & (T[src[oth]] >= 0)
    # earliest time of a point from outside the export: anchors, cut edges, cut chain links
    ext = np.full(2 * n, -1, np.int64)
    if anchors:
        anc = g.anchor[:2 * n]
        a = (anc >= 0) & keep_pt
        ext[a] = anc[a]
        cs = oth[cut]
        np.maximum.at(ext, dst[cs], T[src[cs]] + lag[cs])
        link = np.flatnonzero(keep_pt & (prev_pt >= 0))
        link = link[~keep_pt[prev_pt[link]]]
        np.maximum.at(ext, link, T[prev_pt[link]] + thr_lag[prev_pt[link]])
    ext_delay = np.where(ext >= 0, ext - origin, 0)
    needs_clock = ext_delay >= 500  # at least half a microsecond
    has_in = np.zeros(2 * n, bool)
    has_out = np.zeros(2 * n, bool)
    has_in[o_dst[internal]] = True
    has_out[o_src[internal]] = True
    has_in |= needs_clock

    nodes: list[_N] = []
    gpu_node = np.full(n, -1, np.int64)
    seg_start = np.full(2 * n, -1, np.int64)  # chain node starting at a boundary point
    seg_end = np.full(2 * n, -1, np.int64)  # chain node ending at a boundary point
    inner = np.full(2 * n, -1, np.int64)  # points inside a host collective -> its node
    join_at = np.full(2 * n, -1, np.int64)

    # ---- collectives: call info by executing event, matched group index
    coll_info: dict[int, dict] = {}
    ct = ts.collectives
    if ct.num_rows:
        cdf = ct.to_pandas()
        cdf["group_ranks"] = ts.group_ranks()
        exec_ev = np.where(cdf["kernel_event"].to_numpy() >= 0, cdf["kernel_event"].to_numpy(),
                           cdf["event"].to_numpy())
        for row, e in zip(cdf.itertuples(index=False), exec_ev.tolist(), strict=True):
            coll_info[int(e)] = {"collective": row.collective, "pg": str(row.process_group),
                                 "ranks": [int(r) for r in row.group_ranks],
                                 "in_bytes": int(row.in_bytes), "out_bytes": int(row.out_bytes),
                                 "seq": int(row.seq)}
    group_of: dict[int, int] = {}
    for k, grp in enumerate(g.collective_groups):
        for e in grp.tolist():
            group_of[int(e)] = k
    comm_groups: dict[str, list[int]] = {}
    work_of: dict[int, tuple[float, float]] = {}
    if work:
        try:
            w = event_work(ts)
            w = w[(w["flops"] > 0) | (w["bytes"] > 0)]
            work_of = dict(zip(w["event"].tolist(),
                               zip(w["flops"].tolist(), w["bytes"].tolist(), strict=True),
                               strict=True))
        except Exception:  # noqa: BLE001 - work estimates are optional decoration
            work_of = {}

    def add(nd: _N) -> int:
        nodes.append(nd)
        return len(nodes) - 1

    def comm_attrs(e: int, rank: int) -> tuple[int, list[tuple[str, str, Any]]] | None:
        info = coll_info.get(e)
        if info is None:
            return None
        name = info["collective"]
        size = info["in_bytes"] or info["out_bytes"]
        out: list[tuple[str, str, Any]] = [("is_cpu_op", "bool_val", False)]
        peers = [r for r in info["ranks"] if r != rank]
        if name in ("send", "recv") and len(info["ranks"]) == 2 and len(peers) == 1:
            send = name == "send"
            out += [("comm_src", "int32_val", rank if send else peers[0]),
                    ("comm_dst", "int32_val", peers[0] if send else rank),
                    ("comm_tag", "int32_val", info["seq"] & 0x7FFFFFFF),
                    ("comm_size", "int64_val", size)]
            ntype = COMM_SEND_NODE if send else COMM_RECV_NODE
        elif name in COLLECTIVE_TO_COMM_TYPE:
            out += [("comm_type", "int64_val", COLLECTIVE_TO_COMM_TYPE[name]),
                    ("comm_size", "int64_val", size)]
            ntype = COMM_COLL_NODE
        else:
            return None
        pg = info["pg"]
        if re.fullmatch(r"\d+", pg):
            out.append(("pg_name", "string_val", pg))
            if pg != "0":
                comm_groups.setdefault(pg, sorted(info["ranks"]))
        if e in group_of:
            out.append((COLLECTIVE_ATTR, "int64_val", group_of[e]))
        return ntype, out

    def op_node(e: int, res: tuple) -> int:
        r = int(rank_of[e])
        dur = int(g.lag[exec_e[e]])
        is_gpu = device[e] >= 0
        ntype, at = COMP_NODE, [("is_cpu_op", "bool_val", not is_gpu)]
        if kind_idx[e] == kcode("collective"):
            c = comm_attrs(e, r)
            if c is not None:
                ntype, at = c
        if is_gpu:
            at.append(("stream", "int64_val", int(stream[e])))
        if ntype == COMP_NODE and e in work_of:
            flops, nbytes = work_of[e]
            at += [("num_ops", "int64_val", int(flops)), ("tensor_size", "uint64_val",
                                                          int(nbytes))]
        return add(_N(r, name_dict[name_idx[e]], ntype, dur, res, int(T[2 * e]), attrs=at))

    # ---- GPU op nodes
    for e in np.flatnonzero(gpu_ev).tolist():
        gpu_node[e] = op_node(e, ("stream", int(rank_of[e]), int(device[e]), int(stream[e])))

    # ---- host chains
    boundary = keep_pt & in_chain_pt & (has_in | has_out)
    boundary[src[oth[internal & o_launch]] + 1] = True  # runtime call ends that launch
    hc = np.flatnonzero(host_coll)
    boundary[2 * hc] = True
    boundary[2 * hc + 1] = True
    heads = np.flatnonzero(keep_pt & in_chain_pt & ((prev_pt < 0) | ~keep_pt[np.clip(
        prev_pt, 0, None)]))
    n_ev_names = len(name_dict)
    owner_pt = point_owner(g)  # the thread nesting (traincast.graph.nesting)
    opened = np.full(n, -1, np.int64)  # head of the run in which each event started
    for h in heads.tolist():
        e0 = h // 2
        r = int(rank_of[e0])
        res = ("thread", r, int(pid[e0]), int(tid[e0]))
        acc: dict[int, int] = {}
        seg_dur = 0
        seg_from = h
        p = h
        while True:
            ev_p = p // 2
            if host_coll[ev_p] and p % 2 == 0:
                # the collective spans its start..end; points inside map to it
                c = op_node(ev_p, res)
                seg_start[p] = c
                q = p
                while q >= 0 and keep_pt[q] and q != p + 1:
                    inner[q] = c
                    q = next_pt[q]
                if q != p + 1:  # chain ends inside the collective
                    break
                inner[q] = -1
                seg_end[q] = c
                p = q
                seg_from, seg_dur, acc = p, 0, {}
                # fall through: p is the collective's end point
            elif p % 2 == 0:
                opened[ev_p] = h
            q = int(next_pt[p])
            if q < 0 or not keep_pt[q]:
                if p != seg_from or seg_dur:
                    s = _segment(add, r, res, seg_from, seg_dur, acc, name_dict, T, tid, e0,
                                 n_ev_names)
                    seg_start[seg_from] = s
                    seg_end[p] = s
                break
            step = int(thr_lag[p])
            # the innermost event open after p, if it opened in this run of exported points
            top = int(owner_pt[p])
            if top >= 0 and opened[top] != h:
                top = -1
            key = int(name_idx[top]) if top >= 0 else n_ev_names
            acc[key] = acc.get(key, 0) + step
            seg_dur += step
            p = q
            if boundary[p]:
                s = _segment(add, r, res, seg_from, seg_dur, acc, name_dict, T, tid, e0,
                             n_ev_names)
                seg_start[seg_from] = s
                seg_end[p] = s
                seg_from, seg_dur, acc = p, 0, {}
    # chain order: each node of a thread waits for the previous one
    chain_pts = np.flatnonzero(seg_start >= 0)
    for p in chain_pts.tolist():
        prev = seg_end[p]
        if prev >= 0 and prev != seg_start[p]:
            nodes[seg_start[p]].deps.add(int(prev))

    # ---- joins: points waited for that also wait (or end their chain)
    jp = np.flatnonzero(keep_pt & has_in & (inner < 0) & (
        has_out | ((seg_start < 0) & in_chain_pt)) & (device[np.arange(2 * n) // 2] < 0))
    for p in jp.tolist():
        r = int(rank_of[p // 2])
        j = add(_N(r, JOIN_NAME, COMP_NODE, 0, ("join",), int(T[p]),
                   attrs=[("is_cpu_op", "bool_val", True)], is_join=True))
        if seg_end[p] >= 0:
            nodes[j].deps.add(int(seg_end[p]))
        if seg_start[p] >= 0:
            nodes[seg_start[p]].deps.discard(int(seg_end[p]))
            nodes[seg_start[p]].deps.add(j)
        join_at[p] = j

    def ends_at(p: int) -> int:
        e = p // 2
        if gpu_ev[e]:
            return int(gpu_node[e]) if p % 2 == 1 else -1
        if join_at[p] >= 0:
            return int(join_at[p])
        if inner[p] >= 0:
            return int(inner[p])
        return int(seg_end[p])

    def starts_at(p: int) -> int:
        e = p // 2
        if gpu_ev[e]:
            return int(gpu_node[e])
        if join_at[p] >= 0:
            return int(join_at[p])
        if inner[p] >= 0:
            return int(inner[p])
        return int(seg_start[p])

    dropped_lag = 0
    n_edges = {k.name: 0 for k in EdgeKind}
    for i in np.flatnonzero(internal).tolist():
        e_idx = int(oth[i])
        s_pt, d_pt = int(o_src[i]), int(o_dst[i])
        if o_launch[i]:
            a_node = int(seg_end[s_pt]) if seg_end[s_pt] >= 0 else ends_at(s_pt)
        else:
            a_node = ends_at(s_pt)
        b_node = starts_at(d_pt)
        if a_node < 0 or b_node < 0 or a_node == b_node:
            continue
        nodes[b_node].deps.add(a_node)
        n_edges[EdgeKind(int(ek[e_idx])).name] += 1
        dropped_lag += int(lag[e_idx])

    # ---- delays (anchors), one chain per rank
    clock_pts = np.flatnonzero(needs_clock & keep_pt)
    by_rank: dict[int, list[int]] = {}
    for p in clock_pts.tolist():
        by_rank.setdefault(int(rank_of[p // 2]), []).append(p)
    for r, pts in by_rank.items():
        delays = sorted({int(ext_delay[p]) for p in pts})
        clock_node: dict[int, int] = {}
        prev, prev_d = -1, 0
        for d in delays:
            c = add(_N(r, DELAY_NAME, COMP_NODE, d - prev_d, ("clock", r), origin + prev_d, attrs=[("is_cpu_op", "bool_val", True)]))
            if prev >= 0:
                nodes[c].deps.add(prev)
            clock_node[d] = c
            prev, prev_d = c, d
        for p in pts:
            b = starts_at(p)
            if b >= 0:
                nodes[b].deps.add(clock_node[int(ext_delay[p])])

    _contract_joins(nodes)
    _round_durations(nodes)

    # ---- per rank: topological ids, messages
    out_nodes: dict[int, list[Any]] = {}
    metadata: dict[int, Any] = {}
    alive = [i for i, nd in enumerate(nodes) if nd is not None]
    ranks = sorted({nodes[i].rank for i in alive} | set(ts.rank_ids))
    stats: dict[str, Any] = {"nodes": 0, "data_deps": 0, "by_type": {}, "dep_edges": {
        k: v for k, v in n_edges.items() if v}, "dependency_lag_ns": dropped_lag,
        "origin_ns": origin, "replay_span_ns": int(T[keep_pt].max() - origin)
        if keep_pt.any() else 0, "replay_span_rank_ns": {}, "iteration": iteration}
    for r in ranks:
        mine = [i for i in alive if nodes[i].rank == r]
        order = _topo(nodes, mine)
        ids = {old: k for k, old in enumerate(order)}
        msgs = []
        for k, old in enumerate(order):
            nd = nodes[old]
            m = sch.Node(id=k, name=nd.name, type=nd.type, duration_micros=nd.dur_us,
                         start_time_micros=max(0, (nd.t0 - origin + 500) // 1000))
            m.data_deps.extend(sorted(ids[d] for d in nd.deps))
            for aname, which, v in nd.attrs:
                m.attr.add(name=aname, **{which: v})
            msgs.append(m)
            tname = NODE_TYPE_NAMES.get(nd.type, str(nd.type))
            stats["by_type"][tname] = stats["by_type"].get(tname, 0) + 1
            stats["data_deps"] += len(nd.deps)
        stats["nodes"] += len(msgs)
        out_nodes[r] = msgs
        sel = keep_pt & (np.repeat(rank_of, 2) == r)
        stats["replay_span_rank_ns"][r] = int(T[sel].max() - origin) if sel.any() else 0
        meta = sch.GlobalMetadata(version=CHAKRA_VERSION)
        for aname, which, v in (("producer", "string_val", f"traincast {__version__}"),
                                ("rank", "int64_val", r), ("world_size", "int64_val",
                                                           int(ts.world_size)),
                                ("time_unit", "string_val", "us")):
            meta.attr.add(name=aname, **{which: v})
        if iteration is not None:
            meta.attr.add(name="iteration", int64_val=int(iteration))
        metadata[r] = meta
    stats["world_size"] = int(ts.world_size)
    return ChakraTrace(metadata, out_nodes, comm_groups, stats)


def _segment(add: Any, rank: int, res: tuple, start_pt: int, dur: int, acc: dict[int, int],
             name_dict: list[str], T: np.ndarray, tid: np.ndarray, e0: int,
             n_names: int) -> int:
    key = max(acc, key=lambda k: acc[k]) if acc else n_names
    name = name_dict[key] if key < n_names else IDLE_NAME
    return add(_N(rank, name, COMP_NODE, int(dur), res, int(T[start_pt]),
                  attrs=[("is_cpu_op", "bool_val", True), ("tid", "int64_val", int(tid[e0]))]))


def _contract_joins(nodes: list[_N | None]) -> None:
    """Drop joins with a single dependency: their dependents wait for it directly."""
    fwd: dict[int, int] = {}
    for i, nd in enumerate(nodes):
        if nd is not None and nd.is_join and len(nd.deps) <= 1:
            fwd[i] = next(iter(nd.deps)) if nd.deps else -1

    def resolve(i: int) -> int:
        seen = []
        while i in fwd:
            seen.append(i)
            i = fwd[i]
        for s in seen:
            fwd[s] = i
        return i

    if not fwd:
        return
    for i, nd in enumerate(nodes):
        if nd is None or i in fwd:
            continue
        if any(d in fwd for d in nd.deps):
            new = {resolve(d) for d in nd.deps}
            new.discard(-1)
            new.discard(i)
            nd.deps = new
    for i in fwd:
        nodes[i] = None


def _round_durations(nodes: list[_N | None]) -> None:
    """Whole microseconds, rounded along each thread, stream and clock so sums stay exact."""
    groups: dict[tuple, list[int]] = {}
    for i, nd in enumerate(nodes):
        if nd is not None:
            groups.setdefault(nd.res, []).append(i)
    for res, idx in groups.items():
        if res == ("join",):
            for i in idx:
                nodes[i].dur_us = (nodes[i].dur_ns + 500) // 1000
            continue
        idx.sort(key=lambda i: (nodes[i].t0, i))
        exact = 0
        done = 0
        for i in idx:
            exact += max(nodes[i].dur_ns, 0)
            total = (exact + 500) // 1000
            nodes[i].dur_us = total - done
            done = total


def _topo(nodes: list[_N | None], mine: list[int]) -> list[int]:
    """Kahn's order of one rank's nodes, earliest replayed start first."""
    mine_set = set(mine)
    indeg = {i: 0 for i in mine}
    succ: dict[int, list[int]] = {i: [] for i in mine}
    for i in mine:
        for d in nodes[i].deps:
            if d in mine_set:
                indeg[i] += 1
                succ[d].append(i)
    heap = [(nodes[i].t0, i) for i in mine if indeg[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (nodes[j].t0, j))
    if len(order) != len(mine):  # pragma: no cover - the point graph is acyclic
        raise ChakraError("internal error: the exported dependencies have a cycle")
    return order
