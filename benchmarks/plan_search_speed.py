"""Speed of ``traincast plan --search``: layouts enumerated, pruned and simulated per second.

Workload: GPT-style 6.7B model (32 layers, hidden 4096, 32 heads, seq 2048, vocab 51200) on
64 A100s (8 DGX-A100 nodes), global batch 512, the full default search space (every tp x pp x
dp, micro-batch, recomputation, sequence parallelism, ZeRO stage, 1F1B and interleaved with
2 or 4 virtual stages). Executors side by side on the same layouts: ``serial`` (one core) and
``process`` (local pool, all cores); ``--ray`` adds a local Ray instance.

Run: ``python benchmarks/plan_search_speed.py [--ray] [--json-out FILE]``.
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
    ap.add_argument("--serial-sample", type=int, default=400,
                    help="layouts timed serially (the rest extrapolated; 0 = all)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from traincast.executor import shutdown
    from traincast.plan.search import enumerate_layouts, plan_search
    from traincast.plan.spec import SystemSpec, TransformerSpec

    model = TransformerSpec(layers=32, hidden=4096, heads=32, seq=2048, vocab=51200)
    system = SystemSpec.from_catalog(64, node="DGX-A100")
    t0 = time.perf_counter()
    layouts, invalid = enumerate_layouts(model, system, 512)
    t_enum = time.perf_counter() - t0
    rows = []
    t0 = time.perf_counter()
    res = plan_search(model, system, 512, executor="process")
    t_proc = time.perf_counter() - t0
    n_sim = len(res.table)
    rows.append(("process", os.cpu_count(), t_proc, n_sim))
    # a seeded random sample: the enumeration order runs from small graphs (pp=1) to large ones
    sample = (random.Random(0).sample(layouts, min(args.serial_sample, len(layouts)))
              if args.serial_sample else layouts)
    t0 = time.perf_counter()
    part = plan_search(model, system, 512, executor="serial", layouts=sample)
    t_ser = (time.perf_counter() - t0) * (len(layouts) / max(1, len(sample)))
    rows.append(("serial (extrapolated)" if args.serial_sample else "serial", 1, t_ser,
                 n_sim))
    del part
    if args.ray:
        t0 = time.perf_counter()
        plan_search(model, system, 512, executor="ray")
        rows.append(("ray (local, incl. start-up)", os.cpu_count(),
                     time.perf_counter() - t0, n_sim))
        shutdown()
    c = Console()
    t = Table(title=f"layout search: {len(layouts) + invalid} enumerated ({t_enum:.2f} s), "
                    f"{invalid} invalid, {res.out_of_memory} out of memory, {n_sim} simulated")
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
           "loadavg_end": list(os.getloadavg())}
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
