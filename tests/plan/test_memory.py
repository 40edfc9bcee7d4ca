"""Per-GPU memory model (traincast.plan.memory) against hand-computed closed forms.

Activation values are the formulas of Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models" (MLSys 2023, arXiv:2205.05198), Table 2, evaluated by hand for GPT-3
175B (L=96, h=12288, a=96, s=2048, b=1, t=8): s*b*h = 25,165,824 and 5as/h = 80.
"""

from __future__ import annotations

import pytest

from traincast.plan.memory import (
    GIB,
    MemoryBreakdown,
    activation_bytes_per_layer,
    dlrm_memory,
    gpu_capacity_bytes,
    parameter_bytes,
    transformer_memory,
)
from traincast.plan.spec import DLRMSpec, EmbeddingTable, Layout, PlanError, TransformerSpec

GPT3 = TransformerSpec(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200, name="175b")
GPT1_3B = TransformerSpec(layers=24, hidden=2048, heads=16, seq=2048, vocab=51200)
SBH = 2048 * 1 * 12288  # 25,165,824


# ------------------------------------------------------------------ per-layer activations


@pytest.mark.parametrize(("t", "sp", "recompute", "expected"), [
    (1, False, "none", SBH * (34 + 80)),              # sbh(34 + 5as/h)
    (8, False, "none", SBH * (10 + 24 / 8 + 80 / 8)),  # sbh(10 + 24/t + 5as/(ht))
    (8, True, "none", SBH / 8 * (34 + 80)),           # sbh/t (34 + 5as/h)
    (8, False, "selective", SBH * (10 + 24 / 8)),     # sbh(10 + 24/t)
    (8, True, "selective", SBH * 34 / 8),             # sbh 34/t
    (8, False, "full", 2 * SBH),                      # 2sbh
    (8, True, "full", 2 * SBH / 8),                   # 2sbh/t (input is sequence-sharded)
])
def test_per_layer_matches_table2(t, sp, recompute, expected):
    assert activation_bytes_per_layer(GPT3, 1, t, sp, recompute) == expected


def test_per_layer_literal_values():
    # the same closed forms as literal byte counts
    assert activation_bytes_per_layer(GPT3, 1, 1, False, "none") == 2_868_903_936
    assert activation_bytes_per_layer(GPT3, 1, 8, False, "none") == 578_813_952
    assert activation_bytes_per_layer(GPT3, 1, 8, True, "selective") == 106_954_752
    # micro-batch scales linearly
    assert activation_bytes_per_layer(GPT3, 4, 8, True, "selective") == 4 * 106_954_752


def test_five_x_reduction_of_the_abstract():
    # "reduces activation memory by 5x": TP baseline sbh(10+3+10) vs TP+SP+selective sbh*34/8
    base = activation_bytes_per_layer(GPT3, 1, 8, False, "none")
    best = activation_bytes_per_layer(GPT3, 1, 8, True, "selective")
    assert base / best == pytest.approx(23 / 4.25)
    assert base / best > 5


def test_general_ffn_reduces_to_paper_split():
    # f = 2h: attention 11sbh + 5as^2b, MLP 3sbh + 4sbf = 11sbh, layernorms 4sbh
    m = TransformerSpec(layers=2, hidden=1024, heads=8, seq=512, ffn=2048)
    sbh, as2b = 512 * 2 * 1024, 5 * 8 * 512 * 512 * 2
    assert activation_bytes_per_layer(m, 2, 1, False, "none") == 26 * sbh + as2b
    # TP: 10 sbh replicated; (8 + 4f/h) sbh = 16 sbh and the core split over t
    assert activation_bytes_per_layer(m, 2, 4, False, "none") == 10 * sbh + (16 * sbh + as2b) / 4
    assert activation_bytes_per_layer(m, 2, 4, True, "selective") == 26 * sbh / 4


def test_fp32_activations_double_the_16_bit_terms():
    m16 = TransformerSpec(layers=2, hidden=256, heads=4, seq=128)
    m32 = TransformerSpec(layers=2, hidden=256, heads=4, seq=128, dtype="fp32")
    sbh, as2b = 128 * 256, 4 * 128 * 128
    # 16-bit: 34 sbh = 32 (2-byte) + 2 (masks); 5 as^2b = 4 + 1 (mask)
    assert activation_bytes_per_layer(m16, 1, 1, False, "none") == 34 * sbh + 5 * as2b
    assert activation_bytes_per_layer(m32, 1, 1, False, "none") == 66 * sbh + 9 * as2b
    assert activation_bytes_per_layer(m32, 1, 1, False, "full") == 4 * sbh


def test_moe_layer_counts_mlp_per_routed_expert():
    m = TransformerSpec(layers=4, hidden=256, heads=4, seq=128, experts=8, top_k=2)
    sbh = 128 * 256
    dense = activation_bytes_per_layer(m, 1, 1, False, "selective")
    moe = activation_bytes_per_layer(m, 1, 1, False, "selective", moe=True)
    assert dense == 34 * sbh
    assert moe - dense == 2 * sbh + 16 * sbh  # one more MLP input (2sbh) and 4sbf (16sbh)


# ------------------------------------------------------------------ pipeline


def _gpt3_layout(**kw):
    base = dict(tp=8, pp=8, dp=1, global_batch=64, sequence_parallel=True,
                recompute="selective")
    base.update(kw)
    return Layout(**base)


def test_first_stage_holds_all_layers_of_one_micro_batch():
    # K Sec. 4.2.3: (L/p) layers x p micro-batches = L * per_layer, plus sbh/t * p embedding mask
    r = transformer_memory(GPT3, _gpt3_layout())
    assert r.activations == 96 * 106_954_752 + SBH / 8 * 8
    assert r.activations == 10_292_822_016
    # independent of pp (the layer part)
    r4 = transformer_memory(GPT3, _gpt3_layout(pp=4, global_batch=64))
    assert r4.activations - SBH / 8 * 4 == 96 * 106_954_752


def test_1f1b_in_flight_per_stage_and_few_micro_batches():
    per, emb = 106_954_752, SBH / 8
    # stage 3 of 8 holds pp - 3 = 5 micro-batches of its 12 layers
    assert transformer_memory(GPT3, _gpt3_layout(), stage=3).activations == 12 * per * 5
    # with m = 2 < pp only 2 are ever in flight
    r = transformer_memory(GPT3, _gpt3_layout(global_batch=2))
    assert r.activations == 12 * per * 2 + emb * 2
    # without a global batch the layout has m = 1
    assert transformer_memory(GPT3, _gpt3_layout(global_batch=None)).activations == \
        12 * per + emb


def test_last_stage_output_layer_and_cross_entropy():
    # one micro-batch of 12 layers + final layernorm and output-layer inputs (2sbh/t each)
    # + fp32 logits 4 s b V / t
    r = transformer_memory(GPT3, _gpt3_layout(), stage=7)
    assert r.activations == 12 * 106_954_752 + 4 * SBH / 8 + 4 * 2048 * 51200 / 8
    # pp = 1: K's sbhL/t * 34 + 4sbh/t (1 + V/h) + sbh/t (embedding dropout)
    r1 = transformer_memory(GPT3, _gpt3_layout(pp=1, global_batch=None))
    assert r1.activations == SBH * 96 * 34 / 8 + 4 * SBH / 8 * (1 + 51200 / 12288) + SBH / 8


def test_interleaved_penalty():
    # K Sec. 4.2.3: L (1 + (p-1)/(p v)) layers on the first stage; p=8, v=2: 96 * 23/16 = 138
    lay = _gpt3_layout(schedule="interleaved", virtual_stages=2, global_batch=64)
    r = transformer_memory(GPT3, lay)
    factor = 1 + 7 / 16
    assert r.activations == 96 * factor * 106_954_752 + SBH / 8 * 8 * factor
    assert 96 * factor == 138
    # m = pp: all chunk forwards fit in the warm-up, no penalty
    r8 = transformer_memory(GPT3, lay.replace(global_batch=8))
    assert r8.activations == 96 * 106_954_752 + SBH / 8 * 8


def test_gpipe_keeps_every_micro_batch():
    r = transformer_memory(GPT3, _gpt3_layout(schedule="gpipe", global_batch=32), stage=2)
    assert r.activations == 12 * 106_954_752 * 32


def test_recompute_working_set_in_other():
    full = transformer_memory(GPT3, _gpt3_layout(recompute="full"))
    assert full.activations == 96 * 2 * SBH / 8 + SBH / 8 * 8
    assert full.other == 358_612_992 - 2 * SBH / 8  # one layer re-materialised
    sel = transformer_memory(GPT3, _gpt3_layout())
    assert sel.other == 358_612_992 - 106_954_752  # the 5as^2b/t attention core
    assert transformer_memory(GPT3, _gpt3_layout(recompute="none")).other == 0


# ------------------------------------------------------------------ parameters / ZeRO


def test_mixed_precision_adam_is_16_bytes_per_param():
    assert parameter_bytes(1e9, "bf16", 1, 0) == (2e9, 2e9, 12e9)
    assert parameter_bytes(1e9, "fp32", 1, 0) == (4e9, 4e9, 8e9)


@pytest.mark.parametrize(("zero", "expected"), [
    (0, (2, 2, 12)), (1, (2, 2, 12 / 8)), (2, (2, 2 / 8, 12 / 8)), (3, (2 / 8, 2 / 8, 12 / 8)),
])
def test_zero_sharding_ratios(zero, expected):
    assert parameter_bytes(1.0, "fp16", 8, zero) == pytest.approx(expected)


def test_weights_sum_to_model_params():
    m = TransformerSpec(layers=8, hidden=512, heads=8, seq=256, vocab=1000)
    # pp = 1: exactly the model's parameters, 2 bytes each
    assert transformer_memory(m, Layout()).weights == 2 * m.params
    # pp = 4: plus the tied output-embedding copy on the last stage
    lay = Layout(pp=4)
    total = sum(transformer_memory(m, lay, stage=k).weights for k in range(4))
    assert total == 2 * (m.params + 1000 * 512)
    # tp = 2: everything but layernorms, row-parallel biases and positions is halved
    h, f = 512, 2048
    sharded = 8 * (4 * h * h + 3 * h + 2 * h * f + f) + 1000 * h
    replicated = 8 * 6 * h + 256 * h + 2 * h
    assert transformer_memory(m, Layout(tp=2)).weights == 2 * (sharded / 2 + replicated)
    assert sharded + replicated == m.params


def test_zero3_weights_over_dp():
    m = TransformerSpec(layers=8, hidden=512, heads=8, seq=256, vocab=1000)
    r0 = transformer_memory(m, Layout(dp=4))
    r3 = transformer_memory(m, Layout(dp=4, zero=3))
    assert (r3.weights, r3.gradients, r3.optimizer) == pytest.approx(
        (r0.weights / 4, r0.gradients / 4, r0.optimizer / 4))
    assert r3.activations == r0.activations


def test_moe_expert_params_over_ep():
    m = TransformerSpec(layers=2, hidden=256, heads=4, seq=128, vocab=1000, experts=8)
    h, f = 256, 1024
    expert = 2 * 8 * (2 * h * f + f + h)
    dense = m.params - expert
    r1 = transformer_memory(m, Layout(dp=4))
    r4 = transformer_memory(m, Layout(dp=4, ep=4))
    assert r1.weights == 2 * m.params
    assert r4.weights == 2 * (dense + expert / 4)
    # ZeRO-1: dense optimizer state over dp = 4, expert state over dp / ep = 1
    z = transformer_memory(m, Layout(dp=4, ep=4, zero=1))
    assert z.optimizer == 12 * (dense / 4 + expert / 4)


# ------------------------------------------------------------------ capacity / fits


def test_gpu_capacity_is_datasheet_gb():
    assert gpu_capacity_bytes("A100") == 80e9
    assert gpu_capacity_bytes("A100-SXM4-40GB") == 40e9
    with pytest.raises(PlanError, match="unknown GPU"):
        gpu_capacity_bytes("Z9000")


def test_fits_verdict():
    assert transformer_memory(GPT3, Layout(), "A100-SXM4-80GB").fits is False
    small = transformer_memory(GPT1_3B, Layout(), 80e9)
    assert small.fits is True
    assert small.total < 40 * GIB
    assert transformer_memory(GPT1_3B, Layout()).fits is None


def test_breakdown_total_and_gib():
    r = MemoryBreakdown(weights=GIB, gradients=GIB, optimizer=6 * GIB, activations=2 * GIB,
                        other=0.5 * GIB, capacity=10 * GIB)
    assert r.total == 10.5 * GIB
    assert r.fits is False
    assert r.to_gib() == {"weights": 1.0, "gradients": 1.0, "optimizer": 6.0,
                          "activations": 2.0, "other": 0.5, "capacity": 10.0, "total": 10.5,
                          "fits": False}
    assert MemoryBreakdown(1.0, 1.0, 1.0, 1.0).to_gib()["capacity"] is None


# ------------------------------------------------------------------ DLRM


def test_dlrm_sharding():
    tables = (EmbeddingTable(1000, 64), EmbeddingTable(500, 64), EmbeddingTable(400, 64))
    m = DLRMSpec(tables=tables, dense_features=13, bottom_mlp=(128, 64), top_mlp=(64, 1))
    mlp = (13 * 128 + 128 + 128 * 64 + 64) + ((4 * 3 // 2 + 64) * 64 + 64 + 64 + 1)
    lay = Layout(dp=2)
    # table-wise: LPT puts the 1000-row table alone, 500 + 400 on the other GPU
    r = dlrm_memory(m, lay)
    assert r.weights == 1000 * 64 * 4 + mlp * 4
    assert r.gradients == mlp * 4 and r.optimizer == 0
    # row-wise: ceil(rows / 2) of every table
    r = dlrm_memory(m, lay.replace(sharding=("row",)), optimizer="rowwise_adagrad")
    assert r.weights == (500 + 250 + 200) * 64 * 4 + mlp * 4
    assert r.optimizer == (500 + 250 + 200) * 4
    # data: replicated with gradients; adagrad dense state 4 bytes/param
    r = dlrm_memory(m, lay.replace(sharding=("data",)), dense_optimizer="adagrad")
    assert r.weights == r.gradients == r.optimizer == (1900 * 64 + mlp) * 4
    with pytest.raises(PlanError, match="sharding has 2 values"):
        dlrm_memory(m, lay.replace(sharding=("row", "data")))
    with pytest.raises(PlanError, match="optimizer"):
        dlrm_memory(m, lay, optimizer="lamb")


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(("call", "match"), [
    (lambda: activation_bytes_per_layer(GPT3, 1, 7, False, "none"), "tp .7. must divide heads"),
    (lambda: activation_bytes_per_layer(GPT3, 0, 8, False, "none"), "micro_batch"),
    (lambda: activation_bytes_per_layer(GPT3, 1, 8, False, "some"), "recompute"),
    (lambda: activation_bytes_per_layer("gpt", 1, 8, False, "none"), "TransformerSpec"),
    (lambda: transformer_memory(GPT3, Layout(pp=5)), "must divide layers"),
    (lambda: transformer_memory(GPT3, Layout(tp=5)), "must divide heads"),
    (lambda: transformer_memory(GPT3, Layout(pp=2), stage=2), "stage"),
    (lambda: transformer_memory(GPT3, Layout(), capacity_bytes=-1), "capacity_bytes"),
    (lambda: transformer_memory(GPT3, Layout(), capacity_bytes="Z9000"), "unknown GPU"),
    (lambda: transformer_memory(GPT3, {"tp": 1}), "Layout"),
    (lambda: parameter_bytes(1.0, "int4", 1, 0), "dtype"),
])
def test_bad_parameters_raise_plan_error(call, match):
    with pytest.raises(PlanError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
