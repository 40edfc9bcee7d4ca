"""Nsight Systems SQLite exports (``readers/nsys.py``) through ``traincast.load``.

Real files: ../shared/data/traces/nsys (SOURCES.md: Perlmutter A100 exports from pipit's test
data). Expected values come from independent SQL on the same files. Multi-process, NCCL,
NVTX start/end, memset and stream-wait handling use a small synthetic export built with the
documented column names.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.cli import main
from traincast.errors import TraceFormatError
from traincast.graph.collectives import match_collectives
from traincast.trace.readers.nsys import read_nsys
from traincast.trace.traceset import TraceSet

SAXPY = "saxpy_mpi_1xa100.sqlite"
CLOVER = "cloverleaf_4xa100.sqlite"


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _load(path: Path | list[Path], **kw) -> TraceSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no ProfilerStep#N markers": expected for nsys
        return traincast.load(path, **kw)


def _df(ts: TraceSet):
    df = ts.to_pandas()
    df["kind"] = df["kind"].astype(str)
    df["name"] = df["name"].astype(str)
    return df


@pytest.fixture(scope="module")
def nsys_dir(traces: Path) -> Path:
    d = traces / "nsys"
    if not (d / SAXPY).is_file() or not (d / CLOVER).is_file():
        pytest.skip("nsys sample exports not available")
    return d


@pytest.fixture(scope="module")
def saxpy(nsys_dir: Path) -> TraceSet:
    return _load(nsys_dir / SAXPY)


@pytest.fixture(scope="module")
def clover(nsys_dir: Path) -> TraceSet:
    return _load(nsys_dir / CLOVER)


# ------------------------------------------------------------------------------ real exports


@pytest.mark.parametrize("fname", [SAXPY, CLOVER])
def test_kernels_match_sql(nsys_dir: Path, saxpy: TraceSet, clover: TraceSet,
                           fname: str) -> None:
    ts = saxpy if fname == SAXPY else clover
    path = nsys_dir / fname
    df = _df(ts)
    k = df[df["kind"] == "kernel"]
    (n, total), = _sql(path, "SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(k) == n
    assert int(k["dur"].sum()) == total
    (first,), = _sql(path, "SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert int(k["ts"].min()) == first
    # names: the demangled name, as Kineto shows kernels
    names = {s for (s,) in _sql(path, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                     "JOIN StringIds s ON s.id = k.demangledName")}
    assert set(k["name"]) == names
    dev_stream = set(_sql(path, "SELECT DISTINCT deviceId, streamId FROM "
                                "CUPTI_ACTIVITY_KIND_KERNEL"))
    assert set(zip(k["device"], k["stream"], strict=True)) == dev_stream
    (m,), = _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert (df["kind"] == "memcpy").sum() == m
    assert (df["dur"] >= 0).all()
    assert df["ts"].is_monotonic_increasing


def test_launch_and_kernel_share_correlation(nsys_dir: Path, clover: TraceSet) -> None:
    df = _df(clover)
    k = df[df["kind"] == "kernel"]
    rt = df[df["kind"] == "runtime"].set_index("correlation")
    launches = rt.loc[k["correlation"].to_numpy()]
    assert (launches["name"] == "cudaLaunchKernel").all()  # cudaLaunchKernel_v7000 in the file
    assert (launches["ts"].to_numpy() <= k["ts"].to_numpy()).all()
    assert (launches["device"] == -1).all()
    # pid/tid decoded from globalTid as documented: (g >> 24) & 0xFFFFFF, g & 0xFFFFFF
    (g,), = _sql(nsys_dir / CLOVER, "SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert set(rt["pid"]) == {(g >> 24) & 0xFFFFFF} and set(rt["tid"]) == {g & 0xFFFFFF}
    # one process on one of the node's 4 GPUs -> one rank
    assert clover.rank_ids == [0] and set(k["device"]) == {0}
    assert len(clover.ranks[0].devices) == 4 and clover.ranks[0].host == "nid008553"
    # cudaDeviceSynchronize after every kernel: one CUPTI synchronisation record each
    (n_sync,), = _sql(nsys_dir / CLOVER, "SELECT COUNT(*) FROM "
                                          "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert (df["kind"] == "sync").sum() == n_sync


def test_saxpy_runtime_memcpy_nvtx(nsys_dir: Path, saxpy: TraceSet) -> None:
    df = _df(saxpy)
    assert saxpy.rank_ids == [0]  # thread "MPI Rank 0"
    # memcpy names as Kineto spells them, from copyKind/srcKind/dstKind
    got = df[df["kind"] == "memcpy"]["name"].value_counts().to_dict()
    assert got == {"Memcpy HtoD (Pageable -> Device)": 10, "Memcpy DtoH (Device -> Pageable)": 5}
    # runtime: the CUDA runtime/driver rows only (not the backtrace rows of eventClass 67)
    (n_rt,), = _sql(nsys_dir / SAXPY, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                       "WHERE eventClass IN (0, 1)")
    rt = df[df["kind"] == "runtime"]
    assert len(rt) == n_rt == 57
    assert rt["correlation"].is_unique
    assert not any(re.search(r"_v\d+$", s) for s in rt["name"])
    assert rt["name"].value_counts()["cudaMemcpy"] == 15
    # NVTX push/pop ranges, by text or textId
    ann = df[df["kind"] == "annotation"]
    (n_nvtx,), = _sql(nsys_dir / SAXPY, "SELECT COUNT(*) FROM NVTX_EVENTS "
                                         "WHERE eventType = 59 AND end IS NOT NULL")
    assert len(ann) == n_nvtx
    assert ann["name"].value_counts()[["saxpy", "MPI_Send", "MPI_Recv"]].tolist() == [5, 10, 5]


def test_iteration_marker_uses_nvtx(nsys_dir: Path, saxpy: TraceSet) -> None:
    assert saxpy.iterations.num_rows == 1  # no marker: one window, iteration 0
    assert set(saxpy.column("iteration").tolist()) == {0}
    ts = _load(nsys_dir / SAXPY, iteration_marker="saxpy")
    assert ts.iterations.column("iteration").to_pylist() == [0, 1, 2, 3, 4]
    df = _df(ts)
    assert df[df["kind"] == "kernel"]["iteration"].tolist() == [0, 1, 2, 3, 4]


def test_predict_and_analyze(saxpy: TraceSet, clover: TraceSet) -> None:
    for ts, tol in ((saxpy, 0.01), (clover, 2.0)):
        it = traincast.predict(ts).iterations
        assert len(it) == 1
        assert abs(float(it["error_pct"].iloc[0])) < tol, it
    out = traincast.analyze(saxpy, what="breakdown,kernels")
    top = out["top_kernels"]
    assert top["name"].iloc[0] == "Memcpy HtoD (Pageable -> Device)"
    assert "saxpy(double *, double *, double *, double, int)" in set(top["name"])
    assert int(out["breakdown"]["compute_ns"].iloc[0]) == int(
        _df(saxpy).query("kind == 'kernel'")["dur"].sum())


def test_folder_and_ranks_from_names(nsys_dir: Path, tmp_path: Path) -> None:
    shutil.copy(nsys_dir / CLOVER, tmp_path / "rank-1.sqlite")
    shutil.copy(nsys_dir / SAXPY, tmp_path / "saxpy.sqlite")  # "MPI Rank 0" inside
    (tmp_path / "report.nsys-rep").write_bytes(b"not scanned in folders")
    ts = _load(tmp_path)
    assert ts.rank_ids == [0, 1]
    assert ts.ranks[1].path.name == "rank-1.sqlite"


# ------------------------------------------------------------------------------- bad input


def test_truncated_copy(nsys_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes((nsys_dir / SAXPY).read_bytes()[:4096])
    with pytest.raises(TraceFormatError, match="truncated") as exc:
        traincast.load(bad)
    assert "cut.sqlite" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("case", ["not_sqlite", "no_kernel_table", "report"])
def test_not_an_export(tmp_path: Path, case: str) -> None:
    if case == "not_sqlite":
        f = tmp_path / "trace.sqlite"
        f.write_text('{"traceEvents": []}')
        msg = "not an SQLite database"
    elif case == "no_kernel_table":
        f = tmp_path / "cpu_only.sqlite"
        con = sqlite3.connect(f)
        con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        con.commit()
        con.close()
        msg = "no CUPTI_ACTIVITY_KIND_KERNEL table"
    else:
        f = tmp_path / "report1.nsys-rep"
        f.write_bytes(b"\x00" * 64)
        msg = "nsys export --type sqlite"
    with pytest.raises(TraceFormatError, match=msg) as exc:
        traincast.load(f)
    assert str(exc.value).startswith(str(f)) and "\n" not in str(exc.value)


def test_cli_analyze(nsys_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["analyze", str(nsys_dir / SAXPY), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "top_kernels" in out
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes((nsys_dir / CLOVER).read_bytes()[:4096])
    assert main(["analyze", str(bad), "--format", "json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.sqlite" in err[0] and "truncated" in err[0]


# ------------------------------------------------------------------ synthetic 2-process export

_NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
_STRINGS = {1: "gemm_kernel", 2: "void gemm_kernel<float>(float *)", 3: _NCCL,
            4: _NCCL + "(ncclDevKernelArgsStorage<4096UL>)", 5: "cudaLaunchKernel_v7000",
            6: "cudaEventRecord_v3020", 7: "cudaStreamWaitEvent_v3020", 8: "cudaMemsetAsync_v3020",
            9: "step", 10: "MPI Rank 0", 11: "MPI Rank 1"}


def _gid(pid: int, tid: int = 0) -> int:
    """Serialized global id: pid in bits 24..47, tid in 0..23 (plus a hardware id above)."""
    return (1 << 48) | (pid << 24) | tid


def _synthetic(path: Path, mpi_names: bool = False) -> Path:
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
            shortName INTEGER NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
            eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
            nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
            bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL,
            end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
            streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
            syncType INTEGER NOT NULL, eventId INTEGER NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (deviceId INTEGER NOT NULL,
            contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
            globalPid INTEGER, eventId INTEGER NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
            rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
            endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
        CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER,
            globalTid INTEGER);
    """)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", _STRINGS.items())
    # pid 2000 first in every table: ranks follow the OS pid, not table order
    for p, (pid, skew) in enumerate([(2000, 7_000), (1000, 0)]):
        gp, gt = _gid(pid), _gid(pid, pid)
        corr = 10
        for step in range(2):
            t0 = 1_000_000 * (step + 1) + skew
            con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
                        "VALUES (?, ?, 60, NULL, ?)", (t0, t0 + 900_000, gt))
            con.execute("UPDATE NVTX_EVENTS SET textId = 9 WHERE text IS NULL")
            # gemm on stream 7, then the all-reduce on NCCL's stream 13 after a stream wait
            rows = [(t0 + 10_000, 5, corr, t0 + 20_000, 300_000, 7, 2, 1),
                    (t0 + 30_000, 6, corr + 1, None, None, 7, None, None),
                    (t0 + 40_000, 7, corr + 2, None, None, 13, None, None),
                    (t0 + 50_000, 5, corr + 3, t0 + 330_000, 200_000 + 50_000 * p, 13, 4, 3)]
            for ts, name, c, k_ts, k_dur, stream, dem, short in rows:
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES "
                            "(?, ?, 0, ?, ?, ?, 0, NULL)", (ts, ts + 5_000, gt, c, name))
                con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES "  # backtrace row
                            "(?, ?, 67, ?, ?, ?, 0, 1)", (ts - 10, ts + 5_010, gt, c, name))
                if k_ts is not None:
                    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                                "(?, ?, 0, 1, ?, ?, ?, ?, ?)",
                                (k_ts, k_ts + k_dur, stream, c, gp, dem, short))
                elif name == 6:
                    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES "
                                "(0, 1, 7, ?, ?, 42)", (c, gp))
                else:
                    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES "
                                "(?, ?, 0, 1, 13, ?, ?, 2, 42)", (ts + 1_000, ts + 1_500, c, gp))
            corr += 4
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 8, 0, NULL)",
                    (10_000 + skew, 12_000 + skew, gt, 5))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES "
                    "(?, ?, 0, 1, 4294967295, 5, ?, 0, 1024, NULL, 2)",
                    (13_000 + skew, 14_000 + skew, gp))
        if mpi_names:
            con.execute("INSERT INTO ThreadNames VALUES (?, 10, ?)", (10 + p, gt))
    con.commit()
    con.close()
    return path


def test_synthetic_two_processes_nccl(tmp_path: Path) -> None:
    f = _synthetic(tmp_path / "run.sqlite")
    recs = read_nsys(f)
    assert [r.pid for r in recs] == [1000, 2000]
    ts = _load(f, iteration_marker="step")
    assert ts.rank_ids == [0, 1]  # several processes in one file: ranks by OS pid
    df = _df(ts)
    r0 = df[df["rank"] == 0]
    assert set(r0["pid"][r0["device"] < 0]) == {1000}
    assert r0["kind"].value_counts().to_dict() == {
        "runtime": 9, "annotation": 2, "kernel": 2, "collective": 2, "sync": 2, "memset": 1}
    assert set(r0[r0["kind"] == "runtime"]["name"]) == {
        "cudaLaunchKernel", "cudaEventRecord", "cudaStreamWaitEvent", "cudaMemsetAsync"}
    assert set(r0[r0["kind"] == "sync"]["name"]) == {"Stream Wait Event"}
    ms = r0[r0["kind"] == "memset"].iloc[0]
    assert ms["name"] == "Memset (Device)" and ms["stream"] == -1 and ms["op_family"] == "memcpy"
    coll = r0[r0["kind"] == "collective"]
    assert set(coll["name"]) == {_STRINGS[4]} and set(coll["op_family"]) == {"comm"}
    assert coll["iteration"].tolist() == [0, 1]
    # collectives: one per NCCL kernel, the launch as the host call, sizes unknown (0)
    c = ts.collectives.to_pandas()
    assert len(c) == 4 and set(c["collective"]) == {"all_reduce"} and set(c["dtype"]) == {"float"}
    assert (c["in_bytes"] == 0).all() and ts.group_ranks() == [(0, 1)] * 4
    names = ts.events.column("name").to_pylist()
    assert {names[e] for e in c["event"]} == {"cudaLaunchKernel"}
    assert {names[e] for e in c["kernel_event"]} == {_STRINGS[4]}
    matched = match_collectives(ts)
    assert len(matched.groups) == 2 and all(g.size == 2 for g in matched.groups)
    # stream waits: the wait on stream 13 for event 42, recorded on stream 7
    sw = ts.stream_waits.to_pandas()
    assert len(sw) == 4 and set(sw["wait_on_stream"]) == {7}
    assert sorted(sw["record_correlation"]) == [11, 11, 15, 15]  # the cudaEventRecord calls
    assert set(df.loc[sw["event"], "name"]) == {"Stream Wait Event"}
    pred = traincast.predict(ts).iterations
    assert len(pred) == 4 and np.isfinite(pred["error_pct"]).all()


def test_synthetic_mpi_rank_names(tmp_path: Path) -> None:
    f = _synthetic(tmp_path / "run.sqlite", mpi_names=True)
    # pid 2000 names its thread "MPI Rank 0": MPI ranks win over pid order
    recs = read_nsys(f)
    assert {r.pid: r.distributed_info["rank"] for r in recs} == {2000: 0, 1000: 1}
    ts = _load(f)
    assert set(_df(ts).query("rank == 0 and device < 0")["pid"]) == {2000}
