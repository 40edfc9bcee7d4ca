"""A table-wise sharded DLRM trained on 2 local gloo ranks (benchmarks/harness/sharded_dlrm.py):
the ground truth of the sharding planner."""

from __future__ import annotations

import pytest
from harness.sharded_dlrm import time_placement


def test_time_placement_runs_two_ranks() -> None:
    pytest.importorskip("torch")

    cfg = {"tables": [{"rows": 500, "pooling": 3}, {"rows": 200, "pooling": 2},
                      {"rows": 100, "pooling": 1}],
           "dim": 8, "dense": 4, "bottom_mlp": [8], "top_mlp": [8], "batch": 16, "seed": 0}
    got = time_placement(cfg, {0: 0, 1: 1, 2: 1}, warmup=1, steps=2, repeats=2)
    assert got["step_ns"] > 0 and len(got["repeats_ns"]) == 2 and got["noise"] >= 0
    # a rank without tables works too (everything on rank 0)
    assert time_placement(cfg, {0: 0, 1: 0, 2: 0}, warmup=1, steps=1, repeats=1)["step_ns"] > 0
