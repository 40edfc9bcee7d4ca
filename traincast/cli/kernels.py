"""``traincast bench`` and ``traincast fit``: kernel microbenchmarks and fitted kernel models.

``bench`` runs :func:`traincast.record.microbench.run_bench` (needs torch); ``fit`` fits
:class:`traincast.costs.kernel_models.KernelModels` on its output (numpy/scikit-learn only).
Bad input raises a :class:`~traincast.errors.TraincastError` (one line, exit code 2).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from traincast.cli.options import Format, FormatOpt
from traincast.errors import ParameterError
from traincast.util.fileio import atomic_write


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    rocm = "rocm"


class Stat(str, Enum):
    median = "median"
    min = "min"
    q1 = "q1"
    mean = "mean"


def _names(families: str | None) -> list[str] | None:
    if families is None:
        return None
    from traincast.costs.kernel_families import family  # lazy: numpy (CLI start-up time)

    names = [f.strip() for f in families.split(",") if f.strip()]
    if not names:
        raise ParameterError("--families: give a comma-separated list of families")
    for n in names:
        family(n)
    return names


def bench(
    out: Annotated[Path, typer.Option("--out", help="Output folder (created; re-running "
                                                    "resumes, skipping measured points).")],
    device: Annotated[Device, typer.Option(help="Device to measure.")] = Device.cpu,
    families: Annotated[str | None, typer.Option(
        help="Comma-separated families (default: all): gemm, conv2d, embedding_bag, "
             "elementwise, reduction, layer_norm, softmax, attention, movement, memcpy, "
             "optimizer, update, sparse_update.")] = None,
    quick: Annotated[bool, typer.Option(help="A small grid of small sizes (for tests).")
                     ] = False,
    repeats: Annotated[int | None, typer.Option(
        help="Timed samples per point and direction (default 15, quick 5).")] = None,
    warmup: Annotated[int | None, typer.Option(help="Untimed calls before each pass "
                                                    "(default 3, quick 1).")] = None,
    passes: Annotated[int | None, typer.Option(
        help="Visits of each point, interleaved with other points (default 3, quick 1).")
    ] = None,
    points: Annotated[int | None, typer.Option(help="Points per family (default: the "
                                                    "family's count; quick 6).")] = None,
    threads: Annotated[int, typer.Option(help="torch.set_num_threads for the CPU.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the size sampling.")] = 0,
    max_seconds: Annotated[float | None, typer.Option(
        help="Time budget per family, s (the rest is measured by a later run).")] = None,
    overheads: Annotated[bool, typer.Option(help="Measure host overheads "
                                                 "(overheads.json).")] = True,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    collective_ranks: Annotated[int, typer.Option(
        help="Also time all_reduce on this many local ranks (gloo on CPU, NCCL on CUDA): "
             "traces in OUT/collectives, the fitted communication model in OUT/comm.json "
             "(0: skip).")] = 0,
    format: FormatOpt = Format.table,
) -> None:
    """Run kernel microbenchmarks (ns per call, median and spread of repeats) into OUT as
    <family>.jsonl, with meta.json and overheads.json."""
    from traincast.record.microbench import run_bench  # lazy (and below): torch, numpy

    if collective_ranks == 1 or collective_ranks < 0:
        raise ParameterError(f"--collective-ranks must be 0 or >= 2, got {collective_ranks}")

    res = run_bench(out, device=device.value, families=_names(families), quick=quick,
                    repeats=repeats, warmup=warmup, passes=passes, points=points,
                    threads=threads, seed=seed, max_seconds=max_seconds, overheads=overheads,
                    progress=progress and sys.stderr.isatty())
    rows = [{"family": f, "measured": res.measured[f], "skipped": res.skipped[f],
             "failed": res.failed[f]} for f in res.measured]
    comm_note = None
    if collective_ranks:
        from traincast.record.comm_bench import (  # lazy: torch, numpy, scipy
            fit_comm_model,
            measure_corun,
            record_collectives,
        )

        sizes = (4096, 65536, 1 << 20, 1 << 23) if quick else None
        kw = {"sizes": sizes, "iters": 2} if quick else {}
        cdir = record_collectives(out / "collectives", world=collective_ranks,
                                  threads=threads, device=device.value, **kw)
        model = fit_comm_model(cdir)
        atomic_write(out / "comm.json", model.to_json().encode())
        corun = measure_corun(collective_ranks, seconds=0.5 if quick else 2.0, threads=threads)
        atomic_write(out / "corun.json", json.dumps(corun, indent=1).encode())
        comm_note = (f"all_reduce on {collective_ranks} ranks: {cdir}, model {out / 'comm.json'}"
                     f"; ranks together compute x{corun['compute_slowdown']:.2f} slower "
                     f"({out / 'corun.json'})")
    if format is Format.json:
        sys.stdout.write(json.dumps({"out": str(out), "seconds": round(res.seconds, 2),
                                     "families": rows, "collectives": comm_note},
                                    indent=2) + "\n")
        return
    _table("traincast bench", ["family", "measured", "skipped", "failed"], rows)
    ov = res.overheads or {}
    for k in ("dispatch_tiny_op", "T1_between_ops", "T4_launch"):
        v = (ov.get(k) or {}).get("median_ns")
        if v is not None:
            typer.echo(f"{k}: {v:,.0f} ns")
    typer.echo(f"{sum(res.measured.values())} points measured in {res.seconds:.1f} s -> {out}")
    if comm_note:
        typer.echo(comm_note)


def fit(
    bench_dir: Annotated[Path, typer.Argument(help="Folder written by `traincast bench`.")],
    out: Annotated[Path, typer.Option("--out", help="Models folder (created).")],
    families: Annotated[str | None, typer.Option(help="Comma-separated families "
                                                      "(default: all measured).")] = None,
    stat: Annotated[Stat, typer.Option(
        help="Per-point statistic of the repeats to fit: min (default: the least disturbed "
             "by other processes), median, q1 or mean.")] = Stat.min,
    test_fraction: Annotated[float, typer.Option(help="Random held-out share.")] = 0.2,
    seed: Annotated[int, typer.Option(help="Seed of the held-out split and the fits.")] = 0,
    kinds: Annotated[str | None, typer.Option(
        help="Comma-separated candidate kinds: roofline, roofline+gbdt, roofline+mlp "
             "(default: roofline, roofline+gbdt).")] = None,
    format: FormatOpt = Format.table,
) -> None:
    """Fit one kernel model per family and direction; print and save (summary.json) the
    held-out GMAE = exp(mean |ln(pred/measured)|) - 1."""
    # lazy: numpy, scikit-learn (CLI start-up time)
    from traincast.costs.kernel_models import (
        DEFAULT_KINDS,
        MIN_HELDOUT_POINTS,
        KernelModels,
        load_measurements,
    )

    data = load_measurements(bench_dir, _names(families), stat=stat.value)
    source: dict[str, Any] = {"bench_dir": str(bench_dir), "stat": stat.value}
    try:
        meta = json.loads((bench_dir / "meta.json").read_text())
        source.update({k: meta.get(k) for k in ("device", "device_name", "torch", "threads")})
    except (OSError, ValueError):
        pass
    kind_list = tuple(k.strip() for k in kinds.split(",")) if kinds else DEFAULT_KINDS
    models = KernelModels.fit(data, test_fraction=test_fraction, seed=seed, kinds=kind_list,
                              source=source)
    # the files fit reads: the measurements and meta.json (not a models.json of an earlier fit)
    models.save(out, inputs=[*bench_dir.glob("*.jsonl"), bench_dir / "meta.json"])
    if format is Format.json:
        sys.stdout.write(json.dumps({"out": str(out), "models": models.summary}, indent=2)
                         + "\n")
        return
    rows = []
    for r in models.summary:
        ho = r.get("heldout_gmae")
        rows.append({"family": r["family"], "dir": r["direction"],
                     "points": r["n_points"], "kind": r["kind"],
                     "GMAE %": "n/a" if ho is None else round(100 * ho, 1),
                     "noise %": None if r.get("noise_rel_mad") is None
                     else round(100 * r["noise_rel_mad"], 1),
                     "<=10%": "-" if ho is None else ("yes" if ho <= 0.10 else "no")})
    _table("kernel models (held-out GMAE)", list(rows[0]), rows)
    few = [r for r in models.summary if r.get("heldout_gmae") is None]
    if few:
        typer.echo(f"GMAE n/a: {len(few)} of {len(rows)} families have fewer than "
                   f"{MIN_HELDOUT_POINTS} points, too few to hold any out: they get the roofline "
                   "model fitted on all their points and no measured error (run `traincast "
                   "bench` without --quick for more points)")
    typer.echo(f"models: {out}")


def _table(title: str, cols: list[str], rows: list[dict[str, Any]]) -> None:
    from rich.console import Console  # lazy: rich takes tens of ms (CLI start-up time)
    from rich.table import Table

    t = Table(title=title)
    for c in cols:  # short headers, no wrapping: nothing cut at 80 columns
        t.add_column(c, justify="left" if c in ("family", "dir", "direction", "kind")
                     else "right", no_wrap=True)
    for r in rows:
        t.add_row(*["" if r.get(c) is None else str(r.get(c)) for c in cols])
    Console().print(t)
