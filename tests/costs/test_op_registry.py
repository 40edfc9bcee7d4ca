"""The op registry (traincast.costs.ops): every handler lives in its op family's module."""

from __future__ import annotations

import pytest

from traincast.costs import ops
from traincast.costs.ops import registry


def test_every_handler_is_in_a_family_module() -> None:
    families = {"gemm", "conv", "attention", "embedding", "elementwise", "norm", "optimizer",
                "copy"}
    for name, handler in ops.HANDLERS.items():
        assert handler.__module__.rsplit(".", 1)[1] in families, name


@pytest.mark.parametrize(("op", "family"), [
    ("aten::mm", "gemm"), ("aten::convolution", "conv"),
    ("aten::_scaled_dot_product_flash_attention", "attention"),
    ("aten::embedding_bag", "embedding"), ("aten::add_", "elementwise"),
    ("aten::native_layer_norm", "norm"), ("aten::_foreach_add_", "optimizer"),
    ("aten::_fused_adamw_", "optimizer"), ("aten::copy_", "copy"),
    ("fbgemm::split_embedding_codegen_lookup_sgd_function", "embedding"),
])
def test_names_route_to_their_family(op: str, family: str) -> None:
    _, handler, _ = registry._handler(op)
    assert handler is not None and handler.__module__.endswith("." + family)


def test_views_are_zero_and_composites_unknown() -> None:
    assert registry._handler("aten::view")[2] == "zero"
    assert registry._handler("aten::to")[2] == "composite"
    assert registry._handler("vllm::whatever")[2] == "unknown"
