"""Hostile input, second round: tracebacks that must be one line, and text that misleads.

Every CLI refusal is checked the same way (:func:`refused`): exit code 2, exactly one line on
stderr, which names the file or parameter at fault; through the API the error is a specific
:class:`traincast.errors.TraincastError` subclass. Time bounds are subprocess timeouts."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traincast.cli import main
from traincast.errors import IterationError


def refused(rc: int, err: str, *names: str) -> str:
    """Assert a clean refusal: exit 2, one stderr line, naming every one of ``names``."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("traincast: error: "), err
    assert err.startswith("traincast: error: "), repr(err)  # nothing before it, not even \n
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _cli(*args: str, timeout: float = 120, env: dict | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess:
    """The CLI in its own process, bounded in time (a hang fails with TimeoutExpired)."""
    return subprocess.run([sys.executable, "-m", "traincast.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})},
                          cwd=cwd)


def _real_events(traces: Path, rank: int = 0) -> dict:
    return json.loads(gzip.decompress(
        (traces / "dlrm_8xv100" / "kineto" / f"rank-{rank}.pt.trace.json.gz").read_bytes()))


# ----------------------------------------------------------- tracebacks instead of one line


@pytest.fixture(scope="module")
def huge_step(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real DLRM ranks; rank 1's first step marker reads ``ProfilerStep#9999...9`` (23
    digits, beyond every integer type)."""
    out = tmp_path_factory.mktemp("huge-step")
    for rank in (0, 1):
        doc = _real_events(traces, rank)
        if rank == 1:
            step = next(e for e in doc["traceEvents"]
                        if str(e.get("name", "")).startswith("ProfilerStep#"))
            step["name"] = "ProfilerStep#" + "9" * 23
        (out / f"rank-{rank}.json").write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("per_rank", [False, True], ids=["one-file", "per-rank"])
def test_huge_step_number_one_line(huge_step: Path, per_rank: bool, capsys) -> None:
    target = huge_step if per_rank else huge_step / "rank-1.json"
    rc = main(["analyze", str(target), *(["--per-rank"] if per_rank else [])])
    refused(rc, capsys.readouterr().err, str(huge_step / "rank-1.json"), "step number")


def test_huge_step_number_api(huge_step: Path) -> None:
    import traincast

    with pytest.raises(IterationError, match="rank-1.json"):
        traincast.load(huge_step / "rank-1.json")
