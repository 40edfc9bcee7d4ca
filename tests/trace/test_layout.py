"""Traces found where they lie: one level down, execution traces linked from beside them."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

import traincast
from traincast.errors import EmptyTraceDirError, TraincastWarning
from traincast.trace.layout import find_layout


def test_run_folder_reads_kineto_and_links_et(traces: Path) -> None:
    run = traces / "dlrm_8xv100"
    path, et, note = find_layout(run)
    assert path == run / "kineto" and et == run / "et"
    assert "one level down" in note and str(run / "et") in note
    with pytest.warns(TraincastWarning, match="one level down"):
        ts = traincast.load(run)
    assert len(ts.ranks) == 8 and ts.et_links is not None


def test_kineto_folder_links_its_sibling_ets(traces: Path) -> None:
    k = traces / "dlrm_8xv100" / "kineto"
    path, et, note = find_layout(k)
    assert path == k and et == traces / "dlrm_8xv100" / "et" and "sibling" in note


def test_folder_with_traces_and_no_et_sibling_unchanged(traces: Path) -> None:
    d = traces / "hta" / "a100_2rank_nccl"
    assert find_layout(d) == (d, None, None)
    f = d / "rank-0.json.gz"
    assert find_layout(f) == (f, None, None)


def test_explicit_et_dir_is_not_second_guessed(traces: Path) -> None:
    k = traces / "dlrm_8xv100" / "kineto"
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraincastWarning)
        ts = traincast.load(k, et_dir=traces / "dlrm_8xv100" / "et")
    assert ts.et_links is not None


def test_single_unconventional_subfolder_chosen(traces: Path, tmp_path: Path) -> None:
    sub = tmp_path / "run" / "my_traces"
    sub.mkdir(parents=True)
    shutil.copy(traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz", sub)
    path, et, note = find_layout(tmp_path / "run")
    assert path == sub and et is None and "one level down" in note


def test_several_subfolders_refused_with_their_names(traces: Path, tmp_path: Path) -> None:
    for name in ("a", "b"):
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        shutil.copy(traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz", d)
    with pytest.raises(EmptyTraceDirError, match="sub-folders a, b hold traces: name one"):
        find_layout(tmp_path / "runs")


def test_cli_says_which_folder_it_read(traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from traincast.cli import main

    assert main(["predict", str(traces / "dlrm_8xv100"), "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert "read " + str(traces / "dlrm_8xv100" / "kineto") + " (one level down)" in err
