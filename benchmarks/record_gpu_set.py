"""Record one machine's kept data set in one go: pairs, the profiler's cost, kernel benchmarks.

The steps (each a script or command of this repository, run in a fresh process, each given
its share of ``--budget-min`` minutes and stopped at it; what a step wrote before its limit
stays):

1. ``record_gpu_pairs.py`` (CUDA only): GPT, ResNet-50 and MLP at two batch sizes, a Kineto
   trace with shapes and the unprofiled step times of each (``OUT/pairs``);
2. ``record_profiler_cost.py``: the 7 programs, then the 3 models on a GPU, with no profiler
   and each profiler setting in interleaved rounds (``OUT/pcost``, ``OUT/models/<model>``);
3. ``traincast bench`` on the device with a time budget per family, then ``traincast fit``
   (``OUT/bench``, ``OUT/models.fit``) when traincast and its dependencies are importable
   there (on a bare GPU machine: carry them as wheels, see the device notes); skipped with
   a line in the manifest otherwise.

``OUT/MANIFEST.json`` (written last, also after a failed step): the machine (CPU, GPU, driver,
torch, CUDA), each step's command, exit code and seconds, and what was recorded; the layout of
``benchmarks/data/gpu_runs``. Pack ``OUT`` with ``tar cJf`` into ``benchmarks/data/<set>/``
beside the manifest and check it with ``benchmarks/fidelity.py``.

Run: ``python benchmarks/record_gpu_set.py --out OUT [--device cuda|cpu] [--budget-min 20]
[--skip pairs,pcost,bench]``. Exit code 1 when a step failed (a step stopped at its budget
did not fail).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: each step's share of the budget
SHARES = {"pairs": 0.3, "pcost": 0.4, "bench": 0.3}


def _run(cmd: list[str], seconds: float, log: Path) -> dict[str, Any]:
    """Run ``cmd`` with a time limit; its output into ``log``; exit code and seconds."""
    t0 = time.time()
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=seconds,
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return {"command": " ".join(cmd), "rc": rc, "seconds": round(time.time() - t0, 1),
            "log": log.name}


def _machine(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "cores": os.cpu_count(),
                            "platform": platform.platform()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch  # the recording machine's torch (the only required package)

        info["torch"] = str(torch.__version__)
        if device == "cuda" and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda"] = torch.version.cuda
    except ImportError:
        info["torch"] = None
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                            "--format=csv,noheader"], capture_output=True, text=True,
                           check=False)
        info["nvidia_smi"] = q.stdout.strip()
    return info


def _traincast_ok() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import traincast.cli"], capture_output=True,
                           check=False)
    return probe.returncode == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--budget-min", type=float, default=20.0)
    ap.add_argument("--skip", default="", help="comma-separated steps to skip")
    ap.add_argument("--quick", action="store_true",
                    help="a few steps per block (for tests; not data)")
    args = ap.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    skip = {s for s in args.skip.split(",") if s}
    budget = args.budget_min * 60
    py = sys.executable
    steps: dict[str, Any] = {}
    if "pairs" not in skip:
        if args.device == "cuda":
            steps["pairs"] = _run([py, str(HERE / "record_gpu_pairs.py"), "--out",
                                   str(out / "pairs")], SHARES["pairs"] * budget,
                                  out / "pairs.log")
        else:
            steps["pairs"] = {"skipped": "the pairs' models run on CUDA only"}
    if "pcost" not in skip:
        dev = ["--device", args.device] + (
            ["--steps", "3", "--rounds", "1", "--warmup", "1", "--programs", "mlp,views"]
            if args.quick else [])
        steps["pcost"] = _run([py, str(HERE / "record_profiler_cost.py"), "--out",
                               str(out / "pcost"), *dev], SHARES["pcost"] * budget * 0.5,
                              out / "pcost.log")
        if args.device == "cuda":
            for m in ("mlp_bs256", "resnet_bs64", "gpt_bs4"):
                steps[f"model {m}"] = _run(
                    [py, str(HERE / "record_profiler_cost.py"), "--out", str(out / "models" / m),
                     "--programs", m, "--model-steps", "5", "--rounds", "3", "--warmup", "8",
                     *dev], SHARES["pcost"] * budget * 0.5 / 3, out / f"model-{m}.log")
    if "bench" not in skip:
        if _traincast_ok():
            share = SHARES["bench"] * budget
            steps["bench"] = _run([py, "-m", "traincast.cli", "bench", "--out", str(out / "bench"),
                                   "--device", args.device, "--max-seconds", str(share / 14),
                                   "--no-progress"], share * 0.9, out / "bench.log")
            steps["fit"] = _run([py, "-m", "traincast.cli", "fit", str(out / "bench"), "--out",
                                 str(out / "models.fit")], share * 0.1 + 60, out / "fit.log")
        else:
            steps["bench"] = {"skipped": "traincast is not importable here (carry its wheels)"}
    manifest = {"what": "one machine's kept data set (benchmarks/record_gpu_set.py)",
                "recorded": dt.date.today().isoformat(), "device": args.device,
                "recorded_with": "python benchmarks/record_gpu_set.py " + " ".join(
                    argv if argv is not None else sys.argv[1:]),
                "machine": _machine(args.device), "steps": steps,
                "runs": [{"path": str(p.parent.relative_to(out))}
                         for p in sorted(out.rglob(".run.json"))]}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    # 124: a step stopped at its share of the budget (what it wrote stays)
    failed = [k for k, v in steps.items() if v.get("rc") not in (None, 0, 124)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
