"""``traincast demo``: record a real multi-rank DDP run on CPU (gloo, needs torch) with
:func:`traincast.record.record_demo`, then predict it as ``traincast predict`` does; the
predicted timeline goes to ``OUT/predicted/timeline.json.gz``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traincast.cli.options import Format, FormatOpt
from traincast.cli.predict import predict_traces


def demo(
    out: Annotated[Path, typer.Option(help="Folder for the recorded traces.")] = Path(
        "traincast-demo"),
    world_size: Annotated[int, typer.Option(help="Processes (ranks).")] = 2,
    steps: Annotated[int, typer.Option(help="Profiled steps.")] = 3,
    warmup: Annotated[int, typer.Option(help="Warm-up steps before profiling.")] = 3,
    model: Annotated[str, typer.Option(help="transformer or mlp.")] = "transformer",
    format: FormatOpt = Format.table,
) -> None:
    """Record a real 2-rank DDP training run on CPU (gloo), then predict it."""
    from traincast.record import record_demo  # lazy: torch, seconds to import

    if format is Format.table:
        typer.echo(f"recording {world_size} ranks x {steps} profiled steps of a {model} "
                   f"(DDP, gloo, CPU) into {out}/ ...")
    record_demo(out, world_size=world_size, warmup=warmup, active=steps, model=model)
    # the timeline goes into a subfolder: trace folders hold only the ranks' traces, so the
    # folder can be predicted and analysed again as it is
    (out / "predicted").mkdir(exist_ok=True)
    predict_traces(out, None, format, out / "predicted" / "timeline.json.gz", None, None, False)
