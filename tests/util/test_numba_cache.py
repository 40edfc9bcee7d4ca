"""Loading numba's cached machine code without its compiler set-up
(:mod:`traincast.util.numba_cache`): the kernel modules' dispatchers use the quick loader, a
cached kernel loads without numba's registries (``numba.np.arraymath`` never imported), and
a kernel whose source changed misses the cache and compiles again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KERNELS = '''
import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads


@njit(cache=True)
def plus(x):
    return x + 1


@njit(cache=True)
def sort_first(a):
    return np.sort(a)[0]


quick_loads(sys.modules[__name__])
'''

RUN = '''
import json, sys
import numpy as np
import kmod
out = {"plus": int(kmod.plus(1)), "hits": sum(kmod.plus._cache_hits.values()),
       "misses": sum(kmod.plus._cache_misses.values()),
       "arraymath": "numba.np.arraymath" in sys.modules}
if sys.argv[1] == "sort":
    out["sort"] = float(kmod.sort_first(np.array([3.0, 1.0, 2.0])))
    out["blas"] = "scipy.linalg.cython_blas" in sys.modules
print(json.dumps(out))
'''


def _run(folder: Path, what: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))
    env.pop("NUMBA_CACHE_DIR", None)  # the cache beside the module, in the test's folder
    env.pop("NUMBA_DISABLE_JIT", None)
    out = subprocess.run([sys.executable, "-c", RUN, what], env=env, capture_output=True,
                         text=True, timeout=240, check=True, cwd=folder)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_kernel_modules_load_quickly() -> None:
    pytest.importorskip("numba")
    from traincast.analysis import numba_kernels as an
    from traincast.graph import numba_kernels as gr
    from traincast.simulate import numba_kernels as si

    for mod in (an, gr, si):
        dispatchers = [f for f in vars(mod).values() if hasattr(f, "_cache")]
        assert dispatchers and all(getattr(f._cache, "_quick", False) for f in dispatchers)


def test_a_cached_kernel_loads_without_the_registries_and_a_changed_one_recompiles(
        tmp_path: Path) -> None:
    pytest.importorskip("numba")
    src = tmp_path / "kmod.py"
    src.write_text(KERNELS)
    first = _run(tmp_path, "sort")  # compiles both, with the BLAS probe skipped
    assert first["plus"] == 2 and first["misses"] == 1 and first["hits"] == 0
    assert first["sort"] == 1.0 and not first["blas"]
    again = _run(tmp_path, "plus")  # from the cache, no registries installed
    assert again == {"plus": 2, "hits": 1, "misses": 0, "arraymath": False}
    src.write_text(KERNELS.replace("return x + 1", "return x + 2"))
    stamp = src.stat().st_mtime + 10  # a new source stamp, whatever the clock's resolution
    os.utime(src, (stamp, stamp))
    changed = _run(tmp_path, "plus")
    assert changed["plus"] == 3 and changed["misses"] == 1 and changed["hits"] == 0
    assert _run(tmp_path, "plus")["hits"] == 1  # the new code, cached in turn


def test_numba_arraymath_imported_later_skips_the_blas_probe() -> None:
    """A kernel module installs the hook: whoever imports ``numba.np.arraymath`` next (a
    cached kernel's environment, a compile, the user) does so without scipy.linalg, with
    numba's BLAS flag set as the probe sets it and its ``ensure_blas`` left in place."""
    pytest.importorskip("numba")
    code = ("import sys\nimport traincast.analysis.numba_kernels\n"
            "assert 'numba.np.arraymath' not in sys.modules\n"
            "import numba.np.arraymath as AM, numba.np.linalg as L\n"
            "assert AM._HAVE_BLAS is True and L.ensure_blas.__name__ == 'ensure_blas'\n"
            "assert 'scipy.linalg' not in sys.modules\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


ROWS = '''
import json, sys
import numpy as np
from traincast.graph.jit import read_only
from traincast.simulate import numba_kernels as K
i32, i64 = np.int32, np.int64
# one edge 0 -> 1 (lag 5), read-only int32 columns as the verdict's pass passes them
flat, src, dst, lag = read_only(np.array([0], i32), np.array([0], i32), np.array([1], i32),
                                np.array([5], i32))
ok = K.propagate_rows(
    flat, src, dst, lag, np.array([0], np.int8), np.array([-1], i32),
    np.zeros((1, 1), np.uint8), np.ones((1, 1)), np.zeros(1, np.bool_), -1, 1, 2, 3, 0,
    np.array([0], i32), np.array([0, 1], i64), np.array([[0], [-2147483648]], i32),
    np.zeros((1, 1), i64))
print(json.dumps([bool(ok), "numba.np.arraymath" in sys.modules]))
'''


def test_the_verdicts_rows_kernel_loads_without_numba_arraymath() -> None:
    """``simulate.numba_kernels.propagate_rows`` (the verdict's several what-ifs) names no
    function whose cached code makes its load import ``numba.np.arraymath`` (``np.iinfo``
    did: ~0.1 s and ~6 MiB a run)."""
    pytest.importorskip("numba")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("NUMBA_DISABLE_JIT", "TRAINCAST_NO_NUMBA"):
        env.pop(name, None)
    for _ in range(2):  # the first may compile (and import it to compile); the second loads
        out = subprocess.run([sys.executable, "-c", ROWS], env=env, capture_output=True,
                             text=True, timeout=240, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == [True, False]
