"""Parse speed and peak memory of Kineto trace loaders, side by side, in one run.

Loaders compared on the same gzipped Kineto trace (default
``../shared/data/traces/hta/v100_2rank_allreduce/rank-1.json.gz``, 54 MB of JSON, 216k events):

* ``hta``              HolisticTraceAnalysis ``TraceAnalysis(trace_dir=...)`` (own venv)
* ``traincast.read``   ``traincast.trace.readers.kineto.read_kineto(path)`` (one rank's events)
* ``traincast.load``   ``traincast.load(path)`` (TraceSet with iterations and collectives)
* ``orjson``           ``orjson.loads(gzip.decompress(bytes))``
* ``json``             stdlib ``json.loads(gzip.decompress(bytes))``

Every measurement runs in a fresh subprocess, so each peak RSS belongs to one loader. Inside
the child, ``time.perf_counter`` brackets the imports and, separately, the load call (for the
two bare-JSON baselines the timed call includes reading the file and gunzip, as the other
loaders do). The child prints ``ru_maxrss`` after the imports and at the end.

Run: ``python benchmarks/parse_speed.py [--file F] [--repeat N] [--json-out OUT.json]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, check_hta, git_state, machine  # noqa: E402  (shared benchmark helpers)

DATA = REPO.parent / "shared" / "data"
DEFAULT_FILE = DATA / "traces" / "hta" / "v100_2rank_allreduce" / "rank-1.json.gz"
DEFAULT_HTA_VENV_PY = Path("/work/venvs/hta/bin/python")

#: project targets for traincast against HTA
TARGET_SPEEDUP = 8.0  # HTA time / traincast time >= 8
TARGET_MEM_RATIO = 0.25  # traincast peak RSS / HTA peak RSS <= 1/4

LOADERS = ["hta", "traincast.read", "traincast.load", "orjson", "json"]
LABELS = {
    "hta": "HTA TraceAnalysis",
    "traincast.read": "traincast read_kineto",
    "traincast.load": "traincast.load",
    "orjson": "orjson.loads(gunzip)",
    "json": "json.loads(gunzip)",
}
TRAINCAST = ("traincast.read", "traincast.load")

RESULT_TAG = "@@PARSE_SPEED_RESULT@@"

# The child program: stdlib only at top level, so it runs under HTA's own interpreter too.
CHILD = r'''
import gc, json, resource, sys, time, warnings
loader, path, trace_dir, tag = sys.argv[1:5]
warnings.simplefilter("ignore")

def maxrss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

def children_maxrss_kb():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss

t0 = time.perf_counter()
if loader == "hta":
    import importlib.metadata
    import logging
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    version = importlib.metadata.version("HolisticTraceAnalysis")

    def run():
        a = TraceAnalysis(trace_dir=trace_dir)
        n = sum(len(df) for df in a.t.traces.values())
        return a, n, f"{len(a.t.traces)} rank(s), {n} rows in HTA's trace DataFrame"
elif loader == "traincast.read":
    import traincast
    from traincast.trace.readers.kineto import read_kineto
    version = traincast.__version__

    def run():
        k = read_kineto(path)
        n = k.events.num_rows
        return k, n, f"{n} events, {k.comm_args.num_rows} comm-arg rows"
elif loader == "traincast.load":
    import traincast
    load = traincast.load  # public API; imports traincast.trace.load
    version = traincast.__version__

    def run():
        ts = load(path)
        n = ts.events.num_rows
        return ts, n, (f"{n} events, {ts.iterations.num_rows} iterations, "
                       f"{ts.collectives.num_rows} collectives")
elif loader in ("orjson", "json"):
    import gzip
    if loader == "orjson":
        import orjson
        loads = orjson.loads
        version = orjson.__version__
    else:
        loads = json.loads
        version = "stdlib " + sys.version.split()[0]

    def run():
        with open(path, "rb") as f:
            raw = f.read()
        text = gzip.decompress(raw) if path.endswith(".gz") else raw
        del raw
        obj = loads(text)
        del text
        n = len(obj.get("traceEvents", []))
        return obj, n, f"{n} traceEvents"
else:
    raise SystemExit(f"unknown loader {loader}")
t1 = time.perf_counter()
gc.collect()
rss_after_import = maxrss_kb()
t2 = time.perf_counter()
keep, rows, detail = run()
t3 = time.perf_counter()
rss_peak = maxrss_kb()
out = {"loader": loader, "version": version, "import_s": t1 - t0, "load_s": t3 - t2,
       "rss_after_import_kb": rss_after_import, "peak_rss_kb": rss_peak,
       "children_peak_rss_kb": children_maxrss_kb(), "rows": rows, "detail": detail,
       "python": sys.version.split()[0]}
sys.stdout.write("\n" + tag + json.dumps(out) + "\n")
sys.stdout.flush()
'''


def run_child(python: str, loader: str, path: Path, trace_dir: Path,
              timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; return its result or an ``error``."""
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    cmd = [python, "-c", CHILD, loader, str(path), str(trace_dir), RESULT_TAG]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                            cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"loader": loader, "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(cp.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = (cp.stderr or cp.stdout).strip().splitlines()[-6:]
    return {"loader": loader, "error": f"exit {cp.returncode}: " + " | ".join(tail)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"ok": False, "runs": len(runs), "errors": [r["error"] for r in runs]}
    load = [r["load_s"] for r in ok]
    imp = [r["import_s"] for r in ok]
    peak = [r["peak_rss_kb"] / 1024 for r in ok]
    delta = [(r["peak_rss_kb"] - r["rss_after_import_kb"]) / 1024 for r in ok]
    return {
        "ok": True, "runs": len(runs), "ok_runs": len(ok),
        "errors": [r["error"] for r in runs if "error" in r],
        "version": ok[0]["version"], "python": ok[0]["python"],
        "rows": ok[0]["rows"], "detail": ok[0]["detail"],
        "load_s_best": min(load), "load_s_median": statistics.median(load),
        "import_s_median": statistics.median(imp),
        "peak_rss_mib_best": min(peak), "peak_rss_mib_median": statistics.median(peak),
        "rss_delta_mib_best": min(delta), "rss_delta_mib_median": statistics.median(delta),
        "children_peak_rss_mib_max": max(r["children_peak_rss_kb"] for r in ok) / 1024,
    }




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE,
                    help="Kineto trace (.json or .json.gz) (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="fresh processes per loader (default: %(default)s)")
    ap.add_argument("--hta-python", default=None,
                    help=f"interpreter with HolisticTraceAnalysis installed (default: "
                         f"{DEFAULT_HTA_VENV_PY} if it exists, else this interpreter)")
    ap.add_argument("--loaders", default=",".join(LOADERS),
                    help="comma-separated subset of: " + ", ".join(LOADERS))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per child process")
    ap.add_argument("--json-out", type=Path, default=None, help="write the figures as JSON")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    path = args.file.resolve()
    if not path.is_file():
        console.print(f"[red]no such trace file: {path}[/red]")
        return 2
    if args.repeat < 1:
        console.print("[red]--repeat must be >= 1[/red]")
        return 2
    loaders = [x.strip() for x in args.loaders.split(",") if x.strip()]
    unknown = set(loaders) - set(LOADERS)
    if unknown:
        console.print(f"[red]unknown loader(s): {', '.join(sorted(unknown))}[/red]")
        return 2
    hta_py = args.hta_python or (str(DEFAULT_HTA_VENV_PY) if DEFAULT_HTA_VENV_PY.exists()
                                 else sys.executable)
    notes: list[str] = []
    hta_version = None
    if "hta" in loaders:
        hta_version = check_hta(hta_py, console, notes, "running the other loaders only")
        if hta_version is None:
            loaders.remove("hta")

    size = path.stat().st_size
    commit = git_state()
    console.print(f"traincast at {commit}")
    console.print(f"file {path} ({size / 1e6:.1f} MB on disk); {args.repeat} fresh process(es) "
                  f"per loader, interleaved; load avg at start {os.getloadavg()[0]:.2f}")
    tmp = Path(tempfile.mkdtemp(prefix="parse_speed_"))
    trace_dir = tmp / "trace"  # HTA wants a folder: one symlink (a copy if links fail)
    trace_dir.mkdir()
    link = trace_dir / path.name
    try:
        link.symlink_to(path)
    except OSError:
        shutil.copy2(path, link)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in loaders}
    load_start = os.getloadavg()[0]
    try:
        for i in range(args.repeat):  # round-robin, so background load hits all alike
            for name in loaders:
                py = hta_py if name == "hta" else sys.executable
                r = run_child(py, name, path, trace_dir, args.timeout)
                r["repeat"] = i
                runs[name].append(r)
                if "error" in r:
                    console.print(f"  [red]{name} run {i + 1}: {r['error']}[/red]")
                else:
                    console.print(f"  {name:15s} run {i + 1}: load {r['load_s']:7.3f} s, "
                                  f"import {r['import_s']:5.2f} s, peak RSS "
                                  f"{r['peak_rss_kb'] / 1024:7.1f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()[0]

    summ = {name: summarize(rs) for name, rs in runs.items()}
    hta = summ.get("hta") if summ.get("hta", {}).get("ok") else None
    if "hta" in summ and not summ["hta"]["ok"]:
        line = "HTA failed on every run: " + "; ".join(summ["hta"]["errors"][:2])
        console.print(f"[yellow]{line}[/yellow]")
        notes.append(line)
    for s in summ.values():
        if s["ok"] and hta:
            s["speedup_vs_hta_median"] = hta["load_s_median"] / s["load_s_median"]
            s["speedup_vs_hta_best"] = hta["load_s_best"] / s["load_s_best"]
            s["mem_ratio_vs_hta_median"] = s["peak_rss_mib_median"] / hta["peak_rss_mib_median"]

    table = Table(title=f"Parse speed and memory: {path.name} ({size / 1e6:.1f} MB gz), "
                        f"{args.repeat} fresh process(es) each")
    for col, just in [("loader", "left"), ("rows", "right"), ("import s", "right"),
                      ("load s best", "right"), ("load s median", "right"),
                      ("speed-up vs HTA", "right"), ("peak RSS MiB", "right"),
                      ("Δ RSS MiB", "right"), ("RSS / HTA", "right")]:
        table.add_column(col, justify=just)
    for name in loaders:
        s = summ[name]
        if not s["ok"]:
            table.add_row(LABELS[name], "failed", *[""] * 7)
            continue
        table.add_row(
            LABELS[name], f"{s['rows']:,}", f"{s['import_s_median']:.2f}",
            f"{s['load_s_best']:.3f}", f"{s['load_s_median']:.3f}",
            f"{s['speedup_vs_hta_median']:.1f}x" if hta else "n/a",
            f"{s['peak_rss_mib_median']:.0f}", f"{s['rss_delta_mib_median']:.0f}",
            f"{s['mem_ratio_vs_hta_median']:.2f}" if hta else "n/a",
        )
    console.print(table)
    console.print("load s: time of the call alone (no interpreter start, no imports); "
                  "speed-up = HTA median / loader median; peak RSS = ru_maxrss of the child "
                  "(includes its imports), median; Δ RSS = peak minus the post-import peak.")
    for name in loaders:
        s = summ[name]
        if s["ok"]:
            console.print(f"  {LABELS[name]}: {s['detail']} ({s['version']}, Python "
                          f"{s['python']})")
            if s["children_peak_rss_mib_max"] > 0:
                console.print(f"    note: it started child processes peaking at "
                              f"{s['children_peak_rss_mib_max']:.0f} MiB (not in its peak RSS)")

    verdicts: dict[str, dict[str, Any]] = {}
    console.print(f"\nTargets (traincast vs HTA): speed-up >= {TARGET_SPEEDUP:g}x, peak RSS <= "
                  f"{TARGET_MEM_RATIO:g} of HTA's")
    if not hta:
        console.print("[yellow]  not evaluated: no HTA figures[/yellow]")
    else:
        for name in TRAINCAST:
            s = summ.get(name)
            if not s or not s["ok"]:
                continue
            sp, mr = s["speedup_vs_hta_median"], s["mem_ratio_vs_hta_median"]
            v = {"speedup": sp, "speedup_met": sp >= TARGET_SPEEDUP,
                 "mem_ratio": mr, "mem_met": mr <= TARGET_MEM_RATIO}
            verdicts[name] = v

            def word(ok: bool) -> str:
                return "[green]MET[/green]" if ok else "[red]NOT MET[/red]"

            console.print(f"  {LABELS[name]}: speed-up {sp:.1f}x (target {TARGET_SPEEDUP:g}x) "
                          f"{word(v['speedup_met'])}; peak RSS {s['peak_rss_mib_median']:.0f} "
                          f"MiB = {mr:.2f} of HTA's {hta['peak_rss_mib_median']:.0f} MiB "
                          f"(target <= {TARGET_MEM_RATIO:g}) {word(v['mem_met'])}")
    console.print(f"load avg (1 min): {load_start:.2f} at start, {load_end:.2f} at end "
                  f"({os.cpu_count()} CPUs)")

    if args.json_out:
        doc = {
            "benchmark": "parse_speed",
            "date": dt.datetime.now().isoformat(timespec="seconds"),
            "file": str(path), "file_bytes": size, "repeat": args.repeat,
            "machine": machine(), "git": commit, "loadavg_1min": {"start": load_start, "end": load_end},
            "hta_python": hta_py, "hta_version": hta_version,
            "targets": {"speedup_min": TARGET_SPEEDUP, "mem_ratio_max": TARGET_MEM_RATIO},
            "summary": summ, "verdicts": verdicts, "runs": runs, "notes": notes,
        }
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n")
        console.print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
