"""Accuracy of what-if predictions (batch size, world size) against real CPU runs.

Input: a sweep recorded by ``benchmarks/record_sweep.py`` (folders ``ws{W}_bs{B}_r{K}/``,
each a complete ``record_demo`` run with its ``.run.json``).

Protocol, for each reference configuration (default ``ws2_bs32``; ``--reference``):

1. Take one repeat of the reference (``--reference-repeat``: by default the repeat whose
   median step time is the median over the reference's repeats, i.e. not an outlier run)
   and ``ts = traincast.load(that folder)``.
2. For every other configuration (W, B) in the sweep, predict its step time from ``ts`` with
   ``traincast.predict(ts, what_if=...)``, giving only the keys that change:
   ``{"batch_size": B}``, ``{"world_size": W}`` or both (with ``batch_size``, also
   ``"batch_size_from": B_ref``, since traincast's what-if reader may not find
   ``record_demo``'s ``.run.json``). ``batch_size`` is the **per-rank**
   batch size, as in ``record_demo`` and ``.run.json`` (sequences per rank for the
   transformer); changing ``world_size`` keeps the per-rank batch (weak scaling). The
   predicted step time is the median of ``Prediction.iterations["predicted_ns"]`` over
   ranks and iterations.
3. Measured step time of the target: per repeat, the median of
   ``traincast.load(run).iterations`` durations over ranks and active steps; then the
   median over repeats. Its min and max over repeats give the range.
4. Per target: error % = (predicted - measured median) / measured median; repeats agree
   when max/min - 1 <= 10 %; "in range" when min/1.05 <= predicted <= max * 1.05.

Targets: MAPE <= 8 % over the targets whose repeats agree within 10 %, and every prediction
in range. For context the table also gives a naive baseline that needs no model: the
reference's measured step time scaled by B / B_ref (world size ignored), and the plain
replay of the reference (``traincast.predict(ts)``, no what-if) against its own median.

If ``traincast.predict`` does not take ``what_if`` yet (TypeError), or raises
NotImplementedError, KeyError or ImportError for every what-if, the script prints the
measured side, then ``what-if prediction not available yet: <error>``, and exits 0. A
what-if that traincast refuses (ParameterError) is a target without a prediction. Missed
targets are printed, not errors. Exit 1: traincast raised anything else; exit 2: bad
arguments or an incomplete sweep folder.

Run: ``python benchmarks/whatif_accuracy.py [--sweep-dir DIR] [--reference ws2_bs32]
[--reference-repeat median|K] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_sweep import (  # noqa: E402  (benchmarks/ is not a package)
    AGREE_SPREAD,
    DEFAULT_OUT,
    parse_run_name,
    read_run_config,
    run_name,
    step_times_ms,
    summarise_config,
)

MAPE_TARGET_PCT = 8.0
RANGE_SLACK = 1.05
#: what_if failures that mean "not implemented yet" rather than a bug (ImportError: a module
#: of the what-if machinery is not there yet)
NOT_AVAILABLE = (TypeError, NotImplementedError, KeyError, ImportError)


@dataclass
class Config:
    world_size: int
    batch_size: int
    runs: dict[int, Path] = field(default_factory=dict)  # repeat -> folder
    run_median_ms: dict[int, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"ws{self.world_size}_bs{self.batch_size}"

    def stats(self) -> dict[str, Any]:
        return summarise_config(list(self.run_median_ms.values()))


def discover(sweep_dir: Path) -> dict[tuple[int, int], Config]:
    """Complete runs in ``sweep_dir`` (folders with ``.run.json``), grouped by config."""
    configs: dict[tuple[int, int], Config] = {}
    for d in sorted(p for p in sweep_dir.iterdir() if p.is_dir()):
        key = parse_run_name(d.name)
        if key is None or read_run_config(d) is None:
            continue
        w, b, k = key
        configs.setdefault((w, b), Config(w, b)).runs[k] = d
    return configs


def median_step_ms(steps: list[float]) -> float:
    return statistics.median(steps)


def predicted_ms(pred: Any) -> float:
    """Median predicted step time (ms) over ranks and iterations of a Prediction."""
    return float(statistics.median(pred.iterations["predicted_ns"])) / 1e6


def choose_repeat(cfg: Config, how: str) -> int:
    if how == "median":
        meds = sorted(cfg.run_median_ms.items(), key=lambda kv: (kv[1], kv[0]))
        return meds[(len(meds) - 1) // 2][0]
    k = int(how)
    if k not in cfg.runs:
        raise SystemExit(f"error: {cfg.name} has no repeat {k} (has {sorted(cfg.runs)})")
    return k


def parse_reference(text: str) -> tuple[int, int]:
    key = parse_run_name(text + "_r0")
    if key is None:
        raise argparse.ArgumentTypeError(f"expected ws{{W}}_bs{{B}}, got {text!r}")
    return key[0], key[1]


def evaluate_reference(ref: Config, repeat: int, configs: dict[tuple[int, int], Config],
                       errors: list[str], comm_model: Path | None = None) -> dict[str, Any]:
    """All predictions from one reference run; see the module docstring."""
    import traincast
    from traincast.errors import ParameterError

    ref_dir = ref.runs[repeat]
    ts = traincast.load(ref_dir)
    ref_ms = ref.run_median_ms[repeat]
    out: dict[str, Any] = {"reference": ref.name, "reference_dir": str(ref_dir),
                           "reference_repeat": repeat, "reference_step_ms": ref_ms,
                           "rows": [], "unavailable": []}
    try:  # plain replay of the reference, for context (no what-if)
        replay = predicted_ms(traincast.predict(ts))
        st = ref.stats()
        out["replay"] = {"predicted_ms": replay, "measured_median_ms": st["median_ms"],
                         "error_pct": 100.0 * (replay - st["median_ms"]) / st["median_ms"]}
    except Exception as exc:  # noqa: BLE001 - reported, the what-if rows still count
        errors.append(f"replay of {ref_dir}: {type(exc).__name__}: {exc}")
        out["replay"] = None
    for (w, b), cfg in sorted(configs.items()):
        if (w, b) == (ref.world_size, ref.batch_size):
            continue
        what_if: dict[str, int] = {}
        if w != ref.world_size:
            what_if["world_size"] = w
        if b != ref.batch_size:
            what_if["batch_size"] = b
            # explicit, because the what-if reader may not find record_demo's .run.json
            what_if["batch_size_from"] = ref.batch_size
        st = cfg.stats()
        row: dict[str, Any] = {
            "target": cfg.name, "world_size": w, "batch_size": b, "what_if": what_if,
            "measured_median_ms": st["median_ms"], "measured_min_ms": st["min_ms"],
            "measured_max_ms": st["max_ms"], "repeats": st["repeats"],
            "spread_pct": st["spread_pct"], "repeats_agree": st["agree_10pct"],
            "baseline_ms": ref_ms * b / ref.batch_size,
            "predicted_ms": None, "error_pct": None, "in_range": None, "status": "ok",
        }
        row["baseline_error_pct"] = 100.0 * (row["baseline_ms"] - st["median_ms"]) / st[
            "median_ms"]
        try:
            comm = None
            if comm_model is not None:
                from traincast.costs.comm import CommModel

                comm = CommModel.from_json(comm_model)
            pred = traincast.predict(ts, what_if=what_if, comm=comm)
            p = predicted_ms(pred)
        except NOT_AVAILABLE as exc:
            row["status"] = f"not available: {type(exc).__name__}: {exc}"
            out["unavailable"].append(f"{type(exc).__name__}: {exc}")
        except ParameterError as exc:  # a what-if traincast declines: a miss, not a crash
            row["status"] = f"refused: {exc}"
        except Exception as exc:  # noqa: BLE001 - a bug in traincast: report, exit 1 later
            row["status"] = f"error: {type(exc).__name__}: {exc}"
            errors.append(f"{ref.name} -> {cfg.name} {what_if}: "
                          + "".join(traceback.format_exception_only(type(exc), exc)).strip())
        else:
            row["predicted_ms"] = p
            row["error_pct"] = 100.0 * (p - st["median_ms"]) / st["median_ms"]
            row["in_range"] = st["min_ms"] / RANGE_SLACK <= p <= st["max_ms"] * RANGE_SLACK
            try:
                row["prediction_summary"] = dict(pred.summary)
            except Exception:  # noqa: BLE001 - diagnostic only
                row["prediction_summary"] = None
        out["rows"].append(row)
    rows = out["rows"]
    predicted = [r for r in rows if r["predicted_ms"] is not None]
    agreeing = [r for r in predicted if r["repeats_agree"]]
    out["summary"] = {
        "targets": len(rows), "predicted": len(predicted), "agreeing": len(agreeing),
        "mape_pct": (statistics.fmean(abs(r["error_pct"]) for r in agreeing)
                     if agreeing else None),
        "mape_all_pct": (statistics.fmean(abs(r["error_pct"]) for r in predicted)
                         if predicted else None),
        "in_range": sum(bool(r["in_range"]) for r in predicted),
        "baseline_mape_pct": (statistics.fmean(
            abs(r["baseline_error_pct"]) for r in rows if r["repeats_agree"])
            if any(r["repeats_agree"] for r in rows) else None),
    }
    s = out["summary"]
    s["mape_target_met"] = (s["mape_pct"] is not None and s["mape_pct"] <= MAPE_TARGET_PCT
                            and len(predicted) == len(rows))
    s["range_target_met"] = bool(rows) and s["in_range"] == len(rows)
    return out


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep-dir", type=Path, default=DEFAULT_OUT,
                    help=f"folder written by record_sweep.py (default {DEFAULT_OUT})")
    ap.add_argument("--reference", type=parse_reference, action="append",
                    help="reference config ws{W}_bs{B} (repeatable; default ws2_bs32)")
    ap.add_argument("--reference-repeat", default="median",
                    help="which repeat of the reference to predict from: 'median' "
                         "(default: the run with the median step time) or its index K")
    ap.add_argument("--json-out", type=Path, help="write rows and summary as JSON")
    ap.add_argument("--comm-model", type=Path,
                    help="communication model (traincast calibrate comm) for world-size "
                         "what-ifs from a one-rank reference")
    args = ap.parse_args(argv)
    if args.reference_repeat != "median" and not args.reference_repeat.isdigit():
        ap.error("--reference-repeat must be 'median' or a repeat index")
    refs = args.reference or [(2, 32)]

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 170)
    if not args.sweep_dir.is_dir():
        console.print(f"error: no sweep folder {args.sweep_dir}; run "
                      "benchmarks/record_sweep.py first")
        return 2
    configs = discover(args.sweep_dir)
    for cfg in configs.values():
        for k, d in sorted(cfg.runs.items()):
            cfg.run_median_ms[k] = median_step_ms(step_times_ms(d))
    missing = [run_name(*r, 0)[:-3] for r in refs if r not in configs]
    if missing or len(configs) < 2:
        console.print(f"error: {args.sweep_dir} lacks the reference {missing} or holds fewer "
                      f"than 2 configurations (found {sorted(c.name for c in configs.values())})")
        return 2

    errors: list[str] = []
    results = []
    for w, b in refs:
        ref = configs[(w, b)]
        results.append(evaluate_reference(ref, choose_repeat(ref, args.reference_repeat),
                                          configs, errors, args.comm_model))

    available = any(r["summary"]["predicted"] for r in results)
    for res in results:
        s = res["summary"]
        table = Table(title=f"What-if from {res['reference']} (repeat "
                            f"{res['reference_repeat']}, {res['reference_step_ms']:.1f} ms) "
                            "-> other configurations: predicted vs median of the target's "
                            "repeats")
        for col in ("target", "what_if", "predicted ms", "measured median ms",
                    "repeats min–max ms", "n", "spread %", "agree ≤10%", "error %",
                    f"in [min/{RANGE_SLACK:g}, max·{RANGE_SLACK:g}]", "∝batch baseline ms",
                    "baseline err %"):
            table.add_column(col, justify="left" if col in ("target", "what_if") else "right")
        for r in res["rows"]:
            ok = r["in_range"]
            table.add_row(
                r["target"],
                ", ".join(f"{k}={v}" for k, v in r["what_if"].items() if k != "batch_size_from"),
                _fmt(r["predicted_ms"]) if r["status"] == "ok" else "[yellow]n/a[/]",
                _fmt(r["measured_median_ms"]),
                f"{r['measured_min_ms']:.1f}–{r['measured_max_ms']:.1f}", str(r["repeats"]),
                _fmt(r["spread_pct"]), "yes" if r["repeats_agree"] else "[red]no[/]",
                _fmt(r["error_pct"], "+.1f"),
                "n/a" if ok is None else ("yes" if ok else "[red]no[/]"),
                _fmt(r["baseline_ms"]), _fmt(r["baseline_error_pct"], "+.1f"))
        console.print(table)
        statuses = sorted({r["status"] for r in res["rows"] if r["status"] != "ok"})
        for st in statuses:
            targets = [r["target"] for r in res["rows"] if r["status"] == st]
            console.print(f"  n/a for {', '.join(targets)}: {st}")
        if res.get("replay"):
            rp = res["replay"]
            console.print(f"replay of the reference run (no what-if): {rp['predicted_ms']:.1f} ms "
                          f"vs {rp['measured_median_ms']:.1f} ms median of its repeats "
                          f"({rp['error_pct']:+.1f} %)")
        console.print(
            f"{res['reference']}: MAPE over the {s['agreeing']} targets whose repeats agree "
            f"within {100 * AGREE_SPREAD:g} %: {_fmt(s['mape_pct'], '.2f')} % (target <= "
            f"{MAPE_TARGET_PCT:g} %: {'met' if s['mape_target_met'] else 'NOT met'}); "
            f"in range: {s['in_range']} of {s['targets']} ({'met' if s['range_target_met'] else 'NOT met'}); "
            f"MAPE over all predicted targets {_fmt(s['mape_all_pct'], '.2f')} %; "
            f"∝batch baseline MAPE (agreeing targets) {_fmt(s['baseline_mape_pct'], '.2f')} %")

    if args.json_out is not None:
        data = {"created": dt.datetime.now().isoformat(timespec="seconds"),
                "sweep_dir": str(args.sweep_dir), "available": available,
                "mape_target_pct": MAPE_TARGET_PCT, "range_slack": RANGE_SLACK,
                "agree_spread": AGREE_SPREAD, "errors": errors, "references": results}
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json_out.with_name(f".{args.json_out.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, args.json_out)
        console.print(f"written: {args.json_out}")

    for e in errors:
        console.print(f"[red]traincast raised[/]: {e}")
    if errors:
        return 1
    if not available:
        first = next((u for r in results for u in r["unavailable"]), "no target predicted")
        print(f"what-if prediction not available yet: {first}")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
