"""measure_profiler_overhead: a quick real measurement, and the shipped table."""

from __future__ import annotations

import math

import pytest

from traincast.errors import ParameterError
from traincast.costs.profiler_overhead import SETTINGS, overhead_table


def test_quick_measurement_is_positive_and_finite() -> None:
    pytest.importorskip("torch")
    from traincast.record.overhead import measure_profiler_overhead

    r = measure_profiler_overhead(n_ops=400, repeats=2)
    assert set(r.ns_per_event) == set(SETTINGS)
    assert all(math.isfinite(v) and v >= 0 for v in r.ns_per_event.values())
    # the execution-trace observer writes a JSON node per op: never free
    assert r.ns_per_event["execution_trace"] > 0
    assert r.events_per_op["kineto"] >= 1.0
    assert r.events_per_op["with_stack"] > r.events_per_op["kineto"]  # python events
    assert r.baseline_ns_per_op > 0 and r.torch and r.device == "cpu" and r.date
    assert r.per_event_ns(record_shapes=True) >= r.per_event_ns()
    assert set(r.to_dict()) >= {"ns_per_event", "torch", "device", "date"}


def test_bad_arguments() -> None:
    from traincast.record.overhead import measure_profiler_overhead

    with pytest.raises(ParameterError):
        measure_profiler_overhead(n_ops=1)
    with pytest.raises(ParameterError):
        measure_profiler_overhead(settings=("kineto", "nvtx"))


def test_shipped_table() -> None:
    t = overhead_table("2.13.0+cpu")
    assert t.torch.startswith("2.13") and t.device == "cpu"
    assert set(t.ns_per_event) == set(SETTINGS)
    assert 0 < t.ns_per_event["kineto"] < t.ns_per_event["record_shapes"] < t.ns_per_event[
        "execution_trace"]
    assert overhead_table("9.9").ns_per_event  # unknown version: the newest entry
    with pytest.raises(ParameterError):
        overhead_table("2.13", device="tpu")
