"""``traincast predict --what-if``: refusals (exit 2, one line) and the notes of a what-if that
leaves the step unchanged, on the real DLRM 8xV100 and A100 traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traincast.cli import main


@pytest.fixture(scope="module")
def a100_dir(traces: Path) -> Path:
    return traces / "hta" / "a100_2rank_nccl"


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("what", "expect"), [
    ("speedup=ncclKernal.*=1.5", "closest names: ncclKernel_"),
    ("ranks_per_node=4", "ranks_per_node has no effect alone"),
    ("node=DGX-9", "unknown node preset"),
])
def test_refused_what_ifs_exit_2_with_one_line(a100_dir: Path, what: str, expect: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(a100_dir), "--what-if", what]) == 2
    line = _error_line(capsys)
    assert line.startswith("traincast: error:") and expect in line


def test_unchanged_dlrm_gpu_says_why_in_table_and_json(traces: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    dlrm = traces / "dlrm_8xv100" / "kineto"
    assert main(["predict", str(dlrm), "--what-if", "gpu=H100", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    notes = "\n".join(doc["notes"])
    assert "the step is unchanged" in notes and "the GPU is off the critical path" in notes
    assert "changes the GPU alone; kept: host CPU" in notes
    assert main(["predict", str(dlrm), "--what-if", "comm_algorithm=tree"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    assert "comm_algorithm=tree does not apply to all_to_all (x40)" in out
    assert "the step is unchanged" in out and "critical path of rank" in out


def test_help_documents_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "node=NAME" in out and "DGX-A100" in out and "changes the GPU alone" in out


def test_a_catastrophic_regex_matching_nothing_is_refused_at_once(
        a100_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RE2 (linear time) over every name, then difflib over the distinct names: ``(a+)+$``
    that matches no event is refused, not stuck."""
    assert main(["predict", str(a100_dir), "--what-if", "speedup=(zq+)+$=2"]) == 2
    assert "the regex matches no event" in _error_line(capsys)
