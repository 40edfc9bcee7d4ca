"""Scale test: wall time and peak memory of ``traincast analyze`` / ``traincast predict`` (and
HTA where it runs) on 8 to 4,096 ranks, and how they grow with the number of events.

Inputs: for each size N, ``make_scale_traces.py`` clones the ranks of the real DLRM 8x V100
set (``../shared/data/traces/dlrm_8xv100/kineto``) to N ranks (world-group collectives with N
members, per-node clock offsets, 2 % lognormal jitter on GPU compute ops; see its docstring)
into ``--work-dir/N`` (kept and reused when the generator parameters match).

Measurements, one FRESH subprocess each, run one after another (never in parallel):

* ``analyze``: the ``traincast analyze DIR --format json --out /dev/null`` path in-process:
  ``traincast.load(DIR)``; ``traincast.predict(ts)``; ``traincast.analyze(ts, name,
  prediction=pred)`` for each analysis in ``traincast.analysis.ANALYSES``, each timed; then
  ``tables_to_json`` + ``orjson.dumps`` as the CLI does (written nowhere).
* ``predict``: ``traincast.load(DIR)``; ``traincast.predict(ts)``; ``pred.summary`` and
  ``pred.notes`` (what ``traincast predict`` prints; computes the predicted timeline and the
  per-iteration table).
* ``per_rank``: ``traincast analyze --per-rank`` (breakdown and kernels) in-process:
  ``traincast.analysis.per_rank.analyze_per_rank(DIR)`` with the serial executor, which holds
  one rank's TraceSet at a time, then the JSON as above. Its analyses are the rank-local ones,
  so it is the like-for-like comparison with HTA's temporal breakdown below; its peak memory
  shows the bound of one rank's trace. ``events`` is taken from the analyze/predict runs.
* ``per_rank_pool``: the same with ``executor="process"`` (one worker per core, each holding
  one rank at a time; memory is the process tree).
* ``hta`` (under ``--hta-python``, HTA 0.5.0 in ``/work/venvs/hta``):
  ``TraceAnalysis(trace_dir=DIR)`` then ``get_temporal_breakdown(visualize=False)``.
  HTA parses the rank files with a process pool; its memory is the whole process tree.

traincast's parse cache (``traincast.trace.cache``, ``TRAINCAST_CACHE_DIR``) is set per child
by ``--cache``: ``cold`` (default) gives every run a fresh empty cache folder, so ``load`` parses
every file and writes the cache (what a first run costs); ``warm`` primes a cache folder per
size with one unmeasured ``traincast.load`` and lets the runs hit it (the per-file entries and
the whole-job entry of the assembled TraceSet: a warm ``load`` reads one file); ``off``
disables it. For
more than ~256 MiB of (estimated) JSON, ``traincast.load`` parses files in worker processes,
so its memory is the process tree too. HTA has no such cache.

Each child prints one JSON line per finished step (so a run killed by a cap still reports
how far it got). Reported per run:

* wall s: the child's own time from before its imports to its last step (interpreter start-up
  excluded); per-step times (load, predict, each analysis, json).
* peak MiB: the larger of ``ru_maxrss`` of the child (its own peak, exact) and the peak
  summed RSS of the child's process tree (worker processes of HTA or of a parallel
  ``traincast.load`` included), sampled from ``/proc`` every 0.2 s by this script (a sampled
  lower bound of the true peak). The JSON also keeps ``ru_maxrss`` of the child's children.
* events: rows of traincast's events table (for HTA: rows of its per-rank frames).
* growth exponent between consecutive sizes: ``log(t2 / t1) / log(e2 / e1)`` with ``e`` the
  events, for wall time and for peak RSS (1.0 = linear in events).

Caps: ``--timeout`` (default 1200 s) and ``--mem-cap-gib`` (default 16) per child; a child
past either is killed (its process group, which this script created) and recorded as "did
not finish" with the reason and the last step it finished.

Run: ``python benchmarks/scale.py --sizes 8,64,256,1024 [--what analyze,predict,hta]
[--hta-venv /work/venvs/hta/bin/python] [--json-out [FILE]]``. ``--json-out`` without a file
writes ``benchmarks/results/scale.json``. Exit code 0 when the benchmark ran (a run that did
not finish is reported, not an error); 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, hta_available  # noqa: E402  (shared benchmark helpers)
from as_typed import tree_rss  # noqa: E402  (the process-tree sampler, shared)
from make_scale_traces import DEFAULT_SOURCE, generate  # noqa: E402

DEFAULT_HTA_PY = Path("/work/venvs/hta/bin/python")
DEFAULT_JSON = REPO / "benchmarks" / "results" / "scale.json"
TAG = "@@SCALE@@"
KINDS = ("analyze", "predict", "per_rank", "per_rank_pool", "hta")
MEMORY_TARGET_GIB = 8.0

_CHILD_COMMON = r'''
import json, resource, sys, time, warnings
t_start = time.perf_counter()
path, tag = sys.argv[1], sys.argv[2]
warnings.simplefilter("ignore")
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
def emit(step, t, **kw):
    d = {"step": step, "s": time.perf_counter() - t, "peak_rss": peak(),
         "at_s": time.perf_counter() - t_start,
         "children_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}
    d.update(kw)
    sys.stdout.write("\n" + tag + json.dumps(d) + "\n")
    sys.stdout.flush()
'''

TC_ANALYZE = _CHILD_COMMON + r'''
t = time.perf_counter()
import orjson, traincast
from traincast.analysis import ANALYSES
from traincast.report.tables import tables_to_json
emit("import", t)
t = time.perf_counter()
ts = traincast.load(path)
emit("load", t, events=ts.events.num_rows, collectives=ts.collectives.num_rows,
     ranks=len(ts.ranks))
t = time.perf_counter()
pred = traincast.predict(ts)
emit("predict", t, **{k: float(v) for k, v in pred.elapsed_s.items()})
tables = {}
for name in ANALYSES:
    t = time.perf_counter()
    tables.update(traincast.analyze(ts, name, prediction=pred))
    emit(name, t)
t = time.perf_counter()
data = orjson.dumps(tables_to_json(tables), option=orjson.OPT_INDENT_2
                    | orjson.OPT_SERIALIZE_NUMPY)
emit("json", t, bytes=len(data))
emit("done", t_start)
'''

TC_PREDICT = _CHILD_COMMON + r'''
t = time.perf_counter()
import traincast, traincast.predict.prediction, traincast.trace.load  # the lazy API's real imports
emit("import", t)
t = time.perf_counter()
ts = traincast.load(path)
emit("load", t, events=ts.events.num_rows, collectives=ts.collectives.num_rows,
     ranks=len(ts.ranks))
t = time.perf_counter()
pred = traincast.predict(ts)
emit("predict", t, **{k: float(v) for k, v in pred.elapsed_s.items()})
t = time.perf_counter()
s = pred.summary
notes = pred.notes
emit("summary", t, mape_pct=s["mape_pct"], max_ape_pct=s["max_ape_pct"],
     unmatched=int(pred.graph.unmatched_collectives.size), notes=notes[:5])
emit("done", t_start)
'''

TC_PER_RANK = _CHILD_COMMON + r'''
t = time.perf_counter()
import orjson, traincast
from traincast.analysis.per_rank import analyze_per_rank
from traincast.report.tables import tables_to_json
emit("import", t)
t = time.perf_counter()
tables = analyze_per_rank(path, executor=EXECUTOR)  # one rank's TraceSet per process
emit("per_rank", t, ranks=int(len(tables["breakdown_by_rank"])),
     ops=int(tables["op_breakdown"]["count"].sum()))
t = time.perf_counter()
data = orjson.dumps(tables_to_json(tables), option=orjson.OPT_INDENT_2
                    | orjson.OPT_SERIALIZE_NUMPY)
emit("json", t, bytes=len(data))
emit("done", t_start)
'''

PRIME_CHILD = _CHILD_COMMON + r'''
import traincast
t = time.perf_counter()
ts = traincast.load(path)
emit("load", t, events=ts.events.num_rows)
emit("done", t_start)
'''

HTA_CHILD = _CHILD_COMMON + r'''
import logging
logging.disable(logging.CRITICAL)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
emit("import", t)
t = time.perf_counter()
a = TraceAnalysis(trace_dir=path)
emit("load", t, ranks=len(a.t.traces), events=int(sum(len(df) for df in a.t.traces.values())))
t = time.perf_counter()
tb = a.get_temporal_breakdown(visualize=False)
emit("get_temporal_breakdown", t, rows=int(len(tb)))
emit("done", t_start)
'''

PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int) -> int:
    """Summed RSS (bytes) of ``root`` and its descendants (:func:`as_typed.tree_rss`)."""
    return tree_rss(root)


def run_child(python: str, code: str, path: Path, *, timeout: float,
              mem_cap: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh process (own session); poll its tree's RSS."""
    out_f = tempfile.TemporaryFile()
    err_f = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen([python, "-c", code, str(path), TAG], stdout=out_f, stderr=err_f,
                         cwd=tempfile.gettempdir(), start_new_session=True,
                         env={**os.environ, **(env or {})})
    tree_peak = 0
    killed = None
    while p.poll() is None:
        rss = _tree_rss(p.pid)
        tree_peak = max(tree_peak, rss)
        elapsed = time.perf_counter() - t0
        if rss > mem_cap:
            killed = f"memory cap: process tree at {rss / 2**30:.1f} GiB > {mem_cap / 2**30:.1f} GiB"
        elif elapsed > timeout:
            killed = f"time cap: still running after {timeout:g} s"
        if killed:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the session this script started for it
            except ProcessLookupError:
                pass
            p.wait()
            break
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    out_f.seek(0)
    err_f.seek(0)
    stdout = out_f.read().decode(errors="replace")
    stderr = err_f.read().decode(errors="replace")
    steps: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        if line.startswith(TAG):
            steps.append(json.loads(line[len(TAG):]))
    res: dict[str, Any] = {"process_wall_s": wall, "tree_peak_rss": tree_peak,
                           "returncode": p.returncode, "steps": steps}
    done = [s for s in steps if s["step"] == "done"]
    if killed:
        res["error"] = killed
    elif not done:
        tail = " | ".join((stderr or stdout).strip().splitlines()[-4:])
        res["error"] = f"exit {p.returncode}: {tail[-600:]}"
    res["finished"] = bool(done) and not killed
    if steps:
        res["last_step"] = steps[-1]["step"] if not done else "done"
        res["peak_rss"] = max(s["peak_rss"] for s in steps)
        res["wall_s"] = done[0]["s"] if done else None
    if not res["finished"]:
        res["wall_s"] = None  # did not finish: process_wall_s says how long it ran
    ev = [s.get("events") for s in steps if s.get("events") is not None]
    res["events"] = ev[0] if ev else None
    ch = [s.get("children_peak_rss", 0) for s in steps]
    res["children_peak_rss"] = max(ch) if ch else 0
    res["step_s"] = {s["step"]: s["s"] for s in steps if s["step"] not in ("done",)}
    return res


def growth(rows: list[dict[str, Any]], key: str) -> None:
    """Set ``<key>_exp`` on each row: log ratio of ``key`` over log ratio of events, against
    the previous finished row of the same measurement."""
    prev = None
    for r in rows:
        r[f"{key}_exp"] = None
        v, e = r.get(key), r.get("events")
        if not r.get("finished") or not v or not e:
            continue
        if prev is not None and e != prev[1] and prev[0] > 0:
            r[f"{key}_exp"] = math.log(v / prev[0]) / math.log(e / prev[1])
        prev = (v, e)


def ensure_traces(n: int, work: Path, seed: int, console) -> dict[str, Any]:
    d = work / str(n)
    stamp = d / ".scale-params.json"
    params = {"ranks": n, "seed": seed, "source": str(DEFAULT_SOURCE), "sigma": 0.02,
              "clock_skew_us": 5000.0, "generator_mtime": (Path(__file__).parent
                                                          / "make_scale_traces.py").stat().st_mtime}
    if stamp.exists():
        old = json.loads(stamp.read_text())
        if {k: old.get(k) for k in params} == params:
            return old
    console.print(f"generating {n} ranks into {d} ...")
    shutil.rmtree(d, ignore_errors=True)
    s = generate(n, d, seed=seed)
    s.update(params)
    stamp.write_text(json.dumps(s))
    return s


def mib(x: float | None) -> str:
    return "n/a" if not x else f"{x / 2**20:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,64,256,1024", help="rank counts (comma-separated)")
    ap.add_argument("--what", default=",".join(KINDS),
                    help="measurements: " + ", ".join(KINDS))
    ap.add_argument("--hta-venv", "--hta-python", dest="hta_python", default=None,
                    help=f"interpreter with HTA (default {DEFAULT_HTA_PY} if it exists)")
    ap.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "traincast_scale",
                    help="where the generated trace sets go (kept, reused)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", choices=("cold", "warm", "off"), default="cold",
                    help="traincast's parse cache: cold = a fresh empty cache per run (parse "
                         "+ cache write; default), warm = primed by an unmeasured load, "
                         "off = TRAINCAST_CACHE_DIR=off")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per child (20 min)")
    ap.add_argument("--mem-cap-gib", type=float, default=16.0, help="GiB per child tree")
    ap.add_argument("--json-out", nargs="?", type=Path, const=DEFAULT_JSON, default=None,
                    help=f"write the figures as JSON (default file {DEFAULT_JSON})")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 170)
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        ap.error("--sizes: comma-separated integers")
    if not sizes or min(sizes) < 1:
        ap.error("--sizes: positive integers")
    what = [w.strip() for w in args.what.split(",") if w.strip()]
    if any(w not in KINDS for w in what):
        ap.error(f"--what: choose from {', '.join(KINDS)}")
    notes: list[str] = []
    hta_py = args.hta_python or (str(DEFAULT_HTA_PY) if DEFAULT_HTA_PY.exists() else None)
    hta_version = None
    if "hta" in what:
        ok, msg = hta_available(hta_py) if hta_py else (False, "no HTA interpreter given")
        if ok:
            hta_version = msg
        else:
            what.remove("hta")
            notes.append(f"HTA unavailable ({msg}); skipped")
            console.print(f"[yellow]{notes[-1]}[/yellow]")
    import traincast

    commit = git_state()
    mem_cap = int(args.mem_cap_gib * 2**30)
    console.print(f"traincast {traincast.__version__} at {commit}; HTA {hta_version}; "
                  f"parse cache {args.cache}; "
                  f"{os.cpu_count()} CPUs, "
                  f"{os.sysconf('SC_PHYS_PAGES') * PAGE / 2**30:.1f} GiB RAM; load avg "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    gen: dict[int, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for n in sorted(sizes):
        gen[n] = ensure_traces(n, args.work_dir, args.seed, console)
        d = args.work_dir / str(n)
        warm_dir = args.work_dir / f"cache-{n}"
        if args.cache == "warm" and any(w != "hta" for w in what):
            shutil.rmtree(warm_dir, ignore_errors=True)
            console.print(f"{n} ranks: priming the parse cache in {warm_dir} (not measured)")
            prime = run_child(sys.executable, PRIME_CHILD, d, timeout=args.timeout,
                              mem_cap=mem_cap, env={"TRAINCAST_CACHE_DIR": str(warm_dir)})
            if not prime["finished"]:
                notes.append(f"{n} ranks: priming the cache failed: {prime.get('error')}")
        for w in what:
            py = hta_py if w == "hta" else sys.executable
            code = {"analyze": TC_ANALYZE, "predict": TC_PREDICT,
                    "per_rank": TC_PER_RANK.replace("EXECUTOR", '"serial"'),
                    "per_rank_pool": TC_PER_RANK.replace("EXECUTOR", '"process"'),
                    "hta": HTA_CHILD}[w]
            cold_dir = None
            if args.cache == "off":
                env = {"TRAINCAST_CACHE_DIR": "off"}
            elif args.cache == "warm":
                env = {"TRAINCAST_CACHE_DIR": str(warm_dir)}
            else:  # cold: a fresh, empty cache per run (parse + cache write, a first run)
                cold_dir = Path(tempfile.mkdtemp(prefix="scale_cache_", dir=args.work_dir))
                env = {"TRAINCAST_CACHE_DIR": str(cold_dir)}
            load_before = os.getloadavg()[0]
            console.print(f"{n} ranks, {w}: running (load avg {load_before:.2f}) ...")
            try:
                r = run_child(py, code, d, timeout=args.timeout, mem_cap=mem_cap, env=env)
            finally:
                if cold_dir is not None:
                    shutil.rmtree(cold_dir, ignore_errors=True)
            r.update({"ranks": n, "what": w, "loadavg_before": load_before,
                      "loadavg_after": os.getloadavg()[0],
                      "disk_bytes": gen[n]["bytes_on_disk"]})
            r["peak_mem"] = max(r.get("peak_rss") or 0, r.get("tree_peak_rss") or 0)
            rows.append(r)
            status = ("ok" if r["finished"] else f"[red]did not finish: {r.get('error')} "
                      f"(last step: {r.get('last_step')})[/red]")
            wall = r["wall_s"] if r["finished"] else r["process_wall_s"]
            console.print(f"  {status}; wall {wall:.1f} s, peak "
                          f"{mib(r['peak_mem'])} MiB; steps "
                          + ", ".join(f"{k} {v:.2f}" for k, v in r["step_s"].items()))

    # per_rank never holds the whole job: its events are those the other runs counted
    events_of = {r["ranks"]: r["events"] for r in rows if r.get("events") and r["what"] in (
        "analyze", "predict")}
    for r in rows:
        if r["what"].startswith("per_rank") and not r.get("events"):
            r["events"] = events_of.get(r["ranks"])
    by_what: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_what.setdefault(r["what"], []).append(r)
    for lst in by_what.values():
        lst.sort(key=lambda r: r["ranks"])
        growth(lst, "wall_s")
        growth(lst, "peak_mem")
        for r in lst:  # the work after loading, for traincast
            r["after_load_s"] = (r["wall_s"] - r["step_s"].get("load", 0)
                                 - r["step_s"].get("import", 0)) if r["finished"] else None
        growth(lst, "after_load_s")

    table = Table(title="Scale: wall time and peak memory per fresh process "
                        "(growth exponent = dlog(value)/dlog(events), 1 = linear)")
    for c in ("ranks", "what", "events", "disk MiB", "wall s", "load s", "after load s",
              "peak MiB", "exp wall", "exp after load", "exp mem", "load avg", "status"):
        table.add_column(c, justify="left" if c in ("what", "status") else "right")
    for r in sorted(rows, key=lambda r: (r["ranks"], KINDS.index(r["what"]))):
        def f(x: Any, nd: int = 2) -> str:
            return "n/a" if x is None else f"{x:.{nd}f}"
        table.add_row(
            str(r["ranks"]), r["what"], f"{r['events']:,}" if r.get("events") else "n/a",
            f"{r['disk_bytes'] / 2**20:.1f}",
            f(r.get("wall_s"), 1) if r["finished"] else f"> {r['process_wall_s']:.1f}",
            f(r["step_s"].get("load"), 1), f(r.get("after_load_s"), 1), mib(r["peak_mem"]),
            f(r.get("wall_s_exp")), f(r.get("after_load_s_exp")), f(r.get("peak_mem_exp")),
            f"{r['loadavg_before']:.1f}",
            "ok" if r["finished"] else f"DNF: {r.get('error', '')[:40]} @ {r.get('last_step')}")
    console.print(table)

    steps = Table(title="traincast analyze: seconds per step")
    names: list[str] = []
    for r in by_what.get("analyze", []):
        for k in r["step_s"]:
            if k not in names:
                names.append(k)
    steps.add_column("ranks", justify="right")
    for k in names:
        steps.add_column(k, justify="right")
    for r in by_what.get("analyze", []):
        steps.add_row(str(r["ranks"]), *[f"{r['step_s'][k]:.2f}" if k in r["step_s"] else "-"
                                          for k in names])
    if names:
        console.print(steps)

    biggest = [r for r in rows if r["what"] != "hta" and r["finished"]]
    verdict = {}
    if biggest:
        top = max(r["ranks"] for r in biggest)
        verdict = {"largest_finished_ranks": top,
                   "peak_gib_at_largest": {r["what"]: r["peak_mem"] / 2**30
                                           for r in biggest if r["ranks"] == top},
                   "memory_target_gib": MEMORY_TARGET_GIB}
        console.print(f"largest size finished by traincast: {top} ranks; peak "
                      + ", ".join(f"{w} {v:.2f} GiB" for w, v in
                                  verdict["peak_gib_at_largest"].items())
                      + f" (target < {MEMORY_TARGET_GIB:g} GiB at 1,024 ranks)")

    if args.json_out:
        doc = {"benchmark": "scale", "date": dt.datetime.now().isoformat(timespec="seconds"),
               "git": commit, "traincast_version": traincast.__version__,
               "hta_python": hta_py, "hta_version": hta_version,
               "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                           "ram_gib": os.sysconf("SC_PHYS_PAGES") * PAGE / 2**30},
               "caps": {"timeout_s": args.timeout, "mem_cap_gib": args.mem_cap_gib},
               "cache": args.cache,
               "generated": {str(k): v for k, v in gen.items()}, "rows": rows,
               "verdict": verdict, "notes": notes}
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
