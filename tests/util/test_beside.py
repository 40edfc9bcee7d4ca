""":class:`traincast.util.beside.Beside`: steps on a second thread, taken back in order with
their values, exceptions and warnings as a serial run gives them; the serial switch."""

from __future__ import annotations

import threading
import warnings

import pytest

from traincast.errors import ParameterError, TraincastWarning
from traincast.util.beside import Beside, NotRun, serial_forced, threads_allowed


def test_values_come_back_by_name_from_another_thread() -> None:
    seen = []

    def step(v: int) -> int:
        seen.append(threading.current_thread().name)
        return v * 10

    with Beside([("a", lambda: step(1)), ("b", lambda: step(2))]) as side:
        assert "a" in side and "c" not in side
        assert side.take("b") == 20
        assert side.take("a") == 10
    assert seen == ["traincast-beside"] * 2


def test_then_runs_on_the_thread_after_the_steps_even_when_one_fails() -> None:
    order = []

    def fail() -> None:
        order.append("fail")
        raise ValueError("x")

    def then() -> None:
        order.append(threading.current_thread().name)
        raise OSError("ignored")

    with Beside([("f", fail)], then=then) as side, pytest.raises(ValueError):
        side.take("f")
    assert order == ["fail", "traincast-beside"]


def test_first_failure_is_raised_at_its_take_and_stops_the_rest() -> None:
    err = ParameterError("bad thing")
    ran = []

    def fail() -> None:
        raise err

    with Beside([("ok", lambda: 1), ("bad", fail), ("after", lambda: ran.append(1))]) as side:
        assert side.take("ok") == 1
        with pytest.raises(ParameterError) as info:
            side.take("bad")
        assert info.value is err  # the same object: type, message, attributes
        with pytest.raises(NotRun, match="did not run"):
            side.take("after")
    assert ran == []


def test_the_callers_failure_is_raised_after_the_thread_ends() -> None:
    done = threading.Event()

    def slow() -> None:
        done.wait(0.2)

    with pytest.raises(KeyError, match="mine"), Beside([("slow", slow)]):
        raise KeyError("mine")
    assert not any(t.name == "traincast-beside" for t in threading.enumerate())


def test_warnings_are_held_until_taken_in_serial_order() -> None:
    go = threading.Event()

    def side_step() -> int:
        warnings.warn("from the thread", TraincastWarning, stacklevel=1)
        go.set()
        return 1

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with Beside([("s", side_step)]) as side:
            go.wait(5)
            warnings.warn("from the caller", TraincastWarning, stacklevel=1)
            side.take("s")
            warnings.warn("after the take", TraincastWarning, stacklevel=1)
    assert [str(w.message) for w in got] == ["from the caller", "from the thread",
                                             "after the take"]


def test_serial_switch_and_size_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINCAST_SERIAL", raising=False)
    assert not serial_forced()
    for off in ("", "0"):
        monkeypatch.setenv("TRAINCAST_SERIAL", off)
        assert not serial_forced()
    monkeypatch.setenv("TRAINCAST_SERIAL", "1")
    assert serial_forced() and not threads_allowed(10, 1)
    monkeypatch.delenv("TRAINCAST_SERIAL")
    assert not threads_allowed(9, 10)
    monkeypatch.setattr("traincast.util.beside._cpus", lambda: 1)
    assert not threads_allowed(10, 1)
    monkeypatch.setattr("traincast.util.beside._cpus", lambda: 2)
    assert threads_allowed(10, 1)
