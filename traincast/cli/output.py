"""Output shared by the ``traincast`` commands that print analysis tables (``analyze``,
``diff``): loading with a progress bar on stderr, and the tables as a terminal table, JSON or
an HTML report (on stdout, or into ``--out``; HTML needs ``--out``)."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import typer

import traincast
from traincast.cli.collector import imports_uncollected
from traincast.cli.options import ReportFormat, parse_rank_map
from traincast.errors import ParameterError
from traincast.util.fileio import atomic_write


def say(text: str, err: bool = False) -> None:
    """``text`` wrapped at the terminal's width (``COLUMNS``, else the terminal, else 80) at
    spaces, continuation lines indented: a number or a path is never cut."""
    import shutil  # lazy, with the wrapper below: only the commands that print prose

    from traincast.report.wrap import wrap_prose  # lazy: as above

    width = shutil.get_terminal_size((80, 24)).columns
    typer.echo("\n".join(wrap_prose(text, width, indent="  ", first="")), err=err)


def _stderr_may_be_terminal() -> bool:
    """False when rich would certainly not see a terminal on stderr (not a tty, and neither
    ``FORCE_COLOR`` nor ``TTY_COMPATIBLE`` set), decided without importing rich."""
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one: rich says False too
        return False


def start_parse_ahead(trace_dir: Path, et_dir: Path | None, iteration_marker: str | None,
                      rank_map: list[str] | None, ingest: dict | None = None) -> bool:
    """Before a command's heavy imports: start the parse workers of the load it is about to
    make of ``trace_dir`` where that load would start them, or the read-ahead of its
    execution traces (:func:`traincast.trace.prestart.prestart`: the default executor and
    cache, a job not cached yet), so that work overlaps the imports; True when started.
    Never raises (a bad ``--rank-map`` is the load's to refuse)."""
    ingest = ingest or {}
    if ingest.get("executor") is not None or ingest.get("address") is not None:
        return False
    try:
        ranks = parse_rank_map(rank_map)
    except ParameterError:
        return False
    with imports_uncollected():  # the loader's own light modules, imported first
        # lazy: light (no Arrow, no readers), but only the loading commands need it
        from traincast.trace.prestart import prestart

        return prestart(trace_dir, iteration_marker=iteration_marker, rank_map=ranks,
                        workers=ingest.get("workers"), et_dir=et_dir)


def load_with_progress(trace_dir: Path, et_dir: Path | None, iteration_marker: str | None,
                       rank_map: list[str] | None, quiet: bool, ingest: dict | None = None):
    """:func:`traincast.load` with a transient progress bar on stderr unless ``quiet`` or
    stderr is not a terminal (where the bar would leave an empty line before the error line)."""
    ingest = ingest or {}
    quiet = quiet or not _stderr_may_be_terminal()
    if not quiet:
        # lazy: rich takes tens of ms, too slow for every CLI start (``--help`` included)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        console = Console(stderr=True)
        quiet = not console.is_terminal
    if quiet:
        return traincast.load(trace_dir, et_dir=et_dir, iteration_marker=iteration_marker,
                              rank_map=parse_rank_map(rank_map), **ingest)
    with Progress(TextColumn("loading traces"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), console=console,
                  transient=True) as bar:
        task = bar.add_task("", total=None)

        def tick(done: int, total: int, path: Path) -> None:
            bar.update(task, completed=done, total=total, description=path.name)

        return traincast.load(trace_dir, et_dir=et_dir, iteration_marker=iteration_marker,
                              rank_map=parse_rank_map(rank_map), progress=tick, **ingest)


def emit(tables: dict, fmt: ReportFormat, out: Path | None, title: str,
         inputs: Iterable[Path | None] = ()) -> None:
    """Print or write ``tables`` (name -> DataFrame) in ``fmt``; ``out`` must not be one of
    ``inputs`` (:func:`~traincast.util.fileio.refuse_inputs`)."""
    import orjson  # lazy: ~10 ms of import (CLI start-up time)

    # lazy (and below): the report modules load numpy, pandas, pyarrow and rich
    from traincast.report.tables import render_tables, tables_to_json

    if fmt is ReportFormat.html:
        if out is None:
            raise ParameterError("--format html needs --out FILE.html")
        from traincast.report.html import render_html  # lazy: CLI start-up

        atomic_write(out, render_html(tables, title=title).encode(), inputs=inputs)
        typer.echo(f"report: {out}")
        return
    if fmt is ReportFormat.json:
        from traincast.report.verdict import verdict_to_json  # lazy: CLI start-up

        data = orjson.dumps(verdict_to_json(tables_to_json(tables)), option=orjson.OPT_INDENT_2
                            | orjson.OPT_SERIALIZE_NUMPY)
        if out is not None:
            atomic_write(out, data, inputs=inputs)
        else:
            sys.stdout.write(data.decode() + "\n")
        return
    if out is not None:
        from rich.console import Console

        buf = io.StringIO()
        render_tables(tables, Console(file=buf, width=160, no_color=True))
        atomic_write(out, buf.getvalue().encode(), inputs=inputs)
        return
    render_tables(tables)
