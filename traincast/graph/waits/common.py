"""The pieces every host-wait model shares (:mod:`traincast.graph.waits`): thresholds (ns),
the API-name patterns, :class:`WaitEdges` (what the models add to the graph: point ids, int64
ns lags) and name masks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from traincast.graph.grouped import group_median, lexsort

_US = 1000
#: CUDA launch-queue depth per stream (HTA default; see the module docstring)
DEFAULT_QUEUE_DEPTH = 1024
#: a launch that ends within this of a queue entry's completion may have been woken by it
QUEUE_WAKE_NS = 50 * _US
#: the smallest outstanding count taken as a full launch queue (real queues hold ~1,024)
MIN_FITTED_DEPTH = 64
#: launches that must visibly block before the depth is fitted rather than assumed
MIN_BLOCKED = 5
#: depths tried below the largest outstanding count when fitting
FIT_WINDOW = 32
#: a blocking call ending within this of its dependency's end waited for it
SYNC_WAKE_NS = 100 * _US
#: a polling run must span at least this to count as a wait
POLL_MIN_SPAN_NS = 50 * _US
#: ... and consist of at least this many queries
POLL_MIN_CALLS = 3

LAUNCH_CALL = re.compile(r"(Launch|launch)")
MEMCPY_CALL = re.compile(r"^(cuda|hip)Memcpy|^cuMemcpy")
DEVICE_SYNC = re.compile(r"(cuda|hip)(Device|Ctx)Synchronize|^cuCtxSynchronize")
STREAM_SYNC = re.compile(r"(cuda|hip|cu)StreamSynchronize")
QUERY_CALL = re.compile(r"^(cuda|hip|cu)(Event|Stream)Query$")


@dataclass
class WaitEdges:
    """Edges and THREAD relaxations the wait models add (point ids, int64 ns)."""

    src: list[np.ndarray] = field(default_factory=list)
    dst: list[np.ndarray] = field(default_factory=list)
    exact: list[np.ndarray] = field(default_factory=list)
    structural: list[np.ndarray] = field(default_factory=list)
    queue: list[bool] = field(default_factory=list)  # QUEUE (True) or SYNC (False)
    #: points whose incoming THREAD edge is lowered to the given intrinsic cost
    relax_point: list[np.ndarray] = field(default_factory=list)
    relax_lag: list[np.ndarray] = field(default_factory=list)
    #: points whose anchor is dropped: a wait edge places them (a thread's first point)
    free: list[np.ndarray] = field(default_factory=list)
    #: one row per rank and wait cause: (rank, cause, calls, waited_calls, waited_ns, detail)
    summary: list[tuple[int, str, int, int, int, str]] = field(default_factory=list)

    def add(self, src: np.ndarray, dst: np.ndarray, exact: np.ndarray,
            structural: np.ndarray, queue: bool) -> None:
        if src.size:
            self.src.append(np.asarray(src, np.int64))
            self.dst.append(np.asarray(dst, np.int64))
            self.exact.append(np.maximum(np.asarray(exact, np.int64), 0))
            self.structural.append(np.maximum(np.asarray(structural, np.int64), 0))
            self.queue.append(queue)

    def relax(self, points: np.ndarray, lag: np.ndarray) -> None:
        if points.size:
            self.relax_point.append(np.asarray(points, np.int64))
            self.relax_lag.append(np.maximum(np.asarray(lag, np.int64), 0))


_MASKS: dict[tuple[int, int], tuple[list[str], np.ndarray]] = {}


def name_mask(pattern: re.Pattern[str], name_dict: list[str]) -> np.ndarray:
    """bool per name id: ``pattern`` found in the name. The ranks of a TraceSet share one
    name dictionary: the last few results are kept (per pattern and dictionary object), so a
    1,024-rank graph does not run every regex over every name once per rank."""
    key = (id(pattern), id(name_dict))
    hit = _MASKS.get(key)
    if hit is not None and hit[0] is name_dict:
        return hit[1]
    mask = np.array([bool(pattern.search(s)) for s in name_dict] or [False])
    if len(_MASKS) > 64:
        _MASKS.clear()
    _MASKS[key] = (name_dict, mask)
    return mask


def intrinsic(calls: np.ndarray, waited: np.ndarray, call_dur: np.ndarray,
               name_idx: np.ndarray, fallback: int) -> np.ndarray:
    """int64[len(calls)]: per call, the median duration (``call_dur``, one per call) of the
    calls of the same name that did not wait (``fallback`` when every call of that name
    waited)."""
    return group_median(name_idx[calls], call_dur, ~waited, fallback)


def ops_by_end(rank: np.ndarray, g: np.ndarray, t1: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The GPU ops ``g`` (rows, ascending) sorted by (rank, end, row): (rank, end, row)
    arrays, for "the op of the call's rank that ended last before t" (``search_in_blocks``
    on them)."""
    gr = rank[g].astype(np.int64)
    og = lexsort((t1[g], gr))  # stable: ties keep ``g``'s ascending rows
    return gr[og], t1[g][og], g[og]


def on_ranks_of(rank: np.ndarray, rows: np.ndarray, of: np.ndarray) -> np.ndarray:
    """bool per row of ``of``: its rank has one of ``rows`` (``np.isin(rank[of],
    rank[rows])``; a table by rank id when the ids are from 0, one gather then)."""
    if rank.size == 0 or int(rank.min()) < 0:
        return np.isin(rank[of], np.unique(rank[rows]))
    table = np.zeros(int(rank.max()) + 1, bool)
    table[rank[rows]] = True
    return table[rank[of]]
