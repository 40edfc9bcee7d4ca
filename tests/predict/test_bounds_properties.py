"""Property tests of predicted steps over every shared trace unit.

For the what-if grid of ``benchmarks/whatif_bounds.py`` (host x0.1/x10, device x1/3/x3,
network x0.25/x4, one catalog GPU per trace cycling over the catalog, batch x0.5/x2
where the recorded batch is known): every predicted step lies between its lower bound and
max(measured, replay + how much earlier it starts) + added work; a component made faster
never makes a step longer, nor the run up to its end; the
identity what-if equals the replay. Tolerance: 1% + 10 us (``whatif_bounds.REL_TOL``,
``ABS_TOL_NS``).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd
import pytest
import whatif_bounds as wb  # benchmarks/ is on sys.path (tests/conftest.py)

UNITS = {u["unit"]: (i, u["path"]) for i, u in enumerate(wb.units())}
#: (unit, axis) pairs where a faster component makes a step longer because of a known
#: defect; strict, so a fix flips them
KNOWN_NOT_MONOTONE: dict[tuple[str, str], str] = {}


@cache
def _table(unit: str) -> pd.DataFrame:
    i, path = UNITS[unit]
    return wb.unit_table(path, i)[0]


def _units() -> list:
    return list(UNITS) or [pytest.param("none", marks=pytest.mark.skip("no shared traces"))]


@pytest.mark.parametrize("unit", _units())
def test_steps_within_bounds(traces, unit: str) -> None:
    df = _table(unit)
    bad = df[~wb.inside(df)]
    assert bad.empty, bad[["what_if", "rank", "iteration", "predicted_ns", "bound_ns",
                           "upper_bound_ns"]].to_string()


@pytest.mark.parametrize("unit", _units())
def test_identity_equals_replay(traces, unit: str) -> None:
    df = _table(unit)
    rep = df[df["axis"] == "replay"]["predicted_ns"].to_numpy()
    ident = df[df["axis"] == "identity"]["predicted_ns"].to_numpy()
    np.testing.assert_array_equal(ident, rep)
    np.testing.assert_array_equal(rep, df[df["axis"] == "replay"]["replay_ns"].to_numpy())


def _monotone_failures(df: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Rows where, along ``axis``, the faster setting gives a longer step than the slower
    one (beyond the tolerance) and the run up to that step's end is longer too (a step may
    grow by what the steps before it gave up: a faster host that reaches the marker sooner
    while the device still runs the previous step's work); the replay is the axis' factor 1."""
    rep = df[df["axis"] == "replay"].set_index(["rank", "iteration"])["predicted_ns"]
    sub = df[df["axis"] == axis]
    pts = {1.0: rep}
    starts = df[df["axis"] == "replay"].set_index(["rank", "iteration"])["start_ns"]
    ends = {1.0: df[df["axis"] == "replay"].set_index(["rank", "iteration"])["end_ns"]}
    for f, g in sub.groupby("factor"):
        pts[float(f)] = g.set_index(["rank", "iteration"])["predicted_ns"]
        ends[float(f)] = g.set_index(["rank", "iteration"])["end_ns"]
    keys = sorted(pts)
    out = []
    for slow, fast in zip(keys[:-1], keys[1:], strict=True):
        longer = pts[fast] - pts[slow] > pts[slow] * wb.REL_TOL + wb.ABS_TOL_NS
        # the run up to the step's end: the step's end on the trace's clock, from the
        # replay's first step start of the rank
        origin = starts.groupby(level="rank").transform("min")
        run_s, run_f = ends[slow] - origin, ends[fast] - origin
        longer &= (run_f - run_s > run_s * wb.REL_TOL + wb.ABS_TOL_NS).reindex(longer.index)
        if longer.any():
            out.append(pd.DataFrame({"slow": slow, "fast": fast,
                                     "slow_ns": pts[slow][longer],
                                     "fast_ns": pts[fast][longer]}))
    return pd.concat(out) if out else pd.DataFrame()


def _monotone_cases() -> list:
    cases = []
    for unit in _units():
        if not isinstance(unit, str):  # no shared traces: one skipped case
            return [pytest.param("none", "none", marks=pytest.mark.skip("no shared traces"))]
        for axis in ("host", "device", "network"):
            why = KNOWN_NOT_MONOTONE.get((unit, axis))
            marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
            cases.append(pytest.param(unit, axis, marks=marks, id=f"{unit}-{axis}"))
    return cases


@pytest.mark.parametrize(("unit", "axis"), _monotone_cases())
def test_faster_component_never_longer(traces, unit: str, axis: str) -> None:
    df = _table(unit)
    if not (df["axis"] == axis).any():
        pytest.skip(f"no {axis} what-if applies to {unit}")
    bad = _monotone_failures(df, axis)
    assert bad.empty, bad.to_string()
