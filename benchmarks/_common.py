"""Helpers shared by the benchmark scripts (run as ``python benchmarks/<script>.py``)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

#: the repository the benchmarks run from
REPO = Path(__file__).resolve().parents[1]


def git_state() -> str:
    """``<commit>[+dirty]`` of the repository the benchmark runs from, or ``unknown``."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no", "--", "traincast"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def hta_available(python: str) -> tuple[bool, str]:
    """Whether ``python`` can import HTA, and a line saying which version or why not."""
    import shutil

    if not Path(python).exists() and shutil.which(python) is None:
        return False, f"interpreter {python} not found"
    code = ("import importlib.metadata as m; import hta.trace_analysis; "
            "print(m.version('HolisticTraceAnalysis'))")
    try:
        cp = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    if cp.returncode != 0:
        return False, (cp.stderr.strip().splitlines() or ["import failed"])[-1]
    return True, cp.stdout.strip().splitlines()[-1]


#: how to give HTA its own venv (the benchmarks run it there, never beside traincast)
HTA_INSTALL = ("python3 -m venv /work/venvs/hta && "
               "/work/venvs/hta/bin/pip install HolisticTraceAnalysis==0.5.0 psutil")


def check_hta(python: str, console: object, notes: list[str], fallback: str) -> str | None:
    """HTA's version when ``python`` imports it (printed on ``console``), else None with a
    yellow line (also appended to ``notes``) saying why, that ``fallback`` runs instead, and
    how to install it."""
    ok, msg = hta_available(python)
    if ok:
        console.print(f"HTA {msg} found in {python}")  # type: ignore[attr-defined]
        return msg
    line = f"HTA unavailable with {python} ({msg}); {fallback}. Install it in its own venv: " \
        f"{HTA_INSTALL}"
    console.print(f"[yellow]{line}[/yellow]")  # type: ignore[attr-defined]
    notes.append(line)
    return None


def machine() -> dict[str, object]:
    """CPUs, memory (GiB, from /proc/meminfo), platform, Python and niceness of this run."""
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "mem_gib": mem_gib, "platform": platform.platform(),
            "python": sys.version.split()[0], "nice": os.nice(0)}
