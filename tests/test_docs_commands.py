"""Documentation that runs (issue 18): every ``traincast ...`` command shown in README.md and
docs/*.md is executed against the shared traces, so no documented command can rot.

Placeholders map to real inputs (:data:`PLACEHOLDERS`); commands run in one temporary folder,
in document order (a file one command writes, e.g. ``comm.json``, is there for the next). A
command that cannot run here carries ``not run by the docs test`` and the reason in its
comment in the document itself. Usage templates in running text (``[--what a,b,...]``,
``table|json``) and ```` ```text ```` blocks (a command's output, shown) are not commands and
are left out.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP_MARK = "not run by the docs test"
_FENCE = re.compile(r"^```")
_INLINE = re.compile(r"`(traincast [^`]+)`")


def documented_commands() -> list[tuple[str, int, str, str]]:
    """(file, line, command, comment) of every ``traincast`` command in the documents: lines
    of fenced code blocks (with ``\\`` continuations joined; also after ``&&``) and inline
    code spans with arguments and no template syntax."""
    out = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        fenced = output = False
        i = 0
        while i < len(lines):
            line = lines[i]
            if _FENCE.match(line.strip()):
                fenced = not fenced
                output = fenced and line.strip() == "```text"  # a command's output, shown
                i += 1
                continue
            if output:
                i += 1
                continue
            if fenced:
                start = i
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                code, _, comment = line.partition(" #")
                for part in code.split("&&"):
                    part = part.strip()
                    if part.startswith("traincast "):
                        out.append((doc.name, start + 1, part, comment.strip()))
            else:
                for m in _INLINE.finditer(line):
                    cmd = m.group(1).strip()
                    if len(cmd.split()) > 2 and not re.search(r"[\[\]|]|\.\.\.", cmd):
                        out.append((doc.name, i + 1, cmd, ""))
            i += 1
    return out


def _queue_trace(path: Path, marker: str | None = None, ranked: bool = True) -> Path:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("make_queue_trace",
                                                  ROOT / "benchmarks" / "make_queue_trace.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_queue_trace", gen)
    spec.loader.exec_module(gen)
    doc = gen.trace(gen.Params(steps=3, ops=50))
    for ev in doc["traceEvents"]:
        if marker and ev["name"].startswith("ProfilerStep#"):
            ev["name"] = marker
    path.write_text(json.dumps(doc))
    return path


def _cpu_et(path: Path) -> Path:
    """One training step of a small MLP on CPU under the execution-trace observer."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ExecutionTraceObserver, record_function

    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randn(32, 1)
    obs = ExecutionTraceObserver()
    obs.register_callback(str(path))
    obs.start()
    with record_function("ProfilerStep#0"):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    obs.stop()
    obs.unregister_callback()
    return path


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory, traces: Path) -> tuple[Path, dict]:
    """A folder with the inputs the documents name, and the placeholder map."""
    wd = tmp_path_factory.mktemp("docs")
    _queue_trace(wd / "trace.json", marker="train_step")
    (wd / "DIR").mkdir()
    _queue_trace(wd / "DIR" / "a.json")
    _queue_trace(wd / "DIR" / "b.json")
    shutil.copy(ROOT / "tests" / "costs" / "data" / "all_gather_perf_2gpu_bf16.log",
                wd / "all_gather_perf.log")
    shutil.copy(traces.parent / "measurements" / "vtrain" / "vtrain_allreduce_lut.csv",
                wd / "vtrain_allreduce_lut.csv")
    _cpu_et(wd / "et.json")
    dlrm = traces / "dlrm_8xv100"
    placeholders = {
        "DLRM_TRACE_DIR": str(dlrm),
        "TRACE_DIR": str(dlrm / "kineto"),
        "ET_DIR": str(dlrm / "et"),
        "RUN_A": str(traces / "hta" / "trace_diff" / "control.json.gz"),
        "RUN_B": str(traces / "hta" / "trace_diff" / "test.json.gz"),
        "A": str(traces / "hta" / "trace_diff" / "control.json.gz"),
        "B": str(traces / "hta" / "trace_diff" / "test.json.gz"),
        "examples/": str(ROOT / "examples") + "/",
        "ET_FILE": str(wd / "et.json"),
        "OTF2_DIR": str(traces / "otf2" / "ping-pong-otf2"),
        # the site's pages show the shared traces as they lie beside the repository
        "../shared/data/traces/": str(traces) + "/",
    }
    return wd, placeholders


def _argv(cmd: str, placeholders: dict[str, str]) -> list[str]:
    argv = shlex.split(cmd)[1:]
    out = []
    for a in argv:
        for k, v in placeholders.items():
            a = re.sub(rf"(?<![\w/]){re.escape(k)}", v, a) if k.endswith("/") else (
                v if a == k else a)
        out.append(a)
    return out


CASES = documented_commands()

class _InOrder:
    """Runs the documented commands in document order in one folder, each once per process:
    the test of command ``k`` first runs every earlier command not run yet, so that it sees
    the files they wrote (``comm.json``, ``models/``...) however the tests are scheduled
    (``pytest -n 2`` may split them between its workers: each then runs what its tests
    need)."""

    def __init__(self, wd: Path, placeholders: dict[str, str]) -> None:
        self.wd, self.placeholders = wd, placeholders
        self.outcome: list[int | BaseException] = []

    def run_to(self, k: int) -> int:
        from traincast.cli import main  # lazy: the CLI's imports, once commands run

        while len(self.outcome) <= k:
            _, _, cmd, comment = CASES[len(self.outcome)]
            if SKIP_MARK in comment:
                self.outcome.append(0)
                continue
            with contextlib.chdir(self.wd):
                try:
                    self.outcome.append(main(_argv(cmd, self.placeholders)))
                except Exception as exc:  # noqa: BLE001 - raised by that command's test
                    self.outcome.append(exc)
        got = self.outcome[k]
        if isinstance(got, BaseException):
            raise got
        return got


@pytest.fixture(scope="session")
def in_order(workdir: tuple[Path, dict]) -> _InOrder:
    return _InOrder(*workdir)


def test_documents_show_commands() -> None:
    assert len(CASES) >= 25
    docs = {c[0] for c in CASES}
    assert "README.md" in docs
    # every skipped command says why
    for doc, line, cmd, comment in CASES:
        if SKIP_MARK in comment:
            assert re.search(rf"{SKIP_MARK}: \S", comment), (doc, line, cmd)


@pytest.mark.parametrize(("k", "doc", "line", "cmd", "comment"),
                         [(k, *c) for k, c in enumerate(CASES)],
                         ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_documented_command_runs(k: int, doc: str, line: int, cmd: str, comment: str,
                                 in_order: _InOrder) -> None:
    if SKIP_MARK in comment:
        pytest.skip(comment)
    rc = in_order.run_to(k)
    argv = _argv(cmd, in_order.placeholders)
    assert rc == 0, f"{doc}:{line}: traincast {' '.join(argv)} exited {rc}"
