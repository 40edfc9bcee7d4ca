"""Argument values of execution-trace nodes: tensors, op schemas, dtypes, collective arguments.

Used by the ET reader (:mod:`traincast.trace.readers.et`) to turn one node's ``inputs`` /
``outputs`` / ``attrs`` into columns. Format facts (sources in the reader's docstring):

* A tensor value is ``[tensor_id, storage_id, offset, numel, itemsize, device]``; lists and
  tuples of tensors nest these (:func:`iter_tensors`, :func:`arg_tensors`).
* An op schema is ``ns::name(Type name, ..., *, Type name=default) -> ...``; an argument whose
  type carries ``!`` (``Tensor(a!)``) is written by the op (:func:`mutable_positions`).
* Collective arguments come from ``record_param_comms`` positional inputs and, on newer
  schemas, ``attrs`` (:func:`comm_from_record_param`), or from the argument names of a
  ``c10d::`` op's schema (:func:`comm_from_c10d`); message sizes are in elements, -1 unknown.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

import msgspec

__all__ = ["DTYPES", "CommArgs", "arg_tensors", "comm_from_c10d", "comm_from_record_param",
           "dtype_from_type", "iter_tensors", "mutable_positions", "schema_args", "split_top",
           "tensors_at"]

# dtype spellings: caffe2 TypeMeta names (tensor types, "Tensor(long int)") and c10 ScalarType
# names (record_param_comms `dtype` attr, "Long") -> torch names.
DTYPES = {
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


def iter_tensors(value: Any) -> Iterator[list[Any]]:
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
                    yield from iter_tensors(v)


def tensors_at(values: Sequence[Any], positions: Sequence[int]) -> list[tuple[int, list[Any]]]:
    """(argument index, tensor) for every tensor among ``values`` at ``positions``
    (ascending; positions past the values are ignored)."""
    out: list[tuple[int, list[Any]]] = []
    m = len(values)
    for i in positions:
        if i >= m:
            break
        v = values[i]
        if not isinstance(v, list):
            continue
        if (len(v) == 6 and isinstance(v[5], str) and isinstance(v[0], int)
                and isinstance(v[3], int)):
            out.append((i, v))  # a tensor itself (what iter_tensors would yield alone)
        else:
            out.extend((i, t) for t in iter_tensors(v))
    return out


def arg_tensors(values: Sequence[Any], types: Sequence[str]) -> list[tuple[int, list[Any]]]:
    """(argument index, tensor) for every tensor among the values of typed arguments."""
    return tensors_at(values, [i for i, t in enumerate(types) if "Tensor" in t])


def split_top(s: str) -> list[str]:
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
def schema_args(op_schema: str) -> tuple[tuple[str, str], ...]:
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
    for part in split_top(op_schema[lo + 1 : hi]):
        if part == "*":
            continue  # keyword-only marker, not an argument
        decl = part.split("=", 1)[0].strip()
        typ, _, name = decl.rpartition(" ")
        args.append((typ, name))
    return tuple(args)


@lru_cache(maxsize=4096)
def mutable_positions(op_schema: str) -> frozenset[int]:
    return frozenset(i for i, (typ, _) in enumerate(schema_args(op_schema)) if "!" in typ)


def dtype_from_type(t: str) -> str:
    lo, hi = t.find("Tensor("), -1
    if lo >= 0:
        hi = t.find(")", lo)
    return DTYPES.get(t[lo + 7 : hi], t[lo + 7 : hi]) if hi > lo >= 0 else ""


class CommArgs:
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


def comm_from_record_param(
    in_vals: list[Any],
    in_types: list[str],
    out_types: list[str],
    in_t: list[tuple[int, list[Any]]],
    out_t: list[tuple[int, list[Any]]],
    attrs: dict[str, Any],
) -> CommArgs:
    c = CommArgs()
    # positional layout (ParamCommsUtils.hpp): [tensors?] seq, pg, rank, colName, inSplit,
    # outSplit[, globalRankStart, globalRankStride, worldSize]
    try:
        k = in_types.index("String")
    except ValueError:
        k = -1
    if 3 <= k < len(in_vals):  # (a types list longer than the values: unknown)
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
        c.dtype = dtype_from_type(in_types[in_t[0][0]])
    if out_t:
        c.out_elems = _sum_numel(out_t, out_t[0][0])
        if c.itemsize < 0:
            c.itemsize = int(out_t[0][1][4])
        if not c.dtype:
            c.dtype = dtype_from_type(out_types[out_t[0][0]])
    # attrs (schema >= 1.1.0) take precedence over positional guesses
    if "collective_name" in attrs:
        c.collective = str(attrs["collective_name"])
    if "dtype" in attrs and attrs["dtype"]:
        c.dtype = DTYPES.get(str(attrs["dtype"]), str(attrs["dtype"]))
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


def comm_from_c10d(
    name: str,
    op_schema: str,
    in_types: list[str],
    in_t: list[tuple[int, list[Any]]],
) -> CommArgs:
    """Comm columns of a ``c10d::`` op from its schema's argument names (input*/output*)."""
    c = CommArgs()
    c.collective = name[len("c10d::") :].rstrip("_")
    args = schema_args(op_schema)
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
            c.dtype = dtype_from_type(in_types[i])
    c.in_elems = in_elems if seen_in else -1
    c.out_elems = out_elems if seen_out else -1
    return c
