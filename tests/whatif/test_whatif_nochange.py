"""A what-if that changes nothing says why; one that cannot apply is refused (real traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traincast
from traincast.errors import ParameterError
from traincast.whatif.spec import parse_what_if
from traincast.whatif.speedup import closest_names


@pytest.fixture(scope="module")
def a100(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "hta" / "a100_2rank_nccl")


def _notes(pred: traincast.Prediction) -> str:
    return "\n".join(pred.notes)


def test_a_regex_matching_nothing_is_refused_with_the_closest_names(a100) -> None:
    with pytest.raises(ParameterError, match=r"ncclKernal\.\*=1\.5.*matches no event.*"
                                             r"closest names: ncclKernel_AllReduce"):
        traincast.predict(a100, what_if=["speedup=ncclKernal.*=1.5"])
    with pytest.raises(ParameterError, match="no event of rank 0"):
        traincast.predict(a100, what_if=["speedup=rank:0:ncclKernal.*=1.5"])


def test_closest_names_are_few_and_ranked() -> None:
    names = ["ncclKernel_AllReduce_RING", "aten::mm", "ncclKernel_Broadcast", "cudaMemcpy",
             "x" * 80, "nccl:all_reduce", "gemm", "void foo"]
    got = closest_names("ncclKernal.*", names)
    assert got[0].startswith("ncclKernel_") and len(got) <= 5
    assert "void foo" not in got


def test_a_family_matching_nothing_is_refused_alone_and_noted_beside_another(a100) -> None:
    with pytest.raises(ParameterError, match="family:embedding=2: matches no event.*families "
                                             "present"):
        traincast.predict(a100, what_if=["speedup=family:embedding=2"])
    pred = traincast.predict(a100, what_if=["speedup=family:embedding=2", "speedup=kind:cpu_op=10"])
    assert "speedup family:embedding=2: matches no event" in _notes(pred)
    assert "it changes nothing" in _notes(pred)


@pytest.mark.parametrize(("items", "needs"), [
    (["ranks_per_node=4"], "world_size"),
    (["efficiency=fitted"], "batch_size"),
    (["batch_size_from=16"], "batch_size"),
    (["ranks_per_node=4", "gpu=H100"], "world_size"),
])
def test_a_key_that_needs_another_is_refused_naming_it(items: list[str], needs: str) -> None:
    with pytest.raises(ParameterError, match=f"{items[0].split('=')[0]} has no effect alone"
                                             f".*{needs}"):
        parse_what_if(items)


def test_keys_with_their_partner_are_accepted() -> None:
    assert parse_what_if(["ranks_per_node=4", "world_size=16"]).ranks_per_node == 4
    assert parse_what_if(["ranks_per_node=4", "inter_node_gbps=100"]).ranks_per_node == 4
    assert parse_what_if(["efficiency=fitted", "batch_size=8"]).efficiency == "fitted"


def test_node_preset_sets_gpu_network_and_layout() -> None:
    w = parse_what_if(["node=dgx-h100"])
    assert (w.node, w.gpu, w.ranks_per_node) == ("DGX-H100", "H100-SXM", 8)
    assert w.intra_node_gbps == pytest.approx(3600) and w.inter_node_gbps == pytest.approx(400)
    assert any("host CPU kept as recorded" in n for n in w.node_notes)
    assert w.to_dict()["node"] == "DGX-H100"
    explicit = parse_what_if(["node=DGX-H100", "inter_node_gbps=100", "ranks_per_node=4"])
    assert explicit.inter_node_gbps == 100 and explicit.ranks_per_node == 4
    assert "given explicitly: inter_node_gbps, ranks_per_node" in explicit.node_notes[0]
    with pytest.raises(ParameterError, match="unknown node preset 'DGX-9'.*DGX-A100"):
        parse_what_if(["node=DGX-9"])


def test_gpu_says_what_it_keeps_and_why_the_step_is_unchanged(a100) -> None:
    pred = traincast.predict(a100, what_if=["gpu=H100"])
    notes = _notes(pred)
    assert "gpu=H100 changes the GPU alone; kept: host CPU as recorded" in notes
    assert "intra-node network as recorded" in notes
    assert "the step is unchanged" in notes and "the GPU is off the critical path" in notes
    assert any("critical path" in n for n in pred.to_dict()["notes"])


def test_node_applies_gpu_and_network_and_states_assumptions(a100) -> None:
    pred = traincast.predict(a100, what_if=["node=DGX-H100"])
    notes = _notes(pred)
    assert "node DGX-H100: gpu=H100-SXM" in notes and "host CPU kept as recorded" in notes
    assert "A100-SXM4-40GB -> H100-SXM" in notes
    assert "changes the GPU alone" not in notes
    assert pred.to_dict()["what_if"]["node"] == "DGX-H100"


def test_network_keys_with_nil_effect_say_why(a100) -> None:
    pred = traincast.predict(a100, what_if=["inter_node_gbps=50"])
    notes = _notes(pred)
    assert "inter_node_gbps acts only across nodes" in notes
    assert "the step is bound by host time" in notes
    pred = traincast.predict(a100, what_if=["comm_algorithm=pairwise"])
    assert "comm_algorithm=pairwise does not apply to all_reduce (x15), broadcast (x6)" \
        in _notes(pred)


def test_a_what_if_that_moves_the_step_has_no_unchanged_note(a100) -> None:
    pred = traincast.predict(a100, what_if=["speedup=kind:cpu_op=10"])
    it = pred.iterations
    assert ((it.predicted_ns - it.replay_ns).abs() > 0.005 * it.replay_ns).any()
    assert "the step is unchanged" not in _notes(pred)
