"""Fit the profiler's cost per event kind from a recording, and check it on runs it did not see.

Reads a recording of ``benchmarks/record_profiler_cost.py`` (a folder, or a ``.tar.xz`` /
``.tgz`` archive of one), counts per program and setting the host events per step by cost
class (:func:`traincast.whatif.unprofiled.step_features`: op events, runtime calls, Python
frames, op inputs) and fits :data:`traincast.costs.profiler_overhead.PARTS` by non-negative
least squares (:func:`traincast.costs.profiler_overhead.fit_profiler_cost`): Kineto's extra
step time over no profiler against its op events and runtime calls, and each option's extra
over Kineto against its own features. Prints the coefficients, each program's measured and
fitted extra, and the extra predicted with the program left out of the fit.

``--check DIR ...``: runs the fit did not see, each a folder of settings recorded the same way
(``benchmarks/record_profiler_cost.py --programs gpt_bs4,...``) or a run of
``record_gpu_pairs.py`` (``.run.json`` with ``unprofiled_median_ns`` beside a trace recorded
with shapes): for each trace, ``traincast.predict(trace, overhead=FITTED).iterations
["unprofiled_ns"]`` (median over its steps) against the measured step with no profiler, and the
same with the per-event table shipped before (``--baseline``, default the package's table
without its per-kind part). ``--toml`` prints the table entry for
``traincast/costs/data/profiler_overhead.toml``; ``--json-out`` writes everything.

Run: ``python benchmarks/profiler_cost.py RECORDING [RECORDING ...] [--check DIR ...] [--toml]
[--json-out benchmarks/results/profiler_cost_<device>.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_state, machine  # noqa: E402

import traincast  # noqa: E402
from traincast.costs.profiler_overhead import (  # noqa: E402
    PARTS,
    ProfilerOverhead,
    fit_profiler_cost,
    overhead_table,
)
from traincast.whatif.unprofiled import step_features, view_op_median_ns  # noqa: E402

#: recording folder name of each setting -> the part its extra is fitted on, and its base
SETTING_PART = {"kineto": ("kineto", "none"), "+shapes": ("record_shapes", "kineto"),
                "+stack": ("with_stack", "kineto"), "+et": ("execution_trace", "kineto")}


def open_recording(path: Path) -> Path:
    """A folder of the recording: ``path`` itself, or an archive extracted to a temp folder."""
    if path.is_dir():
        return path
    if not path.is_file():
        raise SystemExit(f"{path}: no such recording")
    out = Path(tempfile.mkdtemp(prefix="tc-pcost-"))
    with tarfile.open(path) as tar:
        tar.extractall(out, filter="data")
    return out


def _load(trace_dir: Path) -> traincast.TraceSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traincast.load(trace_dir, cache=False)


def program_samples(prog: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The fit samples of one program folder, and its per-setting step times/features."""
    run = json.loads((prog / ".run.json").read_text())
    med = run["median_step_ns"]
    feats: dict[str, dict[str, float]] = {}
    views: dict[str, float] = {}
    for setting in SETTING_PART:
        d = prog / setting
        if d.is_dir():
            ts = _load(d)
            v = view_op_median_ns(ts)
            if v is not None:
                views[SETTING_PART[setting][0]] = v
            f = step_features(ts)
            feats[setting] = {k: float(np.nanmedian(f[k])) if f[k].notna().any() else np.nan
                              for k in ("op", "runtime", "python", "input")}
    n_in = next((feats[s]["input"] for s in ("+shapes", "+et")
                 if s in feats and np.isfinite(feats[s]["input"])), np.nan)
    samples = []
    for setting, (part, base) in SETTING_PART.items():
        if setting not in feats or setting not in med or base not in med:
            continue
        fe = dict(feats[setting])
        fe["input"] = n_in if np.isfinite(n_in) else 0.0
        samples.append({"program": prog.name, "part": part, "setting": setting,
                        "extra_ns": float(med[setting] - med[base]), "features": fe})
    return samples, {"program": prog.name, "median_step_ns": med, "features": feats,
                     "view_op_ns": views,
                     "round_spread": run.get("round_spread", {})}


def fit(recordings: list[Path]) -> tuple[dict[str, dict[str, float]], float,
                                         dict[str, float], list[dict], list[dict]]:
    """``(per_kind, inputs_per_op, view_op_ns, report, programs)`` of recording folders
    (``view_op_ns``: per setting, the median over programs of their traces' median view-like
    op duration, the host-speed reference; repeats of the
    same programs are separate samples; a program is left out with all its repeats)."""
    samples: list[dict[str, Any]] = []
    programs = []
    for recording in recordings:
        for prog in sorted(p for p in recording.iterdir() if (p / ".run.json").is_file()):
            s, info = program_samples(prog)
            samples += s
            programs.append({"recording": recording.name, **info})
    per_kind, report = fit_profiler_cost(samples)
    views: dict[str, list[float]] = {}
    for info in programs:
        for setting, v in info["view_op_ns"].items():
            views.setdefault(setting, []).append(v)
    view_op_ns = {k: float(np.median(v)) for k, v in views.items()}
    ops = [s["features"]["op"] for s in samples if s["part"] == "record_shapes"]
    ins = [s["features"]["input"] for s in samples if s["part"] == "record_shapes"]
    inputs_per_op = float(sum(ins) / max(sum(ops), 1.0))
    return per_kind, inputs_per_op, view_op_ns, report, programs


def _check_trace(trace_dir: Path, truth_ns: float, overheads: dict[str, ProfilerOverhead]
                 ) -> dict[str, Any]:
    ts = _load(trace_dir)
    row: dict[str, Any] = {"truth_ms": truth_ns / 1e6}
    for name, ov in overheads.items():
        pred = traincast.predict(ts, overhead=ov)
        it = pred.iterations
        row["profiled_ms"] = float(np.median(it["measured_ns"])) / 1e6
        u = float(np.median(it["unprofiled_ns"])) / 1e6
        row[f"{name}_ms"] = u
        row[f"{name}_err_pct"] = 100.0 * (u - row["truth_ms"]) / row["truth_ms"]
    row["settings"] = pred.unprofiled.settings.describe()
    return row


def check(dirs: list[Path], overheads: dict[str, ProfilerOverhead]) -> list[dict[str, Any]]:
    """Unprofiled-step errors on runs the fit did not see (see the module docstring)."""
    rows = []
    for d in dirs:
        for run_json in sorted(d.rglob(".run.json")):
            run = json.loads(run_json.read_text())
            base = run_json.parent
            if "median_step_ns" in run:  # a record_profiler_cost.py program: every setting
                truth = run["median_step_ns"]["none"]
                for setting in SETTING_PART:
                    if (base / setting).is_dir():
                        rows.append({"run": str(base.relative_to(d)), "setting": setting,
                                     **_check_trace(base / setting, truth, overheads)})
            elif "setting" in run and (base.parent / ".run.json").is_file():
                continue  # one setting of a program above: done with it
            elif "unprofiled_median_ns" in run:  # one trace with its truth (a setting's
                # folder, or a record_gpu_pairs.py run: shapes)
                rows.append({"run": str(base.relative_to(d)),
                             "setting": run.get("setting", "+shapes"),
                             **_check_trace(base, run["unprofiled_median_ns"], overheads)})
    return rows


def toml_entry(per_kind: dict[str, dict[str, float]], inputs_per_op: float,
               view_op_ns: dict[str, float]) -> str:
    vals = ", ".join(f"{k} = {v:.0f}" for k, v in view_op_ns.items())
    lines = [f"inputs_per_op = {inputs_per_op:.3f}", f"view_op_ns = {{ {vals} }}"]
    for part in PARTS:
        vals = ", ".join(f"{f} = {v:.1f}" for f, v in per_kind[part].items())
        lines.append(f"per_kind.{part} = {{ {vals} }}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recording", type=Path, nargs="+",
                    help="recordings (folders or archives) of the same device and torch")
    ap.add_argument("--check", type=Path, nargs="*", default=[])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="the recordings' device when they carry no MANIFEST.json")
    ap.add_argument("--baseline-device", default=None,
                    help="device of the shipped per-event table to compare with")
    ap.add_argument("--toml", action="store_true")
    ap.add_argument("--no-host-scale", action="store_true",
                    help="check the fitted costs without the host-speed factor")
    ap.add_argument("--baseline-torch", default=None,
                    help="torch version of the shipped per-event table to compare with")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    recs = [open_recording(r) for r in args.recording]
    manifest = json.loads((recs[0] / "MANIFEST.json").read_text()) if (
        recs[0] / "MANIFEST.json").is_file() else {}
    device = manifest.get("device") or args.device
    per_kind, inputs_per_op, view_op_ns, report, programs = fit(recs)
    print(f"# per-kind profiler cost fitted on {len(programs)} programs ({device}, torch "
          f"{manifest.get('machine', {}).get('torch', '?')}), ns per unit")
    for part, feats in per_kind.items():
        print(f"  {part:16s} " + "  ".join(f"{f} {v:8.1f}" for f, v in feats.items()))
    print(f"  inputs per op {inputs_per_op:.2f}; view-like op medians (us) "
          + ", ".join(f"{k} {v / 1e3:.2f}" for k, v in view_op_ns.items()))
    print("\n| program | setting | measured extra us/step | fitted | left out | err (left out) % |")
    print("|---|---|---|---|---|---|")
    for r in report:
        loo = r["loo_ns"]
        err = 100 * (loo - r["extra_ns"]) / r["extra_ns"] if loo is not None and r[
            "extra_ns"] else float("nan")
        print(f"| {r['program']} | {r['part']} | {r['extra_ns'] / 1e3:.1f} | "
              f"{r['fitted_ns'] / 1e3:.1f} | "
              f"{'-' if loo is None else f'{loo / 1e3:.1f}'} | {err:+.0f} |")
    fitted = ProfilerOverhead(ns_per_event={}, per_kind=per_kind, inputs_per_op=inputs_per_op,
                              view_op_ns={} if args.no_host_scale else view_op_ns,
                              device=device,
                              source=f"fitted on {', '.join(map(str, args.recording))}")
    shipped = overhead_table(args.baseline_torch or manifest.get("machine", {}).get("torch"),
                             args.baseline_device or device)
    shipped.per_kind, shipped.view_op_ns = {}, {}  # the per-event figures alone
    checks = check(args.check, {"per_kind": fitted, "per_event": shipped}) if args.check else []
    if checks:
        print("\n| run | setting | truth ms | profiled ms | per-kind ms | err % | per-event ms "
              "| err % |")
        print("|---|---|---|---|---|---|---|---|")
        for r in checks:
            print(f"| {r['run']} | {r['setting']} | {r['truth_ms']:.3f} | "
                  f"{r['profiled_ms']:.3f} | {r['per_kind_ms']:.3f} | "
                  f"{r['per_kind_err_pct']:+.1f} | {r['per_event_ms']:.3f} | "
                  f"{r['per_event_err_pct']:+.1f} |")
        for name in ("per_kind", "per_event"):
            errs = [abs(r[f"{name}_err_pct"]) for r in checks]
            print(f"{name}: median |err| {statistics.median(errs):.1f}%, "
                  f"max {max(errs):.1f}% over {len(errs)} traces")
    if args.toml:
        print("\n" + toml_entry(per_kind, inputs_per_op, view_op_ns))
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "benchmark": "profiler_cost", "recordings": [str(r) for r in args.recording],
            "manifest": manifest, "git": git_state(), "machine": machine(),
            "per_kind": per_kind, "inputs_per_op": inputs_per_op, "view_op_ns": view_op_ns,
            "fit": report,
            "programs": programs, "checks": checks}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
