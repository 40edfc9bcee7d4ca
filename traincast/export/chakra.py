"""Chakra execution traces (MLCommons Chakra protobuf) of a traincast execution graph.

ASTRA-sim and the other Chakra tools read one file per rank, ``<prefix>.<rank>.et``: a
``GlobalMetadata`` message, then one ``Node`` message per node, each preceded by its length
as a varint (the framing of Chakra's ``encode_message``/``decode_message``). A node has an
id, a name, a type (``COMP_NODE``, ``COMM_COLL_NODE``, ``COMM_SEND_NODE``/``COMM_RECV_NODE``),
a duration in whole microseconds, the ids of the nodes it waits for (``data_deps``) and named
attributes (``is_cpu_op``, ``comm_type``, ``comm_size``, ``num_ops``, ``tensor_size`` ...).

Schema: the message definitions are built at run time from the field names and numbers of
``schema/protobuf/et_def.proto`` in the mlcommons/chakra repository (checked against commits
``f5124d76bb7c3ba2ad67cb8386ad0f450a88e88e`` and ``6dc63e147b9d115286626cc122459e44d9d08401``,
which agree on every field used here), with the ``protobuf`` runtime only (the ``chakra``
extra). The official generated module is not vendored and no Chakra package is on PyPI.
Only the subset written here is declared (``GlobalMetadata``, ``Node``, ``IOInfo``,
``AttributeProto`` with its scalar and a few list values, and the two enums); fields of other
producers' files outside it are kept as unknown fields when reading.

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

Not representable: the lags of dependency edges (launch latency, wake-up after a sync,
unexplained gaps kept on ``STREAM`` edges) are dropped, which is why the critical path of the
exported DAG is slightly shorter than the replay (:func:`check_chakra` measures it); and
durations are whole microseconds (rounded so that the sum along every thread and stream stays
within 1 µs of the exact sum). ASTRA-sim runs one CPU node and one GPU compute node of a rank
at a time, so threads and streams that overlapped in the trace serialise there.
"""

from __future__ import annotations

import functools
import gzip
import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.errors import TraincastError
from traincast.graph.model import EdgeKind
from traincast.graph.nesting import point_owner
from traincast.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from traincast.predict.prediction import Prediction
    from traincast.trace.traceset import TraceSet

#: where the field names and numbers come from (the file is not vendored)
SCHEMA_SOURCE = {
    "repo": "mlcommons/chakra",
    "path": "schema/protobuf/et_def.proto",
    "commits": ["f5124d76bb7c3ba2ad67cb8386ad0f450a88e88e",
                "6dc63e147b9d115286626cc122459e44d9d08401"],
    "licence": "MIT",
}
#: ``GlobalMetadata.version`` written by Chakra's own converters and generators
CHAKRA_VERSION = "0.0.4"

# NodeType
INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 0, 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
STORAGE_NODE, BATCH_NODE, CHECKPOINT_NODE = 8, 9, 10
NODE_TYPES = {
    "INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3,
    "COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7,
    "STORAGE_NODE": 8, "BATCH_NODE": 9, "CHECKPOINT_NODE": 10,
}
#: CollectiveCommType values
COMM_TYPES = {
    "ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
    "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9,
}
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


class ChakraError(TraincastError):
    """A Chakra file cannot be read, or the export cannot run (protobuf missing)."""


# ------------------------------------------------------------------------------ schema


@functools.cache
def schema() -> SimpleNamespace:
    """Message classes ``GlobalMetadata``, ``Node``, ``AttributeProto``, ``IOInfo``.

    Built from descriptors declared here (field names and numbers of Chakra's
    ``et_def.proto``, package ``ChakraProtoMsg``) in a private descriptor pool, so they never
    clash with an installed ``et_def_pb2``.

    Raises:
        ChakraError: the ``protobuf`` package is not installed.
    """
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise ChakraError("the Chakra export needs the protobuf package: "
                          "pip install 'traincast[chakra]'") from None
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="traincast/chakra_et_def.proto",
                                            package="ChakraProtoMsg", syntax="proto3")

    def message(name: str, fields: list[tuple], oneof: str | None = None) -> None:
        m = fd.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, number, ftype, *rest in fields:
            label = F.LABEL_REPEATED if "repeated" in rest else F.LABEL_OPTIONAL
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            for r in rest:
                if r.startswith("."):
                    f.type_name = r
            if "oneof" in rest:
                f.oneof_index = 0

    lists = [("DoubleList", F.TYPE_DOUBLE), ("Int64List", F.TYPE_INT64),
             ("Uint64List", F.TYPE_UINT64), ("BoolList", F.TYPE_BOOL),
             ("StringList", F.TYPE_STRING)]
    for name, t in lists:
        message(name, [("values", 1, t, "repeated")])
    message("AttributeProto", [
        ("name", 1, F.TYPE_STRING), ("doc_string", 2, F.TYPE_STRING),
        ("double_val", 3, F.TYPE_DOUBLE, "oneof"),
        ("double_list", 4, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.DoubleList"),
        ("float_val", 5, F.TYPE_FLOAT, "oneof"), ("int32_val", 7, F.TYPE_INT32, "oneof"),
        ("int64_val", 9, F.TYPE_INT64, "oneof"),
        ("int64_list", 10, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.Int64List"),
        ("uint32_val", 11, F.TYPE_UINT32, "oneof"), ("uint64_val", 13, F.TYPE_UINT64, "oneof"),
        ("uint64_list", 14, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.Uint64List"),
        ("sint32_val", 15, F.TYPE_SINT32, "oneof"), ("sint64_val", 17, F.TYPE_SINT64, "oneof"),
        ("fixed32_val", 19, F.TYPE_FIXED32, "oneof"),
        ("fixed64_val", 21, F.TYPE_FIXED64, "oneof"),
        ("sfixed32_val", 23, F.TYPE_SFIXED32, "oneof"),
        ("sfixed64_val", 25, F.TYPE_SFIXED64, "oneof"), ("bool_val", 27, F.TYPE_BOOL, "oneof"),
        ("bool_list", 28, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.BoolList"),
        ("string_val", 29, F.TYPE_STRING, "oneof"),
        ("string_list", 30, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.StringList"),
        ("bytes_val", 31, F.TYPE_BYTES, "oneof"),
    ], oneof="value")
    message("GlobalMetadata", [
        ("version", 1, F.TYPE_STRING),
        ("attr", 2, F.TYPE_MESSAGE, "repeated", ".ChakraProtoMsg.AttributeProto")])
    message("IOInfo", [("values", 1, F.TYPE_STRING), ("shapes", 2, F.TYPE_STRING),
                       ("types", 3, F.TYPE_STRING)])
    message("Node", [
        ("id", 1, F.TYPE_UINT64), ("name", 2, F.TYPE_STRING),
        ("type", 3, F.TYPE_ENUM, ".ChakraProtoMsg.NodeType"),
        ("ctrl_deps", 4, F.TYPE_UINT64, "repeated"), ("data_deps", 5, F.TYPE_UINT64, "repeated"),
        ("start_time_micros", 6, F.TYPE_UINT64), ("duration_micros", 7, F.TYPE_UINT64),
        ("inputs", 8, F.TYPE_MESSAGE, ".ChakraProtoMsg.IOInfo"),
        ("outputs", 9, F.TYPE_MESSAGE, ".ChakraProtoMsg.IOInfo"),
        ("attr", 10, F.TYPE_MESSAGE, "repeated", ".ChakraProtoMsg.AttributeProto"),
    ])
    for ename, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COMM_TYPES)):
        e = fd.enum_type.add(name=ename)
        for vname, v in values.items():
            e.value.add(name=vname, number=v)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fd.SerializeToString())

    def cls(name: str) -> type:
        desc = pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}")
        get = getattr(message_factory, "GetMessageClass", None)
        if get is not None:
            return get(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)  # protobuf < 4.22

    return SimpleNamespace(GlobalMetadata=cls("GlobalMetadata"), Node=cls("Node"),
                           AttributeProto=cls("AttributeProto"), IOInfo=cls("IOInfo"))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_et(metadata: Any, nodes: Iterable[Any]) -> bytes:
    """One Chakra ET file: the metadata message, then every node, each length-prefixed."""
    parts: list[bytes] = []
    for msg in (metadata, *nodes):
        body = msg.SerializeToString()
        parts.append(_varint(len(body)))
        parts.append(body)
    return b"".join(parts)


def decode_et(data: bytes, path: str | Path | None = None) -> tuple[Any, list[Any]]:
    """Parse a Chakra ET file's bytes (gzip-compressed or not) into (metadata, nodes).

    Raises:
        ChakraError: truncated or not a Chakra ET file.
    """
    from google.protobuf.message import DecodeError

    s = schema()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ChakraError(f"corrupt gzip data: {exc}", path) from None
    pos, n = 0, len(data)
    msgs: list[bytes] = []
    while pos < n:
        size, shift = 0, 0
        while True:
            if pos >= n:
                raise ChakraError("truncated Chakra ET file (inside a length prefix)", path)
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise ChakraError("not a Chakra ET file (bad length prefix)", path)
        if size == 0:  # Chakra's decoder stops at an empty message
            break
        if pos + size > n:
            raise ChakraError(f"truncated Chakra ET file (message of {size} bytes at offset "
                              f"{pos} runs past the end)", path)
        msgs.append(data[pos:pos + size])
        pos += size
    if not msgs:
        raise ChakraError("empty Chakra ET file (no GlobalMetadata)", path)
    try:
        meta = s.GlobalMetadata.FromString(msgs[0])
        nodes = [s.Node.FromString(m) for m in msgs[1:]]
    except DecodeError as exc:
        raise ChakraError(f"not a Chakra ET file: {exc}", path) from None
    return meta, nodes


def read_chakra(path: str | Path) -> tuple[Any, list[Any]]:
    """Read one ``.et`` file into (GlobalMetadata, [Node, ...]).

    Raises:
        ChakraError: unreadable, truncated or not a Chakra ET file.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ChakraError(f"cannot read: {exc.strerror or exc}", p) from None
    return decode_et(data, p)


def attrs(node: Any) -> dict[str, Any]:
    """A node's (or metadata's) attributes as ``{name: value}``."""
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        v = getattr(a, which) if which else None
        if which and which.endswith("_list"):
            v = list(v.values)
        out[a.name] = v
    return out


# ------------------------------------------------------------------------------ export


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
    from traincast.predict.prediction import Prediction, predict

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
    from traincast.errors import ParameterError
    from traincast.trace import arrow as A

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
            from traincast.costs.ops import event_work

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
            tname = _TYPE_NAMES.get(nd.type, str(nd.type))
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


_TYPE_NAMES = {v: k for k, v in NODE_TYPES.items()}


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


# ------------------------------------------------------------------------------ files


def et_paths(prefix: str | Path, ranks: Iterable[int]) -> dict[int, Path]:
    """``<prefix>.<rank>.et`` for each rank (the names ASTRA-sim opens)."""
    prefix = Path(prefix)
    return {r: prefix.parent / f"{prefix.name}.{r}.et" for r in ranks}


def write_chakra(trace: ChakraTrace, prefix: str | Path) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` per rank (and ``<prefix>.comm_groups.json`` when process
    groups other than the default one are used), each atomically.

    Raises:
        OutputError: the folder does not exist or is not writable.
    """
    import orjson

    from traincast.util.fileio import atomic_write

    out = []
    for r, path in et_paths(prefix, sorted(trace.nodes)).items():
        out.append(atomic_write(path, trace.encode(r), gzip_if_gz=False))
    if trace.comm_groups:
        p = Path(prefix)
        out.append(atomic_write(p.parent / f"{p.name}.comm_groups.json",
                                orjson.dumps(trace.comm_groups, option=orjson.OPT_INDENT_2)))
    return out


def export_chakra(source: Prediction | TraceSet, prefix: str | Path, **kwargs: Any
                  ) -> tuple[list[Path], ChakraTrace]:
    """:func:`to_chakra` then :func:`write_chakra`; returns (paths written, trace)."""
    trace = to_chakra(source, **kwargs)
    return write_chakra(trace, prefix), trace


def find_et_files(prefix: str | Path) -> dict[int, Path]:
    """The ``<prefix>.<rank>.et`` files that exist, by rank."""
    prefix = Path(prefix)
    rx = re.compile(re.escape(prefix.name) + r"\.(\d+)\.et$")
    out = {}
    if prefix.parent.is_dir():
        for p in prefix.parent.iterdir():
            m = rx.match(p.name)
            if m:
                out[int(m.group(1))] = p
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------ checks


def check_chakra(ranks: dict[int, list[Any]] | ChakraTrace | str | Path) -> dict[str, Any]:
    """Structural checks and the critical path of Chakra nodes (read back or in memory).

    Per rank: node count by type, ``data_deps``/``ctrl_deps`` counts, dependencies on ids
    that do not exist, duplicate ids, whether the dependencies form a DAG, and the longest
    path through it with node durations (µs; collectives count their own duration, without
    waiting for peers). ``makespan_us`` is the longest path over all ranks together, the
    members of each matched collective (attribute ``traincast_collective``) starting together
    once all of them are ready, as Chakra consumers run collectives; each rank's
    ``finish_us`` is its last node's end in that schedule, and ``start_drift_us`` compares the
    schedule's start of every non-communication node with its ``start_time_micros`` (the
    replayed start).

    Args:
        ranks: ``{rank: [Node, ...]}``, a :class:`ChakraTrace`, or a file prefix whose
            ``<prefix>.<rank>.et`` files are read.
    """
    if isinstance(ranks, ChakraTrace):
        ranks = ranks.nodes
    elif isinstance(ranks, (str, Path)):
        files = find_et_files(ranks)
        if not files:
            raise ChakraError("no <prefix>.<rank>.et file", ranks)
        ranks = {r: read_chakra(p)[1] for r, p in files.items()}
    report: dict[str, Any] = {"ranks": {}, "ok": True}
    # global graph: (rank, id) -> index
    gid: dict[tuple[int, int], int] = {}
    dur: list[int] = []
    recorded: list[int] = []
    is_comm: list[bool] = []
    deps: list[list[int]] = []
    coll: dict[int, list[int]] = {}
    for r, nodes in sorted(ranks.items()):
        ids = [int(nd.id) for nd in nodes]
        idset = set(ids)
        missing = sum(1 for nd in nodes for d in list(nd.data_deps) + list(nd.ctrl_deps)
                      if int(d) not in idset)
        types: dict[str, int] = {}
        for nd in nodes:
            t = _TYPE_NAMES.get(int(nd.type), str(int(nd.type)))
            types[t] = types.get(t, 0) + 1
        for nd in nodes:
            gid[(r, int(nd.id))] = len(dur)
            dur.append(int(nd.duration_micros))
            recorded.append(int(nd.start_time_micros))
            is_comm.append(int(nd.type) in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE))
            deps.append([])
        for nd in nodes:
            me = gid[(r, int(nd.id))]
            deps[me] = [gid[(r, int(d))] for d in list(nd.data_deps) + list(nd.ctrl_deps)
                        if int(d) in idset]
            for a in nd.attr:
                if a.name == COLLECTIVE_ATTR:
                    coll.setdefault(int(a.int64_val), []).append(me)
        local = [gid[(r, i)] for i in ids]
        acyclic, cp, path = _longest_path(local, dur, deps)
        rep = {
            "nodes": len(nodes), "by_type": types,
            "data_deps": sum(len(nd.data_deps) for nd in nodes),
            "ctrl_deps": sum(len(nd.ctrl_deps) for nd in nodes),
            "missing_deps": missing, "duplicate_ids": len(ids) - len(idset),
            "acyclic": acyclic, "critical_path_us": cp, "critical_path_nodes": len(path),
        }
        report["ranks"][r] = rep
        if missing or rep["duplicate_ids"] or not acyclic:
            report["ok"] = False
    # collectives: a barrier node per matched collective
    base = len(dur)
    for k, members in enumerate(coll.values()):
        b = base + k
        dur.append(0)
        deps.append(sorted({d for m in members for d in deps[m]}))
        for m in members:
            deps[m] = [b]
    acyclic, span, path, start = _schedule(list(range(len(dur))), dur, deps)
    report["makespan_us"] = span
    report["makespan_acyclic"] = acyclic
    report["collectives_synchronised"] = len(coll)
    report["nodes"] = base
    report["data_deps"] = sum(v["data_deps"] for v in report["ranks"].values())
    if not acyclic:
        report["ok"] = False
        return report
    # earliest start of every node in that schedule against its recorded start_time_micros
    drift = []
    for (r, _i), k in gid.items():
        rep = report["ranks"][r]
        rep["finish_us"] = max(rep.get("finish_us", 0), start[k] + dur[k])
        if not is_comm[k]:  # a collective's recorded start is its own arrival
            drift.append(start[k] - recorded[k])
    if drift and any(recorded):
        d = np.asarray(drift, np.int64)
        report["start_drift_us"] = {"mean_abs": float(np.abs(d).mean()),
                                    "max_early": int(-min(d.min(), 0)),
                                    "max_late": int(max(d.max(), 0))}
    return report


def _longest_path(members: list[int], dur: list[int], deps: list[list[int]]
                  ) -> tuple[bool, int, list[int]]:
    """(acyclic, length, path) of the longest path among ``members`` (node durations)."""
    acyclic, span, path, _ = _schedule(members, dur, deps)
    return acyclic, span, path


def _schedule(members: list[int], dur: list[int], deps: list[list[int]]
              ) -> tuple[bool, int, list[int], dict[int, int]]:
    """(acyclic, length, path, earliest starts) of the longest path among ``members``."""
    mset = set(members)
    indeg = dict.fromkeys(members, 0)
    succ: dict[int, list[int]] = {i: [] for i in members}
    for i in members:
        for d in deps[i]:
            if d in mset:
                indeg[i] += 1
                succ[d].append(i)
    ready = [i for i in members if indeg[i] == 0]
    finish: dict[int, int] = {}
    best_pred: dict[int, int] = {}
    start: dict[int, int] = dict.fromkeys(members, 0)
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        finish[i] = start[i] + dur[i]
        for j in succ[i]:
            if finish[i] >= start[j]:
                if finish[i] > start[j] or j not in best_pred:
                    best_pred[j] = i
                start[j] = finish[i]
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if done != len(members):
        return False, 0, [], start
    if not finish:
        return True, 0, [], start
    last = max(finish, key=lambda i: finish[i])
    path = [last]
    while path[-1] in best_pred:
        path.append(best_pred[path[-1]])
    return True, int(finish[last]), path[::-1], start
