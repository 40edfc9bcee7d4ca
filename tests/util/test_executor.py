"""traincast.util.executor.map_tasks: order, progress, error propagation, executors (serial, process, Ray).

The task functions are top-level functions of this module: the "process" executor's workers
(forkserver) import this module by name, with the caller's sys.path.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import types

import pytest
from isolated import run_isolated

from traincast.errors import ParameterError, TraincastError
from traincast.util import executor as ex
from traincast.util.executor import EXECUTORS, ExecutorError, map_tasks

# ----------------------------------------------------------------------------- task functions


def jittered_square(x: int) -> int:
    """x*x, with a delay that varies with x so that chunks finish out of order."""
    time.sleep(0.002 * ((7 * x) % 5))
    return x * x


def value_error_on_7(x: int) -> int:
    if x == 7:
        raise ValueError(f"bad value {x}\nsecond line")
    return x


def param_error_on_5(x: int) -> int:
    if x == 5:
        raise ParameterError(f"layout {x} does not fit", path="plan.toml")
    return x


def worker_pid(_: object) -> int:
    return os.getpid()


def die(_: object) -> None:
    os._exit(3)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def _stop_executors():
    yield
    ex.shutdown()


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- serial + process


@pytest.mark.parametrize("executor", ["serial", "process"])
@pytest.mark.parametrize("chunksize", [None, 3])
def test_order_preserved(executor: str, chunksize: int | None) -> None:
    items = list(range(40))
    got = map_tasks(jittered_square, items, executor=executor, workers=2, chunksize=chunksize)
    assert got == [x * x for x in items]


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_progress_reaches_total(executor: str) -> None:
    calls: list[tuple[int, int]] = []
    got = map_tasks(jittered_square, range(23), executor=executor, workers=2, chunksize=4,
                    progress=lambda done, total: calls.append((done, total)))
    assert got == [x * x for x in range(23)]
    assert calls[-1] == (23, 23)
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and len(set(dones)) == len(dones)
    assert all(t == 23 for _, t in calls)
    if executor == "process":
        assert len(calls) == 6  # one call per chunk: 4+4+4+4+4+3


def test_process_uses_workers_and_small_input_runs_here() -> None:
    pids = set(map_tasks(worker_pid, range(16), executor="process", workers=2, chunksize=2))
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    # one chunk: run serially in this process, no pool round trip
    assert map_tasks(worker_pid, [0, 1], executor="process", workers=2, chunksize=8) == \
        [os.getpid()] * 2
    assert map_tasks(worker_pid, [], executor="process") == []


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_traincast_error_keeps_type(executor: str) -> None:
    with pytest.raises(ParameterError) as info:
        map_tasks(param_error_on_5, range(12), executor=executor, workers=2, chunksize=2)
    assert info.value.path == "plan.toml"
    assert info.value.message == "layout 5 does not fit"
    assert str(info.value) == "plan.toml: layout 5 does not fit"


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_other_error_wrapped_with_item(executor: str) -> None:
    with pytest.raises(ExecutorError) as info:
        map_tasks(value_error_on_7, range(20), executor=executor, workers=2, chunksize=3)
    msg = str(info.value)
    assert "item 7" in msg and "ValueError" in msg and "bad value 7" in msg
    assert "\n" not in msg
    assert isinstance(info.value, TraincastError)
    # the original exception (serial) or the worker's traceback (process) is the cause
    cause = info.value.__cause__
    if executor == "serial":
        assert isinstance(cause, ValueError)
    else:
        assert "in value_error_on_7" in str(cause) and "ValueError: bad value 7" in str(cause)


def test_process_pool_survives_task_error() -> None:
    with pytest.raises(ExecutorError):
        map_tasks(value_error_on_7, range(20), executor="process", workers=2, chunksize=3)
    assert map_tasks(jittered_square, range(10), executor="process", workers=2,
                     chunksize=2) == [x * x for x in range(10)]


def test_dead_worker_is_reported_and_pool_replaced() -> None:
    with pytest.raises(ExecutorError, match="worker process died"):
        map_tasks(die, range(4), executor="process", workers=2, chunksize=1)
    assert map_tasks(jittered_square, range(6), executor="process", workers=2,
                     chunksize=1) == [x * x for x in range(6)]


def test_unpicklable_fn_rejected() -> None:
    with pytest.raises(ExecutorError, match="picklable top-level function"):
        map_tasks(lambda x: x, range(10), executor="process", workers=2)


def test_bad_arguments() -> None:
    with pytest.raises(ExecutorError) as info:
        map_tasks(jittered_square, [1], executor="dask")
    assert all(name in str(info.value) for name in EXECUTORS)
    with pytest.raises(ExecutorError, match="workers must be >= 1"):
        map_tasks(jittered_square, [1], executor="process", workers=0)
    with pytest.raises(ExecutorError, match="chunksize must be >= 1"):
        map_tasks(jittered_square, [1], executor="serial", chunksize=0)


def test_ray_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    with pytest.raises(ExecutorError) as info:
        map_tasks(jittered_square, range(10), executor="ray")
    assert str(info.value) == "--executor ray needs Ray: pip install 'traincast[ray]'"


# ----------------------------------------------------------------------------- Ray


class _Ref:
    def __init__(self, value: object) -> None:
        self.value = value


class _FakeRay(types.ModuleType):
    """Just enough of Ray's API, run in-process, for an instance the caller already started."""

    class exceptions:  # mirrors ray.exceptions
        RayError = RuntimeError

    def __init__(self) -> None:
        super().__init__("ray")
        self.init_calls = 0
        self.shutdown_calls = 0

    def is_initialized(self) -> bool:
        return True

    def init(self, **kwargs: object) -> None:
        self.init_calls += 1

    def shutdown(self) -> None:
        self.shutdown_calls += 1

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 3.0}

    def put(self, value: object) -> object:
        return value

    def remote(self, fn: object) -> types.SimpleNamespace:
        return types.SimpleNamespace(remote=lambda *args: _Ref(fn(*args)))

    def wait(self, refs: list, num_returns: int = 1) -> tuple[list, list]:
        return refs[::-1][:num_returns], refs[::-1][num_returns:]

    def get(self, ref: _Ref) -> object:
        return ref.value

    def cancel(self, ref: _Ref) -> None:
        pass


def test_ray_instance_of_caller_is_reused_and_left_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ex, "_ray_chunk_task", None)
    calls: list[tuple[int, int]] = []
    got = map_tasks(jittered_square, range(30), executor="ray", address="127.0.0.1:1",
                    progress=lambda d, t: calls.append((d, t)))
    assert got == [x * x for x in range(30)]
    assert len(calls) == 10 and calls[-1] == (30, 30)  # chunks of ceil(30 / (3 * 4))
    assert fake.init_calls == 0  # already initialised: address ignored, nothing contacted
    ex.shutdown()
    assert fake.shutdown_calls == 0  # not ours to stop


def test_ray_local_instance() -> None:
    pytest.importorskip("ray")
    run_isolated(__file__, "ray_local_instance_checks")


def ray_local_instance_checks() -> None:
    """A real local Ray instance (run in a child process: :mod:`isolated`)."""
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")
    # A closed port on the loopback: refused at once, before Ray is started.
    bad = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ExecutorError, match=f"cannot connect to Ray at {bad}"):
        map_tasks(jittered_square, range(10), executor="ray", address=bad)
    assert not ray.is_initialized()

    # Ray workers import code from the driver's cwd, not from pytest's sys.path: ship this
    # module's functions by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        calls: list[tuple[int, int]] = []
        got = map_tasks(jittered_square, range(50), executor="ray", workers=2,
                        progress=lambda d, t: calls.append((d, t)))
        assert got == [x * x for x in range(50)]
        assert calls[-1] == (50, 50) and len(calls) == 8  # 2 workers * 4 chunks of <= 7
        assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2

        with pytest.raises(ParameterError, match="layout 5 does not fit") as info:
            map_tasks(param_error_on_5, range(12), executor="ray", chunksize=2)
        assert info.value.path == "plan.toml"
        with pytest.raises(ExecutorError, match="item 7: ValueError: bad value 7"):
            map_tasks(value_error_on_7, range(20), executor="ray", chunksize=3)
        # closures are fine for Ray (cloudpickle)
        offset = 10
        assert map_tasks(lambda x: x + offset, range(8), executor="ray", chunksize=2) == \
            list(range(10, 18))
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        ex.shutdown()
    assert not ray.is_initialized()
