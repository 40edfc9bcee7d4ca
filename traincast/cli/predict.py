"""``traincast predict``: replay traces (measured vs predicted step), a what-if, or the step of
an execution trace from kernel models (``--from-et``).

Library calls: :func:`traincast.load`, :func:`traincast.predict`,
:func:`traincast.predict.from_et.predict_from_et`. Output: the prediction table (terminal) or
its JSON (``--format json``) on stdout. Bad input raises
:class:`~traincast.errors.TraincastError` (one line, exit code 2).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

import traincast
from traincast.cli.collector import import_uncollected, release_startup_pages
from traincast.cli.options import (
    AddressOpt,
    ExecutorOpt,
    Format,
    FormatOpt,
    StrictOpt,
    WorkersOpt,
    ingest_options,
    parse_rank_map,
)
from traincast.cli.output import start_parse_ahead
from traincast.errors import ParameterError
from traincast.util.fileio import refuse_inputs


def check_strict(ts: object, strict: bool) -> None:
    """``--strict``: refuse ranks that disagree on a collective's size."""
    if strict:
        # lazy: the graph package pulls numpy/pyarrow, too slow for every CLI start
        from traincast.graph.collectives import match_collectives

        match_collectives(ts, strict=True)


def predict_traces(trace_dir: Path, et_dir: Path | None, fmt: Format, timeline_out: Path | None,
                   iteration_marker: str | None, rank_map: list[str] | None, exact: bool,
                   what_if: list[str] | None = None, comm_model: Path | None = None,
                   ingest: dict | None = None, strict: bool = False) -> None:
    """Load, replay and print: the body of ``traincast predict TRACE_DIR`` and of ``demo``."""
    # a large uncached job's parse workers start now, their start-up beside the imports
    start_parse_ahead(trace_dir, et_dir, iteration_marker, rank_map, ingest)
    # the libraries of the run, imported before it starts and uncollected
    # (traincast.cli.collector): numpy, pandas, pyarrow and rich, imported here rather than
    # at the top, would slow every CLI start (``--help`` included)
    import_uncollected("orjson", "traincast.trace.load", "traincast.predict.prediction",
                       *(["traincast.report.terminal"] if fmt is Format.table else []))
    # lazy (here and below): as above
    import orjson

    refuse_inputs([timeline_out], [trace_dir, et_dir, comm_model])
    ts = traincast.load(trace_dir, et_dir=et_dir, iteration_marker=iteration_marker,
                        rank_map=parse_rank_map(rank_map), **(ingest or {}))
    check_strict(ts, strict)
    # the ET link columns (read by the load only) and the start-up's code pages, freed
    # before the replay's peaks
    from traincast.trace.traceset import drop_link_columns  # lazy: CLI start-up (pyarrow)
    from traincast.util.allocator import release_memory  # lazy: as above

    if drop_link_columns(ts):
        release_memory()  # Arrow's pool keeps freed buffers until asked
    release_startup_pages(ts.events.num_rows)
    comm = None
    if comm_model is not None:
        from traincast.costs.comm import CommModel  # lazy: CLI start-up (numpy, scipy)

        if not comm_model.exists():  # a FIFO or a device: from_json refuses it
            raise ParameterError(f"no such communication model file: {comm_model}")
        comm = CommModel.from_json(comm_model)
    pred = traincast.predict(ts, exact=exact, what_if=what_if or None, comm=comm)
    if timeline_out is not None:
        from traincast.export.chrome import write_chrome_trace  # lazy: CLI start-up (numpy)

        write_chrome_trace(timeline_out, ts, pred.timeline)
    if fmt is Format.json:
        sys.stdout.write(orjson.dumps(pred.to_dict(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        from traincast.report.terminal import render_prediction  # lazy: CLI start-up (rich)

        render_prediction(pred)
        if timeline_out is not None:
            typer.echo(f"timeline (measured + predicted): {timeline_out}")


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
        metavar="FILE=RANK", help="FILE=RANK for files that record no rank (repeatable).")] = None,
    exact: Annotated[bool, typer.Option(
        help="Calibrate every latency to its measured value (replay reproduces the trace).")
    ] = False,
    what_if: Annotated[list[str] | None, typer.Option(
        "--what-if", metavar="KEY=VALUE", help="KEY=VALUE change to predict (repeatable): gpu=H100, batch_size=64 "
                          "(with batch_size_from=B0, the recorded batch, when the traces have "
                          "no .run.json; otherwise read from the trace's first ops), "
                          "world_size=16, inter_node_gbps=400, speedup='ncclKernel.*=1.5', "
                          "speedup=family:gemm=2, speedup=kind:device=2, overlap=ideal, "
                          "comm_algorithm=tree. gpu=NAME changes the GPU alone (host CPU and "
                          "network kept as recorded); node=NAME (a catalog node preset: "
                          "DGX-1-V100, DGX-A100, DGX-H100, DGX-B200, Frontier) changes the "
                          "GPU, the intra/inter-node bandwidths and ranks_per_node together "
                          "(host CPU kept: no host speed model). ranks_per_node needs "
                          "world_size or a network key; batch_size_from and efficiency need "
                          "batch_size. A speedup matching no event is refused; a what-if that "
                          "leaves the step unchanged says why in the notes.")
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
    predict_traces(trace_dir, et_dir, format, timeline_out, iteration_marker, rank_map, exact,
                   what_if, comm_model, ingest_options(executor, workers, address), strict)


def _predict_from_et(trace_dir: Path | None, et_file: Path, models: Path | None,
                     overheads: Path | None, fmt: Format, batch_size: int | None,
                     batch_size_from: int | None = None, world_size: int | None = None,
                     comm_model: Path | None = None) -> None:
    import orjson  # lazy: see predict_traces

    # lazy: the ET predictor loads numpy, pandas, pyarrow and scipy (CLI start-up time)
    from traincast.predict.from_et import data_parallel_inputs, predict_from_et

    if trace_dir is not None:
        raise ParameterError("--from-et predicts from the execution trace alone: drop TRACE_DIR")
    if models is None:
        raise ParameterError("--from-et needs --models DIR (from `traincast fit`)")
    if not et_file.exists():  # a FIFO or a device: the reader refuses it in one line
        raise ParameterError(f"--from-et {et_file}: no such file")
    if batch_size_from is not None and batch_size is None:
        raise ParameterError("--batch-size-from needs --batch-size")
    comm = corun = None
    if world_size is not None and world_size > 1:
        comm, corun = data_parallel_inputs(models, comm_model)
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

