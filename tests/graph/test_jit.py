"""Loading the compiled kernels (:mod:`traincast.graph.jit`): small calls take the numpy path
(a small job never imports numba), ``TRAINCAST_NUMBA_MIN_SIZE`` / ``TRAINCAST_NO_NUMBA``
override it, and a kernel module without a usable cache announces its compile on a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from traincast.graph import jit

ROOT = Path(__file__).resolve().parents[2]


def test_small_calls_take_the_numpy_path(monkeypatch) -> None:
    monkeypatch.delenv("TRAINCAST_NUMBA_MIN_SIZE", raising=False)
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    assert jit.min_size() == jit.MIN_SIZE
    assert not jit.worth_compiling(jit.MIN_SIZE - 1)
    assert jit.worth_compiling(jit.MIN_SIZE) and jit.worth_compiling(None)
    assert jit.kernel("traincast.graph.numba_kernels", "nest_walk", jit.MIN_SIZE - 1) is None
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    assert jit.worth_compiling(0)
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "not a number")  # ignored: the default
    assert jit.min_size() == jit.MIN_SIZE
    monkeypatch.setenv("TRAINCAST_NO_NUMBA", "1")
    assert jit.kernel("traincast.graph.numba_kernels", "nest_walk", 10**9) is None


def test_a_large_call_gets_the_kernel_when_numba_is_there(monkeypatch) -> None:
    pytest.importorskip("numba")
    monkeypatch.delenv("TRAINCAST_NO_NUMBA", raising=False)
    fn = jit.kernel("traincast.graph.numba_kernels", "nest_walk", 10**9)
    assert fn is not None and jit.cache_is_warm(fn) in (True, False, None)
    assert jit.kernel("traincast.no_such_module", "x", 10**9) is None  # broken: numpy path


def test_the_compile_is_announced_once_without_a_cache() -> None:
    def stub(index: dict) -> SimpleNamespace:
        return SimpleNamespace(_cache=SimpleNamespace(
            _cache_file=SimpleNamespace(_load_index=lambda: index)))

    out = io.StringIO()
    assert jit.announce_compile("traincast.graph.numba_kernels", stub({}), out)
    assert out.getvalue().count("\n") == 1 and "compiling the fast paths of graph" in \
        out.getvalue()
    out = io.StringIO()
    assert not jit.announce_compile("traincast.graph.numba_kernels", stub({"k": "v"}), out)
    assert not jit.announce_compile("m.numba_kernels", print, out)  # unknown: no line
    assert out.getvalue() == ""
    assert jit.cache_is_warm(print) is None


def test_an_8_rank_predict_and_analysis_never_import_numba(traces: Path) -> None:
    """The CLI's path for a small job: the kernels' load would cost more than they save."""
    code = ("import sys, warnings, traincast; warnings.simplefilter('ignore'); "
            f"ts = traincast.load({str(traces / 'dlrm_8xv100' / 'kineto')!r}, cache=False); "
            "p = traincast.predict(ts, what_if=['speedup=kind:device=2']); "
            "traincast.analyze(ts, prediction=p); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'scipy')))")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRAINCAST_NUMBA_MIN_SIZE", "TRAINCAST_NO_NUMBA")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_read_only_views_give_kernels_one_argument_type() -> None:
    """Writable and read-only arrays are different numba types: read_only makes every
    array a read-only view (no copy), and leaves other values alone."""
    import numpy as np

    a = np.arange(5)
    b = np.arange(3)
    b.flags.writeable = False
    ra, rb, n = jit.read_only(a, b, 7)
    assert not ra.flags.writeable and not rb.flags.writeable and n == 7
    assert np.shares_memory(ra, a) and rb is b and a.flags.writeable


def test_load_on_empty_calls_on_empty_views() -> None:
    seen = []
    a, b = np.arange(6, dtype=np.int32), np.zeros((0, 3), np.int64)
    assert jit.load_on_empty(lambda *args: seen.append(args), a, 7, b)
    (x, k, y), = seen
    assert x.dtype == np.int32 and x.shape == (0,) and k == 7 and y.shape == (0, 3)
    # a view that would have another type in numba (not C-contiguous): no call
    assert not jit.load_on_empty(lambda *args: seen.append(args), a[::2])
    assert len(seen) == 1
