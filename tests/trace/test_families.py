"""Op-family classification of kernel and op names."""

from __future__ import annotations

import pytest

from traincast.trace.families import classify


@pytest.mark.parametrize("name,family", [
    # a lambda in a templated elementwise kernel is not the LAMB optimizer
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<"
     "{lambda(int)#1}>>(int, {lambda(int)#1})", "elementwise"),
    ("fused_lamb_kernel", "optimizer"),
    ("multi_tensor_apply_kernel<TensorListMetadata<4>, LAMBStage1Functor<float>>",
     "optimizer"),
    ("aten::addmm", "gemm"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "comm"),
])
def test_classify(name: str, family: str) -> None:
    assert classify(name) == family
