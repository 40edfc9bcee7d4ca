"""Rank-local analyses one trace file at a time (serial, local processes, Ray) equal the
whole-job analyses; bad requests fail with traincast's own errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pandas as pd
import pytest
from isolated import run_isolated

import traincast
from traincast.analysis.per_rank import RANK_LOCAL, analyze_per_rank
from traincast.cli import main
from traincast.errors import ParameterError, RankError


def _assert_same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert list(a) == list(b)
    for key in a:
        assert len(a[key]) > 0, key
        pd.testing.assert_frame_equal(a[key], b[key], check_categorical=False, obj=key)


@pytest.mark.parametrize("name", ["dlrm_8xv100/kineto", "hta/a100_16rank_5streams"])
def test_per_rank_tables_equal_whole_job_tables(traces: Path, name: str) -> None:
    d = traces / name
    whole = traincast.analyze(traincast.load(d), list(RANK_LOCAL))
    _assert_same(whole, analyze_per_rank(d))
    assert set(whole["breakdown"]["rank"]) == set(traincast.load(d).rank_ids)


def test_per_rank_in_worker_processes(traces: Path) -> None:
    d = traces / "dlrm_8xv100" / "kineto"
    done: list[int] = []
    got = analyze_per_rank(d, "kernels", executor="process", workers=2,
                           progress=lambda n, total: done.append(n))
    _assert_same(traincast.analyze(traincast.load(d), "kernels"), got)
    assert done[-1] == 8


def test_ingestion_and_per_rank_analyses_on_a_local_ray_instance(traces: Path) -> None:
    pytest.importorskip("ray")
    run_isolated(__file__, "ray_ingestion_checks", str(traces))


def ray_ingestion_checks(traces: str) -> None:
    """Ingestion and per-rank analyses on a real local Ray instance (in a child process:
    :mod:`isolated`)."""
    from traincast.util.executor import shutdown

    traces = Path(traces)
    d = traces / "dlrm_8xv100" / "kineto"
    try:
        on_ray = traincast.load(d, executor="ray", workers=2, cache=False)
        per_rank = analyze_per_rank(d, executor="ray", workers=2)
    finally:
        shutdown()
    local = traincast.load(d, cache=False)
    assert on_ray.events.equals(local.events)
    # member lists travel from Ray workers as plain lists and are shared again here
    assert on_ray.collectives.to_pylist() == local.collectives.to_pylist()
    assert on_ray.member_lists.equals(local.member_lists)
    assert local.group_ranks() == [tuple(range(8))] * local.collectives.num_rows
    _assert_same(traincast.analyze(local, list(RANK_LOCAL)), per_rank)


def test_per_rank_refuses_cross_rank_analyses_and_repeated_ranks(traces: Path,
                                                                  tmp_path: Path) -> None:
    d = traces / "dlrm_8xv100" / "kineto"
    with pytest.raises(ParameterError, match="not idle, critical_path"):
        analyze_per_rank(d, "breakdown,idle,critical_path")
    src = sorted(d.iterdir())[0]
    shutil.copy(src, tmp_path / src.name)
    shutil.copy(src, tmp_path / ("copy-" + src.name))
    with pytest.raises(RankError, match="appears twice"):
        analyze_per_rank(tmp_path)


def test_cli_per_rank(traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = traces / "dlrm_8xv100" / "kineto"
    out = tmp_path / "per_rank.json"
    assert main(["analyze", str(d), "--per-rank", "--what", "breakdown", "--format", "json",
                 "--out", str(out)]) == 0
    rows = orjson.loads(out.read_bytes())["breakdown"]
    whole = traincast.analyze(traincast.load(d), "breakdown")["breakdown"]
    assert [r["idle_ns"] for r in rows] == whole["idle_ns"].tolist()
    capsys.readouterr()
    assert main(["analyze", str(d), "--per-rank", "--what", "stragglers"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("traincast: error:") and "rank-local" in err and "\n" not in err
    assert main(["predict", str(d), "--address", "127.0.0.1:1"]) == 2
    assert "--executor ray" in capsys.readouterr().err


def test_cli_chooses_per_rank_for_large_rank_local_requests(
        traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import traincast.analysis.per_rank as per_rank_mod
    import traincast.trace.load as load_mod

    d = traces / "dlrm_8xv100" / "kineto"
    calls: list[tuple] = []
    real = per_rank_mod.analyze_per_rank

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(per_rank_mod, "analyze_per_rank", spy)
    out = tmp_path / "t.json"
    args = ["analyze", str(d), "--what", "kernels", "--format", "json", "--out", str(out)]
    assert main(args) == 0 and not calls  # 0.4 MiB of traces: the whole job
    monkeypatch.setattr(load_mod, "PARALLEL_MIN_BYTES", 1)
    assert main(args) == 0 and len(calls) == 1  # "large": per rank, same tables
    assert main([*args, "--whole-job"]) == 0 and len(calls) == 1
    assert main(["analyze", str(d), "--what", "kernels,idle", "--format", "json", "--out",
                 str(out)]) == 0 and len(calls) == 1  # idle needs the whole job
