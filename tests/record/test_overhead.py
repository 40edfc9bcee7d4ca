"""measure_profiler_overhead: a quick real measurement (the shipped table:
tests/costs/test_profiler_overhead.py)."""

from __future__ import annotations

import math

import pytest

from traincast.costs.profiler_overhead import SETTINGS
from traincast.errors import ParameterError
from traincast.record.overhead import measure_profiler_overhead


def test_quick_measurement_is_positive_and_finite() -> None:
    pytest.importorskip("torch")
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
    with pytest.raises(ParameterError):
        measure_profiler_overhead(n_ops=1)
    with pytest.raises(ParameterError):
        measure_profiler_overhead(settings=("kineto", "nvtx"))
