"""Batch-size what-if from one small trace: predicted vs real unprofiled steps at 2x and 4x.

Per random configuration (:mod:`harness.random_models`, DLRMs and Transformers of
``benchmarks/seed_models.py``), the run is recorded at its batch ``b`` (execution trace,
Kineto step, unprofiled truth) and only timed (truth) at ``2b`` and ``4b``. From the batch-``b``
recording alone:

* **what-if** -- ``traincast.predict(kineto.json, what_if=["batch_size=2b",
  "batch_size_from=b"])``'s ``unprofiled_ns``: the replay-based what-if a user has today;
* **from-ET** -- ``predict_from_et(et.json, MODELS, batch_size=2b)``: the kernel models.

Errors against the unprofiled truth at ``2b``/``4b``; summary: geometric mean of |error|.
Run: ``python benchmarks/from_et_batch.py --n 4 --models MODELS --overheads OVERHEADS``
(writes ``benchmarks/results/from_et_batch.json``).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_state, machine  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="configurations per kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", required=True)
    ap.add_argument("--overheads", default=None)
    ap.add_argument("--json-out", default=str(HERE / "results" / "from_et_batch.json"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from harness.random_models import random_configs, record_config

    import traincast
    from traincast.predict.from_et import predict_from_et

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("dlrm", "transformer"):
            for cfg in random_configs(kind, args.n, args.seed):
                b = int(cfg["batch"])
                base = record_config(cfg, Path(tmp) / f"{cfg['name']}-b{b}")
                out = Path(tmp) / f"{cfg['name']}-b{b}"
                ts = traincast.load(out / "kineto.json")
                for k in (2, 4):
                    big = copy.deepcopy(cfg)
                    big["batch"] = k * b
                    truth = record_config(big, Path(tmp) / f"{cfg['name']}-b{k * b}")
                    t = truth["timing"]["unprofiled_step_ns"]
                    pred = traincast.predict(ts, what_if=[f"batch_size={k * b}",
                                                          f"batch_size_from={b}"])
                    wi = int(pred.iterations["unprofiled_ns"].iloc[0])
                    fe = predict_from_et(out / "et.json", args.models,
                                         overheads=args.overheads, batch_size=k * b,
                                         batch_size_from=b).step_ns
                    rows.append({"config": cfg["name"], "kind": kind, "batch": b,
                                 "to": k * b, "truth_ms": t / 1e6,
                                 "noise": truth["timing"]["noise"],
                                 "base_truth_ms": base["timing"]["unprofiled_step_ns"] / 1e6,
                                 "whatif_ms": wi / 1e6, "whatif_err": wi / t - 1,
                                 "from_et_ms": fe / 1e6, "from_et_err": fe / t - 1})
                    r = rows[-1]
                    print(f"{r['config']:14} b{b}->{k * b:<5} truth {r['truth_ms']:8.2f} ms  "
                          f"what-if {r['whatif_ms']:8.2f} ({100 * r['whatif_err']:+.1f}%)  "
                          f"from-ET {r['from_et_ms']:8.2f} ({100 * r['from_et_err']:+.1f}%)")

    def gm(errs: list[float]) -> float:
        return 100 * math.exp(statistics.mean(math.log(max(abs(e), 1e-6)) for e in errs))

    summary = {kind: {"n": len(sel), "gmae_whatif_pct": gm([r["whatif_err"] for r in sel]),
                      "gmae_from_et_pct": gm([r["from_et_err"] for r in sel])}
               for kind in ("dlrm", "transformer", "all")
               if (sel := [r for r in rows if kind == "all" or r["kind"] == kind])}
    print(json.dumps(summary))
    out = Path(args.json_out)
    tmp_out = out.with_suffix(".tmp")
    tmp_out.write_text(json.dumps({"summary": summary, "rows": rows, "machine": machine(),
                                   "git": git_state(), "models": args.models}, indent=1))
    tmp_out.replace(out)


if __name__ == "__main__":
    main()
