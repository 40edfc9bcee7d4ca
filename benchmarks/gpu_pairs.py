"""Predictions against real GPU runs: replay, unprofiled step, cross-GPU and batch what-ifs.

Input: the runs ``benchmarks/record_gpu_pairs.py`` recorded on real GPUs, laid out as
``ROOT/rK/<gpu>_<workload>_bs<B>/`` (``K`` a repeat; each folder holds ``.run.json`` with
the unprofiled step times, and, for the repeats that kept it, the Kineto trace). The default
root is ``/work/gpu_pairs`` (data, not source: the traces are ~1 MB each and stay out of the
repository).

Truth per configuration: the **unprofiled** step, the median over repeats of each run's
median step (``unprofiled_median_ns``), with the repeats' spread (max/min - 1) beside it: the
machines are shared VMs and the same run moves by up to ~50 % between repeats, so an error
inside the spread is not a model error. The profiled step of a configuration is the median
over its traces of ``traincast.predict(ts).iterations.measured_ns`` (median over steps).

For every trace (one row each):

* ``replay``: the replayed (predicted) profiled step against the trace's own measured step;
* ``unprofiled``: traincast's ``unprofiled_ns`` (the step without the profiler's per-event
  host cost, :mod:`traincast.whatif.unprofiled`, shipped overhead table) against the truth,
  beside the profiled step taken as the prediction (what a tool without that model says);
* ``gpu``: ``what_if=["gpu=<other>"]`` (H100 <-> H200): predicted profiled step against the
  other GPU's profiled step, and predicted ``unprofiled_ns`` against its truth;
* ``batch``: ``what_if=["batch_size=<other>"]`` (B <-> 2B, same GPU): likewise.

Errors are ``predicted / measured - 1`` in %; the summary gives the median and mean absolute
error per comparison, and how many rows fall inside the truth's repeat spread.

Run: ``python benchmarks/gpu_pairs.py [--root DIR] [--json-out FILE]`` (default
``benchmarks/results/gpu_pairs.json``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import traincast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, machine  # noqa: E402  (shared benchmark helpers)

DEFAULT_ROOT = Path("/work/gpu_pairs")
DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu_pairs.json"
#: folder label -> traincast catalog name
GPUS = {"h100": "H100-SXM", "h200": "H200"}
NAME = re.compile(r"^(?P<gpu>[a-z0-9]+)_(?P<workload>[a-z]+)_bs(?P<batch>\d+)$")
#: a configuration: (gpu label, workload, batch size)
Config = tuple[str, str, int]


def _med_ms(col: Any) -> float:
    return float(col.median()) / 1e6


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred / meas - 1.0)


def has_trace(folder: Path) -> bool:
    """Whether a run folder kept a Kineto trace (a ``*.json.gz`` other than ``et.json.gz``,
    or a ``*.pt.trace.json``)."""
    return any(p.name != "et.json.gz" for p in folder.glob("*.json.gz")) or any(
        folder.glob("*.pt.trace.json"))


def find_runs(root: Path) -> tuple[dict[str, list[Path]], dict[str, Config]]:
    """Run folders per configuration under ``root`` (``rK/<gpu>_<workload>_bs<B>/``) and each
    configuration's (gpu label, workload, batch)."""
    runs: dict[str, list[Path]] = {}
    configs: dict[str, Config] = {}
    for meta in sorted(root.glob("r*/*/.run.json")):
        m = NAME.match(meta.parent.name)
        if not m:
            continue
        runs.setdefault(meta.parent.name, []).append(meta.parent)
        configs[meta.parent.name] = (m["gpu"], m["workload"], int(m["batch"]))
    return runs, configs


def compute(runs: dict[str, list[Path]], configs: dict[str, Config],
            gpus: dict[str, str] | None = None,
            predict: set[Path] | None = None, what_ifs: bool = True) -> dict[str, Any]:
    """Every check of the module docstring on the runs of each configuration.

    ``runs``: configuration name -> run folders (each with ``.run.json``; a folder holding a
    Kineto trace, :func:`has_trace`, is predicted); ``configs``: name -> (gpu label, workload, batch);
    ``gpus``: gpu label -> traincast catalog name (default :data:`GPUS`), the targets of the
    ``gpu`` check; ``predict``: the traced folders to predict (default: every one; the
    others still count in the truth); ``what_ifs=False``: the replay and unprofiled checks
    only. Returns ``truth_ms``, ``truth_runs_ms``, ``truth_spread_pct``,
    ``profiled_ms`` (per configuration) and ``rows`` (one dict per check and trace; ``profiler``
    holds the trace's recorded profiler settings when ``.run.json`` names them, ``config`` the
    traced configuration)."""
    gpus = GPUS if gpus is None else gpus
    times: dict[str, list[float]] = {}
    traces: dict[str, list[Path]] = {}
    meta: dict[Path, dict[str, Any]] = {}
    for name, dirs in runs.items():
        for d in dirs:
            meta[d] = json.loads((d / ".run.json").read_text())
            times.setdefault(name, []).append(meta[d]["unprofiled_median_ns"] / 1e6)
            if has_trace(d) and (predict is None or d in predict):
                traces.setdefault(name, []).append(d)
    truth = {n: statistics.median(v) for n, v in times.items()}
    spread = {n: 100.0 * (max(v) / min(v) - 1.0) for n, v in times.items()}
    loaded = {d: traincast.load(d) for ds in traces.values() for d in ds}
    base = {d: traincast.predict(ts).iterations for d, ts in loaded.items()}
    profiled = {n: statistics.median(_med_ms(base[d].measured_ns) for d in ds)
                for n, ds in traces.items()}

    rows: list[dict[str, Any]] = []
    for name, dirs in sorted(traces.items()):
        gpu, workload, batch = configs[name]
        for d in dirs:
            it = base[d]
            label = f"{d.parent.name}/{name if d.name == name else d.name}"
            common = {"trace": label, "config": name, "workload": workload}
            if "profiler" in meta[d]:
                common["profiler"] = meta[d]["profiler"]
            rows.append({**common, "check": "replay", "target": name,
                         "predicted_ms": _med_ms(it.predicted_ns),
                         "measured_ms": _med_ms(it.measured_ns),
                         "err_pct": _err(_med_ms(it.predicted_ns), _med_ms(it.measured_ns))})
            rows.append({**common, "check": "unprofiled", "target": name,
                         "predicted_ms": _med_ms(it.unprofiled_ns), "measured_ms": truth[name],
                         "err_pct": _err(_med_ms(it.unprofiled_ns), truth[name]),
                         "profiled_as_is_err_pct": _err(_med_ms(it.measured_ns), truth[name]),
                         "truth_spread_pct": spread[name]})
            others: list[tuple[str, str, str]] = []
            for n2, (g2, w2, b2) in sorted(configs.items()):
                if g2 != gpu and g2 in gpus and (w2, b2) == (workload, batch):
                    others.append(("gpu", f"gpu={gpus[g2]}", n2))
            for n2, (g2, w2, b2) in sorted(configs.items(), key=lambda kv: kv[1][2]):
                if (g2, w2) == (gpu, workload) and b2 != batch:
                    others.append(("batch", f"batch_size={b2}", n2))
            for check, what, target in others if what_ifs else ():
                if target not in truth or target not in profiled:
                    continue
                p = traincast.predict(loaded[d], what_if=[what]).iterations
                rows.append({**common, "check": check, "what_if": what, "target": target,
                             "predicted_ms": _med_ms(p.predicted_ns),
                             "measured_ms": profiled[target],
                             "err_pct": _err(_med_ms(p.predicted_ns), profiled[target]),
                             "unprofiled_predicted_ms": _med_ms(p.unprofiled_ns),
                             "unprofiled_measured_ms": truth[target],
                             "unprofiled_err_pct": _err(_med_ms(p.unprofiled_ns),
                                                        truth[target]),
                             "truth_spread_pct": spread[target]})
    return {"truth_ms": truth, "truth_runs_ms": times, "truth_spread_pct": spread,
            "profiled_ms": profiled, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    ap.add_argument("--json-out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    from rich.console import Console
    from rich.table import Table

    found, configs = find_runs(args.root)
    if not any(has_trace(d) for ds in found.values() for d in ds):
        print(f"gpu_pairs.py: no recorded runs under {args.root}", file=sys.stderr)
        return 2
    res = compute(found, configs)
    rows, truth, runs = res["rows"], res["truth_ms"], res["truth_runs_ms"]
    spread, profiled = res["truth_spread_pct"], res["profiled_ms"]

    console = Console(width=max(Console().width, 150))
    t = Table(title=f"Predictions against real GPU runs ({args.root}), ms per step")
    for c in ("trace", "check", "target", "predicted", "measured", "err %", "unprof pred",
              "unprof truth", "unprof err %", "truth spread %"):
        t.add_column(c, justify="left" if c in ("trace", "check", "target") else "right")
    for r in rows:
        t.add_row(r["trace"], r["check"],
                  r["target"], f"{r['predicted_ms']:.2f}", f"{r['measured_ms']:.2f}",
                  f"{r['err_pct']:+.1f}",
                  "" if "unprofiled_predicted_ms" not in r
                  else f"{r['unprofiled_predicted_ms']:.2f}",
                  "" if "unprofiled_measured_ms" not in r else f"{r['unprofiled_measured_ms']:.2f}",
                  "" if "unprofiled_err_pct" not in r else f"{r['unprofiled_err_pct']:+.1f}",
                  "" if "truth_spread_pct" not in r else f"{r['truth_spread_pct']:.0f}")
    console.print(t)

    summary: dict[str, Any] = {}
    for check, key in (("replay", "err_pct"), ("unprofiled", "err_pct"),
                       ("unprofiled", "profiled_as_is_err_pct"), ("gpu", "err_pct"),
                       ("gpu", "unprofiled_err_pct"), ("batch", "err_pct"),
                       ("batch", "unprofiled_err_pct")):
        sel = [r for r in rows if r["check"] == check and key in r]
        if not sel:
            continue
        a = [abs(r[key]) for r in sel]
        inside = (sum(abs(r[key]) <= r["truth_spread_pct"] for r in sel)
                  if all("truth_spread_pct" in r for r in sel) else None)
        summary[f"{check}:{key}"] = {"n": len(sel), "median_abs_pct": statistics.median(a),
                                     "mean_abs_pct": statistics.fmean(a),
                                     "inside_truth_spread": inside}
    s = Table(title="Summary: |predicted / measured - 1| in %")
    for c in ("comparison", "rows", "median", "mean", "inside the repeats' spread"):
        s.add_column(c, justify="left" if c == "comparison" else "right")
    for k, v in summary.items():
        s.add_row(k, str(v["n"]), f"{v['median_abs_pct']:.1f}", f"{v['mean_abs_pct']:.1f}",
                  "" if v["inside_truth_spread"] is None else str(v["inside_truth_spread"]))
    console.print(s)
    out = {"root": str(args.root), "machine": machine(), "git": git_state(),
           "truth_ms": truth, "truth_runs_ms": runs, "truth_spread_pct": spread,
           "profiled_ms": profiled, "rows": rows, "summary": summary}
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.json_out.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(args.json_out)
    console.print(f"written {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
