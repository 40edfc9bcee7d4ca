"""Host waits: what a host call waited for, kept apart from its own cost.

A host runtime call's measured duration is its *intrinsic* cost plus the time it waited for
something else. Replayed as a fixed duration, the wait pins the host to the measured step
whatever the GPU does. Each wait is modelled here as a dependency edge plus the call's own
cost (the principle of Lin et al., arXiv 2404.12674, Sec. 5: CPU overheads kept apart from
GPU time, intra-rank synchronization as edges):

* **Launch-queue back-pressure** (``QUEUE``). A launch returns only when its stream's queue
  of pending work has room: launch ``i`` on a stream ends after the ``i - Q``-th entry of that
  stream completes. ``Q`` is 1,024 entries per stream for CUDA (HTA,
  ``hta/configs/default_values.py::CUDA_MAX_LAUNCH_QUEUE_PER_STREAM`` and its "Augmented
  counters" documentation: "when the queue length on a stream is 1024 or larger new events
  cannot be scheduled on that stream and the CPU will stall"; the limit is not documented by
  NVIDIA). HIP has no documented limit either; the same default is assumed. When launches
  visibly block in the trace, ``Q`` is fitted: among depths up to the largest number of
  outstanding entries observed at a launch's return, the one at which most launches were
  woken by the completion of the entry ``Q`` places before them (the queue also holds
  entries the profiler does not show, such as event records, so the fit is usually a little
  below 1,024).
* **Blocking copies and syncs** (``SYNC``). ``cudaMemcpy``/``cudaMemcpyAsync`` (pageable
  host memory makes the async form synchronous) end after the copy they issued; a
  ``cudaDeviceSynchronize`` after the last op launched before it on every stream of the device;
  a ``cudaStreamSynchronize`` after the last op launched before it on the stream the thread
  last launched to (``.item()``, ``.cpu()``, ``nonzero``: copy then sync on the current stream);
  other blocking calls (event syncs, ``cudaFree``) after the GPU op that ended last before them
  when they ended within :data:`SYNC_WAKE_NS` of it.
* **Polling** (``SYNC``). A run of ``cudaEventQuery``/``cudaStreamQuery``/``hipEventQuery``
  calls on one thread that spans at least :data:`POLL_MIN_SPAN_NS` and ends shortly after a
  GPU op ends is one wait for that op: the thread's time inside the run is not work.

The edges exist whether or not the measured run waited (a slower GPU must make the host
wait where the measurement did not). A call that did wait (its dependency ended within the
wake-up window before it returned, and it lasted longer than its intrinsic cost) has the
THREAD segment into its end lowered to its intrinsic cost: the median duration of the calls
of the same name on the rank that did not wait, never its blocked duration.

Lags: ``exact`` is calibrated so that the measurement satisfies every edge and the binding
one with equality; ``structural`` uses the median wake-up latency of the waits observed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from traincast.graph.grouped import group_median

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


def _intrinsic(calls: np.ndarray, waited: np.ndarray, call_dur: np.ndarray,
               name_idx: np.ndarray, fallback: int) -> np.ndarray:
    """int64[len(calls)]: per call, the median duration (``call_dur``, one per call) of the
    calls of the same name that did not wait (``fallback`` when every call of that name
    waited)."""
    return group_median(name_idx[calls], call_dur, ~waited, fallback)


def launch_queue(rank: int, g: np.ndarray, launch: np.ndarray, device: np.ndarray,
                 stream: np.ndarray, t0: np.ndarray, t1: np.ndarray, name_idx: np.ndarray,
                 out: WaitEdges) -> None:
    """QUEUE edges of one rank's launches (see the module docstring).

    Args:
        g: int64[G] GPU op rows; launch: int64[G] row of the runtime call that launched each
            (-1: not in the trace); t0/t1: aligned start/end (ns) of every row.
    """
    ok = launch >= 0
    if not ok.any():
        return
    gl, ll = g[ok], launch[ok]
    key = device[gl].astype(np.int64) * (1 << 32) + (stream[gl].astype(np.int64) & 0xFFFFFFFF)
    # one queue entry per (stream, launch call); it completes with its last op
    per: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (calls, done op, outstanding)
    max_out = 0
    for k in np.unique(key).tolist():
        sel = key == k
        calls, inv = np.unique(ll[sel], return_inverse=True)
        ops = gl[sel]
        best = np.full(calls.size, -1, np.int64)
        order = np.argsort(t1[ops], kind="stable")  # last write wins: the latest end
        best[inv[order]] = ops[order]
        o = np.lexsort((calls, t0[calls]))
        calls, best = calls[o], best[o]
        ends = t1[calls]
        launched = np.searchsorted(np.sort(t0[calls]), ends, "right")
        completed = np.searchsorted(np.sort(t1[best]), ends, "right")
        outstanding = launched - completed
        max_out = max(max_out, int(outstanding.max()))
        per.append((calls, best, outstanding))
    # every array here is the rank's: no work proportional to the whole job's events
    all_calls = np.concatenate([p[0] for p in per])
    call_dur = t1[all_calls] - t0[all_calls]
    # intrinsic cost per API: launches whose queue was at most half full
    out_all = np.concatenate([p[2] for p in per])
    calm = out_all <= max(max_out // 2, 1)
    intrinsic_all = _intrinsic(all_calls, ~calm, call_dur, name_idx,
                               int(np.percentile(call_dur, 10)))
    o = np.argsort(all_calls, kind="stable")
    intrinsic_of = (all_calls[o], intrinsic_all[o])  # call row -> intrinsic cost
    # the depth is fitted when launches visibly block: among the depths up to the largest
    # outstanding count (a deeper queue would contradict the trace), the one at which the
    # most launches were woken by the completion of the entry ``depth`` places before them
    # (entries the profiler does not show, e.g. event records, take slots too, and not
    # always the same number of them)
    best = (-1, max_out)
    for d in range(max_out, max(max_out - FIT_WINDOW, MIN_FITTED_DEPTH) - 1, -1):
        n_blocked = int(_queue_pairs(per, d, t0, t1, intrinsic_of)[4].sum())
        if n_blocked > best[0]:
            best = (n_blocked, d)
    depth = best[1]
    src_op, c, slack, intr, blocked = _queue_pairs(per, depth, t0, t1, intrinsic_of)
    fitted = max_out >= MIN_FITTED_DEPTH and int(blocked.sum()) >= MIN_BLOCKED
    if not fitted:
        depth = max(DEFAULT_QUEUE_DEPTH, max_out + 1)
        src_op, c, slack, intr, blocked = _queue_pairs(per, depth, t0, t1, intrinsic_of)
    typical = int(np.median(slack[blocked])) if blocked.any() else 0
    exact = np.where(blocked, slack, np.minimum(slack, typical))
    structural = np.minimum(slack, typical)
    out.add(2 * src_op + 1, 2 * c + 1, exact, structural, True)
    out.relax(2 * c[blocked] + 1, intr[blocked])
    waited_ns = int((t1[c[blocked]] - t0[c[blocked]] - intr[blocked]).sum())
    how = (f"depth {depth} fitted (launches blocked until the entry {depth} before completed)"
           if fitted
           else f"depth {depth} assumed (CUDA default per stream, HTA; never full here)")
    out.summary.append((rank, "launch_queue", int(all_calls.size), int(blocked.sum()),
                        waited_ns, how))


def _queue_pairs(per: list[tuple[np.ndarray, np.ndarray, np.ndarray]], depth: int,
                 t0: np.ndarray, t1: np.ndarray,
                 intrinsic_of: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(freeing op, launch call, slack, intrinsic cost, blocked) for queue depth ``depth``:
    launch ``i`` of a stream waits for entry ``i - depth`` of the same stream."""
    srcs, dsts = [], []
    for calls, best, _ in per:
        if calls.size <= depth:
            continue
        i = np.arange(depth, calls.size)
        srcs.append(best[i - depth])
        dsts.append(calls[i])
    if not srcs:
        e = np.empty(0, np.int64)
        return e, e, e, e, np.empty(0, bool)
    src_op, c = np.concatenate(srcs), np.concatenate(dsts)
    slack = t1[c] - t1[src_op]
    keep = slack >= 0  # an inconsistent pair (clock or ordering noise) adds no edge
    src_op, c, slack = src_op[keep], c[keep], slack[keep]
    rows, costs = intrinsic_of
    intr = costs[np.searchsorted(rows, c)]
    dur_c = t1[c] - t0[c]
    # blocked: the freeing entry completed while the call was in progress, and the call
    # returned within the wake-up window after it, later than its intrinsic cost
    blocked = (t1[src_op] > t0[c]) & (slack <= QUEUE_WAKE_NS) & (dur_c > intr)
    return src_op, c, slack, intr, blocked


def legacy_syncs(host_rows: np.ndarray, g: np.ndarray, blocking: np.ndarray,
                 name_idx: np.ndarray, t0: np.ndarray, t1: np.ndarray, out: WaitEdges) -> None:
    """The sync model before the wait models (``build_graph(model_waits=False)``, kept for
    comparison): a blocking call depends on the GPU op that ended last before it only when
    the measured run waited for it (it ended within :data:`SYNC_WAKE_NS`); launches, copies
    and syncs that did not wait keep their measured durations as host work."""
    calls = host_rows[blocking[name_idx[host_rows]]]
    if calls.size == 0 or g.size == 0:
        return
    o = np.argsort(t1[g], kind="stable")
    g_end, g_rows = t1[g][o], g[o]
    j = np.searchsorted(g_end, t1[calls], "right") - 1
    jj = np.clip(j, 0, None)
    waited = (j >= 0) & (g_end[jj] > t0[calls]) & (t1[calls] - g_end[jj] <= SYNC_WAKE_NS)
    c, dep = calls[waited], g_rows[jj[waited]]
    wake = t1[c] - t1[dep]
    typical = np.full(wake.size, int(np.median(wake)) if wake.size else 0, np.int64)
    out.add(2 * dep + 1, 2 * c + 1, wake, typical, False)
    out.relax(2 * c + 1, wake)
