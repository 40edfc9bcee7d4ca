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
import numpy as np
import pyarrow as pa

from traincast.errors import TraceFormatError
from traincast.trace import arrow as A
from traincast.trace.readers.et_args import (
    CommArgs,
    comm_from_c10d,
    comm_from_record_param,
    mutable_positions,
    tensors_at,
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


def _as_int(values: list[Any], default: int) -> list[int]:
    """``int(v)`` of every int (bools included, as ``isinstance`` sees them), else ``default``."""
    return [v if v.__class__ is int else (int(v) if isinstance(v, int) else default)
            for v in values]


class _Layouts:
    """The raw fields of every node, whichever of the two layouts it has (per node: a node
    with ``attrs``, ``ctrl_deps`` or ``{values, shapes, types}`` inputs is of the newer one)."""

    def __init__(self, nodes: list[_Node]) -> None:
        newer = [bool(nd.attrs) or nd.ctrl_deps is not None or nd.inputs.__class__ is _IO
                 for nd in nodes]
        self.nodes = nodes
        self.all_flat = not any(newer)
        if self.all_flat:
            self.attrs: list[dict[str, Any]] = [_NOATTRS] * len(nodes)
            self.newer = newer
            return
        self.newer = newer
        self.attrs = [{a.name: a.value for a in nd.attrs} if nw else _NOATTRS
                      for nd, nw in zip(nodes, newer, strict=True)]

    def field(self, flat: str, attr: str) -> list[Any]:
        """Field ``flat`` of the flat nodes, attribute ``attr`` of the newer ones (None where
        absent)."""
        get = attrgetter(flat)
        if self.all_flat:
            return list(map(get, self.nodes))
        return [a.get(attr) if nw else get(nd)
                for nd, nw, a in zip(self.nodes, self.newer, self.attrs, strict=True)]

    def io(self, which: str) -> tuple[list[list[Any]], list[msgspec.Raw], list[msgspec.Raw]]:
        """(values, shapes, types) of ``inputs`` or ``outputs`` of every node."""
        raw = list(map(attrgetter(which), self.nodes))
        if self.all_flat:
            vals = [v if v.__class__ is list else [] for v in raw]
            return (vals, list(map(attrgetter(f"{which[:-1]}_shapes"), self.nodes)),
                    list(map(attrgetter(f"{which[:-1]}_types"), self.nodes)))
        flat_sh, flat_ty = attrgetter(f"{which[:-1]}_shapes"), attrgetter(f"{which[:-1]}_types")
        vals, shs, tys = [], [], []
        for nd, nw, v in zip(self.nodes, self.newer, raw, strict=True):
            if nw:
                if v.__class__ is not _IO:
                    v = _NOIO
                vals.append(v.values)
                shs.append(v.shapes)
                tys.append(v.types)
            else:
                vals.append(v if v.__class__ is list else [])
                shs.append(flat_sh(nd))
                tys.append(flat_ty(nd))
        return vals, shs, tys


class _TypeInfo:
    """Memo of the text forms of shapes and types lists (the same ones recur across nodes)
    and, per types list, the arguments that may hold tensors and whether one is a Device."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.shape_text: dict[bytes, str] = {}
        self.type_info: dict[bytes, tuple[str, list[str], tuple[int, ...], bool]] = {}

    def shapes(self, raws: list[msgspec.Raw]) -> list[str]:
        memo = self.shape_text
        keys = list(map(bytes, raws))
        out = list(map(memo.get, keys))
        for r, text in enumerate(out):
            if text is None:
                key = keys[r]
                text = memo.get(key)
                out[r] = text if text is not None else memo.setdefault(key, _fmt(key))
        return out

    def types(self, raws: list[msgspec.Raw], ids: list[int]
              ) -> list[tuple[str, list[str], tuple[int, ...], bool]]:
        memo = self.type_info
        keys = list(map(bytes, raws))
        out = list(map(memo.get, keys))
        for r, info in enumerate(out):
            if info is not None:
                continue
            key = keys[r]
            info = memo.get(key)
            if info is None:
                try:
                    names = _STRLIST.decode(key) if key else []
                except msgspec.DecodeError as exc:
                    raise TraceFormatError(f"node {ids[r]}: bad types list ({exc})",
                                           self.path) from exc
                info = memo[key] = (_fmt(key), names,
                                    tuple(i for i, t in enumerate(names) if "Tensor" in t),
                                    "Device" in names)
            out[r] = info
        return out


def _tensor_ids(values: list[Any], positions: tuple[int, ...], mutable: frozenset[int],
                devices: set[str] | None) -> tuple[list[int], list[int]]:
    """Ids of the tensors (with a device) of the arguments at ``positions`` (ascending) of
    ``values``, as :func:`~traincast.trace.readers.et_args.tensors_at` finds them, and of
    those among them at ``mutable`` positions; their devices are added to ``devices`` (when
    given)."""
    ids: list[int] = []
    written: list[int] = []
    for i, t in tensors_at(values, positions):
        if t[5]:
            if devices is not None:
                devices.add(t[5])
            ids.append(int(t[0]))
            if i in mutable:
                written.append(int(t[0]))
    return ids, written


def _build_tables(nodes: list[_Node], path: Path
                  ) -> tuple[pa.Table, pa.Table, set[str]]:
    nodes.sort(key=attrgetter("id"))
    n = len(nodes)
    lay = _Layouts(nodes)
    ids = [nd.id for nd in nodes]
    names = [nd.name for nd in nodes]
    parents = [-1 if p is None or p == i else int(p) for p, i in
               zip([nd.ctrl_deps if nw else nd.parent
                    for nd, nw in zip(nodes, lay.newer, strict=True)], ids, strict=True)]
    rf = _as_int(lay.field("rf_id", "rf_id"), -1)
    tids = _as_int(lay.field("tid", "tid"), -1)
    fw_tids = _as_int(lay.field("fw_tid", "fw_tid"), 0)
    fw_parents = _as_int(lay.field("fw_parent", "fw_parent"), 0)
    seqs = _as_int(lay.field("seq_id", "seq_id"), -1)
    scopes = _as_int(lay.field("scope", "scope"), 0)
    schemas = [s if isinstance(s, str) else "" for s in lay.field("op_schema", "op_schema")]
    in_vals, in_sh, in_ty = lay.io("inputs")
    out_vals, out_sh, out_ty = lay.io("outputs")
    memo = _TypeInfo(path)
    ishapes = memo.shapes(in_sh)
    oshapes = memo.shapes(out_sh)
    in_info = memo.types(in_ty, ids)
    out_info = memo.types(out_ty, ids)
    itypes = [t[0] for t in in_info]
    otypes = [t[0] for t in out_info]
    is_op = [bool(s) or name == "record_param_comms" or a.get("kernel_backend") == "triton"
             for s, name, a in zip(schemas, names, lay.attrs, strict=True)]
    is_comm = [False] * n
    comms: dict[int, CommArgs] = {}
    reads: list[list[int]] = [[]] * n
    writes: list[list[int]] = [[]] * n

    dev_names: set[str] = set()  # device fields of input tensors and Device arguments
    muts: dict[str, frozenset[int]] = {"": frozenset()}
    for r, iv, ii, ov, oi in zip(range(n), in_vals, in_info, out_vals, out_info, strict=True):
        name = names[r]
        if name == "record_param_comms" or name.startswith("c10d::"):
            in_t = tensors_at(iv, ii[2]) if iv and ii[2] else []
            out_t = tensors_at(ov, oi[2]) if ov and oi[2] else []
            is_comm[r] = True
            comms[r] = (comm_from_record_param(iv, ii[1], oi[1], in_t, out_t, lay.attrs[r])
                        if name == "record_param_comms" else
                        comm_from_c10d(name, schemas[r], ii[1], in_t))
        if iv and ii[2]:
            op_schema = schemas[r]
            mut = muts.get(op_schema)
            if mut is None:
                mut = muts[op_schema] = mutable_positions(op_schema)
            rd, wr = _tensor_ids(iv, ii[2], mut, dev_names)
            reads[r] = rd
            if wr:
                writes[r] = wr
        if ii[3]:
            for v, ty in zip(iv, ii[1], strict=False):
                if ty == "Device" and isinstance(v, str) and v:
                    dev_names.add(v)
        if ov and oi[2]:
            w, _ = _tensor_ids(ov, oi[2], muts[""], None)
            if w:
                writes[r] = writes[r] + w if writes[r] else w
    devices = {d.split(":", 1)[0] for d in dev_names}

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
    rows = sorted(comms)
    for col, (attr, typ) in comm_cols.items():  # the few comm nodes set over the defaults
        cols[col] = _sparse_column(n, rows, [getattr(comms[r], attr) for r in rows],
                                   getattr(none, attr), typ)
    table = pa.Table.from_arrays(list(cols.values()), schema=NODES_SCHEMA)
    return table, deps, devices


def _default_column(n: int, default: Any, typ: pa.DataType) -> pa.Array:
    """``n`` copies of ``default`` (an int, ``""`` or ``[]``) as a ``typ`` column."""
    if pa.types.is_string(typ):
        assert default == ""
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)),
                                              pa.py_buffer(b"")])
    if pa.types.is_list(typ):
        assert default == []
        assert typ.value_type == pa.int32()
        return pa.ListArray.from_arrays(A.from_numpy(np.zeros(n + 1, np.int32)),
                                        A.from_numpy(np.zeros(0, np.int32)))
    assert typ == pa.int64()
    return A.from_numpy(np.full(n, default, np.int64))


def _sparse_column(n: int, rows: list[int], values: list[Any], default: Any,
                   typ: pa.DataType) -> pa.Array:
    """A ``typ`` column of ``n`` rows holding ``values`` at ``rows`` (ascending) and
    ``default`` elsewhere; ``values`` are converted (and refused) as :func:`A.column` does."""
    full = _default_column(n, default, typ)
    if not rows:
        return full
    small = A.column(values, typ)
    pieces, at = [], 0
    for j, r in enumerate(rows):
        if r > at:
            pieces.append(full.slice(at, r - at))
        pieces.append(small.slice(j, 1))
        at = r + 1
    if at < n:
        pieces.append(full.slice(at, n - at))
    return pa.concat_arrays(pieces)


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
