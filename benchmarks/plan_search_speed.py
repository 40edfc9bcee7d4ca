"""Speed of ``traincast plan --search``: layouts enumerated, pruned and simulated per second.

Layouts that share a step graph are simulated in batches (traincast/plan/template.py: one
graph template, a duration vector per layout, one batched simulation); the same simulator one
layout at a time (``plan()`` per layout) is timed beside it on a sample, and its rows must
equal the batched ones.

Workload: GPT-style 6.7B model (32 layers, hidden 4096, 32 heads, seq 2048, vocab 51200) on
64 A100s (8 DGX-A100 nodes), global batch 512, the full default search space (every tp x pp x
dp, micro-batch, recomputation, sequence parallelism, ZeRO stage, 1F1B and interleaved with
2 or 4 virtual stages). Executors side by side on the same layouts: ``process`` (local pool,
all cores; cold, then warm), ``serial`` (one core); ``--ray`` adds a local Ray instance.

Run: ``python benchmarks/plan_search_speed.py [--ray] [--one-at-a-time-sample N]
[--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ray", action="store_true", help="also time a local Ray instance")
    ap.add_argument("--one-at-a-time-sample", type=int, default=300,
                    help="layouts simulated one at a time (plan() per layout), extrapolated")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from traincast.plan.search import _evaluate, enumerate_layouts, plan_search
    from traincast.plan.spec import SystemSpec, TransformerSpec
    from traincast.util.executor import shutdown

    model = TransformerSpec(layers=32, hidden=4096, heads=32, seq=2048, vocab=51200)
    system = SystemSpec.from_catalog(64, node="DGX-A100")
    t0 = time.perf_counter()
    layouts, invalid = enumerate_layouts(model, system, 512)
    t_enum = time.perf_counter() - t0
    rows = []
    shutdown()  # a cold pool: worker start-up counted
    t0 = time.perf_counter()
    res = plan_search(model, system, 512, executor="process")
    n_sim = len(res.table)
    rows.append(("process, batched (cold pool)", os.cpu_count(), time.perf_counter() - t0,
                 n_sim))
    t0 = time.perf_counter()
    plan_search(model, system, 512, executor="process")
    rows.append(("process, batched (warm pool)", os.cpu_count(), time.perf_counter() - t0,
                 n_sim))
    t0 = time.perf_counter()
    ser = plan_search(model, system, 512, executor="serial")
    t_ser = time.perf_counter() - t0
    rows.append(("serial, batched", 1, t_ser, n_sim))
    # the same simulator one layout at a time (plan() per layout), on a seeded sample of the
    # simulated layouts, extrapolated; its rows must equal the batched search's
    by_name = {d: lay for lay in layouts if (d := lay.describe()) in set(ser.table["describe"])}
    sample = random.Random(0).sample(sorted(by_name), min(args.one_at_a_time_sample,
                                                          len(by_name)))
    t0 = time.perf_counter()
    one = [_evaluate((model, system, by_name[d], None, None)) for d in sample]
    t_one = (time.perf_counter() - t0) * n_sim / max(1, len(sample))
    rows.append(("serial, one layout at a time (extrapolated)", 1, t_one, n_sim))
    batched = ser.table.set_index("describe")
    same = all(batched.loc[r["describe"]].to_dict() == {k: v for k, v in r.items()
                                                        if k != "describe"} for r in one)
    if args.ray:
        t0 = time.perf_counter()
        plan_search(model, system, 512, executor="ray")
        rows.append(("ray (local, incl. start-up)", os.cpu_count(),
                     time.perf_counter() - t0, n_sim))
        shutdown()
    c = Console()
    t = Table(title=f"layout search: {len(layouts) + invalid} enumerated ({t_enum:.2f} s), "
                    f"{invalid} invalid, {res.out_of_memory} out of memory, {n_sim} simulated; "
                    f"batched rows identical to one at a time on {len(sample)}: {same}")
    for col in ("executor", "workers", "wall s", "layouts/s", "vs serial"):
        t.add_column(col, justify="left" if col == "executor" else "right")
    for name, w, s, n in rows:
        t.add_row(name, str(w), f"{s:.1f}", f"{n / s:.1f}", f"{t_ser / s:.2f}x")
    c.print(t)
    out = {"enumerated": len(layouts) + invalid, "invalid": invalid,
           "out_of_memory": res.out_of_memory, "simulated": n_sim, "enumerate_s": t_enum,
           "runs": [{"executor": r[0], "workers": r[1], "wall_s": r[2],
                     "layouts_per_s": r[3] / r[2]} for r in rows],
           "best": res.reasons[0] if res.reasons else None,
           "identical_to_one_at_a_time": same, "checked": len(sample),
           "loadavg_end": list(os.getloadavg())}
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
