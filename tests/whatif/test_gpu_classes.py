"""Cross-GPU prediction per kernel class (traincast.whatif.gpu): classes, floor, rates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.costs.hardware import KERNEL_MODEL_FIELDS, load_catalog
from traincast.errors import ParameterError
from traincast.whatif.gpu import KERNEL_CLASSES, classify_kernel, gpu_breakdown, gpu_factors

WILD = Path("tracelens") / "wild"


def _load(traces: Path, rel: str | Path) -> traincast.trace.traceset.TraceSet:  # type: ignore[name-defined]
    path = traces / rel
    if not path.exists():
        pytest.skip(f"{path} not available")
    return traincast.load(path)


@pytest.fixture(scope="module")
def qwen(traces: Path):  # noqa: ANN201
    return _load(traces, WILD / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")


@pytest.fixture(scope="module")
def mi300x(traces: Path):  # noqa: ANN201
    return _load(traces, WILD / "inference_sglang_prefilldecode_sglang_Qwen3-8B_prefilldecode.json.gz")


@pytest.fixture(scope="module")
def dlrm0(traces: Path):  # noqa: ANN201
    return _load(traces, Path("dlrm_8xv100") / "kineto" / "rank-0.pt.trace.json.gz")


def _device(ts) -> tuple[np.ndarray, list[str], list[str], list[str], np.ndarray]:  # noqa: ANN001
    ev = ts.events.to_pandas()
    dev = ev.kind.isin(["kernel", "memcpy", "memset"]).to_numpy()
    rows = np.flatnonzero(dev)
    sub = ev.iloc[rows]
    return (rows, sub.name.astype(str).tolist(), sub.op_family.astype(str).tolist(),
            sub.kind.astype(str).tolist(), sub.dur.to_numpy(float))


def _expected(t: float, t_min_old: float, t_min_new: float, rate_ratio: float,
              copy: bool = False) -> float:
    """t_new = floor * t_min_new / t_min_old + (t - floor) * R_old / R_new (module docstring)."""
    floor = min(t, t_min_old)
    return floor * (1.0 if copy else t_min_new / t_min_old) + (t - floor) * rate_ratio


def _hbm(g) -> float:  # noqa: ANN001
    return g.hbm_gbps * 1e9 * g.hbm_efficiency


def _tensor(g, dtype: str) -> float:  # noqa: ANN001
    return g.peak_tflops[dtype] * 1e12 * g.gemm_efficiency


# --------------------------------------------------------------------------- classes


@pytest.mark.parametrize(("name", "family", "kind", "cls"), [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm",
     "kernel", "gemm"),
    ("ampere_sgemm_128x64_nn", "gemm", "kernel", "gemm"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNN", "other", "kernel", "gemm"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1", "other", "kernel",
     "gemm"),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16>", "conv",
     "kernel", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", "attention",
     "kernel", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention", "kernel", "attention"),
    ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>",
     "elementwise", "kernel", "memory"),
    ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float>>>", "elementwise",
     "kernel", "memory"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16>",
     "norm", "kernel", "memory"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false>",
     "attention", "kernel", "memory"),
    ("triton_poi_fused_add_attn_mul_0", "elementwise", "kernel", "memory"),
    ("gemv2T_kernel_val<int, int, float, 128, 16, 4, 4>", "gemm", "kernel", "memory"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
     "comm", "kernel", "comm"),
    ("Memcpy HtoD (Pinned -> Device)", "memcpy", "memcpy", "host_copy"),
    ("Memcpy DtoH (Device -> Pageable)", "memcpy", "memcpy", "host_copy"),
    ("Memcpy DtoD (Device -> Device)", "memcpy", "memcpy", "device_copy"),
    ("Memcpy PtoP (Device -> Device)", "memcpy", "memcpy", "comm"),
    ("Memset (Device)", "memcpy", "memset", "device_copy"),
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int)", "other", "kernel", "memory"),
    ("compute_position_kernel", "other", "kernel", "other"),
])
def test_classify_kernel_rules(name: str, family: str, kind: str, cls: str) -> None:
    assert classify_kernel(name, family, kind) == cls


def test_classes_of_real_kernel_names(traces: Path) -> None:
    """Every device op of the H100 wild traces and HTA traces gets a class; the kernels we
    know by name land where they belong."""
    files = sorted((traces / WILD).glob("h100_*.json.gz")) + [
        traces / "hta" / "trace_diff" / "control.json.gz",
        traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz",
    ]
    files = [f for f in files if f.exists()]
    if not files:
        pytest.skip("no H100/HTA traces")
    seen: dict[str, set[str]] = {c: set() for c in KERNEL_CLASSES}
    for f in files:
        _, names, fams, kinds, _ = _device(traincast.load(f))
        for n, fam, k in set(zip(names, fams, kinds, strict=True)):
            seen[classify_kernel(n, fam, k)].add(n)
    low = {c: [n.lower() for n in ns] for c, ns in seen.items()}
    for n in low["gemm"]:
        assert any(w in n for w in ("gemm", "cutlass", "xmma", "nvjet", "cudnn", "conv")), n
    for n in low["attention"]:
        assert any(w in n for w in ("flash", "fmha", "attn", "attention")), n
    # what each class must contain on these traces
    assert any("sm90_xmma_gemm" in n for n in low["gemm"])
    assert any("ampere_sgemm" in n for n in low["gemm"])
    assert any("flash_fwd" in n for n in low["attention"])
    assert any("elementwise" in n for n in low["memory"])
    assert any("layer_norm" in n for n in low["memory"])
    assert any(n.startswith("memcpy dtoh") for n in low["host_copy"])
    assert any(n.startswith("memset") for n in low["device_copy"])
    # NCCL kernels are "collective" events (unchanged by this what-if); none is rescaled
    assert not any("nccl" in n for c in ("gemm", "memory", "other") for n in low[c])


# --------------------------------------------------------------------------- physics


def test_same_gpu_is_exactly_one(qwen) -> None:  # noqa: ANN001
    f, notes = gpu_factors(qwen, "H100-SXM")
    assert (f == 1.0).all()
    assert notes[0].startswith("gpu H100-SXM -> H100-SXM")


def test_latency_floor(dlrm0) -> None:  # noqa: ANN001
    """A ~2 us kernel on V100 does not get 3x faster on B200 (4.8x fp32, 8.6x HBM peaks):
    its floor part follows the GPUs' minimum kernel times; long kernels follow the rates."""
    cat = load_catalog()
    old, new = cat.gpu("V100-SXM2-32GB"), cat.gpu("B200")
    assert new.hbm_gbps / old.hbm_gbps > 3 and new.peak_tflops["fp32"] / old.peak_tflops["fp32"] > 3
    f, _ = gpu_factors(dlrm0, "B200")
    rows, names, fams, kinds, dur = _device(dlrm0)
    classes = [classify_kernel(n, a, k) for n, a, k in zip(names, fams, kinds, strict=True)]
    mem = np.array([c == "memory" for c in classes])
    short = mem & (dur <= 2000)
    assert short.any()
    assert (f[rows[short]] > 1 / 3).all()
    ratio = _hbm(old) / _hbm(new)
    for r, t in zip(rows[short], dur[short], strict=True):
        want = _expected(t, old.min_kernel_ns, new.min_kernel_ns, ratio)
        assert f[r] * t == pytest.approx(want, rel=1e-9)
    # a long memory kernel approaches the achievable-bandwidth ratio
    long_ = mem & (dur >= 50_000)
    if long_.any():
        assert (f[rows[long_]] < 2 * ratio + new.min_kernel_ns / 50_000).all()


def test_compute_and_memory_ratios_h100_to_a100(qwen) -> None:  # noqa: ANN001
    """Long bf16 GEMMs scale by the achievable tensor rates, long elementwise kernels by the
    achievable HBM rates (values computed here from the catalog numbers)."""
    from traincast.costs.ops import event_work

    cat = load_catalog()
    old, new = cat.gpu("H100-SXM"), cat.gpu("A100-SXM4-80GB")
    f, notes = gpu_factors(qwen, "A100")
    rows, names, fams, kinds, dur = _device(qwen)
    work = event_work(qwen).set_index("event")
    c_old, c_new = _tensor(old, "bf16"), _tensor(new, "bf16")
    m_old, m_new = _hbm(old), _hbm(new)
    n_gemm = n_mem = 0
    for r, n, a, k, t in zip(rows, names, fams, kinds, dur, strict=True):
        cls = classify_kernel(n, a, k)
        if cls == "gemm" and "bf16" in n and t > 20_000:
            w = work.loc[r] if r in work.index else None
            if w is not None and w["known"] and w["flops"] > 0 and w["bytes"] > 0:
                ratio = (max(w["flops"] / c_new, w["bytes"] / m_new)
                         / max(w["flops"] / c_old, w["bytes"] / m_old))
            else:
                ratio = c_old / c_new
            want = _expected(t, old.min_kernel_ns, new.min_kernel_ns, ratio)
            assert f[r] * t == pytest.approx(want, rel=1e-9)
            n_gemm += 1
        elif cls == "memory" and t > 20_000:
            want = _expected(t, old.min_kernel_ns, new.min_kernel_ns, m_old / m_new)
            assert f[r] * t == pytest.approx(want, rel=1e-9)
            n_mem += 1
    assert n_gemm and n_mem
    br = gpu_breakdown(qwen, "A100").set_index("class")
    assert br.loc["gemm", "ratio"] > br.loc["memory", "ratio"] > 1  # compute gap > bandwidth gap
    assert br.loc["gemm", "ratio"] == pytest.approx(c_old / c_new, rel=0.05)
    assert br.loc["memory", "ratio"] == pytest.approx(m_old / m_new, rel=0.1)
    # the notes summarise the breakdown, one line per class
    for c in br.index:
        assert any(line.strip().startswith(f"{c}:") for line in notes)


def test_cuda_to_rocm(qwen) -> None:  # noqa: ANN001
    cat = load_catalog()
    old, new = cat.gpu("H100-SXM"), cat.gpu("MI300X")
    f, notes = gpu_factors(qwen, "MI300X")
    assert np.isfinite(f).all() and (f > 0).all()
    assert "H100-SXM -> MI300X" in notes[0]
    br = gpu_breakdown(qwen, "MI300X").set_index("class")
    assert br.loc["gemm", "ratio"] == pytest.approx(_tensor(old, "bf16") / _tensor(new, "bf16"),
                                                    rel=0.05)
    assert br.loc["memory", "ratio"] == pytest.approx(_hbm(old) / _hbm(new), rel=0.1)
    assert br["count"].sum() == int((f != 1).sum()) + int(((f == 1) & (
        np.isin(qwen.events.column("kind").to_pylist(), ["kernel", "memcpy", "memset"]))).sum())


def test_rocm_to_cuda(mi300x) -> None:  # noqa: ANN001
    cat = load_catalog()
    old, new = cat.gpu("MI300X"), cat.gpu("H100-SXM")
    f, notes = gpu_factors(mi300x, "H100")
    assert "MI300X -> H100-SXM" in notes[0]
    assert np.isfinite(f).all() and (f > 0).all()
    br = gpu_breakdown(mi300x, "H100").set_index("class")
    assert "gemm" in br.index  # Tensile Cijk_* kernels
    long_gemm = _device(mi300x)
    rows, names, fams, kinds, dur = long_gemm
    for r, n, _a, _k, t in zip(rows, names, fams, kinds, dur, strict=True):
        if n.startswith("Cijk_") and "_BBS_" in n and t > 50_000:
            # bf16 (BBS) Tensile GEMM: at least as fast as the tensor-rate ratio says, never
            # faster than the roofline with both rates improved
            lo = min(_tensor(old, "bf16") / _tensor(new, "bf16"), _hbm(old) / _hbm(new))
            hi = max(_tensor(old, "bf16") / _tensor(new, "bf16"), _hbm(old) / _hbm(new))
            assert lo * 0.99 <= f[r] <= hi * 1.01 + new.min_kernel_ns / t
    assert br.loc["memory", "ratio"] == pytest.approx(_hbm(old) / _hbm(new), rel=0.15)


# --------------------------------------------------------------------------- catalog


def test_every_model_field_has_a_source() -> None:
    cat = load_catalog()
    for g in cat.gpus.values():
        assert g.missing() == [], g.name
        for what in (*KERNEL_MODEL_FIELDS, "launch_latency_ns"):
            src = g.sources.get(what, "")
            assert len(src) > 20, f"{g.name}.{what}"
            assert any(w in src.lower() for w in ("measured", "assumed", "http", "datasheet",
                                                  "whitepaper", "secondary")), src
        assert 0 < g.hbm_efficiency <= 1 and 0 < g.gemm_efficiency <= 1
        assert cat.link(g.host_link).kind == "host"


_OLD_STYLE = """
[gpu.Old-GPU]
vendor = "nvidia"
patterns = ['Old-GPU']
peak_tflops = { fp32 = 20.0, bf16 = 300.0 }
hbm_gbps = 2000.0
hbm_gb = 80.0
source = "a user's own datasheet, doc 42"
"""


def test_old_user_file_loads_and_fails_only_for_the_gpu_what_if(tmp_path: Path, qwen) -> None:  # noqa: ANN001
    path = tmp_path / "mine.toml"
    path.write_text(_OLD_STYLE)
    cat = load_catalog(extra=path)  # a file without the new fields still loads
    assert cat.gpu("Old-GPU").missing() == list(KERNEL_MODEL_FIELDS)
    with pytest.raises(ParameterError) as err:
        gpu_factors(qwen, "Old-GPU", catalog=cat)
    msg = str(err.value)
    assert "Old-GPU" in msg
    for fld in ("min_kernel_ns", "hbm_efficiency", "gemm_efficiency", "host_link"):
        assert fld in msg
    # with the fields (and their sources) the what-if runs
    path.write_text(_OLD_STYLE.replace('source = ', 'min_kernel_ns = 1500.0\n'
                                       'hbm_efficiency = 0.8\ngemm_efficiency = 0.7\n'
                                       'host_link = "PCIe4"\nsource = '))
    cat = load_catalog(extra=path)
    f, _ = gpu_factors(qwen, "Old-GPU", catalog=cat)
    assert np.isfinite(f).all()


@pytest.mark.parametrize(("line", "message"), [
    ("hbm_efficiency = 1.5", "fraction"),
    ('host_link = "NVLink4"', "not a host link"),
    ('host_link = "PCIe9"', "host_link"),
])
def test_bad_model_fields(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(_OLD_STYLE.replace("source = ", f"{line}\nsource = "))
    with pytest.raises(ParameterError, match=message):
        load_catalog(extra=path)
