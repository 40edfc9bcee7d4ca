"""`traincast analyze` and `traincast predict` start a large uncached job's parse workers
before their imports (traincast.trace.prestart), and the load takes them: the output is the
one without a cache, and a warm run starts nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from traincast.cli import main
from traincast.trace import cache as C
from traincast.trace import load as load_mod
from traincast.trace import parse_server
from traincast.trace import prestart as prestart_mod
from traincast.util.executor import local_pool_running
from traincast.util.executor import shutdown as shutdown_executor


@pytest.fixture
def job(traces: Path, tmp_path: Path, small_jobs_in_pool: None) -> Path:
    """Three DLRM ranks (no execution traces beside), parsed in a pool however small."""
    d = tmp_path / "job"
    d.mkdir()
    for r in range(3):
        shutil.copy(traces / "dlrm_8xv100" / "kineto" / f"rank-{r}.pt.trace.json.gz", d)
    shutdown_executor()
    yield d
    while parse_server._EARLY:
        parse_server._EARLY.pop()[1].cancel()
    shutdown_executor()


def test_commands_start_the_parse_ahead(job: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    held: list[object] = []
    taken: list[object] = []
    real_hold, real_take = parse_server.hold_early, load_mod.take_early
    monkeypatch.setattr(prestart_mod, "hold_early",
                        lambda files, w: (held.append(w), real_hold(files, w)))
    monkeypatch.setattr(load_mod, "take_early",
                        lambda files, workers: taken.append(real_take(files, workers))
                        or taken[-1])

    def run(*argv: str) -> str:
        assert main(list(argv)) == 0
        return capsys.readouterr().out

    monkeypatch.setenv("TRAINCAST_CACHE_DIR", "off")
    plain = run("analyze", str(job), "--format", "json")
    assert held == []  # no cache: the load would start its workers late, so they are
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache"))
    assert run("analyze", str(job), "--format", "json") == plain
    assert len(held) == 1 and taken[-1] is held[0] and not local_pool_running()
    C.wait_for_writes()
    assert run("analyze", str(job), "--format", "json") == plain  # warm: nothing started
    assert len(held) == 1 and taken[-1] is None
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache2"))
    run("predict", str(job), "--format", "json")
    assert len(held) == 2 and taken[-1] is held[1] and not local_pool_running()
    C.wait_for_writes()


def test_a_command_failing_before_its_load_stops_the_workers(
        job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    held: list[parse_server.Warmer] = []
    real_hold = parse_server.hold_early
    monkeypatch.setattr(prestart_mod, "hold_early",
                        lambda files, w: (held.append(w), real_hold(files, w)))
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "cache"))
    out = job / "rank-0.pt.trace.json.gz"  # an input: refused after the workers started
    assert main(["analyze", str(job), "--format", "json", "--out", str(out)]) == 2
    assert "error" in capsys.readouterr().err
    assert len(held) == 1 and not parse_server._EARLY
    held[0].done()
    assert not local_pool_running()
