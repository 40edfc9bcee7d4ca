"""`traincast analyze` with the analyses beside the replay on a second thread writes what it
writes on one (``TRAINCAST_SERIAL=1``): the verdict and every table (real 8-rank DLRM traces,
the size threshold lowered to use the thread)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traincast.analysis as A
from traincast.cli import main


def test_verdict_and_tables_serial_and_threaded(traces: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    d = traces / "dlrm_8xv100" / "kineto"
    monkeypatch.setattr(A, "THREAD_MIN_EVENTS", 0)
    monkeypatch.setattr("traincast.util.beside._cpus", lambda: 2)
    started = []

    class Counted(A.Beside):  # type: ignore[name-defined]
        def __enter__(self) -> A.Beside:  # type: ignore[name-defined]
            started.append(1)
            return super().__enter__()

    monkeypatch.setattr(A, "Beside", Counted)
    outs = []
    for serial in ("1", ""):
        monkeypatch.setenv("TRAINCAST_SERIAL", serial)
        js = tmp_path / f"a{serial}.json"
        assert main(["analyze", str(d)]) == 0
        assert main(["analyze", str(d), "--format", "json", "--out", str(js)]) == 0
        out, err = capsys.readouterr()
        outs.append((out, err, js.read_bytes()))
    assert len(started) == 2  # the threaded runs only
    assert outs[0] == outs[1]
    assert "opportunities" in outs[0][2].decode()
