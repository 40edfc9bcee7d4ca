"""Accuracy of ``traincast plan`` against vTrain's measured GPT iteration times (A100).

Data: ``../shared/data/measurements/vtrain/vtrain_ground_truth_{single,multi}_a100.csv``
(1,440 single-node configs on 2-8 GPUs, 109 multi-node configs on 64-512 GPUs; Megatron-
DeepSpeed, full recomputation, see :mod:`harness.vtrain`).

What is fitted: the 10 parameters of :mod:`harness.calibrate` (per-family efficiency
and kernel latency, collective efficiency and latency, per-pass and per-step overhead), by
least squares on log time. Nothing else is tuned. Protocols, every error on configs the fit
did not see:

1. ``single->multi``: fit on all single-node configs, predict every multi-node config.
2. ``k-fold``: 5 folds over all 1,549 configs (seeded shuffle, single- and multi-node
   configs stratified so every fold holds both); each config predicted by the fit on the
   other four folds; MAPE reported separately for single- and multi-node configs. In the
   fit, each multi-node config weighs ``MULTI_WEIGHT`` (5) single-node ones, so that the 87
   large training configs of a fold are not outvoted by 1,152 small, host-bound ones.

Targets (issue 5): multi-node MAPE <= 10% (vTrain's own: 14.73%), single-node <= 8% (vTrain:
8.37%). ``--write-calibration`` stores the fit on all configs as the shipped default
(``traincast/plan/data/calibration.json``).

Run: ``python benchmarks/plan_vtrain.py [--folds 5] [--json-out FILE] [--write-calibration]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "measurements" / "vtrain"
MULTI_WEIGHT = 5.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--write-calibration", action="store_true")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args(argv)
    single_csv = DATA / "vtrain_ground_truth_single_a100.csv"
    multi_csv = DATA / "vtrain_ground_truth_multi_a100.csv"
    if not single_csv.exists():
        print(f"vTrain data not found under {DATA}")
        return 0

    from harness import calibrate as C
    from harness.vtrain import cases, read_vtrain

    from traincast.util.executor import map_tasks

    def mapper(fn, items):  # noqa: ANN001, ANN202
        return map_tasks(fn, items, executor="process", workers=args.workers)

    S = cases(read_vtrain(single_csv))
    M = cases(read_vtrain(multi_csv))
    y_s = np.array([c.measured_s for c in S])
    y_m = np.array([c.measured_s for c in M])
    out: dict = {"created": dt.datetime.now().isoformat(timespec="seconds"),
                 "single_configs": len(S), "multi_configs": len(M)}
    t0 = time.perf_counter()

    def mape(p: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(np.abs(p / y - 1)) * 100)

    # 1. single -> multi
    cal = C.fit_calibration(S, mapper=mapper, source="vTrain single-node A100 (1,440 configs)")
    u = C.vector_from_calibration(cal)
    p_m = C.predict_cases(M, u, mapper)
    out["single_to_multi"] = {"train_single_mape_pct": cal.fit["train_mape_pct"],
                              "multi_mape_pct": mape(p_m, y_m),
                              "multi_median_err_pct": float(np.median(p_m / y_m - 1) * 100),
                              "params": cal.fit["params"]}
    print(f"single->multi: train (single) {cal.fit['train_mape_pct']:.2f}%, held-out multi "
          f"{mape(p_m, y_m):.2f}%", flush=True)

    # 2. k-fold over all configs
    rng = np.random.default_rng(0)
    fold_s = rng.permutation(len(S)) % args.folds
    fold_m = rng.permutation(len(M)) % args.folds
    pred_s = np.empty(len(S))
    pred_m = np.empty(len(M))
    for k in range(args.folds):
        train = [c for c, f in zip(S, fold_s, strict=True) if f != k] + \
                [c for c, f in zip(M, fold_m, strict=True) if f != k]
        w = [1.0] * int(np.sum(fold_s != k)) + [MULTI_WEIGHT] * int(np.sum(fold_m != k))
        calk = C.fit_calibration(train, mapper=mapper, weights=w)
        uk = C.vector_from_calibration(calk)
        ts = [c for c, f in zip(S, fold_s, strict=True) if f == k]
        tm = [c for c, f in zip(M, fold_m, strict=True) if f == k]
        pred_s[fold_s == k] = C.predict_cases(ts, uk, mapper)
        pred_m[fold_m == k] = C.predict_cases(tm, uk, mapper)
        print(f"fold {k + 1}/{args.folds}: train {calk.fit['train_mape_pct']:.2f}%", flush=True)
    out["kfold"] = {"folds": args.folds, "single_mape_pct": mape(pred_s, y_s),
                    "multi_mape_pct": mape(pred_m, y_m),
                    "all_mape_pct": mape(np.r_[pred_s, pred_m], np.r_[y_s, y_m]),
                    "multi_max_ape_pct": float(np.max(np.abs(pred_m / y_m - 1)) * 100)}
    print(f"{args.folds}-fold: single {out['kfold']['single_mape_pct']:.2f}% (target <= 8, "
          f"vTrain 8.37), multi {out['kfold']['multi_mape_pct']:.2f}% (target <= 10, vTrain "
          f"14.73)", flush=True)

    # 3. the shipped calibration: all configs
    full = C.fit_calibration(S + M, mapper=mapper,
                             weights=[1.0] * len(S) + [MULTI_WEIGHT] * len(M),
                             source="vTrain A100 measurements, all 1,549 configs "
                                    "(benchmarks/plan_vtrain.py)")
    full.fit["kfold"] = out["kfold"]
    full.fit["single_to_multi_mape_pct"] = out["single_to_multi"]["multi_mape_pct"]
    out["full_fit"] = {"train_mape_pct": full.fit["train_mape_pct"],
                       "params": full.fit["params"]}
    out["wall_s"] = time.perf_counter() - t0
    if args.write_calibration:
        dest = HERE.parent / "traincast" / "plan" / "data" / "calibration.json"
        dest.parent.mkdir(exist_ok=True)
        full.save(dest)
        print(f"wrote {dest}")
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "full_fit"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
