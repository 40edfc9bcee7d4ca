"""Run a test body in a child Python process: for tests that start a local Ray instance.

Ray's core worker ends its process with ``_exit(1)`` when it loses its local raylet, from a
background thread: inside pytest that ends the whole suite mid-run, without a summary (a CI
run died that way). In a child, the checks report like any test: ``ok`` passes, a failed
check fails with its traceback, and a child that Ray ended without a Python error is run once
more, then skipped with the end of its output (the environment's, not the code's failure).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: exit code of a child whose checks raised (anything else non-zero: ended by Ray)
CHECK_FAILED = 3


def run_isolated(test_file: str, func: str, *args: str, timeout: float = 600) -> None:
    """Call ``func(*args)`` of the module at ``test_file`` in a child process (its folder
    and the tests folder on ``sys.path``); fail with the child's traceback if a check
    failed, skip if Ray ended the child twice."""
    path = Path(test_file).resolve()
    code = textwrap.dedent(f"""
        import sys, traceback
        sys.path[:0] = [{str(path.parent)!r}, {str(Path(__file__).resolve().parent)!r}]
        try:
            import importlib.util
            spec = importlib.util.spec_from_file_location({path.stem!r}, {str(path)!r})
            mod = importlib.util.module_from_spec(spec)
            sys.modules[{path.stem!r}] = mod
            spec.loader.exec_module(mod)
            getattr(mod, {func!r})(*{list(args)!r})
        except BaseException as exc:
            if type(exc).__name__ == "Skipped":
                print("ISOLATED-SKIP", exc, flush=True)
                import os
                os._exit(0)
            traceback.print_exc()
            sys.stdout.flush(); sys.stderr.flush()
            import os
            os._exit({CHECK_FAILED})
        print("ISOLATED-OK", flush=True)
    """)
    tails = []
    for _attempt in range(2):
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{func} ran past {timeout} s")
        out = p.stdout + p.stderr
        if p.returncode == 0 and "ISOLATED-SKIP" in p.stdout:
            pytest.skip(p.stdout.split("ISOLATED-SKIP", 1)[1].strip()[:300])
        if p.returncode == 0 and "ISOLATED-OK" in p.stdout:
            return
        if p.returncode == CHECK_FAILED:
            pytest.fail(f"{func} failed in its child process:\n{out[-6000:]}")
        tails.append(f"exit {p.returncode}: {out[-1500:]}")
    pytest.skip(f"{func}: Ray ended the child process twice without a Python error "
                f"(environment): {tails[-1]}")
