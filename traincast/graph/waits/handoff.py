"""Cross-thread handoffs to the autograd engine (``SYNC`` edges between two host threads of
one process; the model is described in :mod:`traincast.graph.waits`).

On a GPU, PyTorch's autograd engine runs the backward on a device thread of its own
(``torch/csrc/autograd/engine.cpp``: ``Engine::execute`` queues the graph task to the
device's ready queue and the calling thread blocks on the task's future until the device
thread finishes it; CPU-only nodes ready on the calling thread run there, between the
device thread's nodes). A Kineto trace then shows, on the calling thread A, a gap without
events while the device thread B runs a burst of ``autograd::engine::evaluate_function: ...``
events, and B idle before it (during the forward).

Detection, per process (rank, pid) and per pair of host threads A != B (op chains, not the
``python_function`` chains; point times as the graph's THREAD chains have them, ns):

* B is an *autograd thread*: it has top-level ``autograd::engine::evaluate_function``
  events and they hold at least half of its top-level busy time.
* A *gap* of A is a pair of consecutive points ``(a0, a1)`` of its chain. B is *busy* at
  ``a0`` when one of its top-level events contains ``a0``.
* A **handoff** gap: B idle at ``a0``; the first top-level event of B starting in the gap
  (at ``b0``) is an ``evaluate_function``; ``b1`` is the end of B's last top-level event
  ending in the gap, ``b1 >= b0``; both latencies ``b0 - a0`` and ``a1 - b1`` are at most
  :data:`HANDOFF_WAKE_NS` or a tenth of B's part ``b1 - b0``, whichever is longer; the gap
  lasts at least :data:`HANDOFF_MIN_GAP_NS`; and A's own
  part ``(b0 - a0) + (a1 - b1)`` is at most B's part ``b1 - b0`` (with several autograd
  threads handed work in one gap, one per device: the earliest ``b0``, the latest ``b1``).
* A **continuation** gap (a backward split into several pieces by CPU nodes the engine runs
  on A): B busy at ``a0``, after a handoff gap of the same A with no *quiet* gap since (one of
  at least :data:`HANDOFF_MIN_GAP_NS` with B idle at its start and none of B's events
  starting in it); ``b1`` as above with ``a1 - b1`` at most
  :data:`HANDOFF_WAKE_NS` (or a tenth of ``b1 - a0``) and at most ``b1 - a0``, the gap at least
  :data:`HANDOFF_MIN_GAP_NS`.
* When several threads A claim one burst start of B, the one with the smallest own part
  keeps it (with its continuations).

Edges: a handoff gap gets ``A(a0) -> B(b0)`` (B's burst starts after A handed it over) and
``B(b1) -> A(a1)`` (A resumes after B's work); a continuation gap the second only. Lags:
``exact`` is the measured latency of each edge except for the resume edges into one point
from several autograd threads (several GPUs per process), which all take the smallest
(``a1`` minus the latest ``b1``): the measurement satisfies every edge and the binding one
with equality. ``structural`` is the same as ``exact``: the latency holds untraced work of
the calling thread (the Python call into the engine, the return to Python), not a wake-up
alone. THREAD segments: A's gap is lowered to its own part (``(b0 - a0) + (a1 - b1)`` with
the earliest ``b0`` and latest ``b1`` over the autograd threads; ``a1 - b1`` for a
continuation), B's segment into ``b0`` (its idle time before the burst) to 0; a burst that
starts B's chain loses its anchor (the handoff edge places it).
"""

from __future__ import annotations

import re

import numpy as np

from traincast.graph.chain_times import ChainTimes
from traincast.graph.grouped import search_in_blocks
from traincast.graph.jit import kernel, worth_compiling
from traincast.graph.waits.common import WaitEdges, name_mask

_US = 1000
#: the largest latency, either side, of an autograd handoff (the Python call into the engine
#: and the wake-up of the calling thread, under the profiler), unless a tenth of the burst
#: is longer
HANDOFF_WAKE_NS = 5000 * _US
#: the shortest gap of the calling thread taken as a wait for the autograd thread
HANDOFF_MIN_GAP_NS = 50 * _US

AUTOGRAD_EVAL = re.compile(r"^autograd::engine::evaluate_function")


def handoffs(rank: np.ndarray, pid: np.ndarray, tid: np.ndarray, name_idx: np.ndarray,
             name_dict: list[str], rs: np.ndarray, bounds: np.ndarray, parents: np.ndarray,
             pts: np.ndarray, times: np.ndarray | ChainTimes, op_chain: np.ndarray,
             out: WaitEdges, t0: np.ndarray, t1: np.ndarray) -> None:
    """SYNC edges and THREAD relaxations of every autograd handoff (module docstring).

    Args:
        rank, pid, tid, name_idx: per event row; name_dict: the event-name dictionary.
        rs, bounds, parents, pts, times: the host threads' chains
            (:func:`traincast.graph.nesting.thread_chains`: ``rs[bounds[s]:bounds[s + 1]]``
            are the rows of chain ``s`` sorted by (start, -duration), ``parents`` the
            enclosing row of each (-1 at top level), ``pts``/``times`` the chain's points in
            nesting order, ``2 * bounds[s]`` to ``2 * bounds[s + 1]``; ``times`` an array or
            :class:`~traincast.graph.chain_times.ChainTimes`).
        op_chain: bool per chain: a chain of ops (not of ``python_function`` events).
        t0, t1: start and end (ns, as the chains have them) per event row: a top-level
            event's points are at its start and at its end (never below its start).
    """
    is_eval = name_mask(AUTOGRAD_EVAL, name_dict)
    n_chain = bounds.size - 1
    if not is_eval.any() or n_chain < 2:
        return
    chain_of = np.repeat(np.arange(n_chain, dtype=np.int32 if n_chain < 1 << 31 else np.int64),
                         np.diff(bounds))
    top = parents < 0
    eval_top = top & is_eval[name_idx[rs]] & op_chain[chain_of]
    b_chains = np.unique(chain_of[eval_top])
    if b_chains.size == 0:
        return
    found = _pairs(rank, pid, name_idx, is_eval, rs, bounds, chain_of, top, pts, times,
                   op_chain, b_chains, t0, t1)
    if found is None:
        return
    _emit([found], pts, rank, out)


def _pairs(rank: np.ndarray, pid: np.ndarray, name_idx: np.ndarray, is_eval: np.ndarray,
           rs: np.ndarray, bounds: np.ndarray, chain_of: np.ndarray, top: np.ndarray,
           pts: np.ndarray, times: np.ndarray | ChainTimes, op_chain: np.ndarray,
           b_chains: np.ndarray,
           t0: np.ndarray, t1: np.ndarray) -> dict[str, np.ndarray] | None:
    """The handoff and continuation gaps of every pair (A, B) of threads of one process, all
    at once: B an autograd thread (a chain of ``b_chains`` whose ``evaluate_function`` events
    hold at least half of its top-level busy time), A another op chain of B's (rank, pid).
    Pairs in the order B, then A ascending; gaps in A's chain order within a pair. Per gap:
    ``k`` (its position in A's chain), ``run`` (the position of the handoff gap that began
    its run), ``hand`` (a handoff gap), ``src``/``dst`` (A's points), ``a0``/``a1``,
    ``first``/``last`` (B's rows at ``b0``/``b1``), ``b0``/``b1``, ``a`` (A's chain) and
    ``b_first`` (B's first point position); None when no gap qualifies.

    Only gaps of at least :data:`HANDOFF_MIN_GAP_NS` are looked at: handoff, continuation
    and quiet gaps all last that long, so the runs they form are the same."""
    n_chain = bounds.size - 1
    # B's top-level rows (they do not overlap: starts and ends ascending within B)
    in_b = np.zeros(n_chain, bool)
    in_b[b_chains] = True
    b_pos = np.flatnonzero(top & in_b[chain_of])
    b_of = chain_of[b_pos]  # ascending: chains are contiguous in rs
    rows = rs[b_pos]
    # the times of a top-level row's start and end points in the walk (nothing clips them)
    bt0 = t0[rows]
    bt1 = np.maximum(t1[rows], bt0)
    ev = is_eval[name_idx[rows]]
    busy = bt1 - bt0
    b_head = np.flatnonzero(np.r_[True, b_of[1:] != b_of[:-1]])
    total = np.add.reduceat(busy, b_head)
    on_eval = np.add.reduceat(np.where(ev, busy, 0), b_head)
    good = on_eval * 2 >= total  # per B chain (b_chains order)
    if not good.any():
        return None
    keep = good[np.repeat(np.arange(b_head.size), np.diff(np.r_[b_head, b_pos.size]))]
    b_of, rows, bt0, bt1, ev = b_of[keep], rows[keep], bt0[keep], bt1[keep], ev[keep]
    bs = b_chains[good]
    b_id = np.repeat(np.arange(bs.size), np.diff(np.r_[np.flatnonzero(
        np.r_[True, b_of[1:] != b_of[:-1]]), b_of.size]))
    b_lo = np.r_[0, np.flatnonzero(b_id[1:] != b_id[:-1]) + 1]  # B's first row
    b_n = np.diff(np.r_[b_lo, b_id.size])
    # the pairs: per B (ascending), the op chains of its process but itself (ascending)
    head = rs[bounds[:-1]]
    c_rank = rank[head].astype(np.int64)
    c_pid = pid[head].astype(np.int64)
    ops = np.flatnonzero(op_chain)
    oo = ops[np.lexsort((ops, c_pid[ops], c_rank[ops]))]
    k_rank, k_pid = c_rank[oo], c_pid[oo]
    blk = np.cumsum(np.r_[True, (k_rank[1:] != k_rank[:-1]) | (k_pid[1:] != k_pid[:-1])]) - 1
    blk_lo = np.searchsorted(blk, np.arange(blk[-1] + 1 if blk.size else 0))
    blk_hi = np.r_[blk_lo[1:], blk.size]
    # B's block among the op chains (B is an op chain: its evaluate_function events are)
    where_b = np.empty(n_chain, np.int64)
    where_b[oo] = np.arange(oo.size)
    bb = blk[where_b[bs]]
    p_lo, p_hi = blk_lo[bb], blk_hi[bb]
    mate = oo[_ranges(p_lo, p_hi)]
    p_b = np.repeat(np.arange(bs.size), p_hi - p_lo)
    mine = mate != bs[p_b]
    mate, p_b = mate[mine], p_b[mine]
    # the gaps of A that can wait (every handoff, continuation and quiet gap lasts at least
    # HANDOFF_MIN_GAP_NS): positions k of A's chain, (a0, a1) = times[k], times[k + 1]
    long = long_steps(times, bounds, HANDOFF_MIN_GAP_NS)
    g_lo = np.searchsorted(long, 2 * bounds[mate])
    g_hi = np.searchsorted(long, 2 * bounds[mate + 1] - 1)
    g_n = g_hi - g_lo
    gap = long[_ranges(g_lo, g_hi)]
    pair = np.repeat(np.arange(mate.size), g_n)
    g_first = np.cumsum(g_n) - g_n  # each pair's first gap in ``gap``
    k = gap - 2 * bounds[mate][pair]  # the gap's position in A's chain
    a0, a1 = times[gap], times[gap + 1]
    gb = p_b[pair]  # B of each gap
    nb = b_n[gb]
    base = b_lo[gb]
    i = search_in_blocks(b_id, bt0, gb, a0, "left") - base  # B's first top event at/after a0
    ii = base + np.clip(i, 0, nb - 1)
    jj = base + np.clip(i - 1, 0, nb - 1)
    busy0 = (i > 0) & (bt1[jj] > a0)
    m = search_in_blocks(b_id, bt1, gb, a1, "right") - base - 1  # B's last ending by a1
    mm = base + np.clip(m, 0, nb - 1)
    b0, b1 = bt0[ii], bt1[mm]
    has_last = (m >= 0) & (b1 > a0)
    wake = np.maximum(HANDOFF_WAKE_NS, (b1 - np.where(busy0, a0, b0)) // 10)
    resume = has_last & (a1 - b1 <= wake)
    hand = ~busy0 & resume & (i < nb) & (b0 < a1) & (m >= i) & ev[ii] & (b0 - a0 <= wake)
    quiet = ~busy0 & ~((i < nb) & (b0 <= a1))
    # the run's head within the pair: a running maximum that restarts at each pair
    idx = np.arange(gap.size)
    acc = np.maximum.accumulate(np.where(hand | quiet, idx, -1)) if idx.size else idx
    first = g_first[pair]
    has_head = acc >= first
    cont = busy0 & resume & has_head & (a1 - b1 <= b1 - a0)
    cont &= hand[np.maximum(acc, first)]
    sel = np.flatnonzero(hand | cont)
    if sel.size == 0:
        return None
    return {"k": k[sel], "run": k[acc[sel]], "hand": hand[sel],
            "src": pts[gap[sel]], "dst": pts[gap[sel] + 1], "a0": a0[sel], "a1": a1[sel],
            "first": rows[ii[sel]], "last": rows[mm[sel]], "b0": b0[sel], "b1": b1[sel],
            "a": mate[pair[sel]].astype(np.int64),
            "b_first": 2 * bounds[bs[gb[sel]]].astype(np.int64)}


def long_steps(times: np.ndarray | ChainTimes, bounds: np.ndarray, min_step: int
               ) -> np.ndarray:
    """int64, ascending: the positions ``i`` of the chain points (chain ``s`` at ``[2
    bounds[s], 2 bounds[s + 1])`` of ``times``) whose successor on the same chain comes at
    least ``min_step`` later. Compiled for large chains
    (:func:`traincast.graph.numba_kernels.long_steps`: no whole-chain temporaries);
    :class:`~traincast.graph.chain_times.ChainTimes` give the steps the walk found for this
    ``min_step``, else are read a slice of chains at a time."""
    if isinstance(times, ChainTimes):
        if times.steps is not None and times.steps[0] == min_step:  # found by the walk
            return times.steps[1]
        parts = [_long_steps(t, bounds[s0:s1 + 1] - bounds[s0], min_step, times.size) + a
                 for s0, s1, a, t in times.slices(bounds)]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)
    return _long_steps(times, bounds, min_step, times.size)


def _long_steps(times: np.ndarray, bounds: np.ndarray, min_step: int, size: int
                ) -> np.ndarray:
    """:func:`long_steps` of an array, compiled when ``size`` points pay for it."""
    compiled = _long_steps_kernel(size)
    if compiled is not None and times.dtype == np.int64 and bounds.dtype == np.int64:
        return compiled(times, bounds, int(min_step))
    step = np.diff(times) >= min_step
    step[2 * bounds[1:-1] - 1] = False  # from a chain's last point to the next chain's first
    return np.flatnonzero(step)


_LONG: list = []


def _long_steps_kernel(size: int):  # type: ignore[no-untyped-def]
    """:func:`traincast.graph.numba_kernels.long_steps`, or None
    (:func:`traincast.graph.jit.kernel`: numba missing, ``TRAINCAST_NO_NUMBA`` set, or
    ``size`` too small to pay for loading it)."""
    if not worth_compiling(size):
        return None
    if not _LONG:
        _LONG.append(kernel("traincast.graph.numba_kernels", "long_steps"))
    return _LONG[0]


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """int64: the concatenation of ``arange(lo[i], hi[i])`` (``hi >= lo``)."""
    n = hi - lo
    starts = np.cumsum(n) - n
    return np.arange(int(n.sum()), dtype=np.int64) + np.repeat(lo - starts, n)


def _emit(found: list[dict[str, np.ndarray]], pts: np.ndarray, rank: np.ndarray,
          out: WaitEdges) -> None:
    """Resolve competing threads A, calibrate the lags and add the edges and relaxations."""
    f = {k: np.concatenate([x[k] for x in found]) for k in found[0]}
    # a handoff gap of A: its own part at most the autograd threads' part, over every
    # autograd thread with a handoff in that gap (one per device)
    hand = np.flatnonzero(f["hand"])
    gap_of = np.unique(f["dst"][hand], return_inverse=True)[1]
    big = np.iinfo(np.int64).max
    u0 = np.full(gap_of.max(initial=-1) + 1, big, np.int64)
    u1 = np.full(u0.size, -big, np.int64)
    np.minimum.at(u0, gap_of, f["b0"][hand])
    np.maximum.at(u1, gap_of, f["b1"][hand])
    lo, hi = u0[gap_of], u1[gap_of]
    fits = (lo - f["a0"][hand]) + (f["a1"][hand] - hi) <= hi - lo
    f["hand"][hand[~fits]] = False
    hand = hand[fits]
    # one calling thread per burst start: the smallest own part wins (with its run)
    own = np.where(f["hand"], f["b0"] - f["a0"], 0) + (f["a1"] - f["b1"])
    o = hand[np.lexsort((own[hand], f["first"][hand]))]
    keep_h = o[np.r_[True, f["first"][o][1:] != f["first"][o][:-1]]]
    won = np.zeros(f["k"].size, bool)
    won[keep_h] = True
    # a continuation follows the fate of the handoff that began its run (same A, same B)
    heads = set(zip(f["a"][keep_h].tolist(), f["b_first"][keep_h].tolist(),
                    f["run"][keep_h].tolist(), strict=True))
    c = np.flatnonzero(~f["hand"] & (f["k"] != f["run"]))  # a rejected handoff is no run
    won[c] = [x in heads for x in zip(f["a"][c].tolist(), f["b_first"][c].tolist(),
                                      f["run"][c].tolist(), strict=True)]
    f = {k: v[won] for k, v in f.items()}
    if f["k"].size == 0:
        return
    # handoffs: A(a0) -> B(b0), B's idle segment into b0 lowered to 0
    h = f["hand"]
    out.add(f["src"][h], 2 * f["first"][h], f["b0"][h] - f["a0"][h],
            f["b0"][h] - f["a0"][h], False)
    b_start = 2 * f["first"][h]
    out.relax(b_start, np.zeros(b_start.size, np.int64))
    out.free.append(b_start[pts[f["b_first"][h]] == b_start])
    # resumes: B(b1) -> A(a1); per A point, the latest b1 and the earliest handoff b0
    dst = f["dst"]
    o = np.argsort(dst, kind="stable")
    d_sorted = dst[o]
    starts = np.flatnonzero(np.r_[True, d_sorted[1:] != d_sorted[:-1]])
    latest = np.maximum.reduceat(f["b1"][o], starts)
    big = np.iinfo(np.int64).max
    earliest = np.minimum.reduceat(np.where(h, f["b0"], big)[o], starts)
    grp = np.empty(dst.size, np.int64)
    grp[o] = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, dst.size]))
    lag = f["a1"] - latest[grp]
    out.add(2 * f["last"] + 1, dst, lag, lag, False)
    a0_u, a1_u = f["a0"][o][starts], f["a1"][o][starts]
    own_u = np.where(earliest < big, earliest - a0_u, 0) + (a1_u - latest)
    out.relax(d_sorted[starts], own_u)
    # summary per rank: gaps lowered, handoffs among them, time no longer replayed as work
    r_gap = rank[d_sorted[starts] // 2].astype(np.int64)
    waited = (a1_u - a0_u) - own_u
    r_rec = rank[f["dst"] // 2].astype(np.int64)
    # per rank at once (a loop over ranks of masks over every record was ranks x records)
    ranks_u, inv = np.unique(r_gap, return_inverse=True)
    n_gap = np.bincount(inv, minlength=ranks_u.size)
    w_sum = np.zeros(ranks_u.size, np.int64)
    np.add.at(w_sum, inv, waited)
    at = np.clip(np.searchsorted(ranks_u, r_rec), 0, max(ranks_u.size - 1, 0))
    on = ranks_u[at] == r_rec
    n_hand = np.bincount(at[on & h], minlength=ranks_u.size)
    n_cont = np.bincount(at[on & ~h], minlength=ranks_u.size)
    for r, ng, nh, nc, w in zip(ranks_u.tolist(), n_gap.tolist(), n_hand.tolist(),
                                n_cont.tolist(), w_sum.tolist(), strict=True):
        out.summary.append((r, "handoff", ng, nh, w,
                            f"{nh} autograd handoffs, {nc} continuations"))
