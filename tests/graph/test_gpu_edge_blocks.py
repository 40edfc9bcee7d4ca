"""The GPU edges a block of whole ranks at a time (:func:`traincast.graph.gpu_edges.gpu_edges`)
are the one-pass edges: the same graph, edge for edge, on the real 8-rank traces cut into
blocks of a rank or two; and the blocks themselves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.graph import gpu_edges
from traincast.graph.build import build_graph


def test_blocks_of_ranks_build_the_one_pass_graph(traces: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    monkeypatch.setattr(gpu_edges, "GPU_BLOCK", 1 << 30)  # one block
    want = build_graph(ts)
    monkeypatch.setattr(gpu_edges, "GPU_BLOCK", 100)  # cut inside ranks: extended
    got = build_graph(ts)
    for col in ("src", "dst", "lag", "exact_lag", "kind"):
        np.testing.assert_array_equal(getattr(got, col), getattr(want, col))
    np.testing.assert_array_equal(got.anchor_copy(), want.anchor_copy())
    assert got.host_waits == want.host_waits


def test_rank_blocks() -> None:
    g_rank = np.repeat(np.arange(5), [3, 1, 4, 2, 2])
    rt_rank = np.repeat(np.array([0, 2, 3, 4, 6]), [2, 2, 1, 3, 1])
    gpu_edges_blocks = gpu_edges._rank_blocks
    with pytest.MonkeyPatch.context() as m:
        m.setattr(gpu_edges, "GPU_BLOCK", 4)
        blocks = gpu_edges_blocks(g_rank, rt_rank)
        assert blocks == [(0, 4, 0, 2), (4, 8, 2, 4), (8, 12, 4, 8)]
        # ranks not ascending: one block of everything
        assert gpu_edges_blocks(g_rank[::-1], rt_rank) == [(0, 12, 0, 9)]
