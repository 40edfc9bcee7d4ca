"""Hostile input, second round: tracebacks that must be one line, and text that misleads.

Every CLI refusal is checked the same way (:func:`refused`): exit code 2, exactly one line on
stderr, which names the file or parameter at fault; through the API the error is a specific
:class:`traincast.errors.TraincastError` subclass. Time bounds are subprocess timeouts."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from traincast.cli import main
from traincast.errors import IterationError


def refused(rc: int, err: str, *names: str) -> str:
    """Assert a clean refusal: exit 2, one stderr line, naming every one of ``names``."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("traincast: error: "), err
    assert err.startswith("traincast: error: "), repr(err)  # nothing before it, not even \n
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _cli(*args: str, timeout: float = 120, env: dict | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess:
    """The CLI in its own process, bounded in time (a hang fails with TimeoutExpired)."""
    return subprocess.run([sys.executable, "-m", "traincast.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})},
                          cwd=cwd)


def _real_events(traces: Path, rank: int = 0) -> dict:
    return json.loads(gzip.decompress(
        (traces / "dlrm_8xv100" / "kineto" / f"rank-{rank}.pt.trace.json.gz").read_bytes()))


# ----------------------------------------------------------- tracebacks instead of one line


@pytest.fixture(scope="module")
def huge_step(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real DLRM ranks; rank 1's first step marker reads ``ProfilerStep#9999...9`` (23
    digits, beyond every integer type)."""
    out = tmp_path_factory.mktemp("huge-step")
    for rank in (0, 1):
        doc = _real_events(traces, rank)
        if rank == 1:
            step = next(e for e in doc["traceEvents"]
                        if str(e.get("name", "")).startswith("ProfilerStep#"))
            step["name"] = "ProfilerStep#" + "9" * 23
        (out / f"rank-{rank}.json").write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("per_rank", [False, True], ids=["one-file", "per-rank"])
def test_huge_step_number_one_line(huge_step: Path, per_rank: bool, capsys) -> None:
    target = huge_step if per_rank else huge_step / "rank-1.json"
    rc = main(["analyze", str(target), *(["--per-rank"] if per_rank else [])])
    refused(rc, capsys.readouterr().err, str(huge_step / "rank-1.json"), "step number")


def test_huge_step_number_api(huge_step: Path) -> None:
    import traincast

    with pytest.raises(IterationError, match="rank-1.json"):
        traincast.load(huge_step / "rank-1.json")


def _hand_models(out: Path) -> Path:
    """A kernel-models folder built by hand (no fitting): gemm fwd a roofline with a one-node
    tree, gemm bwd a roofline with a one-layer MLP."""
    from traincast.costs.kernel_families import FAMILIES
    from traincast.costs.kernel_models import KernelModels, _layout, _Model

    spec = FAMILIES["gemm"]
    feats = spec.feature_names()
    p, combos = len(feats), int(np.prod([k for _, k in _layout(spec)[1]]))
    base = {"x_mean": np.zeros(p), "x_scale": np.ones(p),
            "base_coef": np.tile([1000.0, 1e-3, 1e-2], (combos, 1))}
    trees = {"tree_left": np.array([-1]), "tree_right": np.array([-1]),
             "tree_feature": np.array([-2]), "tree_threshold": np.array([-2.0]),
             "tree_value": np.array([0.1]), "tree_roots": np.array([0]),
             "tree_depth": np.array([0])}
    mlp = {"mlp_layers": np.array([1]), "mlp_W0": np.full((p, 1), 0.01),
           "mlp_b0": np.zeros(1), "y_scale": np.array([0.5])}
    return KernelModels({
        ("gemm", "fwd"): _Model("gemm", "fwd", "roofline+gbdt", feats, {**base, **trees}, 0.05),
        ("gemm", "bwd"): _Model("gemm", "bwd", "roofline+mlp", feats, {**base, **mlp})},
        source={"device": "hand"}).save(out)


def _edit_models(folder: Path, fn) -> Path:
    doc = json.loads((folder / "models.json").read_text())
    fn(doc)
    (folder / "models.json").write_text(json.dumps(doc))
    return folder


def _entry(key: str, value: object):
    def fn(doc: dict) -> None:
        doc["models"][0][key] = value
    return fn


def _top(key: str, value: object):
    def fn(doc: dict) -> None:
        doc[key] = value
    return fn


MODEL_DOCS = {  # what is changed in models.json -> what the error names
    "family-list": (_entry("family", ["gemm"]), "family"),
    "direction-none": (_entry("direction", None), "direction"),
    "direction-unknown": (_entry("direction", "sideways"), "sideways"),
    "file-int": (_entry("file", 5), "file"),
    "features-int": (_entry("features", 5), "features"),
    "learning-rate-text": (_entry("learning_rate", "fast"), "learning_rate"),
    "models-int": (_top("models", 5), "models"),
    "source-text": (_top("source", "bench"), "source"),
}


@pytest.mark.parametrize("case", MODEL_DOCS, ids=list(MODEL_DOCS))
def test_models_json_wrong_types(tmp_path: Path, case: str) -> None:
    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    edit, field = MODEL_DOCS[case]
    folder = _edit_models(_hand_models(tmp_path / "m"), edit)
    with pytest.raises(ModelFormatError) as err:
        KernelModels.load(folder)
    assert str(folder) in str(err.value) and field in str(err.value)


def test_models_json_deeply_nested(tmp_path: Path) -> None:
    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    folder = _hand_models(tmp_path / "m")
    (folder / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    assert KernelModels.load(folder).summary == []  # summary.json is informative only
    deep = '{"family": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (folder / "models.json").write_text(
        '{"format": "traincast.kernel_models", "version": 1, "models": [' + deep + "]}")
    with pytest.raises(ModelFormatError, match="nested too deeply"):
        KernelModels.load(folder)


def _edit_arrays(folder: Path, direction: str, fn) -> Path:
    """Change one model's npz and write its new sha256 into models.json (as an attacker
    would)."""
    import hashlib
    import io

    doc = json.loads((folder / "models.json").read_text())
    entry = next(e for e in doc["models"] if e["direction"] == direction)
    with np.load(folder / entry["file"]) as z:
        arrays = {k: z[k] for k in z.files}
    fn(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (folder / entry["file"]).write_bytes(buf.getvalue())
    entry["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    (folder / "models.json").write_text(json.dumps(doc))
    return folder / entry["file"]


def _set(key: str, value: object):
    def fn(a: dict) -> None:
        a[key] = np.asarray(value)
    return fn


ARRAYS = {  # (direction, change) -> the array the error names
    "tree_depth-0d": ("fwd", _set("tree_depth", 3), "tree_depth"),
    "tree_depth-empty": ("fwd", _set("tree_depth", np.zeros(0, np.int64)), "tree_depth"),
    "tree_feature-float": ("fwd", _set("tree_feature", [0.5]), "tree_feature"),
    "tree_left-float": ("fwd", _set("tree_left", [-1.0]), "tree_left"),
    "tree_roots-2d": ("fwd", _set("tree_roots", [[0]]), "tree_roots"),
    "tree_roots-uint64": ("fwd", _set("tree_roots", np.array([2**64 - 1], np.uint64)),
                          "tree_roots"),
    "mlp_layers-empty": ("bwd", _set("mlp_layers", np.zeros(0, np.int64)), "mlp_layers"),
    "mlp_layers-0d": ("bwd", _set("mlp_layers", 1), "mlp_layers"),
    "y_scale-0d": ("bwd", _set("y_scale", 0.5), "y_scale"),
    "y_scale-2d": ("bwd", _set("y_scale", [[0.5]]), "y_scale"),
}


@pytest.mark.parametrize("case", ARRAYS, ids=list(ARRAYS))
def test_model_arrays_of_the_wrong_shape(tmp_path: Path, case: str) -> None:
    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    direction, edit, name = ARRAYS[case]
    folder = _hand_models(tmp_path / "m")
    npz = _edit_arrays(folder, direction, edit)
    with pytest.raises(ModelFormatError) as err:
        KernelModels.load(folder)
    assert str(npz) in str(err.value) and name in str(err.value)


def test_hand_models_predict(tmp_path: Path) -> None:
    """The hand-built folder itself loads and predicts (the refusals above are the edits)."""
    from traincast.costs.kernel_models import KernelModels

    km = KernelModels.load(_hand_models(tmp_path / "m"))
    for direction in ("fwd", "bwd"):
        assert km.predict_ns("gemm", direction, B=1, M=64, N=64, K=64) > 0


def test_bad_models_through_the_cli(tmp_path: Path, capsys) -> None:
    folder = _edit_models(_hand_models(tmp_path / "m"), _entry("learning_rate", [1]))
    rc = main(["plan", "dlrm", "--config", "examples/dlrm.yaml", "--gpus", "2", "--node",
               "DGX-A100", "--batch", "8192", "--models", str(folder), "--search"])
    refused(rc, capsys.readouterr().err, str(folder), "learning_rate")


def _corrupt_otf2(traces: Path, tmp_path: Path, offset: int) -> Path:
    """The ping-pong OTF2 trace with byte ``offset`` of its global definitions set to 0xff
    (74: inside a string, which no longer decodes as UTF-8; 0: the chunk header)."""
    import shutil

    pytest.importorskip("otf2")
    out = tmp_path / "otf2"
    shutil.copytree(traces / "otf2" / "ping-pong-otf2", out)
    for p in [out, *out.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    data = bytearray((out / "traces.def").read_bytes())
    data[offset] = 0xFF
    (out / "traces.def").write_bytes(bytes(data))
    return out / "traces.otf2"


@pytest.mark.parametrize("offset", [74, 0], ids=["not-utf8", "chunk-header"])
def test_corrupt_otf2_one_line(traces: Path, tmp_path: Path, offset: int) -> None:
    """Neither the otf2 package's callback traceback (sys.stderr) nor the C library's
    ``[OTF2] ... error:`` lines (file descriptor 2) come before the error line."""
    anchor = _corrupt_otf2(traces, tmp_path, offset)
    r = _cli("analyze", str(anchor), timeout=60, env={"TRAINCAST_CACHE": "0"})
    line = refused(r.returncode, r.stderr, str(anchor), "OTF2")
    if offset == 74:
        assert "UnicodeDecodeError" in line  # the callback's exception, kept as the reason


def test_corrupt_otf2_api(traces: Path, tmp_path: Path, capfd) -> None:
    from traincast.errors import TraceFormatError
    from traincast.trace.readers.otf2 import read_otf2

    anchor = _corrupt_otf2(traces, tmp_path, 74)
    with pytest.raises(TraceFormatError, match="UnicodeDecodeError"):
        read_otf2(anchor)
    assert capfd.readouterr().err == ""
    assert len(read_otf2(traces / "otf2" / "ping-pong-otf2" / "traces.otf2")) == 2


def test_ctrl_c_stops_the_workers_quietly(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during a map over
    the process pool: no worker prints a KeyboardInterrupt traceback, and the workers are
    stopped at once instead of finishing their chunks (8 x 5 s of sleep on 2 workers). The
    script takes Ctrl-C as a program started from a terminal does (a test run started as a
    shell's background job passes SIGINT ignored to its children, and Python keeps it so)."""
    import signal
    import time

    script = tmp_path / "run.py"
    script.write_text(
        "import signal, sys, time\n"
        "from traincast.util.executor import map_tasks\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "def nap(s):\n"
        "    sys.stdout.write('nap\\n')  # one write: two workers' lines never interleave\n"
        "    sys.stdout.flush()\n"
        "    time.sleep(s)\n"
        "if __name__ == '__main__':\n"
        "    print('go', flush=True)\n"
        "    try:\n"
        "        map_tasks(nap, [5.0] * 8, executor='process', workers=2,\n"
        "                  chunksize=1)\n"
        "    except KeyboardInterrupt:\n"
        "        sys.exit(130)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    try:
        assert p.stdout.readline().strip() == "go"
        # both workers started and in their first sleep (each prints before it sleeps),
        # however long the forkserver took to start on a busy machine
        assert [p.stdout.readline().strip() for _ in range(2)] == ["nap", "nap"]
        time.sleep(0.2)
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=30)
        assert time.monotonic() - t0 < 5, "the workers finished their chunks first"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err


# ------------------------------------------------------------------------ text that misleads


EVIL_DIR = "run\n1\x1b]52;c;cHduZWQ=\x07"


def test_file_names_escaped_in_error_lines(tmp_path: Path, capsys) -> None:
    """A folder name with a newline and an OSC-52 escape: the error line stays one line and
    shows both as ``\\xNN``."""
    folder = tmp_path / EVIL_DIR
    folder.mkdir()
    (folder / "bad.json").write_text("xx")
    rc = main(["analyze", str(folder / "bad.json")])
    err = capsys.readouterr().err
    line = refused(rc, err, "\\x0a", "\\x1b]52", "bad.json")
    assert "\x1b" not in line and "\x07" not in line


def test_file_names_escaped_in_warning_lines(traces: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / EVIL_DIR
    folder.mkdir()
    doc = _real_events(traces)
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not str(e.get("name", "")).startswith("ProfilerStep#")]
    (folder / "rank-0.json").write_text(json.dumps(doc))
    assert main(["analyze", str(folder / "rank-0.json"), "--what", "kernels"]) == 0
    err = capsys.readouterr().err
    warn = [x for x in err.splitlines() if "no ProfilerStep#N markers" in x]
    assert len(warn) == 1 and "\\x0a" in warn[0] and "\x1b" not in err, err


def test_suggested_commands_are_shell_quoted(traces: Path, tmp_path: Path, capsys) -> None:
    """The verdict's commands name the trace folder shell-quoted: a folder ``run 1; touch
    PWNED #`` gives a command that, pasted into a shell, runs nothing else."""
    import shlex

    folder = tmp_path / "run 1; touch PWNED #"
    folder.mkdir()
    for f in (traces / "dlrm_8xv100" / "kineto").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cmds = [row["command"] for row in doc["verdict"]["opportunities"]]
    assert cmds
    for cmd in cmds:
        argv = shlex.split(cmd)
        assert argv[:3] == ["traincast", "predict", str(folder)], cmd


def test_zero_device_time_gives_no_fp32_opportunity(traces: Path, tmp_path: Path) -> None:
    """All GPU durations negative (read as zero): no share of nothing, no numpy warning."""
    import warnings

    import traincast
    from traincast.predict.verdict import _fp32_gemms

    doc = _real_events(traces)
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e:
            e["dur"] = -abs(e["dur"]) - 1
    (tmp_path / "neg.json").write_text(json.dumps(doc))
    ts = traincast.load(tmp_path / "neg.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert _fp32_gemms(ts) is None


@pytest.mark.parametrize("key", ["ts", "dur"])
def test_huge_values_print_as_plain_numbers(tmp_path: Path, key: str, capsys) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
               "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 6,
               "dur": 50, "args": {"stream": 7, "device": 0}}]
    events[1][key] = 1e300
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    line = refused(main(["analyze", str(trace)]), capsys.readouterr().err, str(trace))
    assert f"{key}=1e+300 " in line and "np." not in line
