"""One accuracy table: every prediction class against every kept data set with ground truth.

Prediction classes (``--only CLASS``; a class with no data prints ``no kept data`` and what
would be needed, never a figure):

* ``replay`` -- ``traincast.predict(ts).iterations.predicted_ns`` against the trace's own
  measured (profiled) step;
* ``unprofiled`` -- ``unprofiled_ns`` (the step without the profiler's host cost) against the
  step measured with no profiler running;
* ``device`` -- ``speedup=kind:device=k`` against the same workload measured with the device
  k times faster (no data set holds such a pair yet);
* ``gpu`` / ``vendor`` -- ``gpu=<other>`` from one GPU's trace against the same workload
  measured on another GPU of the same vendor / of another vendor;
* ``batch`` -- ``batch_size=<other>`` from one batch's trace against the other batch measured;
* ``from_et`` -- :func:`traincast.predict.from_et.predict_from_et` (kernel models, no Kineto
  trace) against the unprofiled step;
* ``world_size`` -- one rank's recording predicted at ``world_size=N`` against N ranks
  measured; the shared vTrain all_reduce table gives the collective model alone at a group
  size it was not fitted on.

Data sets, discovered at run time:

* every ``benchmarks/data/<set>/MANIFEST.json`` (layout of ``benchmarks/data/gpu_runs``): the
  archive is checked against ``archive_sha256`` and unpacked once into ``--cache``; each run
  folder's ``.run.json`` gives the configuration (``gpu`` or ``device``, ``workload``,
  ``batch_size``, ``world_size``) and the truth (``unprofiled_median_ns``); a folder with a
  ``*.json.gz`` Kineto trace is predicted, ``et.json.gz`` feeds from-ET when the set keeps
  kernel models (a folder with ``models.json``, named by the manifest's ``models`` key or
  found under the set). The truth of a configuration is the median over its runs
  (:func:`gpu_pairs.compute`, which computes the replay, unprofiled, gpu and batch checks).
  Runs marked as used to fit a model (``"split": "fit"``, ``"used_in_fit": true`` on the
  manifest's run entry or in ``.run.json``, or listed in the manifest's ``fit_runs``) are
  left out of the unprofiled class: the table reports data the model did not see.
* ``../shared/data``: the replay inputs of :mod:`replay_accuracy` (their profiled steps are
  the truth) and vTrain's all_reduce table (:func:`comm_model_accuracy.leave_n_out`). The
  shared traces hold no pair of one workload on two GPUs, vendors, batches or world sizes.

Statistics per row over its predictions' errors ``e = predicted / measured - 1`` (%): median
|e|, geometric mean |e| (:func:`seed_models.geomean_abs`), signed mean; the target of the
class and whether the row meets it (on the statistic the target names); the peers' published
figure for that class (sources in :data:`PEERS`). Figures of earlier benchmark runs whose
recordings were not kept are listed apart, read from ``benchmarks/results``, not recomputed.

Run: ``python benchmarks/fidelity.py [--only CLASS] [--quick] [--sets gpu_runs,shared]
[--md FILE] [--json-out FILE] [--cache DIR]``; ``--quick``: one recorded repeat per
configuration and no 8-rank replay. Writes ``benchmarks/results/fidelity.json`` and prints
the Markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import statistics
import sys
import tarfile
import time
import warnings
from pathlib import Path
from typing import Any

import traincast
from traincast.costs.comm import read_vtrain_lut
from traincast.costs.hardware import load_catalog
from traincast.errors import TraincastError
from traincast.predict.from_et import data_parallel_inputs, predict_from_et

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_pairs  # noqa: E402  (benchmarks/ is not a package)
from _common import REPO, git_state, machine  # noqa: E402
from comm_model_accuracy import DEFAULT_LUT, leave_n_out  # noqa: E402
from replay_accuracy import default_inputs, measure  # noqa: E402
from seed_models import geomean_abs  # noqa: E402

DATA = REPO / "benchmarks" / "data"
SHARED = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_OUT = RESULTS / "fidelity.json"
DEFAULT_CACHE = Path("/tmp/traincast-fidelity")

CLASSES = {
    "replay": "replay",
    "unprofiled": "unprofiled step",
    "device": "device speed-up",
    "gpu": "`gpu=` cross-GPU",
    "vendor": "`gpu=` cross-vendor",
    "batch": "`batch_size`",
    "from_et": "from-ET",
    "world_size": "`--world-size` from one rank",
}
#: class -> (statistic, limit %, where the target comes from); from_et per workload kind
TARGETS: dict[str, tuple[str, float, str]] = {
    "replay": ("median", 3.0, "replay_accuracy.py: MAPE <= 3% on real traces"),
    "unprofiled": ("median", 10.0, "issue: unprofiled step within 10%"),
    "gpu": ("median", 10.0, "issue: GPU pairs <= 10%"),
    "vendor": ("median", 10.0, "issue: GPU pairs <= 10%"),
    "batch": ("median", 10.0, "issue: GPU pairs <= 10%"),
    "from_et:dlrm": ("geomean", 10.0, "issue: DLRM geomean <= 10%"),
    "from_et:transformer": ("geomean", 5.0, "issue: Transformers <= 5%"),
    "from_et": ("geomean", 10.0, "issue: from-ET within 10%"),
    "world_size": ("geomean", 10.0, "from_et_world.py: 10%"),
}
#: class -> (figure, source); figures as the issue quotes them
PEERS: dict[str, tuple[str, str]] = {
    "replay": ("Lumos 3.3% avg", "Lumos (Liang et al., MLSys 2025, arXiv 2504.09307): replay "
               "of GPT-3 variants on up to 512 H100, average error 3.3% (abstract)"),
    "unprofiled": ("Phantora 2.9% avg", "Phantora (Qin et al., NSDI 2026, arXiv 2505.01616): "
                   "hybrid simulation of unmodified training scripts; the 2.9% average is as "
                   "the issue quotes it (the abstract gives no figure)"),
    "gpu": ("NeuSight 3.8%", "NeuSight (Lee et al., ASPLOS 2025, arXiv 2407.13853): GPT-3 "
            "training/inference latency on an H100 not used in training, 3.8% (abstract); "
            "the issue quotes it per kernel"),
    "vendor": ("NeuSight 3.8%", "NeuSight (as above; AMD MI-series GPUs are in its evaluation)"),
    "from_et": ("Lin et al. 5.21% DLRM / 3.00% Transformers geomean",
                "Lin et al., Towards Universal Performance Modeling for Machine Learning "
                "Training on Multi-GPU Platforms, arXiv 2404.12674 (geomean of |error|)"),
    "world_size": ("Echo 8% avg at 96 GPUs", "Echo (Feng et al., arXiv 2412.12487): GPT-175B "
                   "on 96 H800, 3D parallelism, 8% average step error (abstract)"),
}
#: what a class needs when no kept data set has it
NEEDS = {
    "device": "one workload measured with the device time changed by a known factor (e.g. "
              "GPU clocks locked at two frequencies), unprofiled truth at both "
              "(whatif_physics.py checks speedup= against bounds and a synthetic queue "
              "simulation only, not a measurement)",
    "gpu": "the same workload and batch recorded on two GPUs of one vendor (e.g. H100 and "
           "H200 runs in one set; the H100/H200 pairs of 2026-11-25 were not kept; the "
           "shared hta/trace_diff A100/V100 traces are two different jobs, kernel-name "
           "Jaccard 0.52, world sizes 8 and 2: not a pair)",
    "vendor": "the same workload and batch recorded on an NVIDIA and an AMD GPU (the MI300X "
              "recordings of the shared TraceLens H100 runs are held aside by the project "
              "owner)",
    "from_et": "runs with et.json.gz and unprofiled truth, plus kernel models (models.json, "
               "traincast bench + fit) from the machine that recorded them",
    "world_size": "runs of one workload at world_size 1 (trace or ET) and N > 1 (unprofiled "
                  "truth); from-ET also needs the comm model (comm.json) beside the models",
    "batch": "the same workload recorded at two batch sizes",
}
#: earlier runs whose recordings were not kept: (class, results file, label, summary path)
STORED = (
    ("unprofiled", "unprofiled.json", "CPU DLRM/Transformer, 4 profiler settings",
     ("summary", "mape_kineto", "after"), "MAPE, kineto"),
    ("unprofiled", "seed_models.json", "CPU random models (20), replay-unprof",
     ("summary", "all", "gmae_replay_unprof_pct"), "geomean"),
    ("from_et", "seed_models.json", "CPU random DLRMs (10)", ("summary", "dlrm", "gmae_from_et_pct"),
     "geomean"),
    ("from_et", "seed_models.json", "CPU random Transformers (10)",
     ("summary", "transformer", "gmae_from_et_pct"), "geomean"),
    ("batch", "from_et_batch.json", "CPU random models (16), from-ET",
     ("summary", "all", "gmae_from_et_pct"), "geomean"),
    ("batch", "from_et_batch.json", "CPU random models (16), Kineto what-if",
     ("summary", "all", "gmae_whatif_pct"), "geomean"),
    ("world_size", "from_et_world.json", "CPU DDP 2 gloo ranks (6 configs), from-ET",
     ("summary", "all", "gmae_world_pct"), "geomean"),
)

#: the same from whatif_accuracy.py's per-target rows (CPU demo sweep, /tmp, not kept):
#: (class, results file, label, what-if keys a row's what_if must hold exactly)
STORED_ROWS = (
    ("batch", "whatif_accuracy_ws1_bs32.json", "CPU demo sweep, 1 rank, batch 32 -> 8..128",
     {"batch_size", "batch_size_from"}),
    ("world_size", "whatif_accuracy_ws1_bs32_with_comm.json",
     "CPU demo sweep, 1 rank -> 2 gloo ranks (batch 32 -> 8..128), Kineto what-if + comm model",
     None),
)


# ----------------------------------------------------------------------------- rows

def stats(errors_pct: list[float]) -> dict[str, float | int | None]:
    """n, median |e|, geomean |e|, signed mean (all %) of errors in %."""
    if not errors_pct:
        return {"n": 0, "median_abs_pct": None, "geomean_abs_pct": None, "mean_pct": None}
    g = geomean_abs([e / 100.0 for e in errors_pct])
    return {"n": len(errors_pct),
            "median_abs_pct": statistics.median(abs(e) for e in errors_pct),
            "geomean_abs_pct": None if g is None else 100.0 * g,
            "mean_pct": statistics.fmean(errors_pct)}


def make_row(cls: str, dataset: str, errors_pct: list[float], *, note: str = "",
             target_key: str | None = None, unit: str = "step",
             labels: list[str] | None = None) -> dict[str, Any]:
    """One table row: statistics of ``errors_pct`` (``labels``: what each error is, kept in
    the JSON), the target and whether it is met."""
    row: dict[str, Any] = {"class": cls, "dataset": dataset, "status": "computed",
                           "unit": unit, "errors_pct": [round(e, 4) for e in errors_pct],
                           "labels": labels,
                           **stats(errors_pct), "note": note}
    tgt = TARGETS.get(target_key or cls)
    if tgt is not None and row["n"]:
        stat, limit, src = tgt
        value = row["median_abs_pct" if stat == "median" else "geomean_abs_pct"]
        row.update(target=f"{stat} <= {limit:g}%", target_source=src, met=value <= limit)
    else:
        row.update(target=None, target_source=None, met=None)
    row["peer"] = PEERS.get(cls, ("", ""))[0]
    return row


def missing_row(cls: str, dataset: str, why: str, status: str = "no kept data"
                ) -> dict[str, Any]:
    """A class with no kept data (or whose predictions were all refused): what would be
    needed or why, no figure."""
    return {"class": cls, "dataset": dataset, "status": status, "n": 0, "unit": "step",
            "median_abs_pct": None, "geomean_abs_pct": None, "mean_pct": None,
            "target": None, "met": None, "peer": PEERS.get(cls, ("", ""))[0], "note": why}


# ----------------------------------------------------------------------------- kept sets

def discover(data: Path = DATA) -> list[tuple[str, Path, dict[str, Any]]]:
    """(set name, set folder, manifest) of every ``data/<set>/MANIFEST.json``."""
    out = []
    for mf in sorted(data.glob("*/MANIFEST.json")):
        out.append((mf.parent.name, mf.parent, json.loads(mf.read_text())))
    return out


def unpack(name: str, folder: Path, manifest: dict[str, Any], cache: Path) -> Path:
    """The set's archive unpacked under ``cache`` (once per archive digest); checked first.
    A manifest without ``archive`` describes folders kept as they are: ``folder`` itself."""
    if not manifest.get("archive"):
        return folder
    archive = folder / manifest["archive"]
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if manifest.get("archive_sha256") and digest != manifest["archive_sha256"]:
        raise ValueError(f"{archive}: sha256 {digest} differs from its manifest")
    root = cache / f"{name}-{digest[:12]}"
    done = root / ".unpacked"
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tf:
            tf.extractall(root, filter="data")
        done.write_text(digest)
    return root


def _in_fit(entry: dict[str, Any], meta: dict[str, Any], fit_runs: set[str]) -> bool:
    return any(d.get("split") == "fit" or d.get("used_in_fit") is True for d in (entry, meta)) \
        or entry.get("path") in fit_runs


def _device(meta: dict[str, Any], catalog: Any) -> tuple[str, str]:
    """(label, vendor) of a run's device: the catalog GPU name, else ``cpu``/the raw name."""
    name = str(meta.get("gpu") or meta.get("device") or "cpu")
    gpu = catalog.match_device(name) if name.lower() != "cpu" else None
    return (gpu.name, gpu.vendor) if gpu is not None else (name.lower(), "")


def _workload(meta: dict[str, Any], entry: dict[str, Any]) -> str:
    """The run's workload; runs of one name with different ``config`` (batch aside) differ."""
    name = str(meta.get("workload", entry.get("workload", "?")))
    cfg = meta.get("config")
    if isinstance(cfg, dict):
        cfg = {k: v for k, v in cfg.items() if k not in ("batch", "batch_size")}
    if not cfg:
        return name
    return f"{name}#{hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:6]}"


def _profiler_label(p: dict[str, Any] | None) -> str:
    if not p:
        return "[profiler settings not in .run.json]"
    parts = [k for k, f in (("shapes", "record_shapes"), ("stack", "with_stack"),
                            ("et", "execution_trace")) if p.get(f)]
    return "kineto" + "".join(f"+{x}" for x in parts)


def _models_dir(folder: Path, root: Path, manifest: dict[str, Any]) -> Path | None:
    if manifest.get("models"):
        for base in (root, folder):
            if (base / manifest["models"] / "models.json").is_file():
                return base / manifest["models"]
    for base in (folder, root):
        found = sorted(base.rglob("models.json"))
        if found:
            return found[0].parent
    return None


def _kind(workload: str) -> str:
    w = workload.lower()
    return "dlrm" if "dlrm" in w else "transformer" if ("transformer" in w or "gpt" in w) else ""


def kept_set_rows(name: str, folder: Path, manifest: dict[str, Any], cache: Path,
                  classes: set[str], quick: bool) -> list[dict[str, Any]]:
    """Every class computable from one kept set, with its rows' errors."""
    root = unpack(name, folder, manifest, cache)
    catalog = load_catalog()
    fit_runs = set(manifest.get("fit_runs", []))
    runs: dict[str, list[Path]] = {}
    configs: dict[str, gpu_pairs.Config] = {}
    vendor: dict[str, str] = {}
    world: dict[tuple[str, str, int], dict[int, list[float]]] = {}
    metas: dict[Path, dict[str, Any]] = {}
    held_out: set[Path] = set()
    no_truth = missing = 0
    for entry in manifest.get("runs", []):
        d = root / entry["path"]
        if not (d / ".run.json").is_file():
            d = folder / entry["path"]
        if not (d / ".run.json").is_file():
            missing += 1
            continue
        meta = json.loads((d / ".run.json").read_text())
        if "unprofiled_median_ns" not in meta:
            no_truth += 1
            continue
        metas[d] = meta
        label, vend = _device(meta, catalog)
        # traces recorded with different profiler settings are different configurations
        # (their profiled steps differ); each has the run's unprofiled truth
        prof = f"[{_profiler_label(meta['profiler'])}]" if meta.get("profiler") else ""
        key = (label, _workload(meta, entry) + prof,
               int(meta.get("batch_size") or entry.get("batch_size") or 0))
        ws = int(meta.get("world_size") or 1)
        if ws > 1:
            world.setdefault(key, {}).setdefault(ws, []).append(
                meta["unprofiled_median_ns"] / 1e6)
            continue
        cname = f"{key[0]}_{key[1]}_bs{key[2]}"
        runs.setdefault(cname, []).append(d)
        configs[cname] = key
        vendor[key[0]] = vend
        if not _in_fit(entry, meta, fit_runs):
            held_out.add(d)
    traced = [d for ds in runs.values() for d in ds if gpu_pairs.has_trace(d)]
    if quick:  # one traced repeat per configuration; every repeat still gives the truth
        first = {n: next((d for d in ds if d in traced), None) for n, ds in runs.items()}
        traced = [d for d in first.values() if d is not None]
    out: list[dict[str, Any]] = []
    ds_label = f"{name} ({manifest.get('recorded', '?')}, {', '.join(sorted(vendor))})"
    gpus = {lab: lab for lab, v in vendor.items() if v}
    need = classes & {"replay", "unprofiled", "gpu", "vendor", "batch"}
    res: dict[str, Any] = {"rows": [], "truth_ms": {}}
    fit = [d for d in traced if d not in held_out]
    if runs and need:  # traces used in a fit: replay only
        res = gpu_pairs.compute(runs, configs, gpus=gpus,
                                predict={d for d in traced if d in held_out},
                                what_ifs=bool(classes & {"gpu", "vendor", "batch"}))
    rows = res["rows"]
    if fit and "replay" in classes:
        rows += [r for r in gpu_pairs.compute(runs, configs, gpus={}, predict=set(fit),
                                              what_ifs=False)["rows"]
                 if r["check"] == "replay"]
    fit_note = f"; {len(fit)} traces used in a fit left out" if fit else ""
    skipped = "".join(f"; {k} {what} skipped" for k, what in (
        (no_truth, "runs without unprofiled_median_ns"),
        (missing, "manifest runs without .run.json")) if k)
    fit_note += skipped

    if "replay" in classes:
        e = [r["err_pct"] for r in rows if r["check"] == "replay"]
        if e:
            out.append(make_row("replay", ds_label, e, labels=_labels(rows, "replay"),
                                note="profiled step of each trace" + skipped))
    if "unprofiled" in classes:
        sel = [r for r in rows if r["check"] == "unprofiled"]
        for prof in sorted({_profiler_label(r.get("profiler")) for r in sel}):
            s = [r for r in sel if _profiler_label(r.get("profiler")) == prof]
            naive = stats([r["profiled_as_is_err_pct"] for r in s])["median_abs_pct"]
            note = (f"profiled step as is: median {naive:.1f}%; truth spread "
                    f"median {statistics.median(r['truth_spread_pct'] for r in s):.0f}%"
                    + fit_note)
            out.append(make_row("unprofiled", f"{ds_label} {prof}", [r["err_pct"] for r in s],
                                note=note, labels=[r["trace"] for r in s]))
    for cls, check in (("gpu", "gpu"), ("vendor", "gpu"), ("batch", "batch")):
        if cls not in classes:
            continue
        sel = [r for r in rows if r["check"] == check]
        if check == "gpu":
            same = cls == "gpu"
            sel = [r for r in sel if (vendor[configs[r["target"]][0]]
                                      == vendor[configs[r["config"]][0]]) == same]
        if not sel:
            continue
        labels = [f"{r['trace']} -> {r['target']}" for r in sel]
        out.append(make_row(cls, f"{ds_label}, profiled step", [r["err_pct"] for r in sel],
                            note="what-if's profiled step vs the target's profiled step",
                            labels=labels))
        out.append(make_row(cls, f"{ds_label}, unprofiled step",
                            [r["unprofiled_err_pct"] for r in sel], labels=labels,
                            note="what-if's unprofiled_ns vs the target's unprofiled truth"))
    models = _models_dir(folder, root, manifest)
    truth = res.get("truth_ms") or {n: statistics.median(
        metas[d]["unprofiled_median_ns"] / 1e6 for d in ds) for n, ds in runs.items()}
    if "from_et" in classes:
        out += _from_et_rows(ds_label, runs, configs, truth, models)
    if "world_size" in classes and world:
        out += _world_rows(ds_label, runs, configs, world, models)
    return out


def _shapes_only(meta: dict[str, Any]) -> bool:
    """Whether a run was profiled as the kept GPU pairs were: Kineto with shapes, nothing else
    (a run without ``profiler`` settings is taken as recorded by ``record_gpu_pairs.py``)."""
    p = meta.get("profiler")
    if not isinstance(p, dict):
        return True
    return bool(p.get("record_shapes")) and not p.get("with_stack") and not p.get(
        "execution_trace")


def cross_set_gpu_rows(sets: list[tuple[str, Path, dict[str, Any]]], cache: Path,
                       classes: set[str]) -> list[dict[str, Any]]:
    """``gpu=``/``vendor`` rows between kept sets: a traced run of one set predicted on the
    GPU of a run of the same workload and batch in another set (traces recorded the same way:
    Kineto with shapes), against that run's profiled step and unprofiled truth. Workloads pair
    by name (the sets' GPU runs all come from ``record_gpu_pairs.py``'s models)."""
    want = classes & {"gpu", "vendor"}
    if not want:
        return []
    catalog = load_catalog()
    runs: dict[str, list[Path]] = {}
    configs: dict[str, gpu_pairs.Config] = {}
    vendor: dict[str, str] = {}
    set_of: dict[str, str] = {}
    for name, folder, manifest in sets:
        root = unpack(name, folder, manifest, cache)
        for entry in manifest.get("runs", []):
            d = root / entry["path"]
            if not (d / ".run.json").is_file() or not gpu_pairs.has_trace(d):
                continue
            meta = json.loads((d / ".run.json").read_text())
            label, vend = _device(meta, catalog)
            if not vend or "unprofiled_median_ns" not in meta or not _shapes_only(meta) \
                    or int(meta.get("world_size") or 1) > 1:
                continue
            key = (label, str(meta.get("workload", entry.get("workload"))),
                   int(meta.get("batch_size") or entry.get("batch_size") or 0))
            cname = f"{key[0]}_{key[1]}_bs{key[2]}"
            if set_of.setdefault(cname, name) != name:
                continue  # one set per configuration
            runs.setdefault(cname, []).append(d)
            configs[cname] = key
            vendor[label] = vend
    pairs = {(c1, c2) for c1 in configs for c2 in configs if set_of[c1] != set_of[c2]
             and configs[c1][1:] == configs[c2][1:] and configs[c1][0] != configs[c2][0]}
    if not pairs:
        return []
    srcs = {c1 for c1, _ in pairs}
    res = gpu_pairs.compute({c: runs[c] for c in {c for p in pairs for c in p}}, configs,
                            gpus={lab: lab for lab in vendor},
                            predict={d for c in srcs for d in runs[c]}, what_ifs=True)
    sel = [r for r in res["rows"] if r["check"] == "gpu" and (r["config"], r["target"]) in pairs]
    out = []
    for cls in sorted(want):
        same = cls == "gpu"
        rows = [r for r in sel if (vendor[configs[r["target"]][0]]
                                   == vendor[configs[r["config"]][0]]) == same]
        if not rows:
            continue
        ds = ", ".join(sorted({f"{set_of[r['config']]} -> {set_of[r['target']]}" for r in rows}))
        labels = [f"{r['trace']} -> {r['target']}" for r in rows]
        out.append(make_row(cls, f"{ds}, profiled step", [r["err_pct"] for r in rows],
                            labels=labels,
                            note="what-if's profiled step vs the target's profiled step"))
        out.append(make_row(cls, f"{ds}, unprofiled step",
                            [r["unprofiled_err_pct"] for r in rows], labels=labels,
                            note="what-if's unprofiled_ns vs the target's unprofiled truth"))
    return out


def _labels(rows: list[dict[str, Any]], check: str) -> list[str]:
    return [r["trace"] for r in rows if r["check"] == check]


def _from_et_rows(ds_label: str, runs: dict[str, list[Path]], configs: dict[str, Any],
                  truth: dict[str, float], models: Path | None) -> list[dict[str, Any]]:
    ets = [(n, d / "et.json.gz") for n, ds in runs.items() for d in ds
           if (d / "et.json.gz").is_file()]
    if not ets:
        return []
    if models is None:
        return [missing_row("from_et", ds_label, f"{len(ets)} execution traces kept but no "
                            "kernel models (models.json) of the recording machine")]
    errs: dict[str, list[float]] = {}
    names: dict[str, list[str]] = {}
    failed: list[str] = []
    for n, et in ets:
        try:
            p = predict_from_et(et, models)
        except TraincastError as exc:  # reported in the row, the table goes on
            failed.append(f"{et.parent.name}: {exc}")
            continue
        kind = _kind(configs[n][1])
        errs.setdefault(kind, []).append(100.0 * (p.step_ns / 1e6 / truth[n] - 1.0))
        names.setdefault(kind, []).append(f"{et.parent.parent.name}/{et.parent.name}")
    note = f"kernel models: the set's {models.name}/" + (
        f"; {len(failed)} ETs failed, first: {failed[0]}" if failed else "")
    if not errs:
        return [missing_row("from_et", ds_label, note, status="refused")]
    return [make_row("from_et", f"{ds_label} {kind or 'other'}", e,
                     target_key=f"from_et:{kind}" if kind else "from_et", note=note,
                     labels=names[kind])
            for kind, e in sorted(errs.items())]


def _world_rows(ds_label: str, runs: dict[str, list[Path]], configs: dict[str, Any],
                world: dict[tuple[str, str, int], dict[int, list[float]]],
                models: Path | None) -> list[dict[str, Any]]:
    kineto: list[float] = []
    from_et: list[float] = []
    why = kineto_why = ""
    for n, ds in runs.items():
        for ws, times in world.get(configs[n], {}).items():
            truth = statistics.median(times)
            for d in ds:
                if gpu_pairs.has_trace(d):
                    try:
                        p = traincast.predict(traincast.load(d), what_if=[f"world_size={ws}"])
                    except TraincastError as exc:  # reported in the table
                        kineto_why = f"{d.name}: {exc}"
                    else:
                        kineto.append(100.0 * (float(p.iterations.unprofiled_ns.median())
                                               / 1e6 / truth - 1.0))
                if (d / "et.json.gz").is_file() and models is not None:
                    try:
                        comm, corun = data_parallel_inputs(models, None)
                    except TraincastError as exc:  # reported in the table
                        why = f"from-ET not run: {exc}"
                        continue
                    p = predict_from_et(d / "et.json.gz", models, world_size=ws, comm=comm,
                                        corun=corun)
                    from_et.append(100.0 * (p.step_ns / 1e6 / truth - 1.0))
    out = []
    if kineto:
        out.append(make_row("world_size", f"{ds_label}, Kineto what-if", kineto,
                            note="unprofiled_ns of world_size=N vs N ranks measured"
                            + (f"; failed: {kineto_why}" if kineto_why else "")))
    elif kineto_why:
        out.append(missing_row("world_size", f"{ds_label}, Kineto what-if",
                               f"what-if refused: {kineto_why}", status="refused"))
    if from_et:
        out.append(make_row("world_size", f"{ds_label}, from-ET", from_et, note=why))
    elif why:
        out.append(missing_row("world_size", f"{ds_label}, from-ET", why))
    return out


# ----------------------------------------------------------------------------- shared data

def shared_rows(classes: set[str], quick: bool) -> list[dict[str, Any]]:
    """Replay of the shared real traces; the collective model at unseen group sizes."""
    out: list[dict[str, Any]] = []
    traces = SHARED / "traces"
    if "replay" in classes and traces.is_dir():
        for inp in default_inputs(traces):
            if not inp.path.exists() or (quick and inp.name == "dlrm_8xv100"):
                continue
            r = measure(inp, 1)
            e = [x["error_pct"] for x in r["iteration_rows"]]
            ranks = f"{r['ranks']} of {r['world_size'] or r['ranks']} ranks"
            out.append(make_row("replay", f"shared {inp.name} ({ranks})", e,
                                note="unit: one rank's profiled step"))
    if "world_size" in classes and DEFAULT_LUT.is_file():
        t = leave_n_out(read_vtrain_lut(DEFAULT_LUT))
        t = t[t.kind == "alpha_beta"]
        out.append({**make_row("world_size", "shared vTrain all_reduce LUT (A100, V100; 2-8 "
                               "GPUs)", [float(x) for x in t["mape_ge_1mib"]],
                               unit="held-out group size"),
                    "target": None, "met": None, "mean_pct": None,
                    "note": "collective model alone (alpha-beta, leave-one-group-size-out): "
                            "MAPE over 1 MiB-1 GiB per held-out group size; not a step"})
    return out


def stored_rows(classes: set[str]) -> list[dict[str, Any]]:
    """Figures of earlier runs whose recordings are not kept (read, not recomputed)."""
    out = []
    for cls, fname, label, path, stat in STORED:
        f = RESULTS / fname
        if cls not in classes or not f.is_file():
            continue
        d = json.loads(f.read_text())
        v: Any = d
        for k in path:
            v = v.get(k, {}) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            out.append({"class": cls, "dataset": label, "figure_pct": float(v), "stat": stat,
                        "source": f"benchmarks/results/{fname}", "git": d.get("git"),
                        "date": d.get("date")})
    for cls, fname, label, keys in STORED_ROWS:
        f = RESULTS / fname
        if cls not in classes or not f.is_file():
            continue
        d = json.loads(f.read_text())
        e = [r["error_pct"] for ref in d.get("references", []) for r in ref.get("rows", [])
             if r.get("status") == "ok" and r.get("error_pct") is not None
             and (set(r["what_if"]) == keys if keys else "world_size" in r["what_if"])]
        if e:
            out.append({"class": cls, "dataset": f"{label} ({len(e)} targets)",
                        "figure_pct": statistics.fmean(abs(x) for x in e), "stat": "MAPE",
                        "source": f"benchmarks/results/{fname}", "git": d.get("git"),
                        "date": d.get("created")})
    return out


# ----------------------------------------------------------------------------- output

def _pct(v: float | None, signed: bool = False) -> str:
    return "" if v is None else (f"{v:+.1f}" if signed else f"{v:.1f}")


def markdown(rows: list[dict[str, Any]], stored: list[dict[str, Any]], meta: dict[str, Any]
             ) -> str:
    lines = ["| class | data set | n | median abs % | geomean abs % | signed mean % | target "
             "| met | peer | notes |", "|---|---|---:|---:|---:|---:|---|---|---|---|"]
    for r in rows:
        met = {True: "met", False: "missed", None: ""}[r["met"]]
        if r["status"] != "computed":
            met = r["status"]
        lines.append(f"| {CLASSES[r['class']]} | {r['dataset']} | {r['n']} | "
                     f"{_pct(r['median_abs_pct'])} | {_pct(r['geomean_abs_pct'])} | "
                     f"{_pct(r['mean_pct'], True)} | {r['target'] or ''} | {met} | "
                     f"{r['peer']} | {r['note']} |")
    if stored:
        lines += ["", "Earlier runs whose recordings were not kept (they lay under /tmp; "
                  "figures read from benchmarks/results, not recomputed here):", "",
                  "| class | data set | figure | source |", "|---|---|---:|---|"]
        for s in stored:
            lines.append(f"| {CLASSES[s['class']]} | {s['dataset']} | {s['stat']} "
                         f"{s['figure_pct']:.1f}% | {s['source']} ({s['git'] or s['date']}) |")
    shown = {r["class"] for r in rows}
    lines += ["", "Notes:", "",
              "- error = predicted / measured - 1 over the predictions of a row; median and "
              "geomean of |error|, signed mean; the target is met on the statistic it names "
              "(sources: " + "; ".join(f"{k}: {v[2]}" for k, v in TARGETS.items()
                                       if k.split(":")[0] in shown) + ")."]
    for cls, (fig, src) in PEERS.items():
        if cls in shown:
            lines.append(f"- peer, {CLASSES[cls]}: {fig}: {src}.")
    lines.append(f"- {meta['command']} in {meta['seconds']:.0f} s, git {meta['git']}, "
                 f"{meta['date']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=sorted(CLASSES), action="append",
                    help="this class only (repeatable)")
    ap.add_argument("--quick", action="store_true",
                    help="one recorded repeat per configuration, no 8-rank replay")
    ap.add_argument("--sets", default=None,
                    help="comma-separated kept sets (folder names) and/or 'shared'; default all")
    ap.add_argument("--md", type=Path, default=None, help="also write the Markdown here")
    ap.add_argument("--json-out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="where the kept archives are unpacked (once per archive digest)")
    ap.add_argument("--data", type=Path, default=DATA, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    classes = set(args.only or CLASSES)
    wanted = None if args.sets is None else {s.strip() for s in args.sets.split(",")}
    rows: list[dict[str, Any]] = []
    sets = [s for s in discover(args.data) if wanted is None or s[0] in wanted]
    for name, folder, manifest in sets:
        rows += kept_set_rows(name, folder, manifest, args.cache, classes, args.quick)
    rows += cross_set_gpu_rows(sets, args.cache, classes)
    if wanted is None or "shared" in wanted:
        rows += shared_rows(classes, args.quick)
    for cls in CLASSES:  # a class without a computed step row says what it needs
        if cls in classes and not any(r["class"] == cls and r["status"] == "computed"
                                      and r["unit"] == "step" for r in rows):
            names = ", ".join(s[0] for s in sets) or "none"
            shared = "; shared data" if wanted is None or "shared" in wanted else ""
            rows.append(missing_row(cls, f"kept sets: {names}{shared}",
                                    "needs " + NEEDS.get(cls, "data")))
    order = list(CLASSES)
    rows.sort(key=lambda r: order.index(r["class"]))
    stored = sorted(stored_rows(classes), key=lambda r: order.index(r["class"]))
    secs = time.perf_counter() - t0
    cmd = "python benchmarks/fidelity.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": cmd.strip(), "seconds": secs, "git": git_state(),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    md = markdown(rows, stored, meta)
    print(md)
    doc = {"benchmark": "fidelity", **meta, "machine": machine(),
           "sets": {n: {"recorded": m.get("recorded"), "archive_sha256": m.get("archive_sha256")}
                    for n, _, m in sets},
           "targets": TARGETS, "peers": PEERS, "rows": rows, "stored": stored}
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.md is not None:
        args.md.write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
