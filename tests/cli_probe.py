"""Helpers of the hostile-input tests: the CLI in its own bounded process, and the check of a
clean refusal (exit 2, one stderr line naming what is at fault)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any


def refused(rc: int, err: str, *names: str) -> str:
    """Assert a clean refusal: exit 2, one stderr line, naming every one of ``names``."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("traincast: error: "), err
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def cli(*args: str, timeout: float = 120, env: dict | None = None, **kw: Any
        ) -> subprocess.CompletedProcess:
    """The CLI in its own process, bounded in time (a hang fails with TimeoutExpired)."""
    return subprocess.run([sys.executable, "-m", "traincast.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})}, **kw)
