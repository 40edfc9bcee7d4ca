"""spawn_group: a rank killed by a signal (gloo's abort on a failed loopback connection) is
retried once on a fresh port; a rank's Python error is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from traincast.record.local_group import spawn_group  # noqa: E402


def abort_first_time(rank: int, port: int, marker: str) -> None:
    """Rank 0 aborts (SIGABRT) unless the marker exists; writes the port it got."""
    m = Path(marker)
    if rank == 0 and not m.exists():
        m.write_text(str(port))
        os.abort()
    Path(f"{marker}.{rank}.ok").write_text(str(port))


def raise_error(rank: int, port: int, marker: str) -> None:
    Path(f"{marker}.{rank}.tries").open("a").write("x")
    raise ValueError("a bug, not a flake")


def test_signal_death_is_retried_on_a_new_port(tmp_path: Path) -> None:
    marker = str(tmp_path / "m")
    spawn_group(abort_first_time, lambda port: (port, marker), 2)
    first = int(Path(marker).read_text())
    assert Path(f"{marker}.0.ok").exists() and Path(f"{marker}.1.ok").exists()
    assert int(Path(f"{marker}.0.ok").read_text()) > 0 and first > 0


def test_python_error_is_not_retried(tmp_path: Path) -> None:
    from torch.multiprocessing import ProcessRaisedException

    marker = str(tmp_path / "e")
    with pytest.raises(ProcessRaisedException, match="a bug, not a flake"):
        spawn_group(raise_error, lambda port: (port, marker), 1)
    assert Path(f"{marker}.0.tries").read_text() == "x"
