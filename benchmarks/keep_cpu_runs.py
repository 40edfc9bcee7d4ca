"""Keep CPU recordings of :mod:`harness.random_models` (and the kernel models that predict
them) as a data set under ``benchmarks/data/<set>/``: a compressed archive and
``MANIFEST.json`` in the layout of ``benchmarks/data/gpu_runs``.

Per recording folder ``<name>/`` (``run.json``, ``et.json``, ``kineto.json``) the archive
holds ``runs/<name>/.run.json`` (the configuration, ``workload`` = the configuration's kind
and name, ``batch_size``, ``unprofiled_median_ns`` = the median unprofiled step, the block
medians and fastest step, ``unprofiled_cpu_median_ns`` = the median of the training
thread's CPU time per step (time waiting for a core on a shared machine left out), the
``profiler`` settings of the Kineto trace, ``torch``,
``device``), ``runs/<name>/et.json.gz`` (the execution trace of one other step) and
``runs/<name>/rank-0.pt.trace.json.gz`` (the Kineto trace, ``record_shapes``); with
``--models``, ``models/`` (the ``traincast fit`` folder, with the bench's
``overheads.json``; each run's from-ET prediction by them, ``from_et_ns``, goes into the
manifest) and, with ``--bench``, ``bench/`` (the
``traincast bench`` folder the models were fitted on, to refit them; its ``overheads.json``
is the host overhead table of the predictions).

Run: ``python benchmarks/keep_cpu_runs.py --set cpu_dlrm --models MODELS --bench BENCH
--split heldout REC_DIR/dlrm-0 ... [--split dev REC_DIR/...]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import io
import json
import platform
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO  # noqa: E402

from traincast.predict.from_et import predict_from_et  # noqa: E402


def run_meta(run: dict[str, Any]) -> dict[str, Any]:
    """The ``.run.json`` of a kept run, from the recording's ``run.json``."""
    cfg = run["config"]
    t = run["timing"]
    return {
        "workload": f"{cfg['name'].split('-')[0]}",
        "name": cfg["name"], "config": cfg, "batch_size": cfg.get("batch"),
        "device": "cpu", "threads": run.get("threads", 1), "torch": run.get("torch"),
        "unprofiled_median_ns": t["unprofiled_step_ns"],
        "unprofiled_block_median_ns": t["repeat_median_ns"],
        "unprofiled_min_ns": t.get("min_step_ns"),
        "unprofiled_cpu_median_ns": t.get("unprofiled_cpu_step_ns"),
        "unprofiled_steps": t["steps"] * t["repeats"], "noise": t["noise"],
        "et_step_ns": t.get("et_step_ns"), "kineto_step_ns": t.get("kineto_step_ns"),
        "profiler": {"record_shapes": True, "with_stack": False, "execution_trace": False},
        "execution_trace_step": run.get("et_marker"), "kineto_step": run.get("kineto_step"),
        "date": run.get("date"), "loadavg": run.get("loadavg"), "platform": run.get("platform"),
    }


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def _gz(path: Path) -> bytes:
    return gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="cpu_dlrm")
    ap.add_argument("--split", nargs="+", action="append", metavar=("SPLIT", "RUN_DIR"),
                    required=True, help="a split name (dev, heldout) and its recording folders")
    ap.add_argument("--models", type=Path)
    ap.add_argument("--bench", type=Path)
    ap.add_argument("--tolerance", type=json.loads, default=None,
                    help='JSON {"per_run": {kind: frac}, "gmae": {kind: frac}, "why": text}: '
                         "the from-ET error the kept-runs test allows on held-out runs")
    ap.add_argument("--note", default="", help="how the runs were drawn and recorded")
    ap.add_argument("--what", default="CPU random DLRMs (incl. wide tables) and Transformers "
                    "trained for real on one thread: unprofiled step times, one step's "
                    "execution trace, one other step's Kineto trace")
    args = ap.parse_args(argv)
    out = REPO / "benchmarks" / "data" / args.set
    out.mkdir(parents=True, exist_ok=True)
    day = dt.date.today().isoformat()
    archive = f"{args.set}-{day}.tgz"
    runs = []
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        for split, *folders in args.split:
            for f in map(Path, folders):
                run = json.loads((f / "run.json").read_text())
                meta = run_meta(run)
                meta["split"] = split
                base = f"runs/{f.name}"
                _add_bytes(tar, f"{base}/.run.json", (json.dumps(meta, indent=1) + "\n").encode())
                et, kin = _gz(f / "et.json"), _gz(f / "kineto.json")
                _add_bytes(tar, f"{base}/et.json.gz", et)
                _add_bytes(tar, f"{base}/rank-0.pt.trace.json.gz", kin)
                pred = None
                if args.models is not None:
                    pred = predict_from_et(f / "et.json", args.models,
                                           overheads=args.bench / "overheads.json"
                                           if args.bench else None).step_ns
                runs.append({"path": base, "workload": meta["workload"],
                             "from_et_ns": pred,
                             "unprofiled_cpu_median_ns": meta["unprofiled_cpu_median_ns"],
                             "batch_size": meta["batch_size"], "split": split,
                             "unprofiled_median_ns": meta["unprofiled_median_ns"],
                             "noise": round(meta["noise"], 4),
                             "trace_sha256": hashlib.sha256(kin).hexdigest(),
                             "et_sha256": hashlib.sha256(et).hexdigest()})
        if args.models is not None and args.bench is not None and not (
                args.models / "overheads.json").is_file():
            # the predictor looks for the host overheads beside the models first
            _add_bytes(tar, "models/overheads.json", (args.bench / "overheads.json").read_bytes())
        for sub, src in (("models", args.models), ("bench", args.bench)):
            if src is None:
                continue
            for p in sorted(src.rglob("*")):
                if p.is_file() and not p.name.endswith(".bak") and "old" not in p.parts[
                        len(src.parts):-1]:
                    _add_bytes(tar, f"{sub}/{p.relative_to(src)}", p.read_bytes())
    data = buf.getvalue()
    for old in out.glob("*.tgz"):
        old.unlink()
    (out / archive).write_bytes(data)
    import torch  # optional (traincast[record]); only for the version recorded in the manifest

    manifest = {
        "what": args.what,
        "archive": archive, "archive_sha256": hashlib.sha256(data).hexdigest(),
        "archive_bytes": len(data), "recorded": day, "note": args.note,
        "recorded_with": "harness.random_models.record_config via benchmarks/seed_models.py "
                         "(--kind dlrm/transformer/dlrm_wide); packed by "
                         "benchmarks/keep_cpu_runs.py",
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "platform": platform.platform(), "python": platform.python_version(),
                    "torch": str(torch.__version__), "threads": 1,
                    "note": "2 vCPUs shared with other jobs: truths carry their noise"},
        "layout": "runs/<name>/{.run.json,et.json.gz,rank-0.pt.trace.json.gz}; models/ "
                  "(traincast fit); bench/ (traincast bench, the models' measurements)",
        "models": "models" if args.models else None,
        "fit_runs": [],
        "tolerance": args.tolerance,
        "splits": {"dev": "looked at while the benchmark method was developed",
                   "heldout": "recorded after the method was fixed (another seed); not looked "
                              "at before the final figures"},
        "use": f"mkdir -p /tmp/{args.set} && tar xzf benchmarks/data/{args.set}/{archive} -C "
               f"/tmp/{args.set} && python benchmarks/et_op_errors.py --models "
               f"/tmp/{args.set}/models /tmp/{args.set}/runs (per-op and per-step errors); "
               "benchmarks/fidelity.py reads the set itself",
        "runs": runs,
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{out / archive}: {len(data) / 1e6:.2f} MB, {len(runs)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
