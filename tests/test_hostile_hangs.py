"""Hostile input that used to hang or never end: non-regular files given as traces (FIFOs,
devices, sockets), kernel-model files as untrusted input, cyclic or very deep execution
traces, the shared process pool used from several threads, and workers or cache temporaries
left behind by a killed parent.

Every refusal through the CLI is one line on stderr with exit 2; through the API a specific
:class:`~traincast.errors.TraincastError`. Hangs are bounded by subprocess timeouts (a hang
fails with ``TimeoutExpired``) or ``signal.alarm``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cli_probe import cli
from cli_probe import refused as _refused

import traincast
from traincast.errors import NotRegularFileError
from traincast.util.fileio import open_regular


def refused(r: subprocess.CompletedProcess, *names: str) -> str:
    """Assert a clean refusal of a finished CLI process (see :func:`cli_probe.refused`)."""
    return _refused(r.returncode, r.stderr, *names)


def _cli(*args: str, timeout: float = 60, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    """The CLI in its own process, bounded in time (60 s here)."""
    return cli(*args, timeout=timeout, env=env)


# --- only regular files are traces ----------------------------------------------------------

@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    p = tmp_path / "t.json"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("cache", ["off", "on"])
def test_fifo_trace_refused(fifo: Path, tmp_path: Path, cache: str) -> None:
    env = {"TRAINCAST_CACHE_DIR": "off" if cache == "off" else str(tmp_path / "cache")}
    line = refused(_cli("analyze", str(fifo), timeout=30, env=env), str(fifo))
    assert "not a regular file (a FIFO)" in line


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom"])
def test_endless_device_trace_refused(dev: str, tmp_path: Path) -> None:
    if not os.path.exists(dev):
        pytest.skip(f"no {dev}")
    r = _cli("analyze", dev, timeout=30, env={"TRAINCAST_CACHE_DIR": str(tmp_path / "c")})
    assert "not a regular file (a character device)" in refused(r, dev)


def test_fifo_in_folder_refused_not_skipped(traces: Path, tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz", d / "rank-0.json.gz")
    os.mkfifo(d / "rank-1.json")
    r = _cli("analyze", str(d), timeout=30, env={"TRAINCAST_CACHE_DIR": "off"})
    assert "not a regular file (a FIFO)" in refused(r, "rank-1.json")


def test_socket_trace_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(p))
        with pytest.raises(NotRegularFileError, match="a socket"):
            traincast.load(p, cache=False)
    finally:
        s.close()


def test_fifo_execution_trace_refused(traces: Path, tmp_path: Path) -> None:
    et = tmp_path / "et"
    et.mkdir()
    os.mkfifo(et / "rank-0.et.json")
    r = _cli("analyze", str(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz"),
             "--et-dir", str(et), timeout=30, env={"TRAINCAST_CACHE_DIR": "off"})
    assert "not a regular file (a FIFO)" in refused(r, "rank-0.et.json")
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        traincast.load(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz", et_dir=et,
                       cache=False)


@pytest.mark.parametrize("cache", [False, True])
def test_fifo_through_api(fifo: Path, tmp_path: Path, cache: bool) -> None:
    with pytest.raises(NotRegularFileError, match="not a regular file"):
        traincast.load(fifo, cache=tmp_path / "c" if cache else False)
    with pytest.raises(NotRegularFileError):
        traincast.load([fifo], cache=False)


def test_open_regular_checks_the_descriptor(fifo: Path, monkeypatch) -> None:
    """A path that passes the stat check but is a FIFO when opened (swapped in between) is
    refused on the open descriptor without blocking."""
    monkeypatch.setattr("traincast.util.fileio.check_regular", lambda p: None)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        open_regular(fifo)


def test_otf2_event_file_fifo_refused(traces: Path, tmp_path: Path) -> None:
    pytest.importorskip("otf2")
    src = traces / "otf2" / "ping-pong-otf2"
    d = tmp_path / "otf2"
    shutil.copytree(src, d)
    (d / "traces" / "1.evt").unlink()
    os.mkfifo(d / "traces" / "1.evt")
    r = _cli("analyze", str(d / "traces.otf2"), timeout=30, env={"TRAINCAST_CACHE_DIR": "off"})
    assert "not a regular file (a FIFO)" in refused(r, "1.evt")


# --- kernel-model files as untrusted input --------------------------------------------------

def _synthetic_bench(seed: int = 0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = 120
    df = pd.DataFrame({k: np.exp(rng.uniform(np.log(8), np.log(1024), n)).round()
                       for k in "MNK"})
    df["B"], df["op"], df["dtype"] = 1.0, "mm", "float32"
    t = 2000.0 + 2 * df.M * df.N * df.K / 40.0
    t = t * np.exp(rng.normal(0, 0.2, n) + 0.3 * np.sin(df.M))  # residuals for the trees
    return df.assign(family="gemm", direction="fwd", time_ns=t, rel_mad=0.03, rel_iqr=0.03)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from traincast.costs.kernel_models import KernelModels

    return KernelModels.fit(_synthetic_bench(), seed=0, kinds=("roofline+gbdt",)).save(
        tmp_path_factory.mktemp("km") / "m")


def _tampered(model_dir: Path, tmp_path: Path, **arrays) -> tuple[Path, Path]:
    """A copy of ``model_dir`` whose gemm.fwd.npz has ``arrays`` replaced (raw bytes when a
    value is bytes: the whole file), its sha256 updated in models.json."""
    import hashlib
    import io
    import json

    import numpy as np

    d = tmp_path / "m"
    shutil.copytree(model_dir, d)
    f = d / "gemm.fwd.npz"
    if "raw" in arrays:
        data = arrays["raw"]
    else:
        with np.load(f) as z:
            a = {k: z[k] for k in z.files}
        a.update(arrays)
        buf = io.BytesIO()
        np.savez_compressed(buf, **a)
        data = buf.getvalue()
    f.write_bytes(data)
    doc = json.loads((d / "models.json").read_text())
    for e in doc["models"]:
        if e["file"] == f.name:
            e["sha256"] = hashlib.sha256(data).hexdigest()
    (d / "models.json").write_text(json.dumps(doc))
    return d, f


def _alarm(seconds: int):
    import signal

    def boom(*_):
        raise TimeoutError(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    return lambda: (signal.alarm(0), signal.signal(signal.SIGALRM, old))


@pytest.mark.parametrize("depth", [10**12, -1, 65])
def test_model_tree_depth_bounded(model_dir: Path, tmp_path: Path, depth: int) -> None:
    import numpy as np

    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    d, f = _tampered(model_dir, tmp_path, tree_depth=np.array([depth], np.int64))
    undo = _alarm(20)
    try:
        with pytest.raises(ModelFormatError, match="tree_depth must be one number"):
            KernelModels.load(d)
    finally:
        undo()


def test_model_tree_cycle_refused(model_dir: Path, tmp_path: Path) -> None:
    import numpy as np

    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    with np.load(model_dir / "gemm.fwd.npz") as z:
        left, roots = z["tree_left"].copy(), z["tree_roots"]
    root = next(int(r) for r in roots if left[r] >= 0)
    left[root] = root  # a cycle: the root is its own left child
    d, _ = _tampered(model_dir, tmp_path, tree_left=left)
    with pytest.raises(ModelFormatError, match="cycle"):
        KernelModels.load(d)


def test_model_inflate_bomb_refused(model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """A small npz whose arrays inflate past the limit is refused before inflating (the
    limit lowered here: the real one, 256 MiB, takes a 4 GiB array of zeros as well)."""
    import numpy as np

    from traincast.costs import kernel_models
    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    d, f = _tampered(model_dir, tmp_path, x_pad=np.zeros(4 << 20))  # 32 MiB of zeros
    assert f.stat().st_size < 1 << 20
    monkeypatch.setattr(kernel_models, "MAX_MODEL_BYTES", 16 << 20)
    with pytest.raises(ModelFormatError, match="past the limit"):
        KernelModels.load(d)


def test_model_npy_header_larger_than_data(model_dir: Path, tmp_path: Path) -> None:
    """An npy header claiming 10^12 elements in a small member: refused, nothing allocated."""
    import io
    import zipfile

    import numpy as np
    from numpy.lib import format as npy_format

    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    with np.load(model_dir / "gemm.fwd.npz") as z:
        a = {k: z[k] for k in z.files}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for k, v in a.items():
            with zf.open(k + ".npy", "w") as fh:
                if k == "tree_value":
                    npy_format.write_array_header_1_0(
                        fh, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
                    fh.write(b"\0" * 64)
                else:
                    npy_format.write_array(fh, v)
    d, _ = _tampered(model_dir, tmp_path, raw=buf.getvalue())
    with pytest.raises(ModelFormatError, match="does not fit"):
        KernelModels.load(d)


def test_model_files_must_be_regular(model_dir: Path, tmp_path: Path) -> None:
    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    d = tmp_path / "m"
    shutil.copytree(model_dir, d)
    (d / "gemm.fwd.npz").unlink()
    os.mkfifo(d / "gemm.fwd.npz")
    undo = _alarm(20)
    try:
        with pytest.raises(ModelFormatError, match="not a regular file"):
            KernelModels.load(d)
    finally:
        undo()


def test_plan_search_with_deep_model_refused(model_dir: Path, tmp_path: Path) -> None:
    import numpy as np

    d, _ = _tampered(model_dir, tmp_path, tree_depth=np.array([10**12], np.int64))
    cfg = tmp_path / "dlrm.yaml"
    cfg.write_text("tables:\n  - {rows: 2000, dim: 32, pooling: 4}\n"
                   "dense_features: 13\nbottom_mlp: [64, 32]\ntop_mlp: [64, 1]\n")
    r = _cli("plan", "dlrm", "--config", str(cfg), "--gpus", "2", "--batch", "256",
             "--models", str(d), "--search", timeout=60)
    assert "tree_depth" in refused(r, "gemm.fwd.npz")


# --- execution traces: parent cycles and deep nesting ---------------------------------------

def _et_node(nid: int, name: str, parent: int) -> dict:
    return {"name": name, "id": nid, "rf_id": nid, "parent": parent, "fw_parent": 0,
            "seq_id": -1, "scope": 0, "tid": 1, "fw_tid": 0,
            "op_schema": f"{name}(Tensor self) -> Tensor" if "::" in name else "",
            "inputs": [[nid, 6, 0, 64, 4, "cpu"]], "input_shapes": [[8, 8]],
            "input_types": ["Tensor(float)"], "outputs": [], "output_shapes": [],
            "output_types": []}


def _write_et(path: Path, nodes: list[dict]) -> Path:
    import json

    path.write_text(json.dumps({"schema": "1.0.1", "pid": 1, "time": "", "start_ts": 0,
                                "finish_ts": 1, "nodes": nodes}))
    return path


def test_et_parent_cycle_refused(model_dir: Path, tmp_path: Path) -> None:
    from traincast.errors import TraceFormatError
    from traincast.trace.readers.et import read_execution_trace

    nodes = [_et_node(2, "[pytorch|profiler|execution_graph|thread]", 1),
             _et_node(3, "ProfilerStep#1", 5), _et_node(4, "aten::mm", 3),
             _et_node(5, "aten::add", 4), _et_node(6, "aten::relu", 2)]
    et = _write_et(tmp_path / "cyc.et.json", nodes)
    with pytest.raises(TraceFormatError, match="parent links form a cycle"):
        read_execution_trace(et)
    r = _cli("predict", "--from-et", str(et), "--models", str(model_dir), "--batch-size", "16",
             timeout=60)
    assert "cycle" in refused(r, "cyc.et.json")
    nodes[1] = _et_node(3, "ProfilerStep#1", 3)  # its own parent: the process root's mark
    read_execution_trace(_write_et(tmp_path / "self.et.json", nodes[:2]))


def test_et_nested_50000_deep(model_dir: Path, tmp_path: Path) -> None:
    """50,000 nested ops: walked without recursion (RecursionError before)."""
    import json

    n = 50_000
    nodes = [_et_node(2, "[pytorch|profiler|execution_graph|thread]", 1),
             _et_node(3, "ProfilerStep#1", 2)]
    nodes += [_et_node(4 + i, "aten::add", 3 + i) for i in range(n)]
    et = _write_et(tmp_path / "deep.et.json", nodes)
    r = _cli("predict", "--from-et", str(et), "--models", str(model_dir), "--batch-size", "16",
             "--batch-size-from", "8", "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)


# --- the shared process pool from several threads -------------------------------------------

def test_threads_with_different_workers_share_the_pool_safely(traces: Path,
                                                              tmp_path: Path) -> None:
    """Two threads of one process load with executor="process" and different ``workers``:
    both finish (the second call used to replace the pool under the first, which then
    waited forever or failed)."""
    import threading

    from traincast.util.executor import map_tasks, shutdown

    src = traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz"
    files = []
    for r in range(2):
        f = tmp_path / f"rank-{r}.json.gz"
        shutil.copy(src, f)
        files.append(f)
    out: dict[str, object] = {}

    def run(key: str, w: int) -> None:
        try:
            if key.startswith("load"):
                out[key] = traincast.load(files, executor="process", workers=w, cache=False)
            else:
                import time

                out[key] = map_tasks(time.sleep, [0.2] * 8, executor="process", workers=w,
                                     chunksize=1)
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            out[key] = exc

    threads = [threading.Thread(target=run, args=a, daemon=True)
               for a in (("load2", 2), ("load1", 1), ("sleep3", 3), ("sleep2", 2))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a thread still waits on its pool"
        for key, v in out.items():
            assert not isinstance(v, BaseException), (key, v)
        assert out["load1"].events.num_rows == out["load2"].events.num_rows > 0
        assert out["sleep3"] == out["sleep2"] == [None] * 8
    finally:
        shutdown()


# --- leaks: workers of a killed parent, temporaries of a killed cache write -----------------

_SLEEPER = """
import sys, time
from traincast.util.executor import map_tasks
if __name__ == "__main__":
    print("ready", flush=True)
    map_tasks(time.sleep, [60] * 4, executor="process", workers=2, chunksize=1)
"""


def _descendants(pid: int) -> set[int]:
    """Live (not zombie) processes below ``pid``, from /proc."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parent[int(d.name)] = int(fields[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in out]
        out.update(kids)
        todo.extend(kids)
    return out


def _alive(pids: set[int]) -> set[int]:
    left = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(p)
    return left


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_workers_end_with_their_parent(tmp_path: Path, sig: str) -> None:
    import signal
    import time

    script = tmp_path / "sleeper.py"
    script.write_text(_SLEEPER)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(traincast.__file__)
                                                                 .parents[1])})
    kids: set[int] = set()
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the fork server, 2 workers, the tracker
            kids = _descendants(proc.pid)
            if len(kids) >= 4:
                break
            time.sleep(0.2)
        assert len(kids) >= 4, kids
        proc.send_signal(getattr(signal, sig))
        proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while _alive(kids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(kids), f"still running after the parent's {sig}: {_alive(kids)}"
    finally:
        for p in _alive(kids):  # only the processes this test started
            os.kill(p, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_stale_cache_temporaries_swept(tmp_path: Path) -> None:
    import time

    from traincast.trace import cache as C

    root = tmp_path / "cache"
    d = root / f"v{C.CACHE_SCHEMA}" / "ab"
    jobs = root / f"v{C.CACHE_SCHEMA}" / "jobs" / "cd"
    d.mkdir(parents=True)
    jobs.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    host = C._OWNER_HOST
    old = time.time() - 2 * C.STALE_TMP_S
    files = {
        "dead_old": d / f".abcdef12-{dead}@{host}-x1y2z3w4",
        "dead_old_job": jobs / f".cdef1234-{dead}@{host}-q1w2e3r4",
        "dead_new": d / f".abcdef12-{dead}@{host}-n3w5f1l3",
        "live_old": d / f".abcdef12-{os.getpid()}@{host}-l1v3l1v3",
        "other_host_old": d / f".abcdef12-{dead}@elsewhere-0th3rh0s",
        "ancient": d / ".abcdef12-qwertyui",
        "entry": d / "abcdef12.arrows",
    }
    for name, f in files.items():
        f.write_bytes(b"x")
        age = {"dead_new": time.time(), "ancient": time.time() - 2 * 86_400}.get(name, old)
        os.utime(f, (age, age))
    C._swept.discard(root)
    C.TraceCache(root)  # the first cache of a process sweeps (at most once an hour)
    left = {n for n, f in files.items() if f.exists()}
    assert left == {"dead_new", "live_old", "other_host_old", "entry"}
    files["dead_old"].write_bytes(b"x")
    os.utime(files["dead_old"], (old, old))
    C._swept.discard(root)
    C.TraceCache(root)  # swept less than an hour ago: left for later
    assert files["dead_old"].exists()
    assert C.sweep_stale_temporaries(root) == 1


def test_cache_temporaries_name_their_owner(traces: Path, tmp_path: Path,
                                            monkeypatch) -> None:
    """A write killed mid-way leaves a temporary naming its pid and host (what the sweep
    reads): the rename is made to fail here, as a kill between write and rename would."""
    from traincast.trace import cache as C

    seen = []
    real = os.replace

    def fail(src, dst):
        seen.append(Path(src).name)
        raise OSError("killed")
    monkeypatch.setattr(C.os, "replace", fail)
    try:
        traincast.load(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz",
                       cache=tmp_path / "c", executor="serial")
    finally:
        monkeypatch.setattr(C.os, "replace", real)
    assert seen and all(f"-{os.getpid()}@{C._OWNER_HOST}-" in n for n in seen), seen
    assert C._owner_gone(seen[0]) is False


# --- other input files of the commands: FIFOs and devices refused, not read -----------------

@pytest.mark.parametrize("args", [
    ["plan", "dlrm", "--config", "{fifo}", "--gpus", "2", "--batch", "8", "--search"],
    ["plan", "dlrm", "--config", "/dev/zero", "--gpus", "2", "--batch", "8", "--search"],
    ["calibrate", "comm", "{fifo}"],
], ids=["plan-config-fifo", "plan-config-dev-zero", "nccl-tests-log-fifo"])
def test_input_files_that_are_not_regular(tmp_path: Path, args: list[str]) -> None:
    fifo = tmp_path / "in.yaml"
    os.mkfifo(fifo)
    argv = [a.replace("{fifo}", str(fifo)) for a in args]
    named = str(fifo) if "{fifo}" in args else "/dev/zero"
    assert "not a regular file" in refused(_cli(*argv, timeout=30), named)


def test_hardware_catalog_fifo_refused(tmp_path: Path) -> None:
    from traincast.costs.hardware import load_catalog
    from traincast.errors import ParameterError

    fifo = tmp_path / "hw.toml"
    os.mkfifo(fifo)
    undo = _alarm(20)
    try:
        with pytest.raises(ParameterError, match="not a regular file"):
            load_catalog(fifo)
    finally:
        undo()


@pytest.mark.parametrize("et", ["fifo", "/dev/zero"])
def test_from_et_not_regular(model_dir: Path, tmp_path: Path, et: str) -> None:
    path = tmp_path / "x.et.json"
    if et == "fifo":
        os.mkfifo(path)
    else:
        path = Path(et)
    r = _cli("predict", "--from-et", str(path), "--models", str(model_dir), timeout=30)
    assert "not a regular file" in refused(r, str(path))


def test_comm_model_not_regular(traces: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "comm.json"
    os.mkfifo(fifo)
    r = _cli("predict", str(traces / "linear_1x2080ti" / "kineto.pt.trace.json.gz"),
             "--comm-model", str(fifo), timeout=30, env={"TRAINCAST_CACHE_DIR": "off"})
    assert "not a regular file (a FIFO)" in refused(r, str(fifo))
