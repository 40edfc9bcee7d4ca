"""Unprofiled step time: does ``unprofiled_ns`` predict the step of a run without profiler?

traincast's replay reproduces the *profiled* step, which the profiler itself slows down
(its host cost per recorded event, :mod:`traincast.record.overhead`). This benchmark records
small real CPU training runs here (one thread) and compares, per configuration and profiler
setting:

* the **true unprofiled step**: the median step of the same training loop with no profiler
  (3 blocks of ``--steps`` steps after warm-up, interleaved with the profiled windows so
  drift hits both; the spread max/min - 1 of the three block medians is the noise floor);
* the **measured profiled step**: median ``ProfilerStep#N`` duration of the profiled window
  (``--active`` steps after 2 profiler warm-up steps);
* traincast's **replay** (``predicted_ns``) and **unprofiled_ns** prediction of that trace
  (median over its steps), with the shipped overhead table (or ``--measure``: a fresh
  :func:`~traincast.record.overhead.measure_profiler_overhead`).

Errors against the true unprofiled step: *before* = replay, *after* = unprofiled_ns.

Models (``torch.set_num_threads(1)``, SGD):

* ``dlrm``: 8 ``EmbeddingBag`` tables (1,000 x 16, sum of 8 lookups per bag), bottom MLP
  13-64-16, pairwise dot interaction, top MLP 52-64-1, BCE loss;
* ``transformer``: one ``TransformerEncoderLayer`` (d_model 128, 4 heads, FFN 512,
  sequences of 16 tokens) plus a linear head, MSE loss.

Profiler settings: ``kineto`` (CPU activity), ``+shapes`` (record_shapes), ``+stack``
(with_stack), ``+shapes+et`` (record_shapes and an ExecutionTraceObserver in the window, its
ET linked by traincast). Traces go to a temporary folder (``--keep DIR`` keeps them).

Run: ``python benchmarks/unprofiled.py [--batch-sizes 64,256] [--models dlrm,transformer]
[--steps 20] [--measure] [--out benchmarks/results/unprofiled.json]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, machine  # noqa: E402

VARIANTS: dict[str, dict[str, bool]] = {
    "kineto": {},
    "+shapes": {"record_shapes": True},
    "+stack": {"with_stack": True},
    "+shapes+et": {"record_shapes": True, "et": True},
}
PROFILER_WARMUP = 2


def build(model: str, batch: int, seed: int = 0) -> tuple[Any, Any, list[Any]]:
    """(module, optimizer, batches): the model, SGD, and 8 synthetic batches to cycle."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if model == "dlrm":
        n_tab, rows, dim, bag = 8, 1000, 16, 8

        class DLRM(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum")
                                            for _ in range(n_tab))
                self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, dim),
                                            nn.ReLU())
                n_int = (n_tab + 1) * n_tab // 2
                self.top = nn.Sequential(nn.Linear(dim + n_int, 64), nn.ReLU(),
                                         nn.Linear(64, 1))

            def forward(self, dense: Any, idx: Any, offsets: Any) -> Any:
                x = self.bottom(dense)
                embs = [t(idx[i], offsets) for i, t in enumerate(self.tables)]
                z = torch.stack([x, *embs], dim=1)
                inter = torch.bmm(z, z.transpose(1, 2))
                iu = torch.triu_indices(n_tab + 1, n_tab + 1, offset=1)
                flat = inter[:, iu[0], iu[1]]
                return self.top(torch.cat([x, flat], dim=1)).squeeze(1)

        net = DLRM()
        loss_fn = nn.BCEWithLogitsLoss()
        batches = []
        for _ in range(8):
            dense = torch.randn(batch, 13, generator=gen)
            idx = torch.randint(rows, (n_tab, batch * bag), generator=gen)
            offsets = torch.arange(0, batch * bag, bag)
            y = torch.randint(2, (batch,), generator=gen).float()
            batches.append(((dense, idx, offsets), y))
    elif model == "transformer":
        d, seq = 128, 16

        class Layer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(d, 4, 512, dropout=0.0,
                                                        batch_first=True)
                self.head = nn.Linear(d, d)

            def forward(self, x: Any) -> Any:
                return self.head(self.layer(x))

        net = Layer()
        loss_fn = nn.MSELoss()
        batches = [((torch.randn(batch, seq, d, generator=gen),),
                    torch.randn(batch, seq, d, generator=gen)) for _ in range(8)]
    else:
        raise SystemExit(f"unknown model {model}")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    from harness.random_models import sgd_step_fn

    return sgd_step_fn(net, loss_fn, opt, batches), opt, batches


def time_steps(step: Any, n: int) -> list[int]:
    """ns of ``n`` consecutive unprofiled steps."""
    out = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        step(i)
        out.append(time.perf_counter_ns() - t0)
    return out


def profile_window(step: Any, folder: Path, active: int, record_shapes: bool = False,
                   with_stack: bool = False, et: bool = False) -> None:
    """Profile ``PROFILER_WARMUP + active`` steps into ``folder/rank-0.pt.trace.json`` (and
    ``rank-0.et.json`` with ``et``)."""
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    folder.mkdir(parents=True, exist_ok=True)
    obs = None
    if et:
        obs = ExecutionTraceObserver().register_callback(str(folder / "rank-0.et.json"))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes,
                 with_stack=with_stack, execution_trace_observer=obs,
                 schedule=schedule(wait=0, warmup=PROFILER_WARMUP, active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(
                     str(folder / "rank-0.pt.trace.json"))) as prof:
        for i in range(PROFILER_WARMUP + active):
            step(i)
            prof.step()
    if obs is not None:
        obs.unregister_callback()


def run_config(model: str, batch: int, args: argparse.Namespace, tmp: Path,
               overhead: Any) -> list[dict[str, Any]]:
    """Record one (model, batch) configuration and predict its profiled traces."""
    import torch

    import traincast

    torch.set_num_threads(1)
    step, _, _ = build(model, batch)
    time_steps(step, 10)  # warm-up
    blocks: list[float] = []
    folders: dict[str, Path] = {}
    variants = list(VARIANTS)
    for k in range(max(3, len(variants))):
        if k < 3:
            blocks.append(statistics.median(time_steps(step, args.steps)))
        if k < len(variants):
            v = variants[k]
            f = tmp / f"{model}_bs{batch}_{v.strip('+').replace('+', '_')}"
            profile_window(step, f, args.active, **VARIANTS[v])
            folders[v] = f
    true_ns = statistics.median(blocks)
    noise = max(blocks) / min(blocks) - 1
    rows = []
    for v, f in folders.items():
        ts = traincast.load(f, cache=False)
        pred = traincast.predict(ts, overhead=overhead)
        it = pred.iterations
        meas = float(it["measured_ns"].median())
        rep = float(it["predicted_ns"].median())
        unp = float(it["unprofiled_ns"].median())
        u = pred.unprofiled
        rows.append({
            "model": model, "batch": batch, "profiler": v,
            "detected": u.settings.describe(), "host_events_per_step": round(
                u.n_events / max(len(it), 1)), "per_event_ns": round(u.per_event_ns, 1),
            "true_unprofiled_ms": true_ns / 1e6, "noise_pct": 100 * noise,
            "measured_profiled_ms": meas / 1e6, "replay_ms": rep / 1e6,
            "unprofiled_pred_ms": unp / 1e6,
            "err_before_pct": 100 * (rep - true_ns) / true_ns,
            "err_after_pct": 100 * (unp - true_ns) / true_ns,
            "unprofiled_s": round(pred.elapsed_s.get("unprofiled_s", 0.0), 4),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="dlrm,transformer")
    ap.add_argument("--batch-sizes", default="64,256")
    ap.add_argument("--steps", type=int, default=20, help="unprofiled steps per block")
    ap.add_argument("--active", type=int, default=5, help="profiled steps per window")
    ap.add_argument("--measure", action="store_true",
                    help="measure the overhead now instead of the shipped table")
    ap.add_argument("--keep", type=Path, help="keep the traces in this folder")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/unprofiled.json")
    args = ap.parse_args(argv)
    import torch

    from traincast.costs.profiler_overhead import overhead_table
    from traincast.record.overhead import measure_profiler_overhead

    overhead = (measure_profiler_overhead() if args.measure
                else overhead_table(str(torch.__version__)))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="traincast-unprofiled-") as td:
        tmp = args.keep or Path(td)
        for model in args.models.split(","):
            for b in (int(x) for x in args.batch_sizes.split(",")):
                for r in run_config(model, b, args, tmp, overhead):
                    rows.append(r)
                    print(f"{r['model']:11s} bs{r['batch']:<4d} {r['profiler']:11s} "
                          f"true {r['true_unprofiled_ms']:7.2f} ms (noise "
                          f"{r['noise_pct']:4.1f}%)  profiled {r['measured_profiled_ms']:7.2f}"
                          f"  replay {r['replay_ms']:7.2f}  unprofiled "
                          f"{r['unprofiled_pred_ms']:7.2f}  err before "
                          f"{r['err_before_pct']:+7.1f}%  after {r['err_after_pct']:+6.1f}%",
                          flush=True)
    abs_b = [abs(r["err_before_pct"]) for r in rows]
    abs_a = [abs(r["err_after_pct"]) for r in rows]
    summary = {"mape_before_pct": statistics.mean(abs_b), "mape_after_pct": statistics.mean(
        abs_a), "max_ape_before_pct": max(abs_b), "max_ape_after_pct": max(abs_a)}
    for v in VARIANTS:
        sel = [r for r in rows if r["profiler"] == v]
        if sel:
            summary[f"mape_{v}"] = {
                "before": statistics.mean(abs(r["err_before_pct"]) for r in sel),
                "after": statistics.mean(abs(r["err_after_pct"]) for r in sel)}
    doc = {"benchmark": "unprofiled", "date": dt.datetime.now().isoformat(timespec="seconds"),
           "git": git_state(), "machine": machine(), "torch": str(torch.__version__),
           "threads": 1, "steps_per_block": args.steps, "active": args.active,
           "overhead": overhead.to_dict(), "rows": rows, "summary": summary,
           "command": "python benchmarks/unprofiled.py" + (" --measure" if args.measure
                                                           else "")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"wrote {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
