"""``traincast record [OPTIONS] -- COMMAND ...``: run an unmodified training command under
:func:`traincast.record.run.record_command`, then print the verdict of ``traincast analyze``
on the folder it wrote.

Exit codes: 0 recorded; the command's own code when it failed (a one-line message says so);
130 when interrupted (Ctrl-C, SIGTERM); 1 when nothing was
recorded or the analysis failed; 2 bad options.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path
from typing import Annotated

import typer

from traincast.cli.analyze import analyze
from traincast.errors import TraincastError

#: click settings: everything after the first word of the command belongs to the command
CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": False}


_UNIT = re.compile(r"(?<=\d) (?=(?:ms|s|steps?)\b)")


def _say(text: str, err: bool = False) -> None:
    """``text`` wrapped at the terminal's width between words (a number is never cut), the
    continuation lines indented."""
    width = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
    glued = _UNIT.sub("\u00a0", text)  # a number stays on its unit's line
    typer.echo(textwrap.fill(glued, width, subsequent_indent="  ", break_long_words=False,
                             break_on_hyphens=False).replace("\u00a0", " "), err=err)


def record(
    command: Annotated[list[str], typer.Argument(
        help="The training command and its arguments, after `--`: python train.py ... or "
             "torchrun --nproc-per-node N train.py ...", show_default=False, metavar="COMMAND")],
    out: Annotated[Path, typer.Option(help="Folder for the traces and the run manifest.")] = Path(
        "traincast-record"),
    skip: Annotated[int, typer.Option(
        help="Steps run untouched first (start-up, allocator and autotuning warm-up).")] = 2,
    unprofiled: Annotated[int, typer.Option(
        help="Steps then timed without any profiler (the manifest's unprofiled_step_ns).")] = 5,
    wait: Annotated[int, typer.Option(help="Profiler schedule: steps waited.")] = 1,
    warmup: Annotated[int, typer.Option(help="Profiler schedule: warm-up steps.")] = 1,
    active: Annotated[int, typer.Option(
        help="Profiler schedule: recorded steps (Kineto trace and execution trace).")] = 3,
    batch_size: Annotated[int | None, typer.Option(
        help="Per-rank batch size, written to the manifest (batch what-ifs read it; default: "
             "unknown, read from the trace's first ops).", show_default=False)] = None,
    step_marker: Annotated[str, typer.Option(
        help="What ends a step: optimizer (each step() of the first torch.optim optimizer "
             "that steps) or call (each traincast.record.step() call in the script).")
    ] = "optimizer",
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an earlier recording in --out.")] = False,
    no_analyze: Annotated[bool, typer.Option(
        "--no-analyze", help="Do not print the verdict of `traincast analyze` at the end.")
    ] = False,
) -> None:
    """Run an unmodified PyTorch training command and record it (profiler schedule,
    execution trace, unprofiled steps, run manifest), then print the verdict of analyze.

    Example: traincast record -- torchrun --nproc-per-node 2 examples/train_ddp.py"""
    # lazy: the recorder (subprocess, statistics, sockets) is for this command alone
    from traincast.record.run import MARKERS, record_command

    if step_marker not in MARKERS:
        raise typer.BadParameter(f"one of {', '.join(MARKERS)}", param_hint="--step-marker")
    res = record_command(command, out, skip=skip, unprofiled=unprofiled, wait=wait,
                         warmup=warmup, active=active, batch_size=batch_size,
                         marker=step_marker, overwrite=overwrite,
                         echo=_say)
    for line in res.messages:
        _say(f"traincast: {line}", err=True)
    if res.manifest is not None:
        m = res.manifest
        ns = m.get("unprofiled_step_ns")
        n = max((len(v) for v in m["unprofiled_steps_ns"].values()), default=0)
        timed = (f"unprofiled step {ns / 1e6:.3f} ms (median of {n} steps"
                 f"{', over ranks' if len(m['ranks']) > 1 else ''})" if ns
                 else "no unprofiled step")
        state = "complete" if m["complete"] else f"partial: {m['partial']}"
        _say(f"traincast: {len(res.traces)} of {m['world_size']} rank(s) traced into "
             f"{out}/, {timed}; {state}")
    code = res.exit_code
    if code < 0:  # killed by a signal: the shell's convention
        code = 128 - code
    if res.interrupted:  # whatever the command made of the signal (torchrun: 1)
        code = 130
    if code:
        why = "interrupted" if res.interrupted else f"the command exited with code {code}"
        _say(f"traincast: {why}", err=True)
    if res.traces and not no_analyze:
        typer.echo("")
        try:
            analyze(out)
        except TraincastError as exc:
            _say(f"traincast: the folder was written but analyze failed: {exc}",
                 err=True)
            code = code or 1
    elif not res.traces:
        code = code or 1
    if code:
        raise typer.Exit(code)
