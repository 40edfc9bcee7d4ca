"""Start-up of the ``traincast`` command: what a start imports, typer's value conversion without
pydantic (same values and errors as typer's own), and the app built for one command (same
help, parsing and errors as the whole app)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traincast
from traincast.cli import coercion
from traincast.cli.app import _COMMANDS, app, make_app

ROOT = Path(traincast.__file__).resolve().parents[1]

#: imports a start must not pay for: the analyses' libraries, and pydantic (typer's converter)
HEAVY = ("pandas", "numpy", "pyarrow", "pyarrow.compute", "pydantic", "rich", "scipy", "numba")


def _modules_after(args: list[str], env: dict[str, str] | None = None,
                   watch: tuple[str, ...] = HEAVY) -> tuple[int, list[str]]:
    """Exit code and the ``watch`` modules (HEAVY) loaded by ``traincast ARGS`` in a fresh
    process (with ``env`` added to its environment)."""
    code = ("import json, runpy, sys\n"
            f"sys.argv = ['traincast', *{args!r}]\n"
            "try:\n    runpy.run_module('traincast.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\n"
            f"print(json.dumps([rc, sorted(m for m in {watch!r} if m in sys.modules)]),"
            " file=sys.stderr)\n")
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full,
                         cwd=ROOT, timeout=120, check=False)
    rc, mods = json.loads(res.stderr.strip().splitlines()[-1])
    return rc, mods


@pytest.mark.parametrize("args", [["--version"], ["analyze", "--help"], ["predict", "--help"],
                                  ["--help"]], ids=" ".join)
def test_start_imports_no_heavy_library(args: list[str]) -> None:
    rc, mods = _modules_after(args)
    assert rc == 0 and mods == [], mods


def test_a_command_converts_its_values_without_pydantic(traces: Path) -> None:
    rc, mods = _modules_after(["analyze", str(traces / "dlrm_8xv100" / "kineto"), "--what",
                               "kernels", "--format", "json", "--workers", "1"])
    assert rc == 0 and "pydantic" not in mods and "pandas" in mods


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_predict_runs_without_pandas(traces: Path, fmt: str) -> None:
    # a plain replay's table and JSON come from numpy columns, its Arrow columns are read
    # from their buffers: neither pandas (~0.3 s) nor Arrow's compute functions are imported
    path = str(traces / "dlrm_8xv100" / "kineto")
    _modules_after(["predict", path, "--workers", "1"])  # the parse cache, warm
    rc, mods = _modules_after(["predict", path, "--format", fmt, "--workers", "1"])
    assert rc == 0 and mods == ["numpy", "pyarrow", *(["rich"] if fmt == "table" else [])], mods


def test_analyze_verdict_runs_without_pandas(traces: Path) -> None:
    # the terminal verdict reads the analyses' numpy columns (breakdown, idle causes, the
    # stragglers' summary, the critical path's families): no pandas, no Arrow compute; the
    # tables (--all, JSON) still come as DataFrames
    path = str(traces / "dlrm_8xv100" / "kineto")
    _modules_after(["analyze", path, "--workers", "1"])  # the parse cache, warm
    rc, mods = _modules_after(["analyze", path, "--workers", "1"])
    assert rc == 0 and mods == ["numpy", "pyarrow", "rich"], mods
    rc, mods = _modules_after(["analyze", path, "--all", "--workers", "1"])
    assert rc == 0 and "pandas" in mods, mods


def test_a_warm_predict_imports_no_numpy_ma(traces: Path, tmp_path: Path) -> None:
    # numpy.ma (~15 ms) comes with numpy 2's np.unique (its hash path asks np.ma.is_masked)
    # and np.median: predict's warm path takes traincast.util.distinct.sorted_distinct
    path = str(traces / "dlrm_8xv100" / "kineto")
    env = {"TRAINCAST_CACHE_DIR": str(tmp_path)}
    _modules_after(["predict", path], env=env)  # the parse cache, the job entry, the graph
    rc, mods = _modules_after(["predict", path], env=env, watch=("numpy.ma", "numpy"))
    assert rc == 0 and mods == ["numpy"], mods


def test_a_profiler_trace_load_imports_no_sqlite(traces: Path, tmp_path: Path) -> None:
    # SQLite (~5 ms) is for Nsight Systems exports only: a Kineto job's cold and warm loads
    # leave it out (the loader's modules are the read-ahead child's imports too)
    path = str(traces / "dlrm_8xv100" / "kineto")
    env = {"TRAINCAST_CACHE_DIR": str(tmp_path)}
    for _ in range(2):  # cold, then warm
        rc, mods = _modules_after(["analyze", path], env=env, watch=("sqlite3", "numpy"))
        assert rc == 0 and mods == ["numpy"], mods


@pytest.mark.parametrize("command", ["analyze", "predict"])
def test_a_cold_parse_runs_without_pandas(traces: Path, tmp_path: Path, command: str) -> None:
    # an empty parse cache: the 8 ranks and their execution traces are parsed in this
    # process (Kineto columns, shapes, ET columns, the links) from numpy and Python values,
    # without pandas (pa.array, to_numpy) or Arrow's compute functions (take, cast...)
    path = str(traces / "dlrm_8xv100" / "kineto")
    rc, mods = _modules_after([command, path], env={"TRAINCAST_CACHE_DIR": str(tmp_path)})
    assert rc == 0 and mods == ["numpy", "pyarrow", "rich"], mods


# --------------------------------------------------------------------------- typer's values

def _samples(param) -> list:  # noqa: ANN001 - a typer parameter
    ann = param.type_descriptor.annotation
    out: list = [None]
    if isinstance(ann, type) and issubclass(ann, Enum):
        out += [*[m.value for m in ann], *list(ann), "BAD", str(next(iter(ann)).value).upper()]
    elif ann is str or getattr(ann, "__origin__", None) is list:
        out += ["x", "", "a\udcff", "é", ("a", "b"), (), "x=1"]
    elif ann is int:
        out += ["4", "04", "-3", " 4", "+4", "1_0", "x", "", 5, "99999999999999999999"]
    elif ann is float:
        out += ["1.5", "x", 2]
    elif isinstance(ann, type) and issubclass(ann, Path):
        out += ["a/b", "", "-", "a\x00b", "/nonexistent", Path("p"), str(ROOT), "é\udcff"]
    elif ann is bool:
        out += ["1", "x"]
    return out


def _outcome(fn):  # noqa: ANN001, ANN202
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the error itself is compared
        return ("error", type(exc).__name__, str(exc))


def _params():
    import typer.main

    root = typer.main.get_command(app)
    stack = [root]
    while stack:
        cmd = stack.pop()
        for sub in getattr(cmd, "commands", {}).values():
            stack.append(sub)
        for p in cmd.params:
            if hasattr(p, "type_descriptor"):
                yield cmd, p


def test_values_convert_as_typer_converts_them() -> None:
    """Every parameter of every command, with ordinary and odd values: the same value or the
    same error as typer's own (pydantic) conversion."""
    pytest.importorskip("typer._coercion")
    from typer._click import Context
    from typer._coercion import build_runtime_param

    assert coercion.install()
    n = 0
    for cmd, p in _params():
        ctx = Context(cmd)
        real = build_runtime_param(p.type_descriptor)
        for v in _samples(p):
            ours = _outcome(lambda: p.get_runtime_param().coerce(v, param=p, ctx=ctx))  # noqa: B023
            theirs = _outcome(lambda: real.coerce(v, param=p, ctx=ctx))  # noqa: B023
            assert ours == theirs, (cmd.name, p.name, v)
            n += 1
    assert n > 500


# --------------------------------------------------------------------------- one command's app

def _run(application, args: list[str]) -> tuple[int, str]:  # noqa: ANN001 - a typer app
    res = CliRunner().invoke(application, args, env={"COLUMNS": "100"})
    return res.exit_code, res.output


@pytest.mark.parametrize("name", [c[0] for c in _COMMANDS])
def test_one_command_app_helps_as_the_whole_app(name: str) -> None:
    assert _run(make_app(name), [name, "--help"]) == _run(app, [name, "--help"])


@pytest.mark.parametrize("args", [["analyze"], ["analyze", "/nonexistent", "--format", "xml"],
                                  ["analyze", "x", "--bogus"], ["predict", "--workers", "abc"],
                                  ["plan"], ["plan", "nope"], ["cache", "info", "--bad"]],
                         ids=" ".join)
def test_one_command_app_fails_as_the_whole_app(args: list[str]) -> None:
    assert _run(make_app(args[0]), args) == _run(app, args)


@pytest.mark.parametrize("args", [["--version"], ["-V", "--help"], ["--version", "--bogus"],
                                  ["-V", "analyze"]], ids=" ".join)
def test_version_app_answers_as_the_whole_app(args: list[str]) -> None:
    assert _run(make_app(""), args) == _run(app, args)


def test_the_whole_app_for_what_is_not_one_command() -> None:
    from traincast.cli.app import _app_for

    for args in ([], ["--help"], ["-h", "analyze"], ["analyz"], ["--bogus", "analyze"]):
        assert _app_for(args) is app
    assert _app_for(["analyze", "x"]) is not app and _app_for(["-V", "x"]) is not app
