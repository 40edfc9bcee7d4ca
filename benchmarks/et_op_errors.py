"""Per-op error of the from-ET prediction: each op the kernel models time, against the same
op in a Kineto trace of another step of the same run.

For every recording folder (``run.json``, ``et.json``, ``kineto.json`` of
:mod:`harness.random_models`; gzipped files are read too): the ops
``traincast.predict.from_et.predict_from_et`` timed with a model (its ``ops`` table,
``model_ns`` > 0), matched by name and order of occurrence to the ``cpu_op`` events of the
Kineto step (``ProfilerStep#1``; the k-th ET op of a name is the k-th Kineto op of that name
in the step). Measured = the Kineto event's duration (it includes the profiler's own cost,
about a microsecond per op: read ratios of ops under ~20 us with that in mind).

Per op family (family/direction, elementwise and update split by op name): ops matched,
summed predicted and measured ms, and the geometric mean of |predicted/measured - 1| (GMAE).
Per run, the whole step predicted against the median unprofiled step, wall clock and the
training thread's CPU time (the same on a quiet machine; the CPU time leaves out the time
the thread waited for a core on a shared one), and the GMAE per kind.

Run: ``python benchmarks/et_op_errors.py --models MODELS RUN_DIR... [--overheads FILE]
[--json-out FILE]`` (``RUN_DIR`` may also be a folder of recording folders). On the kept set:
``mkdir -p /tmp/cpu_dlrm && tar xzf benchmarks/data/cpu_dlrm/cpu_dlrm-*.tgz -C /tmp/cpu_dlrm
&& python benchmarks/et_op_errors.py --models /tmp/cpu_dlrm/models /tmp/cpu_dlrm/runs``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _read_json(path: Path) -> Any:
    gz = path.with_name(path.name + ".gz")
    if not path.is_file() and gz.is_file():
        path = gz
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def _find(folder: Path, name: str) -> Path:
    p = folder / name
    return p if p.is_file() else folder / (name + ".gz")


def kineto_ops(path: Path, step: str = "ProfilerStep#1") -> dict[str, list[float]]:
    """Durations (ns) of the ``cpu_op`` events inside ``step``, per name, in start order."""
    doc = _read_json(path)
    evs = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X"]
    marks = [e for e in evs if e.get("name") == step]
    if not marks:
        return {}
    t0, t1 = marks[0]["ts"], marks[0]["ts"] + marks[0]["dur"]
    out: dict[str, list[float]] = {}
    for e in sorted(evs, key=lambda e: e["ts"]):
        if e.get("cat") == "cpu_op" and t0 <= e["ts"] <= t1:
            out.setdefault(e["name"], []).append(float(e["dur"]) * 1e3)
    return out


def et_occurrence(et_path: Path) -> dict[int, int]:
    """``{node id: k}``: the op is the k-th node of its name in the trace (id order)."""
    from traincast.trace.readers.et import read_execution_trace

    df = read_execution_trace(et_path).nodes.to_pandas()
    seen: dict[str, int] = {}
    occ = {}
    for i, name in zip(df["id"].tolist(), df["name"].tolist(), strict=True):
        occ[int(i)] = seen.get(name, 0)
        seen[name] = seen.get(name, 0) + 1
    return occ


def _group(row: dict[str, Any]) -> str:
    key = f"{row['family']}/{row['direction']}"
    if row["family"] in ("elementwise", "update", "memcpy", "movement"):
        key += f" {row['name'].removeprefix('aten::')}"
    return key


def op_rows(folder: Path, models: Any) -> list[dict[str, Any]]:
    """One row per modelled ET op of ``folder`` matched to its Kineto event."""
    from traincast.predict.from_et import predict_from_et

    et = _find(folder, "et.json")
    pred = predict_from_et(et, models)
    kfile = _find(folder, "kineto.json")
    kin = kineto_ops(kfile if kfile.is_file() else folder / "rank-0.pt.trace.json.gz")
    occ = et_occurrence(et)
    out = []
    for r in pred.ops.to_dict("records"):
        if r["model_ns"] <= 0:
            continue
        durs = kin.get(r["name"], [])
        k = occ.get(int(r["id"]), -1)
        if 0 <= k < len(durs):
            out.append({"run": folder.name, "name": r["name"], "family": r["family"],
                        "direction": r["direction"], "pred_ns": float(r["model_ns"]),
                        "meas_ns": durs[k]})
    return out


def _truth(folder: Path) -> tuple[str, float, float] | None:
    """(kind, wall median ns, thread-CPU median ns) of a recording (``run.json``) or a kept
    run (``.run.json``); None without a truth."""
    if (folder / "run.json").is_file():
        run = json.loads((folder / "run.json").read_text())
        t = run["timing"]
        wall = t["unprofiled_step_ns"]
        return run["config"]["name"].split("-")[0], wall, t.get("unprofiled_cpu_step_ns", wall)
    if (folder / ".run.json").is_file():
        m = json.loads((folder / ".run.json").read_text())
        wall = m["unprofiled_median_ns"]
        return m["workload"], wall, m.get("unprofiled_cpu_median_ns") or wall
    return None


def step_rows(folder: Path, models: Any, overheads: Path | None) -> dict[str, Any] | None:
    """The whole step: from-ET prediction against the wall-clock and thread-CPU truths."""
    from traincast.predict.from_et import predict_from_et

    truth = _truth(folder)
    if truth is None:
        return None
    kind, wall, cpu = truth
    pred = predict_from_et(_find(folder, "et.json"), models, overheads=overheads).step_ns
    return {"run": folder.name, "kind": kind, "pred_ms": pred / 1e6, "wall_ms": wall / 1e6,
            "cpu_ms": cpu / 1e6, "err_wall_pct": 100 * (pred / wall - 1),
            "err_cpu_pct": 100 * (pred / cpu - 1)}


def gmae_pct(errors_pct: list[float]) -> float:
    return 100 * math.exp(statistics.mean(math.log(max(abs(e) / 100, 1e-6))
                                          for e in errors_pct))


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family group: ops, predicted and measured ms (sums), GMAE of per-op ratios, median
    ratio predicted/measured."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_group(r), []).append(r)
    out = []
    for g, rs in sorted(groups.items(), key=lambda kv: -sum(r["meas_ns"] for r in kv[1])):
        ratios = [r["pred_ns"] / r["meas_ns"] for r in rs if r["meas_ns"] > 0]
        errs = [max(abs(x - 1), 1e-6) for x in ratios]
        out.append({"family": g, "ops": len(rs),
                    "pred_ms": sum(r["pred_ns"] for r in rs) / 1e6,
                    "meas_ms": sum(r["meas_ns"] for r in rs) / 1e6,
                    "gmae_pct": 100 * math.exp(statistics.mean(math.log(e) for e in errs))
                    if errs else None,
                    "median_ratio": statistics.median(ratios) if ratios else None})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--overheads", type=Path,
                    help="overheads.json of `traincast bench` (default: ../bench/ beside the "
                         "models, else the predictor's own look-up)")
    args = ap.parse_args(argv)
    from traincast.costs.kernel_models import KernelModels

    km = KernelModels.load(args.models)
    ov = args.overheads
    if ov is None and (args.models.parent / "bench" / "overheads.json").is_file():
        ov = args.models.parent / "bench" / "overheads.json"
    folders = []
    for r in args.runs:
        if _find(r, "et.json").is_file():
            folders.append(r)
        else:
            folders += sorted(p for p in r.iterdir() if _find(p, "et.json").is_file())
    rows = [x for f in folders for x in op_rows(f, km)]
    steps = [r for f in folders if (r := step_rows(f, km, ov)) is not None]
    print(f"{'run':18s} {'pred ms':>9s} {'wall ms':>9s} {'err %':>7s} {'cpu ms':>9s} "
          f"{'err %':>7s}")
    for r in steps:
        print(f"{r['run']:18s} {r['pred_ms']:9.2f} {r['wall_ms']:9.2f} {r['err_wall_pct']:+7.1f}"
              f" {r['cpu_ms']:9.2f} {r['err_cpu_pct']:+7.1f}")
    kinds = sorted({r["kind"] for r in steps})
    groups = {k: [r for r in steps if r["kind"] == k] for k in kinds}
    if "dlrm" in groups and "dlrm_wide" in groups:
        groups["dlrm (all)"] = groups["dlrm"] + groups["dlrm_wide"]
    summary = {k: {"runs": len(v), "gmae_wall_pct": gmae_pct([r["err_wall_pct"] for r in v]),
                   "gmae_cpu_pct": gmae_pct([r["err_cpu_pct"] for r in v])}
               for k, v in groups.items()}
    for k, v in summary.items():
        print(f"{k:12s} runs {v['runs']:2d}  GMAE vs wall {v['gmae_wall_pct']:5.1f}%  vs thread "
              f"CPU {v['gmae_cpu_pct']:5.1f}%")
    print()
    table = summarise(rows)
    print(f"{'family':34s} {'ops':>5s} {'pred ms':>9s} {'meas ms':>9s} {'GMAE %':>7s} "
          f"{'median pred/meas':>16s}")
    for t in table:
        print(f"{t['family']:34s} {t['ops']:5d} {t['pred_ms']:9.2f} {t['meas_ms']:9.2f} "
              f"{t['gmae_pct']:7.1f} {t['median_ratio']:16.2f}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"runs": [str(f) for f in folders],
                                             "models": str(args.models), "families": table,
                                             "steps": steps, "summary": summary, "ops": rows},
                                            indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
