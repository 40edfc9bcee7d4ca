"""``analyze_replayed``: the analyses that need no replay on a second thread beside the replay
give the tables, the warnings and the exceptions of a serial run (``TRAINCAST_SERIAL=1``), on
real 8-rank DLRM traces with the size threshold lowered to use the thread."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import traincast
import traincast.analysis as A
from traincast.analysis import analyze, analyze_replayed
from traincast.errors import ParameterError, TraincastWarning
from traincast.trace.traceset import TraceSet

WHAT = "stragglers,critical_path,breakdown,idle,kernels,collectives,prediction,breakdown"


@pytest.fixture(scope="module")
def ts(traces: Path) -> TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


def _both(monkeypatch: pytest.MonkeyPatch, fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``fn()`` serial, then with the thread (threshold 0)."""
    monkeypatch.setattr(A, "THREAD_MIN_EVENTS", 0)
    monkeypatch.setattr("traincast.util.beside._cpus", lambda: 2)
    monkeypatch.setenv("TRAINCAST_SERIAL", "1")
    serial = fn()
    monkeypatch.delenv("TRAINCAST_SERIAL")
    return serial, fn()


def test_threaded_tables_are_the_serial_ones(ts: TraceSet,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = A.ANALYSES["stragglers"]

    def stragglers(*args: Any) -> Any:
        import threading

        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setitem(A.ANALYSES, "stragglers", stragglers)
    (s_tab, s_pred), (t_tab, t_pred) = _both(
        monkeypatch, lambda: analyze_replayed(ts, WHAT, lambda: traincast.predict(ts)))
    assert threads == ["MainThread", "traincast-beside"]
    given = analyze(ts, WHAT, prediction=s_pred)
    assert list(t_tab) == list(s_tab) == list(given)
    for name, df in s_tab.items():
        pd.testing.assert_frame_equal(t_tab[name], df, check_exact=True)
        pd.testing.assert_frame_equal(given[name], df, check_exact=True)
    pd.testing.assert_frame_equal(t_pred.steps, s_pred.steps, check_exact=True)


def _outcome(fn: Callable[[], Any]) -> tuple[type, str, list[str]]:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - compared below
            return type(exc), str(exc), [str(w.message) for w in got]
    return type(None), "", [str(w.message) for w in got]


@pytest.mark.parametrize("beside", [("kernels", "breakdown", "collectives"),
                                    ("collectives", "breakdown", "kernels")])
def test_failures_and_warnings_come_as_in_a_serial_run(ts: TraceSet, beside: tuple[str, ...],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def warn_then(name: str, fail: bool) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            warnings.warn(f"{name} warns", TraincastWarning, stacklevel=1)
            if fail:
                raise ParameterError(f"{name} fails")
            return {}
        return run

    def replay_warns() -> Any:
        warnings.warn("replay warns", TraincastWarning, stacklevel=1)
        return traincast.predict(ts)

    what = "kernels,idle,breakdown,collectives"
    # the thread runs them in this order; the second fails first on the thread
    monkeypatch.setattr(A, "BESIDE", beside)
    monkeypatch.setitem(A.ANALYSES, "kernels", warn_then("kernels", False))
    monkeypatch.setitem(A.ANALYSES, "breakdown", warn_then("breakdown", True))
    monkeypatch.setitem(A.ANALYSES, "collectives", warn_then("collectives", True))
    serial, threaded = _both(monkeypatch, lambda: _outcome(
        lambda: analyze_replayed(ts, what, replay_warns)))
    assert serial == threaded == (ParameterError, "breakdown fails",
                                  ["replay warns", "kernels warns", "breakdown warns"])

    def replay_fails() -> Any:
        raise ParameterError("no replay")

    serial, threaded = _both(monkeypatch, lambda: _outcome(
        lambda: analyze_replayed(ts, what, replay_fails)))
    assert serial == threaded == (ParameterError, "no replay", [])
