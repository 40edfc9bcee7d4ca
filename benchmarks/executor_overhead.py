"""Wall time of ``traincast.util.executor.map_tasks`` over many small CPU-bound tasks, per executor.

The workload is ``--n`` (default 2000) tasks of about ``--task-ms`` (default 5) ms each: numpy
element-wise work on a 10k-element array (single-threaded ufuncs, so BLAS threads do not get in
the way), calibrated in this process before the run. Every executor gets the same items and
must return the same results as the serial run.

For each executor (serial, process, ray; ray is skipped if not installed):

* *start-up s*: the first ``map_tasks`` call of the process on a trivial function (one chunk per
  item, 4 chunks per worker). It starts the worker pool (forkserver) or the local Ray instance.
* *run s*: then the median of ``--repeat`` timed calls over the real workload, with the pool or
  Ray instance warm (default chunking: 4 chunks per worker).
* *task ms in worker*: the mean wall time of one task where it ran. Above the calibrated time,
  the workers did not get a core each (other processes on the machine): the speed-up is then
  not the executor's.
* *overhead ms / task*: run time x workers / tasks - task ms in worker, i.e. the dispatch cost
  per task (chunking, pickling, IPC, idle tail), which holds even on a busy machine.
* *speed-up*: serial run time / run time, and the same including the start-up.

A second table compares multiprocessing start methods (fork, forkserver, spawn). Each one runs
in a fresh interpreter that first imports ``traincast.trace.load`` (pandas, pyarrow, numpy), as
a planner or ingestion process would, and times: the first ``ProcessPoolExecutor`` (start-up of
the pool and of the forkserver, up to the first result of every worker), a second pool in the
same process, and the round trip of one tiny chunk on a warm pool (mean over 200).

Run: ``python benchmarks/executor_overhead.py [--n 2000] [--task-ms 5] [--workers W]
[--repeat 1] [--executors serial,process,ray] [--no-start-methods] [--json-out OUT.json]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state  # noqa: E402  (shared benchmark helpers)

sys.path.insert(0, str(REPO))
from traincast.util.executor import EXECUTORS, map_tasks, shutdown  # noqa: E402

START_METHODS = ("fork", "forkserver", "spawn")


def cpu_task(item: tuple[int, int]) -> tuple[float, float]:
    """About ``k`` x 0.1 ms of single-threaded numpy work, seeded by the item.

    Returns the result and the wall time the task took where it ran: a task much slower in a
    worker than in the calibration means the workers did not get a core each.
    """
    t0 = time.perf_counter()
    seed, k = item
    x = np.random.default_rng(seed).standard_normal(10_000)
    for _ in range(k):
        x = np.sin(x) + 0.5 * np.cos(x)
    return float(x.sum()), time.perf_counter() - t0


def noop(x: int) -> int:
    return x


def calibrate(task_ms: float) -> tuple[int, float]:
    """The loop count ``k`` that makes one task take about ``task_ms`` here, and its time."""
    k = 40
    for attempt in range(3):
        cpu_task((0, k))
        measured = statistics.median(cpu_task((seed, k))[1] for seed in range(15)) * 1e3
        if attempt == 2:
            break
        k = max(1, round(k * task_ms / measured))
    return k, measured


def bench_executor(name: str, items: list[tuple[int, int]], workers: int, repeat: int,
                   reference: list[float] | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    if name != "serial":
        map_tasks(noop, range(4 * workers), executor=name, workers=workers, chunksize=1)
    startup = time.perf_counter() - t0
    runs = []
    out: list[tuple[float, float]] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = map_tasks(cpu_task, items, executor=name, workers=workers)
        runs.append(time.perf_counter() - t0)
    result = [value for value, _ in out]
    if reference is not None and result != reference:
        raise SystemExit(f"{name}: results differ from the serial run")
    return {"executor": name, "startup_s": startup, "run_s": statistics.median(runs),
            "runs_s": runs, "task_ms_where_run": statistics.mean(t for _, t in out) * 1e3,
            "result": result}


START_CHILD = r"""
import json, multiprocessing as mp, sys, time
from concurrent.futures import ProcessPoolExecutor
import traincast.trace.load  # pandas, pyarrow, numpy: a realistic parent

def ident(x):
    return x

def pool_start(ctx, workers):
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
        list(ex.map(ident, range(workers)))   # first result of every worker
        up = time.perf_counter() - t0
        t1 = time.perf_counter()
        for i in range(200):
            ex.submit(ident, [i]).result()
        rtt = (time.perf_counter() - t1) / 200
    return up, rtt

if __name__ == "__main__":
    method, workers = sys.argv[1], int(sys.argv[2])
    ctx = mp.get_context(method)
    first, rtt = pool_start(ctx, workers)
    second, _ = pool_start(ctx, workers)
    print(json.dumps({"method": method, "first_pool_s": first, "second_pool_s": second,
                      "chunk_rtt_s": rtt}))
"""


def bench_start_methods(workers: int) -> list[dict[str, Any]]:
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "start_child.py"
        script.write_text(START_CHILD)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        for method in START_METHODS:
            cp = subprocess.run([sys.executable, str(script), method, str(workers)],
                                capture_output=True, text=True, timeout=300, env=env)
            if cp.returncode != 0:
                rows.append({"method": method, "error": cp.stderr.strip().splitlines()[-1:]})
                continue
            rows.append(json.loads(cp.stdout.strip().splitlines()[-1]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="number of tasks (default 2000)")
    ap.add_argument("--task-ms", type=float, default=5.0, help="target ms per task (default 5)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="workers for process and ray (default: os.cpu_count())")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per executor (median)")
    ap.add_argument("--executors", default=",".join(("serial", "process", "ray")),
                    help="comma-separated subset of serial,process,ray")
    ap.add_argument("--no-start-methods", action="store_true",
                    help="skip the fork/forkserver/spawn comparison")
    ap.add_argument("--json-out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    console = Console()

    names = [e for e in args.executors.split(",") if e]
    for e in names:
        if e not in EXECUTORS:
            ap.error(f"unknown executor {e!r}")
    if "serial" not in names:
        names.insert(0, "serial")  # the reference for results and speed-ups
    if "ray" in names:
        try:
            import ray
        except ImportError:
            console.print("ray is not installed: skipping --executor ray "
                          "(pip install 'traincast[ray]')")
            names.remove("ray")
        else:
            ray_version = ray.__version__

    load_before = os.getloadavg()
    k, task_ms = calibrate(args.task_ms)
    items = [(i, k) for i in range(args.n)]
    console.print(f"{args.n} tasks of ~{task_ms:.2f} ms (k={k}), workers={args.workers}, "
                  f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
                  f"numpy {np.__version__}" + (f", ray {ray_version}" if "ray" in names else ""))

    rows: list[dict[str, Any]] = []
    reference = None
    try:
        for name in names:
            row = bench_executor(name, items, args.workers, args.repeat, reference)
            if name == "serial":
                reference = row["result"]
            rows.append(row)
            console.print(f"  {name}: start-up {row['startup_s']:.2f} s, run {row['run_s']:.2f} s")
    finally:
        shutdown()

    load_after = os.getloadavg()
    console.print(f"load average (1, 5, 15 min) before {load_before[0]:.2f} "
                  f"{load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} "
                  f"{load_after[1]:.2f} {load_after[2]:.2f}: other busy processes on the machine "
                  "distort the speed-ups")
    serial = rows[0]["run_s"]
    table = Table(title=f"map_tasks over {args.n} tasks of ~{task_ms:.1f} ms")
    for col in ("executor", "start-up s", "run s", "task ms in worker", "overhead ms / task",
                "speed-up", "speed-up incl. start-up"):
        table.add_column(col, justify="left" if col == "executor" else "right")
    for row in rows:
        row["speedup"] = serial / row["run_s"]
        row["speedup_incl_startup"] = serial / (row["startup_s"] + row["run_s"])
        slots = 1 if row["executor"] == "serial" else args.workers
        row["overhead_ms_per_task"] = (row["run_s"] * slots / args.n * 1e3
                                       - row["task_ms_where_run"])
        table.add_row(row["executor"], f"{row['startup_s']:.2f}", f"{row['run_s']:.2f}",
                      f"{row['task_ms_where_run']:.2f}", f"{row['overhead_ms_per_task']:.3f}",
                      f"{row['speedup']:.2f}x",
                      f"{row['speedup_incl_startup']:.2f}x")
    console.print(table)

    methods: list[dict[str, Any]] = []
    if not args.no_start_methods:
        methods = bench_start_methods(args.workers)
        mt = Table(title=f"ProcessPoolExecutor({args.workers}) start-up, parent imports "
                         "pandas/pyarrow")
        for col in ("start method", "first pool ms", "second pool ms", "chunk round trip ms"):
            mt.add_column(col, justify="left" if col == "start method" else "right")
        for m in methods:
            if "error" in m:
                mt.add_row(m["method"], "error", " ".join(m["error"]), "")
                continue
            mt.add_row(m["method"], f"{m['first_pool_s'] * 1e3:.0f}",
                       f"{m['second_pool_s'] * 1e3:.0f}", f"{m['chunk_rtt_s'] * 1e3:.3f}")
        console.print(mt)

    if args.json_out:
        out = {
            "benchmark": "executor_overhead",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git": git_state(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "n": args.n, "task_ms": task_ms, "k": k, "workers": args.workers,
            "repeat": args.repeat, "loadavg_before": load_before, "loadavg_after": load_after,
            "executors": [{key: v for key, v in r.items() if key != "result"} for r in rows],
            "start_methods": methods,
        }
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
        console.print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
