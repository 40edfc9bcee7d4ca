"""Representative ranks and notes of what a chart left out (:mod:`traincast.report.lanes`)."""

from __future__ import annotations

import pandas as pd

from traincast.report.lanes import pick_ranks, ranks_note, sampled_note


def test_few_ranks_are_all_kept() -> None:
    ranks, roles = pick_ranks(pd.Series([3.0, 1.0, 2.0], index=[0, 1, 2]), 8)
    assert ranks == [0, 1, 2] and roles == {}
    assert ranks_note(3, 3, roles, "x") == "" and sampled_note(["", ""], "json") == ""


def test_slowest_median_fastest_and_the_kept_ones() -> None:
    score = pd.Series([float(r % 100) for r in range(1000)], index=range(1000))
    score[777] = 1e9  # the slowest
    score[3] = float("nan")  # no score: counts as the fastest
    ranks, roles = pick_ranks(score, 8, keep=[12, 13])
    assert len(ranks) == 8 and ranks == sorted(ranks)
    assert roles[12] == roles[13] == "critical path"
    assert roles[777] == "slowest" and roles[3] == "fastest"
    assert list(roles.values()).count("median") == 1
    assert list(roles)[:3] == [12, 13, 777]
    note = ranks_note(len(ranks), 1000, roles, "busy time")
    assert note.startswith("showing 8 of 1,000 ranks by busy time: r12, r13 (critical path "
                           "first); r777, ")
    assert "(median); r3 (fastest)" in note
    full = sampled_note([note, "showing the 10 longest of 20 events"], "--format json")
    assert full.endswith("events. Full data: --format json.")


def test_words_and_a_limit_below_the_kept_ones() -> None:
    score = pd.Series(range(50), index=[f"n{i}" for i in range(50)], dtype="float64")
    ranks, roles = pick_ranks(score, 2, keep=["n1", "n2", "n3"], words=("latest", "earliest"))
    assert set(ranks) == {"n1", "n2"}
    ranks, roles = pick_ranks(score, 3, words=("latest", "earliest"))
    assert roles == {"n49": "latest", "n24": "median", "n0": "earliest"}
