"""``traincast plan``: predict or search parallel layouts from a model config (no traces).

``plan transformer`` and ``plan dlrm`` read their config with :mod:`traincast.plan.config`
(flags override the file) and call :func:`traincast.plan.api.plan`,
:func:`traincast.plan.search.plan_search`, :func:`traincast.plan.dlrm.plan_dlrm`,
:func:`~traincast.plan.dlrm.search_sharding` or the sharders
(:mod:`traincast.plan.sharders`); tables via :mod:`traincast.report.plan`, or JSON
(``--format json``). Bad input raises :class:`~traincast.plan.spec.PlanError` (one line,
exit code 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from traincast.cli.options import (
    AddressOpt,
    CommModelOpt,
    Executor,
    Format,
    FormatOpt,
    GpusOpt,
    GpusPerNodeOpt,
    InterNodeGbpsOpt,
    IntraNodeGbpsOpt,
    SearchExecutorOpt,
    WorkersOpt,
)

if TYPE_CHECKING:  # the annotation only: the planner's modules load yaml (CLI start-up)
    from traincast.plan.spec import DLRMSpec

plan_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                       help="Predict and search parallel layouts before running them.")


@plan_app.command("transformer")
def plan_transformer(
    config: Annotated[Path | None, typer.Option(help="YAML/JSON config (flags override).")]
    = None,
    layers: Annotated[int | None, typer.Option(help="Transformer layers.")] = None,
    hidden: Annotated[int | None, typer.Option(help="Hidden size.")] = None,
    heads: Annotated[int | None, typer.Option(help="Attention heads.")] = None,
    seq: Annotated[int | None, typer.Option(help="Sequence length (tokens).")] = None,
    vocab: Annotated[int | None, typer.Option(help="Vocabulary size.")] = None,
    ffn: Annotated[int | None, typer.Option(help="FFN size (default 4*hidden).")] = None,
    experts: Annotated[int | None, typer.Option(help="MoE experts (0 = dense).")] = None,
    top_k: Annotated[int | None, typer.Option(help="MoE experts per token.")] = None,
    dtype: Annotated[str | None, typer.Option(help="bf16, fp16, fp32...")] = None,
    gpus: GpusOpt = None,
    gpu: Annotated[str | None, typer.Option(help="Catalog GPU (A100, H100...).")] = None,
    node: Annotated[str | None, typer.Option(help="Catalog node preset (DGX-A100...).")]
    = None,
    gpus_per_node: GpusPerNodeOpt = None,
    intra_node_gbps: IntraNodeGbpsOpt = None,
    inter_node_gbps: InterNodeGbpsOpt = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel degree.")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline-parallel degree.")] = None,
    dp: Annotated[int | None, typer.Option(help="Data-parallel degree.")] = None,
    micro_batch: Annotated[int | None, typer.Option(help="Sequences per micro-batch.")] = None,
    global_batch: Annotated[int | None, typer.Option(help="Sequences per step.")] = None,
    recompute: Annotated[str | None, typer.Option(help="none | selective | full.")] = None,
    sequence_parallel: Annotated[bool | None, typer.Option(
        "--sequence-parallel/--no-sequence-parallel", help="Megatron sequence parallelism.")]
    = None,
    zero: Annotated[int | None, typer.Option(help="ZeRO stage 0-3 (3 = FSDP).")] = None,
    schedule: Annotated[str | None, typer.Option(help="1f1b | interleaved | gpipe.")] = None,
    virtual_stages: Annotated[int | None, typer.Option(
        help="Model chunks per pipeline rank (interleaved).")] = None,
    ep: Annotated[int | None, typer.Option(help="Expert-parallel degree.")] = None,
    search: Annotated[bool, typer.Option("--search", help="Search every valid layout.")]
    = False,
    top: Annotated[int, typer.Option(help="Layouts to show with --search.")] = 10,
    executor: SearchExecutorOpt = Executor.process,
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    calibration: Annotated[Path | None, typer.Option(
        help="Plan calibration JSON (default: the shipped vTrain A100 fit).")] = None,
    comm_model: CommModelOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Predict one layout of a GPT-style transformer, or search them all (--search)."""
    # lazy (here and below): the planner, cost models and rich load numpy, pandas, scipy and
    # pyarrow, too slow for every CLI start (``--help`` included)
    from traincast.costs.comm import CommModel
    from traincast.plan.api import plan  # lazy: ditto
    from traincast.plan.config import load_transformer_config  # lazy: yaml (CLI start-up)
    from traincast.plan.costs import PlanCalibration  # lazy: ditto
    from traincast.plan.spec import PlanError  # lazy: ditto
    from traincast.report.plan import render_plan, render_search  # lazy: ditto

    cfg = load_transformer_config(
        config, layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab, ffn=ffn,
        experts=experts, top_k=top_k, dtype=dtype, gpus=gpus, gpu=gpu, node=node,
        gpus_per_node=gpus_per_node, intra_node_gbps=intra_node_gbps,
        inter_node_gbps=inter_node_gbps, tp=tp, pp=pp, dp=dp, micro_batch=micro_batch,
        global_batch=global_batch, recompute=recompute, sequence_parallel=sequence_parallel,
        zero=zero, schedule=schedule, virtual_stages=virtual_stages, ep=ep)
    model, system = cfg.model, cfg.system
    cal = PlanCalibration.load(calibration) if calibration else None
    comm = CommModel.from_json(comm_model) if comm_model is not None else None
    if search:
        from rich.progress import Progress

        from traincast.plan.search import plan_search  # lazy: CLI start-up

        gb = cfg.layout_fields.get("global_batch")
        if not gb:
            raise PlanError("--search needs --global-batch")
        with Progress(transient=True, disable=format is Format.json) as bar:
            task = bar.add_task("simulating layouts", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            res = plan_search(model, system, int(gb), calibration=cal, comm=comm,
                              executor=executor.value, address=address, workers=workers,
                              progress=progress)
        if format is Format.json:
            typer.echo(json.dumps(res.to_dict(top), indent=1, default=str))
        else:
            render_search(res, top, title=f"{model.name}: {model.params / 1e9:.1f}B params "
                          f"on {system.gpus} x {system.gpu}, global batch {gb}")
        return
    layout = cfg.layout()
    res1 = plan(model, system, layout, calibration=cal, comm=comm)
    if format is Format.json:
        typer.echo(json.dumps(res1.to_dict(), indent=1))
    else:
        render_plan(res1, title=f"{model.name}: {model.params / 1e9:.1f}B params on "
                    f"{system.gpus} x {system.gpu} ({layout.describe()})")


def _sharder_names(sharders: str | None) -> tuple[str, ...]:
    from traincast.plan.sharders import SHARDERS  # lazy: numpy, pandas (CLI start-up time)

    if sharders is None or sharders.strip() == "all":
        return SHARDERS
    return tuple(x.strip() for x in sharders.split(",") if x.strip())


def _sharders_with_models(model: DLRMSpec, ranks: int, batch: int, models_dir: Path,
                          sharders: str | None, search: bool, format: Format) -> None:
    """``plan dlrm --models``: the sharders' placements ranked by the fitted kernel models."""
    # lazy (and below): numpy, pandas, scikit-learn (CLI start-up time)
    from traincast.costs.kernel_models import KernelModels
    from traincast.plan.sharders import pick_with_models  # lazy: ditto
    from traincast.plan.spec import PlanError  # lazy: ditto

    if sharders is None and not search:
        raise PlanError("--models ranks sharders' placements: give --sharders NAMES or --search")
    km = KernelModels.load(models_dir)
    ranked = pick_with_models(model, ranks, batch, km, sharders=_sharder_names(sharders))
    device = km.source.get("device_name") or km.source.get("device") or "the models' device"
    if format is Format.json:
        typer.echo(json.dumps({"device": device, "models": str(models_dir),
                               "sharders": ranked.to_dict(orient="records")},
                              indent=1, default=str))
        return
    from traincast.report.tables import render_tables  # lazy: CLI start-up (pandas, rich)

    view = ranked.assign(
        compute_ms=ranked["max_cost_ns"] / 1e6,
        by_rank=[" | ".join(",".join(map(str, t)) or "-" for t in br.values())
                 for br in ranked["by_rank"]])[
        ["sharder", "compute_ms", "lookups_max_ms", "lookup_imbalance", "by_rank"]]
    typer.echo(f"{model.name}: {len(model.tables)} tables on {ranks} ranks, batch {batch}, "
               f"kernel models of {device} (collectives and host time not modelled)")
    render_tables({"sharders": view.rename(columns={
        "compute_ms": "slowest ms", "lookups_max_ms": "tables ms",
        "lookup_imbalance": "imbalance", "by_rank": "per rank"})})
    typer.echo(f"pick {ranked.at[0, 'sharder']}: {ranked.at[0, 'why']}")


@plan_app.command("dlrm")
def plan_dlrm(
    config: Annotated[Path | None, typer.Option(
        help="YAML/JSON config: tables [{rows, dim, pooling}], dense_features, bottom_mlp, "
             "top_mlp (optional system:, batch, sharding).")] = None,
    from_trace: Annotated[Path | None, typer.Option(
        help="Rebuild the model, batch and table placement from a DLRM trace folder "
             "(Kineto + execution traces) and compare with its measured step.")] = None,
    et_dir: Annotated[Path | None, typer.Option(
        help="Execution traces of --from-trace (default: DIR/et, or ../et beside a "
             "Kineto folder).")] = None,
    gpus: GpusOpt = None,
    gpu: Annotated[str | None, typer.Option(help="Catalog GPU (V100, A100...).")] = None,
    node: Annotated[str | None, typer.Option(help="Catalog node preset (DGX-1-V100...).")]
    = None,
    gpus_per_node: GpusPerNodeOpt = None,
    intra_node_gbps: IntraNodeGbpsOpt = None,
    inter_node_gbps: InterNodeGbpsOpt = None,
    batch: Annotated[int | None, typer.Option(help="Global batch (samples per step).")]
    = None,
    sharding: Annotated[str | None, typer.Option(
        help="table | row | column | data, or one per table, comma separated.")] = None,
    optimizer: Annotated[str, typer.Option(
        help="Embedding optimizer fused in the lookup backward: sgd | rowwise_adagrad | "
             "adagrad.")] = "sgd",
    dense_optimizer: Annotated[str, typer.Option(
        help="MLP optimizer: sgd | adagrad | adam.")] = "sgd",
    fit_embeddings: Annotated[bool, typer.Option(
        "--fit-embeddings", help="With --from-trace: fit the lookup model on the trace's "
        "embedding kernels (in-sample for that trace).")] = False,
    fit_host: Annotated[bool, typer.Option(
        "--fit-host", help="With --from-trace: host time per kernel launch measured on the "
        "trace ((step - blocked time) / launches, median over ranks) instead of the "
        "calibration's launch overhead (in-sample for that trace).")] = False,
    search: Annotated[bool, typer.Option("--search", help="Rank sharding plans.")] = False,
    sharders: Annotated[str | None, typer.Option(
        help="Rank table-wise placements of these sharders (comma-separated, or all: naive, "
             "random, dim_greedy, size_greedy, lookup_greedy, size_lookup_greedy) and say "
             "which one to pick and why.")] = None,
    models: Annotated[Path | None, typer.Option(
        help="Kernel models from `traincast fit`: rank the sharders' table-wise placements by "
             "the models' compute of the slowest rank, on the device the models were fitted "
             "on (with --sharders, or --search for all sharders).")] = None,
    top: Annotated[int, typer.Option(help="Plans to show with --search.")] = 10,
    executor: SearchExecutorOpt = Executor.process,
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    calibration: Annotated[Path | None, typer.Option(
        help="Plan calibration JSON.")] = None,
    comm_model: CommModelOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Predict one DLRM training step under an embedding sharding plan, or rank plans
    (--search)."""
    # lazy (here and below): the planner, cost models and rich load numpy, pandas, scipy and
    # pyarrow, too slow for every CLI start (``--help`` included)
    from traincast.costs.comm import CommModel
    from traincast.plan import dlrm as D  # lazy: ditto
    from traincast.plan.config import (  # lazy: yaml (CLI start-up)
        DLRMConfig,
        check_batch,
        load_dlrm_config,
        parse_sharding,
    )
    from traincast.plan.costs import PlanCalibration  # lazy: ditto
    from traincast.plan.spec import Layout, PlanError  # lazy: ditto
    from traincast.report.plan import render_dlrm_plan, render_dlrm_search  # lazy: ditto

    if config is not None and from_trace is not None:
        raise PlanError("give --config or --from-trace, not both")
    if config is None and from_trace is None:
        raise PlanError("give a model: --config FILE or --from-trace DIR")
    if fit_host and from_trace is None:
        raise PlanError("--fit-host needs --from-trace")
    placement: dict[int, int] = {}
    measured = None
    trace_sharding: tuple[str, ...] = ()
    emb_model = None
    host_fit = None
    if from_trace is not None:
        ts, got = D.load_dlrm_trace(from_trace, et_dir)
        cfg = DLRMConfig(got.spec, {})
        placement, measured = got.placement, got.measured_step_s
        trace_sharding = got.sharding
        batch = batch or got.batch
        gpus = gpus or len(ts.ranks)
        if gpu is None and node is None:
            gpu = D.traced_gpu(ts)
        if fit_embeddings:
            from traincast.costs.embedding import fit_embedding_efficiency  # lazy: CLI start-up

            emb_model = fit_embedding_efficiency(ts)
        if fit_host:
            host_fit = D.fit_host_overhead(ts)
    else:
        cfg = load_dlrm_config(config)
    model = cfg.model
    batch = check_batch(batch if batch is not None else cfg.batch)
    if models is not None:  # the device is the models' own: no catalog GPU needed
        ranks = gpus if gpus is not None else cfg.system_fields().get("gpus")
        if ranks is None:
            raise PlanError("give the number of ranks (--gpus)")
        _sharders_with_models(model, int(ranks), int(batch), models, sharders, search, format)
        return
    system = cfg.system(gpus=gpus, gpu=gpu, node=node, gpus_per_node=gpus_per_node,
                        intra_node_gbps=intra_node_gbps, inter_node_gbps=inter_node_gbps)
    shard_val = sharding if sharding is not None else cfg.sharding
    if shard_val is None:
        shard = trace_sharding or ("table",)
    else:
        shard = parse_sharding(shard_val)
        placement = {}  # a new sharding: the trace's placement no longer applies
    cal = PlanCalibration.load(calibration) if calibration else None
    comm = CommModel.from_json(comm_model) if comm_model is not None else None
    if host_fit is not None:
        host_fit = D.fit_to_model(host_fit, model, system, shard, int(batch), calibration=cal,
                                  comm=comm, embedding_model=emb_model, placement=placement,
                                  optimizer=optimizer, dense_optimizer=dense_optimizer)
        if search:
            cal = D.calibration_with(host_fit, cal)
    title = (f"{model.name}: {len(model.tables)} tables on {system.gpus} x {system.gpu}, "
             f"batch {batch}")
    if sharders is not None:
        from traincast.plan.sharders import rank_sharders  # lazy: CLI start-up (numpy, pandas)

        ranked = rank_sharders(model, system, int(batch), sharders=_sharder_names(sharders),
                               calibration=cal,
                               comm=comm, embedding_model=emb_model, optimizer=optimizer,
                               dense_optimizer=dense_optimizer)
        if format is Format.json:
            typer.echo(json.dumps({"sharders": ranked.to_dict(orient="records")}, indent=1,
                                  default=str))
        else:
            from traincast.report.tables import render_tables  # lazy: CLI start-up

            view = ranked.assign(step_ms=ranked["iteration_time_s"] * 1e3)[
                ["sharder", "step_ms", "lookup_max_ms", "lookup_imbalance", "a2a_ms", "fits"]]
            render_tables({"sharders": view.rename(columns={
                "step_ms": "step ms", "lookup_max_ms": "lookups ms", "lookup_imbalance":
                "imbalance", "a2a_ms": "a2a ms"})})
            typer.echo(f"pick {ranked.at[0, 'sharder']}: {ranked.at[0, 'why']}")
        return
    if search:
        table = D.search_sharding(model, system, int(batch), top_k=top,
                                  executor=executor.value, workers=workers, calibration=cal,
                                  comm=comm, embedding_model=emb_model, optimizer=optimizer,
                                  dense_optimizer=dense_optimizer, address=address)
        if format is Format.json:
            typer.echo(json.dumps({"plans": table.to_dict(orient="records"),
                                   "reasons": D.why_best(table)}, indent=1, default=str))
        else:
            render_dlrm_search(table, title=title)
        return
    layout = Layout(dp=system.gpus, sharding=shard)
    kw = dict(calibration=cal, comm=comm, embedding_model=emb_model, placement=placement,
              optimizer=optimizer, dense_optimizer=dense_optimizer)
    res = D.plan_dlrm(model, system, layout, int(batch),
                      launch_overhead_us=host_fit.launch_overhead_us if host_fit else None, **kw)
    if host_fit is not None:
        res.notes.extend(host_fit.notes)
    if from_trace is not None:  # the lookup model against the trace's own lookups
        gap = D.lookup_gap_note(ts, D.on_gpu(emb_model, system.gpu))
        if gap is not None:
            res.notes.append(gap + ("" if emb_model is not None else
                                    ": catalog defaults, --fit-embeddings fits them"))
    if format is Format.json:
        d = res.to_dict()
        if host_fit is not None:
            d["host_fit"] = host_fit.to_dict()
        if measured is not None:
            d["measured_step_s"] = measured
            d["measured_step_statistic"] = "median over ranks and steps"
            d["error_pct"] = (res.iteration_time_s / measured - 1) * 100
        typer.echo(json.dumps(d, indent=1, default=str))
    else:
        render_dlrm_plan(res, title=title, measured_step_s=measured)
