"""The collectives vocabulary: names, nccl-tests message bytes, bus factors and their policies."""

from __future__ import annotations

import numpy as np
import pytest

from traincast.errors import ParameterError
from traincast.trace.comm_vocab import COLLECTIVES, bus_factor, message_bytes, normalise


@pytest.mark.parametrize(("spelling", "name"), [
    ("allreduce", "all_reduce"), ("_allgather_base", "all_gather"),
    ("reduce_scatter_tensor", "reduce_scatter"), ("alltoall_base", "all_to_all"),
    ("_reduce_oop", "reduce"), ("broadcast", "broadcast"), ("barrier", "barrier"),
    ("Send", "send"), ("recv_any_source", "recv"), ("gather", "gather"), ("scatter", "scatter"),
    ("frobnicate", "frobnicate")])
def test_normalise(spelling: str, name: str) -> None:
    assert normalise(spelling) == name


def test_bus_factor_policies_agree_where_nccl_tests_defines_one() -> None:
    colls = np.array([c for c in COLLECTIVES if c != "barrier"], object)
    n = np.full(colls.size, 8)
    strict = np.array([bus_factor(c, 8) for c in colls])
    np.testing.assert_array_equal(strict, bus_factor(colls, n, undefined="nan"))
    np.testing.assert_allclose(strict, [1.75] + [0.875] * 3 + [1.0] * 4 + [0.875] * 2)


def test_bus_factor_undefined_policies() -> None:
    # the cost model's policy: barrier moves no payload, anything else undefined raises
    assert bus_factor("barrier", 8) == 0.0
    with pytest.raises(ParameterError, match="unknown collective"):
        bus_factor("frobnicate", 8)
    with pytest.raises(ParameterError, match="group_size"):
        bus_factor("all_reduce", 0)
    # the measurement table's policy: NaN where nccl-tests reports no busbw
    got = bus_factor(np.array(["barrier", "frobnicate", "all_reduce"], object),
                     np.array([8, 8, 0]), undefined="nan")
    assert np.isnan(got).all()
    with pytest.raises(ParameterError, match="undefined"):
        bus_factor("all_reduce", 8, undefined="zero")


def test_bus_factor_shapes() -> None:
    assert isinstance(bus_factor("all_reduce", 4), float)
    np.testing.assert_allclose(bus_factor("all_reduce", np.array([2, 4])), [1.0, 1.5])


def test_message_bytes_follow_nccl_tests() -> None:
    coll = np.array(["all_reduce", "all_gather", "reduce_scatter", "gather", "scatter", "recv",
                     "recv", "barrier"], object)
    in_b = np.array([100, 10, 80, 10, 40, 7, 7, 9])
    out_b = np.array([100, 80, 10, 80, 5, 0, 6, 0])
    got = message_bytes(coll, in_b, out_b, np.full(coll.size, 8))
    np.testing.assert_array_equal(got, [100, 80, 80, 80, 40, 7, 6, 0])
