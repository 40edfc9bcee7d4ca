"""Temporal breakdown and comm/compute overlap: traincast against HTA, side by side, in one run.

For each input trace, HolisticTraceAnalysis (HTA, in its own venv, one subprocess per input)
runs ``TraceAnalysis(trace_dir).get_temporal_breakdown(visualize=False)`` and
``get_comm_comp_overlap(visualize=False)``; traincast runs
``traincast.analysis.breakdown.temporal_breakdown(traincast.load(path), per="rank")``. Per rank,
the script prints HTA's and traincast's ``idle``, ``compute``, ``non-compute`` (percentages of
the rank's device window) and ``overlap`` (percentage of communication time under compute),
and traincast minus HTA in percentage points. ``|diff| > 1 pp`` (the project's target is
"within 1 pp of HTA") is flagged.

To explain the differences, two more columns are computed:

* HTA run again with ``HTA_DISABLE_NS_ROUNDING=1`` (HTA otherwise rounds every event of a
  nanosecond-resolution trace inward to whole µs: start up, end down);
* traincast on copies of its events table with HTA's rules applied: (a) device ops kept only
  if their launching host event (same correlation id) is in the trace and starts before the
  last ``ProfilerStep`` (HTA's ``Trace._filter_irrelevant_gpu_kernels``, which HTA applies only
  when the trace holds more than one distinct ``ProfilerStep#N`` name), (b) HTA's µs rounding,
  (c) both. What is left after (c) is the unexplained residual.

Inputs (under ``../shared/data/traces``, read in place; a file is symlinked into a temp folder
for HTA, which needs a folder): ``hta/v100_2rank_allreduce``, ``hta/a100_2rank_nccl``,
``hta/a100_16rank_5streams``, ``dlrm_8xv100/kineto`` (8 ranks),
``tracelens/b200_8rank_rank0.json.gz``, ``hta/trace_diff/control.json.gz``.

Run: ``python benchmarks/analyze_vs_hta.py [--inputs a,b] [--json-out OUT.json]``.
Exit code 0 when the comparison ran (differences above 1 pp are printed, not errors); 1 if
traincast raised on an input; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, hta_available  # noqa: E402  (shared benchmark helpers)

DATA = REPO.parent / "shared" / "data"
TRACES = DATA / "traces"
DEFAULT_HTA_VENV_PY = Path("/work/venvs/hta/bin/python")

#: label -> path (a folder of per-rank traces, or one file)
INPUTS: dict[str, Path] = {
    "v100_2rank_allreduce": TRACES / "hta" / "v100_2rank_allreduce",
    "a100_2rank_nccl": TRACES / "hta" / "a100_2rank_nccl",
    "a100_16rank_5streams": TRACES / "hta" / "a100_16rank_5streams",
    "dlrm_8xv100": TRACES / "dlrm_8xv100" / "kineto",
    "tracelens_b200": TRACES / "tracelens" / "b200_8rank_rank0.json.gz",
    "trace_diff_control": TRACES / "hta" / "trace_diff" / "control.json.gz",
}

METRICS = ("idle", "compute", "non_compute", "overlap")
TOLERANCE_PP = 1.0  # project target: within 1 percentage point of HTA
DEVICE_KINDS = ("kernel", "memcpy", "memset", "collective")

RESULT_TAG = "@@ANALYZE_VS_HTA_RESULT@@"

# The HTA child: stdlib only at top level, runs under HTA's interpreter.
HTA_CHILD = r'''
import json, logging, os, sys, time, traceback, warnings
trace_dir, tag = sys.argv[1:3]
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
import importlib.metadata
from hta.trace_analysis import TraceAnalysis
from hta.utils.utils import get_kernel_type
out = {"version": importlib.metadata.version("HolisticTraceAnalysis"),
       "ns_rounding": os.environ.get("HTA_DISABLE_NS_ROUNDING", "0") != "1",
       "import_s": time.perf_counter() - t0, "ranks": {}, "errors": []}
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=trace_dir)
out["load_s"] = time.perf_counter() - t1
sym_table = a.t.symbol_table.get_sym_table()
sym_index = a.t.symbol_table.get_sym_id_map()
out["profiler_step_names"] = sorted(k for k in sym_index if "ProfilerStep" in k)
t2 = time.perf_counter()
try:
    tb = a.get_temporal_breakdown(visualize=False)
    for r in tb.to_dict("records"):
        k = float(r["kernel_time(us)"])
        d = out["ranks"].setdefault(str(int(r["rank"])), {})
        d.update({"window_us": k, "idle_us": float(r["idle_time(us)"]),
                  "compute_us": float(r["compute_time(us)"]),
                  "non_compute_us": float(r["non_compute_time(us)"]),
                  "idle": 100.0 * float(r["idle_time(us)"]) / k if k else None,
                  "compute": 100.0 * float(r["compute_time(us)"]) / k if k else None,
                  "non_compute": 100.0 * float(r["non_compute_time(us)"]) / k if k else None})
except Exception as e:
    out["errors"].append("get_temporal_breakdown: " + "".join(
        traceback.format_exception_only(type(e), e)).strip())
try:
    ov = a.get_comm_comp_overlap(visualize=False)
    for r in ov.to_dict("records"):
        v = r["comp_comm_overlap_pctg"]
        out["ranks"].setdefault(str(int(r["rank"])), {})["overlap"] = (
            None if v != v else float(v))  # NaN: no communication kernel
except Exception as e:
    out["errors"].append("get_comm_comp_overlap: " + "".join(
        traceback.format_exception_only(type(e), e)).strip())
out["analyses_s"] = time.perf_counter() - t2
# what HTA counted as device ops: rows with stream != -1, by category and HTA kernel type
for rank, df in a.t.traces.items():
    g = df[df["stream"].ne(-1)]
    cats = [sym_table[c] for c in g["cat"]]
    names = [sym_table[n] for n in g["name"]]
    by = {}
    odd = []
    for c, n, du in zip(cats, names, g["dur"].tolist()):
        key = c + "/" + get_kernel_type(n)
        cnt, tot = by.get(key, (0, 0.0))
        by[key] = (cnt + 1, tot + float(du))
        if c not in ("kernel", "gpu_memcpy", "gpu_memset"):
            odd.append({"cat": c, "name": n[:80], "dur_us": float(du)})
    d = out["ranks"].setdefault(str(int(rank)), {})
    d["device_rows"] = int(len(g))
    d["device_rows_by_cat_type"] = {k: {"n": v[0], "dur_us": v[1]} for k, v in sorted(by.items())}
    d["non_gpu_rows_on_a_stream"] = odd[:20]
    d["non_gpu_rows_on_a_stream_n"] = len(odd)
    d["negative_dur_rows"] = int((g["dur"] < 0).sum())
sys.stdout.write("\n" + tag + json.dumps(out) + "\n")
sys.stdout.flush()
'''


def hta_folder(path: Path, tmp: Path, label: str) -> Path:
    """A folder HTA can read: ``path`` itself, or a temp folder holding a symlink to the file."""
    if path.is_dir():
        return path
    d = tmp / label
    d.mkdir()
    try:
        (d / path.name).symlink_to(path)
    except OSError:  # no symlinks on this filesystem: a temp copy, deleted at the end
        shutil.copy2(path, d / path.name)
    return d


def run_hta(python: str, trace_dir: Path, *, rounding: bool, timeout: float) -> dict[str, Any]:
    """Run the HTA child on ``trace_dir``; its JSON result, or ``{"error": ...}``."""
    env = dict(os.environ)
    env["HTA_DISABLE_NS_ROUNDING"] = "0" if rounding else "1"
    t0 = time.perf_counter()
    try:
        cp = subprocess.run([python, "-c", HTA_CHILD, str(trace_dir), RESULT_TAG],
                            capture_output=True, text=True, timeout=timeout, env=env,
                            cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    for line in reversed(cp.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
            res["wall_s"] = wall
            return res
    tail = (cp.stderr or cp.stdout).strip().splitlines()[-6:]
    return {"error": f"exit {cp.returncode}: " + " | ".join(tail)}


# ---------------------------------------------------------------------------------------------
# traincast side


def _pcts(df) -> dict[int, dict[str, float | None]]:
    out = {}
    for r in df.to_dict("records"):
        out[int(r["rank"])] = {
            "idle": _num(r["idle_pct"]), "compute": _num(r["compute_pct"]),
            "non_compute": _num(r["non_compute_pct"]), "overlap": _num(r["overlap_pct"]),
            "window_us": r["window_ns"] / 1e3, "idle_us": r["idle_ns"] / 1e3,
            "compute_us": r["compute_ns"] / 1e3, "comm_us": r["comm_ns"] / 1e3,
            "memory_us": r["memory_ns"] / 1e3, "source": r["source"],
        }
    return out


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def hta_rule_variants(ts) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """traincast's breakdown on copies of the events with HTA's rules emulated.

    Returns ``{variant: {rank: pcts}}`` for ``launch_filter``, ``us_rounding`` and
    ``hta_rules`` (both), and per-rank facts: device ops whose launch is not in the trace.
    """
    from traincast.analysis.breakdown import temporal_breakdown

    ev = ts.events
    kind = np.asarray(ev["kind"].cast(pa.string()).to_numpy(zero_copy_only=False)).astype(str)
    dev = ev["device"].to_numpy()
    corr = ev["correlation"].to_numpy()
    t = ev["ts"].to_numpy().astype(np.int64)
    du = ev["dur"].to_numpy().astype(np.int64)
    rank = ev["rank"].to_numpy()
    ops = (dev >= 0) & np.isin(kind, DEVICE_KINDS)
    host = dev < 0
    it = ts.iterations.to_pandas()
    markers = it[it["marker_event"] >= 0]
    # HTA counts distinct ProfilerStep#N *names* over all ranks and filters only if > 1
    n_step_names = markers["iteration"].nunique()
    hta_filters = n_step_names > 1

    # HTA's round_down_time_stamps: start up, end down, to whole µs (all events)
    t_r = -(-t // 1000) * 1000
    e_r = ((t + du) // 1000) * 1000
    du_r = e_r - t_r  # may be negative, as in HTA

    def keep_mask(tt: np.ndarray) -> np.ndarray:
        keep = np.ones(t.size, bool)
        if not hta_filters:
            return keep
        for r in np.unique(rank):
            steps = markers[markers["rank"] == r]
            if steps.empty:
                continue
            last = int(steps["start"].max())
            if tt is t_r:
                last = -(-last // 1000) * 1000
            mine = rank == r
            launched = np.isin(corr, corr[mine & host & (tt < last) & (corr >= 0)])
            keep &= ~(mine & ops & ~launched)
        return keep

    facts: dict[int, dict[str, Any]] = {}
    launched_any = np.zeros(t.size, bool)
    for r in np.unique(rank):
        mine = rank == r
        launched_any |= mine & np.isin(corr, corr[mine & host & (corr >= 0)])
    for r in np.unique(rank):
        sel = (rank == r) & ops & ~launched_any
        facts[int(r)] = {"device_ops": int(((rank == r) & ops).sum()),
                         "device_ops_without_launch": int(sel.sum()),
                         "device_ops_without_launch_dur_us": float(du[sel].sum()) / 1e3}

    def with_times(tt: np.ndarray, dd: np.ndarray, keep: np.ndarray):
        tab = ev
        if tt is not t:
            tab = tab.set_column(tab.schema.get_field_index("ts"), "ts", pa.array(tt))
            tab = tab.set_column(tab.schema.get_field_index("dur"), "dur",
                                 pa.array(np.maximum(dd, 0)))
        return dataclasses.replace(ts, events=tab.filter(pa.array(keep)))

    out = {}
    out["launch_filter"] = _pcts(temporal_breakdown(
        with_times(t, du, keep_mask(t)), per="rank", include_last_step=hta_filters))
    out["us_rounding"] = _pcts(temporal_breakdown(
        with_times(t_r, du_r, np.ones(t.size, bool)), per="rank"))
    out["hta_rules"] = _pcts(temporal_breakdown(
        with_times(t_r, du_r, keep_mask(t_r)), per="rank", include_last_step=hta_filters))
    for r in facts:
        facts[r]["hta_filters_launches"] = bool(hta_filters)
        facts[r]["negative_dur_after_rounding"] = int(((rank == r) & ops & (du_r < 0)).sum())
    return out, facts


def run_traincast(path: Path) -> dict[str, Any]:
    import traincast
    from traincast.analysis.breakdown import temporal_breakdown

    res: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        ts = traincast.load(path)
        res["load_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        df = temporal_breakdown(ts, per="rank")
        res["breakdown_s"] = time.perf_counter() - t1
    res["warnings"] = sorted({str(w.message) for w in caught})
    res["ranks"] = _pcts(df)
    res["iterations"] = int(ts.iterations.num_rows)
    res["variants"], res["facts"] = hta_rule_variants(ts)
    return res


# ---------------------------------------------------------------------------------------------


def diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def max_abs(xs: list[float | None]) -> float | None:
    v = [abs(x) for x in xs if x is not None]
    return max(v) if v else None


def fmt(x: float | None, nd: int = 2, sign: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", default=",".join(INPUTS),
                    help="comma-separated subset of: " + ", ".join(INPUTS))
    ap.add_argument("--hta-python", default=None,
                    help=f"interpreter with HolisticTraceAnalysis (default: {DEFAULT_HTA_VENV_PY} "
                         "if it exists, else this interpreter)")
    ap.add_argument("--no-hta-unrounded", action="store_true",
                    help="skip the second HTA run with HTA_DISABLE_NS_ROUNDING=1")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per HTA subprocess")
    ap.add_argument("--json-out", type=Path, default=None, help="write all figures as JSON")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    labels = [x.strip() for x in args.inputs.split(",") if x.strip()]
    unknown = [x for x in labels if x not in INPUTS]
    if unknown:
        console.print(f"[red]unknown input(s): {', '.join(unknown)}[/red]")
        return 2
    missing = [str(INPUTS[x]) for x in labels if not INPUTS[x].exists()]
    if missing:
        console.print(f"[red]missing trace(s): {', '.join(missing)}[/red]")
        return 2
    hta_py = args.hta_python or (str(DEFAULT_HTA_VENV_PY) if DEFAULT_HTA_VENV_PY.exists()
                                 else sys.executable)
    notes: list[str] = []
    ok, msg = hta_available(hta_py)
    hta_version = msg if ok else None
    if ok:
        console.print(f"HTA {msg} ({hta_py})")
    else:
        line = f"HTA unavailable with {hta_py} ({msg}); printing traincast's figures only"
        console.print(f"[yellow]{line}[/yellow]")
        notes.append(line)
    commit = git_state()
    import traincast

    console.print(f"traincast {traincast.__version__} at {commit}; load avg "
                  f"{os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")

    results: dict[str, dict[str, Any]] = {}
    failed_tc = False
    tmp = Path(tempfile.mkdtemp(prefix="analyze_vs_hta_"))
    try:
        for label in labels:
            path = INPUTS[label]
            entry: dict[str, Any] = {"path": str(path)}
            results[label] = entry
            console.print(f"[bold]{label}[/bold]: {path}")
            if ok:
                folder = hta_folder(path, tmp, label)
                entry["hta"] = run_hta(hta_py, folder, rounding=True, timeout=args.timeout)
                if "error" in entry["hta"]:
                    console.print(f"  [red]HTA failed: {entry['hta']['error']}[/red]")
                else:
                    h = entry["hta"]
                    console.print(f"  HTA: load {h['load_s']:.2f} s, analyses "
                                  f"{h['analyses_s']:.2f} s, subprocess {h['wall_s']:.2f} s"
                                  + (f"; errors: {h['errors']}" if h["errors"] else ""))
                if not args.no_hta_unrounded:
                    entry["hta_unrounded"] = run_hta(hta_py, folder, rounding=False,
                                                     timeout=args.timeout)
                    if "error" in entry["hta_unrounded"]:
                        console.print("  [red]HTA (HTA_DISABLE_NS_ROUNDING=1) failed: "
                                      f"{entry['hta_unrounded']['error']}[/red]")
            try:
                entry["traincast"] = run_traincast(path)
                tc = entry["traincast"]
                console.print(f"  traincast: load {tc['load_s']:.2f} s, breakdown "
                              f"{tc['breakdown_s']:.3f} s"
                              + (f"; warnings: {tc['warnings']}" if tc["warnings"] else ""))
            except Exception as e:  # report and go on with the other inputs
                failed_tc = True
                entry["traincast"] = {"error": "".join(
                    traceback.format_exception_only(type(e), e)).strip(),
                    "traceback": traceback.format_exc()}
                console.print(f"  [red]traincast raised: {entry['traincast']['error']}[/red]")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # ---- comparison rows
    rows: list[dict[str, Any]] = []
    for label, entry in results.items():
        tc = entry.get("traincast", {})
        h = entry.get("hta", {})
        hu = entry.get("hta_unrounded", {})
        tc_ranks = tc.get("ranks", {}) if "error" not in tc else {}
        h_ranks = {int(k): v for k, v in h.get("ranks", {}).items()} if "error" not in h else {}
        hu_ranks = ({int(k): v for k, v in hu.get("ranks", {}).items()}
                    if hu and "error" not in hu else {})
        for rank in sorted(set(tc_ranks) | set(h_ranks)):
            t = tc_ranks.get(rank, {})
            hr = h_ranks.get(rank, {})
            row: dict[str, Any] = {"input": label, "rank": rank}
            for m in METRICS:
                row[f"hta_{m}"] = hr.get(m)
                row[f"tc_{m}"] = t.get(m)
                row[f"diff_{m}"] = diff(t.get(m), hr.get(m))
            row["flagged"] = [m for m in METRICS
                              if row[f"diff_{m}"] is not None
                              and abs(row[f"diff_{m}"]) > TOLERANCE_PP]
            row["max_abs_diff"] = max_abs([row[f"diff_{m}"] for m in METRICS])
            row["window_us_hta"] = hr.get("window_us")
            row["window_us_tc"] = t.get("window_us")
            hur = hu_ranks.get(rank, {})
            row["max_abs_diff_vs_hta_unrounded"] = max_abs(
                [diff(t.get(m), hur.get(m)) for m in METRICS]) if hur else None
            for v in ("launch_filter", "us_rounding", "hta_rules"):
                vr = tc.get("variants", {}).get(v, {}).get(rank, {})
                row[f"max_abs_diff_{v}"] = max_abs([diff(vr.get(m), hr.get(m))
                                                    for m in METRICS]) if vr and hr else None
                row[f"{v}_pcts"] = {m: vr.get(m) for m in METRICS} if vr else None
            f = tc.get("facts", {}).get(rank, {})
            row["device_ops_without_launch"] = f.get("device_ops_without_launch")
            row["device_ops_without_launch_dur_us"] = f.get("device_ops_without_launch_dur_us")
            row["hta_filters_launches"] = f.get("hta_filters_launches")
            row["hta_non_gpu_rows_on_a_stream"] = hr.get("non_gpu_rows_on_a_stream_n")
            row["hta_non_gpu_rows_examples"] = hr.get("non_gpu_rows_on_a_stream", [])[:3]
            rows.append(row)

    table = Table(title="Temporal breakdown per rank (% of the rank's device window) and "
                        "comm/compute overlap (% of comm time): HTA vs traincast, "
                        "diff = traincast - HTA in pp")
    table.add_column("input", no_wrap=True)
    table.add_column("rank", justify="right")
    for m in ("idle", "compute", "non-comp", "overlap"):
        for who in ("HTA", "tc", "diff"):
            table.add_column(f"{m}\n{who}", justify="right")
    for row in rows:
        cells = [row["input"], str(row["rank"])]
        for m in METRICS:
            d = row[f"diff_{m}"]
            dtxt = fmt(d, sign=True)
            if d is not None and abs(d) > TOLERANCE_PP:
                dtxt = f"[bold red]{dtxt} ![/bold red]"
            cells += [fmt(row[f"hta_{m}"]), fmt(row[f"tc_{m}"]), dtxt]
        table.add_row(*cells)
    console.print(table)

    why = Table(title="Where the differences come from: max |diff| over the 4 metrics (pp) "
                      "against HTA, for traincast as is and with HTA's rules emulated")
    why.add_column("input", no_wrap=True)
    for col in ["rank", "tc vs\nHTA", "tc vs HTA\nunrounded", "tc +\nlaunch\nfilter",
                "tc +\nµs\nrounding", "tc + both\n(residual)", "ops w/o\nlaunch", "their\nms",
                "HTA\nfilters?", "HTA non-GPU rows on a stream"]:
        why.add_column(col, justify="right")
    for row in rows:
        why.add_row(
            row["input"], str(row["rank"]), fmt(row["max_abs_diff"]),
            fmt(row["max_abs_diff_vs_hta_unrounded"]), fmt(row["max_abs_diff_launch_filter"]),
            fmt(row["max_abs_diff_us_rounding"]), fmt(row["max_abs_diff_hta_rules"]),
            str(row["device_ops_without_launch"]),
            fmt((row["device_ops_without_launch_dur_us"] or 0) / 1e3, 1),
            {True: "yes", False: "no", None: "?"}[row["hta_filters_launches"]],
            (str(row["hta_non_gpu_rows_on_a_stream"]) + (
                ": " + ", ".join(f"{x['cat']} {x['name'][:16]}… {x['dur_us']:.0f} µs"
                                 for x in row["hta_non_gpu_rows_examples"])
                if row["hta_non_gpu_rows_examples"] else ""))
            if row["hta_non_gpu_rows_on_a_stream"] is not None else "n/a",
        )
    console.print(why)
    console.print("launch filter: device ops kept only if the host event with their correlation "
                  "id starts before the last ProfilerStep (HTA does this only when the trace "
                  "holds > 1 distinct ProfilerStep#N name); µs rounding: start rounded up and "
                  "end down to whole µs, as HTA does on ns-resolution traces; ops w/o launch: "
                  "device ops whose launching runtime call is not in the trace (their summed "
                  "duration in ms).")

    compared = [r for r in rows if r["max_abs_diff"] is not None]
    flagged = [r for r in compared if r["flagged"]]
    verdict = {"tolerance_pp": TOLERANCE_PP, "ranks_compared": len(compared),
               "ranks_within": len(compared) - len(flagged),
               "flagged": [{"input": r["input"], "rank": r["rank"], "metrics": r["flagged"],
                            "max_abs_diff": r["max_abs_diff"]} for r in flagged],
               "met": bool(compared) and not flagged}
    console.print(f"\nTarget: every metric within {TOLERANCE_PP:g} pp of HTA. "
                  f"{verdict['ranks_within']} of {len(compared)} rank(s) within; "
                  + ("[green]MET[/green]" if verdict["met"] else "[red]NOT MET[/red]"))
    for r in flagged:
        console.print(f"  [red]{r['input']} rank {r['rank']}: {', '.join(r['flagged'])} "
                      f"(max |diff| {r['max_abs_diff']:.2f} pp); with HTA's rules emulated: "
                      f"{fmt(r['max_abs_diff_hta_rules'])} pp[/red]")

    if args.json_out:
        doc = {
            "benchmark": "analyze_vs_hta",
            "date": dt.datetime.now().isoformat(timespec="seconds"),
            "git": commit, "traincast_version": traincast.__version__,
            "hta_python": hta_py, "hta_version": hta_version,
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "tolerance_pp": TOLERANCE_PP, "verdict": verdict, "rows": rows,
            "inputs": results, "notes": notes,
        }
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"wrote {args.json_out}")
    return 1 if failed_tc else 0


if __name__ == "__main__":
    sys.exit(main())
