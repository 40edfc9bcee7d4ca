"""Shared fixtures: the real traces of ../shared/data and one recorded demo run per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The experiment harnesses (benchmarks/harness/: random models, DDP and sharded-DLRM ground
# truth, vTrain cases, the planner-calibration fit) are not part of the package; tests import
# them as ``harness.<module>``, as the benchmark scripts do, with benchmarks/ on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

#: ``/work/shared/data`` next to the repository (never copied into the project).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The parse cache of this test session lives in a temporary folder, never in the user's
    ~/.cache (tests that test the cache set their own folder)."""
    import os

    os.environ["TRAINCAST_CACHE_DIR"] = str(tmp_path_factory.mktemp("traincast-cache"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not available at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def traces(shared_data: Path) -> Path:
    """``../shared/data/traces`` (see its SOURCES.md); skips when absent."""
    path = shared_data / "traces"
    if not path.is_dir():
        pytest.skip(f"shared traces not available at {path}")
    return path


@pytest.fixture(scope="session")
def demo_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-rank DDP/gloo CPU run (1 warm-up + 3 profiled steps), recorded once.

    The folder holds ``rank-{0,1}.pt.trace.json.gz`` and ``rank-{0,1}.et.json.gz``.
    """
    pytest.importorskip("torch", reason="torch is needed to record the demo run")
    from traincast.record import record_demo

    return record_demo(tmp_path_factory.mktemp("demo"), warmup=1, active=3)


@pytest.fixture
def small_jobs_in_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loads and ``traincast.trace.prestart`` parse even a few small files in a worker pool
    (as they do a large job), from this guarded test process; the pool shut down first."""
    from traincast.trace import load as load_mod  # the package, only for tests that ask
    from traincast.trace import prestart as prestart_mod
    from traincast.util.executor import shutdown

    monkeypatch.delenv("TRAINCAST_COMPILED_MIN_BYTES", raising=False)
    for mod in (load_mod, prestart_mod):
        monkeypatch.setattr(mod, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(load_mod, "JOB_ONLY_MIN_FILES", 2)
    monkeypatch.setattr(load_mod, "_main_is_guarded", lambda: True)
    monkeypatch.setattr(prestart_mod, "main_is_guarded", lambda: True)
    shutdown()
