"""``traincast calibrate``: fit cost models from measurements; ``calibrate comm`` fits the
collective communication model (:class:`traincast.costs.comm.CommModel`) on nccl-tests logs,
vTrain's all-reduce table or trace folders, prints its parameters and in-sample error and
writes it as JSON (``--out``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from traincast.cli.options import Format, FormatOpt
from traincast.cli.output import say
from traincast.util.fileio import atomic_write, refuse_inputs

calibrate_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                            help="Fit cost models from measurements.")


class CommKind(str, Enum):
    sigmoid = "sigmoid"
    alpha_beta = "alpha_beta"


@calibrate_app.command("comm")
def calibrate_comm(
    sources: Annotated[list[Path], typer.Argument(
        metavar="SOURCE", help="nccl-tests output logs, the vTrain all-reduce table (.csv), or trace folders.")],
    out: Annotated[Path | None, typer.Option(help="Write the fitted model (JSON).")] = None,
    kind: Annotated[CommKind, typer.Option(help="Bus-bandwidth curve.")] = CommKind.sigmoid,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node of the system.")
                             ] = None,
    intra_gbps: Annotated[float | None, typer.Option(
        help="Nominal intra-node link in Gb/s (gigabits, as links are rated) per GPU per "
             "direction; the tables report busbw in GB/s (gigabytes).")] = None,
    inter_gbps: Annotated[float | None, typer.Option(
        help="Nominal inter-node link in Gb/s (gigabits) per GPU per direction.")] = None,
    gpu: Annotated[str | None, typer.Option(
        help="Keep the measurements of this GPU (tables holding several, like vTrain's).")
    ] = None,
    format: FormatOpt = Format.table,
) -> None:
    """Fit the collective communication model (latency + bus-bandwidth curve per collective)
    and print its parameters and fit error."""
    # deferred, as in every command: `traincast --help` starts without scipy and pandas
    from traincast.costs.comm.calibrate import calibrate_comm as fit_comm
    from traincast.report.tables import render_tables  # deferred too: pandas, rich

    refuse_inputs([out], sources)
    fitted = fit_comm(sources, kind=kind.value, gpus_per_node=gpus_per_node,
                      intra_gbps=intra_gbps, inter_gbps=inter_gbps, gpu=gpu)
    if format is Format.json:
        import orjson  # lazy, as the other imports of this command

        from traincast.report.tables import tables_to_json  # lazy: pandas, rich

        doc = {"comm_model": tables_to_json({"m": fitted.model.describe()})["m"],
               "measurements": len(fitted.samples), "mape_pct": 100 * fitted.mape,
               "model_out": None if out is None else str(out)}
        if out is not None:
            atomic_write(out, fitted.model.to_json().encode(), inputs=sources)
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return
    render_tables({"comm_model": fitted.model.describe()})
    say(f"fit on {len(fitted.samples)} measurements: MAPE {100 * fitted.mape:.2f}% "
        f"(in-sample; benchmarks/comm_model_accuracy.py measures held-out error)")
    if out is not None:
        atomic_write(out, fitted.model.to_json().encode(), inputs=sources)
        typer.echo(f"model: {out}")
