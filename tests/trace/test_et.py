"""Tests of the PyTorch execution trace reader, on real traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest

from traincast.errors import TraceFormatError
from traincast.trace.readers.et import (
    DATA_DEPS_SCHEMA,
    NODES_SCHEMA,
    read_execution_trace,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
DLRM = DATA / "dlrm_8xv100"
LINEAR = DATA / "linear_1x2080ti"
HTA_ADD = DATA / "hta" / "et_simple_add"

needs_data = pytest.mark.skipif(not DLRM.is_dir(), reason="shared trace data not available")

# ------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("rank", range(8))
def test_dlrm_nodes_and_schema(rank: int) -> None:
    et = read_execution_trace(DLRM / "et" / f"rank-{rank}.et.json.gz")
    assert et.schema == "1.0.1"
    assert et.num_nodes == 1675
    assert et.nodes.schema.equals(NODES_SCHEMA)
    assert et.data_deps.schema.equals(DATA_DEPS_SCHEMA)
    ids = et.nodes.column("id").to_pylist()
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert ids[0] == 1  # process root
    assert et.metadata["time"] == "2023-09-07 16:09:59"
    tids = set(et.nodes.column("tid").to_pylist())
    assert tids == {0, 1, 2}  # root, main thread, autograd thread


@needs_data
def test_other_samples_counts() -> None:
    lin = read_execution_trace(LINEAR / "et.json.gz")
    add = read_execution_trace(HTA_ADD / "et.json.gz")
    assert (lin.schema, lin.num_nodes) == ("1.0.1", 931)
    assert (add.schema, add.num_nodes) == ("1.0.1", 38)


@needs_data
def test_known_op_shapes() -> None:
    et = read_execution_trace(DLRM / "et" / "rank-0.et.json.gz")
    row = et.nodes.slice(et.row_of(570), 1).to_pylist()[0]
    assert row["name"] == "aten::addmm"
    assert row["input_shapes"] == "[[256], [16, 13], [13, 256], [], []]"
    assert json.loads(row["input_types"]) == [
        "Tensor(float)", "Tensor(float)", "Tensor(float)", "Int", "Int",
    ]  # fmt: skip
    assert row["output_shapes"] == "[[16, 256]]"
    assert row["op_schema"].startswith("aten::addmm(Tensor self, Tensor mat1, Tensor mat2")
    assert row["is_op"] and row["top_op"] == 566  # inside aten::linear
    assert row["rf_id"] >= 1 and row["tid"] == 1
    lin = read_execution_trace(LINEAR / "et.json.gz")
    first_addmm = lin.nodes.filter(pa.compute.equal(lin.nodes["name"], "aten::addmm")).slice(0, 1)
    assert first_addmm["input_shapes"][0].as_py() == "[[1024], [512, 1024], [1024, 1024], [], []]"


@needs_data
@pytest.mark.parametrize(
    "path", [DLRM / "et" / "rank-0.et.json.gz", LINEAR / "et.json.gz", HTA_ADD / "et.json.gz"]
)
def test_parent_links_form_a_tree(path: Path) -> None:
    et = read_execution_trace(path)
    ids = et.nodes.column("id").to_pylist()
    parents = dict(zip(ids, et.nodes.column("parent").to_pylist(), strict=True))
    roots = [i for i, p in parents.items() if p == -1]
    assert roots == [1]
    for node, parent in parents.items():
        if node != 1:
            assert parent in parents, f"node {node} has unknown parent {parent}"
            assert parent < node  # ids are start order: a parent starts first
    # every node reaches the root (no cycles: parent < node makes each walk terminate)
    for node in ids:
        seen = 0
        while parents[node] != -1:
            node = parents[node]
            seen += 1
            assert seen <= len(ids)
        assert node == 1


@needs_data
@pytest.mark.parametrize(
    "path", [DLRM / "et" / "rank-0.et.json.gz", LINEAR / "et.json.gz", HTA_ADD / "et.json.gz"]
)
def test_data_deps_nonempty_and_acyclic(path: Path) -> None:
    et = read_execution_trace(path)
    deps = et.data_deps
    assert deps.num_rows > 0
    src, dst = deps.column("src").to_pylist(), deps.column("dst").to_pylist()
    assert all(s < d for s, d in zip(src, dst, strict=True))  # id order is a topological order
    assert len(set(zip(src, dst, strict=True))) == deps.num_rows
    ids = et.nodes.column("id").to_pylist()
    top = dict(zip(ids, et.nodes.column("top_op").to_pylist(), strict=True))
    assert all(top[s] == s and top[d] == d for s, d in zip(src, dst, strict=True))


@needs_data
def test_data_deps_follow_tensors() -> None:
    # linear: the second aten::linear reads the output of the first layer's relu
    et = read_execution_trace(LINEAR / "et.json.gz")
    nodes = et.nodes.to_pylist()
    by_id = {n["id"]: n for n in nodes}
    edges = set(zip(et.data_deps["src"].to_pylist(), et.data_deps["dst"].to_pylist(), strict=True))
    top_linear = [n["id"] for n in nodes if n["name"] == "aten::linear" and n["top_op"] == n["id"]]
    top_relu = [n["id"] for n in nodes if n["name"] == "aten::relu" and n["top_op"] == n["id"]]
    assert top_linear and top_relu
    assert (top_linear[0], top_relu[0]) in edges
    assert (top_relu[0], top_linear[1]) in edges
    assert by_id[top_linear[1]]["tid"] == 1


@needs_data
@pytest.mark.parametrize("rank", range(8))
def test_dlrm_comm_nodes(rank: int) -> None:
    et = read_execution_trace(DLRM / "et" / f"rank-{rank}.et.json.gz")
    comm = et.nodes.filter(et.nodes["is_comm"]).to_pylist()
    rpc = [c for c in comm if c["name"] == "record_param_comms"]
    colls = [c for c in rpc if c["comm_collective"] != "wait"]
    # 5 all_to_all (4 all_to_allv + 1 all_to_all) and 3 all_reduce per step (SOURCES.md)
    assert sorted(c["comm_collective"] for c in colls) == sorted(
        ["all_to_allv"] * 4 + ["all_to_all"] + ["allreduce"] * 3
    )
    assert sum(c["comm_collective"] == "wait" for c in rpc) == 5
    assert [c["comm_seq"] for c in colls] == list(range(147, 155))  # same on every rank
    assert {c["comm_rank"] for c in rpc} == {rank}
    c10d = {c["name"] for c in comm if c["name"] != "record_param_comms"}
    assert c10d == {"c10d::alltoall_base_", "c10d::allreduce_"}
    big = [c for c in colls if c["comm_collective"] == "allreduce"]
    assert [c["comm_in_elems"] for c in big] == [394241, 112, 226960]
    assert all(c["comm_dtype"] == "float32" and c["comm_itemsize"] == 4 for c in big)
    a2a = next(c for c in colls if c["comm_collective"] == "all_to_all")
    assert (a2a["comm_in_elems"], a2a["comm_dtype"], a2a["comm_itemsize"]) == (24, "int64", 8)
    v = next(c for c in colls if c["comm_collective"] == "all_to_allv")
    assert json.loads(v["comm_in_split"]) == [768] * 8
    for c in comm:
        if c["name"] == "c10d::alltoall_base_":
            assert c["comm_in_elems"] > 0 and c["comm_out_elems"] > 0


@needs_data
def test_devices_read_from_tensors_and_device_arguments() -> None:
    """The DLRM ETs hold CUDA tensors and CPU inputs (the index batches)."""
    assert read_execution_trace(DLRM / "et" / "rank-0.et.json.gz").devices == {"cpu", "cuda"}


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------


@needs_data
def test_truncated_gzip(tmp_path: Path) -> None:
    data = (DLRM / "et" / "rank-0.et.json.gz").read_bytes()
    bad = tmp_path / "trunc.et.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError) as info:
        read_execution_trace(bad)
    assert info.value.path == str(bad)
    assert "\n" not in str(info.value) and "gzip" in str(info.value)


@needs_data
def test_truncated_json(tmp_path: Path) -> None:
    text = gzip.decompress((HTA_ADD / "et.json.gz").read_bytes())
    bad = tmp_path / "trunc.json"
    bad.write_bytes(text[: len(text) - 100])
    with pytest.raises(TraceFormatError, match="JSON") as info:
        read_execution_trace(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b'{"schemaVersion": 1, "traceEvents": []}', "nodes"),
        (b"[1, 2, 3]", "execution trace"),
        (b'{"schema": "1.0.1", "nodes": [{"name": "x"}]}', "execution trace"),
        (b"not json at all", "JSON"),
        (b"", "empty"),
    ],
)
def test_not_an_execution_trace(tmp_path: Path, content: bytes, fragment: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(TraceFormatError, match=fragment) as info:
        read_execution_trace(bad)
    assert info.value.path == str(bad)
    assert "\n" not in str(info.value)


def test_kineto_trace_gzipped_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "kineto.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "name": "a"}]}'))
    with pytest.raises(TraceFormatError, match="traceEvents"):
        read_execution_trace(bad)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_execution_trace(tmp_path / "nope.json")


# ------------------------------------------------------------------------------------------
# Schema 1.1.x layout (ctrl_deps / inputs{values,shapes,types} / attrs)
# ------------------------------------------------------------------------------------------


def _node_11(nid: int, name: str, parent: int, attrs: dict, inputs=None, outputs=None) -> dict:
    def io(x):
        values, shapes, types = x or ([], [], [])
        return {"values": values, "shapes": shapes, "types": types, "strides": shapes}

    base = {
        "rf_id": 0, "fw_parent": 0, "seq_id": -1, "scope": 0, "tid": 1, "fw_tid": 0,
        "op_schema": "", "kernel_backend": "", "kernel_file": "", "tensor_range": "",
    }  # fmt: skip
    base.update(attrs)
    return {
        "id": nid,
        "name": name,
        "ctrl_deps": parent,
        "inputs": io(inputs),
        "outputs": io(outputs),
        "attrs": [{"name": k, "type": "string", "value": v} for k, v in base.items()],
    }


def test_schema_1_1_comm_attrs(tmp_path: Path) -> None:
    """record_param_comms attrs as written by getCommsNodeAttrs (execution_trace_observer.cpp)."""
    t_in = [5, 6, 0, 1024, 2, "cuda:0"]
    t_out = [7, 8, 0, 4096, 2, "cuda:0"]
    rpc_attrs = {
        "rf_id": 12, "collective_name": "all_gather_into_tensor", "dtype": "BFloat16",
        "in_msg_nelems": 1024, "out_msg_nelems": 4096, "in_split_size": "[]",
        "out_split_size": "[]", "global_rank_start": 4, "global_rank_stride": 1,
        "pg_name": "3", "pg_desc": "dp_group", "pg_size": 4,
    }  # fmt: skip
    doc = {
        "schema": "1.1.1-chakra.0.0.4",
        "pid": 42,
        "time": "2025-01-01 00:00:00",
        "start_ts": 1,
        "nodes": [
            _node_11(
                4,
                "record_param_comms",
                3,
                rpc_attrs,
                inputs=(
                    [
                        t_in,
                        9,
                        ["3", "dp_group"],
                        1,
                        "allgather_into_tensor_coalesced",
                        [],
                        [],
                        4,
                        1,
                        4,
                    ],
                    [[1024], [], [], [], [], [], [], [], [], []],
                    [
                        "Tensor(c10::BFloat16)",
                        "Int",
                        "Tuple[String,String]",
                        "Int",
                        "String",
                        "GenericList[]",
                        "GenericList[]",
                        "Int",
                        "Int",
                        "Int",
                    ],
                ),  # fmt: skip
                outputs=([t_out], [[4096]], ["Tensor(c10::BFloat16)"]),
            ),
            _node_11(
                3,
                "c10d::_allgather_base_",
                2,
                {
                    "rf_id": 11,
                    "op_schema": "c10d::_allgather_base_(Tensor output_tensor, Tensor "
                    "input_tensor, __torch__.torch.classes.c10d.ProcessGroup process_group, "
                    "bool async_op=True, int timeout=-1) -> (Tensor, "
                    "__torch__.torch.classes.c10d.Work)",
                },
                inputs=(
                    [t_out, t_in, "<Object>", True, -1],
                    [[4096], [1024], [], [], []],
                    ["Tensor(c10::BFloat16)", "Tensor(c10::BFloat16)", "Object", "Bool", "Int"],
                ),
                outputs=([t_out, "<Object>"], [[4096], []], ["Tensor(c10::BFloat16)", "Object"]),
            ),
            _node_11(2, "[pytorch|profiler|execution_trace|thread]", 1, {"scope": 7}),
            _node_11(1, "[pytorch|profiler|execution_trace|process]", 1, {"tid": 0}),
        ],
        "finish_ts": 2,
    }
    path = tmp_path / "et_11.json"
    path.write_text(json.dumps(doc))
    et = read_execution_trace(path)
    assert et.schema.startswith("1.1.")
    rows = {r["id"]: r for r in et.nodes.to_pylist()}
    assert rows[1]["parent"] == -1 and rows[2]["parent"] == 1 and rows[4]["parent"] == 3
    rpc = rows[4]
    assert (rpc["rf_id"], rpc["tid"], rpc["top_op"]) == (12, 1, 3)
    assert rpc["comm_collective"] == "all_gather_into_tensor"  # attr wins over the input
    assert (rpc["comm_in_elems"], rpc["comm_out_elems"]) == (1024, 4096)
    assert (rpc["comm_dtype"], rpc["comm_itemsize"]) == ("bfloat16", 2)
    assert (rpc["comm_pg_name"], rpc["comm_pg_desc"], rpc["comm_pg_size"]) == ("3", "dp_group", 4)
    assert rpc["comm_group_ranks"] == [4, 5, 6, 7]
    assert (rpc["comm_seq"], rpc["comm_rank"]) == (9, 1)
    assert rpc["input_shapes"].startswith("[[1024], []")
    c10d = rows[3]
    assert c10d["is_comm"] and c10d["is_op"] and c10d["comm_collective"] == "_allgather_base"
    assert (c10d["comm_in_elems"], c10d["comm_out_elems"]) == (1024, 4096)


# ------------------------------------------------------------------------------------------
# A fresh schema 1.1.x trace from the local torch (fixture torch_traces: conftest.py)
# ------------------------------------------------------------------------------------------


def test_torch_schema_1_1(torch_traces: Path) -> None:
    et = read_execution_trace(torch_traces / "et.json")
    assert et.schema.startswith("1.1.")
    nodes = et.nodes.to_pylist()
    addmm = [n for n in nodes if n["name"] == "aten::addmm"]
    assert addmm and all(n["rf_id"] > 0 and n["tid"] >= 1 for n in addmm)
    assert addmm[0]["op_schema"].startswith("aten::addmm(")
    assert addmm[0]["input_shapes"] == "[[32], [8, 16], [16, 32], [], []]"
    assert addmm[0]["output_shapes"] == "[[8, 32]]"
    assert et.data_deps.num_rows > 0
    src, dst = et.data_deps["src"].to_pylist(), et.data_deps["dst"].to_pylist()
    assert all(s < d for s, d in zip(src, dst, strict=True))
    # SGD's in-place parameter updates read the gradients AccumulateGrad wrote
    by_id = {n["id"]: n for n in nodes}
    assert any(by_id[d]["name"] in ("aten::add_", "aten::_foreach_add_") for d in dst)


def test_mutable_arguments_from_schema() -> None:
    from traincast.trace.readers.et_args import mutable_positions

    foreach = "aten::_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()"
    assert mutable_positions(foreach) == {0}
    copy = "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)"
    assert mutable_positions(copy) == {0}
    out = (
        "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"
    )
    assert mutable_positions(out) == {3}
    assert mutable_positions("aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)") == set()


# ------------------------------------------------------------------------------------------
# Layouts read alike; surprising but unambiguous nodes
# ------------------------------------------------------------------------------------------


def _as_newer_layout(node: dict) -> dict:
    """A schema 1.0.1 node written in the 1.1.x layout (ctrl_deps, inputs{...}, attrs)."""
    attrs = ["rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema"]
    return {
        "id": node["id"],
        "name": node["name"],
        "ctrl_deps": node["parent"],
        "inputs": {"values": node["inputs"], "shapes": node["input_shapes"],
                   "types": node["input_types"]},
        "outputs": {"values": node["outputs"], "shapes": node["output_shapes"],
                    "types": node["output_types"]},
        "attrs": [{"name": k, "type": "x", "value": node[k]} for k in attrs if k in node],
    }


@needs_data
@pytest.mark.parametrize("every", [1, 3])
def test_nodes_read_alike_in_either_layout(tmp_path: Path, every: int) -> None:
    """The DLRM trace with every node (or every third: both layouts in one file) rewritten in
    the newer layout gives the same tables and devices as the file as recorded."""
    doc = json.loads(gzip.decompress((DLRM / "et" / "rank-0.et.json.gz").read_bytes()))
    want = read_execution_trace(DLRM / "et" / "rank-0.et.json.gz")
    doc["nodes"] = [_as_newer_layout(nd) if i % every == 0 else nd
                    for i, nd in enumerate(doc["nodes"])]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc))
    got = read_execution_trace(path)
    assert got.nodes.equals(want.nodes)
    assert got.data_deps.equals(want.data_deps)
    assert got.devices == want.devices == {"cpu", "cuda"}


def test_a_comms_node_with_fewer_values_than_types_loads(tmp_path: Path) -> None:
    """A record_param_comms node whose types list names more arguments than it has values:
    its collective is unknown, its message size still comes from its tensor."""
    node = {"id": 2, "name": "record_param_comms", "parent": 1, "rf_id": 5, "tid": 1,
            "op_schema": "", "inputs": [[3, 4, 0, 256, 4, "cuda:0"]],
            "input_shapes": [[256]],
            "input_types": ["Tensor(float)", "Int", "Int", "Int", "String"],
            "outputs": [], "output_shapes": [], "output_types": []}
    root = {"id": 1, "name": "[pytorch|profiler|execution_graph|process]", "parent": 1}
    path = tmp_path / "et.json"
    path.write_text(json.dumps({"schema": "1.0.1", "nodes": [root, node]}))
    row = read_execution_trace(path).nodes.to_pylist()[1]
    assert row["is_comm"] and row["comm_collective"] == ""
    assert (row["comm_in_elems"], row["comm_itemsize"], row["comm_dtype"]) == (256, 4, "float32")
