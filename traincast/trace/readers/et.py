"""Reader of PyTorch execution traces (ET, "Chakra host traces"), and their link to Kineto events.

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

import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traincast.errors import ExecutionTraceMismatchError, TraceFormatError
from traincast.trace.readers.jsonscan import read_maybe_gzipped

__all__ = [
    "DATA_DEPS_SCHEMA",
    "LINK_SCHEMA",
    "MAX_NAME_CONFLICT_FRACTION",
    "MIN_MATCH_SCORE",
    "NODES_SCHEMA",
    "ExecutionTrace",
    "link_execution_trace",
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

#: Arrow schema of the table returned by :func:`link_execution_trace`.
LINK_SCHEMA = pa.schema([pa.field("node_id", pa.int64()), pa.field("event", pa.int64())])

#: Below this match score (see :func:`link_execution_trace`) an ET and a Kineto trace are
#: declared to come from different runs. Measured on the samples: every same-run pair scores
#: 1.00 (dlrm ranks 0-7: 1672/1672 nodes; linear 928/928; HTA simple_add 36/36; a torch 2.13
#: ET in rf_id mode 112/112) except a gloo run at 0.95 (18/19, its process-group init node was
#: recorded before the profiler started); different runs score 0.08-0.17 (linear ET vs dlrm
#: Kineto, dlrm vs linear, HTA vs dlrm) and 0.46 for the worst case found, a small torch 2.13
#: MLP's ET against linear's (also MLP) Kineto trace, where a fragment of identical op names
#: aligns. 0.6 leaves room on both sides. Two runs of the same program with the same op
#: sequence (dlrm rank 0 ET vs rank 3 Kineto: 1.00) cannot be told apart by names and order.
MIN_MATCH_SCORE = 0.6

#: In rf_id mode, above this fraction of rf_id hits whose names differ, the pair is declared to
#: come from different runs (a same-run pair has equal names on every shared rf_id).
MAX_NAME_CONFLICT_FRACTION = 0.1

_LOOKAHEAD = 64  # order matching: how far either sequence may skip to resync (PARAM uses 20)
_CONFIRM = 3  # order matching: codes that must agree after a skip for it to count as confirmed
_NGRAM = 4  # order matching: n-gram length used to find where the ET sits in the Kineto thread
_MAX_VOTES = 2_000_000  # cap on n-gram votes per thread pair (subsample ET positions above it)

_ROOT_RE = re.compile(r"^\[pytorch\|profiler\|execution_(graph|trace)\|(process|thread)\]$")

# dtype spellings: caffe2 TypeMeta names (tensor types, "Tensor(long int)") and c10 ScalarType
# names (record_param_comms `dtype` attr, "Long") -> torch names.
_DTYPES = {
    "float": "float32", "Float": "float32", "double": "float64", "Double": "float64",
    "c10::Half": "float16", "Half": "float16", "c10::BFloat16": "bfloat16",
    "BFloat16": "bfloat16", "long int": "int64", "Long": "int64", "int": "int32", "Int": "int32",
    "short int": "int16", "Short": "int16", "signed char": "int8", "Char": "int8",
    "unsigned char": "uint8", "Byte": "uint8", "bool": "bool", "Bool": "bool",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2", "Float8_e5m2": "float8_e5m2",
    "c10::complex<float>": "complex64", "ComplexFloat": "complex64",
    "c10::complex<double>": "complex128", "ComplexDouble": "complex128",
}  # fmt: skip


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
# Public API
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
    """

    schema: str
    pid: int
    metadata: dict[str, Any]
    nodes: pa.Table
    data_deps: pa.Table
    path: str | None = None
    _index: dict[int, int] = field(default_factory=dict, repr=False, compare=False)

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
            sizes); :class:`~traincast.errors.InputTooLargeError` when gzipped data inflates
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
        nodes, deps = _build_tables(doc.nodes, p)
    except (OverflowError, pa.ArrowInvalid) as exc:  # ids etc. beyond int64 (int32 scope)
        raise TraceFormatError(f"a number out of range ({exc})", p) from None
    except UnicodeDecodeError as exc:  # shapes and types are kept as raw JSON text
        raise TraceFormatError(f"text is not UTF-8 ({exc.reason})", p) from None
    meta = {"time": doc.time, "start_ts": doc.start_ts, "finish_ts": doc.finish_ts}
    return ExecutionTrace(doc.schema, doc.pid, meta, nodes, deps, str(p))


def link_execution_trace(
    et: ExecutionTrace,
    events: pa.Table,
    *,
    path: str | Path | None = None,
    min_match_score: float = MIN_MATCH_SCORE,
) -> pa.Table:
    """Match ET nodes to the Kineto host events of the same rank.

    Args:
        et: the execution trace.
        events: Kineto events (row index = event row) with at least ``name``, ``kind``
            (string or dictionary), ``ts`` (int64 ns), ``tid``, ``external_id`` and ``rf_id``
            (int64; -1 or 0 = none). Optional ``dur`` (ns) and ``device`` are used if present.
        path: the Kineto file, named in errors (defaults to the ET file).
        min_match_score: see :data:`MIN_MATCH_SCORE`.

    Returns:
        :data:`LINK_SCHEMA` table ``(node_id, event)`` of matched pairs, sorted by node id, at
        most one event per node and one node per event. Its schema metadata holds ``method``
        (``rf_id``, ``order`` or ``none``), ``match_fraction`` (matched / candidate ET nodes)
        and ``score`` (the value checked against ``min_match_score``).

    Candidates are ET nodes other than the process/thread roots, and events of kind
    ``cpu_op``/``annotation`` on host threads: the categories an ET records (HTA
    ``hta/common/execution_trace.py`` ``EXECUTION_TRACE_SUPPORTED_EVENTS``).

    * ``rf_id`` mode, when candidate events and ET nodes both carry ``rf_id > 0`` (Kineto's
      ``Record function id``, written by newer PyTorch, e.g. 2.13): pairs share ``rf_id`` and
      ``name``, the join of Chakra's ``TraceLinker``. Score = matched / candidate ET nodes.
    * ``order`` mode otherwise: none of the dlrm, linear or HTA samples has ``Record function
      id``. As in PARAM ``train/compute/python/tools/trace_link.py`` ``exact_match`` (ET nodes
      by id vs Kineto cpu_op/user_annotation by ts, equal names within a +-20 window), ET nodes
      in id order are aligned with Kineto events in start order by name, but here per thread:
      ET threads are paired with Kineto threads by n-gram votes, the ET's place in a longer
      Kineto thread is the offset with most votes (for later threads, the well-voted offset
      whose start time fits the ET's global id order against threads already matched), and
      either side may skip up to 64 entries to resync. Score = matched / (candidate ET nodes
      + Kineto events spanned by the matches - matched): events inside the matched window
      that the ET lacks count against it, so a fragment of a similar model does not pass.
      HTA instead assumes ``External id == rf_id`` when their ranges overlap; that holds for
      the HTA sample (36/36) but not for dlrm (External id - rf_id is +1 then -683 on the main
      thread of rank 4, +234 on its autograd thread) or linear, so it is not used.

    When the Kineto trace holds several iterations and the ET one, and no ``rf_id`` exists,
    nothing tells which identical iteration the ET recorded: the best-voted one (earliest on
    ties) is taken, exact for names and shapes but maybe with a neighbour's timings. (linear:
    Kineto has 40 steps; the ET equals steps 2-40, not step 1, whose ``zero_grad`` had no
    gradients to zero; step 2 is linked, both threads, 928/928 nodes.)

    Raises:
        ExecutionTraceMismatchError: score below ``min_match_score`` or (rf_id mode) more
            than :data:`MAX_NAME_CONFLICT_FRACTION` of shared rf_ids naming different ops:
            the two files come from different runs.
    """
    where = path if path is not None else et.path
    et_name = Path(et.path).name if et.path else "the execution trace"
    names_et, node_ids, node_rf, node_tid = _et_candidates(et)
    n_cand = len(node_ids)
    if n_cand == 0:
        return _link_table([], [], "none", 1.0, 1.0)
    cand = _event_candidates(events)

    if (cand["rf_id"] > 0).any() and (node_rf > 0).any():
        method = "rf_id"
        pairs_node, pairs_ev, conflicts, hits = _match_rf(
            node_ids, names_et, node_rf, cand["row"], cand["name"], cand["rf_id"]
        )
        if hits and conflicts / hits > MAX_NAME_CONFLICT_FRACTION:
            raise ExecutionTraceMismatchError(
                f"{et_name} does not belong to this Kineto trace: {conflicts} of {hits} shared "
                "record-function ids name different ops",
                where,
            )
        score = len(pairs_node) / n_cand
    else:
        method = "order"
        pairs_node, pairs_ev, span = _match_order(node_ids, names_et, node_tid, cand)
        m = len(pairs_node)
        score = m / (n_cand + span - m) if m else 0.0

    frac = len(pairs_node) / n_cand
    if score < min_match_score:
        raise ExecutionTraceMismatchError(
            f"{et_name} does not belong to this Kineto trace: {len(pairs_node)} of {n_cand} "
            f"ET nodes match its host events by {method}, score {score:.2f} < "
            f"{min_match_score:.2f}",
            where,
        )
    return _link_table(pairs_node, pairs_ev, method, frac, score)


# --------------------------------------------------------------------------------------------
# Reading: nodes -> columns
# --------------------------------------------------------------------------------------------


def _fmt(raw: bytes) -> str:
    return msgspec.json.format(raw, indent=0).decode() if raw else "[]"


def _iter_tensors(value: Any) -> Iterator[list[Any]]:
    """Yield ``[tensor_id, storage_id, offset, numel, itemsize, device]`` lists inside value."""
    if isinstance(value, list):
        if (
            len(value) == 6
            and isinstance(value[5], str)
            and isinstance(value[0], int)
            and isinstance(value[3], int)
        ):
            yield value
        else:
            for v in value:
                if isinstance(v, list):
                    yield from _iter_tensors(v)


def _tensors(values: Sequence[Any], types: Sequence[str]) -> list[tuple[int, list[Any]]]:
    """(argument index, tensor) for every tensor among the values of typed arguments."""
    out: list[tuple[int, list[Any]]] = []
    for i, (v, t) in enumerate(zip(values, types, strict=False)):
        if "Tensor" in t and isinstance(v, list):
            for tensor in _iter_tensors(v):
                out.append((i, tensor))
    return out


def _split_top(s: str) -> list[str]:
    """Split on commas not nested in brackets/parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    tail = s[start:].strip()
    if tail:
        parts.append(tail)
    return parts


@lru_cache(maxsize=4096)
def _schema_args(op_schema: str) -> tuple[tuple[str, str], ...]:
    """(type, name) of each argument of a schema like ``aten::add_(Tensor(a!) self, ...)``."""
    lo = op_schema.find("(")
    if lo < 0:
        return ()
    depth = 0
    hi = -1
    for i in range(lo, len(op_schema)):
        if op_schema[i] == "(":
            depth += 1
        elif op_schema[i] == ")":
            depth -= 1
            if depth == 0:
                hi = i
                break
    if hi < 0:
        return ()
    args = []
    for part in _split_top(op_schema[lo + 1 : hi]):
        if part == "*":
            continue  # keyword-only marker, not an argument
        decl = part.split("=", 1)[0].strip()
        typ, _, name = decl.rpartition(" ")
        args.append((typ, name))
    return tuple(args)


@lru_cache(maxsize=4096)
def _mutable_positions(op_schema: str) -> frozenset[int]:
    return frozenset(i for i, (typ, _) in enumerate(_schema_args(op_schema)) if "!" in typ)


def _dtype_from_type(t: str) -> str:
    lo, hi = t.find("Tensor("), -1
    if lo >= 0:
        hi = t.find(")", lo)
    return _DTYPES.get(t[lo + 7 : hi], t[lo + 7 : hi]) if hi > lo >= 0 else ""


class _Comm:
    """Comm columns of one node, filled from record_param_comms inputs/attrs or a c10d schema."""

    __slots__ = (
        "collective", "seq", "rank", "pg_name", "pg_desc", "pg_size", "ranks", "in_elems",
        "out_elems", "dtype", "itemsize", "in_split", "out_split",
    )  # fmt: skip

    def __init__(self) -> None:
        self.collective = ""
        self.seq = self.rank = self.pg_size = self.in_elems = self.out_elems = -1
        self.itemsize = -1
        self.pg_name = self.pg_desc = self.dtype = self.in_split = self.out_split = ""
        self.ranks: list[int] = []


def _sum_numel(tensors: list[tuple[int, list[Any]]], arg: int) -> int:
    return sum(int(t[3]) for i, t in tensors if i == arg) if tensors else -1


def _comm_record_param(
    in_vals: list[Any],
    in_types: list[str],
    out_types: list[str],
    in_t: list[tuple[int, list[Any]]],
    out_t: list[tuple[int, list[Any]]],
    attrs: dict[str, Any],
) -> _Comm:
    c = _Comm()
    # positional layout (ParamCommsUtils.hpp): [tensors?] seq, pg, rank, colName, inSplit,
    # outSplit[, globalRankStart, globalRankStride, worldSize]
    try:
        k = in_types.index("String")
    except ValueError:
        k = -1
    if k >= 3:
        c.collective = str(in_vals[k])
        seq, pg, rank = in_vals[k - 3], in_vals[k - 2], in_vals[k - 1]
        c.seq = seq if isinstance(seq, int) else -1
        c.rank = rank if isinstance(rank, int) else -1
        if isinstance(pg, list) and pg and all(isinstance(x, str) for x in pg):
            c.pg_name = pg[0]
            c.pg_desc = pg[1] if len(pg) > 1 else ""
        if k + 2 < len(in_vals):
            if isinstance(in_vals[k + 1], list) and in_vals[k + 1]:
                c.in_split = msgspec.json.encode(in_vals[k + 1]).decode()
            if isinstance(in_vals[k + 2], list) and in_vals[k + 2]:
                c.out_split = msgspec.json.encode(in_vals[k + 2]).decode()
        tail = in_vals[k + 3 : k + 6]  # globalRankStart, globalRankStride, worldSize (newer)
        if len(tail) == 3 and all(type(x) is int for x in tail) and tail[2] > 0:
            c.pg_size = tail[2]
            c.ranks = [tail[0] + tail[1] * i for i in range(tail[2])]
    if in_t:
        c.in_elems = _sum_numel(in_t, in_t[0][0])
        c.itemsize = int(in_t[0][1][4])
        c.dtype = _dtype_from_type(in_types[in_t[0][0]])
    if out_t:
        c.out_elems = _sum_numel(out_t, out_t[0][0])
        if c.itemsize < 0:
            c.itemsize = int(out_t[0][1][4])
        if not c.dtype:
            c.dtype = _dtype_from_type(out_types[out_t[0][0]])
    # attrs (schema >= 1.1.0) take precedence over positional guesses
    if "collective_name" in attrs:
        c.collective = str(attrs["collective_name"])
    if "dtype" in attrs and attrs["dtype"]:
        c.dtype = _DTYPES.get(str(attrs["dtype"]), str(attrs["dtype"]))
    for key, slot in (("in_msg_nelems", "in_elems"), ("out_msg_nelems", "out_elems")):
        if isinstance(attrs.get(key), int):
            setattr(c, slot, attrs[key])
    for key, slot in (("in_split_size", "in_split"), ("out_split_size", "out_split")):
        v = attrs.get(key)
        if v not in (None, "", "[]"):
            setattr(c, slot, v if isinstance(v, str) else msgspec.json.encode(v).decode())
    if "pg_name" in attrs:
        c.pg_name = str(attrs["pg_name"])
    if "pg_desc" in attrs:
        c.pg_desc = str(attrs["pg_desc"])
    if isinstance(attrs.get("pg_size"), int):
        c.pg_size = attrs["pg_size"]
        start, stride = attrs.get("global_rank_start"), attrs.get("global_rank_stride")
        if isinstance(start, int) and isinstance(stride, int) and c.pg_size > 0:
            c.ranks = [start + stride * i for i in range(c.pg_size)]
    return c


def _comm_c10d(
    name: str,
    op_schema: str,
    in_types: list[str],
    in_t: list[tuple[int, list[Any]]],
) -> _Comm:
    """Comm columns of a ``c10d::`` op from its schema's argument names (input*/output*)."""
    c = _Comm()
    c.collective = name[len("c10d::") :].rstrip("_")
    args = _schema_args(op_schema)
    in_elems = out_elems = 0
    seen_in = seen_out = False
    for i, t in in_t:
        arg = args[i][1] if i < len(args) else ""
        numel = int(t[3])
        if "output" in arg:
            out_elems += numel
            seen_out = True
        elif "input" in arg:
            in_elems += numel
            seen_in = True
        else:  # `tensors`, `self`...: the same buffer is sent and received
            in_elems += numel
            out_elems += numel
            seen_in = seen_out = True
        if c.itemsize < 0:
            c.itemsize = int(t[4])
            c.dtype = _dtype_from_type(in_types[i])
    c.in_elems = in_elems if seen_in else -1
    c.out_elems = out_elems if seen_out else -1
    return c


def _build_tables(nodes: list[_Node], path: Path) -> tuple[pa.Table, pa.Table]:
    nodes.sort(key=attrgetter("id"))
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
    comms: dict[int, _Comm] = {}
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
        in_t = _tensors(in_vals, in_types) if in_vals else []
        out_t = _tensors(out_vals, out_types) if out_vals else []
        if in_t:
            reads[r] = [int(t[0]) for _, t in in_t if t[5]]
            mut = _mutable_positions(op_schema) if op_schema else frozenset()
            if mut:
                writes[r] = [int(t[0]) for i, t in in_t if i in mut and t[5]]
        if out_t:
            w = [int(t[0]) for _, t in out_t if t[5]]
            writes[r] = writes[r] + w if writes[r] else w

        if name == "record_param_comms":
            is_comm[r] = True
            comms[r] = _comm_record_param(in_vals, in_types, out_types, in_t, out_t, attrs)
        elif name.startswith("c10d::"):
            is_comm[r] = True
            comms[r] = _comm_c10d(name, op_schema, in_types, in_t)

    # top-level operator of every node (parents have smaller ids, so one pass in id order)
    row_of = {i: r for r, i in enumerate(ids)}
    top = [-1] * n
    for r in range(n):
        pr = row_of.get(parents[r], -1)
        ptop = top[pr] if pr >= 0 else -1
        top[r] = ptop if ptop >= 0 else (ids[r] if is_op[r] else -1)

    deps = _data_deps(top, reads, writes)

    none = _Comm()
    cget = comms.get
    cols = {
        "id": pa.array(ids, pa.int64()),
        "name": pa.array(names, pa.string()),
        "parent": pa.array(parents, pa.int64()),
        "rf_id": pa.array(rf, pa.int64()),
        "tid": pa.array(tids, pa.int64()),
        "fw_tid": pa.array(fw_tids, pa.int64()),
        "fw_parent": pa.array(fw_parents, pa.int64()),
        "seq_id": pa.array(seqs, pa.int64()),
        "scope": pa.array(scopes, pa.int32()),
        "op_schema": pa.array(schemas, pa.string()),
        "input_shapes": pa.array(ishapes, pa.string()),
        "input_types": pa.array(itypes, pa.string()),
        "output_shapes": pa.array(oshapes, pa.string()),
        "output_types": pa.array(otypes, pa.string()),
        "is_op": pa.array(is_op, pa.bool_()),
        "top_op": pa.array(top, pa.int64()),
        "is_comm": pa.array(is_comm, pa.bool_()),
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
    per_row = [cget(r, none) for r in range(n)]
    for col, (attr, typ) in comm_cols.items():
        cols[col] = pa.array([getattr(c, attr) for c in per_row], typ)
    table = pa.Table.from_arrays(list(cols.values()), schema=NODES_SCHEMA)
    return table, deps


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
        [pa.array(src, pa.int64()), pa.array(dst, pa.int64()), pa.array(ten, pa.int64())],
        schema=DATA_DEPS_SCHEMA,
    )


# --------------------------------------------------------------------------------------------
# Linking
# --------------------------------------------------------------------------------------------


def _et_candidates(et: ExecutionTrace) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    nodes = et.nodes
    names = nodes.column("name").to_pylist()
    keep = np.array([_ROOT_RE.match(s) is None for s in names], dtype=bool)
    ids = nodes.column("id").to_numpy()[keep]
    rf = nodes.column("rf_id").to_numpy()[keep]
    tid = nodes.column("tid").to_numpy()[keep]
    kept_names = [s for s, k in zip(names, keep, strict=True) if k]
    return kept_names, ids, rf, tid


def _as_str_array(col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    return arr


def _event_candidates(events: pa.Table) -> dict[str, Any]:
    kind = _as_str_array(events.column("kind"))
    mask = pc.is_in(kind, value_set=pa.array(["cpu_op", "annotation"]))
    if "device" in events.column_names:
        mask = pc.and_(mask, pc.less(events.column("device"), 0))
    mask = pc.fill_null(mask, False)
    rows = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))
    take = pa.array(rows, pa.int64())

    def col(name: str, default: int) -> np.ndarray:
        if name not in events.column_names:
            return np.full(len(rows), default, dtype=np.int64)
        a = events.column(name).take(take)
        return np.asarray(pc.fill_null(a, default).to_numpy(), dtype=np.int64)

    names = _as_str_array(events.column("name").take(take)).to_pylist()
    return {
        "row": rows.astype(np.int64),
        "name": names,
        "ts": col("ts", 0),
        "dur": col("dur", 0),
        "tid": col("tid", -1),
        "external_id": col("external_id", -1),
        "rf_id": col("rf_id", -1),
    }


def _match_rf(
    node_ids: np.ndarray,
    names_et: list[str],
    node_rf: np.ndarray,
    ev_rows: np.ndarray,
    ev_names: list[str],
    ev_rf: np.ndarray,
) -> tuple[list[int], list[int], int, int]:
    by_rf: dict[int, list[int]] = defaultdict(list)
    for k, r in enumerate(ev_rf.tolist()):
        if r > 0:
            by_rf[r].append(k)
    used: set[int] = set()
    out_n: list[int] = []
    out_e: list[int] = []
    conflicts = hits = 0
    for nid, name, r in zip(node_ids.tolist(), names_et, node_rf.tolist(), strict=True):
        ks = by_rf.get(r) if r > 0 else None
        if not ks:
            continue
        hits += 1
        for k in ks:
            if k not in used and ev_names[k] == name:
                used.add(k)
                out_n.append(nid)
                out_e.append(int(ev_rows[k]))
                break
        else:
            conflicts += 1
    return out_n, out_e, conflicts, hits


def _ngram_hash(codes: np.ndarray, n: int) -> np.ndarray:
    """Hash of every window of ``n`` consecutive codes (wrapping uint64 arithmetic)."""
    m = len(codes) - n + 1
    if m <= 0 or n <= 0:
        return np.zeros(0, dtype=np.uint64)
    c = codes.astype(np.uint64)
    h = np.zeros(m, dtype=np.uint64)
    mult = np.uint64(1_000_003)
    for t in range(n):
        h = h * mult + c[t : t + m]
    return h


def _offset_votes(et_codes: np.ndarray, ev_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate offsets ``j - i`` (ET position i -> Kineto position j) and their n-gram votes.

    Every ET n-gram votes for each Kineto position holding the same n-gram; a repeated
    iteration in the Kineto thread shows up as several offsets with similar votes.
    """
    n = min(_NGRAM, len(et_codes))  # threads shorter than an n-gram vote with what they have
    he, hk = _ngram_hash(et_codes, n), _ngram_hash(ev_codes, n)
    empty = np.zeros(0, dtype=np.int64)
    if len(he) == 0 or len(hk) == 0:
        return empty, empty
    order = np.argsort(hk, kind="stable")
    hs = hk[order]
    lo = np.searchsorted(hs, he, "left")
    cnt = np.searchsorted(hs, he, "right") - lo
    pos = np.arange(len(he))
    total = int(cnt.sum())
    if total == 0:
        return empty, empty
    if total > _MAX_VOTES:
        step = int(np.ceil(total / _MAX_VOTES))
        pos, lo, cnt = pos[::step], lo[::step], cnt[::step]
        total = int(cnt.sum())
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt)
    kpos = order[starts + np.arange(total)]
    offsets = kpos - np.repeat(pos, cnt)
    vals, counts = np.unique(offsets, return_counts=True)
    return vals.astype(np.int64), counts.astype(np.int64)


def _align(a: list[int], b: list[int], start: int) -> list[tuple[int, int]]:
    """Greedy alignment of code sequences a (ET) and b (Kineto) from b[start]; (i, j) pairs.

    Equal codes match and both advance; two neighbours swapped match crosswise (events
    starting in the same microsecond). On a mismatch, the candidate resyncs are skipping
    Kineto events up to the next occurrence of ``a[i]`` or skipping ET nodes up to the next
    occurrence of ``b[j]`` (each within the look-ahead); a resync confirmed by the next
    ``_CONFIRM`` codes agreeing is preferred, then the shorter skip; with no resync both advance.
    """
    pairs: list[tuple[int, int]] = []
    na, nb = len(a), len(b)
    i, j = 0, max(0, start)
    look = _LOOKAHEAD
    conf = _CONFIRM
    while i < na and j < nb:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        ai, bj = a[i], b[j]
        if i + 1 < na and j + 1 < nb and a[i + 1] == bj and b[j + 1] == ai:
            pairs.append((i, j + 1))  # two events swapped within one timestamp
            pairs.append((i + 1, j))
            i += 2
            j += 2
            continue
        opts = []
        for d in range(1, min(look, nb - j)):
            if b[j + d] == ai:
                ok = a[i : i + conf] == b[j + d : j + d + conf]
                opts.append((not ok, d, 0))
                if ok:
                    break
        for d in range(1, min(look, na - i)):
            if a[i + d] == bj:
                ok = a[i + d : i + d + conf] == b[j : j + conf]
                opts.append((not ok, d, 1))
                if ok:
                    break
        if not opts:
            i += 1
            j += 1
            continue
        _, d, side = min(opts)
        if side == 0:
            j += d
        else:
            i += d
    return pairs


def _match_order(
    node_ids: np.ndarray,
    names_et: list[str],
    node_tid: np.ndarray,
    cand: dict[str, Any],
) -> tuple[list[int], list[int], int]:
    """Order-mode matching; returns (node ids, event rows, Kineto events spanned by matches)."""
    codes: dict[str, int] = {}
    et_codes = np.array([codes.setdefault(s, len(codes)) for s in names_et], dtype=np.int64)
    ev_codes = np.array([codes.setdefault(s, len(codes)) for s in cand["name"]], dtype=np.int64)
    ev_ts = cand["ts"]

    # Kineto host events per thread in start order. Within one microsecond the order is
    # ambiguous; the External id is assigned in start order per thread (parents before
    # children), so it breaks ties, then the longer event first.
    ev_tid = cand["tid"]
    order = np.lexsort((-cand["dur"], cand["external_id"], ev_ts, ev_tid))
    k_threads: dict[int, np.ndarray] = {}
    if len(order):
        cuts = np.flatnonzero(np.diff(ev_tid[order])) + 1
        for chunk in np.split(order, cuts):
            k_threads[int(ev_tid[chunk[0]])] = chunk
    # ET nodes per thread in id (= start) order; node_ids is sorted
    e_threads = {int(t): np.flatnonzero(node_tid == t) for t in np.unique(node_tid).tolist()}

    # pair ET threads with Kineto threads, best vote count first
    votes: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    scored = []
    for et_t, e_idx in e_threads.items():
        for k_t, k_idx in k_threads.items():
            vals, counts = _offset_votes(et_codes[e_idx], ev_codes[k_idx])
            if len(counts):
                votes[et_t, k_t] = (vals, counts)
                scored.append((int(counts.max()), len(e_idx), et_t, k_t))
    scored.sort(reverse=True)
    used_e: set[int] = set()
    used_k: set[int] = set()
    chosen: list[tuple[int, int]] = []
    for _, _, et_t, k_t in scored:
        if et_t not in used_e and k_t not in used_k:
            used_e.add(et_t)
            used_k.add(k_t)
            chosen.append((et_t, k_t))
    # largest ET thread first; later threads pick, among their well-voted offsets, the one
    # whose start time fits between the already matched nodes of neighbouring ids (ET ids are
    # the global start order, Kineto ts the start time): this keeps all threads on the same
    # iteration when the Kineto trace repeats it.
    chosen.sort(key=lambda p: -len(e_threads[p[0]]))
    m_ids: list[int] = []
    m_ts: list[int] = []
    out_n: list[int] = []
    out_e: list[int] = []
    span = 0
    for et_t, k_t in chosen:
        e_idx, k_idx = e_threads[et_t], k_threads[k_t]
        vals, counts = votes[et_t, k_t]
        good = counts >= max(1, counts.max() // 2)
        cvals, ccounts = vals[good], counts[good]
        if not m_ids:
            off = int(cvals[np.argmax(ccounts)])  # ties: earliest offset
        else:
            first_id = int(node_ids[e_idx[0]])
            ids_arr = np.asarray(m_ids)
            srt = np.argsort(ids_arr)
            ids_s, ts_s = ids_arr[srt], np.asarray(m_ts)[srt]
            p = int(np.searchsorted(ids_s, first_id))
            lo_ts = float(ts_s[:p].max()) if p > 0 else -np.inf
            hi_ts = float(ts_s[p:].min()) if p < len(ts_s) else np.inf
            t = ev_ts[k_idx[np.clip(cvals, 0, len(k_idx) - 1)]].astype(float)
            viol = np.maximum(0.0, np.maximum(lo_ts - t, t - hi_ts))
            near = np.minimum(np.abs(t - lo_ts), np.abs(hi_ts - t))
            fits = viol == viol.min()
            pool = fits & (ccounts >= 0.9 * ccounts[fits].max())
            best = np.flatnonzero(pool)[np.argmin(near[pool])]
            off = int(cvals[best])
        pairs = _align(et_codes[e_idx].tolist(), ev_codes[k_idx].tolist(), off)
        if not pairs:
            continue
        span += pairs[-1][1] - pairs[0][1] + 1
        for i, j in pairs:
            nid = int(node_ids[e_idx[i]])
            k = int(k_idx[j])
            out_n.append(nid)
            out_e.append(int(cand["row"][k]))
            m_ids.append(nid)
            m_ts.append(int(ev_ts[k]))
    if out_n:
        srt = np.argsort(np.asarray(out_n), kind="stable")
        out_n = np.asarray(out_n)[srt].tolist()
        out_e = np.asarray(out_e)[srt].tolist()
    return out_n, out_e, span


def _link_table(
    nodes: list[int], evs: list[int], method: str, frac: float, score: float
) -> pa.Table:
    meta = {
        b"method": method.encode(),
        b"match_fraction": f"{frac:.6f}".encode(),
        b"score": f"{score:.6f}".encode(),
    }
    return pa.Table.from_arrays(
        [pa.array(nodes, pa.int64()), pa.array(evs, pa.int64())],
        schema=LINK_SCHEMA.with_metadata(meta),
    )
