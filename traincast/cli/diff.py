"""``traincast diff``: two runs (or a run and its replay) compared op by op with
:func:`traincast.analysis.diff.trace_diff`; tables as ``analyze`` prints them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import traincast
from traincast.cli.options import ReportFormat, ReportFormatOpt
from traincast.cli.output import emit
from traincast.errors import ParameterError
from traincast.util.fileio import refuse_inputs


def diff(
    a: Annotated[Path, typer.Argument(help="Baseline traces (folder or file).")],
    b: Annotated[Path | None, typer.Argument(
        help="Traces to compare (folder or file); omit with --vs-predicted.")] = None,
    format: ReportFormatOpt = ReportFormat.table,
    out: Annotated[Path | None, typer.Option(help="Write to this file.")] = None,
    by: Annotated[str, typer.Option(help="Compare ops by name or op_family.")] = "name",
    vs_predicted: Annotated[bool, typer.Option(
        help="Compare A with its own replay (measured vs predicted).")] = False,
) -> None:
    """Diff two runs: ops that got slower/faster, appeared or vanished, and the step change."""
    # lazy: the analyses load numpy/pandas/pyarrow/scipy (CLI start-up time)
    from traincast.analysis.diff import trace_diff

    if (b is None) == (not vs_predicted):
        raise ParameterError("give a second trace folder B, or --vs-predicted (not both)")
    refuse_inputs([out], [a, b])
    ta = traincast.load(a)
    tb = traincast.predict(ta).timeline if vs_predicted else traincast.load(b)
    tables = trace_diff(ta, tb, by=by)
    emit(tables, format, out, f"traincast diff: {a} vs {b}", [a, b])
