"""The critical path's family shares as numpy columns: the same table as ``by_family``, and the
same path / shares as the former pandas code (kept here as the reference), on every shared
trace unit that loads; and computed without importing pandas or Arrow's compute functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from corpus import find_units  # benchmarks/ is on sys.path (tests/conftest.py)

import traincast
from traincast.analysis.critical_path import (
    ANCHOR,
    LATENCY_CATEGORY,
    PATH_COLUMNS,
    _events_of,
    _share,
    _walk,
    critical_path,
    critical_path_family_columns,
)
from traincast.errors import ParameterError, TraincastError
from traincast.graph.model import EdgeKind
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet

ROOT = Path(traincast.__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"


# ------------------------------------------------------------ the former pandas code


def _old_describe(replay, g, chosen_rank, *, node, thread_rank_pt, edge_kind, start, end, edge,
                  src_pt, dst_pt) -> pd.DataFrame:
    """The path table as the module built it with pandas (before its numpy columns)."""
    ev_tbl = replay.measured.events
    has = node >= 0
    nd = np.clip(node, 0, None)
    ev = np.where(has, _events_of(g, nd), -1).astype(np.int64)
    rank = np.where(has, g.node_rank[nd], g.node_rank[thread_rank_pt // 2]).astype(np.int64)
    out = pd.DataFrame({"order": np.arange(node.size, dtype=np.int64), "rank": rank,
                        "event": ev})
    idx = np.clip(ev, 0, None)
    for col in ("name", "kind", "op_family"):
        codes, values = A.dictionary_parts(ev_tbl.column(col))
        vals = np.asarray(values + [""], object)
        out[col] = vals[np.where(has, codes[idx] if codes.size else 0, len(vals) - 1)]
    ek = np.asarray(edge_kind, object)
    out["edge_kind"] = ek
    cat = out["op_family"].to_numpy(object).copy()
    for k, name in LATENCY_CATEGORY.items():
        cat[ek == k.name] = name
    untraced = ~has | ((out["kind"].to_numpy(object) == "annotation") &
                       (out["op_family"].to_numpy(object) == "other"))
    cat[(ek == EdgeKind.THREAD.name) & untraced] = "host_untraced"
    unmatched = has & np.isin(nd, g.unmatched_collectives)
    cat[(ek == EdgeKind.EXEC.name) & unmatched] = "comm_unmatched"
    anchor = ek == ANCHOR
    cat[anchor] = np.where(rank[anchor] == chosen_rank, "anchored", "waiting_for_peer")
    out["category"] = cat
    out["start_ns"] = np.asarray(start, np.int64)
    out["end_ns"] = np.asarray(end, np.int64)
    out["dur_ns"] = out["end_ns"] - out["start_ns"]
    out["edge"] = np.asarray(edge, np.int64)
    out["src_point"] = np.asarray(src_pt, np.int64)
    out["dst_point"] = np.asarray(dst_pt, np.int64)
    return out[PATH_COLUMNS]


def _old_share(path: pd.DataFrame, col: str, name: str, total: int) -> pd.DataFrame:
    """Time per value of ``col`` as the module computed it with pandas."""
    s = path.groupby(col, sort=True)["dur_ns"].sum()
    df = pd.DataFrame({name: s.index.to_numpy(), "time_ns": s.to_numpy(np.int64)})
    df["share_pct"] = 100.0 * df["time_ns"] / total if total > 0 else 0.0
    return df.sort_values(["time_ns", name], ascending=[False, True], kind="stable"
                          ).reset_index(drop=True)


def _old_path(replay, rank, iteration) -> pd.DataFrame:
    """The former path table, from the same walk."""
    w = _walk(replay, rank, iteration)
    kind_names = np.array([k.name for k in EdgeKind] + [ANCHOR], object)
    path = _old_describe(replay, replay.graph, w.rank, node=w.node, thread_rank_pt=w.dst_point,
                         edge_kind=kind_names[w.edge_kind], start=w.start, end=w.end,
                         edge=w.edge, src_pt=w.src_point, dst_pt=w.dst_point)
    if w.late_start:
        path.loc[0, "category"] = "late_start"
    return path


# ------------------------------------------------------------ every shared unit


def _units() -> list:
    units = find_units(TRACES)[0] if TRACES.is_dir() else []
    return ([pytest.param(u["path"], id=u["unit"]) for u in units]
            or [pytest.param("none", marks=pytest.mark.skip("no shared traces"))])


@cache
def _prediction(path: str):  # noqa: ANN202 - a Prediction or None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return traincast.predict(traincast.load(path))
        except (ImportError, TraincastError):  # a unit that does not load
            return None


def _steps(pred) -> list[tuple[int | None, int | None]]:
    """The default step and a few explicit (rank, iteration): first and last iteration of the
    lowest and highest rank, an iteration with no rank given, and an absent iteration."""
    it = pred.measured.iterations
    r = A.to_numpy(it.column("rank")).astype(np.int64)
    n = A.to_numpy(it.column("iteration")).astype(np.int64)
    out: list[tuple[int | None, int | None]] = [(None, None)]
    if r.size:
        for rk in sorted({int(r.min()), int(r.max())}):
            mine = n[r == rk]
            out += [(rk, int(mine.min())), (rk, int(mine.max()))]
        out += [(None, int(n.min())), (None, int(n.max()) + 1), (int(r.max()) + 1, None)]
    return out


@pytest.mark.parametrize("path", _units())
def test_family_columns_are_by_family(path: str) -> None:
    pred = _prediction(path)
    if pred is None:
        pytest.skip("does not load here")
    for rank, iteration in _steps(pred):
        try:
            cp = critical_path(pred, rank, iteration)
        except ParameterError as exc:
            with pytest.raises(ParameterError) as got:
                critical_path_family_columns(pred, rank, iteration)
            assert str(got.value) == str(exc)
            continue
        cols = critical_path_family_columns(pred, rank, iteration)
        assert list(cols) == ["family", "time_ns", "share_pct"]
        assert all(isinstance(v, np.ndarray) for v in cols.values())
        pd.testing.assert_frame_equal(pd.DataFrame(cols), cp.by_family, check_exact=True)
        # the DataFrames are the former pandas code's
        pd.testing.assert_frame_equal(cp.path, _old_path(pred, rank, iteration),
                                      check_exact=True)
        total = cp.end_ns - cp.start_ns
        for tbl, col, name in ((cp.by_family, "category", "family"),
                               (cp.by_rank, "rank", "rank"),
                               (cp.by_kind, "edge_kind", "edge_kind")):
            pd.testing.assert_frame_equal(tbl, _old_share(cp.path, col, name, total),
                                          check_exact=True)


@pytest.mark.parametrize("total", [1000, 0, -5])
def test_share_matches_the_pandas_groupby(total: int) -> None:
    rng = np.random.default_rng(7)
    keys = np.array(["b", "a", "c", "a", "d", "b", "c", "e"], object)
    for dur in (np.array([5, 3, 2, 2, 9, 0, 3, 4], np.int64),  # ties between a, b and c
                rng.integers(0, 100, keys.size).astype(np.int64)):
        path = pd.DataFrame({"category": keys, "rank": rng.integers(0, 3, keys.size),
                             "dur_ns": dur})
        for col in ("category", "rank"):
            got = pd.DataFrame(_share(path[col].to_numpy(), dur, col, total))
            pd.testing.assert_frame_equal(got, _old_share(path, col, col, total),
                                          check_exact=True)
    empty = pd.DataFrame({"category": np.empty(0, object), "dur_ns": np.empty(0, np.int64)})
    got = pd.DataFrame(_share(empty["category"].to_numpy(), empty["dur_ns"].to_numpy(),
                              "family", total))
    pd.testing.assert_frame_equal(got, _old_share(empty, "category", "family", total),
                                  check_exact=True)


# ------------------------------------------------------------ without pandas

_FRESH = """
import json, sys, warnings
import traincast
from traincast.analysis.critical_path import critical_path_family_columns
warnings.simplefilter("ignore")
pred = traincast.predict(traincast.load(sys.argv[1]))
cols = critical_path_family_columns(pred)
heavy = sorted(m for m in ("pandas", "pyarrow.compute") if m in sys.modules)
print(json.dumps([heavy, list(cols), int(cols["time_ns"].sum()), len(cols["family"])]))
"""


def test_family_columns_import_no_pandas(traces: Path, tmp_path: Path) -> None:
    path = traces / "dlrm_8xv100" / "kineto"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINCAST_CACHE_DIR": str(tmp_path)}

    def run() -> list:
        res = subprocess.run([sys.executable, "-c", _FRESH, str(path)], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=300, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])

    run()  # the parse cache, warm
    heavy, names, total, rows = run()
    assert heavy == [], heavy
    assert names == ["family", "time_ns", "share_pct"] and rows > 0
    cp = critical_path(traincast.predict(_quiet_load(path)))
    assert total == cp.duration_ns and rows == len(cp.by_family)


def _quiet_load(path: Path) -> TraceSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traincast.load(path)
