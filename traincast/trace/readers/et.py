"""Reader of PyTorch execution traces (ET, "Chakra host traces"): one file -> node columns.

Linking the nodes to the Kineto events of the same rank is :mod:`traincast.trace.link`; the
argument values of a node (tensors, schemas, collective arguments) are decoded by
:mod:`traincast.trace.readers.et_args`.

An execution trace is written by ``torch.profiler.ExecutionTraceObserver``: one JSON object per
process with ``schema``, ``pid``, ``time``, ``start_ts``/``finish_ts`` (steady-clock ms, *not* the
Kineto clock) and ``nodes``, one node per ``RecordFunction`` (ATen op, user annotation,
``record_param_comms``...). Facts used here and where they come from:

* Node layout, schema ``1.0.1`` (PyTorch 2.0/2.1, e.g. the PARAM DLRM/linear samples): a flat
  object ``{id, name, parent, rf_id, fw_parent, seq_id, scope, tid, fw_tid, op_schema, inputs,
  input_shapes, input_types, outputs, output_shapes, output_types}``; PARAM
  ``et_replay/execution_trace.py`` ``ExecutionTrace._create_node_v1_0_1``.
* Node layout, schemas ``1.0.2-chakra.0.0.4`` .. ``1.1.x-chakra.0.0.4``: ``{id, name, ctrl_deps,
  inputs: {values, shapes, types, strides}, outputs: {...}, attrs: [{name, type, value}]}`` where
  ``attrs`` carries ``rf_id``, ``fw_parent``, ``seq_id``, ``scope``, ``tid``, ``fw_tid``,
  ``op_schema``, ``kernel_backend``, ``kernel_file``, ``tensor_range`` and, on
  ``record_param_comms`` nodes, ``collective_name``, ``dtype``, ``in_msg_nelems``,
  ``out_msg_nelems``, ``in_split_size``, ``out_split_size``, ``global_rank_start``,
  ``global_rank_stride``, ``pg_name``, ``pg_desc``, ``pg_size``; PyTorch
  ``torch/csrc/profiler/standalone/execution_trace_observer.cpp`` ``writeJsonNode`` and
  ``getCommsNodeAttrs``; PARAM ``ExecutionTrace._create_node_v1_0_2_chakra_0_0_4`` /
  ``_read_attrs`` / ``_read_comm_attrs``. The reader decides per node (``ctrl_deps``/``attrs``
  present or not), so unknown minor versions of either layout still load.
* Ids: one counter (starting at 2; 1 is the process root, whose parent is itself) numbers both
  operator nodes and tensors; an op gets its id when it *starts* (``recordOperatorStart``), after
  its input tensors, so id order is start order across all threads and a parent's id is below its
  children's. Nodes are written when they *end*, so file order is post-order; this reader sorts
  by id. ``tid`` is the RecordFunction thread id (1, 2, ...), not the OS thread id.
* ``rf_id`` is ``RecordFunction::handle()``, the same number newer Kineto traces record as
  ``args["Record function id"]`` on ``cpu_op``/``user_annotation`` events
  (``torch/csrc/autograd/profiler_kineto.cpp``, ``record_function_id_``).
* A tensor value is ``[tensor_id, storage_id, offset, numel, itemsize, device]``
  (``convertIValue``; PARAM ``TensorNode``); lists and tuples of tensors nest these
  (types ``GenericList[...]``/``Tuple[...]``). ``tensor_id`` identifies the ``TensorImpl`` by
  address, so a freed and re-allocated TensorImpl can reuse an id.
* ``record_param_comms`` inputs in ``1.0.x``: ``[InputTensors, seq, pg_ptr, rank, colName,
  inSplitSizes, outSplitSizes]`` (with data) or ``[seq, pg_ptr, rank, colName, ...]`` (``wait``,
  ``barrier``); newer layouts put ``pgName`` (a tuple) where ``pg_ptr`` was and append
  ``globalRankStart, globalRankStride, worldSize``. PyTorch
  ``torch/csrc/distributed/c10d/ParamCommsUtils.hpp`` ``RECORD_PARAM_COMMS(_DATA)``; PARAM
  ``et_replay/comm/commsTraceParser.py`` ``_parseExecutionTrace`` (which also sums ``numel``
  of the first input/output to get message sizes in elements, as done here).
"""


from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from traincast.errors import TraceFormatError
from traincast.trace import arrow as A
from traincast.trace.readers.et_args import (
    CommArgs,
    arg_tensors,
    comm_from_c10d,
    comm_from_record_param,
    mutable_positions,
)
from traincast.trace.readers.jsonscan import read_maybe_gzipped

__all__ = [
    "DATA_DEPS_SCHEMA",
    "NODES_SCHEMA",
    "ExecutionTrace",
    "read_execution_trace",
]

# --------------------------------------------------------------------------------------------
# Output schemas
# --------------------------------------------------------------------------------------------

#: Arrow schema of :attr:`ExecutionTrace.nodes` (one row per ET node, sorted by ``id``).
NODES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("parent", pa.int64()),  # ctrl dep (enclosing node); -1 for the process root
        pa.field("rf_id", pa.int64()),  # RecordFunction handle, -1 if absent (0 on root nodes)
        pa.field("tid", pa.int64()),  # RecordFunction thread id (1, 2, ...), -1 if unknown
        pa.field("fw_tid", pa.int64()),  # forward thread of an autograd op, 0 if none
        pa.field("fw_parent", pa.int64()),  # forward-thread parent of an autograd op, 0 if none
        pa.field("seq_id", pa.int64()),  # autograd sequence number, -1 if none
        pa.field("scope", pa.int32()),  # at::RecordScope (0 FUNCTION, 7 USER_SCOPE...)
        pa.field("op_schema", pa.string()),  # "" for annotations
        pa.field("input_shapes", pa.string()),  # JSON text, e.g. "[[64, 128], []]"
        pa.field("input_types", pa.string()),  # JSON text, e.g. '["Tensor(float)", "Int"]'
        pa.field("output_shapes", pa.string()),
        pa.field("output_types", pa.string()),
        pa.field("is_op", pa.bool_()),  # operator (has op_schema / record_param_comms / triton)
        pa.field("top_op", pa.int64()),  # id of the outermost enclosing operator, -1 if none
        pa.field("is_comm", pa.bool_()),  # record_param_comms or c10d:: op
        pa.field("comm_collective", pa.string()),  # as recorded: all_to_allv, allreduce, wait..
        pa.field("comm_seq", pa.int64()),  # per-process-group sequence number, -1 if unknown
        pa.field("comm_rank", pa.int64()),  # `rank` argument of record_param_comms, -1 unknown
        pa.field("comm_pg_name", pa.string()),  # process group name, "" if unknown
        pa.field("comm_pg_desc", pa.string()),  # process group description, "" if unknown
        pa.field("comm_pg_size", pa.int64()),  # -1 if unknown
        pa.field("comm_group_ranks", pa.list_(pa.int32())),  # global ranks, [] if unknown
        pa.field("comm_in_elems", pa.int64()),  # input message size in elements, -1 unknown
        pa.field("comm_out_elems", pa.int64()),  # output message size in elements, -1 unknown
        pa.field("comm_dtype", pa.string()),  # torch dtype name (float32, bfloat16...), ""
        pa.field("comm_itemsize", pa.int64()),  # bytes per element, -1 if unknown
        pa.field("comm_in_split", pa.string()),  # JSON list (all_to_allv), "" if none
        pa.field("comm_out_split", pa.string()),
    ]
)

#: Arrow schema of :attr:`ExecutionTrace.data_deps`.
DATA_DEPS_SCHEMA = pa.schema(
    [
        pa.field("src", pa.int64()),  # node id of the top-level op that last wrote the tensor
        pa.field("dst", pa.int64()),  # node id of the top-level op that reads it (src < dst)
        pa.field("tensor", pa.int64()),  # one tensor id carrying the dependency (the smallest)
    ]
)



# --------------------------------------------------------------------------------------------
# Decoding structs (only the fields used; everything else is skipped by msgspec)
# --------------------------------------------------------------------------------------------

_EMPTY = msgspec.Raw(b"[]")


class _IO(msgspec.Struct, gc=False):
    values: list[Any] = []
    shapes: msgspec.Raw = _EMPTY
    types: msgspec.Raw = _EMPTY


class _Attr(msgspec.Struct, gc=False):
    name: str = ""
    value: Any = None


class _Node(msgspec.Struct, gc=False):
    id: int
    name: str = ""
    # schema 1.0.1 (flat)
    parent: int | None = None
    rf_id: int | None = None
    tid: int | None = None
    fw_tid: int | None = None
    fw_parent: int | None = None
    seq_id: int | None = None
    scope: int | None = None
    op_schema: str | None = None
    inputs: list[Any] | _IO = []
    input_shapes: msgspec.Raw = _EMPTY
    input_types: msgspec.Raw = _EMPTY
    outputs: list[Any] | _IO = []
    output_shapes: msgspec.Raw = _EMPTY
    output_types: msgspec.Raw = _EMPTY
    # schemas 1.0.2-chakra .. 1.1.x-chakra
    ctrl_deps: int | None = None
    attrs: list[_Attr] = []


class _Trace(msgspec.Struct):
    schema: str = ""
    pid: int = -1
    time: Any = None
    start_ts: Any = None
    finish_ts: Any = None
    nodes: list[_Node] | None = None


_NOIO = _IO()
_NOATTRS: dict[str, Any] = {}
_DECODER = msgspec.json.Decoder(_Trace)
_STRLIST = msgspec.json.Decoder(list[str])


# --------------------------------------------------------------------------------------------
# The execution trace
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionTrace:
    """One process's execution trace, as columns.

    Attributes:
        schema: the file's ``schema`` string, e.g. ``"1.0.1"`` or ``"1.1.1-chakra.0.0.4"``.
        pid: OS process id recorded by the observer (-1 if absent).
        metadata: the other top-level fields (``time``, ``start_ts``, ``finish_ts``).
        nodes: :data:`NODES_SCHEMA` table, one row per node, sorted by ``id``.
        data_deps: :data:`DATA_DEPS_SCHEMA` table of data dependencies between top-level ops.
        path: the file read, if any.
        devices: device types (``cpu``, ``cuda``, ...) named by the tensors' device field and
            the ``Device`` arguments of the nodes.
    """

    schema: str
    pid: int
    metadata: dict[str, Any]
    nodes: pa.Table
    data_deps: pa.Table
    path: str | None = None
    _index: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    #: device types the recorded tensors and ``Device`` arguments name (``{"cpu", "cuda"}``)
    devices: frozenset[str] = frozenset()

    @property
    def num_nodes(self) -> int:
        return self.nodes.num_rows

    def row_of(self, node_id: int) -> int:
        """Row in :attr:`nodes` of node ``node_id`` (``KeyError`` if absent)."""
        if not self._index:
            ids = self.nodes.column("id").to_numpy()
            self._index.update(zip(ids.tolist(), range(len(ids)), strict=True))
        return self._index[node_id]


def read_execution_trace(path: str | Path, *,
                         max_inflate_bytes: int | None = None) -> ExecutionTrace:
    """Read a PyTorch execution trace (plain or gzipped JSON) into an :class:`ExecutionTrace`.

    ``nodes`` columns are described in :data:`NODES_SCHEMA`. Shapes and types are kept as JSON
    text (``msgspec`` formatting with ``indent=0``: ``"[[64, 128], []]"``), exactly as nested
    as recorded (a ``GenericList[Tensor(float)]`` input has shape ``[[394241]]``).

    Operators and top-level ops: a node is an operator (``is_op``) if it has an ``op_schema``,
    is ``record_param_comms`` or is a Triton kernel (PARAM ``Node.detect_type``, except that
    ``c10d::`` ops with a schema count as operators too: newer PyTorch with gloo records no
    ``record_param_comms`` at all). ``top_op`` is the id of the outermost operator enclosing a
    node (itself if it is one), -1 for annotations outside any operator.

    Data dependencies (``data_deps``) are between *top-level* ops, the granularity at which
    ops are replayed and Kineto cpu_ops launch work: every read and write of a node is
    attributed to its ``top_op``; top-level ops are visited in id (start) order, each reading
    (all inputs of its subtree) before writing; a read of a tensor depends on the last earlier
    top-level op that wrote it. Writes are outputs plus inputs marked mutable in the op schema
    (``Tensor(a!)``), which covers ops like ``_foreach_add_`` that return nothing. Tensors are
    keyed by ``tensor_id``; tensors without storage (undefined, device ``""``) are ignored.
    Every edge has ``src < dst``, so the graph is acyclic.

    Raises:
        TraceFormatError: unreadable, truncated or corrupt gzip, invalid JSON, or JSON that
            is not an execution trace (no ``nodes`` list, values of impossible types or
            sizes, parent links that form a cycle); not a regular file
            (:class:`~traincast.errors.NotRegularFileError`);
            :class:`~traincast.errors.InputTooLargeError` when gzipped data inflates
            past ``max_inflate_bytes`` (see :func:`traincast.trace.readers.jsonscan.max_inflate_bytes`).
    """
    p = Path(path)
    raw = read_maybe_gzipped(p, max_inflate_bytes)
    if not raw.strip():
        raise TraceFormatError("empty file, not an execution trace", p)
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(f"not a PyTorch execution trace: {exc}", p) from exc
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"invalid or truncated JSON: {exc}", p) from exc
    if doc.nodes is None:
        raise TraceFormatError(
            "no `nodes` list: not a PyTorch execution trace (a Kineto trace has `traceEvents`)",
            p,
        )
    try:
        nodes, deps, devices = _build_tables(doc.nodes, p)
    except (OverflowError, pa.ArrowInvalid) as exc:  # ids etc. beyond int64 (int32 scope)
        raise TraceFormatError(f"a number out of range ({exc})", p) from None
    except UnicodeDecodeError as exc:  # shapes and types are kept as raw JSON text
        raise TraceFormatError(f"text is not UTF-8 ({exc.reason})", p) from None
    meta = {"time": doc.time, "start_ts": doc.start_ts, "finish_ts": doc.finish_ts}
    return ExecutionTrace(doc.schema, doc.pid, meta, nodes, deps, str(p),
                          devices=frozenset(devices))


# --------------------------------------------------------------------------------------------
# Reading: nodes -> columns
# --------------------------------------------------------------------------------------------


def _fmt(raw: bytes) -> str:
    return msgspec.json.format(raw, indent=0).decode() if raw else "[]"



def _build_tables(nodes: list[_Node], path: Path
                  ) -> tuple[pa.Table, pa.Table, set[str]]:
    nodes.sort(key=attrgetter("id"))
    devices: set[str] = set()
    n = len(nodes)
    ids = [0] * n
    names = [""] * n
    parents = [-1] * n
    rf = [-1] * n
    tids = [-1] * n
    fw_tids = [0] * n
    fw_parents = [0] * n
    seqs = [-1] * n
    scopes = [0] * n
    schemas = [""] * n
    ishapes = [""] * n
    itypes = [""] * n
    oshapes = [""] * n
    otypes = [""] * n
    is_op = [False] * n
    is_comm = [False] * n
    comms: dict[int, CommArgs] = {}
    reads: list[list[int]] = [[]] * n
    writes: list[list[int]] = [[]] * n

    shape_text: dict[bytes, str] = {}  # memo: the same shapes/types recur across nodes
    type_info: dict[bytes, tuple[str, list[str]]] = {}

    def shapes(raw: msgspec.Raw) -> str:
        key = bytes(raw)
        text = shape_text.get(key)
        if text is None:
            text = shape_text[key] = _fmt(key)
        return text

    def types(raw: msgspec.Raw, node_id: int) -> tuple[str, list[str]]:
        key = bytes(raw)
        info = type_info.get(key)
        if info is None:
            try:
                info = type_info[key] = (_fmt(key), _STRLIST.decode(key) if key else [])
            except msgspec.DecodeError as exc:
                raise TraceFormatError(f"node {node_id}: bad types list ({exc})", path) from exc
        return info

    for r, nd in enumerate(nodes):
        ids[r] = nd.id
        names[r] = nd.name
        if nd.attrs or nd.ctrl_deps is not None or isinstance(nd.inputs, _IO):
            attrs = {a.name: a.value for a in nd.attrs}
            parent = nd.ctrl_deps
            ins = nd.inputs if isinstance(nd.inputs, _IO) else _NOIO
            outs = nd.outputs if isinstance(nd.outputs, _IO) else _NOIO
            in_vals, in_sh, in_ty = ins.values, ins.shapes, ins.types
            out_vals, out_sh, out_ty = outs.values, outs.shapes, outs.types
            get = attrs.get
            rf_v, tid_v, fwt_v, fwp_v = get("rf_id"), get("tid"), get("fw_tid"), get("fw_parent")
            seq_v, scope_v, schema_v = get("seq_id"), get("scope"), get("op_schema")
        else:
            attrs = _NOATTRS
            parent = nd.parent
            in_vals = nd.inputs if isinstance(nd.inputs, list) else []
            out_vals = nd.outputs if isinstance(nd.outputs, list) else []
            in_sh, in_ty = nd.input_shapes, nd.input_types
            out_sh, out_ty = nd.output_shapes, nd.output_types
            rf_v, tid_v, fwt_v, fwp_v = nd.rf_id, nd.tid, nd.fw_tid, nd.fw_parent
            seq_v, scope_v, schema_v = nd.seq_id, nd.scope, nd.op_schema

        parents[r] = -1 if parent is None or parent == nd.id else int(parent)
        rf[r] = int(rf_v) if isinstance(rf_v, int) else -1
        tids[r] = int(tid_v) if isinstance(tid_v, int) else -1
        fw_tids[r] = int(fwt_v) if isinstance(fwt_v, int) else 0
        fw_parents[r] = int(fwp_v) if isinstance(fwp_v, int) else 0
        seqs[r] = int(seq_v) if isinstance(seq_v, int) else -1
        scopes[r] = int(scope_v) if isinstance(scope_v, int) else 0
        op_schema = schema_v if isinstance(schema_v, str) else ""
        schemas[r] = op_schema
        ishapes[r] = shapes(in_sh)
        oshapes[r] = shapes(out_sh)
        itypes[r], in_types = types(in_ty, nd.id)
        otypes[r], out_types = types(out_ty, nd.id)

        name = nd.name
        kb = attrs.get("kernel_backend")
        is_op[r] = bool(op_schema) or name == "record_param_comms" or kb == "triton"
        in_t = arg_tensors(in_vals, in_types) if in_vals else []
        out_t = arg_tensors(out_vals, out_types) if out_vals else []
        for _, t in in_t:
            if len(t) > 5 and isinstance(t[5], str) and t[5]:
                devices.add(t[5].split(":", 1)[0])
        if "Device" in in_types:
            for v, ty in zip(in_vals, in_types, strict=False):
                if ty == "Device" and isinstance(v, str) and v:
                    devices.add(v.split(":", 1)[0])
        if in_t:
            reads[r] = [int(t[0]) for _, t in in_t if t[5]]
            mut = mutable_positions(op_schema) if op_schema else frozenset()
            if mut:
                writes[r] = [int(t[0]) for i, t in in_t if i in mut and t[5]]
        if out_t:
            w = [int(t[0]) for _, t in out_t if t[5]]
            writes[r] = writes[r] + w if writes[r] else w

        if name == "record_param_comms":
            is_comm[r] = True
            comms[r] = comm_from_record_param(in_vals, in_types, out_types, in_t, out_t, attrs)
        elif name.startswith("c10d::"):
            is_comm[r] = True
            comms[r] = comm_from_c10d(name, op_schema, in_types, in_t)

    # top-level operator of every node (parents have smaller ids, so one pass in id order)
    row_of = {i: r for r, i in enumerate(ids)}
    cycle = _parent_cycle(ids, parents, row_of)
    if cycle:
        shown = " -> ".join(map(str, cycle[:6])) + (" -> ..." if len(cycle) > 6 else "")
        raise TraceFormatError(f"parent links form a cycle (nodes {shown} -> {cycle[0]})",
                               path)
    top = [-1] * n
    for r in range(n):
        pr = row_of.get(parents[r], -1)
        ptop = top[pr] if pr >= 0 else -1
        top[r] = ptop if ptop >= 0 else (ids[r] if is_op[r] else -1)

    deps = _data_deps(top, reads, writes)

    none = CommArgs()
    cols = {
        "id": A.column(ids, pa.int64()),
        "name": A.column(names, pa.string()),
        "parent": A.column(parents, pa.int64()),
        "rf_id": A.column(rf, pa.int64()),
        "tid": A.column(tids, pa.int64()),
        "fw_tid": A.column(fw_tids, pa.int64()),
        "fw_parent": A.column(fw_parents, pa.int64()),
        "seq_id": A.column(seqs, pa.int64()),
        "scope": A.column(scopes, pa.int32()),
        "op_schema": A.column(schemas, pa.string()),
        "input_shapes": A.column(ishapes, pa.string()),
        "input_types": A.column(itypes, pa.string()),
        "output_shapes": A.column(oshapes, pa.string()),
        "output_types": A.column(otypes, pa.string()),
        "is_op": A.column(is_op, pa.bool_()),
        "top_op": A.column(top, pa.int64()),
        "is_comm": A.column(is_comm, pa.bool_()),
    }
    comm_cols = {
        "comm_collective": ("collective", pa.string()),
        "comm_seq": ("seq", pa.int64()),
        "comm_rank": ("rank", pa.int64()),
        "comm_pg_name": ("pg_name", pa.string()),
        "comm_pg_desc": ("pg_desc", pa.string()),
        "comm_pg_size": ("pg_size", pa.int64()),
        "comm_group_ranks": ("ranks", pa.list_(pa.int32())),
        "comm_in_elems": ("in_elems", pa.int64()),
        "comm_out_elems": ("out_elems", pa.int64()),
        "comm_dtype": ("dtype", pa.string()),
        "comm_itemsize": ("itemsize", pa.int64()),
        "comm_in_split": ("in_split", pa.string()),
        "comm_out_split": ("out_split", pa.string()),
    }
    for col, (attr, typ) in comm_cols.items():
        values = [getattr(none, attr)] * n  # the few comm nodes set over the defaults
        for r, c in comms.items():
            values[r] = getattr(c, attr)
        cols[col] = A.column(values, typ)
    table = pa.Table.from_arrays(list(cols.values()), schema=NODES_SCHEMA)
    return table, deps, devices


def _parent_cycle(ids: list[int], parents: list[int], row_of: dict[int, int]) -> list[int]:
    """The node ids of one cycle of parent links (empty when there is none): every walk up
    the parents must end (at -1 or an id that is no node). Linear time, no recursion."""
    if all(p < i for i, p in zip(ids, parents, strict=True)):
        return []  # parents below their children (as PyTorch numbers them): no cycle
    state = [0] * len(ids)  # 0 unseen, 1 on the current walk, 2 known to end
    for r in range(len(ids)):
        walk = []
        x = r
        while x >= 0 and state[x] == 0:
            state[x] = 1
            walk.append(x)
            x = row_of.get(parents[x], -1)
        if x >= 0 and state[x] == 1:
            return [ids[i] for i in walk[walk.index(x):]]
        for i in walk:
            state[i] = 2
    return []


def _data_deps(top: list[int], reads: list[list[int]], writes: list[list[int]]) -> pa.Table:
    """Last-writer data dependencies between top-level ops (see :func:`read_execution_trace`)."""
    group_reads: dict[int, list[int]] = defaultdict(list)
    group_writes: dict[int, list[int]] = defaultdict(list)
    for r, t in enumerate(top):
        if t < 0:
            continue
        if reads[r]:
            group_reads[t].extend(reads[r])
        if writes[r]:
            group_writes[t].extend(writes[r])
    last: dict[int, int] = {}
    edges: dict[tuple[int, int], int] = {}
    for op in sorted(set(group_reads) | set(group_writes)):
        for tensor in group_reads.get(op, ()):
            src = last.get(tensor)
            if src is not None and src != op:
                key = (src, op)
                prev = edges.get(key)
                if prev is None or tensor < prev:
                    edges[key] = tensor
        for tensor in group_writes.get(op, ()):
            last[tensor] = op
    if edges:
        keys = sorted(edges)
        src = [k[0] for k in keys]
        dst = [k[1] for k in keys]
        ten = [edges[k] for k in keys]
    else:
        src, dst, ten = [], [], []
    return pa.Table.from_arrays(
        [A.column(src, pa.int64()), A.column(dst, pa.int64()), A.column(ten, pa.int64())],
        schema=DATA_DEPS_SCHEMA,
    )
