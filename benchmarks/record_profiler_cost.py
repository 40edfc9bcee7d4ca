"""Record the PyTorch profiler's own cost: the same programs with and without each setting.

Runs anywhere PyTorch runs (only ``torch`` and the standard library are imported, so it runs on
a bare GPU machine too). For each program it times ``--steps`` steps per block with **no
profiler**, **Kineto** (``torch.profiler.profile``, CPU activity plus CUDA on a GPU),
**Kineto + shapes** (``record_shapes=True``), **Kineto + stacks** (``with_stack=True``) and
**Kineto + execution trace** (an ``ExecutionTraceObserver`` in the same window), in
``--rounds`` interleaved rounds (the order of the settings rotates each round, so drift hits all
of them), pinned to one core for the recording thread (``--cpu``) and one torch thread. Each
step ends with a host-device sync (``.item()`` of the loss) as a training loop that logs its
loss does. The profiled blocks use ``torch.profiler.schedule(wait=0, warmup=1, active=steps)``;
only the active steps are timed, and only the step function (``prof.step()`` is outside).

Programs (chosen so the mix of recorded event kinds varies: CPU ops with few or many inputs,
CPU ops without kernels, runtime calls, Python frames, autograd work):

* ``mlp``: training steps of a 6-layer MLP (width 64, batch 32), SGD;
* ``views``: 200 view/reshape/transpose/select/narrow ops a step (CPU ops, no kernels);
* ``cat_many``: 20 ``torch.cat`` of 48 small tensors and 20 ``torch.stack`` a step (CPU ops
  with many inputs);
* ``elementwise``: 150 add/mul/relu/sigmoid ops on 256-element tensors a step (one kernel each
  on a GPU);
* ``python_deep``: 60 tiny ops each called 8 Python frames deep (Python frames per op);
* ``embbag``: a DLRM-style step (4 ``EmbeddingBag`` tables 20,000 x 32, bottom/top MLPs, dot
  interaction, BCE, SGD);
* ``attn``: training steps of one ``TransformerEncoderLayer`` (d 64, 4 heads, seq 16, batch 8).

On a GPU, the models of ``record_gpu_pairs.py`` too (:data:`MODELS`: ``gpt_bs4``,
``resnet_bs64``, ``mlp_bs256``), to check the fitted costs on programs the fit did not see.

Writes ``OUT/<program>/<setting>/``: ``rank-0.pt.trace.json.gz`` (the Kineto trace of the last
round, ``ProfilerStep#N`` markers) and ``et.json.gz`` (the execution trace, ``+et`` only), and
``OUT/<program>/.run.json`` (configuration, per setting: every timed step in ns and the median
over rounds of the per-round medians) and ``OUT/MANIFEST.json`` (machine, torch, settings) at
the end. Counting the events and fitting the cost per event kind is done elsewhere
(:func:`traincast.costs.profiler_overhead.fit_profiler_cost`, ``benchmarks/profiler_cost.py``).

Run: ``python benchmarks/record_profiler_cost.py --out DIR [--device cpu|cuda]
[--programs mlp,views,...,gpt_bs4] [--steps 20] [--model-steps 10] [--rounds 3] [--cpu 1]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SETTINGS: dict[str, dict[str, bool]] = {
    "none": {},
    "kineto": {"record_shapes": False, "with_stack": False, "execution_trace": False},
    "+shapes": {"record_shapes": True, "with_stack": False, "execution_trace": False},
    "+stack": {"record_shapes": False, "with_stack": True, "execution_trace": False},
    "+et": {"record_shapes": False, "with_stack": False, "execution_trace": True},
}

PROGRAMS = ("mlp", "views", "cat_many", "elementwise", "python_deep", "embbag", "attn")

#: real models of ``record_gpu_pairs.py`` (CUDA only; bf16 autocast, fused AdamW), recorded under
#: every setting to check the fitted costs on programs the fit did not see
MODELS = {"gpt_bs4": ("gpt", 4), "resnet_bs64": ("resnet", 64), "mlp_bs256": ("mlp", 256)}


def _program(name: str, device: str) -> Callable[[], float]:
    """The step function of ``name`` on ``device``: one step, ending with a host sync."""
    import torch  # the only third-party import: this script runs on bare GPU machines
    from torch import nn

    if name in MODELS:
        return _model_step(*MODELS[name])
    g = torch.Generator().manual_seed(0)
    dev = torch.device(device)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(dev)

    if name == "mlp":
        layers: list[Any] = []
        for _ in range(6):
            layers += [nn.Linear(64, 64), nn.ReLU()]
        net = nn.Sequential(*layers, nn.Linear(64, 1)).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        x, y = rand(32, 64), rand(32, 1)

        def step() -> float:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            return loss.item()
        return step
    if name == "views":
        t = rand(8, 16, 32)

        def step() -> float:
            acc = t
            for i in range(40):
                v = t.view(128, 32).reshape(8, 512).transpose(0, 1)
                w = t.select(0, i % 8).narrow(0, 0, 8)
                acc = v if i % 2 else w
            return float(acc.shape[0]) + t[0, 0, 0].item()
        return step
    if name == "cat_many":
        parts = [rand(4, 8) for _ in range(48)]

        def step() -> float:
            s = None
            for _ in range(20):
                c = torch.cat(parts, dim=0)
                s = torch.stack(parts[:16], dim=0)
            return c[0, 0].item() + s[0, 0, 0].item()  # type: ignore[index]
        return step
    if name == "elementwise":
        a, b = rand(256), rand(256)

        def step() -> float:
            x = a
            for _ in range(30):
                x = torch.relu(torch.add(x, b))
                x = torch.sigmoid(torch.mul(x, b)) + a
            return x[0].item()
        return step
    if name == "python_deep":
        a = rand(16)

        def deep(x: Any, depth: int) -> Any:
            return torch.add(x, 1.0) if depth == 0 else deep(x, depth - 1)

        def step() -> float:
            x = a
            for _ in range(60):
                x = deep(x, 8)
            return x[0].item()
        return step
    if name == "embbag":
        tables = nn.ModuleList(nn.EmbeddingBag(20_000, 32, mode="sum") for _ in range(4)).to(dev)
        bot = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU()).to(dev)
        top = nn.Sequential(nn.Linear(32 + 10, 64), nn.ReLU(), nn.Linear(64, 1)).to(dev)
        params = [*tables.parameters(), *bot.parameters(), *top.parameters()]
        opt = torch.optim.SGD(params, lr=1e-2)
        batch, lookups = 64, 8
        dense = rand(batch, 13)
        idx = [torch.randint(0, 20_000, (batch * lookups,), generator=g).to(dev) for _ in range(4)]
        offs = torch.arange(0, batch * lookups, lookups).to(dev)
        target = torch.randint(0, 2, (batch, 1), generator=g).float().to(dev)
        iu = torch.triu_indices(5, 5, 1).to(dev)

        def step() -> float:
            opt.zero_grad(set_to_none=True)
            feats = [bot(dense)] + [t(i, offs) for t, i in zip(tables, idx, strict=True)]
            z = torch.stack(feats, dim=1)
            inter = torch.bmm(z, z.transpose(1, 2))[:, iu[0], iu[1]]
            out = top(torch.cat([feats[0], inter], dim=1))
            loss = nn.functional.binary_cross_entropy_with_logits(out, target)
            loss.backward()
            opt.step()
            return loss.item()
        return step
    if name == "attn":
        layer = nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, dropout=0.0).to(dev)
        head = nn.Linear(64, 1).to(dev)
        opt = torch.optim.SGD([*layer.parameters(), *head.parameters()], lr=1e-3)
        x, y = rand(8, 16, 64), rand(8, 16, 1)

        def step() -> float:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(head(layer(x)), y)
            loss.backward()
            opt.step()
            return loss.item()
        return step
    raise SystemExit(f"unknown program {name!r}; expected one of "
                     f"{', '.join((*PROGRAMS, *MODELS))}")


def _model_step(workload: str, batch: int) -> Callable[[], float]:
    """One training step of ``record_gpu_pairs.py``'s ``workload`` (its defaults)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import record_gpu_pairs as pairs  # the sibling script: the same models as the kept pairs

    args = argparse.Namespace(d_model=1024, heads=16, layers=12, seq=1024)
    return pairs.train_step(workload, batch, args)[1]


def _timed(step: Callable[[], float], n: int, after: Callable[[], None] | None = None
           ) -> list[int]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        step()
        out.append(time.perf_counter_ns() - t0)
        if after is not None:
            after()
    return out


def _profiled(step: Callable[[], float], setting: str, steps: int, device: str,
              keep: Path | None) -> list[int]:
    """``steps`` timed steps under the profiler with ``setting``; the traces into ``keep``."""
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    opts = SETTINGS[setting]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    tmp = Path(tempfile.mkdtemp(prefix="tc-pcost-"))
    et = None
    if opts["execution_trace"]:
        et = ExecutionTraceObserver().register_callback(str(tmp / "et.json"))
    trace = tmp / "rank-0.pt.trace.json"
    times: list[int] = []
    with profile(activities=acts, record_shapes=opts["record_shapes"],
                 with_stack=opts["with_stack"], execution_trace_observer=et,
                 schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=(lambda p: p.export_chrome_trace(str(trace))) if keep
                 else None) as prof:
        step()  # the profiler's warm-up step (recorded, not kept)
        prof.step()
        times = _timed(step, steps, prof.step)
    if et is not None:
        et.unregister_callback()
    if device == "cuda":
        torch.cuda.synchronize()
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for name in ("rank-0.pt.trace.json", "et.json"):
            src = tmp / name
            if src.exists():
                with open(src, "rb") as fi, gzip.open(keep / (name + ".gz"), "wb", 6) as fo:
                    shutil.copyfileobj(fi, fo)
    shutil.rmtree(tmp, ignore_errors=True)
    return times


def record_program(name: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Record one program under every setting; write and return its ``.run.json``."""
    import torch

    step = _program(name, args.device)
    steps = args.model_steps if name in MODELS else args.steps
    _timed(step, args.warmup)
    order = list(SETTINGS)
    per_round: dict[str, list[list[int]]] = {s: [] for s in order}
    for r in range(args.rounds):
        rot = order[r % len(order):] + order[:r % len(order)]
        for s in rot:
            last = r == args.rounds - 1
            if s == "none":
                per_round[s].append(_timed(step, steps))
            else:
                per_round[s].append(_profiled(step, s, steps, args.device,
                                              out / s if last else None))
    medians = {s: int(statistics.median(statistics.median(b) for b in blocks))
               for s, blocks in per_round.items()}
    spread = {s: round(max(statistics.median(b) for b in blocks)
                       / min(statistics.median(b) for b in blocks) - 1, 4)
              for s, blocks in per_round.items()}
    run = {"program": name, "workload": name, "batch_size": None, "device": args.device,
           "torch": str(torch.__version__), "steps": steps, "rounds": args.rounds,
           "warmup": args.warmup, "threads": torch.get_num_threads(),
           "unprofiled_median_ns": medians["none"], "median_step_ns": medians,
           "round_spread": spread, "step_ns": per_round,
           "settings": {s: SETTINGS[s] for s in order if s != "none"}}
    out.mkdir(parents=True, exist_ok=True)
    (out / ".run.json").write_text(json.dumps(run, indent=1))
    return run


def _machine(device: str) -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": str(torch.__version__), "platform": platform.platform()}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--model-steps", type=int, default=10,
                    help="steps per block of the MODELS (their traces are large)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=None,
                    help="pin the recording thread to this core (default: no pinning)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    done = []
    for name in args.programs.split(","):
        run = record_program(name, args.out / name, args)
        done.append(name)
        m = run["median_step_ns"]
        print(f"{name}: " + " ".join(f"{s} {v / 1e6:.3f} ms" for s, v in m.items())
              + f" ({time.time() - t0:.0f} s)", flush=True)
    manifest = {"what": "the PyTorch profiler's cost: programs timed with no profiler and each "
                        "setting, interleaved rounds",
                "recorded": dt.date.today().isoformat(),
                "recorded_with": "python benchmarks/record_profiler_cost.py " + " ".join(
                    argv if argv is not None else sys.argv[1:]),
                "machine": _machine(args.device), "device": args.device,
                "settings": SETTINGS, "programs": done, "pinned_cpu": args.cpu,
                "runs": [{"path": p, "workload": p, "batch_size": None} for p in done]}
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
