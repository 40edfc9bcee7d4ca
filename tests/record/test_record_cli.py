"""``traincast record -- COMMAND``: the example scripts recorded unmodified (plain loop; DDP
under torchrun with 2 ranks), each folder read by ``analyze``, ``predict`` and
``predict --from-et``; the manifest's unprofiled steps; Ctrl-C mid-run; the command's exit
code passed on; bad options; an existing ``sitecustomize`` still run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import traincast
from traincast.cli import main
from traincast.record.run import record_command

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
KEPT = ROOT / "benchmarks" / "data" / "cpu_dlrm"
# small steps: a 64-wide MLP, batch 16; 1 skipped + 3 unprofiled + 1 warm-up + 2 active
SMALL = ["--skip", "1", "--unprofiled", "3", "--wait", "0", "--warmup", "1", "--active", "2"]
SCRIPT = ["--steps", "8", "--batch-size", "16", "--hidden", "64"]


@pytest.fixture(autouse=True)
def _loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    # gloo binds to the host name's interface unless told otherwise: loopback works offline
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernel models kept in the repository (CPU, torch 2.13)."""
    out = tmp_path_factory.mktemp("kept")
    archive = KEPT / json.loads((KEPT / "MANIFEST.json").read_text())["archive"]
    with tarfile.open(archive) as tf:
        tf.extractall(out, members=[m for m in tf.getmembers()
                                    if m.name.startswith("models/")], filter="data")
    return out / "models"


def _manifest(folder: Path) -> dict:
    return json.loads((folder / ".run.json").read_text())


def _reads(folder: Path, models: Path, capsys: pytest.CaptureFixture[str],
           analyze: bool = True) -> None:
    """``analyze``, ``predict`` and ``predict --from-et`` all read ``folder``."""
    if analyze:
        assert main(["analyze", str(folder)]) == 0
        assert "step" in capsys.readouterr().out
    assert main(["predict", str(folder), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc
    et = folder / "rank-0.et.json.gz"
    assert main(["predict", "--from-et", str(et), "--models", str(models)]) == 0
    assert "predicted step" in capsys.readouterr().out


def test_plain_loop(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mlp"
    rc = main(["record", "--out", str(out), *SMALL, "--batch-size", "16", "--",
               sys.executable, str(EXAMPLES / "train_mlp.py"), *SCRIPT])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert text.startswith(f"traincast: recording {sys.executable}")
    assert "1 of 1 rank(s) traced" in text and "complete" in text
    assert "where it goes" in text  # the verdict of analyze ends the run
    assert "GPU waits" not in text  # a CPU run: no device waits for the host
    assert sorted(p.name for p in out.iterdir()) == [
        ".run.json", "rank-0.et.json.gz", "rank-0.pt.trace.json.gz"]
    m = _manifest(out)
    assert m["recorder"] == "traincast record" and m["complete"] and m["partial"] is None
    assert m["command"][1:] == [str(EXAMPLES / "train_mlp.py"), *SCRIPT]
    assert m["world_size"] == 1 and m["ranks"] == [0] and m["device"] == "cpu"
    assert m["torch"] == str(torch.__version__) and m["batch_size"] == 16
    assert len(m["unprofiled_steps_ns"]["0"]) == 3 and m["unprofiled_step_ns"] > 0
    assert m["unprofiled_step_ns_per_rank"] == [m["unprofiled_step_ns"]]
    assert m["profiler"]["execution_trace"] == "same" and m["active_recorded"] == {"0": 2}
    _reads(out, models, capsys, analyze=False)


def test_torchrun_ddp(tmp_path: Path, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for attempt in range(3):
        out = tmp_path / f"ddp{attempt}"
        rc = main(["record", "--out", str(out), *SMALL, "--no-analyze", "--",
                   sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", "2", str(EXAMPLES / "train_ddp.py"), *SCRIPT])
        text = capsys.readouterr().out
        # gloo's teardown on the CPU build aborts a rank now and then after
        # destroy_process_group ("terminate called without an active exception", SIGABRT):
        # the recording is whole but the command's code is 1, which record passes on; up to
        # twice more then (two aborts in a row were seen once), and only for that case
        if rc == 0 or "2 of 2 rank(s) traced" not in text or attempt == 2:
            break
    assert rc == 0, text
    assert "2 of 2 rank(s) traced" in text and "where it goes" not in text
    names = sorted(p.name for p in out.iterdir())
    assert names == [".run.json", "rank-0.et.json.gz", "rank-0.pt.trace.json.gz",
                     "rank-1.et.json.gz", "rank-1.pt.trace.json.gz"]
    m = _manifest(out)
    assert m["world_size"] == 2 and m["ranks"] == [0, 1] and m["complete"]
    assert "batch_size" not in m  # not given: unknown
    assert {k: len(v) for k, v in m["unprofiled_steps_ns"].items()} == {"0": 3, "1": 3}
    assert len(m["unprofiled_step_ns_per_rank"]) == 2
    _reads(out, models, capsys)


#: a loop without torch.optim that ends its steps itself (``--step-marker call``)
MANUAL_LOOP = """
import torch
import traincast.record

torch.set_num_threads(1)
w = torch.randn(64, 64, requires_grad=True)
for _ in range(100000):
    (torch.randn(16, 64) @ w).square().mean().backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
    traincast.record.step()
"""


def test_ctrl_c_leaves_a_readable_folder(tmp_path: Path) -> None:
    """SIGINT to ``traincast record`` once an active step is recorded (a loop ending its
    steps with ``traincast.record.step()``)."""
    out = tmp_path / "int"
    script = tmp_path / "manual.py"
    script.write_text(MANUAL_LOOP)
    cmd = [sys.executable, "-m", "traincast.cli", "record", "--out", str(out), "--no-analyze",
           "--skip", "1", "--unprofiled", "1", "--wait", "0", "--warmup", "0",
           "--active", "500", "--step-marker", "call", "--", sys.executable, str(script)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    status = out / ".rank-0.status.part"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if json.loads(status.read_text()).get("active_recorded", 0) >= 1:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "traincast: interrupted" in stderr
    m = _manifest(out)
    assert m["partial"] == "interrupted" and not m["complete"] and m["step_marker"] == "call"
    assert 1 <= m["active_recorded"]["0"] < 500 and len(m["unprofiled_steps_ns"]["0"]) == 1
    assert not list(out.glob(".*.part"))
    ts = traincast.load(out)  # readable: the complete steps and the one cut short
    assert list(ts.ranks) == [0] and ts.iterations.num_rows >= m["active_recorded"]["0"]


def test_failing_command_passes_its_code_on(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["record", "--out", str(tmp_path / "f"), "--", sys.executable, "-c",
               "import sys; sys.exit(3)"])
    err = capsys.readouterr().err
    assert rc == 3
    assert "the command exited with code 3" in err
    assert not (tmp_path / "f" / ".run.json").exists()


def test_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record"]) == 2
    assert main(["record", "--active", "0", "--", "true"]) == 2
    assert main(["record", "--step-marker", "loss", "--", "true"]) == 2
    assert main(["record", "--out", str(tmp_path / "x"), "--", str(tmp_path / "nope")]) == 2
    held = tmp_path / "held"
    held.mkdir()
    (held / "rank-0.pt.trace.json.gz").write_bytes(b"")
    assert main(["record", "--out", str(held), "--", "true"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_existing_sitecustomize_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    site = tmp_path / "site"
    site.mkdir()
    mark = tmp_path / "chained"
    (site / "sitecustomize.py").write_text(f"open({str(mark)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    res = record_command([sys.executable, "-c", "pass"], tmp_path / "out")
    assert mark.exists()
    assert res.exit_code == 0 and res.manifest is None and not res.traces
    assert "no process of the command made a training step" in res.messages[0]
