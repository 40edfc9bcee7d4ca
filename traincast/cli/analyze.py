"""``traincast analyze``: the verdict of a run (step, where it goes, top opportunities) and the
analysis tables (:func:`traincast.analyze`), whole job or rank by rank
(:func:`traincast.analysis.per_rank.analyze_per_rank`; the default choice is
:func:`~traincast.analysis.per_rank.per_rank_by_default`). Output as
:func:`traincast.cli.output.emit` writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import traincast
from traincast.cli.collector import import_uncollected, release_startup_pages
from traincast.cli.options import (
    AddressOpt,
    EtDirOpt,
    ExecutorOpt,
    ReportFormat,
    ReportFormatOpt,
    StrictOpt,
    WorkersOpt,
    ingest_options,
    parse_rank_map,
)
from traincast.cli.output import emit, load_with_progress, start_parse_ahead
from traincast.cli.predict import check_strict
from traincast.errors import ParameterError
from traincast.util.fileio import refuse_inputs


def analyze(
    trace_dir: Annotated[Path, typer.Argument(help="Folder of profiler traces, one per rank.")],
    what: Annotated[str | None, typer.Option(
        help="Comma-separated: breakdown, idle, kernels, collectives, critical_path, "
             "stragglers, prediction: only these tables, no verdict. Default: the verdict "
             "(the step, where it goes, the opportunities simulated); with --all every table "
             "after it; json and html always hold every table.")] = None,
    format: ReportFormatOpt = ReportFormat.table,
    out: Annotated[Path | None, typer.Option(help="Write to this file (html needs it).")
                   ] = None,
    et_dir: EtDirOpt = None,
    iteration_marker: Annotated[str | None, typer.Option(
        help="Annotation name or regex delimiting steps.")] = None,
    rank_map: Annotated[list[str] | None, typer.Option(metavar="FILE=RANK",
                                                       help="FILE=RANK (repeatable).")
                        ] = None,
    critical_path_out: Annotated[Path | None, typer.Option(
        help="Write the predicted timeline with the critical path highlighted "
             "(Chrome trace for Perfetto).")] = None,
    per_rank: Annotated[bool | None, typer.Option(
        "--per-rank/--whole-job",
        help="--per-rank: rank-local analyses only (breakdown, kernels), one rank's trace in "
             "memory at a time per worker (ranks in parallel on the local process pool for "
             "large jobs, or with --executor process|ray). Default: per rank when only "
             "rank-local analyses are asked for and the traces hold more than 256 MiB of "
             "text, else the whole job.")] = None,
    executor: ExecutorOpt = None,
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    strict: StrictOpt = False,
    show_all: Annotated[bool, typer.Option(
        "--all", help="After the verdict, every analysis table (terminal).")] = False,
) -> None:
    """Multi-rank analyses of a run: first the verdict (the step, where it goes, the top
    opportunities simulated with --what-if), then, with --all or --what, the tables of
    breakdown, idle causes, kernels, collectives, critical path, stragglers, measured vs
    predicted."""
    # the libraries of the run, imported before it starts and uncollected
    # (traincast.cli.collector): the analyses load numpy, pandas, pyarrow and rich, too
    # slow for every CLI start (``--help`` included)
    want_verdict = what is None
    terminal_verdict = want_verdict and format is ReportFormat.table and out is None
    # the verdict alone on the terminal: only the analyses it reads, as numpy columns (no
    # table is printed, no pandas imported: predict/verdict_tables)
    verdict_only = terminal_verdict and not show_all and per_rank is not True
    ingest = ingest_options(executor, workers, address)
    # the whole job is loaded: a large uncached job's parse workers start now, their
    # start-up beside the imports below
    if per_rank is False or (per_rank is None and want_verdict):
        start_parse_ahead(trace_dir, et_dir, iteration_marker, rank_map, ingest)
    import_uncollected(
        "traincast.trace.load",
        *(["traincast.predict.verdict_tables"] if verdict_only else
          ["traincast.analysis.per_rank", "traincast.analysis.run"]),
        *(["traincast.predict.prediction"] if want_verdict or critical_path_out else []),
        *(["traincast.predict.verdict"] if want_verdict else []),
        *(["traincast.report.verdict"] if terminal_verdict else ["traincast.report.tables"]))

    inputs = [trace_dir, et_dir]
    refuse_inputs([out, critical_path_out], inputs)
    if per_rank is None and what is not None:  # the verdict (no --what) reads the whole job
        # lazy (here and below): as above
        from traincast.analysis.per_rank import per_rank_by_default

        per_rank = per_rank_by_default(trace_dir, what,
                                       et_dir is None and critical_path_out is None)
    if per_rank:
        from traincast.analysis.per_rank import analyze_per_rank  # lazy: as above

        if et_dir is not None or critical_path_out is not None:
            raise ParameterError("--per-rank runs rank-local analyses only: --et-dir and "
                                 "--critical-path-out need the whole job")
        tables = analyze_per_rank(trace_dir, what, executor=ingest["executor"],
                                  workers=workers, address=address,
                                  iteration_marker=iteration_marker,
                                  rank_map=parse_rank_map(rank_map))
        emit(tables, format, out, f"traincast analyze --per-rank: {trace_dir}", inputs)
        return
    ts = load_with_progress(trace_dir, et_dir, iteration_marker, rank_map,
                            quiet=format is not ReportFormat.table, ingest=ingest)
    check_strict(ts, strict)
    # the ET link columns (read by the load only) and the start-up's code pages, freed
    # before the replay's and the analyses' peaks
    from traincast.trace.traceset import drop_link_columns  # lazy: CLI start-up (pyarrow)
    from traincast.util.allocator import release_memory  # lazy: as above

    if drop_link_columns(ts):
        release_memory()  # Arrow's pool keeps freed buffers until asked
    release_startup_pages(ts.events.num_rows)
    # the replay is computed once, and only when an output needs it (analyze() computes it
    # for critical_path/prediction and lends it to idle); the verdict (no --what) needs it
    pred = traincast.predict(ts) if critical_path_out is not None or want_verdict else None
    if pred is not None:  # the replay's own start-up pages (its kernels' loads), likewise
        release_startup_pages(ts.events.num_rows)
    if verdict_only:
        from traincast.predict.verdict import verdict_rows  # lazy: CLI start-up (numpy)
        from traincast.predict.verdict_tables import verdict_tables  # lazy: as above

        rows = verdict_rows(ts, verdict_tables(ts, pred), pred, str(trace_dir))
    elif want_verdict:
        from traincast.predict.verdict import verdict  # lazy: CLI start-up (numpy, pandas)

        tables = traincast.analyze(ts, what, prediction=pred)
        tables = {**verdict(ts, tables, pred, str(trace_dir)), **tables}
        if format is ReportFormat.html:  # the Gantt of one step (a chart, not a terminal table)
            from traincast.analysis.timeline import step_timeline  # lazy: CLI start-up

            tables["timeline"] = step_timeline(pred)
    else:
        tables = traincast.analyze(ts, what, prediction=pred)
    if critical_path_out is not None:
        from traincast.analysis.critical_path import critical_path  # lazy: CLI start-up
        from traincast.export.chrome_path import write_critical_path_trace  # lazy: ditto

        write_critical_path_trace(critical_path_out, pred, critical_path(pred))
    if terminal_verdict:
        from traincast.report.verdict import render_verdict  # lazy: CLI start-up (rich)

        render_verdict(rows if verdict_only else tables)
        if verdict_only:
            typer.echo("(the analyses' tables: --all, or --what NAMES)")
            return
        tables = {k: v for k, v in tables.items() if k not in ("verdict", "opportunities")}
    emit(tables, format, out, f"traincast analyze: {trace_dir}", inputs)
