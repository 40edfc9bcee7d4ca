"""Collective calls of one rank, from the c10d annotations PyTorch records.

PyTorch's ProcessGroup wrappers record a ``<backend>:<collective>`` range for every call
(``nccl:all_reduce``, ``gloo:all_reduce``, ``nccl:_all_gather_base`` ...; see
``torch/csrc/distributed/c10d/ProcessGroup*.cpp``). Newer versions also record a
``record_param_comms`` op whose args hold the collective name, process group name and ranks,
message sizes and dtype (``torch/csrc/distributed/c10d/ParamCommsUtils.hpp``); NCCL kernels
may carry the same args. Where those are missing, sizes come from the call's ``Input Dims``
and the group is the default (world) group.

For an NCCL call the executing event is the GPU kernel launched inside the call (found through
the launch's correlation id). For gloo the ``gloo:*`` range itself runs on a gloo worker
thread and is the executing event.
"""

from __future__ import annotations

import functools
import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from traincast.trace.comm_vocab import normalise

CALL = re.compile(r"^(nccl|gloo|mpi|ucc|rccl|xccl|hccl):(\w+)$")

#: bytes per element of the dtypes Kineto and c10d spell out
DTYPE_BYTES = {
    "float": 4, "float32": 4, "Float": 4, "double": 8, "Double": 8, "float64": 8,
    "c10::Half": 2, "Half": 2, "half": 2, "float16": 2, "c10::BFloat16": 2, "BFloat16": 2,
    "bfloat16": 2, "long int": 8, "Long": 8, "int64": 8, "int": 4, "Int": 4, "int32": 4,
    "signed char": 1, "unsigned char": 1, "Byte": 1, "Char": 1, "bool": 1, "Bool": 1,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "short int": 2, "Short": 2,
}


@dataclass
class CallRecord:
    """One collective call on one rank (rank-local event rows)."""

    event: int
    kernel_event: int
    collective: str
    process_group: str
    group_ranks: Sequence[int]  # shared between calls (a tuple): read it, do not modify it
    dtype: str
    in_bytes: int
    out_bytes: int
    seq: int = -1
    recorded_seq: int = -1  # c10d sequence number, where the trace records one
    issue: int = -1  # gloo: the c10d:: op on the calling thread that enqueued the call
    backend: str = ""


def _nbytes(dims_json: str, types_json: str) -> tuple[int, str]:
    """Bytes of the first tensor input from record_shapes text (0 if unknown)."""
    try:
        dims = orjson.loads(dims_json) if dims_json else []
        types = orjson.loads(types_json) if types_json else []
    except orjson.JSONDecodeError:
        return 0, ""
    for d, t in zip(dims, types or [""] * len(dims), strict=False):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            return math.prod(d) * DTYPE_BYTES.get(str(t), 4), str(t)
        if isinstance(d, list) and d and isinstance(d[0], list):  # TensorList
            total = 0
            for sub in d:
                if sub and all(isinstance(x, int) for x in sub):
                    total += math.prod(sub) * DTYPE_BYTES.get(str(t), 4)
            if total:
                return total, str(t)
    return 0, ""


_C10D_ISSUE = re.compile(r"^c10d::(\w+?)_?$")


@functools.lru_cache(maxsize=1 << 16)
def _call_parts(name: str) -> tuple[str, str] | None:
    """(backend, op) of a collective call's name (``nccl:all_reduce``), else None; memoised
    across ranks (every rank repeats the same few hundred names)."""
    m = CALL.match(name)
    return None if m is None else (m.group(1), m.group(2))


@functools.lru_cache(maxsize=1 << 12)
def _nbytes_of(dims_json: str, types_json: str) -> tuple[int, str]:
    """:func:`_nbytes`, memoised across ranks (every rank repeats the same few texts)."""
    return _nbytes(dims_json, types_json)


@functools.lru_cache(maxsize=1 << 12)
def _normalised(name: str) -> str:
    """:func:`~traincast.trace.comm_vocab.normalise`, memoised across ranks."""
    return normalise(name)


@functools.lru_cache(maxsize=1 << 16)
def _issue_collective(name: str) -> str | None:
    """Normalised collective of a gloo issue op's name (``c10d::allreduce_``), else None."""
    m = _C10D_ISSUE.match(name)
    return None if m is None else normalise(m.group(1))


@functools.lru_cache(maxsize=64)
def _name_masks(names: tuple[str, ...]) -> tuple[np.ndarray, list[str | None], np.ndarray]:
    """(bool per name: a collective call's name, :func:`_issue_collective` per name, bool per
    name: a gloo issue op), each array at least one long (read-only); memoised per
    dictionary (the ranks of a job share theirs)."""
    call_name = np.array([_call_parts(n) is not None for n in names] or [False], bool)
    issue_name = [_issue_collective(n) for n in names]
    issue_mask = np.array([m is not None for m in issue_name] or [False], bool)
    call_name.flags.writeable = issue_mask.flags.writeable = False
    return call_name, issue_name, issue_mask


def extract_calls(
    *,
    name_idx: np.ndarray,
    name_dict: list[str],
    kind: np.ndarray,
    kinds: list[str],
    tid: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    correlation: np.ndarray,
    host: np.ndarray,
    comm_args: dict[int, dict],
    shapes: Any,
    pg_config: list[dict],
    world_ranks: Sequence[int],
) -> list[CallRecord]:
    """Collective calls of one rank, in start order (all arrays rank-local, one per event).

    ``comm_args`` maps a rank-local event row to the ``record_param_comms``/kernel args
    (keys ``coll_name``, ``pg_name``, ``pg_ranks``, ``in_nelems``, ``out_nelems``, ``dtype``).
    ``shapes`` maps an event row to its (``Input Dims``, ``Input type``) texts: anything with
    ``get(row, default)`` (a dict, or the loader's on-demand view of the shapes table).
    """
    call_name, issue_name, issue_mask = _name_masks(tuple(name_dict))
    host_kinds = ((kind == kinds.index("annotation")) | (kind == kinds.index("cpu_op"))) & host
    rows = np.flatnonzero(call_name[name_idx] & host_kinds) if name_idx.size else []
    if len(rows) == 0:
        return []
    end = ts + dur
    k_runtime = kinds.index("runtime")
    k_coll = kinds.index("collective")
    # correlation -> collective GPU event
    gpu = np.flatnonzero((kind == k_coll) & (correlation >= 0))
    corr_to_gpu = dict(zip(correlation[gpu].tolist(), gpu.tolist(), strict=True))
    # runtime calls per thread, in time order
    rt = np.flatnonzero(kind == k_runtime)  # rows are in start order already
    # (rows, their starts as a list: bisected per call) per thread
    rt_by_tid: dict[int, tuple[np.ndarray, list[int]]] = {}
    rt_tid = tid[rt]
    for t in np.unique(rt_tid).tolist():
        sel = rt[rt_tid == t]
        rt_by_tid[t] = (sel, ts[sel].tolist())
    args_by_tid: dict[int, list[int]] = {}
    for r in sorted(comm_args, key=lambda r: (ts[r], r)):
        args_by_tid.setdefault(int(tid[r]), []).append(r)
    args_ts = {t: [int(ts[r]) for r in lst] for t, lst in args_by_tid.items()}
    pg_ranks = {str(p.get("pg_name")): tuple(int(x) for x in p.get("ranks", []))
                for p in pg_config}
    # gloo: the c10d:: issue ops on the calling thread, in order per collective
    issues: dict[str, list[int]] = {}
    for r in np.flatnonzero(issue_mask[name_idx] & (kind == kinds.index("cpu_op"))).tolist():
        issues.setdefault(issue_name[name_idx[r]], []).append(r)
    issue_pos: dict[str, int] = {}

    out: list[CallRecord] = []
    for c in rows.tolist():  # event rows are sorted by (start, -duration)
        backend, op = _call_parts(name_dict[name_idx[c]])
        coll = _normalised(op)
        t = int(tid[c])
        # enclosing record_param_comms (or the call itself) carrying args
        a: dict = comm_args.get(c, {})
        window = (ts[c], end[c])
        lst = args_by_tid.get(t)
        if lst:
            j = bisect_right(args_ts[t], int(ts[c])) - 1
            while j >= 0 and j >= len(lst) - 10**9:
                r = lst[j]
                if end[r] >= end[c] and r != c:
                    a = comm_args[r]
                    window = (min(ts[r], ts[c]), max(end[r], end[c]))
                    break
                if ts[c] - ts[r] > 10 * (end[c] - ts[c]) + 1_000_000:
                    break
                j -= 1
        kernel = -1
        if backend != "gloo":
            cand_t = rt_by_tid.get(t)
            if cand_t is not None:
                cand, cand_ts = cand_t
                lo = bisect_left(cand_ts, window[0])
                hi = bisect_right(cand_ts, window[1])
                for r in cand[lo:hi].tolist():
                    g = corr_to_gpu.get(int(correlation[r]))
                    if g is not None:
                        kernel = g
                        if g in comm_args and not a:
                            a = comm_args[g]
                        break
        coll_name = normalise(a["coll_name"]) if a.get("coll_name") else coll
        pg = str(a.get("pg_name") or "0")
        ranks = a.get("pg_ranks") or pg_ranks.get(pg) or world_ranks
        dtype = a.get("dtype") or ""
        in_b = out_b = 0
        if a.get("in_nelems", -1) >= 0 and dtype:
            size = DTYPE_BYTES.get(dtype, 4)
            in_b = int(a["in_nelems"]) * size
            out_b = int(a.get("out_nelems", a["in_nelems"])) * size
        else:
            dims, types = shapes.get(c, ("", ""))
            in_b, dt = _nbytes_of(dims, types)
            dtype = dtype or dt
            g = max(len(ranks), 1)
            out_b = (in_b * g if coll_name == "all_gather" else
                     in_b // g if coll_name == "reduce_scatter" else in_b)
        # member lists are shared, not copied: the loader converts each distinct one once
        rec = CallRecord(c, kernel, coll_name, pg, ranks, dtype, in_b, out_b,
                         recorded_seq=int(a.get("seq", -1) if a.get("seq") is not None else -1),
                         backend=backend)
        if backend == "gloo":
            lst = issues.get(coll_name, [])
            k = issue_pos.get(coll_name, 0)
            if k < len(lst) and ts[lst[k]] <= ts[c]:
                rec.issue = lst[k]
                issue_pos[coll_name] = k + 1
        out.append(rec)
    # per process group call order
    counters: dict[str, int] = {}
    for rec in out:
        rec.seq = counters.get(rec.process_group, 0)
        counters[rec.process_group] = rec.seq + 1
    return out
