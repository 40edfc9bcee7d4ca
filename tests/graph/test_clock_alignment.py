"""Clock alignment across hosts: a synthetic skew of several ms is recovered from the
collectives (every member ends a collective at the same instant)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

import traincast
from traincast.graph.build import build_graph
from traincast.graph.model import MeasuredPoints

SKEW_US = {3: 5_000.0, 6: -7_250.5}  # per rank, µs (trace units)


def _skewed_copy(src: Path, dst: Path) -> None:
    dst.mkdir()
    for f in sorted(src.glob("rank-*.json.gz")):
        rank = int(f.name.split("-")[1].split(".")[0])
        d = orjson.loads(gzip.decompress(f.read_bytes()))
        d["host_name"] = f"host{rank % 2 if rank not in SKEW_US else rank}"
        shift = SKEW_US.get(rank, 0.0)
        for e in d["traceEvents"]:
            if "ts" in e:
                e["ts"] = float(e["ts"]) + shift
        (dst / f.name).write_bytes(gzip.compress(orjson.dumps(d), compresslevel=1))


@pytest.fixture(scope="module")
def skewed(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = shared_data / "traces" / "dlrm_8xv100"
    out = tmp_path_factory.mktemp("skew") / "kineto"
    _skewed_copy(src / "kineto", out)
    shutil.copytree(src / "et", out.parent / "et")
    return out


def test_synthetic_skew_is_recovered_within_10_us(skewed: Path, shared_data: Path) -> None:
    base = traincast.predict(traincast.load(shared_data / "traces" / "dlrm_8xv100" / "kineto"))
    pred = traincast.predict(traincast.load(skewed))
    # the offsets the original (one clock per host, distinct hosts) already has, plus ours
    for rank, shift_us in SKEW_US.items():
        want = base.graph.clock_offset.get(rank, 0) + shift_us * 1e3
        assert pred.graph.clock_offset[rank] == pytest.approx(want, abs=10_000)
    for rank in set(pred.graph.clock_offset) - set(SKEW_US):
        assert abs(pred.graph.clock_offset[rank] - base.graph.clock_offset.get(rank, 0)) \
            <= 10_000
    # aligned: the replay is as accurate as on the original traces, and the skew is reported
    assert pred.summary["mape_pct"] == pytest.approx(base.summary["mape_pct"], abs=0.05)
    assert any("clocks aligned" in n and "rank 3" in n for n in pred.notes)


def test_compact_measured_column_aligns_skewed_ranks(skewed: Path) -> None:
    """The graph's compact measured column (the events' columns less each shifted rank's
    offset) is the column made from the events, point by point and laid out."""
    ts = traincast.load(skewed)
    g = build_graph(ts)
    stored = vars(g)["_measured"]
    assert isinstance(stored, MeasuredPoints) and stored.lo.size >= len(SKEW_US)
    rank = ts.events.column("rank").to_numpy()
    off = np.array([g.clock_offset.get(int(r), 0) for r in rank.tolist()], np.int64)
    t0 = ts.events.column("ts").to_numpy() - off
    n = t0.size
    want = np.empty(g.n_points, np.int64)
    want[0:2 * n:2], want[1:2 * n:2] = t0, t0 + ts.events.column("dur").to_numpy()
    want[2 * n:] = [t0[grp].max() for grp in g.collective_groups]
    np.testing.assert_array_equal(stored.at(np.arange(g.n_points)), want)
    np.testing.assert_array_equal(g.measured, want)
