"""``traincast.analyze`` runs the analyses that need no replay before it builds one and drops
it after those that use it; the tables are the same as with a replay given, in the order
asked (real 8-rank DLRM traces)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import traincast
from traincast.analysis import analyze
from traincast.simulate.replay import replay

WHAT = "stragglers,critical_path,breakdown,idle,kernels,collectives,prediction,breakdown"


def test_own_replay_gives_the_tables_of_a_given_one(traces: Path) -> None:
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    given = analyze(ts, WHAT, prediction=replay(ts))
    own = analyze(ts, WHAT)
    assert list(own) == list(given)
    assert list(own)[0].startswith("stragglers_")
    for name, df in given.items():
        pd.testing.assert_frame_equal(own[name], df, check_exact=True)
    # a name asked twice keeps its first place
    assert [k for k in own if k.startswith("breakdown")] == ["breakdown", "breakdown_by_rank"]
    assert list(own).index("breakdown") < list(own).index("idle")
