"""The optimizer's in-place updates go to the ``update`` family only for tensors of
``UPDATE_MIN_BYTES`` and more, only when the models have it, only for in-place binary ops."""

from __future__ import annotations

from traincast.predict.et_updates import UPDATE_MIN_BYTES, inplace_update

BIG = UPDATE_MIN_BYTES // 4


def _ew(n: int) -> tuple[str, str, dict]:
    return "elementwise", "fwd", {"n": n, "op": "add", "dtype": "float32"}


def test_inplace_update_mapping() -> None:
    assert inplace_update("aten::add_", _ew(BIG), True) == ("update", "fwd",
                                                            {"n": BIG, "dtype": "float32"})
    assert inplace_update("aten::addcdiv_", _ew(4 * BIG), True)[0] == "update"
    assert inplace_update("aten::add_", _ew(BIG - 1), True) == _ew(BIG - 1)  # small: warm
    assert inplace_update("aten::add_", _ew(BIG), False) == _ew(BIG)  # no update model
    assert inplace_update("aten::add", _ew(BIG), True) == _ew(BIG)  # out of place
    assert inplace_update("aten::relu_", _ew(BIG), True) == _ew(BIG)  # unary
    assert inplace_update("aten::add_", None, True) is None
    gemm = ("gemm", "fwd", {"M": 8})
    assert inplace_update("aten::add_", gemm, True) == gemm
