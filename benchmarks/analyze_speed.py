"""End-to-end speed of ``traincast analyze`` against HTA's comparable analyses, and the time of
each traincast analysis on its own.

Three measurements per input (default ``dlrm_8xv100/kineto``, 8 ranks, and
``hta/v100_2rank_allreduce``, 216k events; read in place under ``../shared/data/traces``):

1. **traincast CLI, end to end.** A fresh subprocess runs the installed console script
   ``traincast analyze DIR --format json --out TMP.json`` (all analyses: breakdown, idle,
   kernels, collectives, critical_path, stragglers, prediction). Wall time of the subprocess
   as seen by this script (interpreter start, imports, load, every analysis, the JSON write).
2. **HTA, comparable analyses in one process.** A fresh subprocess under HTA's interpreter runs
   ``TraceAnalysis(trace_dir)``, ``get_temporal_breakdown``, ``get_comm_comp_overlap``,
   ``get_idle_time_breakdown(ranks=<all>)``, ``get_gpu_kernel_breakdown`` (all with
   ``visualize=False``) and ``critical_path_analysis(<first rank>, annotation="ProfilerStep",
   instance_id=1)`` (0 if the trace has one step), each in try/except. Wall time of the whole
   subprocess, plus the child's own time per step and which analyses ran.
3. **traincast analyses one by one, in one process.** A child process loads the TraceSet once,
   times ``traincast.predict(ts)`` once, then ``traincast.analyze(ts, name)`` for each name in
   ``traincast.analysis.ANALYSES`` (``--inproc-repeat`` times each; ``critical_path`` and
   ``prediction`` each include their own ``predict`` call). A failing or missing analysis is
   reported as such; the others go on.

Measurements 1 and 2 are repeated ``--repeat`` times, interleaved (traincast, HTA, traincast,
...), and reported as best and median. Target: ``traincast analyze`` on dlrm_8xv100 under 3 s
end to end (median).

Run: ``python benchmarks/analyze_speed.py [--repeat N] [--inputs a,b] [--json-out OUT.json]``.
Exit code 0 when the benchmark ran (a failing analysis or a missed target is printed, not an
error); 2 for bad arguments.
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
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, hta_available  # noqa: E402  (shared benchmark helpers)

DATA = REPO.parent / "shared" / "data"
TRACES = DATA / "traces"
DEFAULT_HTA_VENV_PY = Path("/work/venvs/hta/bin/python")

INPUTS: dict[str, Path] = {
    "dlrm_8xv100": TRACES / "dlrm_8xv100" / "kineto",
    "v100_2rank_allreduce": TRACES / "hta" / "v100_2rank_allreduce",
}
#: input -> end-to-end target for ``traincast analyze`` (median wall seconds)
TARGETS_S: dict[str, float] = {"dlrm_8xv100": 3.0}

HTA_TAG = "@@ANALYZE_SPEED_HTA@@"
TC_TAG = "@@ANALYZE_SPEED_TC@@"

# HTA child: stdlib only at top level (runs under HTA's interpreter).
HTA_CHILD = r'''
import json, logging, sys, time, traceback, warnings
trace_dir, tag = sys.argv[1:3]
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
import importlib.metadata
from hta.trace_analysis import TraceAnalysis
res = {"version": importlib.metadata.version("HolisticTraceAnalysis"),
       "import_s": time.perf_counter() - t0, "steps": {}}

def step(name, fn):
    t = time.perf_counter()
    try:
        info = fn()
        res["steps"][name] = {"ok": True, "s": time.perf_counter() - t, "info": info}
    except Exception as e:
        res["steps"][name] = {"ok": False, "s": time.perf_counter() - t,
                              "error": "".join(traceback.format_exception_only(type(e), e)
                                               ).strip()[:300]}
    return res["steps"][name]["ok"]

box = {}
def load():
    box["a"] = TraceAnalysis(trace_dir=trace_dir)
    return f"{len(box['a'].t.traces)} rank(s)"
if step("load", load):
    a = box["a"]
    ranks = sorted(a.t.traces)
    step("get_temporal_breakdown", lambda: len(a.get_temporal_breakdown(visualize=False)))
    step("get_comm_comp_overlap", lambda: len(a.get_comm_comp_overlap(visualize=False)))
    step("get_idle_time_breakdown",
         lambda: len(a.get_idle_time_breakdown(ranks=ranks, visualize=False)[0]))
    step("get_gpu_kernel_breakdown",
         lambda: [len(x) for x in a.get_gpu_kernel_breakdown(visualize=False)])
    n_steps = sum(1 for k in a.t.symbol_table.get_sym_id_map() if k.startswith("ProfilerStep"))
    inst = 1 if n_steps > 1 else 0
    def cp():
        out = a.critical_path_analysis(ranks[0], annotation="ProfilerStep", instance_id=inst)
        if out is None:
            raise RuntimeError("critical_path_analysis returned None")
        g, ok = out
        if not ok:
            raise RuntimeError("critical_path_analysis reported failure")
        return f"rank {ranks[0]}, ProfilerStep instance {inst}, {g.number_of_nodes()} nodes"
    step("critical_path_analysis", cp)
res["total_s"] = time.perf_counter() - t0
sys.stdout.write("\n" + tag + json.dumps(res) + "\n")
sys.stdout.flush()
'''

# traincast in-process child: one JSON line per measurement, so a hang or crash keeps the rest.
TC_CHILD = r'''
import json, statistics, sys, time, traceback, warnings
path, tag, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
warnings.simplefilter("ignore")

def emit(d):
    sys.stdout.write("\n" + tag + json.dumps(d) + "\n")
    sys.stdout.flush()

def err(e):
    return "".join(traceback.format_exception_only(type(e), e)).strip()[:300]

t0 = time.perf_counter()
import traincast
from traincast.analysis import ANALYSES
emit({"what": "import", "s": time.perf_counter() - t0, "names": list(ANALYSES),
      "version": traincast.__version__})
t = time.perf_counter()
ts = traincast.load(path)
emit({"what": "load", "s": time.perf_counter() - t, "events": ts.events.num_rows,
      "ranks": len(ts.ranks)})
try:
    t = time.perf_counter()
    traincast.predict(ts)
    emit({"what": "predict", "s": time.perf_counter() - t})
except Exception as e:
    emit({"what": "predict", "error": err(e)})
for name in ANALYSES:
    times = []
    try:
        for _ in range(repeat):
            t = time.perf_counter()
            out = traincast.analyze(ts, name)
            times.append(time.perf_counter() - t)
        emit({"what": "analysis", "name": name, "best_s": min(times),
              "median_s": statistics.median(times), "runs": len(times),
              "tables": {k: int(len(v)) for k, v in out.items()}})
    except Exception as e:
        emit({"what": "analysis", "name": name, "error": err(e),
              "traceback": traceback.format_exc()[-2000:]})
emit({"what": "done"})
'''


def traincast_exe() -> str | None:
    """The installed ``traincast`` console script: next to this interpreter if there (no pyenv
    shim in between), else the first one on PATH."""
    local = Path(sys.executable).parent / "traincast"
    if local.exists():
        return str(local)
    return shutil.which("traincast")


def tail(text: str, n: int = 4) -> str:
    return " | ".join(text.strip().splitlines()[-n:])


def run_cli(exe: str, path: Path, out: Path, timeout: float) -> dict[str, Any]:
    """One end-to-end ``traincast analyze`` run in a fresh process."""
    out.unlink(missing_ok=True)
    cmd = [exe, "analyze", str(path), "--format", "json", "--out", str(out)]
    t0 = time.perf_counter()
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                            cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    r: dict[str, Any] = {"wall_s": wall, "returncode": cp.returncode}
    if cp.returncode != 0:
        r["error"] = f"exit {cp.returncode}: {tail(cp.stderr or cp.stdout)}"
        return r
    try:
        doc = json.loads(out.read_text())
        r["tables"] = {k: (len(v) if isinstance(v, list) else None) for k, v in doc.items()}
        r["out_bytes"] = out.stat().st_size
    except (OSError, ValueError) as e:
        r["error"] = f"exit 0 but the JSON output is unreadable: {e}"
    return r


def run_hta(python: str, trace_dir: Path, timeout: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        cp = subprocess.run([python, "-c", HTA_CHILD, str(trace_dir), HTA_TAG],
                            capture_output=True, text=True, timeout=timeout,
                            cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    for line in reversed(cp.stdout.splitlines()):
        if line.startswith(HTA_TAG):
            r = json.loads(line[len(HTA_TAG):])
            r["wall_s"] = wall
            return r
    return {"wall_s": wall, "error": f"exit {cp.returncode}: {tail(cp.stderr or cp.stdout)}"}


def run_inproc(path: Path, repeat: int, timeout: float) -> dict[str, Any]:
    """traincast's analyses one by one in one child process (see TC_CHILD)."""
    stdout, stderr, note = "", "", None
    try:
        cp = subprocess.run([sys.executable, "-c", TC_CHILD, str(path), TC_TAG, str(repeat)],
                            capture_output=True, text=True, timeout=timeout,
                            cwd=tempfile.gettempdir())
        stdout, stderr = cp.stdout, cp.stderr
        if cp.returncode != 0:
            note = f"child exit {cp.returncode}: {tail(stderr)}"
    except subprocess.TimeoutExpired as e:
        stdout = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        note = f"child timed out after {timeout:.0f} s"
    recs = [json.loads(line[len(TC_TAG):]) for line in stdout.splitlines()
            if line.startswith(TC_TAG)]
    out: dict[str, Any] = {"analyses": {}, "note": note}
    for rec in recs:
        w = rec.pop("what")
        if w == "analysis":
            out["analyses"][rec.pop("name")] = rec
        elif w != "done":
            out[w] = rec
    names = out.get("import", {}).get("names", [])
    for n in names:  # started but never reported: the child died or hung in it
        out["analyses"].setdefault(n, {"error": note or "no result"})
    return out


def stats(xs: list[float]) -> dict[str, float]:
    return {"best": min(xs), "median": statistics.median(xs)} if xs else {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", default=",".join(INPUTS),
                    help="comma-separated subset of: " + ", ".join(INPUTS))
    ap.add_argument("--repeat", type=int, default=5,
                    help="fresh processes per tool and input (default: %(default)s)")
    ap.add_argument("--inproc-repeat", type=int, default=3,
                    help="runs of each analysis in the in-process timing (default: %(default)s)")
    ap.add_argument("--hta-python", default=None,
                    help=f"interpreter with HolisticTraceAnalysis (default: {DEFAULT_HTA_VENV_PY} "
                         "if it exists)")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per subprocess")
    ap.add_argument("--json-out", type=Path, default=None, help="write the figures as JSON")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    labels = [x.strip() for x in args.inputs.split(",") if x.strip()]
    bad = [x for x in labels if x not in INPUTS]
    if bad or args.repeat < 1 or args.inproc_repeat < 1:
        console.print(f"[red]bad arguments: unknown input(s) {bad} or repeat < 1[/red]")
        return 2
    missing = [str(INPUTS[x]) for x in labels if not INPUTS[x].exists()]
    if missing:
        console.print(f"[red]missing trace(s): {', '.join(missing)}[/red]")
        return 2
    exe = traincast_exe()
    notes: list[str] = []
    if exe is None:
        console.print("[red]the traincast console script is not installed[/red]")
        return 2
    hta_py = args.hta_python or (str(DEFAULT_HTA_VENV_PY) if DEFAULT_HTA_VENV_PY.exists()
                                 else sys.executable)
    hta_ok, hta_msg = (False, "skipped (--no-hta)") if args.no_hta else hta_available(hta_py)
    if not hta_ok:
        notes.append(f"HTA not measured: {hta_msg}")
        console.print(f"[yellow]HTA not measured: {hta_msg}[/yellow]")
    commit = git_state()
    console.print(f"traincast CLI {exe} at {commit}; HTA {hta_msg if hta_ok else 'n/a'} "
                  f"({hta_py}); {args.repeat} fresh process(es) per tool, interleaved; load "
                  f"avg {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    load_start = os.getloadavg()[0]

    tmp = Path(tempfile.mkdtemp(prefix="analyze_speed_"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for label in labels:
            path = INPUTS[label]
            entry: dict[str, Any] = {"path": str(path), "cli": [], "hta": []}
            results[label] = entry
            console.print(f"[bold]{label}[/bold]: {path}")
            for i in range(args.repeat):
                r = run_cli(exe, path, tmp / "x.json", args.timeout)
                entry["cli"].append(r)
                console.print(f"  traincast analyze run {i + 1}: "
                              + (f"[red]{r['error']}[/red]" if "error" in r
                                 else f"{r['wall_s']:.2f} s"))
                if hta_ok:
                    h = run_hta(hta_py, path, args.timeout)
                    entry["hta"].append(h)
                    if "error" in h:
                        console.print(f"  HTA run {i + 1}: [red]{h['error']}[/red]")
                    else:
                        failed = [k for k, v in h["steps"].items() if not v["ok"]]
                        console.print(f"  HTA run {i + 1}: {h['wall_s']:.2f} s"
                                      + (f" (failed: {', '.join(failed)})" if failed else ""))
            entry["inproc"] = run_inproc(path, args.inproc_repeat, args.timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()[0]

    # ---- end-to-end table
    e2e = Table(title="End to end, fresh process each run: `traincast analyze DIR --format json "
                      "--out F` vs HTA's comparable analyses (wall s)")
    for col in ["input", "tool", "runs ok", "best s", "median s", "HTA / traincast (median)",
                "what ran"]:
        e2e.add_column(col, justify="left" if col in ("input", "tool", "what ran") else "right")
    summary: dict[str, Any] = {}
    for label, entry in results.items():
        cli_ok = [r["wall_s"] for r in entry["cli"] if "error" not in r]
        hta_runs = [h for h in entry["hta"] if "error" not in h]
        hta_w = [h["wall_s"] for h in hta_runs]
        s_cli, s_hta = stats(cli_ok), stats(hta_w)
        ratio = (s_hta["median"] / s_cli["median"]) if s_cli and s_hta else None
        tables = next((r["tables"] for r in entry["cli"] if "tables" in r), {})
        hta_steps: dict[str, Any] = {}
        if hta_runs:
            for k in hta_runs[0]["steps"]:
                vals = [h["steps"][k] for h in hta_runs if k in h["steps"]]
                hta_steps[k] = {"ok": all(v["ok"] for v in vals),
                                "median_s": statistics.median(v["s"] for v in vals),
                                "error": next((v.get("error") for v in vals if not v["ok"]),
                                              None)}
        summary[label] = {"cli": s_cli, "cli_runs_ok": len(cli_ok), "hta": s_hta,
                          "hta_runs_ok": len(hta_w), "hta_over_traincast": ratio,
                          "cli_tables": tables, "hta_steps": hta_steps,
                          "cli_errors": [r["error"] for r in entry["cli"] if "error" in r]}
        e2e.add_row(label, "traincast analyze", f"{len(cli_ok)}/{len(entry['cli'])}",
                    f"{s_cli['best']:.2f}" if s_cli else "failed",
                    f"{s_cli['median']:.2f}" if s_cli else "",
                    f"{ratio:.2f}x" if ratio else "n/a",
                    f"all {len(tables)} tables written" if tables else
                    (summary[label]["cli_errors"] or [""])[0][:100])
        if hta_ok:
            ran = [k for k, v in hta_steps.items() if v["ok"]]
            failed = [k for k, v in hta_steps.items() if not v["ok"]]
            e2e.add_row("", "HTA (import + load + analyses)",
                        f"{len(hta_w)}/{len(entry['hta'])}",
                        f"{s_hta['best']:.2f}" if s_hta else "failed",
                        f"{s_hta['median']:.2f}" if s_hta else "", "",
                        f"{len(ran)} of {len(hta_steps)} steps ran" + (
                            "; FAILED: " + ", ".join(failed) if failed else ""))
    console.print(e2e)

    if hta_ok:
        ht = Table(title="HTA, inside its process (median s per step)")
        ht.add_column("input")
        steps = ["load", "get_temporal_breakdown", "get_comm_comp_overlap",
                 "get_idle_time_breakdown", "get_gpu_kernel_breakdown", "critical_path_analysis"]
        for s in steps:
            ht.add_column(s.replace("get_", "").replace("_analysis", ""), justify="right")
        errors = {}
        for label, s in summary.items():
            cells = []
            for k in steps:
                v = s["hta_steps"].get(k)
                if v is None:
                    cells.append("n/a")
                elif v["ok"]:
                    cells.append(f"{v['median_s']:.3f}")
                else:
                    cells.append(f"failed ({v['median_s']:.2f})")
                    errors[k] = v["error"]
            ht.add_row(label, *cells)
        console.print(ht)
        for k, e in errors.items():
            console.print(f"  HTA {k} failed: {e}")

    # ---- per-analysis table
    names: list[str] = []
    for entry in results.values():
        for n in entry["inproc"]["analyses"]:
            if n not in names:
                names.append(n)
    pa_t = Table(title=f"traincast analyses one by one, one process, TraceSet loaded once "
                       f"(best of {args.inproc_repeat} s; tables: rows)")
    pa_t.add_column("step")
    for label in results:
        pa_t.add_column(label, justify="right")
        pa_t.add_column("tables", justify="left")
    for step in ["import", "load", "predict"]:
        cells = []
        for entry in results.values():
            v = entry["inproc"].get(step)
            if v is None:
                cells += ["n/a", ""]
            elif "error" in v:
                cells += ["[red]FAILED[/red]", v["error"][:60]]
            else:
                extra = (f"{v['events']:,} events, {v['ranks']} rank(s)" if step == "load"
                         else "critical_path, prediction below include one each"
                         if step == "predict" else "")
                cells += [f"{v['s']:.3f}", extra]
        pa_t.add_row(step, *cells)
    for n in names:
        cells = []
        for entry in results.values():
            v = entry["inproc"]["analyses"].get(n)
            if v is None:
                cells += ["missing", ""]
            elif "error" in v:
                cells += ["[red]FAILED[/red]", v["error"][:60]]
            else:
                rows = sum(v["tables"].values())
                cells += [f"{v['best_s']:.3f}", f"{len(v['tables'])} table(s), {rows:,} rows"]
        pa_t.add_row(f"analyze({n!r})", *cells)
    console.print(pa_t)
    for label, entry in results.items():
        if entry["inproc"].get("note"):
            console.print(f"  [yellow]{label}: {entry['inproc']['note']}[/yellow]")
        for n, v in entry["inproc"]["analyses"].items():
            if "error" in v:
                console.print(f"  [red]{label}: analyze({n!r}) failed: {v['error']}[/red]")

    verdicts = {}
    console.print("\nTargets:")
    for label, limit in TARGETS_S.items():
        if label not in summary:
            continue
        s = summary[label]["cli"]
        met = bool(s) and s["median"] < limit
        verdicts[label] = {"limit_s": limit, "median_s": s.get("median"), "met": met}
        console.print(f"  traincast analyze on {label}: median "
                      + (f"{s['median']:.2f} s (best {s['best']:.2f} s)" if s else "n/a")
                      + f", target < {limit:g} s: "
                      + ("[green]MET[/green]" if met else "[red]NOT MET[/red]"))
    console.print(f"load avg (1 min): {load_start:.2f} at start, {load_end:.2f} at end "
                  f"({os.cpu_count()} CPUs)")

    if args.json_out:
        doc = {"benchmark": "analyze_speed",
               "date": dt.datetime.now().isoformat(timespec="seconds"), "git": commit,
               "traincast_cli": exe, "hta_python": hta_py,
               "hta_version": hta_msg if hta_ok else None,
               "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
               "repeat": args.repeat, "inproc_repeat": args.inproc_repeat,
               "loadavg_1min": {"start": load_start, "end": load_end},
               "targets_s": TARGETS_S, "verdicts": verdicts, "summary": summary,
               "runs": results, "notes": notes}
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
