"""Data-parallel steps predicted from a single-rank execution trace (issue 13, --world-size).

Per random configuration of :mod:`harness.random_models` (DLRMs and Transformers,
seeded): record it on one rank (:func:`~harness.random_models.record_config`: its
execution trace and its unprofiled step), then train it for real with PyTorch DDP on
``--world`` local gloo ranks (:func:`harness.ddp.time_ddp`, one thread each, the same
per-rank batch, no profiler) and predict that step from the single-rank ET alone:
``predict_from_et(et, models, world_size=W, comm=comm)`` (kernel models + DDP gradient buckets
timed by the communication model). The communication model is fitted on all_reduce traces
recorded on the same machine (:func:`traincast.record.comm_bench.record_collectives`, what
``traincast bench --collective-ranks W`` does), never on the DDP runs.

Reported per configuration: the DDP truth and its block-to-block noise, the single-rank
prediction (what ignoring data parallelism would say), the world-size prediction and the
all_reduce time it adds; GMAE of both against the truth.

Run: ``python benchmarks/from_et_world.py --models MODELS --n 3`` (writes
``benchmarks/results/from_et_world.json``; ~1 minute per configuration on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_state, machine  # noqa: E402

HERE = Path(__file__).resolve().parent


def gmae(pred: list[float], true: list[float]) -> float:
    p, t = np.asarray(pred, float), np.asarray(true, float)
    return float(np.exp(np.mean(np.abs(np.log(p / t)))) - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True, help="traincast fit output folder")
    ap.add_argument("--overheads", default=None, help="overheads.json of traincast bench")
    ap.add_argument("--n", type=int, default=3, help="configurations per kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--comm", default=None, help="comm.json (default: recorded here)")
    ap.add_argument("--max-step-ms", type=float, default=40.0,
                    help="skip configurations estimated slower than this on one rank")
    ap.add_argument("--json-out", default=str(HERE / "results" / "from_et_world.json"))
    args = ap.parse_args()

    from harness.ddp import time_ddp
    from harness.random_models import (
        estimate_step_ms,
        random_configs,
        record_config,
    )

    from traincast.costs.comm import CommModel
    from traincast.predict.from_et import predict_from_et
    from traincast.record.comm_bench import fit_comm_model, measure_corun, record_collectives

    work = Path(tempfile.mkdtemp(prefix="traincast-world-"))
    if args.comm:
        comm = CommModel.from_json(Path(args.comm))
    else:
        comm = fit_comm_model(record_collectives(work / "collectives", world=args.world))
    corun = measure_corun(args.world)
    print(f"co-run slowdown of {args.world} ranks on this host: compute "
          f"x{corun['compute_slowdown']:.2f}, memory x{corun['memory_slowdown']:.2f}")
    rows = []
    for kind in ("dlrm", "transformer"):
        for cfg in random_configs(kind, args.n, args.seed):
            if estimate_step_ms(cfg) > args.max_step_ms:
                print(f"{cfg['name']}: estimated {estimate_step_ms(cfg):.0f} ms, skipped")
                continue
            run = record_config(cfg, work / cfg["name"])
            et = work / cfg["name"] / run["files"]["et"]
            one = predict_from_et(et, args.models, overheads=args.overheads)
            many = predict_from_et(et, args.models, overheads=args.overheads,
                                   world_size=args.world, comm=comm, corun=corun)
            nocorun = predict_from_et(et, args.models, overheads=args.overheads,
                                      world_size=args.world, comm=comm)
            truth = time_ddp(cfg, world=args.world)
            row = {"name": cfg["name"], "kind": kind, "config": cfg,
                   "single_rank_ms": run["timing"]["unprofiled_step_ns"] / 1e6,
                   "ddp_ms": truth["step_ns"] / 1e6, "ddp_noise_pct": 100 * truth["noise"],
                   "pred_single_ms": one.step_ns / 1e6, "pred_world_ms": many.step_ns / 1e6,
                   "pred_comm_ms": many.comm_ns / 1e6,
                   "pred_world_no_corun_ms": nocorun.step_ns / 1e6,
                   "grad_mib": float(many.buckets["bytes"].sum()) / 2**20,
                   "buckets": int(len(many.buckets))}
            for k in ("pred_single", "pred_world", "pred_world_no_corun"):
                row[f"{k}_err_pct"] = 100 * (row[f"{k}_ms"] / row["ddp_ms"] - 1)
            rows.append(row)
            print(f"{cfg['name']}: DDP x{args.world} {row['ddp_ms']:.2f} ms (noise "
                  f"{row['ddp_noise_pct']:.0f}%), 1 rank {row['single_rank_ms']:.2f} ms; "
                  f"predicted {row['pred_world_ms']:.2f} ms ({row['pred_world_err_pct']:+.1f}%, "
                  f"all_reduce {row['pred_comm_ms']:.2f} ms), without comm "
                  f"{row['pred_single_ms']:.2f} ms ({row['pred_single_err_pct']:+.1f}%)")
    summary = {}
    for kind in ("dlrm", "transformer", "all"):
        sel = [r for r in rows if kind in ("all", r["kind"])]
        if sel:
            summary[kind] = {
                "configs": len(sel),
                "gmae_world_pct": 100 * gmae([r["pred_world_ms"] for r in sel],
                                             [r["ddp_ms"] for r in sel]),
                "gmae_single_pct": 100 * gmae([r["pred_single_ms"] for r in sel],
                                              [r["ddp_ms"] for r in sel]),
                "gmae_world_no_corun_pct": 100 * gmae([r["pred_world_no_corun_ms"] for r in sel],
                                                      [r["ddp_ms"] for r in sel]),
                "median_ddp_noise_pct": float(np.median([r["ddp_noise_pct"] for r in sel])),
                "median_ddp_over_single_pct": float(np.median(
                    [100 * (r["ddp_ms"] / r["single_rank_ms"] - 1) for r in sel]))}
    print(json.dumps(summary, indent=1))
    out = Path(args.json_out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"summary": summary, "rows": rows, "world": args.world,
                               "corun": corun,
                               "machine": machine(), "git": git_state(),
                               "models": str(args.models), "comm": comm.to_json()},
                              indent=1, default=str))
    tmp.replace(out)


if __name__ == "__main__":
    main()
