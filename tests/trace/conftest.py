"""Fixtures of the trace tests: a fresh execution trace + Kineto trace pair from the local torch,
a few ranks of the shared DLRM 8xV100 set copied to a writable folder, and the files this
process hashes for the cache."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import traincast.trace.cache as C

#: records 3 steps of a small MLP; the ET observer and Kineto (one active step) both attached,
#: so the ET is schema 1.1.x and the Kineto events carry ``Record function id``
_RECORD = textwrap.dedent(
    """
    import sys, torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule
    out = sys.argv[1]
    et = ExecutionTraceObserver().register_callback(out + "/et.json")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 execution_trace_observer=et,
                 schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(out + "/kineto.json")) as p:
        for _ in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            p.step()
    """
)


@pytest.fixture(scope="session")
def torch_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``et.json`` and ``kineto.json`` of one run; skips without torch."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    out = tmp_path_factory.mktemp("torch_et")
    subprocess.run(
        [sys.executable, "-c", _RECORD, str(out)], check=True, capture_output=True, timeout=300
    )
    if not (out / "et.json").exists() or not (out / "kineto.json").exists():
        pytest.skip("this torch build wrote no execution trace")
    return out


def _dlrm_ranks(traces: Path, folder: Path, n: int) -> Path:
    folder.mkdir()
    for r in range(n):
        shutil.copy(traces / "dlrm_8xv100" / "kineto" / f"rank-{r}.pt.trace.json.gz", folder)
    return folder


@pytest.fixture
def dlrm2(traces: Path, tmp_path: Path) -> Path:
    """Ranks 0-1 of the DLRM 8xV100 set, copied to a writable folder."""
    return _dlrm_ranks(traces, tmp_path / "run", 2)


@pytest.fixture
def dlrm3(traces: Path, tmp_path: Path) -> Path:
    """Ranks 0-2 of the DLRM 8xV100 set, copied to a writable folder."""
    return _dlrm_ranks(traces, tmp_path / "dlrm3", 3)


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the files whose bytes :func:`~traincast.trace.cache.file_key` hashes in this
    process (a parse worker's hashes are not seen)."""
    seen: list[str] = []
    real = C.file_key
    monkeypatch.setattr(C, "file_key", lambda p: seen.append(Path(p).name) or real(p))
    return seen
