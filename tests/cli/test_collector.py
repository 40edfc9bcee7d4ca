"""The garbage collector of the ``traincast`` program (traincast.cli.collector): paused while a
command imports its libraries, then frozen, collecting again during the run; untouched when
:func:`traincast.cli.main` is called inside another process."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import traincast
from traincast.cli import collector, main

ROOT = Path(traincast.__file__).resolve().parents[1]


def test_the_program_freezes_its_imports_and_collects_during_the_run(traces: Path) -> None:
    """``python -m traincast.cli predict DIR``: the collector is on while the replay runs
    (after the imports were frozen), and everything is frozen before the exit."""
    code = ("import gc, json, runpy, sys\n"
            "import traincast.predict.prediction as P\n"
            "seen = []\n"
            "real = P.predict\n"
            "def spy(*a, **k):\n"
            "    seen.append([gc.isenabled(), gc.get_freeze_count()])\n"
            "    return real(*a, **k)\n"
            "P.predict = spy\n"
            f"sys.argv = ['traincast', 'predict', {str(traces / 'dlrm_8xv100' / 'kineto')!r},"
            " '--format', 'json']\n"
            "try:\n    runpy.run_module('traincast.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "print(json.dumps([rc, seen, gc.isenabled(), gc.get_freeze_count()]),"
            " file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120, check=False)
    rc, seen, enabled, frozen = json.loads(res.stderr.strip().splitlines()[-1])
    assert rc == 0 and json.loads(res.stdout)["ranks"]
    # traincast.predict ran with the collector on, the imports' objects frozen before it
    assert seen and seen[0][0] and seen[0][1] > 10_000
    assert enabled and frozen >= seen[0][1]


def test_main_inside_another_process_leaves_the_collector_alone(tmp_path: Path,
                                                                capsys) -> None:
    before = (gc.isenabled(), gc.get_freeze_count())
    assert main(["predict", str(tmp_path / "missing")]) == 2
    assert (gc.isenabled(), gc.get_freeze_count()) == before
    with collector.imports_uncollected():
        assert gc.isenabled()  # not the program: nothing paused
    assert gc.get_freeze_count() == before[1]
    assert "error" in capsys.readouterr().err
