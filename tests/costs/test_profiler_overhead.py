"""The profiler-overhead table shipped with the package, and the per-event cost model."""

from __future__ import annotations

import pytest

from traincast.costs.profiler_overhead import SETTINGS, overhead_table, per_event_ns
from traincast.errors import ParameterError


def test_shipped_table() -> None:
    t = overhead_table("2.13.0+cpu")
    assert t.torch.startswith("2.13") and t.device == "cpu"
    assert set(t.ns_per_event) == set(SETTINGS)
    assert 0 < t.ns_per_event["kineto"] < t.ns_per_event["record_shapes"] < t.ns_per_event[
        "execution_trace"]
    assert overhead_table("9.9").ns_per_event  # unknown version: the newest entry
    with pytest.raises(ParameterError):
        overhead_table("2.13", device="tpu")


def test_per_event_cost_adds_option_extras_over_kineto() -> None:
    ns = {"kineto": 1000.0, "record_shapes": 1500.0, "execution_trace": 3000.0,
          "with_stack": 700.0}
    assert per_event_ns(ns) == 1000.0
    assert per_event_ns(ns, record_shapes=True, execution_trace=True) == 1000 + 500 + 2000
    assert per_event_ns(ns, python=True) == 700.0
    assert per_event_ns({"kineto": 1000.0, "record_shapes": 900.0}, record_shapes=True) == 1000
