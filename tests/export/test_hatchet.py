"""Hatchet export (issue 15) on the real DLRM traces, with the real llnl-hatchet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

hatchet = pytest.importorskip("hatchet")


@pytest.fixture(scope="module")
def gf(traces: Path):
    import traincast
    from traincast.export import to_hatchet

    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    return ts, to_hatchet(ts)


def test_one_row_per_path_and_rank(gf) -> None:
    ts, g = gf
    df = g.dataframe
    assert df.index.names == ["node", "rank"]
    ranks = sorted(df.index.get_level_values("rank").unique())
    assert ranks == ts.rank_ids
    assert len(df) == len(g.graph) * len(ranks)
    assert {"time", "time (inc)", "gpu time (inc)", "count", "name", "kind"} <= set(df.columns)


def test_times_add_up_per_rank(gf) -> None:
    """Every event counted once: per rank, the paths' counts sum to the rank's events the
    graph holds, and the device leaves' time to the rank's device time."""
    ts, g = gf
    df = g.dataframe.reset_index()
    ev = ts.events.to_pandas()
    dev = ev["kind"].isin(["kernel", "memcpy", "memset", "collective"])
    for r in ts.rank_ids:
        mine = df[df["rank"] == r]
        got = mine.loc[mine["kind"].isin(["kernel", "memcpy", "memset", "collective"]),
                       "time (inc)"].sum()
        assert got == ev.loc[dev & (ev["rank"] == r), "dur"].sum()
    # exclusive <= inclusive everywhere; the kernels sit under launches (gpu time reaches up)
    assert (df["time"] <= df["time (inc)"]).all()
    launches = df[df["name"].str.contains("cudaLaunchKernel", regex=False)]
    assert (launches["gpu time (inc)"] > 0).any()


def test_hatchet_views_work(gf) -> None:
    _, g = gf
    text = g.tree(metric_column="time (inc)", depth=2)
    assert "## forward ##" in text
    kernels = g.filter(lambda row: row["kind"] == "kernel").squash()
    assert len(kernels.graph) > 0
    assert np.all(kernels.dataframe["kind"] == "kernel")
