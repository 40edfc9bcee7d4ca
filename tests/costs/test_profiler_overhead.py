"""The profiler-overhead table shipped with the package, and the per-event cost model."""

from __future__ import annotations

import pytest

from traincast.costs.profiler_overhead import (
    HOST_SCALE_RANGE,
    SETTINGS,
    dominant_setting,
    host_scale,
    overhead_table,
    per_event_ns,
)
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


def test_host_scale_is_the_view_op_ratio_within_range() -> None:
    ref = {"kineto": 1000.0, "execution_trace": 10_000.0}
    assert host_scale(ref, "kineto", 2500.0) == 2.5
    assert host_scale(ref, "execution_trace", 5000.0) == 0.5
    assert host_scale(ref, "kineto", 1e9) == HOST_SCALE_RANGE[1]
    assert host_scale(ref, "kineto", 1.0) == HOST_SCALE_RANGE[0]
    assert host_scale(ref, "kineto", None) == 1.0
    assert host_scale(ref, "record_shapes", 2500.0) == 1.0  # no reference for the setting
    assert dominant_setting(record_shapes=True, execution_trace=True) == "execution_trace"
    assert dominant_setting(record_shapes=True, with_stack=True) == "record_shapes"
    assert dominant_setting(with_stack=True) == "with_stack"
    assert dominant_setting() == "kineto"


def test_shipped_per_kind_entry_has_a_host_reference() -> None:
    t = overhead_table("2.11", "cuda")
    assert set(t.per_kind) == set(SETTINGS)
    assert set(t.view_op_ns) == set(SETTINGS)
    assert t.inputs_per_op > 0
    assert not overhead_table("2.13", "cpu").per_kind  # the per-event figures validate better
