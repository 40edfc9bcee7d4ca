"""The ``comm_args`` and ``stream_waits`` tables of a Kineto file (see
:class:`~traincast.trace.readers.base.TraceFile`), from the decoded ``args`` of its
``record_param_comms`` ops and NCCL kernels and of its ``cuda_sync`` waits.

``Process Group Ranks`` comes as a list or as its text (``"[0, 1]"``); members that are not
int32 ranks leave the list empty. Most files of a job have no such rows: their empty tables
are built once per process and shared (Arrow tables are immutable).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A

_NO_MEMBERS: tuple[int, ...] = ()
_EMPTY: dict[str, pa.Table] = {}


def ranks_members(v: Any) -> tuple[int, ...]:
    """``Process Group Ranks`` (a list, or its text ``"[0, 1]"``) as a tuple of ints; empty if
    it is neither or holds something other than int32 ranks."""
    if isinstance(v, str):
        # every call of a process group repeats the same text (world size ids per call)
        parsed = _ranks_text(v)
        return _NO_MEMBERS if parsed is None else parsed
    if not isinstance(v, list):
        return _NO_MEMBERS
    ranks = _checked_ranks(v)
    return _NO_MEMBERS if ranks is None else tuple(ranks)


@functools.lru_cache(maxsize=64)
def _ranks_text(v: str) -> tuple[int, ...] | None:
    v = v.strip().strip("[]")
    if not v:
        return ()
    ranks = _checked_ranks(v.split(","))
    return None if ranks is None else tuple(ranks)


def _checked_ranks(v: list) -> list[int] | None:
    try:
        ranks = [int(x) for x in v]
    except (TypeError, ValueError, OverflowError):
        return None
    return ranks if all(0 <= x < 2**31 for x in ranks) else None


def _ints(values: list[int], dtype: Any = np.int64) -> pa.Array:
    return A.from_numpy(np.asarray(values, dtype=dtype).reshape(-1))


def comm_table(rows: list[tuple[int, Any]]) -> pa.Table:
    """``comm_args`` of (event row, decoded ``args``) pairs.

    Raises:
        OverflowError, pyarrow.ArrowInvalid: a number out of its column's range.
    """
    if not rows and "comm" in _EMPTY:
        return _EMPTY["comm"]
    # every call of a process group repeats the same text: its parse is memoised (one tuple
    # object), which list_of converts once
    ranks = [ranks_members(a.pg_ranks) for _, a in rows]
    t = pa.Table.from_arrays(
        [
            _ints([r for r, _ in rows]),
            A.strings([a.coll_name for _, a in rows]),
            A.strings([a.pg_name for _, a in rows]),
            A.list_of(ranks),
            _ints([a.group_size for _, a in rows], np.int32),
            _ints([a.in_nelems for _, a in rows]),
            _ints([a.out_nelems for _, a in rows]),
            A.strings([a.dtype for _, a in rows]),
            _ints([a.seq for _, a in rows]),
        ],
        names=["event", "coll_name", "pg_name", "pg_ranks", "group_size", "in_nelems",
               "out_nelems", "dtype", "seq"],
    )
    if not rows:
        _EMPTY["comm"] = t
    return t


def waits_table(rows: list[tuple[int, int, int]]) -> pa.Table:
    """``stream_waits`` of (event row, waiting stream, recorded event's correlation)."""
    if not rows and "waits" in _EMPTY:
        return _EMPTY["waits"]
    t = pa.Table.from_arrays(
        [_ints([r for r, _, _ in rows]), _ints([w for _, w, _ in rows], np.int32),
         _ints([c for _, _, c in rows])],
        names=["event", "wait_on_stream", "record_correlation"],
    )
    if not rows:
        _EMPTY["waits"] = t
    return t
