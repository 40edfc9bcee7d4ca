"""The numba-compiled loops (graph nesting walk, simulator propagation) give exactly what
their Python/numpy versions give, on the real DLRM traces (issue 16)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import traincast
import traincast.simulate.engine as E
from traincast.graph import nesting as N

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _compiled_at_any_size(monkeypatch) -> None:
    """The kernels however small the job (8 ranks take the numpy path by default)."""
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")


@pytest.fixture(scope="module")
def dlrm(traces: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traincast.load(traces / "dlrm_8xv100" / "kineto")


def test_nest_walk_compiled_equals_python(dlrm) -> None:
    from traincast.graph.numba_kernels import nest_walk

    ev = dlrm.events
    ts = ev.column("ts").to_numpy()
    end = ts + ev.column("dur").to_numpy()
    host = ev.column("device").to_numpy() < 0
    tid = ev.column("tid").to_numpy()
    rank = ev.column("rank").to_numpy()
    checked = 0
    for r in np.unique(rank):
        for t in np.unique(tid[(rank == r) & host]):
            rows = np.flatnonzero((rank == r) & host & (tid == t))
            rows = rows[np.lexsort((-(end[rows] - ts[rows]), ts[rows]))]
            got = nest_walk(ts[rows].astype(np.int64), end[rows].astype(np.int64))
            want = N.nest_walk(ts[rows].tolist(), end[rows].tolist())
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)
            checked += rows.size
    assert checked > 10_000


def test_replay_is_the_same_without_numba(traces: Path, monkeypatch) -> None:
    def replay() -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts = traincast.load(traces / "dlrm_8xv100" / "kineto", cache=False)  # no memo
        p = traincast.predict(ts, what_if=["speedup=kind:device=2"])
        return np.r_[p.iterations["predicted_ns"].to_numpy(), p.graph.lag]

    with_numba = replay()
    monkeypatch.setattr(E, "_KERNEL", [None])
    monkeypatch.setattr(N, "_WALK", [None])
    np.testing.assert_array_equal(with_numba, replay())


def test_analyses_are_the_same_without_numba(dlrm, monkeypatch) -> None:
    """Idle attribution (binding edges, the walk back), critical path and stragglers
    (medians per op) give the same tables with the numpy paths."""
    import pandas as pd

    from traincast.analysis import idle as I
    from traincast.analysis.stragglers import lateness as S
    from traincast.graph import binding as G

    def tables() -> dict[str, pd.DataFrame]:
        pred = traincast.predict(dlrm)
        return traincast.analyze(dlrm, "idle,critical_path,stragglers", prediction=pred)

    compiled = tables()
    for mod, name in ((G, "_BINDING"), (I, "_WALK"), (S, "_MEDIAN"), (N, "_WALK"),
                      (N, "_SEG_WALK"), (E, "_KERNEL")):
        monkeypatch.setattr(mod, name, [None])
    plain = tables()
    assert compiled.keys() == plain.keys()
    for k in compiled:
        pd.testing.assert_frame_equal(compiled[k], plain[k])
    assert len(compiled["idle"]) and len(compiled["critical_path"])


def test_csr_counting_sort_equals_the_stable_argsort(dlrm, monkeypatch) -> None:
    """The simulator's CSR by a compiled counting sort: the arrays of the stable argsort."""
    graph = traincast.predict(dlrm).graph
    got = E._csr(graph)
    graph.structure.pop("csr")
    monkeypatch.setattr(E, "_CSR_KERNEL", [None])
    want = E._csr(graph)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_row_propagation_equals_the_numpy_paths(dlrm, monkeypatch) -> None:
    """The single-row propagation reading lags in edge order, compiled: the times of the
    numpy paths."""
    graph = traincast.predict(dlrm).graph
    lag = graph.lag.copy()
    lag[::7] += 1000  # lags other than the graph's own
    got = E.simulate(graph, lag).times
    monkeypatch.setattr(E, "_ROW_KERNEL", [None])  # the CSR-ordered copy of the lags
    np.testing.assert_array_equal(E.simulate(graph, lag).times, got)
    monkeypatch.setattr(E, "_KERNEL", [None])  # no kernel at all
    np.testing.assert_array_equal(E.simulate(graph, lag).times, got)
