"""Every command's default output at 80 and 120 columns on the shared traces: no line wider
than the screen, no number cut (rich's ellipsis beside a digit, or a number folded across
lines in a table), table rows told apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from traincast.cli.app import app
from traincast.report.wrap import distinct_labels, fold_name, wrap_command, wrap_prose

REPO = Path(__file__).resolve().parents[2]

#: (label, argv with {T} for the shared traces folder and {R} for the repository)
COMMANDS = [
    ("analyze verdict", ["analyze", "{T}/dlrm_8xv100/kineto"]),
    ("analyze all", ["analyze", "{T}/dlrm_8xv100/kineto", "--all"]),
    ("analyze 2rank", ["analyze", "{T}/hta/a100_2rank_nccl", "--all"]),
    ("predict", ["predict", "{T}/dlrm_8xv100/kineto"]),
    ("predict what-if", ["predict", "{T}/hta/a100_2rank_nccl", "--what-if", "overlap=ideal"]),
    ("diff", ["diff", "{T}/hta/trace_diff/control.json.gz", "{T}/hta/trace_diff/test.json.gz"]),
    ("diff op_family", ["diff", "{T}/hta/trace_diff/control.json.gz",
                        "{T}/hta/trace_diff/test.json.gz", "--by", "op_family"]),
    ("plan dlrm search", ["plan", "dlrm", "--config", "{R}/examples/dlrm.yaml", "--gpus", "8",
                          "--node", "DGX-A100", "--batch", "65536", "--search"]),
    ("plan transformer", ["plan", "transformer", "--config", "{R}/examples/gpt.yaml"]),
    ("calibrate comm", ["calibrate", "comm",
                        "{R}/tests/costs/data/all_gather_perf_2gpu_bf16.log"]),
    ("convert", ["convert", "{T}/hta/a100_2rank_nccl", "--to", "chakra", "--out", "{O}/et/run"]),
    ("cache info", ["cache", "info"]),
    ("version", ["version"]),
    ("help", ["--help"]),
    ("analyze help", ["analyze", "--help"]),
    ("predict help", ["predict", "--help"]),
    ("plan dlrm help", ["plan", "dlrm", "--help"]),
    ("record help", ["record", "--help"]),
]

#: rich's truncation mark touching a digit: a number was cut
_CUT = re.compile(r"\d…|…\d")


@pytest.fixture(scope="module")
def outputs(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    cache = tmp_path_factory.mktemp("cache")
    runner = CliRunner()
    out = {}
    for width in (80, 120):
        for label, argv in COMMANDS:
            args = [a.replace("{T}", str(traces)).replace("{R}", str(REPO))
                    .replace("{O}", str(cache / f"out{width}")) for a in argv]
            res = runner.invoke(app, args, env={"COLUMNS": str(width),
                                                "TRAINCAST_CACHE_DIR": str(cache)})
            out[(label, width)] = res
    return out


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("label", [c[0] for c in COMMANDS])
def test_fits_the_screen(outputs: dict, label: str, width: int) -> None:
    res = outputs[(label, width)]
    assert res.exit_code == 0, res.output[-2000:]
    text = res.output
    assert text.strip()
    for line in text.splitlines():
        assert cell_len(line) <= width, f"{cell_len(line)} > {width}: {line!r}"
        assert not _CUT.search(line), f"number cut: {line!r}"


def test_verdict_lines_wrapped_and_command_pasteable(outputs: dict) -> None:
    text = outputs[("analyze verdict", 80)].output
    cmd_lines = [ln for ln in text.splitlines() if ln.strip().startswith("$ traincast")]
    assert cmd_lines
    # each printed command is one shell command: continuation lines end with a backslash
    # and are indented under it; joined, they parse as the command (path and --what-if)
    import shlex

    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if not ln.strip().startswith("$ traincast"):
            continue
        parts = [ln.strip().removeprefix("$ ")]
        while parts[-1].endswith("\\"):
            i += 1
            assert lines[i].startswith("        "), lines[i]
            parts[-1] = parts[-1].removesuffix("\\").rstrip()
            parts.append(lines[i].strip())
        args = shlex.split(" ".join(parts))
        assert args[:2] == ["traincast", "predict"] and "--what-if" in args, args


def test_top_kernels_rows_distinct(outputs: dict) -> None:
    text = outputs[("analyze all", 120)].output
    block = text.split("top_kernels", 1)[1].split("collectives", 1)[0]
    names: list[str] = []
    for ln in block.splitlines()[3:]:
        if not re.match(r"^  \S", ln):
            continue
        cell = ln[2:].split("  ")[0].strip()
        if re.search(r"\d\s*$", ln):  # a row's first line ends with its share
            names.append(cell)
        elif names:  # the name folded onto the next line
            names[-1] += cell
    assert len(names) >= 10
    assert len(set(names)) == len(names), names


def test_diff_by_family_rows_distinct(outputs: dict) -> None:
    text = outputs[("diff op_family", 120)].output
    names = [ln.split("  ")[1].strip() for ln in text.splitlines()
             if re.match(r"^  [a-z]", ln) and "→" in ln]
    assert len(names) >= 10
    assert len(set(names)) == len(names), names


def test_wrap_prose_never_breaks_a_word() -> None:
    text = "it waited 11.234 ms at all_to_all (group 0) " * 5
    for w in (20, 37, 80):
        lines = wrap_prose(text, w)
        assert " ".join(" ".join(lines).split()) == " ".join(text.split())
        assert all(len(ln) <= w for ln in lines)


def test_wrap_command_is_one_shell_command() -> None:
    import shlex

    cmd = shlex.join(["traincast", "predict", "/some dir/with space", "--what-if",
                      "speedup=rank:1:family:elementwise=1.351", "--what-if", "overlap=ideal"])
    lines = wrap_command(cmd, 40, indent="    ")
    assert len(lines) > 1 and all(ln.endswith(" \\") for ln in lines[:-1])
    joined = " ".join(ln.strip().removesuffix("\\").strip() for ln in lines)
    assert shlex.split(joined.removeprefix("$ ")) == shlex.split(cmd)


def test_fold_name_at_joints() -> None:
    assert fold_name("vectorized_elementwise_kernel", 15) == ["vectorized_", "elementwise_", "kernel"]
    assert fold_name("DeviceScanKernel", 12) == ["DeviceScan", "Kernel"]
    assert "".join(fold_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 15)) == \
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"


def test_distinct_labels_tell_template_kernels_apart() -> None:
    full = ["void at::native::vectorized_elementwise_kernel<4, at::native::sqrt_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#2}>(int)",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, "
            "at::detail::Array<char*, 1> >(int)",
            "volta_sgemm_128x32_nt", "volta_sgemm_128x32_nt"]
    short = ["at::native::vectorized_elementwise_kernel"] * 2 + ["volta_sgemm_128x32_nt"] * 2
    labels = distinct_labels(full, short)
    assert labels[0] == "vectorized_elementwise_kernel<sqrt_kernel_cuda>"
    assert labels[1] == "vectorized_elementwise_kernel<FillFunctor>"
    assert labels[2] == labels[3] == "volta_sgemm_128x32_nt"
