"""The wheel: built from a copy of the sources, installed into a fresh virtual environment
(``--system-site-packages``: the dependencies are already there; ``--no-deps --no-index``:
nothing is fetched), it runs ``traincast --version`` and ``traincast demo`` from a folder
outside the repository, importing traincast from the venv, never from the checkout.

The wheel is built with ``python -m build --wheel --no-isolation`` when ``build`` is
installed, else with ``pip wheel --no-deps --no-build-isolation`` (no network either way).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "traincast"


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 180
         ) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert res.returncode == 0, f"{argv} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


def _clean_env(tmp: Path) -> dict[str, str]:
    """The environment without the checkout on PYTHONPATH, a private parse cache."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSAFEPATH")}
    env["TRAINCAST_CACHE_DIR"] = str(tmp / "cache")
    env["COLUMNS"] = "120"
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of pyproject.toml, README.md and traincast/ (a build
    inside the checkout would reuse a stale build/ folder)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(PACKAGE, src / "traincast",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp / "dist"
    env = _clean_env(tmp)
    if importlib.util.find_spec("build") is not None:
        argv = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                str(out), str(src)]
    else:
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--no-index", "--wheel-dir", str(out), str(src)]
    _run(argv, cwd=tmp, env=env)
    wheels = sorted(out.glob("traincast-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_holds_every_package_file(wheel: Path) -> None:
    """Every file under traincast/ (modules, the hardware catalog, the profiler-overhead
    table, the planner's calibration, any file injected into child processes) is in the
    wheel, and nothing from outside the package."""
    names = set(zipfile.ZipFile(wheel).namelist())
    files = {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    missing = sorted(files - names)
    assert not missing, f"not in the wheel: {missing}"
    for data in ("traincast/costs/data/hardware.toml",
                 "traincast/costs/data/profiler_overhead.toml",
                 "traincast/plan/data/calibration.json"):
        assert data in names
    outside = sorted(n for n in names if not n.startswith(("traincast/", "traincast-")))
    assert not outside, outside


def test_wheel_installs_and_runs_demo(wheel: Path, tmp_path: Path) -> None:
    """A fresh venv, the wheel installed, ``traincast --version`` and ``traincast demo`` run
    from a folder outside the repository."""
    env = _clean_env(tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
         cwd=tmp_path, env=env)
    py = venv / "bin" / "python"
    # the host pip installs into the venv (--python): no pip bootstrap in the venv;
    # --ignore-installed: a traincast installed beside the dependencies is left alone
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
          "--no-index", "--ignore-installed", "--quiet", str(wheel)], cwd=tmp_path, env=env)
    work = tmp_path / "elsewhere"
    work.mkdir()

    where = _run([str(py), "-c", "import traincast; print(traincast.__file__)"],
                 cwd=work, env=env).stdout.strip()
    installed = Path(where).resolve()
    assert installed.is_relative_to(venv.resolve()), installed
    assert not installed.is_relative_to(ROOT), installed

    exe = venv / "bin" / "traincast"
    assert exe.is_file()
    version = _run([str(exe), "--version"], cwd=work, env=env).stdout
    from traincast.version import __version__
    assert __version__ in version

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch (the record extra) is needed to run the demo")
    out = tmp_path / "demo"
    res = _run([str(exe), "demo", "--out", str(out), "--steps", "2", "--warmup", "1",
                "--model", "mlp"], cwd=work, env=env, timeout=300)
    text = res.stdout
    assert "measured vs replayed step time" in text, text
    assert "MAPE" in text, text
    assert sorted(p.name for p in out.glob("rank-*.pt.trace.json.gz")) == [
        "rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"]
    # nothing the demo read came from the checkout
    assert str(ROOT) not in res.stderr, res.stderr
