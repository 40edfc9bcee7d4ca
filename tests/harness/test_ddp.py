"""DDP training of a random configuration on 2 local gloo ranks (benchmarks/harness/ddp.py):
the ground truth of ``predict --from-et --world-size``."""

from __future__ import annotations

import pytest
from harness.ddp import time_ddp

from traincast.errors import ParameterError

pytest.importorskip("torch")

TINY_TF = {"kind": "transformer", "name": "tiny", "seed": 0, "layers": 1, "hidden": 32,
           "heads": 2, "ffn": 64, "seq": 8, "batch": 2, "classes": 4}


def test_time_ddp_runs_two_ranks() -> None:
    got = time_ddp(TINY_TF, world=2, warmup=1, steps=2, repeats=2)
    assert got["step_ns"] > 0 and len(got["repeats_ns"]) == 2 and got["noise"] >= 0
    with pytest.raises(ParameterError, match=">= 2 ranks"):
        time_ddp(TINY_TF, world=1)
