"""The hardware catalog: sources, known values, trace device names, aliases, user files."""

from __future__ import annotations

import gzip
import json
import math
import warnings
from pathlib import Path

import pytest

from traincast.costs.hardware import (
    CPU,
    DTYPES,
    GPU,
    Catalog,
    Link,
    Node,
    host_cpu,
    load_catalog,
    normalize_dtype,
)
from traincast.errors import ParameterError, TraincastError

NUMERIC = {
    "gpu": ("hbm_gbps", "hbm_gb", "l2_mb", "sm_count"),
    "link": ("gbps_per_direction", "links", "latency_us"),
    "node": ("gpus_per_node", "intra_links_per_gpu", "nics_per_node"),
}


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


def _write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- sources


def test_packaged_catalog_has_the_required_entries(cat: Catalog) -> None:
    names = cat.names()
    for gpu in (
        "V100-SXM2-16GB", "V100-SXM2-32GB", "V100-PCIe-16GB", "A100-SXM4-40GB",
        "A100-SXM4-80GB", "A100-PCIe-40GB", "A100-PCIe-80GB", "H100-SXM", "H100-PCIe", "H200",
        "B200", "MI250X", "MI250X-GCD", "MI300X", "RTX-2080-Ti",
    ):  # fmt: skip
        assert gpu in names["gpu"]
    for link in (
        "NVLink2", "NVLink3", "NVLink4", "NVLink5", "PCIe3-x16", "PCIe4-x16", "PCIe5-x16",
        "IB-EDR", "IB-HDR", "IB-NDR", "IB-XDR", "Slingshot-11", "InfinityFabric-MI250X",
        "InfinityFabric-MI300X",
    ):  # fmt: skip
        assert link in names["link"]
    for node in ("DGX-1-V100", "DGX-A100", "DGX-H100", "Frontier"):
        assert node in names["node"]


def test_every_number_has_a_source(cat: Catalog) -> None:
    entries: list[tuple[str, GPU | Link | Node]] = [
        *(("gpu", g) for g in cat.gpus.values()),
        *(("link", lk) for lk in cat.links.values()),
        *(("node", n) for n in cat.nodes.values()),
    ]
    for kind, entry in entries:
        assert entry.source.strip(), entry.name
        values = [f for f in NUMERIC[kind] if getattr(entry, f) is not None]
        if isinstance(entry, GPU):
            assert entry.peak_tflops, entry.name
            values += [f"peak_tflops.{d}" for d in entry.peak_tflops]
        for what in values:
            src = entry.sources.get(what)
            assert src and len(src) > 20, f"{entry.name}.{what} has no source"
            # a vendor document (URL, datasheet, whitepaper...) or what the device recorded
            kinds = ("http", "datasheet", "whitepaper", "specification", "guide", "manual")
            kinds += ("product brief", "deviceproperties")
            assert any(w in src.lower() for w in kinds), f"{entry.name}.{what}: {src}"
            assert entry.source_of(what) == src


def test_numbers_are_positive_and_dtypes_known(cat: Catalog) -> None:
    for gpu in cat.gpus.values():
        assert set(gpu.peak_tflops) <= set(DTYPES)
        assert all(v > 0 and math.isfinite(v) for v in gpu.peak_tflops.values())
        assert gpu.hbm_gbps > 0 and gpu.hbm_gb > 0
        assert gpu.vendor in ("nvidia", "amd")
    for link in cat.links.values():
        assert link.gbps_per_direction > 0
        assert link.gbps_bidirectional == 2 * link.gbps_per_direction
        assert link.kind in ("gpu-gpu", "host", "network")


# --------------------------------------------------------------------------- known values


def test_known_gpu_values(cat: Catalog) -> None:
    # A100 SXM4 80GB: dense fp16/bf16 312, tf32 156, HBM2e 2039 GB/s (datasheet r4)
    a100 = cat.gpu("A100-SXM4-80GB")
    assert a100.peak_tflops["fp16"] == a100.peak_tflops["bf16"] == 312.0
    assert a100.peak_tflops["tf32"] == 156.0
    assert a100.hbm_gbps == 2039.0 and a100.hbm_gb == 80.0
    assert a100.sm_count == 108 and a100.l2_mb == 40.0
    assert cat.gpu("A100-SXM4-40GB").hbm_gbps == 1555.0
    assert cat.gpu("A100-PCIe-80GB").hbm_gbps == 1935.0
    # H100 SXM5: dense bf16 989.4 (whitepaper; "989" rounded), 3.35 TB/s, 132 SMs
    h100 = cat.gpu("H100-SXM")
    assert h100.peak_tflops["bf16"] == pytest.approx(989, abs=1)
    assert h100.peak_tflops["fp8"] == pytest.approx(1979, abs=1)
    assert h100.hbm_gbps == 3350.0 and h100.sm_count == 132
    assert cat.gpu("H100-PCIe").peak_tflops["bf16"] == 756.0
    # V100 SXM2: tensor fp16 125, 900 GB/s, no bf16/tf32
    v100 = cat.gpu("V100-SXM2-32GB")
    assert v100.peak_tflops["fp16"] == 125.0 and v100.hbm_gbps == 900.0
    assert "bf16" not in v100.peak_tflops and "tf32" not in v100.peak_tflops
    assert cat.gpu("V100-PCIe-16GB").peak_tflops["fp16"] == 112.0
    # H200 / B200 / AMD
    assert cat.gpu("H200").hbm_gbps == 4800.0 and cat.gpu("H200").hbm_gb == 141.0
    assert cat.gpu("B200").peak_tflops["bf16"] == 2250.0 and cat.gpu("B200").sm_count == 148
    mi250x, gcd = cat.gpu("MI250X"), cat.gpu("MI250X-GCD")
    assert mi250x.peak_tflops["fp16"] == 383.0 and mi250x.peak_tflops["fp64_tensor"] == 95.7
    for dtype, value in mi250x.peak_tflops.items():
        assert gcd.peak_tflops[dtype] == pytest.approx(value / 2)
    assert (gcd.hbm_gb, gcd.hbm_gbps, gcd.sm_count) == (64.0, 1600.0, 110)
    mi300x = cat.gpu("MI300X")
    assert mi300x.peak_tflops["bf16"] == 1307.4 and mi300x.peak_tflops["fp8"] == 2614.9
    assert mi300x.hbm_gb == 192.0 and mi300x.hbm_gbps == 5300.0
    assert cat.gpu("RTX-2080-Ti").sm_count == 68


def test_peak_flops(cat: Catalog) -> None:
    assert cat.peak_flops("A100", "bf16") == pytest.approx(312e12)
    assert cat.peak_flops(cat.gpu("H100"), "torch.bfloat16") == pytest.approx(989.4e12)
    assert cat.peak_flops("V100", "c10::Half") == pytest.approx(125e12)
    assert cat.gpu("A100").peak_flops("float32") == pytest.approx(19.5e12)
    with pytest.raises(ParameterError, match="no bf16 peak"):
        cat.peak_flops("V100", "bf16")
    with pytest.raises(ParameterError, match="unknown dtype"):
        cat.peak_flops("A100", "complex128")


def test_normalize_dtype() -> None:
    assert normalize_dtype("torch.float16") == "fp16"
    assert normalize_dtype("BFloat16") == "bf16"
    assert normalize_dtype("double") == "fp64"
    assert normalize_dtype("float8_e4m3fn") == "fp8"
    assert normalize_dtype("fp64_tensor") == "fp64_tensor"


def test_links(cat: Catalog) -> None:
    # per GPU, all links: NVLink3 = 12 x 25 GB/s per direction, 600 GB/s both ways
    assert cat.link("NVLink3").gbps_per_direction == 300.0
    assert cat.link("NVLink3").gbps_bidirectional == 600.0
    assert cat.link("NVLink2").gbps_bidirectional == 300.0
    assert cat.link("NVLink4").gbps_bidirectional == 900.0
    assert cat.link("NVLink5").gbps_bidirectional == 1800.0
    assert cat.link("PCIe4-x16").gbps_per_direction == pytest.approx(31.5)
    # network ports in Gb/s
    for name, gbit in (("IB-EDR", 100), ("IB-HDR", 200), ("IB-NDR", 400), ("IB-XDR", 800)):
        assert cat.link(name).gbit_s_per_direction == gbit
    assert cat.link("Slingshot-11").gbit_s_per_direction == 200
    assert cat.link("IB-HDR").latency_us == 0.6
    assert cat.link("IB-NDR").latency_us is None  # no source gives one: left out
    assert cat.link("InfinityFabric-MI250X").gbps_per_direction == 50.0


def test_nodes(cat: Catalog) -> None:
    dgx = cat.node("DGX-A100")
    assert dgx.gpus_per_node == 8 and dgx.gpu.name == "A100-SXM4-80GB"
    assert dgx.intra_gbps_per_gpu == 300.0
    assert dgx.inter_gbps_per_gpu == 25.0  # 8x HDR 200 Gb/s / 8 GPUs
    h = cat.node("DGX-H100")
    assert (h.intra_gbps_per_gpu, h.inter_gbps_per_gpu) == (450.0, 50.0)
    v = cat.node("DGX-1")
    assert v.intra_link.name == "NVLink2" and v.nics_per_node == 4
    assert v.inter_gbps_per_gpu == pytest.approx(6.25)
    f = cat.node("frontier")
    assert f.gpu.name == "MI250X-GCD" and f.gpus_per_node == 8
    assert f.inter_link.name == "Slingshot-11" and f.nics_per_node == 4
    assert f.inter_gbps_per_node == 100.0 and f.inter_gbps_per_gpu == 12.5
    assert f.intra_gbps_per_gpu == 50.0


# --------------------------------------------------------------------------- names


def test_aliases_and_case(cat: Catalog) -> None:
    assert cat.gpu("H100").name == "H100-SXM"
    assert cat.gpu("A100").name == "A100-SXM4-80GB"
    assert cat.gpu("a100 sxm4 80gb").name == "A100-SXM4-80GB"
    assert cat.gpu("v100").name == "V100-SXM2-32GB"
    assert cat.gpu("mi250x").name == "MI250X"  # the package; a rank sees MI250X-GCD
    assert cat.link("hdr").name == "IB-HDR"
    assert cat.link("nvlink 4.0").name == "NVLink4"
    assert cat.node("dgx a100").name == "DGX-A100"


def test_unknown_name_lists_close_matches(cat: Catalog) -> None:
    with pytest.raises(ParameterError) as err:
        cat.gpu("A100-SXM4-81GB")
    msg = str(err.value)
    assert "unknown GPU 'A100-SXM4-81GB'" in msg and "A100-SXM4-80GB" in msg
    assert "\n" not in msg
    with pytest.raises(ParameterError, match="NVLink3"):
        cat.link("NVLnk3")
    with pytest.raises(ParameterError, match="DGX-H100"):
        cat.node("DGX-H10")
    with pytest.raises(ParameterError, match="unknown GPU 'zzzz'; known: "):
        cat.gpu("zzzz")


# --------------------------------------------------------------------------- trace names


def _trace_device_names(traces: Path) -> dict[tuple[str, int | None], tuple[dict, str]]:
    """(deviceProperties name, numSms) of every shared trace, via traincast.load ->
    (the recorded properties, the first file naming it)."""
    import traincast

    found: dict[tuple[str, int | None], tuple[dict, str]] = {}
    files = [
        p
        for p in sorted(traces.rglob("*.json*"))
        if ".et." not in p.name and p.parent.name != "et" and p.name != "et.json.gz"
    ]
    for path in files:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ts = traincast.load(path)
        except TraincastError:
            continue
        for info in ts.ranks.values():
            for props in info.device_properties:
                sms = props.get("numSms")
                key = (str(props.get("name", "")), int(sms) if sms is not None else None)
                found.setdefault(key, (props, str(path.relative_to(traces))))
    return found


# (recorded name, numSms) -> the catalog entry it must match with the recorded properties
EXPECTED_TRACE_GPUS: dict[tuple[str, int | None], str | None] = {
    ("Tesla V100-SXM2-32GB", 80): "V100-SXM2-32GB",
    ("Tesla V100-SXM2-16GB", 80): "V100-SXM2-16GB",
    ("NVIDIA A100-SXM4-80GB", 108): "A100-SXM4-80GB",
    ("NVIDIA A100-PG509-200", 108): "A100-SXM4-40GB",  # numSms 108, 42.3e9 bytes
    ("NVIDIA GeForce RTX 2080 Ti", 68): "RTX-2080-Ti",
    ("NVIDIA B200", 148): "B200",
    ("NVIDIA H100 80GB HBM3", 132): "H100-SXM",
    ("AMD Instinct MI300X", 304): "MI300X",
    ("", 304): "MI300X",  # vLLM on ROCm records an empty name; 304 CUs and 192 GiB
    ("AMD Instinct MI210", 104): "MI210",
    # generic ROCm name: 104 CUs and 64 GiB are MI210 or one MI250 GCD, the same part for
    # every cost model; the first defined (MI250-GCD) is returned
    ("AMD Radeon Graphics", 104): "MI250-GCD",
    ("NVIDIA GeForce RTX 2080 Ti", None): "RTX-2080-Ti",  # nsys exports: names only
}


def test_match_device_on_every_shared_trace(cat: Catalog, traces: Path) -> None:
    names = _trace_device_names(traces)
    assert ("Tesla V100-SXM2-32GB", 80) in names and ("NVIDIA B200", 148) in names
    for key, (props, where) in names.items():
        assert key in EXPECTED_TRACE_GPUS, f"new device {key!r} in {where}"
        gpu = cat.match_recorded(props)
        expected = EXPECTED_TRACE_GPUS[key]
        assert (gpu.name if gpu else None) == expected, (key, where)
        if gpu is not None and props.get("numSms") is not None:
            assert gpu.sm_count in (None, int(props["numSms"])), (key, where)


def test_match_device_with_recorded_properties(cat: Catalog, traces: Path) -> None:
    path = traces / "hta" / "edge" / "amd_mi250_minitoy.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    with gzip.open(path, "rt") as fh:
        props = json.load(fh)["deviceProperties"][0]
    assert props["name"] == "AMD Radeon Graphics"
    gpu = cat.match_device(
        props["name"], num_sms=props["numSms"], memory_bytes=props["totalGlobalMem"]
    )
    assert gpu is not None and gpu.name == "MI250-GCD"
    # the recorded properties of the named NVIDIA traces agree with the catalog
    for rel, expected in (
        ("hta/a100_16rank_5streams/rank-0.json.gz", "A100-SXM4-80GB"),
        ("tracelens/b200_8rank_rank0.json.gz", "B200"),
        ("hta/v100_2rank_allreduce/rank-1.json.gz", "V100-SXM2-32GB"),
    ):
        p = traces / rel
        if not p.is_file():
            continue
        with gzip.open(p, "rt") as fh:
            dev = json.load(fh)["deviceProperties"][0]
        gpu = cat.match_device(dev["name"])
        assert gpu is not None and gpu.name == expected
        assert gpu.sm_count == dev["numSms"]
        hint = cat.match_device("", num_sms=dev["numSms"], memory_bytes=dev["totalGlobalMem"])
        assert hint is None or hint.name == expected  # properties never contradict the name


def test_match_device_names(cat: Catalog) -> None:
    cases = {
        "NVIDIA H100 80GB HBM3": "H100-SXM",
        "NVIDIA H100 PCIe": "H100-PCIe",
        "NVIDIA H100 NVL": None,
        "NVIDIA H200": "H200",
        "NVIDIA H200 NVL": None,
        "NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB": "A100-PCIe-40GB",
        "NVIDIA A100 80GB PCIe": "A100-PCIe-80GB",
        "Tesla V100-PCIE-16GB": "V100-PCIe-16GB",
        "AMD Instinct MI250X": "MI250X-GCD",
        "AMD Instinct MI250": "MI250-GCD",
        "AMD Instinct MI250X / MI250": None,  # ambiguous without numSms
        "AMD Instinct MI300X": "MI300X",
        "": None,
        "Some Other GPU": None,
    }
    for name, expected in cases.items():
        gpu = cat.match_device(name)
        assert (gpu.name if gpu else None) == expected, name
    assert cat.match_device("AMD Instinct MI250X / MI250", num_sms=110).name == "MI250X-GCD"
    # vendor mismatch or no unique candidate -> None
    assert cat.match_device("NVIDIA Mystery", num_sms=104) is None
    assert cat.match_device("Mystery", num_sms=108) is None  # four A100 variants


# --------------------------------------------------------------------------- CPU


def test_host_cpu() -> None:
    import os

    cpu = host_cpu()
    assert isinstance(cpu, CPU) and cpu.kind == "cpu"
    assert cpu.cores == (os.cpu_count() or 1)
    assert cpu.name and cpu.source.startswith("this machine")
    assert cpu.peak_tflops == {} and cpu.mem_gbps is None
    with pytest.raises(ParameterError, match="calibrates"):
        load_catalog().peak_flops(cpu, "fp32")


# --------------------------------------------------------------------------- user files


def test_user_file_adds_a_gpu(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[gpu.Test-GPU]
vendor = "nvidia"
patterns = ['Test GPU 9000']
aliases = ["tg9k"]
peak_tflops = { bf16 = 500.0, fp32 = 60.0 }
hbm_gbps = 3000.0
hbm_gb = 96.0
source = "Test GPU datasheet, doc DS-123"
[gpu.Test-GPU.sources]
"peak_tflops.bf16" = "measured with cuBLAS on 2025-01-01, run 42"

[node.Test-Node]
gpu = "tg9k"
gpus_per_node = 4
intra_link = "NVLink4"
inter_link = "IB-NDR"
nics_per_node = 2
source = "our cluster inventory, doc INV-7"
""",
    )
    cat = load_catalog(path)
    gpu = cat.gpu("TG9K")
    assert gpu.name == "Test-GPU" and gpu.peak_tflops == {"bf16": 500.0, "fp32": 60.0}
    assert gpu.source_of("peak_tflops.bf16").startswith("measured")
    assert gpu.source_of("hbm_gbps") == "Test GPU datasheet, doc DS-123"
    assert cat.match_device("NVIDIA Test GPU 9000") is gpu
    assert cat.match_device("NVIDIA A100-SXM4-80GB").name == "A100-SXM4-80GB"
    tie = _write(tmp_path, path.read_text().replace("Test GPU 9000", "A100-SXM4-80GB"), "tie.toml")
    assert load_catalog(tie).match_device("NVIDIA A100-SXM4-80GB").name == "Test-GPU"
    node = cat.node("test node")
    assert node.gpu is gpu and node.intra_links_per_gpu == 1
    assert node.inter_gbps_per_gpu == 25.0
    assert str(path) in cat.files
    # the packaged catalog is untouched
    assert "Test-GPU" not in load_catalog().gpus
    assert "A100-SXM4-80GB" in cat.gpus


def test_user_file_overrides_a_bandwidth(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[gpu.A100]                         # by alias
hbm_gbps = 1800.0
peak_tflops = { bf16 = 290.0 }
source = "measured STREAM triad on our A100s, report 2025-03"

[link.IB-HDR]
gbps_per_direction = 23.0
sources = { gbps_per_direction = "measured ib_write_bw, 2025-03" }
""",
    )
    cat = load_catalog(path)
    a100 = cat.gpu("A100-SXM4-80GB")
    assert a100.hbm_gbps == 1800.0
    assert a100.peak_tflops["bf16"] == 290.0
    assert a100.peak_tflops["fp16"] == 312.0  # other dtypes kept
    assert a100.hbm_gb == 80.0
    assert a100.source_of("hbm_gbps").startswith("measured STREAM")
    assert "datasheet" in a100.source_of("hbm_gb")
    assert "overridden" in a100.source
    hdr = cat.link("HDR")
    assert hdr.gbps_per_direction == 23.0 and hdr.latency_us == 0.6
    # nodes are rebuilt on the overridden entries
    assert cat.node("DGX-A100").gpu.hbm_gbps == 1800.0
    assert cat.node("DGX-A100").inter_gbps_per_gpu == 23.0
    assert load_catalog().gpu("A100").hbm_gbps == 2039.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[link.IB-HDR]\ngbps_per_direction = -25.0\nsource = "x"\n',
            "link 'IB-HDR': gbps_per_direction must be positive",
        ),
        (
            '[gpu.X]\nvendor = "amd"\npeak_tflops = { fp16 = 0.0 }\nhbm_gbps = 1.0\n'
            'hbm_gb = 1.0\nsource = "x"\n',
            "gpu 'X': peak_tflops.fp16 must be positive",
        ),
        (
            '[gpu.X]\nvendor = "amd"\npeak_tflops = { fp16 = 10.0 }\nhbm_gbps = 100.0\n'
            "hbm_gb = 1.0\n",
            "gpu 'X': peak_tflops.fp16 has no source",
        ),
        (
            "[gpu.A100]\nhbm_gbps = 1000.0\n",
            "gpu 'A100': hbm_gbps has no source",
        ),
        (
            '[gpu.X]\nvendor = "amd"\npeak_tflops = { fp16 = 10.0 }\nsource = "doc"\n',
            "gpu 'X': missing field 'hbm_gbps'",
        ),
        (
            '[gpu.X]\nvendor = "amd"\npeak_tflops = { fp61 = 10.0 }\nhbm_gbps = 1.0\n'
            'hbm_gb = 1.0\nsource = "doc"\n',
            "gpu 'X': unknown dtype 'fp61'",
        ),
        ('[gpu.A100]\nhbm_gbs = 1.0\nsource = "doc"\n', "gpu 'A100': unknown field 'hbm_gbs'"),
        ('[gpu.A100]\nhbm_gbps = "fast"\nsource = "doc"\n', "hbm_gbps must be a number"),
        ('[gpu.A100]\nhbm_gbps = 1.0\nsource = ""\n', "source must be a non-empty string"),
        (
            '[node.N]\ngpu = "A101"\ngpus_per_node = 8\nintra_link = "NVLink3"\n'
            'inter_link = "IB-HDR"\nnics_per_node = 8\nsource = "doc"\n',
            "node 'N': unknown GPU 'A101'",
        ),
        ("[gpus.A100]\nhbm_gbps = 1.0\n", "unknown section \\[gpus\\]"),
        ("[gpu.A100\nhbm_gbps = 1.0\n", "bad TOML"),
        ("[gpu.X]\nhbm_gbps = = 1\n", "bad TOML"),
    ],
)
def test_bad_user_file_names_file_and_entry(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text, name="bad-hw.toml")
    with pytest.raises(ParameterError, match=message) as err:
        load_catalog(path)
    msg = str(err.value)
    assert msg.startswith(str(path) + ": "), msg
    assert err.value.path == str(path)
    assert "\n" not in msg


def test_missing_user_file(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="not found") as err:
        load_catalog(tmp_path / "nope.toml")
    assert err.value.path == str(tmp_path / "nope.toml")


def test_packaged_file_ships_with_the_package() -> None:
    from importlib import resources

    data = resources.files("traincast.costs").joinpath("data", "hardware.toml")
    assert data.is_file()
    assert "[gpu.A100-SXM4-80GB]" in data.read_text(encoding="utf-8")


def test_match_device_from_properties_alone(cat: Catalog) -> None:
    # vLLM on ROCm records name "" with numSms = 304 and totalGlobalMem = 192 GiB
    gpu = cat.match_device("", num_sms=304, memory_bytes=206141652992)
    assert gpu is not None and gpu.name == "MI300X"
    assert cat.match_device("", num_sms=304) is None  # an empty name needs both properties
    assert cat.match_recorded({"name": "", "numSms": "304", "totalGlobalMem": 206141652992}).name \
        == "MI300X"
    assert cat.match_recorded({"name": "", "numSms": None, "totalGlobalMem": []}) is None
    # V100 SXM2 and PCIe share 80 SMs and 32 GB but not their peaks: ambiguous, no guess
    assert cat.match_device("", num_sms=80, memory_bytes=34079899648) is None
    # MI210 and one MI250 GCD are the same die at the same clocks: either is right
    gpu = cat.match_device("AMD Radeon Graphics", num_sms=104, memory_bytes=68702699520)
    assert gpu is not None and gpu.name == "MI250-GCD"
    assert cat.match_device("AMD Instinct MI210").name == "MI210"
    assert cat.match_first([{"name": "zzz"}, {"name": "NVIDIA H100 80GB HBM3"}]).name == "H100-SXM"
