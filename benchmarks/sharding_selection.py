"""Sharding selection on real runs: does the kernel-model ranking pick the fastest sharder?

The seed paper (Lin et al., arXiv 2404.12674, Sec. 6.3) picks the fastest embedding-table
sharding without running it in 85% of cases. Here, per random DLRM configuration (seeded;
4-10 tables, rows log-uniform 1e3-3e5, pooling 1-60, one dim of 16/32/64, global batch
256/512/1024), every sharder of :mod:`traincast.plan.sharders` places the tables on 2 ranks,
each distinct placement is trained for real (:func:`harness.sharded_dlrm.
time_placement`: 2 gloo ranks, one thread each, table-wise model parallel, all_to_all of the
pooled embeddings, MLPs data parallel; median step of the slowest rank in blocks of 15
steps; ``--rounds`` interleaved rounds, one block per placement per round, so the machine's
drift hits every placement alike), and :func:`traincast.plan.sharders.pick_with_models` ranks
the same placements with the kernel models alone (no run).

Success: the predicted-fastest placement is the measured-fastest one (*strict*), or its
measured step is within the noise of the fastest (*with ties*: within the larger of the two
placements' block-to-block spread). Configurations whose placements all coincide are skipped.

Run: ``python benchmarks/sharding_selection.py --n 10 --models MODELS_DIR`` (writes
``benchmarks/results/sharding_selection.json``; ~1 minute per configuration on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_state, machine  # noqa: E402

HERE = Path(__file__).resolve().parent


def configs(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = int(rng.integers(4, 11))
        out.append({
            "name": f"shard-{i}", "seed": i,
            "tables": [{"rows": int(10 ** rng.uniform(3, np.log10(3e5))),
                        "pooling": int(rng.integers(1, 61))} for _ in range(t)],
            "dim": int(rng.choice([16, 32, 64])), "dense": 13,
            "bottom_mlp": [int(rng.choice([64, 128, 256]))],
            "top_mlp": [int(rng.choice([64, 128, 256]))],
            "batch": int(rng.choice([256, 512, 1024])),
        })
    return out


def spec_of(cfg: dict):
    """The :class:`traincast.plan.spec.DLRMSpec` of a configuration (the real run concatenates
    the pooled embeddings with the bottom MLP's output instead of the dot interaction; the
    difference is the same for every placement)."""
    from traincast.plan.spec import DLRMSpec, EmbeddingTable

    dim = int(cfg["dim"])
    return DLRMSpec(tables=tuple(EmbeddingTable(rows=int(t["rows"]), dim=dim,
                                                pooling=float(t["pooling"]))
                                 for t in cfg["tables"]),
                    dense_features=int(cfg["dense"]),
                    bottom_mlp=(*map(int, cfg["bottom_mlp"]), dim),
                    top_mlp=(*map(int, cfg["top_mlp"]), 1), name=cfg["name"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", required=True, help="traincast fit output folder")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds: each placement trained once per round")
    ap.add_argument("--json-out", default=str(HERE / "results" / "sharding_selection.json"))
    args = ap.parse_args()

    from harness.sharded_dlrm import time_placement

    from traincast.costs.kernel_models import KernelModels
    from traincast.plan.sharders import pick_with_models

    models = KernelModels.load(args.models)
    rows = []
    for cfg in configs(args.n, args.seed):
        ranked = pick_with_models(spec_of(cfg), 2, cfg["batch"], models)
        distinct: dict[tuple, dict] = {}
        for r in ranked.itertuples():
            key = tuple(sorted(r.placement.items()))
            distinct.setdefault(key, {"sharders": [], "predicted_ns": r.max_cost_ns,
                                      "placement": r.placement})["sharders"].append(r.sharder)
        if len(distinct) < 2:
            print(f"{cfg['name']}: every sharder gives the same placement, skipped")
            continue
        # interleaved rounds: every placement once per round, so drift of the machine over
        # the minutes of a configuration hits every placement alike
        runs: dict[tuple, list[int]] = {k: [] for k in distinct}
        for _ in range(args.rounds):
            for k, d in distinct.items():
                runs[k] += time_placement(cfg, d["placement"], steps=args.steps,
                                          repeats=1)["repeats_ns"]
        for k, d in distinct.items():
            v = runs[k]
            d.update(measured_ns=float(np.median(v)), noise=max(v) / min(v) - 1)
        cands = list(distinct.values())
        pred_best = min(cands, key=lambda d: d["predicted_ns"])
        meas_best = min(cands, key=lambda d: d["measured_ns"])
        tol = max(pred_best["noise"], meas_best["noise"])
        strict = pred_best is meas_best
        tie = pred_best["measured_ns"] <= meas_best["measured_ns"] * (1 + tol)
        loss = pred_best["measured_ns"] / meas_best["measured_ns"] - 1
        from scipy.stats import spearmanr

        rho = (float(spearmanr([d["predicted_ns"] for d in cands],
                               [d["measured_ns"] for d in cands]).statistic)
               if len(cands) > 2 else None)
        rows.append({"config": cfg, "placements": [
            {"sharders": d["sharders"], "predicted_ms": d["predicted_ns"] / 1e6,
             "measured_ms": d["measured_ns"] / 1e6, "noise": d["noise"]} for d in cands],
            "predicted_best": pred_best["sharders"], "measured_best": meas_best["sharders"],
            "strict": strict, "with_ties": bool(tie), "loss_pct": 100 * loss,
            "spearman": rho})
        print(f"{cfg['name']}: {len(cands)} placements; predicted {pred_best['sharders']} "
              f"measured {meas_best['sharders']}; {'ok' if strict else ('tie' if tie else 'miss')}"
              f" (picked {100 * loss:+.1f}% vs fastest, noise {100 * tol:.1f}%)")
    n = len(rows)
    summary = {"configs": n,
               "strict_pct": 100 * sum(r["strict"] for r in rows) / n if n else None,
               "with_ties_pct": 100 * sum(r["with_ties"] for r in rows) / n if n else None,
               "mean_loss_pct": float(np.mean([r["loss_pct"] for r in rows])) if n else None,
               "naive_mean_loss_pct": float(np.mean([
                   min(p["measured_ms"] for p in r["placements"] if "naive" in p["sharders"])
                   / min(p["measured_ms"] for p in r["placements"]) * 100 - 100
                   for r in rows])) if n else None,
               "median_noise_pct": float(np.median([
                   100 * p["noise"] for r in rows for p in r["placements"]])) if n else None,
               "mean_spearman": float(np.mean([r["spearman"] for r in rows
                                               if r["spearman"] is not None
                                               and np.isfinite(r["spearman"])]))
               if any(r["spearman"] is not None for r in rows) else None}
    print(json.dumps(summary))
    out = Path(args.json_out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"summary": summary, "rows": rows, "machine": machine(),
                               "git": git_state(), "models": str(args.models)}, indent=1,
                              default=str))
    tmp.replace(out)


if __name__ == "__main__":
    main()
