"""Cross-GPU what-if per kernel class: every H100 wild trace predicted on MI300X, A100, B200.

For every ``h100_*`` trace in ``../shared/data/traces/tracelens/wild`` and each target GPU, runs
``traincast.predict(ts, what_if=["gpu=TARGET"])`` and reports the measured step, the replayed
step (same GPU), the predicted step, and per kernel class the summed device time before and
after (:func:`traincast.whatif.gpu.gpu_breakdown`). There is no measured target here: the
numbers are the model's, to be read against its constants (``hardware.toml``), not an accuracy.

It also looks for real pairs among the shared traces (the same workload recorded on two GPUs):
``hta/trace_diff/{control,test}`` (A100 rank 3 of 8 vs V100 rank 1 of 2) is the only candidate;
the script predicts each on the other's GPU and reports the overlap of their kernel names, so
the reader can judge whether it is a pair at all.

Run: ``python benchmarks/whatif_crossgpu.py [--root PATH] [--targets MI300X,A100-SXM4-80GB,B200]
[--out benchmarks/results/whatif_crossgpu.json] [--markdown]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, machine  # noqa: E402  (shared benchmark helpers)

DEFAULT_ROOT = REPO.parent / "shared" / "data" / "traces"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "whatif_crossgpu.json"
DEFAULT_TARGETS = ("MI300X", "A100-SXM4-80GB", "B200")
CLASSES = ("gemm", "attention", "memory", "other", "host_copy", "device_copy")


def _step_ms(pred: Any) -> tuple[float, float, float]:
    """(measured, replayed, predicted) step in ms: mean over the predicted iterations."""
    it = pred.iterations
    return (float(it["measured_ns"].mean()) / 1e6, float(it["replay_ns"].mean()) / 1e6,
            float(it["predicted_ns"].mean()) / 1e6)


def _row(ts: Any, label: str, target: str) -> dict[str, Any]:
    import traincast
    from traincast.whatif.gpu import gpu_breakdown

    t0 = time.perf_counter()
    pred = traincast.predict(ts, what_if=[f"gpu={target}"])
    secs = time.perf_counter() - t0
    measured, replay, predicted = _step_ms(pred)
    br = gpu_breakdown(ts, target)
    classes = {r["class"]: {"count": int(r["count"]), "old_ms": r["old_ns"] / 1e6,
                            "new_ms": r["new_ns"] / 1e6, "ratio": r["ratio"], "rate": r["rate"]}
               for r in br.to_dict("records")}
    return {"trace": label, "target": target, "measured_ms": measured, "replay_ms": replay,
            "predicted_ms": predicted, "predict_s": secs, "classes": classes,
            "notes": pred.notes if hasattr(pred, "notes") else []}


def _kernel_names(ts: Any) -> set[str]:
    ev = ts.events.to_pandas()
    return set(ev.loc[ev.kind == "kernel", "name"].astype(str))


def _pairs(root: Path) -> list[dict[str, Any]]:
    """The trace_diff pair, each side predicted on the other's GPU."""
    import traincast
    from traincast.costs.hardware import load_catalog

    d = root / "hta" / "trace_diff"
    a, b = d / "control.json.gz", d / "test.json.gz"
    if not (a.exists() and b.exists()):
        return []
    cat = load_catalog()
    tsa, tsb = traincast.load(a), traincast.load(b)
    ga = cat.match_first(p for i in tsa.ranks.values() for p in i.device_properties)
    gb = cat.match_first(p for i in tsb.ranks.values() for p in i.device_properties)
    na, nb = _kernel_names(tsa), _kernel_names(tsb)
    jacc = len(na & nb) / max(len(na | nb), 1)
    out = []
    for ts, src, dst, other in ((tsa, "control", gb, tsb), (tsb, "test", ga, tsa)):
        row = _row(ts, f"hta/trace_diff/{src}", dst.name)
        row["other_measured_ms"] = float(traincast.predict(other).iterations["measured_ns"]
                                         .mean()) / 1e6
        row["kernel_name_jaccard"] = jacc
        out.append(row)
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("| trace | target | measured ms | replay ms | predicted ms | "
            + " | ".join(f"{c} old->new ms" for c in CLASSES) + " |")
    sep = "|" + "---|" * (5 + len(CLASSES))
    lines = [head, sep]
    for r in rows:
        cells = []
        for c in CLASSES:
            x = r["classes"].get(c)
            cells.append(f"{x['old_ms']:.2f} -> {x['new_ms']:.2f}" if x else "")
        name = r["trace"].replace("tracelens/wild/", "").replace(".json.gz", "")
        lines.append(f"| {name} | {r['target']} | {r['measured_ms']:.2f} | {r['replay_ms']:.2f} "
                     f"| {r['predicted_ms']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    ap.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown only")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import traincast

    wild = args.root / "tracelens" / "wild"
    files = sorted(wild.glob("h100_*.json.gz"))
    if not files:
        print(f"no h100_* traces under {wild}", file=sys.stderr)
        return 1
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rows = []
    for f in files:
        ts = traincast.load(f)
        for t in targets:
            rows.append(_row(ts, str(f.relative_to(args.root)), t))
    pairs = _pairs(args.root)
    data = {"benchmark": "whatif_crossgpu", "date": dt.datetime.now(dt.timezone.utc).isoformat(),
            "git": git_state(), "machine": machine(), "targets": targets, "rows": rows,
            "pairs": pairs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(_table(rows))
    if pairs:
        print()
        print("| trace (recorded GPU) | predicted on | measured ms | predicted ms | "
              "other trace's measured ms | kernel-name Jaccard |")
        print("|---|---|---|---|---|---|")
        for p in pairs:
            print(f"| {p['trace']} | {p['target']} | {p['measured_ms']:.1f} | "
                  f"{p['predicted_ms']:.1f} | {p['other_measured_ms']:.1f} | "
                  f"{p['kernel_name_jaccard']:.2f} |")
    if not args.markdown:
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
