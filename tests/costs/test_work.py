"""Work (FLOPs, bytes) from recorded shapes: traincast.costs.ops."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.costs.ops import Work, event_work, op_work
from traincast.errors import ParameterError
from traincast.trace.schema import OP_FAMILIES
from traincast.trace.traceset import TraceSet

F = "float"


# -- formulas on hand-made shapes ------------------------------------------------------------


def test_mm() -> None:
    w = op_work("aten::mm", [[64, 128], [128, 32]], [F, F])
    assert w == Work(2 * 64 * 32 * 128, (64 * 128 + 128 * 32 + 64 * 32) * 4, "gemm", True)
    assert w.dtype == "fp32" and w.op == "aten::mm"


def test_addmm_with_bias() -> None:
    w = op_work("aten::addmm", [[32], [64, 128], [128, 32], [], []],
                [F, F, F, "Scalar", "Scalar"])
    # 2MNK plus one add per output for the bias; bias, both operands and the output move
    assert w.flops == 2 * 64 * 32 * 128 + 64 * 32
    assert w.bytes == (32 + 64 * 128 + 128 * 32 + 64 * 32) * 4
    assert w.family == "gemm" and w.known


def test_bmm_half_precision_and_et_types() -> None:
    w = op_work("aten::bmm", [[8, 16, 32], [8, 32, 64]], ["c10::BFloat16", "c10::BFloat16"])
    assert w.flops == 2 * 8 * 16 * 64 * 32
    assert w.bytes == 8 * (16 * 32 + 32 * 64 + 16 * 64) * 2
    assert w.dtype == "bf16"
    # execution-trace spelling of the same call
    et = op_work("aten::bmm", [[8, 16, 32], [8, 32, 64]],
                 ["Tensor(c10::BFloat16)", "Tensor(c10::BFloat16)"])
    assert et == w
    half = op_work("aten::mm", [[4, 4], [4, 4]], ["c10::Half", "c10::Half"])
    dbl = op_work("aten::mm", [[4, 4], [4, 4]], ["double", "double"])
    assert half.bytes * 4 == dbl.bytes == 3 * 16 * 8


def test_matmul_and_linear() -> None:
    w = op_work("aten::matmul", [[4, 16, 32], [32, 8]], [F, F])
    assert w.flops == 2 * 4 * 16 * 8 * 32
    lin = op_work("aten::linear", [[2, 10, 64], [32, 64], [32]], [F, F, F])
    assert lin.flops == 2 * 20 * 32 * 64 + 20 * 32
    assert lin.bytes == (2 * 10 * 64 + 32 * 64 + 32 + 20 * 32) * 4
    assert not op_work("aten::mm", [[4, 5], [6, 7]], [F, F]).known  # inner dims differ


def test_convolution() -> None:
    dims = [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []]
    types = [F, F, F, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    w = op_work("aten::convolution", dims, types)
    # no stride/padding recorded: stride 1, "same" padding -> 32x32 output
    out = 8 * 16 * 32 * 32
    assert w.flops == 2 * 8 * 16 * 32 * 32 * 3 * 9 + out
    assert w.bytes == (8 * 3 * 32 * 32 + 16 * 27 + 16 + out) * 4
    assert w.family == "conv"
    # with Concrete Inputs: stride 2, padding 1 -> 16x16 output
    conc = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    s2 = op_work("aten::convolution", dims, types, conc)
    assert s2.flops == 2 * 8 * 16 * 16 * 16 * 3 * 9 + 8 * 16 * 16 * 16
    # depthwise: groups from the weight's second dim
    dw = op_work("aten::conv2d", [[2, 32, 16, 16], [32, 1, 3, 3]], [F, F])
    assert dw.flops == 2 * 2 * 32 * 16 * 16 * 1 * 9
    # backward: grad-input and grad-weight, each a forward's worth
    bw = op_work("aten::convolution_backward", [[8, 16, 32, 32], [8, 3, 32, 32], [16, 3, 3, 3]],
                 [F, F, F])
    assert bw.flops == 2 * (2 * 8 * 16 * 32 * 32 * 3 * 9)


def test_attention() -> None:
    q = [2, 4, 128, 64]
    w = op_work("aten::scaled_dot_product_attention", [q, q, q, [], []], [F, F, F, "", "Scalar"])
    assert w.flops == 4 * 2 * 4 * 128 * 128 * 64
    assert w.bytes == 4 * (2 * 4 * 128 * 64) * 4  # q, k, v read, output written
    assert w.family == "attention"
    # flash layout is [B, L, H, D]
    fl = op_work("aten::_flash_attention_forward", [[2, 128, 4, 64]] * 3, [F, F, F])
    assert fl.flops == w.flops
    bw = op_work("aten::_scaled_dot_product_flash_attention_backward", [q] * 5, [F] * 5)
    assert bw.flops == 2.5 * w.flops  # 2*B*H*L*S*(3E + 2E)


def test_embedding_bag_pooling() -> None:
    dims = [[1000, 64], [320], [32], [], [], [], [], [], []]
    types = [F, "long int", "long int", "Scalar", "Scalar", "Scalar", "", "Scalar", "Scalar"]
    w = op_work("aten::embedding_bag", dims, types)
    # 320 rows pooled into 32 bags (L = 10): one add per looked-up element
    assert w.flops == 320 * 64
    assert w.bytes == 320 * 64 * 4 + 32 * 64 * 4 + 320 * 8 + 32 * 8
    assert w.family == "embedding"
    last = op_work("aten::embedding_bag", dims, types,
                   ["", "", "", "False", "0", "False", "", "True", ""])
    assert last.bytes == w.bytes - 64 * 4  # include_last_offset: 31 bags
    two_d = op_work("aten::embedding_bag", [[1000, 64], [32, 10]], [F, "long int"])
    assert two_d.flops == 320 * 64 and two_d.bytes == 320 * 64 * 4 + 32 * 64 * 4 + 320 * 8


def test_norm_softmax_elementwise() -> None:
    ln = op_work("aten::layer_norm", [[8, 64, 256], [], [256], [256], [], []],
                 [F, "ScalarList", F, F, "Scalar", "Scalar"])
    n = 8 * 64 * 256
    assert ln.flops == 5 * n
    assert ln.bytes == 2 * n * 4 + 2 * 256 * 4 + 2 * (n // 256) * 4  # x, y, w, b, mean/rstd
    assert ln.family == "norm"
    sm = op_work("aten::_softmax", [[512, 1000], [], []], [F, "Scalar", "Scalar"])
    assert sm.flops == 5 * 512 * 1000 and sm.bytes == 2 * 512 * 1000 * 4
    add = op_work("aten::add", [[16, 32], [32], []], [F, F, "Scalar"])  # broadcast
    assert add.flops == 16 * 32 and add.bytes == (16 * 32 + 32 + 16 * 32) * 4
    assert add.family == "elementwise"
    cmp_ = op_work("aten::gt", [[100], []], [F, "Scalar"])
    assert cmp_.bytes == 100 * 4 + 100  # bool output
    s = op_work("aten::sum", [[512, 1000], [], [], []], [F, "ScalarList", "Scalar", ""])
    assert s.flops == 512 * 1000 and s.bytes == 512 * 1000 * 4
    cp = op_work("aten::copy_", [[10, 10], [10, 10], []], ["c10::Half", F, "Scalar"])
    assert cp == Work(0, 100 * 2 + 100 * 4, "memcpy", True)


def test_optimizer_steps() -> None:
    params = [[1024, 1024], [1024]]
    n = 1024 * 1024 + 1024
    lst = "GenericList[Tensor(float),Tensor(float)]"
    adam = op_work("aten::_fused_adam_", [params] * 5 + [[[], []]],
                   [lst] * 4 + ["GenericList[]", "GenericList[Tensor(float),Tensor(float)]"])
    # torch/optim/adam.py _single_tensor_adam: 13 FLOPs, 4 tensors read + 3 written
    assert adam == Work(13 * n, 7 * n * 4, "optimizer", True)
    fa = op_work("aten::_foreach_add_", [params, params, []], [lst, lst, "Double"])
    assert fa == Work(n, 3 * n * 4, "optimizer", True)
    acm = op_work("aten::_foreach_addcmul_", [params, params, params, []],
                  [lst, lst, lst, "Double"])
    assert acm.flops == 3 * n and acm.bytes == 4 * n * 4
    # Kineto records a TensorList without element shapes: unknown, not a guess
    assert not op_work("aten::_foreach_add_", [[], [], []], ["TensorList"] * 2 + ["Scalar"]).known


def test_unknown_views_and_bad_input() -> None:
    u = op_work("aten::nonzero", [[10]], [F])
    assert u == Work(0, 0, u.family, False) and u.family in OP_FAMILIES
    assert not op_work("fbgemm::permute_2D_sparse_data", [[1]], ["int"]).known
    assert not op_work("AddmmBackward0", [[4, 4]], [F]).known  # autograd wrapper
    assert not op_work("aten::to", [[4, 4], []], [F, "Scalar"]).known  # work is in copy_
    v = op_work("aten::view", [[4, 4], []], [F, "ScalarList"])
    assert v == Work(0, 0, "other", True)
    with pytest.raises(ParameterError):
        op_work("aten::mm", "[[1, 2]]", [F, F])  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        op_work("aten::mm", [[1, 2], [2, 1]], [F, F], concrete="x")  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        op_work(None, [], [])  # type: ignore[arg-type]


# -- per event -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


def _gemm_flops(name: str, dims: list) -> float:
    if name == "aten::addmm":
        (m, k), n = dims[1], dims[2][1]
        return 2 * m * n * k + m * n
    (m, k), n = dims[0], dims[1][1]
    return 2 * m * n * k


def test_event_work_dlrm_gemm_kernels(dlrm: TraceSet) -> None:
    w = event_work(dlrm)
    assert list(w.columns[:7]) == ["event", "rank", "family", "flops", "bytes", "known",
                                   "source_event"]
    assert w["event"].is_monotonic_increasing
    ev = dlrm.events.to_pandas()
    kind = ev["kind"].astype(str).to_numpy()
    names = ev["name"].astype(str).to_numpy()
    dev = w[np.isin(kind[w["event"]], ["kernel", "memcpy", "memset"])]
    assert len(dev) == int(np.isin(kind, ["kernel", "memcpy", "memset"]).sum())
    linked = dev[dev["source_event"] >= 0]
    assert len(linked) / len(dev) > 0.9
    src_names = names[linked["source_event"]]
    gemm = linked[np.isin(src_names, ["aten::addmm", "aten::mm"])]
    assert len(gemm) >= 100
    assert (gemm["flops"] > 0).all() and (gemm["family"] == "gemm").all()
    # the kernels of one op share exactly its work; check it against the shapes parsed here
    shapes = dlrm.shapes.to_pandas().set_index("event")
    per_op = gemm.groupby("source_event")["flops"].sum()
    for src, flops in list(per_op.items())[::7]:
        dims = json.loads(shapes.loc[src, "input_dims"])
        assert flops == pytest.approx(_gemm_flops(names[src], dims), rel=1e-9)
    # the source op encloses the runtime call that launched the kernel, on its thread
    corr = ev["correlation"].to_numpy()
    rank = ev["rank"].to_numpy()
    for row, src in zip(gemm["event"].tolist()[:20], gemm["source_event"].tolist()[:20],
                        strict=True):
        rt = np.flatnonzero((kind == "runtime") & (corr == corr[row]) & (rank == rank[row]))
        assert rt.size == 1
        r = rt[0]
        assert ev["tid"][r] == ev["tid"][src]
        assert ev["ts"][src] <= ev["ts"][r] <= ev["ts"][src] + ev["dur"][src]


def test_event_work_speed_without_shapes(traces: Path) -> None:
    path = traces / "hta" / "v100_2rank_allreduce"
    if not path.is_dir():
        pytest.skip("v100_2rank_allreduce not available")
    ts = traincast.load(path)
    assert ts.events.num_rows > 100_000
    t0 = time.perf_counter()
    w = event_work(ts)
    elapsed = time.perf_counter() - t0
    assert elapsed < 2.0, elapsed
    assert len(w) > 15_000 and not w["known"].any()  # no shapes recorded: nothing known
    assert set(w["family"].astype(str)) <= set(OP_FAMILIES)


def test_event_work_demo_cpu(demo_traces: Path) -> None:
    ts = traincast.load(demo_traces)
    w = event_work(ts)
    ev = ts.events.to_pandas()
    names = ev["name"].astype(str).to_numpy()
    kinds = ev["kind"].astype(str).to_numpy()
    assert (kinds[w["event"]] == "cpu_op").all()  # a CPU-only trace: its own ops
    assert (w["source_event"] == w["event"]).all()
    shapes = ts.shapes.to_pandas().set_index("event")
    mm = w[names[w["event"]] == "aten::mm"]
    assert len(mm) > 10 and mm["known"].all()
    for row, flops in zip(mm["event"].tolist()[:10], mm["flops"].tolist()[:10], strict=True):
        assert flops == _gemm_flops("aten::mm", json.loads(shapes.loc[row, "input_dims"]))
    # aten::linear holds aten::matmul/addmm holds aten::mm: only the innermost is a leaf
    lin = w[names[w["event"]] == "aten::linear"]
    assert len(lin) and not lin["leaf"].any()
    assert mm["leaf"].all()
    fams = w.loc[w["known"] & (w["flops"] > 0), "family"].astype(str)
    assert {"gemm", "attention", "norm", "elementwise"} <= set(fams)
