"""``traincast calibrate``: fit cost models from measurements; ``calibrate comm`` fits the
collective communication model (:class:`traincast.costs.comm.CommModel`) on nccl-tests logs,
vTrain's all-reduce table or trace folders, prints its parameters and in-sample error and
writes it as JSON (``--out``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from traincast.errors import ParameterError

calibrate_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                            help="Fit cost models from measurements.")


class CommKind(str, Enum):
    sigmoid = "sigmoid"
    alpha_beta = "alpha_beta"


@calibrate_app.command("comm")
def calibrate_comm(
    sources: Annotated[list[Path], typer.Argument(
        help="nccl-tests output logs, the vTrain all-reduce table (.csv), or trace folders.")],
    out: Annotated[Path | None, typer.Option(help="Write the fitted model (JSON).")] = None,
    kind: Annotated[CommKind, typer.Option(help="Bus-bandwidth curve.")] = CommKind.sigmoid,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node of the system.")
                             ] = None,
    intra_gbps: Annotated[float | None, typer.Option(
        help="Nominal intra-node link, Gb/s per GPU per direction.")] = None,
    inter_gbps: Annotated[float | None, typer.Option(
        help="Nominal inter-node link, Gb/s per GPU per direction.")] = None,
    gpu: Annotated[str | None, typer.Option(
        help="Keep the measurements of this GPU (tables holding several, like vTrain's).")
    ] = None,
) -> None:
    """Fit the collective communication model (latency + bus-bandwidth curve per collective)
    and print its parameters and fit error."""
    import numpy as np
    import pandas as pd

    from traincast.costs.comm import CommModel, samples_from_trace
    from traincast.costs.nccl_tests import read_nccl_tests_log, read_vtrain_lut
    from traincast.report.tables import render_tables
    from traincast.util.fileio import atomic_write

    frames = []
    for src in sources:
        if src.is_dir():
            import traincast

            frames.append(samples_from_trace(traincast.load(src)))
        elif src.suffix == ".csv":
            lut = read_vtrain_lut(src)
            frames.append(lut)
        else:
            frames.append(read_nccl_tests_log(src))
    frames = [f for f in frames if len(f)]
    if not frames:
        names = ", ".join(str(s) for s in sources)
        raise ParameterError(f"{names}: no collective measurement found (trace folders need "
                             "the collectives of at least 2 ranks, matched across ranks)")
    samples = pd.concat(frames, ignore_index=True)
    if "gpu" in samples.columns:
        gpus = sorted(samples["gpu"].dropna().astype(str).unique())
        if gpu is not None:
            samples = samples[samples["gpu"].astype(str).str.lower() == gpu.lower()]
            if samples.empty:
                raise ParameterError(f"--gpu {gpu}: the measurements have {', '.join(gpus)}")
        elif len(gpus) > 1:
            raise ParameterError(f"the measurements mix GPUs ({', '.join(gpus)}): choose one "
                                 "with --gpu")
    cols = ["collective", "size_bytes", "group_size", "time_ns"]
    missing = [c for c in cols if c not in samples.columns]
    if missing:
        raise ParameterError(f"measurements lack columns {missing}")
    model = CommModel.fit(samples, kind=kind.value, gpus_per_node=gpus_per_node,
                          intra_gbps=intra_gbps, inter_gbps=inter_gbps)
    pred = model.predict_frame(samples)
    ape = np.abs(pred - samples["time_ns"].to_numpy(float)) / samples["time_ns"].to_numpy(float)
    render_tables({"comm_model": model.describe()})
    typer.echo(f"fit on {len(samples)} measurements: MAPE {100 * np.mean(ape):.2f}% "
               f"(in-sample; benchmarks/comm_model_accuracy.py measures held-out error)")
    if out is not None:
        atomic_write(out, model.to_json().encode())
        typer.echo(f"model: {out}")
