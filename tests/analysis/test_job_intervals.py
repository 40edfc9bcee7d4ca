"""Whole-job passes of the breakdown, the idle attribution and the straggler blame equal the
per-rank computations they replace (real traces, and edge cases: a rank without device ops,
a window with no event, overlapping intervals, nothing at all)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import traincast
from traincast.analysis import breakdown as B
from traincast.analysis import idle as I
from traincast.analysis import job_intervals as J
from traincast.analysis.stragglers import compiled as C
from traincast.analysis.stragglers import lateness as S
from traincast.trace import arrow as A


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def mpi(traces: Path) -> traincast.TraceSet:
    with pytest.warns(Warning):
        return traincast.load(traces / "otf2" / "ping-pong-otf2")


def _edge_variant(ts: traincast.TraceSet) -> traincast.TraceSet:
    """Rank 3 without its device ops (measured on the host), rank 5 with copies of its
    kernels shifted to overlap the originals, and an extra step of rank 1 after its last
    event (a window with no event)."""
    ev = ts.events
    rank = A.to_numpy(ev.column("rank"))
    device = A.to_numpy(ev.column("device"))
    ev = ev.filter(pa.array(~((rank == 3) & (device >= 0))))
    rank = A.to_numpy(ev.column("rank"))
    kinds = np.asarray(ev.column("kind").to_pylist(), object)
    dup = np.flatnonzero((rank == 5) & (kinds == "kernel"))[:200]
    extra = ev.take(pa.array(dup))
    extra = extra.set_column(extra.schema.get_field_index("ts"), "ts",
                             pa.array(A.to_numpy(extra.column("ts")) + 1500))
    ev = pa.concat_tables([ev, extra]).combine_chunks()
    o = np.argsort(A.to_numpy(ev.column("rank")), kind="stable")
    ev = ev.take(pa.array(o))
    it = ts.iterations.to_pandas()
    last = it[it["rank"] == 1].iloc[-1]
    add = last.copy()
    add["iteration"] = int(last["iteration"]) + 1
    add["start"] = int(A.to_numpy(ts.events.column("ts")).max()) + 10_000
    add["end"] = add["start"] + 5_000
    add["dur"] = 5_000
    add["marker_event"] = -1
    it = pd.concat([it, add.to_frame().T], ignore_index=True).astype(it.dtypes.to_dict())
    iters = pa.Table.from_pandas(it, schema=ts.iterations.schema, preserve_index=False)
    return dataclasses.replace(ts, events=ev, iterations=iters, memo={})


@pytest.mark.parametrize("per", ["iteration", "rank"])
@pytest.mark.parametrize("include_last_step", [False, True])
def test_breakdown_equals_the_per_rank_loop(dlrm, mpi, per, include_last_step) -> None:
    for ts in (dlrm, mpi, _edge_variant(dlrm)):
        got = B._temporal_breakdown(ts, per, include_last_step)
        want = B._breakdown_loop(ts, per, include_last_step)
        pd.testing.assert_frame_equal(got, want)
        assert got.to_json() == want.to_json()


def test_breakdown_edge_variant_covers_the_cases(dlrm) -> None:
    bd = B._temporal_breakdown(_edge_variant(dlrm), "iteration", False)
    assert set(bd.loc[bd["rank"] == 3, "source"]) == {"host"}
    empty = bd[(bd["rank"] == 1)].iloc[-1]
    assert empty["idle_ns"] == empty["window_ns"] == 5_000


def test_breakdown_without_any_event(dlrm) -> None:
    ts = dataclasses.replace(dlrm, events=dlrm.events.slice(0, 0), memo={})
    for per in ("iteration", "rank"):
        pd.testing.assert_frame_equal(B._temporal_breakdown(ts, per, False),
                                      B._breakdown_loop(ts, per, False))


def test_window_lengths_match_window_breakdown() -> None:
    """Overlapping kernels, comm and copies on two ranks and a rank with nothing."""
    rng = np.random.default_rng(2)
    n = 300
    rank = rng.choice([0, 2], n).astype(np.int64)
    start = rng.integers(0, 5_000, n)
    ops = J.DeviceOps(row=np.arange(n), rank=rank, start=start,
                      end=start + rng.integers(0, 400, n),
                      cls=rng.choice([J.KERNEL, J.COLLECTIVE, J.MEMORY], n).astype(np.int8))
    w_rank = np.array([0, 0, 1, 2, 2])
    lo = np.array([0, 2_000, 0, 100, 4_000])
    hi = np.array([2_000, 6_000, 9_000, 4_000, 4_000])
    line = J.RankLine.of(np.array([0, 1, 2]), ops.start, ops.end, lo, hi)
    got = J.window_lengths(line, ops, w_rank, lo, hi).breakdown(hi - lo)
    for w in range(w_rank.size):
        want = B.window_breakdown(int(lo[w]), int(hi[w]), B._rank_iv(ops, int(w_rank[w])))
        assert {k: int(v[w]) for k, v in got.items()} == want


@pytest.mark.parametrize(("min_size", "block"), [("", None), ("0", None), ("", 1),
                                                ("0", 1), ("", 3000)])
def test_idle_equals_the_per_rank_loop(dlrm, mpi, monkeypatch, min_size, block) -> None:
    """Whole-job passes and per-rank loop agree; with every size compiled ("0"), the
    replay graph's calibrated lags are read as a patch by the compiled walk (gap_chains);
    the passes taken a block of ranks at a time (one rank, a few) give the same table."""
    for ts in (dlrm, mpi):
        pred = traincast.predict(ts)
        for src, kw in ((ts, {"graph": pred.graph}), (pred, {})):
            monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", min_size)
            if block is not None:
                monkeypatch.setattr(I, "_BLOCK_OPS", block)
            got = I.idle_attribution(src, **kw)
            monkeypatch.setattr(I, "_attribute", I._attribute_loop)
            monkeypatch.delenv("TRAINCAST_NUMBA_MIN_SIZE")
            want = I.idle_attribution(src, **kw)
            monkeypatch.undo()
            pd.testing.assert_frame_equal(got, want)


def test_running_ends_match_the_per_segment_loop() -> None:
    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        seg = rng.random(n) < 0.2
        seg[0] = True
        arr = rng.integers(0, 1_000, n)
        end = arr + rng.integers(0, 300, n)
        arg, seg_start, j = S._running_ends(seg, end, arr)
        bounds = np.r_[np.flatnonzero(seg), n]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            cm = np.maximum.accumulate(end[a:b])
            want_arg = np.maximum.accumulate(np.where(end[a:b] == cm, np.arange(b - a), 0)) + a
            assert arg[a:b].tolist() == want_arg.tolist()
            assert (seg_start[a:b] == a).all()
            assert j[a:b].tolist() == (np.searchsorted(cm, arr[a:b], "right") - 1).tolist()


def test_offsets_per_row_with_runs_and_without() -> None:
    offsets = {1: 5, 3: -7, 4: 0}
    for rank in (np.repeat(np.arange(6, dtype=np.int32), 50),
                 np.random.default_rng(1).integers(0, 6, 40).astype(np.int32)):
        got = S._offset_of(rank, offsets)
        assert (np.broadcast_to(got, rank.shape) ==
                [offsets.get(int(r), 0) for r in rank]).all()
    assert S._offset_of(np.arange(3, dtype=np.int32), {0: 0}) == 0


def test_window_events_match_a_per_rank_search() -> None:
    """Candidates in the latest window of their rank starting at or before them, ended by
    its arrival; a rank with no window and windows with no candidate."""
    rng = np.random.default_rng(9)
    n_ev = 400
    ev_rank = np.sort(rng.integers(0, 5, n_ev)).astype(np.int32)
    ev_ts = rng.integers(0, 10_000, n_ev)
    ev_dur = rng.integers(0, 500, n_ev)
    rows = np.sort(rng.choice(n_ev, 300, replace=False))
    w_rank = rng.choice([0, 1, 3, 4], 30).astype(np.int64)  # rank 2: no window
    w_start = rng.integers(0, 10_000, 30)
    w_arr = w_start + rng.integers(0, 3_000, 30)
    wins = np.arange(30) + 100
    code = rng.integers(0, 4, rows.size).astype(np.int32)
    occ = rng.integers(0, 3, rows.size).astype(np.int32)
    first = np.array([0, 3, 6, 9])
    med = rng.random(12) * 100
    offsets = {1: 40, 4: -25}
    parts = list(S._window_events(wins, w_rank, w_start, w_arr, rows, ev_rank, ev_ts, ev_dur,
                                  offsets, code, occ, first, med, (-100, 10_100), chunk=64))
    w_ = np.concatenate([p[0] for p in parts])
    r_ = np.concatenate([p[1] for p in parts])
    x_ = np.concatenate([p[2] for p in parts])
    want_w, want_r, want_x = [], [], []
    for i, r in enumerate(rows.tolist()):
        rk = int(ev_rank[r])
        t = int(ev_ts[r]) - offsets.get(rk, 0)
        mine = np.flatnonzero(w_rank == rk)
        mine = mine[np.lexsort((wins[mine], w_start[mine]))]
        k = np.searchsorted(w_start[mine], t, "right") - 1
        if k < 0 or t + ev_dur[r] > w_arr[mine[k]]:
            continue
        want_w.append(wins[mine[k]])
        want_r.append(r)
        want_x.append(float(ev_dur[r] - med[first[code[i]] + occ[i]]))
    assert w_.tolist() == want_w and r_.tolist() == want_r and x_.tolist() == want_x


def test_op_medians_compiled_and_numpy_agree(monkeypatch) -> None:
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the kernel, however few the rows
    rng = np.random.default_rng(8)
    code = rng.integers(0, 6, 500).astype(np.int32)
    occ = rng.integers(0, 4, 500).astype(np.int32)
    rows = rng.integers(0, 1_000, 500)
    dur = rng.integers(0, 10_000, 1_000)
    first_c, med_c = S._op_medians(code, occ, rows, 6, None, dur, 40)
    monkeypatch.setattr(S, "_OP_MEDIANS", [None])
    monkeypatch.setattr(S, "_MEDIAN", [None])
    first_p, med_p = S._op_medians(code, occ, rows, 6, None, dur, 40)
    kid = first_p[code] + occ
    assert np.array_equal(first_c, first_p)
    assert np.array_equal(med_c[kid], med_p[kid])
    for k in np.unique(kid)[:10]:  # the median over 40 members, missing ones 0
        vals = np.sort(np.r_[dur[rows[kid == k]], np.zeros(40 - int((kid == k).sum()))])
        assert med_p[k] == 0.5 * (vals[19] + vals[20])


def test_kernel_tables_same_without_packed_keys(dlrm, mpi, monkeypatch) -> None:
    """The packed (group, value) sort and (key, rank) unique of the kernel tables give the
    tables of the multi-column sorts they replace."""
    from traincast.analysis import kernels as K

    for ts in (dlrm, mpi):
        packed = (K.op_breakdown(ts), K.top_kernels(ts, 50), K.top_kernels(ts, 50, "mean"))
        monkeypatch.setattr(K, "_packed", lambda hi, lo: None)
        plain = (K.op_breakdown(ts), K.top_kernels(ts, 50), K.top_kernels(ts, 50, "mean"))
        monkeypatch.undo()
        for a, b in zip(packed, plain, strict=True):
            pd.testing.assert_frame_equal(a, b)


def test_breakdowns_sharing_device_ops_are_the_same(dlrm) -> None:
    ts = _edge_variant(dlrm)
    alone = [B._temporal_breakdown(ts, per, False) for per in ("iteration", "rank")]
    with B.sharing_device_ops(ts):
        shared = [B._temporal_breakdown(ts, per, False) for per in ("iteration", "rank")]
        shared.append(B._temporal_breakdown(ts, "iteration", False))  # the unions reused
    assert B._OPS_MEMO not in ts.memo
    for a, b in zip([*alone, alone[0]], shared, strict=True):
        pd.testing.assert_frame_equal(a, b)


def test_the_compiled_blame_chooses_as_the_numpy_path(monkeypatch) -> None:
    """:func:`compiled.window_blame` (two merges of candidates in (rank, aligned start)
    order) blames, per window, what ``_blame`` chooses among the late windows' positive
    excesses from :func:`lateness._window_events` and the window start: the largest
    excess within NEST_SHARE, then the shortest, the earliest, the first; ties included."""
    pytest.importorskip("numba")
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")  # the kernel, however few the rows
    rng = np.random.default_rng(11)
    for trial in range(8):
        n_ev = 600
        ev_rank = np.sort(rng.integers(0, 6, n_ev)).astype(np.int32)
        ev_ts = rng.integers(0, 5_000, n_ev) // 50 * 50  # ties of starts
        ev_ts = ev_ts[np.lexsort((ev_ts, ev_rank))]  # each rank's rows by start
        ev_dur = rng.integers(0, 40, n_ev) * 10  # ties of durations
        rows = np.sort(rng.choice(n_ev, 450, replace=False)).astype(np.int32)
        nw = 40
        w_rank = rng.choice([0, 1, 3, 4, 5], nw).astype(np.int64)  # rank 2: no window
        w_start = rng.integers(0, 50, nw) * 100  # ties of starts on a rank
        w_arr = w_start + rng.integers(0, 2_000, nw)
        wins = rng.permutation(nw)
        late = rng.random(nw) < 0.7
        pseudo = np.where(late & (rng.random(nw) < 0.5), rng.integers(1, 400, nw), 0.0)
        code = rng.integers(0, 4, rows.size).astype(np.int32)
        occ = rng.integers(0, 3, rows.size).astype(np.int32)
        first = np.array([0, 3, 6, 9])
        med = rng.integers(0, 30, 12) * 10.0
        offsets = {1: 40, 4: -25, 5: 0}
        got = C.window_blame(wins, w_rank, w_start, w_arr, late, pseudo, rows, code, occ,
                             first, med, ev_rank, ev_ts, ev_dur, offsets, S.NEST_SHARE)
        assert got is not None  # numba is there (importorskip above)
        parts = list(S._window_events(wins, w_rank, w_start, w_arr, rows, ev_rank, ev_ts,
                                      ev_dur, offsets, code, occ, first, med, (-100, 5_100)))
        w_ = np.concatenate([p[0] for p in parts])
        r_ = np.concatenate([p[1] for p in parts])
        x_ = np.concatenate([p[2] for p in parts])
        at = np.empty(nw, np.int64)
        at[wins] = np.arange(nw)  # window id -> its position in the arguments
        keep = late[at[w_]] & (x_ > 0)
        w_, r_, x_ = at[w_[keep]], r_[keep], x_[keep]
        best = pseudo.astype(np.float64).copy()
        np.maximum.at(best, w_, x_)
        assert np.array_equal(got[0], best), trial
        for k in range(nw):
            mine = np.flatnonzero((w_ == k) & (x_ >= S.NEST_SHARE * best[k]))
            if mine.size == 0:
                assert got[1][k] == -1, (trial, k)
                continue
            t = ev_ts[r_[mine]] - np.array([offsets.get(int(ev_rank[r]), 0)
                                           for r in r_[mine]])
            pick = mine[np.lexsort((t, ev_dur[r_[mine]]))[0]]
            assert (got[1][k], got[2][k]) == (r_[pick], x_[pick]), (trial, k)


def test_the_compiled_candidate_ops_equal_the_numpy_passes(monkeypatch) -> None:
    """:func:`compiled.candidate_ops` gives ``_op_codes`` and ``_occurrences``' results on
    their dense, in-order path, and None off it (rows out of start order, a null kind)."""
    pytest.importorskip("numba")
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    rng = np.random.default_rng(12)
    n_ev = 3_000
    ev_rank = np.sort(rng.integers(0, 7, n_ev)).astype(np.int32)
    ev_ts = rng.integers(0, 50_000, n_ev)
    ev_ts = ev_ts[np.lexsort((ev_ts, ev_rank))]
    it_ev = rng.integers(2, 5, n_ev).astype(np.int32)
    kind_idx = rng.integers(0, 3, n_ev).astype(np.int8)  # the index types of a load
    name_idx = rng.integers(0, 9, n_ev).astype(np.int16)
    crow = np.sort(rng.choice(n_ev, 2_000, replace=False)).astype(np.int32)
    offsets = {0: 0, 2: 30, 5: -70}
    got = C.candidate_ops(crow, it_ev, kind_idx, name_idx, ev_rank, ev_ts, offsets, 3, 9)
    assert got is not None  # numba is there (importorskip above)
    code, n_codes = S._op_codes(it_ev[crow], kind_idx[crow], name_idx[crow], 3, 9)
    occ, most = S._occurrences(crow, code, n_codes, ev_rank, ev_ts, offsets, it_ev,
                               kind_idx, name_idx)
    assert most is not None and got[1] == n_codes
    # the codes at the compiled path's type (OPS_TYPE where every code fits it), same values
    assert np.array_equal(got[0], code) and got[0].dtype == C.OPS_TYPE
    assert np.array_equal(got[2], occ) and np.array_equal(got[3], most)
    swapped = ev_ts.copy()
    i = int(np.flatnonzero(np.diff(ev_ts[crow]) > 0)[0])
    swapped[crow[i]], swapped[crow[i + 1]] = swapped[crow[i + 1]], swapped[crow[i]]
    assert C.candidate_ops(crow, it_ev, kind_idx, name_idx, ev_rank, swapped, offsets, 3,
                           9) is None  # out of start order: the sort path
    null_kind = kind_idx.copy()
    null_kind[crow[5]] = -1
    assert C.candidate_ops(crow, it_ev, null_kind, name_idx, ev_rank, ev_ts, offsets, 3,
                           9) is None  # not a dense code


def test_the_blame_kernels_see_one_variant_of_writable_and_read_only_columns(
        monkeypatch) -> None:
    """A column is writable when freshly parsed and read-only from the parse cache: the
    compiled blame is called with read-only views either way, so numba keeps (and
    compiles, on a first run) one machine code, not one per source. Codes out of the
    dictionaries' range take the numpy path (the kernel indexes unchecked). The kind and
    name codes come as a load gives them (int8 and int16 indices: one signature)."""
    pytest.importorskip("numba")
    from traincast.analysis import numba_kernels as K

    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    rng = np.random.default_rng(3)
    ev_rank = np.sort(rng.integers(0, 3, 200)).astype(np.int32)
    ev_ts = np.sort(rng.integers(0, 1_000, 200))
    cols = [ev_rank, ev_ts, rng.integers(0, 2, 200).astype(np.int32),
            rng.integers(0, 3, 200).astype(np.int8), rng.integers(0, 4, 200).astype(np.int16)]
    crow = np.arange(0, 200, 2).astype(np.int32)
    got = []
    for writable in (True, False, False):
        r, t, it, kd, nm = (c.copy() for c in cols)
        for c in (r, t, it, kd, nm):
            c.flags.writeable = writable
        got.append(C.candidate_ops(crow, it, kd, nm, r, t, {1: 5}, 3, 4))
    assert got[0] is not None
    for other in got[1:]:
        assert all(np.array_equal(x, y) for x, y in zip(got[0], other, strict=True))
    assert len(K.candidate_ops.signatures) == 1
    assert C.candidate_ops(crow, cols[2], cols[3], cols[4], ev_rank, ev_ts, {}, 2, 4) is None


def test_op_medians_buckets_wide_and_narrow(monkeypatch) -> None:
    """The compiled medians bucket durations as int32 when all fit, else as float64: the
    medians equal the numpy path's both ways (odd and even member counts, negatives)."""
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    rng = np.random.default_rng(9)
    code = rng.integers(0, 5, 400).astype(np.int32)
    occ = rng.integers(0, 3, 400).astype(np.int32)
    rows = rng.integers(0, 800, 400)
    for shift, members in ((0, 7), (3 << 31, 8)):
        dur = rng.integers(-50, 1 << 30, 800) + shift
        assert S.median_values_type(dur) is (np.int32 if shift == 0 else np.float64)
        first_c, med_c = S._op_medians(code, occ, rows, 5, None, dur, members)
        monkeypatch.setattr(S, "_OP_MEDIANS", [None])
        monkeypatch.setattr(S, "_MEDIAN", [None])
        first_p, med_p = S._op_medians(code, occ, rows, 5, None, dur, members)
        monkeypatch.undo()
        monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
        kid = first_p[code] + occ
        assert np.array_equal(med_c[kid], med_p[kid])
