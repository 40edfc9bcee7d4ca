"""Record real GPU training runs in pairs, for checking what-if predictions against measurement.

Runs on a machine with a CUDA GPU and PyTorch (only ``torch`` is imported; traincast is not
needed there). For each workload and batch size it trains a freshly initialised model on
synthetic data and writes into ``OUT/<gpu>_<workload>_bs<B>/``:

* ``rank-0.pt.trace.json.gz``: a torch.profiler (Kineto) trace of ``--active`` steps
  (``ProfilerStep#N`` markers, ``record_shapes=True``), after ``--warmup`` steps;
* ``.run.json``: the configuration (model sizes, batch, dtype, the GPU's name, torch and CUDA
  versions) and the **unprofiled** step times in ns of ``--steps`` steps timed without the
  profiler (``time.perf_counter_ns`` around each step; every step ends with ``loss.item()``,
  the host-device sync of a training loop that logs its loss), and their median.

Workloads (bf16 autocast, fused AdamW, ``zero_grad(set_to_none=True)``):

* ``gpt``: a decoder-only transformer LM (token + position embeddings, ``--layers`` pre-LN
  blocks of causal ``scaled_dot_product_attention`` and a 4x GELU MLP, tied output
  projection), sequence ``--seq``; compute-bound GEMMs and attention.
* ``resnet``: torchvision ``resnet50(weights=None)``, 224x224 images, channels-last;
  convolutions plus memory-bound batch norm and elementwise kernels.
* ``mlp``: 8 linear layers of width 256 on a batch of feature vectors; a step of ~100 small
  kernels, bound by the host's launch rate, not by the GPU.

The pairs: the same workload at two batch sizes on one GPU (the ``batch_size`` what-if), and
the same workload and batch on two GPUs (the ``gpu`` what-if), by running this script on each.

Run: ``python benchmarks/record_gpu_pairs.py --out DIR [--workloads gpt,resnet,mlp]
[--batches gpt=4,8;resnet=64,128;mlp=256,512] [--steps 30] [--warmup 10] [--active 5]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_BATCHES = "gpt=4,8;resnet=64,128;mlp=256,512"


def _gpt(batch: int, args: argparse.Namespace) -> tuple[Any, Any]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, heads, layers, seq, vocab = args.d_model, args.heads, args.layers, args.seq, 32768

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.tok.weight.t()

    model = GPT().cuda()
    idx = torch.randint(0, vocab, (batch, seq), device="cuda")
    tgt = torch.randint(0, vocab, (batch, seq), device="cuda")

    def loss_fn() -> Any:
        logits = model(idx)
        return F.cross_entropy(logits.view(-1, vocab).float(), tgt.view(-1))

    return model, loss_fn


def _resnet(batch: int, args: argparse.Namespace) -> tuple[Any, Any]:
    import torch
    import torch.nn.functional as F
    import torchvision

    model = torchvision.models.resnet50(weights=None).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def loss_fn() -> Any:
        return F.cross_entropy(model(x).float(), y)

    return model, loss_fn


def _mlp(batch: int, args: argparse.Namespace) -> tuple[Any, Any]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    width, depth = 256, 8
    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).cuda()
    x = torch.randn(batch, width, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")

    def loss_fn() -> Any:
        return F.cross_entropy(model(x).float(), y)

    return model, loss_fn


WORKLOADS = {"gpt": _gpt, "resnet": _resnet, "mlp": _mlp}


def _parse_batches(spec: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for part in filter(None, spec.split(";")):
        name, _, sizes = part.partition("=")
        out[name.strip()] = [int(s) for s in sizes.split(",") if s.strip()]
    return out


def train_step(workload: str, batch: int, args: argparse.Namespace) -> tuple[Any, Any]:
    """``(model, step)``: a fresh ``workload`` at ``batch`` and its training step (bf16
    autocast, fused AdamW, the loss read back: a host-device sync)."""
    import torch

    torch.manual_seed(0)
    model, loss_fn = WORKLOADS[workload](batch, args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        opt.step()
        return float(loss.item())
    return model, step


def record_one(workload: str, batch: int, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train ``workload`` at ``batch`` and write the trace and ``.run.json`` into ``out``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    model, step = train_step(workload, batch, args)
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times: list[int] = []
    for _ in range(args.steps):
        t = time.perf_counter_ns()
        step()
        times.append(time.perf_counter_ns() - t)
    tmp = out.with_name(out.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    raw = tmp / "rank-0.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=2, active=args.active),
                 record_shapes=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
        for _ in range(1 + 2 + args.active):
            step()
            prof.step()
    with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    n_params = sum(p.numel() for p in model.parameters())
    meta = {
        "workload": workload, "batch_size": batch, "world_size": 1,
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda, "params": n_params, "dtype": "bf16 autocast",
        "config": ({"d_model": args.d_model, "heads": args.heads, "layers": args.layers,
                    "seq": args.seq} if workload == "gpt" else {}),
        "warmup": args.warmup, "steps": args.steps, "active": args.active,
        "unprofiled_step_ns": times, "unprofiled_median_ns": int(statistics.median(times)),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / ".run.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    torch.cuda.empty_cache()
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workloads", default="gpt,resnet,mlp")
    ap.add_argument("--batches", default=DEFAULT_BATCHES)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--active", type=int, default=5)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("record_gpu_pairs.py: no CUDA GPU", file=sys.stderr)
        return 2
    batches = _parse_batches(args.batches)
    label = torch.cuda.get_device_name(0).replace("NVIDIA ", "").split()[0].lower()
    for w in args.workloads.split(","):
        if w not in WORKLOADS:
            print(f"record_gpu_pairs.py: unknown workload {w!r}", file=sys.stderr)
            return 2
        for b in batches.get(w, []):
            meta = record_one(w, b, args.out / f"{label}_{w}_bs{b}", args)
            ms = meta["unprofiled_median_ns"] / 1e6
            spread = (max(meta["unprofiled_step_ns"]) / min(meta["unprofiled_step_ns"]) - 1)
            print(f"{label} {w} bs{b}: {ms:.3f} ms/step unprofiled (max/min-1 "
                  f"{100 * spread:.1f}%), {meta['params'] / 1e6:.1f}M params", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
