"""The ``traincast`` command.

Exit codes: 0 success, 2 bad input or usage (one line on stderr naming the file and the
problem, no traceback), 1 an internal error.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from traincast.cli_options import AddressOpt, Executor, ExecutorOpt, Format, FormatOpt, WorkersOpt
from traincast.errors import ParameterError, TraincastError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Execution traces of (distributed) ML training -> analyses and a "
                       "calibrated performance model.")


def _print_version(value: bool) -> None:
    if value:
        import traincast

        typer.echo(traincast.__version__)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True,
                                       callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    """Execution traces of (distributed) ML training -> analyses and a calibrated
    performance model."""


class ReportFormat(str, Enum):
    table = "table"
    json = "json"
    html = "html"


def _rank_map(items: list[str] | None) -> dict[str, int] | None:
    if not items:
        return None
    out = {}
    for it in items:
        name, sep, rank = it.rpartition("=")
        if not sep or not rank.isdigit():
            raise ParameterError(f"--rank-map expects FILE=RANK, got {it!r}")
        out[name] = int(rank)
    return out


def _ingest(executor: Executor | None, workers: int | None, address: str | None) -> dict:
    if address is not None and executor is not Executor.ray:
        raise ParameterError("--address is for --executor ray")
    return {"executor": executor.value if executor is not None else None,
            "workers": workers, "address": address}


StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="Refuse traces whose ranks disagree on a collective's size (default: "
                     "a warning, and each rank replayed with its own size).")]


def _check_strict(ts: Any, strict: bool) -> None:
    if strict:
        from traincast.graph.collectives import match_collectives

        match_collectives(ts, strict=True)


def _predict(trace_dir: Path, et_dir: Path | None, fmt: Format, timeline_out: Path | None,
             iteration_marker: str | None, rank_map: list[str] | None, exact: bool,
             what_if: list[str] | None = None, comm_model: Path | None = None,
             ingest: dict | None = None, strict: bool = False) -> None:
    import orjson

    import traincast
    from traincast.export.chrome import write_chrome_trace

    ts = traincast.load(trace_dir, et_dir=et_dir, iteration_marker=iteration_marker,
                        rank_map=_rank_map(rank_map), **(ingest or {}))
    _check_strict(ts, strict)
    comm = None
    if comm_model is not None:
        from traincast.costs.comm import CommModel

        if not comm_model.is_file():
            raise ParameterError(f"no such communication model file: {comm_model}")
        comm = CommModel.from_json(comm_model)
    pred = traincast.predict(ts, exact=exact, what_if=what_if or None, comm=comm)
    if timeline_out is not None:
        write_chrome_trace(timeline_out, ts, pred.timeline)
    if fmt is Format.json:
        sys.stdout.write(orjson.dumps(pred.to_dict(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        from traincast.report.terminal import render_prediction

        render_prediction(pred)
        if timeline_out is not None:
            typer.echo(f"timeline (measured + predicted): {timeline_out}")


@app.command()
def predict(
    trace_dir: Annotated[Path | None, typer.Argument(
        help="Folder of profiler traces, one per rank (.json or .json.gz), or one file "
             "(not with --from-et).")] = None,
    et_dir: Annotated[Path | None, typer.Option(help="Folder of execution traces "
                                                     "(rank-N.et.json.gz).")] = None,
    format: FormatOpt = Format.table,
    timeline_out: Annotated[Path | None, typer.Option(
        help="Write measured and predicted timelines as Chrome-trace JSON (Perfetto).")] = None,
    iteration_marker: Annotated[str | None, typer.Option(
        help="Annotation name or regex delimiting steps when there is no ProfilerStep#N.")
    ] = None,
    rank_map: Annotated[list[str] | None, typer.Option(
        help="FILE=RANK for files that record no rank (repeatable).")] = None,
    exact: Annotated[bool, typer.Option(
        help="Calibrate every latency to its measured value (replay reproduces the trace).")
    ] = False,
    what_if: Annotated[list[str] | None, typer.Option(
        "--what-if", help="KEY=VALUE change to predict (repeatable): gpu=H100, batch_size=64 "
                          "(with batch_size_from=B0, the recorded batch, when the traces have "
                          "no .run.json; otherwise read from the trace's first ops), "
                          "world_size=16, inter_node_gbps=400, speedup='ncclKernel.*=1.5', "
                          "speedup=family:gemm=2, speedup=kind:device=2, overlap=ideal.")
    ] = None,
    comm_model: Annotated[Path | None, typer.Option(
        help="Communication model from `traincast calibrate comm` for network what-ifs.")
    ] = None,
    executor: ExecutorOpt = None,
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    from_et: Annotated[Path | None, typer.Option(
        help="Predict the step of this PyTorch execution trace alone, with --models (no "
             "profiler trace of the workload; CPU execution).")] = None,
    models: Annotated[Path | None, typer.Option(
        help="Kernel models from `traincast fit` (with --from-et).")] = None,
    overheads: Annotated[Path | None, typer.Option(
        help="Host overhead table (overheads.json of `traincast bench`; default: the one "
             "beside the models or their bench folder).")] = None,
    batch_size: Annotated[int | None, typer.Option(
        help="With --from-et: predict the step at this batch (the recorded one is read from "
             "the execution trace).")] = None,
    batch_size_from: Annotated[int | None, typer.Option(
        help="With --from-et --batch-size: the recorded batch, when the leading dimension "
             "is not it (sequence-first models).")] = None,
    world_size: Annotated[int | None, typer.Option(
        help="With --from-et: the step of data-parallel training (DDP) on this many ranks, "
             "per-rank batch unchanged; gradient all_reduce from --comm-model (default: "
             "comm.json beside the models).")] = None,
    strict: StrictOpt = False,
) -> None:
    """Replay traces through the simulator: measured vs predicted iteration time per rank,
    or, with --what-if, the predicted time of a run that never happened; with --from-et,
    the step of an execution trace predicted from kernel models alone."""
    if from_et is not None:
        _predict_from_et(trace_dir, from_et, models, overheads, format, batch_size,
                         batch_size_from, world_size, comm_model)
        return
    if batch_size is not None or batch_size_from is not None:
        raise ParameterError("--batch-size is for --from-et; use --what-if batch_size=N")
    if world_size is not None:
        raise ParameterError("--world-size is for --from-et; use --what-if world_size=N")
    if trace_dir is None:
        raise ParameterError("give TRACE_DIR, or --from-et ET_FILE --models DIR")
    _predict(trace_dir, et_dir, format, timeline_out, iteration_marker, rank_map, exact,
             what_if, comm_model, _ingest(executor, workers, address), strict)


def _predict_from_et(trace_dir: Path | None, et_file: Path, models: Path | None,
                     overheads: Path | None, fmt: Format, batch_size: int | None,
                     batch_size_from: int | None = None, world_size: int | None = None,
                     comm_model: Path | None = None) -> None:
    import orjson

    from traincast.predict.from_et import predict_from_et

    if trace_dir is not None:
        raise ParameterError("--from-et predicts from the execution trace alone: drop TRACE_DIR")
    if models is None:
        raise ParameterError("--from-et needs --models DIR (from `traincast fit`)")
    if not et_file.is_file():
        raise ParameterError(f"--from-et {et_file}: no such file")
    if batch_size_from is not None and batch_size is None:
        raise ParameterError("--batch-size-from needs --batch-size")
    comm = corun = None
    if world_size is not None and world_size > 1:
        from traincast.costs.comm import CommModel

        if comm_model is None:  # the one `traincast bench --collective-ranks` wrote
            for cand in (models / "comm.json", models.parent / "bench" / "comm.json"):
                if cand.is_file():
                    comm_model = cand
                    break
        if comm_model is None:
            raise ParameterError("--world-size needs --comm-model FILE (traincast calibrate "
                                 "comm, or traincast bench --collective-ranks N)")
        if not comm_model.is_file():
            raise ParameterError(f"no such communication model file: {comm_model}")
        comm = CommModel.from_json(comm_model)
        corun_file = comm_model.parent / "corun.json"  # `bench --collective-ranks` wrote it
        if corun_file.is_file():
            import json

            try:
                corun = json.loads(corun_file.read_text())
                float(corun["compute_slowdown"]), float(corun["memory_slowdown"])
            except (ValueError, KeyError, TypeError):
                raise ParameterError(f"{corun_file}: not a co-run measurement") from None
    res = predict_from_et(et_file, models, overheads=overheads, batch_size=batch_size,
                          batch_size_from=batch_size_from, world_size=world_size, comm=comm,
                          corun=corun)
    if fmt is Format.json:
        doc = {"step_ns": res.step_ns, "modelled_share": round(res.modelled_share, 4),
               "comm_ns": res.comm_ns, "ops": int(len(res.ops)), "notes": res.notes}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    typer.echo(f"{et_file}: predicted step {res.step_ns / 1e6:.3f} ms "
               f"({100 * res.modelled_share:.0f}% from kernel models, {len(res.ops)} ops)")
    for note in res.notes:
        typer.echo(f"note: {note}")


@app.command()
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
    from traincast.record import record_demo

    if format is Format.table:
        typer.echo(f"recording {world_size} ranks x {steps} profiled steps of a {model} "
                   f"(DDP, gloo, CPU) into {out}/ ...")
    record_demo(out, world_size=world_size, warmup=warmup, active=steps, model=model)
    # the timeline goes into a subfolder: trace folders hold only the ranks' traces, so the
    # folder can be predicted and analysed again as it is
    (out / "predicted").mkdir(exist_ok=True)
    _predict(out, None, format, out / "predicted" / "timeline.json.gz", None, None, False)


def _load_with_progress(trace_dir: Path, et_dir: Path | None, iteration_marker: str | None,
                        rank_map: list[str] | None, quiet: bool, ingest: dict | None = None):
    import traincast

    ingest = ingest or {}
    if quiet:
        return traincast.load(trace_dir, et_dir=et_dir, iteration_marker=iteration_marker,
                              rank_map=_rank_map(rank_map), **ingest)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("loading traces"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True),
                  transient=True) as bar:
        task = bar.add_task("", total=None)

        def tick(done: int, total: int, path: Path) -> None:
            bar.update(task, completed=done, total=total, description=path.name)

        return traincast.load(trace_dir, et_dir=et_dir, iteration_marker=iteration_marker,
                              rank_map=_rank_map(rank_map), progress=tick, **ingest)


def _emit(tables: dict, fmt: ReportFormat, out: Path | None, title: str) -> None:
    import orjson

    from traincast.report.tables import render_tables, tables_to_json
    from traincast.util.fileio import atomic_write

    if fmt is ReportFormat.html:
        if out is None:
            raise ParameterError("--format html needs --out FILE.html")
        from traincast.report.html import render_html

        atomic_write(out, render_html(tables, title=title).encode())
        typer.echo(f"report: {out}")
        return
    if fmt is ReportFormat.json:
        from traincast.report.verdict import verdict_to_json

        data = orjson.dumps(verdict_to_json(tables_to_json(tables)), option=orjson.OPT_INDENT_2
                            | orjson.OPT_SERIALIZE_NUMPY)
        if out is not None:
            atomic_write(out, data)
        else:
            sys.stdout.write(data.decode() + "\n")
        return
    if out is not None:
        import io

        from rich.console import Console

        buf = io.StringIO()
        render_tables(tables, Console(file=buf, width=160, no_color=True))
        atomic_write(out, buf.getvalue().encode())
        return
    render_tables(tables)


def _auto_per_rank(trace_dir: Path, what: str | None, possible: bool) -> bool:
    """Per-rank analysis by default when it gives the same tables (only rank-local
    analyses) and the job is large enough for its memory bound to matter."""
    from traincast.analysis import split_names
    from traincast.analysis.per_rank import RANK_LOCAL
    from traincast.trace.load import PARALLEL_MIN_BYTES, discover, estimated_text_bytes

    names = split_names(what or "")
    if not possible or not names or any(n not in RANK_LOCAL for n in names):
        return False
    files, _ = discover(trace_dir)
    return len(files) > 1 and sum(map(estimated_text_bytes, files)) >= PARALLEL_MIN_BYTES


@app.command()
def analyze(
    trace_dir: Annotated[Path, typer.Argument(help="Folder of profiler traces, one per rank.")],
    what: Annotated[str | None, typer.Option(
        help="Comma-separated: breakdown, idle, kernels, collectives, critical_path, "
             "stragglers, prediction (default: all).")] = None,
    format: Annotated[ReportFormat, typer.Option("--format", help="Output format.")
                      ] = ReportFormat.table,
    out: Annotated[Path | None, typer.Option(help="Write to this file (html needs it).")
                   ] = None,
    et_dir: Annotated[Path | None, typer.Option(help="Folder of execution traces.")] = None,
    iteration_marker: Annotated[str | None, typer.Option(
        help="Annotation name or regex delimiting steps.")] = None,
    rank_map: Annotated[list[str] | None, typer.Option(help="FILE=RANK (repeatable).")
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
    import traincast

    ingest = _ingest(executor, workers, address)
    if per_rank is None:
        per_rank = _auto_per_rank(trace_dir, what, et_dir is None and critical_path_out is None)
    if per_rank:
        from traincast.analysis.per_rank import analyze_per_rank

        if et_dir is not None or critical_path_out is not None:
            raise ParameterError("--per-rank runs rank-local analyses only: --et-dir and "
                                 "--critical-path-out need the whole job")
        tables = analyze_per_rank(trace_dir, what, executor=ingest["executor"],
                                  workers=workers, address=address,
                                  iteration_marker=iteration_marker,
                                  rank_map=_rank_map(rank_map))
        _emit(tables, format, out, f"traincast analyze --per-rank: {trace_dir}")
        return
    ts = _load_with_progress(trace_dir, et_dir, iteration_marker, rank_map,
                             quiet=format is not ReportFormat.table, ingest=ingest)
    _check_strict(ts, strict)
    # the replay is computed once, and only when an output needs it (analyze() computes it
    # for critical_path/prediction and lends it to idle); the verdict (no --what) needs it
    want_verdict = what is None
    pred = traincast.predict(ts) if critical_path_out is not None or want_verdict else None
    tables = traincast.analyze(ts, what, prediction=pred)
    if want_verdict:
        from traincast.predict.verdict import verdict

        tables = {**verdict(ts, tables, pred, str(trace_dir)), **tables}
        if format is ReportFormat.html:  # the Gantt of one step (a chart, not a terminal table)
            from traincast.analysis.timeline import step_timeline

            tables["timeline"] = step_timeline(pred)
    if critical_path_out is not None:
        from traincast.analysis.critical_path import critical_path
        from traincast.export.chrome_path import write_critical_path_trace

        write_critical_path_trace(critical_path_out, pred, critical_path(pred))
    if want_verdict and format is ReportFormat.table and out is None:
        from traincast.report.verdict import render_verdict

        render_verdict(tables)
        if not show_all:
            typer.echo("(the analyses' tables: --all, or --what NAMES)")
            return
        tables = {k: v for k, v in tables.items() if k not in ("verdict", "opportunities")}
    _emit(tables, format, out, f"traincast analyze: {trace_dir}")


@app.command()
def diff(
    a: Annotated[Path, typer.Argument(help="Baseline traces (folder or file).")],
    b: Annotated[Path | None, typer.Argument(
        help="Traces to compare (folder or file); omit with --vs-predicted.")] = None,
    format: Annotated[ReportFormat, typer.Option("--format", help="Output format.")
                      ] = ReportFormat.table,
    out: Annotated[Path | None, typer.Option(help="Write to this file.")] = None,
    by: Annotated[str, typer.Option(help="Compare ops by name or op_family.")] = "name",
    vs_predicted: Annotated[bool, typer.Option(
        help="Compare A with its own replay (measured vs predicted).")] = False,
) -> None:
    """Diff two runs: ops that got slower/faster, appeared or vanished, and the step change."""
    import traincast
    from traincast.analysis.diff import trace_diff

    if (b is None) == (not vs_predicted):
        raise ParameterError("give a second trace folder B, or --vs-predicted (not both)")
    ta = traincast.load(a)
    tb = traincast.predict(ta).timeline if vs_predicted else traincast.load(b)
    tables = trace_diff(ta, tb, by=by)
    _emit(tables, format, out, f"traincast diff: {a} vs {b}")


calibrate_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                            help="Fit cost models from measurements.")
app.add_typer(calibrate_app, name="calibrate")


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
    # deferred, as in every command: `traincast --help` starts without scipy and pandas
    from traincast.costs.comm.calibrate import calibrate_comm as fit_comm
    from traincast.report.tables import render_tables
    from traincast.util.fileio import atomic_write

    fitted = fit_comm(sources, kind=kind.value, gpus_per_node=gpus_per_node,
                      intra_gbps=intra_gbps, inter_gbps=inter_gbps, gpu=gpu)
    render_tables({"comm_model": fitted.model.describe()})
    typer.echo(f"fit on {len(fitted.samples)} measurements: MAPE {100 * fitted.mape:.2f}% "
               f"(in-sample; benchmarks/comm_model_accuracy.py measures held-out error)")
    if out is not None:
        atomic_write(out, fitted.model.to_json().encode())
        typer.echo(f"model: {out}")


from traincast.cli_plan import plan_app  # noqa: E402

app.add_typer(plan_app, name="plan")

from traincast.cli_convert import convert  # noqa: E402

app.command()(convert)

from traincast.cli_kernels import bench, fit  # noqa: E402

app.command()(bench)
app.command()(fit)


@app.command()
def version() -> None:
    """Print the version."""
    import traincast

    typer.echo(traincast.__version__)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning bad input into one line and exit code 2.

    Usage errors are reported by click itself (usage line, exit code 2). Warnings print as
    one line each (``traincast: warning: ...``) on stderr when the command ends; when it fails
    on bad input, the error line is printed alone (the warnings before it only with
    ``TRAINCAST_VERBOSE=1``, the error still last), so a script reads one line.
    """
    import os
    import warnings

    held: list[str] = []

    def one_line(message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: object = None, line: str | None = None) -> None:
        held.append(f"traincast: warning: {message}")

    def flush() -> None:
        for w in held:
            typer.echo(w, err=True)
        held.clear()

    warnings.showwarning = one_line  # type: ignore[assignment]
    try:
        app(args=argv, prog_name="traincast", standalone_mode=True)
    except TraincastError as exc:
        if os.environ.get("TRAINCAST_VERBOSE", "") not in ("", "0"):
            flush()
        typer.echo(f"traincast: error: {exc}", err=True)
        return 2
    except SystemExit as exc:  # click's standalone mode ends with sys.exit
        code = exc.code
        code = code if isinstance(code, int) else (0 if code is None else 1)
        if code == 0:
            flush()
        return code
    except BaseException:
        flush()  # a bug: what was noticed before it helps to read the traceback
        raise
    flush()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
