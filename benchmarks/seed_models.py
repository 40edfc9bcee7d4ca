"""Random DLRM / Transformer configurations: predicted vs real unprofiled CPU step time.

The validation harness of the from-ET predictions, after Lin et al. (arXiv 2404.12674), scaled to this CPU:
``--n`` random configurations per kind (:mod:`harness.random_models`) are trained
for real on one thread, each recorded into ``--out/<kind>-<i>/`` (``run.json`` with the
unprofiled step time and its noise, ``et.json`` with one step's execution trace,
``kineto.json`` with one other step's Kineto trace); an existing recording is reused. Per
configuration, against the **truth** (median unprofiled step, ms):

* **replay** -- ``traincast.predict(traincast.load(kineto.json)).iterations["predicted_ns"]``:
  the replay of the profiled step, what a user gets today from a Kineto trace;
* **replay-unprof** -- the same prediction's ``unprofiled_ns`` (the replay with the
  profiler's per-event cost removed, :mod:`traincast.record.overhead`);
* **from-ET** -- ``traincast.predict.from_et.predict_from_et(et.json, --models).step_ns``: the
  step predicted from the execution trace and the kernel models fitted on this machine
  (``traincast bench`` + ``traincast fit``), no Kineto trace used. Skipped with a note when
  the predictor or the models are missing.

Error = (predicted - truth) / truth; the summary is the geometric mean of |error| per method
(the paper's GMAE), over the configurations where the method ran.

Run: ``python benchmarks/seed_models.py --n 10 --seed 0 --out /tmp/traincast-seed-models
--models /tmp/traincast-kernel-models [--overheads FILE] [--kind dlrm|transformer|both]
[--compare-with OTHER_RECORDING_DIR]
[--json-out benchmarks/results/seed_models.json]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, machine  # noqa: E402

METHODS = ("replay", "replay_unprof", "from_et")


def geomean_abs(errors: list[float]) -> float | None:
    """Geometric mean of |error| (fractions; an exact 0 counts as 1e-6), None if empty."""
    if not errors:
        return None
    return math.exp(statistics.mean(math.log(max(abs(e), 1e-6)) for e in errors))


def evaluate(run: dict[str, Any], folder: Path, models: Path | None,
             overheads: Path | None = None) -> dict[str, Any]:
    """One configuration's row: truth, noise and every method's prediction and error."""
    import traincast

    truth = run["timing"]["unprofiled_step_ns"]
    row: dict[str, Any] = {
        "name": run["config"]["name"], "kind": run["config"]["kind"],
        "config": run["config"], "truth_ms": truth / 1e6,
        "noise_pct": 100 * run["timing"]["noise"],
        "truth_min_ms": run["timing"].get("min_step_ns", 0) / 1e6,
        "profiled_ms": run["timing"]["kineto_step_ns"] / 1e6, "loadavg": run.get("loadavg"),
        "notes": []}
    t0 = time.perf_counter()
    pred = traincast.predict(traincast.load(folder / "kineto.json", cache=False))
    it = pred.iterations
    row["replay_ms"] = float(it["predicted_ns"].median()) / 1e6
    row["replay_unprof_ms"] = float(it["unprofiled_ns"].median()) / 1e6
    row["replay_s"] = round(time.perf_counter() - t0, 3)
    row["from_et_ms"] = None
    if models is not None:
        t0 = time.perf_counter()
        try:
            from traincast.predict.from_et import predict_from_et

            p = (predict_from_et(folder / "et.json", models, overheads=overheads)
                 if overheads else predict_from_et(folder / "et.json", models))
            row["from_et_ms"] = p.step_ns / 1e6
            row["from_et_notes"] = list(p.notes)
        except (ImportError, AttributeError) as e:
            row["notes"].append(f"from-ET predictor unavailable: {e}")
        except Exception as e:  # noqa: BLE001 - reported per configuration, the run goes on
            row["notes"].append(f"from-ET failed: {type(e).__name__}: {e}")
        row["from_et_s"] = round(time.perf_counter() - t0, 3)
    for m in METHODS:
        v = row.get(f"{m}_ms")
        row[f"{m}_err_pct"] = None if v is None else 100 * (v - row["truth_ms"]) / row[
            "truth_ms"]
    return row


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10, help="configurations per kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/traincast-seed-models"),
                    help="recordings folder (reused: existing run.json are not re-recorded)")
    ap.add_argument("--models", type=Path, default=Path("/tmp/traincast-kernel-models"),
                    help="kernel models folder of `traincast fit` (for the from-ET method)")
    ap.add_argument("--overheads", type=Path,
                    help="overheads.json of `traincast bench` for the from-ET method (default: "
                         "the predictor's own look-up, next to the models)")
    ap.add_argument("--kind", default="both", choices=["dlrm", "transformer", "dlrm_wide", "both", "all"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compare-with", type=Path,
                    help="another recording of the same set: report how far its truth is "
                         "from this one's (between-run noise)")
    ap.add_argument("--json-out", type=Path,
                    default=REPO / "benchmarks" / "results" / "seed_models.json")
    args = ap.parse_args(argv)

    import torch
    from harness.random_models import describe, record_set
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160) if Console().width < 160 else Console()
    notes: list[str] = []
    models: Path | None = args.models
    if not (models and models.is_dir()):
        notes.append(f"no kernel models at {args.models}: from-ET not run (make them with "
                     "`python benchmarks/kernel_models.py` or `traincast bench` + `fit`)")
        models = None
    else:
        try:
            from traincast.predict.from_et import predict_from_et  # noqa: F401
        except ImportError as e:
            notes.append(f"from-ET predictor unavailable ({e}): only truth, noise and replay")
            models = None
    kinds = {"both": ["dlrm", "transformer"], "all": ["dlrm", "dlrm_wide", "transformer"]}.get(args.kind, [args.kind])
    t_rec = time.perf_counter()
    runs: list[tuple[dict[str, Any], Path]] = []
    for kind in kinds:
        for run in record_set(kind, args.n, args.seed, args.out, warmup=args.warmup,
                              steps=args.steps, repeats=args.repeats):
            runs.append((run, args.out / run["config"]["name"]))
    t_rec = time.perf_counter() - t_rec
    rows = [evaluate(run, folder, models, args.overheads) for run, folder in runs]

    table = Table(title=f"seed models: {len(rows)} configurations, 1 thread, "
                        f"torch {torch.__version__}")
    for col in ("config", "summary", "truth ms", "noise %", "profiled ms", "replay ms",
                "err %", "replay-unprof ms", "err %", "from-ET ms", "err %"):
        table.add_column(col, justify="left" if col in ("config", "summary") else "right")
    for r in rows:
        table.add_row(r["name"], describe(r["config"]), f"{r['truth_ms']:.2f}",
                      f"{r['noise_pct']:.1f}", f"{r['profiled_ms']:.2f}",
                      f"{r['replay_ms']:.2f}", _fmt(r["replay_err_pct"], "+.1f"),
                      f"{r['replay_unprof_ms']:.2f}", _fmt(r["replay_unprof_err_pct"], "+.1f"),
                      _fmt(r["from_et_ms"], ".2f"), _fmt(r["from_et_err_pct"], "+.1f"))
    console.print(table)
    for r in rows:
        for n in r["notes"]:
            console.print(f"[yellow]{r['name']}: {n}[/yellow]")

    if args.compare_with:
        for r in rows:
            other = args.compare_with / r["name"] / "run.json"
            if other.is_file():
                o = json.loads(other.read_text())["timing"]["unprofiled_step_ns"] / 1e6
                r["other_truth_ms"] = o
                r["between_run_pct"] = 100 * (max(o, r["truth_ms"]) / min(o, r["truth_ms"]) - 1)
    summary: dict[str, Any] = {}
    for group in ("all", *kinds):
        sel = [r for r in rows if group in ("all", r["kind"])]
        summary[group] = {
            "configs": len(sel),
            "noise_pct_median": statistics.median(r["noise_pct"] for r in sel) if sel else None,
            "between_run_pct_median": statistics.median(b) if (b := [
                r["between_run_pct"] for r in sel if "between_run_pct" in r]) else None,
            **{f"gmae_{m}_pct": (None if (g := geomean_abs(
                [r[f"{m}_err_pct"] / 100 for r in sel if r[f"{m}_err_pct"] is not None]))
                is None else 100 * g) for m in METHODS},
            **{f"runs_{m}": sum(r[f"{m}_err_pct"] is not None for r in sel) for m in METHODS},
        }
    for group, s in summary.items():
        console.print(f"{group:12s} n={s['configs']:<3d} median noise "
                      f"{_fmt(s['noise_pct_median'], '.1f')}%  between runs "
                      f"{_fmt(s['between_run_pct_median'], '.1f')}%  GMAE replay "
                      f"{_fmt(s['gmae_replay_pct'], '.1f')}%  replay-unprof "
                      f"{_fmt(s['gmae_replay_unprof_pct'], '.1f')}%  from-ET "
                      f"{_fmt(s['gmae_from_et_pct'], '.1f')}% ({s['runs_from_et']} runs)")
    for n in notes:
        console.print(f"[yellow]{n}[/yellow]")
    doc = {"benchmark": "seed_models", "date": dt.datetime.now().isoformat(timespec="seconds"),
           "git": git_state(), "machine": machine(), "torch": str(torch.__version__),
           "threads": 1, "n": args.n, "seed": args.seed, "kinds": kinds,
           "warmup": args.warmup, "steps": args.steps, "repeats": args.repeats,
           "compare_with": str(args.compare_with) if args.compare_with else None,
           "models": str(args.models) if models else None,
           "overheads": str(args.overheads) if args.overheads else None,
           "record_s": round(t_rec, 1),
           "error_definition": "(predicted - truth) / truth; GMAE = geometric mean of |error|",
           "notes": notes, "summary": summary, "rows": rows,
           "command": "python benchmarks/seed_models.py " + " ".join(
               argv if argv is not None else sys.argv[1:])}
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(doc, indent=1) + "\n")
    console.print(f"wrote {os.path.relpath(args.json_out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
