"""The whole-job handoff search (:func:`traincast.graph.waits.handoff._pairs`) finds the same
gaps, in the same order, as the loop over (autograd thread B, calling thread A) pairs it
replaced (kept here as the reference), on real traces: the 8-rank DLRM job (one handoff and
one continuation per rank), the 16-rank FSDP trace (split backwards, a watchdog thread) and
two autograd threads in one process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synth_trace import Trace

import traincast
from traincast.graph.build import build_graph
from traincast.graph.waits import handoff
from traincast.graph.waits.handoff import HANDOFF_MIN_GAP_NS, HANDOFF_WAKE_NS


def _pair_reference(a_pts, a_t, rows, bt0, bt1, ev):  # type: ignore[no-untyped-def]
    """The per-pair search the whole-job pass replaced (every gap of A, one pair)."""
    if a_pts.size < 2:
        return None
    a0, a1 = a_t[:-1], a_t[1:]
    nb = rows.size
    i = np.searchsorted(bt0, a0, "left")
    ii = np.clip(i, 0, nb - 1)
    jj = np.clip(i - 1, 0, nb - 1)
    busy0 = (i > 0) & (bt1[jj] > a0)
    m = np.searchsorted(bt1, a1, "right") - 1
    mm = np.clip(m, 0, nb - 1)
    b0, b1 = bt0[ii], bt1[mm]
    has_last = (m >= 0) & (b1 > a0)
    long_gap = a1 - a0 >= HANDOFF_MIN_GAP_NS
    wake = np.maximum(HANDOFF_WAKE_NS, (b1 - np.where(busy0, a0, b0)) // 10)
    resume = has_last & long_gap & (a1 - b1 <= wake)
    hand = ~busy0 & resume & (i < nb) & (b0 < a1) & (m >= i) & ev[ii] & (b0 - a0 <= wake)
    quiet = ~busy0 & ~((i < nb) & (b0 <= a1)) & long_gap
    run_head = np.maximum.accumulate(np.where(hand | quiet, np.arange(a0.size), -1))
    cont = busy0 & resume & (run_head >= 0) & (a1 - b1 <= b1 - a0)
    cont &= hand[np.clip(run_head, 0, None)]
    sel = np.flatnonzero(hand | cont)
    if sel.size == 0:
        return None
    return {"k": sel, "run": run_head[sel], "hand": hand[sel], "src": a_pts[sel],
            "dst": a_pts[sel + 1], "a0": a0[sel], "a1": a1[sel], "first": rows[ii[sel]],
            "last": rows[mm[sel]], "b0": b0[sel], "b1": b1[sel]}


def _reference(rank, pid, name_idx, is_eval, rs, bounds, chain_of, top, pts, times,  # type: ignore[no-untyped-def]
               op_chain, b_chains, t0, t1):
    """The loop over B, then A, that :func:`handoff._pairs` replaced (B's times read off
    the walk's points, not ``t0``/``t1``)."""
    n_chain = bounds.size - 1
    head = rs[bounds[:-1]]
    key = np.stack([rank[head].astype(np.int64), pid[head].astype(np.int64)], 1)
    found = []
    for b in b_chains.tolist():
        pos = np.arange(bounds[b], bounds[b + 1])
        rows = rs[pos[top[pos]]]
        start = times[2 * bounds[b]:2 * bounds[b + 1]]
        bp = pts[2 * bounds[b]:2 * bounds[b + 1]]
        order = np.argsort(bp, kind="stable")
        bt0 = start[order[np.searchsorted(bp[order], 2 * rows)]]
        bt1 = start[order[np.searchsorted(bp[order], 2 * rows + 1)]]
        ev = is_eval[name_idx[rows]]
        busy = bt1 - bt0
        if busy[ev].sum() * 2 < busy.sum():
            continue
        mates = np.flatnonzero(op_chain & (key[:, 0] == key[b, 0]) & (key[:, 1] == key[b, 1])
                               & (np.arange(n_chain) != b))
        for a in mates.tolist():
            got = _pair_reference(pts[2 * bounds[a]:2 * bounds[a + 1]],
                                  times[2 * bounds[a]:2 * bounds[a + 1]], rows, bt0, bt1, ev)
            if got is not None:
                got["a"] = np.full(got["k"].size, a, np.int64)
                got["b_first"] = np.full(got["k"].size, 2 * bounds[b], np.int64)
                found.append(got)
    if not found:
        return None
    return {k: np.concatenate([x[k] for x in found]) for k in found[0]}


def _check(ts, monkeypatch: pytest.MonkeyPatch) -> int:  # type: ignore[no-untyped-def]
    """Build the graph with the whole-job pass checked against the reference at its call;
    returns the gaps found."""
    seen: list[int] = []
    real = handoff._pairs

    def checked(*args):  # type: ignore[no-untyped-def]
        got, want = real(*args), _reference(*args)
        assert (got is None) == (want is None)
        if got is not None:
            assert got.keys() == want.keys()
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=k)
            seen.append(int(want["k"].size))
        return got

    monkeypatch.setattr(handoff, "_pairs", checked)
    build_graph(ts)
    return sum(seen)


def test_pairs_match_per_pair_loop_on_real_traces(traces: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    dlrm = traincast.load(traces / "dlrm_8xv100" / "kineto")
    assert _check(dlrm, monkeypatch) == 16  # a handoff and a continuation per rank
    fsdp = traincast.load(traces / "hta" / "a100_16rank_5streams")
    assert _check(fsdp, monkeypatch) > 0


def test_pairs_match_with_two_autograd_threads(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    t = Trace()
    t.step(1, 0, 1000)
    t.host("aten::linear", 10, 290)
    t.launch("volta_sgemm_128x64_nn", 20, 5, 30, 200)
    for tid, s, d in ((2, 350.0, 240.0), (3, 400.0, 450.0)):
        t.host("autograd::engine::evaluate_function: MmBackward0", s, d, tid=tid)
        t.launch("volta_sgemm_128x64_nt", s + 10, 5, s + 20, 50, tid=tid)
    t.host("Optimizer.step#SGD.step", 910, 80, cat="user_annotation")
    assert _check(traincast.load(t.write(tmp_path)), monkeypatch) == 2


def test_ranges() -> None:
    got = handoff._ranges(np.array([5, 0, 9, 2]), np.array([8, 0, 10, 4]))
    assert got.tolist() == [5, 6, 7, 9, 2, 3]
    assert handoff._ranges(np.array([3]), np.array([3])).size == 0
