"""Record the demo workload at several batch and world sizes, with repeats: the CPU data set
for validating what-if predictions.

Each run is ``traincast.record.record_demo(DIR, world_size=W, batch_size=B, warmup=2,
active=3, model=...)`` into ``OUT/ws{W}_bs{B}_r{K}/`` (K = 0 .. repeats-1). Runs are
recorded in rounds: every configuration once (round 0), then every configuration again, so a
slow phase of a noisy machine hits all configurations rather than all repeats of one. The
order inside round K is a fixed shuffle (``random.Random(K)``), so no configuration always
follows the same neighbour.

A run counts as recorded when its folder holds ``.run.json`` (``record_demo`` writes it
last, after every rank succeeded) with the same model, world size, batch size and steps, and
one trace per rank; such runs are skipped, so an interrupted sweep resumes where it stopped.
A folder whose ``.run.json`` describes another configuration stops the sweep (use another
``--out``); ``--force`` re-records everything.

Step time of a run: ``traincast.load(DIR).iterations`` durations (``ProfilerStep#N``
windows) over all ranks and the ``active`` steps; the run's figure is their median. Per
configuration the table and ``OUT/sweep.json`` give the median over repeats, the min and max
over repeats and the spread max/min - 1 (repeats "agree" when it is <= 10 %).

The default ``--out`` is outside the repository (``/tmp/traincast-sweep``): the traces are
data, not source (~0.3 MB per rank and run).

Run: ``python benchmarks/record_sweep.py [--out DIR] [--repeats N] [--batch-sizes 8,16]
[--world-sizes 1,2] [--model transformer|mlp] [--summary-only] [--force]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("/tmp/traincast-sweep")
DEFAULT_BATCH_SIZES = (8, 16, 32, 64, 128)
DEFAULT_WORLD_SIZES = (1, 2)
DEFAULT_REPEATS = 3
WARMUP = 2
ACTIVE = 3
#: repeats of one configuration "agree" when max/min - 1 is at most this
AGREE_SPREAD = 0.10
RUN_FILE = ".run.json"  # = traincast.record.demo.RUN_FILE (not imported: torch-free here)
SUMMARY_FILE = "sweep.json"


def run_name(world_size: int, batch_size: int, repeat: int) -> str:
    """Folder name of one run: ``ws{W}_bs{B}_r{K}``."""
    return f"ws{world_size}_bs{batch_size}_r{repeat}"


def parse_run_name(name: str) -> tuple[int, int, int] | None:
    """(world_size, batch_size, repeat) of a run folder name, or None."""
    import re

    m = re.fullmatch(r"ws(\d+)_bs(\d+)_r(\d+)", name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def read_run_config(run_dir: Path) -> dict[str, Any] | None:
    """The ``.run.json`` of a run folder, or None if absent or unreadable."""
    try:
        return json.loads((run_dir / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None


def is_recorded(run_dir: Path, world_size: int, batch_size: int, model: str) -> bool:
    """True if ``run_dir`` holds a complete recording of this configuration.

    Raises:
        SystemExit: the folder holds a recording of another configuration.
    """
    cfg = read_run_config(run_dir)
    if cfg is None:
        return False
    want = {"world_size": world_size, "batch_size": batch_size, "model": model,
            "warmup": WARMUP, "active": ACTIVE}
    got = {k: cfg.get(k) for k in want}
    if got != want:
        sys.exit(f"error: {run_dir} holds another recording ({got}, expected {want}); "
                 "use another --out or --force")
    return all((run_dir / f"rank-{r}.pt.trace.json.gz").is_file() for r in range(world_size))


def step_times_ms(run_dir: Path) -> list[float]:
    """Step times (ms) of one run: every rank's ``ProfilerStep#N`` windows, from
    ``traincast.load(run_dir).iterations``."""
    import traincast

    dur = traincast.load(run_dir).iterations.column("dur").to_numpy()
    return [float(d) / 1e6 for d in dur]


def summarise_config(run_medians: list[float]) -> dict[str, Any]:
    """Median, min, max and spread of the per-repeat medians of one configuration."""
    lo, hi = min(run_medians), max(run_medians)
    spread = hi / lo - 1.0 if lo > 0 else float("inf")
    return {"median_ms": statistics.median(run_medians), "min_ms": lo, "max_ms": hi,
            "spread_pct": 100.0 * spread, "agree_10pct": spread <= AGREE_SPREAD,
            "repeats": len(run_medians)}


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}"
                                         ) from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return sorted(set(vals))


def _atomic_write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help=f"folder of the runs and of {SUMMARY_FILE} (default {DEFAULT_OUT})")
    ap.add_argument("--batch-sizes", type=_int_list, default=list(DEFAULT_BATCH_SIZES),
                    help="per-rank batch sizes (default 8,16,32,64,128)")
    ap.add_argument("--world-sizes", type=_int_list, default=list(DEFAULT_WORLD_SIZES),
                    help="world sizes (default 1,2)")
    ap.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                    help=f"runs per configuration (default {DEFAULT_REPEATS})")
    ap.add_argument("--model", default="transformer", help="transformer (default) or mlp")
    ap.add_argument("--summary-only", action="store_true",
                    help="record nothing; summarise the runs already in --out")
    ap.add_argument("--force", action="store_true", help="re-record runs already recorded")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    configs = [(w, b) for w in args.world_sizes for b in args.batch_sizes]
    n_total = len(configs) * args.repeats

    previous: dict[str, dict[str, Any]] = {}  # run name -> its entry in the last sweep.json
    try:
        old = json.loads((out / SUMMARY_FILE).read_text())
        for c in old.get("configs", []):
            for r in c.get("runs", []):
                previous[r["run"]] = r
    except (OSError, ValueError, KeyError, TypeError):
        pass

    console.print(f"sweep: model={args.model}, world sizes {args.world_sizes}, batch sizes "
                  f"{args.batch_sizes}, {args.repeats} repeats, warmup {WARMUP}, active "
                  f"{ACTIVE} -> {out}/ ({n_total} runs; load average {_loadavg()})")
    t_start = time.perf_counter()
    runs: dict[str, dict[str, Any]] = {}
    done = 0
    recorded_now = 0
    for k in range(args.repeats):
        order = list(configs)
        random.Random(k).shuffle(order)
        for w, b in order:
            name = run_name(w, b, k)
            run_dir = out / name
            done += 1
            if not args.force and is_recorded(run_dir, w, b, args.model):
                entry = dict(previous.get(name, {}))
                status = "already recorded"
            elif args.summary_only:
                console.print(f"[{done:>2}/{n_total}] {name:<16} missing (--summary-only)")
                continue
            else:
                from traincast.record import record_demo

                load_before = _loadavg()
                t0 = time.perf_counter()
                record_demo(run_dir, world_size=w, warmup=WARMUP, active=ACTIVE,
                            model=args.model, batch_size=b)
                rec_s = time.perf_counter() - t0
                recorded_now += 1
                entry = {"record_s": rec_s, "loadavg_before": load_before,
                         "recorded_at": dt.datetime.now().isoformat(timespec="seconds")}
                status = f"recorded in {rec_s:5.1f} s"
            steps = step_times_ms(run_dir)
            entry.update({"run": name, "repeat": k, "dir": str(run_dir),
                          "steps_ms": steps, "median_step_ms": statistics.median(steps)})
            runs[name] = entry
            console.print(f"[{done:>2}/{n_total}] {name:<16} {status}; median step "
                          f"{entry['median_step_ms']:8.1f} ms (steps {min(steps):.1f}-"
                          f"{max(steps):.1f}; elapsed {time.perf_counter() - t_start:5.0f} s)")
    wall_s = time.perf_counter() - t_start

    summary_configs = []
    for w, b in configs:
        rs = [runs[n] for k in range(args.repeats) if (n := run_name(w, b, k)) in runs]
        if not rs:
            continue
        s = summarise_config([r["median_step_ms"] for r in rs])
        all_steps = [x for r in rs for x in r["steps_ms"]]
        s.update({"world_size": w, "batch_size": b,
                  "steps_min_ms": min(all_steps), "steps_max_ms": max(all_steps),
                  "runs": rs})
        summary_configs.append(s)

    table = Table(title=f"Step time per configuration ({args.model}, CPU, gloo; median over "
                        f"ranks x {ACTIVE} steps per run, then over repeats)")
    for col in ("world size", "batch/rank", "repeats", "median ms", "min ms", "max ms",
                "spread %", "agree ≤10%", "per-repeat medians ms", "ms per sample"):
        table.add_column(col, justify="left" if col.startswith("per-") else "right")
    for s in summary_configs:
        meds = ", ".join(f"{r['median_step_ms']:.1f}" for r in s["runs"])
        table.add_row(str(s["world_size"]), str(s["batch_size"]), str(s["repeats"]),
                      f"{s['median_ms']:.1f}", f"{s['min_ms']:.1f}", f"{s['max_ms']:.1f}",
                      f"{s['spread_pct']:.1f}", "yes" if s["agree_10pct"] else "[red]no[/]",
                      meds, f"{s['median_ms'] / s['batch_size']:.2f}")
    console.print(table)
    n_agree = sum(s["agree_10pct"] for s in summary_configs)
    spreads = [s["spread_pct"] for s in summary_configs]
    record_s = [r["record_s"] for r in runs.values() if "record_s" in r]
    if spreads:
        console.print(f"repeats agree within 10 % on {n_agree} of {len(summary_configs)} "
                      f"configurations; spread median {statistics.median(spreads):.1f} %, "
                      f"max {max(spreads):.1f} %")
    console.print(f"total: {wall_s:.0f} s wall for this invocation ({recorded_now} runs "
                  f"recorded now); recording time summed over all {len(record_s)} runs with "
                  f"a known time: {sum(record_s):.0f} s; load average now {_loadavg()}")

    import torch  # recording needs it anyway; only for the version in the summary

    summary = {
        "created": dt.datetime.now().isoformat(timespec="seconds"),
        "model": args.model, "warmup": WARMUP, "active": ACTIVE,
        "world_sizes": args.world_sizes, "batch_sizes": args.batch_sizes,
        "repeats": args.repeats, "agree_spread": AGREE_SPREAD,
        "statistic": "per run: median of iterations.dur over ranks and active steps; "
                     "per config: median/min/max over repeats",
        "order": "rounds: every config once per round, shuffled by random.Random(round)",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": str(torch.__version__),
                    "loadavg_end": _loadavg()},
        "wall_s_this_invocation": wall_s,
        "record_s_total_known": sum(record_s),
        "configs": summary_configs,
    }
    _atomic_write_json(out / SUMMARY_FILE, summary)
    console.print(f"summary: {out / SUMMARY_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
