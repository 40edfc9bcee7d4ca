"""The all-ranks cross-stream search of the graph builder (issue 16) against the per-rank,
per-stream search it replaced, on random ops with many equal ends; and the same search a
block of ranks at a time."""

from __future__ import annotations

import numpy as np
import pytest

from traincast.graph import gpu_edges
from traincast.graph.gpu_edges import CROSS_STREAM_NS, cross_stream_deps
from traincast.graph.grouped import group_median


def _per_stream(g, g_rank, cand, device, stream, t0, t1, has_prev, prev):  # the old loop
    dep = np.full(g.size, -1, np.int64)
    for r in np.unique(g_rank):
        mine_g = np.flatnonzero(g_rank == r)
        c = cand[g_rank[cand] == r]
        if c.size == 0:
            continue
        key = device[g].astype(np.int64) * (1 << 32) + (stream[g].astype(np.int64) & 0xFFFFFFFF)
        best_end = np.full(c.size, -1, np.int64)
        c_rows = g[c]
        for key_s in np.unique(key[mine_g]).tolist():
            on = g[mine_g][key[mine_g] == key_s]
            on = on[np.argsort(t1[on], kind="stable")]
            ends_s = t1[on]
            j = np.searchsorted(ends_s, t0[c_rows], "right") - 1
            other = (key[c] != key_s) & (device[c_rows] == device[on[0]]) & (j >= 0)
            jj = np.clip(j, 0, None)
            better = other & (ends_s[jj] > best_end)
            best_end[better] = ends_s[jj[better]]
            dep[c[better]] = on[jj[better]]
        prev_end = np.where(has_prev[c], t1[np.clip(prev[c], 0, None)], -1)
        ok = (best_end >= 0) & (t0[c_rows] - best_end <= CROSS_STREAM_NS) & (
            best_end >= prev_end)
        dep[c[~ok]] = -1
    return dep


def test_cross_stream_matches_the_per_stream_search() -> None:
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(30):
        n = int(rng.integers(5, 300))
        rank = np.sort(rng.integers(0, 3, n)).astype(np.int32)
        device = rng.integers(0, 2, n).astype(np.int32)
        stream = rng.choice([7, 13, 20, 22], n).astype(np.int32)
        t0 = rng.integers(0, 40, n).astype(np.int64) * 1000  # coarse: many equal times
        t1 = t0 + rng.integers(0, 8, n).astype(np.int64) * 1000
        g = np.arange(n, dtype=np.int64)
        prev = np.where(rng.random(n) < 0.3, rng.integers(0, n, n), -1).astype(np.int64)
        has_prev = prev >= 0
        cand = np.flatnonzero(rng.random(n) < 0.6)
        want = _per_stream(g, rank.astype(np.int64), cand, device, stream, t0, t1, has_prev,
                           prev)
        got = cross_stream_deps(g, rank.astype(np.int64), cand, device, stream, t0, t1, has_prev,
                            prev)
        np.testing.assert_array_equal(got, want)
        found += int((got >= 0).sum())
    assert found > 100  # the random cases do exercise waits on other streams


def test_cross_stream_by_blocks_of_ranks_is_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    n = 3000
    rank = np.sort(rng.integers(0, 40, n)).astype(np.int32)
    device = rng.integers(0, 2, n).astype(np.int32)
    stream = rng.choice([7, 13, 20, 22], n).astype(np.int32)
    t0 = rng.integers(0, 40, n).astype(np.int64) * 1000
    t1 = t0 + rng.integers(0, 8, n).astype(np.int64) * 1000
    g = np.sort(rng.choice(2 * n, n, replace=False)).astype(np.int64)
    rank_of = np.zeros(2 * n, np.int32)
    rank_of[g] = rank
    dev_of, st_of = np.zeros(2 * n, np.int32), np.zeros(2 * n, np.int32)
    dev_of[g], st_of[g] = device, stream
    s0, s1 = np.zeros(2 * n, np.int64), np.zeros(2 * n, np.int64)
    s0[g], s1[g] = t0, t1
    prev = np.where(rng.random(n) < 0.3, g[rng.integers(0, n, n)], -1).astype(np.int64)
    cand = np.flatnonzero(rng.random(n) < 0.6)
    args = (g, rank, cand, dev_of, st_of, s0, s1, prev >= 0, prev)
    want = cross_stream_deps(*args)
    monkeypatch.setattr(gpu_edges, "CROSS_BLOCK", 97)  # blocks cut inside ranks: extended
    got = gpu_edges._cross_stream_blocks(*args)
    np.testing.assert_array_equal(got, want)
    assert (want >= 0).sum() > 100


def test_group_median_is_numpy_median_per_group() -> None:
    rng = np.random.default_rng(3)
    rank = np.sort(rng.integers(0, 5, 400))
    value = rng.integers(0, 100_000, 400)
    sel = rng.random(400) < 0.5
    sel[rank == 4] = False  # a rank with nothing selected gets the default
    got = group_median(rank, value, sel, 5_000)
    for r in range(5):
        m = sel & (rank == r)
        want = int(np.median(value[m])) if m.any() else 5_000
        assert (got[rank == r] == want).all()
