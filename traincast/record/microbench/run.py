"""The benchmark runner: :func:`run_bench` measures families into a folder, resuming."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from traincast.costs.kernel_families import FAMILIES
from traincast.errors import ParameterError
from traincast.record.microbench.overheads import measure_overheads
from traincast.record.microbench.points import _key, family_points
from traincast.record.microbench.store import (
    OVERHEADS_SCHEMA,
    SCHEMA,
    _now,
    _repair_tail,
    _write_json,
    read_points,
)
from traincast.record.microbench.timing import (
    COLD,
    DEVICES,
    BenchSetupError,
    _build,
    _import_torch,
    _resolve_device,
    _stats,
    _Timer,
    cold_how,
    cold_prep,
)

#: points measured together: each pass visits every point of the chunk once, so a burst of
#: load from other processes spreads over many points instead of spoiling one
_CHUNK = 8


@dataclass
class BenchResult:
    """What :func:`run_bench` did: points measured and skipped (already in the folder) per
    family, the folder, and the wall time in seconds."""

    out_dir: Path
    measured: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    overheads: dict[str, Any] | None = None


def run_bench(out_dir: str | Path, *, device: str = "cpu",
              families: Iterable[str] | None = None, quick: bool = False,
              repeats: int | None = None, warmup: int | None = None, threads: int = 1,
              points: int | None = None, seed: int = 0, max_seconds: float | None = None,
              min_sample_ns: float | None = None, passes: int | None = None,
              overheads: bool = True,
              progress: bool = True) -> BenchResult:
    """Measure ``families`` (all by default) on ``device`` into ``out_dir`` (created).

    ``points`` per family (default: the family's full count, 6 with ``quick``);
    ``repeats`` samples per point (15, quick 5), split over ``passes`` visits (3, quick 1),
    each after ``warmup`` calls (3, quick 1);
    ``max_seconds`` bounds the time spent per family (the rest is measured by a later run);
    ``threads`` for ``torch.set_num_threads``. Resumes: points already in ``out_dir`` are
    skipped. See the module docstring for the files.

    Raises:
        ParameterError: unknown family or device, bad counts.
        BenchSetupError: no torch, device absent, or ``out_dir`` holds another setup's data.
    """
    names = list(FAMILIES) if families is None else list(families)
    bad = [f for f in names if f not in FAMILIES]
    if bad:
        raise ParameterError(f"unknown kernel family {bad[0]!r}; known: {', '.join(FAMILIES)}")
    if device not in DEVICES:
        raise ParameterError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    repeats = repeats if repeats is not None else (5 if quick else 15)
    warmup = warmup if warmup is not None else (1 if quick else 3)
    passes = passes if passes is not None else (1 if quick else 3)
    if repeats < 1 or warmup < 0 or threads < 1 or passes < 1 or \
            (points is not None and points < 1):
        raise ParameterError("--repeats, --threads, --passes and --points must be >= 1, "
                             "--warmup >= 0")
    if min_sample_ns is None:
        min_sample_ns = 50_000 if quick else 200_000
    torch = _import_torch()
    dev, dev_name = _resolve_device(torch, device)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ParameterError(f"--out {out}: cannot create folder: {exc.strerror}") from None
    meta_path = out / "meta.json"
    meta: dict[str, Any] = {}
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        for k, v in (("device", device), ("torch", torch.__version__), ("threads", threads)):
            if k in meta and meta[k] != v:
                raise BenchSetupError(f"{out} holds measurements with {k}={meta[k]}, this run "
                                      f"has {k}={v}: use another --out folder")
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    meta.update({"schema": SCHEMA, "device": device, "device_name": dev_name,
                 "torch": torch.__version__, "threads": threads,
                 "python": sys.version.split()[0], "platform": platform.platform(),
                 "updated": _now(), "seed": seed, "quick": quick, "pid": os.getpid()})
    meta.setdefault("created", meta["updated"])
    _write_json(meta_path, meta)

    res = BenchResult(out)
    t_start = time.perf_counter()
    todo: list[tuple[str, list[tuple[dict[str, Any], str]]]] = []
    for name in names:
        done = {r.get("key") for r in read_points(out / f"{name}.jsonl")}
        pts = family_points(name, quick=quick, n=points, seed=seed, device=device)
        keyed = [(p, _key(name, p, device, torch.__version__, threads)) for p in pts]
        pending = [(p, k) for p, k in keyed if k not in done]
        res.skipped[name] = len(keyed) - len(pending)
        res.measured[name] = 0
        res.failed[name] = 0
        todo.append((name, pending))
    timer = _Timer(torch, dev.type == "cuda", warmup, repeats, min_sample_ns)
    preps: dict[str, Any] = {}  # cold preparations by kind, built once (a buffer of 2x LLC)

    def prep_for(name: str, direction: str, sizes: dict[str, int]) -> Any:
        how = cold_how(name, direction, sizes) if dev.type == "cpu" else None
        if how is None:
            return None
        if how not in preps:
            preps[how] = cold_prep(torch, how)
        return preps[how]
    per_pass = math.ceil(repeats / passes)
    total = sum(len(p) for _, p in todo)
    bar = _progress(progress, total)
    try:
        with bar:
            task = bar.add_task("microbench", total=total)
            for name, pending in todo:
                path = out / f"{name}.jsonl"
                _repair_tail(path)
                t_fam = time.perf_counter()
                directions = FAMILIES[name].directions
                for c0 in range(0, len(pending), _CHUNK):
                    chunk = pending[c0:c0 + _CHUNK]
                    if max_seconds is not None and time.perf_counter() - t_fam > max_seconds:
                        bar.update(task, advance=len(pending) - c0)
                        break
                    got: dict[str, dict[str, list[float]]] = {k: {} for _, k in chunk}
                    inner: dict[str, dict[str, int]] = {k: {} for _, k in chunk}
                    errors: dict[str, str] = {}
                    for _ in range(passes):
                        for p, key in chunk:
                            bar.update(task, description=f"{name} {p['op'] or ''}".strip())
                            if key in errors:
                                continue
                            try:
                                fns = _build(torch, name, p, dev, seed + p["index"])
                                for direction in directions:
                                    if direction in fns:
                                        smp, inn = timer.samples(
                                            fns[direction], per_pass,
                                            prep_for(name, direction, p["sizes"]),
                                            fns.get(f"{direction}_code"))
                                        got[key].setdefault(direction, []).extend(smp)
                                        inner[key][direction] = inn
                                del fns
                            except (RuntimeError, MemoryError) as exc:
                                errors[key] = (str(exc).splitlines() or [type(exc).__name__]
                                               )[0][:300]
                            bar.update(task, advance=1 / passes)
                    with open(path, "a") as fh:
                        for p, key in chunk:
                            rec = {"key": key, "family": name, "op": p["op"],
                                   "dtype": p["dtype"], "dist": p["dist"], "sizes": p["sizes"],
                                   "device": device, "device_name": dev_name,
                                   "torch": torch.__version__, "threads": threads,
                                   "passes": passes, "ts": _now()}
                            cold = {d: cold_how(name, d, p["sizes"]) for d in directions
                                    if (name, d) in COLD and dev.type == "cpu"}
                            if cold:
                                rec["cold"] = cold
                            if key in errors:
                                rec["error"] = errors[key]
                                res.failed[name] += 1
                            else:
                                for direction in directions:
                                    smp = got[key].get(direction)
                                    rec[direction] = (_stats(smp, inner[key][direction])
                                                      if smp else None)
                                res.measured[name] += 1
                            fh.write(json.dumps(rec, sort_keys=True) + "\n")
        if overheads:
            ov_path = out / "overheads.json"
            ov = None
            if ov_path.exists():
                try:
                    ov = json.loads(ov_path.read_text())
                except ValueError:
                    ov = None
            if not (isinstance(ov, dict) and ov.get("schema") == OVERHEADS_SCHEMA
                    and ov.get("torch") == torch.__version__ and ov.get("threads") == threads):
                ov = measure_overheads(device, threads=threads,
                                       iterations=500 if quick else 5000,
                                       repeats=5 if quick else 15)
                _write_json(ov_path, ov)
            res.overheads = ov
    finally:
        torch.set_num_threads(prev_threads)
    meta["points"] = {n: sum(1 for r in read_points(out / f"{n}.jsonl") if "error" not in r)
                      for n in sorted(set(names) | set(meta.get("points", {})))}
    meta["updated"] = _now()
    meta.pop("pid", None)
    _write_json(meta_path, meta)
    res.seconds = time.perf_counter() - t_start
    return res


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *a: Any, **k: Any) -> int:
        return 0

    def update(self, *a: Any, **k: Any) -> None:
        return None


def _progress(enabled: bool, total: int) -> Any:
    if not enabled or total == 0:
        return _NoBar()
    return Progress(TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=False)
