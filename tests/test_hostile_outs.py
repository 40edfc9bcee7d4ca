"""Hostile outputs (issue 29, data loss and broken outputs): an output that is an input,
outputs that are devices or FIFOs, multi-file outputs all new or all old, Nsight SQLite inputs
opened read-only, machine-readable stdout kept clean under Ray, kernel models holding NaN/inf.

Every refusal through the CLI is one line on stderr with exit code 2 (:func:`refused`); hang
cases are bounded by subprocess timeouts."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_probe import cli as _cli
from cli_probe import refused

import traincast
from traincast.cli import main
from traincast.errors import OutputError
from traincast.util import fileio
from traincast.util.fileio import atomic_write, atomic_write_many


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def run_dir(traces: Path, tmp_path: Path) -> Path:
    """A writable copy of a one-rank trace folder (``rank-0.json.gz``)."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copyfile(traces / "hta" / "a100_2rank_nccl" / "rank-0.json.gz", d / "rank-0.json.gz")
    return d


# ------------------------------------------------------------ an output that is an input

def test_analyze_out_is_the_input_file(run_dir: Path, capsys) -> None:
    f = run_dir / "rank-0.json.gz"
    before = _digest(f)
    rc = main(["analyze", str(f), "--format", "json", "--out", str(f)])
    refused(rc, capsys.readouterr().err, str(f), "is an input")
    assert _digest(f) == before and sorted(os.listdir(run_dir)) == ["rank-0.json.gz"]


def test_predict_timeline_out_inside_the_input_folder(run_dir: Path, capsys) -> None:
    f = run_dir / "rank-0.json.gz"
    before = _digest(f)
    rc = main(["predict", str(run_dir), "--timeline-out", str(f)])
    refused(rc, capsys.readouterr().err, "is an input")
    assert _digest(f) == before


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_out_linked_to_an_input(run_dir: Path, tmp_path: Path, link: str, capsys) -> None:
    f = run_dir / "rank-0.json.gz"
    out = tmp_path / "report.json"
    (os.link if link == "hard" else os.symlink)(f, out)
    before = _digest(f)
    rc = main(["analyze", str(run_dir), "--what", "breakdown", "--format", "json",
               "--out", str(out)])
    refused(rc, capsys.readouterr().err, "is an input")
    rc = main(["analyze", str(run_dir), "--critical-path-out", str(out)])
    refused(rc, capsys.readouterr().err, "is an input")
    assert _digest(f) == before


def test_diff_out_is_an_input(run_dir: Path, capsys) -> None:
    f = run_dir / "rank-0.json.gz"
    before = _digest(f)
    rc = main(["diff", str(run_dir), "--vs-predicted", "--format", "json", "--out", str(f)])
    refused(rc, capsys.readouterr().err, "is an input")
    assert _digest(f) == before


def test_convert_prefix_over_an_input(run_dir: Path, tmp_path: Path, capsys) -> None:
    f = run_dir / "rank-0.json.gz"
    os.link(f, tmp_path / "et.0.et")  # PREFIX.0.et is the input trace (a hard link)
    before = _digest(f)
    rc = main(["convert", str(run_dir), "--out", str(tmp_path / "et")])
    refused(rc, capsys.readouterr().err, "is an input")
    assert _digest(f) == before
    assert not list(tmp_path.glob(".et*"))  # no temporaries left


def test_api_writers_refuse_the_runs_files(run_dir: Path) -> None:
    from traincast.export.chrome import write_chrome_trace

    f = run_dir / "rank-0.json.gz"
    ts = traincast.load(run_dir)
    before = _digest(f)
    with pytest.raises(OutputError, match="is an input"):
        write_chrome_trace(f, ts)
    assert _digest(f) == before


def test_input_files_of_a_folder_are_the_files_read(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("rank-0.json.gz", "x.sqlite", "x.sqlite-wal", "report.html", ".hidden.json"):
        (run / name).write_text("")
    (run / "a.otf2").write_text("")
    (run / "a").mkdir()
    (run / "a" / "0.evt").write_text("")
    got = {p.relative_to(run).as_posix() for p in fileio.input_files([run]) if p.exists()}
    assert got == {"rank-0.json.gz", "x.sqlite", "x.sqlite-wal", "a.otf2", "a/0.evt"}
    with pytest.raises(OutputError, match="is an input"):
        fileio.refuse_inputs([run / "x.sqlite-wal"], [run])
    fileio.refuse_inputs([run / "report.html", tmp_path / "new.json"], [run])  # not inputs


def test_fit_out_over_its_bench_folder(gemm_models: Path, tmp_path: Path) -> None:
    from traincast.costs.kernel_models import KernelModels

    km = KernelModels.load(gemm_models)
    (tmp_path / "gemm.jsonl").write_text("")
    km.save(tmp_path, inputs=[tmp_path / "gemm.jsonl"])
    km.save(tmp_path, inputs=[tmp_path / "gemm.jsonl"])  # over an earlier fit: fine
    os.link(tmp_path / "gemm.jsonl", tmp_path / "old.jsonl")
    os.replace(tmp_path / "old.jsonl", tmp_path / "summary.json")  # an output is an input
    with pytest.raises(OutputError, match="is an input"):
        km.save(tmp_path, inputs=[tmp_path / "gemm.jsonl"])


# ------------------------------------------------------------ devices, FIFOs, /proc

def _mknod_char(path: Path, minor: int) -> Path:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot create a character device here: {exc}")
    return path


def test_char_device_out_written_in_place(run_dir: Path, tmp_path: Path, capsys) -> None:
    null = _mknod_char(tmp_path / "null", 3)  # the /dev/null device, in a test folder
    rc = main(["analyze", str(run_dir), "--what", "breakdown", "--format", "json",
               "--out", str(null)])
    assert rc == 0, capsys.readouterr().err
    assert stat.S_ISCHR(os.stat(null).st_mode)  # still the device node
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_dev_full_out_fails_with_no_space(run_dir: Path, tmp_path: Path, capsys) -> None:
    full = _mknod_char(tmp_path / "full", 7)  # /dev/full
    rc = main(["predict", str(run_dir), "--timeline-out", str(full)])
    refused(rc, capsys.readouterr().err, str(full), "No space left")
    assert stat.S_ISCHR(os.stat(full).st_mode)
    with pytest.raises(OutputError, match="No space left"):
        atomic_write_many([(tmp_path / "a.json", b"{}"), (full, b"x")])


def test_fifo_out_without_reader_is_refused_at_once(run_dir: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    r = _cli("analyze", str(run_dir), "--what", "breakdown", "--format", "json",
             "--out", str(fifo), timeout=120)
    refused(r.returncode, r.stderr, "FIFO")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_fifo_out_with_reader_gets_the_data(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    t.start()
    try:
        for _ in range(200):  # the reader opens the FIFO
            try:
                atomic_write(fifo, b"x" * 200_000)
                break
            except OutputError:
                threading.Event().wait(0.01)
    finally:
        t.join(timeout=30)
    assert got == [b"x" * 200_000] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_block_device_and_socket_refused(tmp_path: Path) -> None:
    import socket

    sock_path = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(sock_path))
        with pytest.raises(OutputError, match="socket"):
            atomic_write(sock_path, b"{}")
    finally:
        s.close()
    try:
        os.mknod(tmp_path / "blk", stat.S_IFBLK | 0o600, os.makedev(7, 200))
    except OSError:
        return
    with pytest.raises(OutputError, match="block device"):
        atomic_write(tmp_path / "blk", b"{}")


def test_proc_fd_out_written_in_place(tmp_path: Path) -> None:
    f = tmp_path / "target.json"
    f.write_bytes(b"old old old")
    fd = os.open(f, os.O_RDWR)
    try:
        atomic_write(f"/proc/self/fd/{fd}", b"new")
    finally:
        os.close(fd)
    assert f.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["target.json"]


# ------------------------------------------------------------ multi-file outputs

def _old_files(tmp_path: Path, n: int) -> list[tuple[Path, bytes]]:
    items = []
    for i in range(n):
        p = tmp_path / f"run.{i}.et"
        p.write_bytes(b"old %d" % i)
        items.append((p, b"new %d" % i))
    return items


def test_many_disk_full_midway_keeps_every_old_file(tmp_path: Path, monkeypatch) -> None:
    items = _old_files(tmp_path, 8)
    real = fileio._write_temporary
    calls = []

    def full(path, data, mode):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data, mode)

    monkeypatch.setattr(fileio, "_write_temporary", full)
    with pytest.raises(OutputError, match="No space left.*no file changed"):
        atomic_write_many(items)
    assert [p.read_bytes() for p, _ in items] == [b"old %d" % i for i in range(8)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p, _ in items)


def test_many_rename_failing_midway_restores_the_old_files(tmp_path: Path,
                                                           monkeypatch) -> None:
    items = _old_files(tmp_path, 4) + [(tmp_path / "run.comm_groups.json", b"{}")]
    real = os.replace
    n = []

    def flaky(a, b):
        n.append(b)
        if len(n) == 3:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(a, b)

    monkeypatch.setattr(fileio.os, "replace", flaky)
    with pytest.raises(OutputError):
        atomic_write_many(items)
    monkeypatch.setattr(fileio.os, "replace", real)
    assert [p.read_bytes() for p, _ in items[:4]] == [b"old %d" % i for i in range(4)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p, _ in items[:4])


def test_many_all_new(tmp_path: Path) -> None:
    items = _old_files(tmp_path, 3)
    os.chmod(items[0][0], 0o640)
    atomic_write_many(items)
    assert [p.read_bytes() for p, _ in items] == [b"new %d" % i for i in range(3)]
    assert stat.S_IMODE(os.stat(items[0][0]).st_mode) == 0o640
    assert len(list(tmp_path.iterdir())) == 3


def test_convert_disk_full_keeps_the_earlier_conversion(run_dir: Path, tmp_path: Path,
                                                        monkeypatch, capsys) -> None:
    prefix = tmp_path / "out" / "et"
    assert main(["convert", str(run_dir), "--out", str(prefix), "--format", "json"]) == 0
    first = {p.name: _digest(p) for p in prefix.parent.iterdir()}
    capsys.readouterr()
    real = fileio._write_temporary

    def full(path, data, mode):
        if path.name.endswith(".et"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data, mode)

    monkeypatch.setattr(fileio, "_write_temporary", full)
    rc = main(["convert", str(run_dir), "--out", str(prefix), "--no-delays"])
    refused(rc, capsys.readouterr().err, "No space left")
    assert {p.name: _digest(p) for p in prefix.parent.iterdir()} == first


# ------------------------------------------------------------ Nsight SQLite inputs, read-only

def _wal_pair(src: Path, tmp_path: Path, keep_every: int) -> Path:
    """A copy of ``src`` in WAL mode whose last change (kernels deleted: one in
    ``keep_every`` kept) lives in an uncheckpointed ``-wal`` beside it."""
    import sqlite3

    work = tmp_path / f"work{keep_every}"
    work.mkdir()
    db = work / "run.sqlite"
    shutil.copyfile(src, db)
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA wal_autocheckpoint=0")
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % {keep_every} != 0")
        con.commit()
        out = tmp_path / f"pair{keep_every}"
        out.mkdir()
        shutil.copyfile(db, out / "run.sqlite")  # copied while the log is not checkpointed
        shutil.copyfile(work / "run.sqlite-wal", out / "run.sqlite-wal")
    finally:
        con.close()
    return out / "run.sqlite"


def _kernels(ts) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.equal(ts.events.column("kind").cast("string"), "kernel")).as_py())


def test_nsys_wal_read_without_files_beside_it_and_cache_keyed_on_the_log(
        traces: Path, tmp_path: Path) -> None:
    src = traces / "nsys" / "saxpy_mpi_1xa100.sqlite"
    full = _kernels(traincast.load(src, cache=False))
    half = _wal_pair(src, tmp_path, 2)
    third = _wal_pair(src, tmp_path, 3)
    names = sorted(os.listdir(half.parent))
    n_half = _kernels(traincast.load(half, cache=False))
    assert 0 < n_half < full  # the log's deletions are seen
    assert sorted(os.listdir(half.parent)) == names  # no -shm created, nothing changed
    cache = tmp_path / "cache"
    assert _kernels(traincast.load(half, cache=cache)) == n_half
    shutil.copyfile(third.with_name("run.sqlite-wal"), half.with_name("run.sqlite-wal"))
    n_third = _kernels(traincast.load(third, cache=False))
    assert n_third != n_half
    assert _kernels(traincast.load(half, cache=cache)) == n_third  # not the stale entry
    os.unlink(half.with_name("run.sqlite-wal"))  # the log gone: the database as checkpointed
    assert _kernels(traincast.load(half, cache=cache)) == full
    assert sorted(os.listdir(half.parent)) == ["run.sqlite"]


def test_nsys_plain_export_opened_immutable(traces: Path, tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    shutil.copyfile(traces / "nsys" / "saxpy_mpi_1xa100.sqlite", d / "run.sqlite")
    os.chmod(d / "run.sqlite", 0o444)
    os.chmod(d, 0o555)
    try:
        traincast.load(d / "run.sqlite", cache=False)
        assert os.listdir(d) == ["run.sqlite"]
    finally:
        os.chmod(d, 0o755)


# ------------------------------------------------------------ Ray: stdout holds the output alone

_RAY_DIE_ONCE = """
import json, os, sys, time
from pathlib import Path
from traincast.util.executor import map_tasks, shutdown

MARK = Path(sys.argv[1])

def die_once(x):
    if x == 3 and not MARK.exists():
        MARK.write_text("died")
        os._exit(1)  # the worker killed mid-task: Ray retries it and says so on the driver
    return x * x

got = map_tasks(die_once, list(range(8)), executor="ray", workers=1, chunksize=2)
time.sleep(2)  # the driver's error listener prints asynchronously
sys.stdout.write(json.dumps({"got": got}) + "\\n")
sys.stdout.flush()
shutdown()
"""


def test_ray_worker_death_messages_stay_off_stdout(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    mark = tmp_path / "mark"
    r = subprocess.run([sys.executable, "-c", _RAY_DIE_ONCE, str(mark)], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                            "PYTHONPATH": str(Path(traincast.__file__).parents[1])})
    if r.returncode != 0 and "ray" in r.stderr.lower() and not mark.exists():
        pytest.skip(f"Ray did not start here: {r.stderr.strip().splitlines()[-1:]}")
    assert r.returncode == 0, r.stderr
    assert mark.exists()  # a worker did die
    assert json.loads(r.stdout) == {"got": [x * x for x in range(8)]}, r.stdout


# ------------------------------------------------------------ kernel models holding NaN/inf

@pytest.fixture(scope="module")
def gemm_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Quick kernel models (gemm forward, roofline + gradient-boosted trees) saved to a
    folder."""
    import numpy as np
    import pandas as pd

    from traincast.costs.kernel_models import KernelModels

    rng = np.random.default_rng(0)
    n = 80
    df = pd.DataFrame({k: np.exp(rng.uniform(np.log(8), np.log(512), n)).round()
                       for k in ("M", "N", "K")})
    df["op"], df["dtype"], df["B"] = "mm", "float32", 1.0
    df["time_ns"] = (2000 + 2 * df.M * df.N * df.K / 40) * np.exp(rng.normal(0, 0.03, n))
    df = df.assign(family="gemm", direction="fwd", rel_mad=0.03, rel_iqr=0.03)
    models = KernelModels.fit(df, seed=0, kinds=("roofline+gbdt",), source={"device": "t"})
    return models.save(tmp_path_factory.mktemp("models") / "m")


def _tampered(src: Path, dst: Path, array: str | None = None, value: float = float("nan"),
              learning_rate: object = None) -> Path:
    import io

    import numpy as np

    shutil.copytree(src, dst)
    doc = json.loads((dst / "models.json").read_text())
    e = doc["models"][0]
    if array is not None:
        npz = dst / e["file"]
        with np.load(npz) as z:
            arrays = {k: z[k] for k in z.files}
        arrays[array] = arrays[array].astype(float)
        arrays[array].flat[0] = value
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        npz.write_bytes(buf.getvalue())
        e["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    if learning_rate is not None:
        e["learning_rate"] = learning_rate
    (dst / "models.json").write_text(json.dumps(doc))
    return dst


@pytest.mark.parametrize(("array", "value", "lr"), [
    ("tree_value", float("nan"), None), ("base_coef", float("inf"), None),
    ("x_scale", float("-inf"), None), (None, 0.0, float("nan")), (None, 0.0, 1e999),
    (None, 0.0, "0.1")], ids=["tree_value-nan", "base_coef-inf", "x_scale-inf",
                              "learning_rate-nan", "learning_rate-inf", "learning_rate-str"])
def test_kernel_models_with_nan_or_inf_refused(gemm_models: Path, tmp_path: Path, traces: Path,
                                               array, value, lr, capsys) -> None:
    from traincast.costs.kernel_models import KernelModels, ModelFormatError

    bad = _tampered(gemm_models, tmp_path / "bad", array, value, lr)
    field = array or "learning_rate"
    with pytest.raises(ModelFormatError, match=field) as info:
        KernelModels.load(bad)
    assert str(bad) in str(info.value)
    et = traces / "linear_1x2080ti" / "et.json.gz"
    rc = main(["predict", "--from-et", str(et), "--models", str(bad), "--format", "json"])
    refused(rc, capsys.readouterr().err, str(bad), field)
    assert KernelModels.load(gemm_models).keys == [("gemm", "fwd")]


def test_nsys_wal_on_a_read_only_mount(traces: Path, tmp_path: Path) -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root to make a read-only bind mount")
    pair = _wal_pair(traces / "nsys" / "saxpy_mpi_1xa100.sqlite", tmp_path, 2)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    probe = subprocess.run(["unshare", "-m", "sh", "-c",
                            f"mount --bind {pair.parent} {mnt} && "
                            f"mount -o remount,ro,bind {mnt}"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot make a read-only bind mount here")
    cmd = (f"mount --bind {pair.parent} {mnt} && mount -o remount,ro,bind {mnt} && "
           f"{sys.executable} -m traincast.cli predict {mnt / 'run.sqlite'} --format json")
    r = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "TRAINCAST_CACHE_DIR": str(tmp_path / "c"),
                                         "PYTHONPATH": str(Path(traincast.__file__).parents[1])})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ranks"]
    assert sorted(os.listdir(pair.parent)) == ["run.sqlite", "run.sqlite-wal"]
