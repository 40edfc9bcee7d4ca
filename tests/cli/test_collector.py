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
            "print(json.dumps([rc, seen, gc.isenabled(), gc.get_freeze_count(),"
            " len(gc.get_objects())]), file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120, check=False)
    rc, seen, enabled, frozen, tracked = json.loads(res.stderr.strip().splitlines()[-1])
    assert rc == 0 and json.loads(res.stdout)["ranks"]
    # traincast.predict ran with the collector on, the imports' objects frozen before it
    assert seen and seen[0][0] and seen[0][1] > 10_000
    # before the exit every object left is frozen: none in the collector's generations
    # (the frozen count itself may drop since the replay: frozen objects freed by refcount)
    assert enabled and frozen > 10_000 and tracked < 100


def test_main_inside_another_process_leaves_the_collector_alone(tmp_path: Path,
                                                                capsys) -> None:
    before = (gc.isenabled(), gc.get_freeze_count())
    assert main(["predict", str(tmp_path / "missing")]) == 2
    assert (gc.isenabled(), gc.get_freeze_count()) == before
    with collector.imports_uncollected():
        assert gc.isenabled()  # not the program: nothing paused
    assert gc.get_freeze_count() == before[1]
    assert "error" in capsys.readouterr().err


def test_startup_pages_are_given_back_only_by_the_program_for_a_large_job() -> None:
    """:func:`collector.release_startup_pages`: nothing outside the program, for a small job
    or with ``TRAINCAST_KEEP_PAGES``; else the libraries' clean pages are advised away (file
    pages resident drop) and the libraries keep working."""
    assert not collector._PROGRAM  # pytest's process is not the program
    assert collector.release_startup_pages(collector.RELEASE_MIN_EVENTS) == 0
    if not sys.platform.startswith("linux"):
        return
    code = ("import json, os\n"
            "import numpy as np, pandas as pd\n"
            "from traincast.cli import collector\n"
            "def rss_file():\n"
            "    for line in open('/proc/self/status'):\n"
            "        if line.startswith('RssFile:'):\n"
            "            return int(line.split()[1])\n"
            "collector.as_program()\n"
            "n = collector.RELEASE_MIN_EVENTS\n"
            "small = collector.release_startup_pages(n - 1)\n"
            "os.environ['TRAINCAST_KEEP_PAGES'] = '1'\n"
            "kept = collector.release_startup_pages(n)\n"
            "del os.environ['TRAINCAST_KEEP_PAGES']\n"
            "before = rss_file()\n"
            "done = collector.release_startup_pages(n)\n"
            "after = rss_file()\n"
            "df = pd.DataFrame({'a': np.arange(10) % 3, 'b': np.arange(10.0)})\n"
            "sums = df.groupby('a')['b'].sum().tolist()\n"
            "print(json.dumps([small, kept, done > 0, after < before, sums]))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRAINCAST_KEEP_PAGES", None)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120, check=True)
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [0, 0, True, True,
                                                               [18.0, 12.0, 15.0]]
