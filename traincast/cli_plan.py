"""``traincast plan``: predict or search parallel layouts from a model config (no traces)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from traincast.cli_options import (
    AddressOpt,
    CommModelOpt,
    Executor,
    Format,
    FormatOpt,
    SearchExecutorOpt,
    WorkersOpt,
)
from traincast.plan.spec import PlanError

plan_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                       help="Predict and search parallel layouts before running them.")


#: the largest config file read (a model config is a few KB)
CONFIG_MAX_BYTES = 1 << 20


#: deepest ``[``/``{`` nesting accepted in a YAML config (a model config needs 3 or 4)
MAX_FLOW_DEPTH = 32


def _flow_depth(text: str) -> int:
    """The deepest nesting of YAML flow collections (``[``, ``{``) in ``text``, skipping
    quoted strings and comments; one linear pass."""
    depth = deepest = 0
    quote = ""
    prev = "\n"
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "#" and prev in " \t\n":
            j = text.find("\n", i)
            i = n if j < 0 else j
            prev = "\n"
            continue
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        prev = c
        i += 1
    return deepest


def _load_yaml(text: str, path: Path) -> Any:
    """YAML without anchors and aliases: a 1-KB file of nested aliases ("billion laughs")
    expands to gigabytes once anything walks it, and a model config never needs them. The
    event stream is checked first (linear in the text: aliases are not expanded there), then
    the text is read with ``yaml.safe_load``."""
    import yaml

    depth = _flow_depth(text)
    if depth > MAX_FLOW_DEPTH:  # PyYAML's scanner is quadratic in the flow nesting
        raise PlanError(f"{path}: brackets nested {depth} deep; at most {MAX_FLOW_DEPTH} in a "
                        "config")
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.events.AliasEvent):
            raise PlanError(f"{path}: YAML aliases are not allowed in a config "
                            f"(line {event.start_mark.line + 1})")
    return yaml.safe_load(text)


def _read_config(path: Path | None) -> dict[str, Any]:
    """A YAML or JSON mapping (``model``, ``system``, ``layout`` sections or flat keys)."""
    if path is None:
        return {}
    try:
        if path.stat().st_size > CONFIG_MAX_BYTES:
            raise PlanError(f"{path}: config larger than {CONFIG_MAX_BYTES // 2**20} MiB")
        text = path.read_text()
    except OSError as exc:
        raise PlanError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = _load_yaml(text, path)
    except PlanError:
        raise
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError
        raise PlanError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: "
                        f"{str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: the config must be a mapping")
    return data


_MODEL_KEYS = ("layers", "hidden", "heads", "seq", "vocab", "ffn", "experts", "top_k",
               "moe_every", "dtype", "name")
_SYSTEM_KEYS = ("gpu", "gpus", "node", "gpus_per_node", "intra_node_gbps", "inter_node_gbps")
_LAYOUT_KEYS = ("tp", "pp", "dp", "micro_batch", "global_batch", "recompute",
                "sequence_parallel", "zero", "schedule", "virtual_stages", "ep",
                "overlap_grad_reduce")


def _section(cfg: dict[str, Any], name: str, keys: tuple[str, ...], path: Path | None
             ) -> dict[str, Any]:
    sec = cfg.get(name, {})
    if not isinstance(sec, dict):
        raise PlanError(f"{path}: '{name}' must be a mapping")
    out = {k: cfg[k] for k in keys if k in cfg}
    out.update(sec)
    unknown = set(sec) - set(keys)
    if unknown:
        raise PlanError(f"{path}: unknown {name} key(s): {', '.join(sorted(unknown))}")
    return out


def _merge(base: dict[str, Any], **flags: Any) -> dict[str, Any]:
    out = dict(base)
    out.update({k: v for k, v in flags.items() if v is not None})
    return out


def _system(cfg: dict[str, Any], path: Path | None, **flags: Any) -> Any:
    """The SystemSpec of a config's ``system`` section (or flat keys) overridden by flags."""
    from traincast.plan.spec import SystemSpec

    scfg = _merge(_section(cfg, "system", _SYSTEM_KEYS, path), **flags)
    if "gpus" not in scfg:
        raise PlanError("give the number of GPUs (--gpus)")
    n = scfg.pop("gpus")
    return SystemSpec.from_catalog(n, node=scfg.pop("node", None), gpu=scfg.pop("gpu", None),
                                   **scfg)


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
    gpus: Annotated[int | None, typer.Option(help="Total GPUs.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Catalog GPU (A100, H100...).")] = None,
    node: Annotated[str | None, typer.Option(help="Catalog node preset (DGX-A100...).")]
    = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node.")] = None,
    intra_node_gbps: Annotated[float | None, typer.Option(
        help="Intra-node bandwidth per GPU, Gb/s per direction.")] = None,
    inter_node_gbps: Annotated[float | None, typer.Option(
        help="Inter-node bandwidth per node, Gb/s per direction.")] = None,
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
    from traincast.costs.comm import CommModel
    from traincast.plan.costs import PlanCalibration
    from traincast.plan.spec import Layout, TransformerSpec

    cfg = _read_config(config)
    mcfg = _merge(_section(cfg, "model", _MODEL_KEYS, config), layers=layers, hidden=hidden,
                  heads=heads, seq=seq, vocab=vocab, ffn=ffn, experts=experts, top_k=top_k,
                  dtype=dtype)
    missing = [k for k in ("layers", "hidden", "heads", "seq") if k not in mcfg]
    if missing:
        raise PlanError("missing model size: give --" + ", --".join(missing)
                        + " (or a --config)")
    model = TransformerSpec(**mcfg)
    system = _system(cfg, config, gpus=gpus, gpu=gpu, node=node, gpus_per_node=gpus_per_node,
                     intra_node_gbps=intra_node_gbps, inter_node_gbps=inter_node_gbps)
    lcfg = _merge(_section(cfg, "layout", _LAYOUT_KEYS, config), tp=tp, pp=pp, dp=dp,
                  micro_batch=micro_batch, global_batch=global_batch, recompute=recompute,
                  sequence_parallel=sequence_parallel, zero=zero, schedule=schedule,
                  virtual_stages=virtual_stages, ep=ep)
    cal = PlanCalibration.load(calibration) if calibration else None
    comm = CommModel.from_json(comm_model) if comm_model is not None else None

    from traincast.report.plan import render_plan, render_search

    if search:
        from rich.progress import Progress

        from traincast.plan.search import plan_search

        gb = lcfg.get("global_batch")
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
    if "dp" not in lcfg:  # the GPUs that tp x pp leave (validated by Layout below)
        tp_pp = lcfg.get("tp", 1) * lcfg.get("pp", 1) if all(
            isinstance(lcfg.get(k, 1), int) for k in ("tp", "pp")) else 0
        lcfg["dp"] = max(1, system.gpus // tp_pp) if tp_pp >= 1 else 1
    layout = Layout(**lcfg)
    from traincast.plan.api import plan

    res1 = plan(model, system, layout, calibration=cal, comm=comm)
    if format is Format.json:
        typer.echo(json.dumps(res1.to_dict(), indent=1))
    else:
        render_plan(res1, title=f"{model.name}: {model.params / 1e9:.1f}B params on "
                    f"{system.gpus} x {system.gpu} ({layout.describe()})")


_DLRM_KEYS = ("tables", "dense_features", "bottom_mlp", "top_mlp", "dtype",
              "index_distribution", "zipf_alpha", "name")


def _dlrm_spec(cfg: dict[str, Any], path: Path | None) -> Any:
    """A :class:`DLRMSpec` from a config: ``tables`` (list of ``{rows, dim, pooling}``),
    ``dense_features``, ``bottom_mlp``, ``top_mlp`` (flat or under ``model:``)."""
    from traincast.plan.spec import DLRMSpec, EmbeddingTable

    m = _section(cfg, "model", _DLRM_KEYS, path)
    tabs = m.pop("tables", None)
    if not isinstance(tabs, list) or not tabs:
        raise PlanError(f"{path}: 'tables' must be a non-empty list of {{rows, dim, pooling}}")
    tables = []
    for i, t in enumerate(tabs):
        if not isinstance(t, dict):
            raise PlanError(f"{path}: table {i} must be a mapping {{rows, dim, pooling}}")
        unknown = set(t) - {"rows", "dim", "pooling"}
        if unknown or "rows" not in t or "dim" not in t:
            raise PlanError(f"{path}: table {i} needs rows and dim (and optionally pooling)"
                            + (f"; unknown key(s): {', '.join(sorted(unknown))}"
                               if unknown else ""))
        tables.append(EmbeddingTable(**t))
    for k in ("bottom_mlp", "top_mlp"):
        if k in m:
            if not isinstance(m[k], list | tuple):
                raise PlanError(f"{path}: '{k}' must be a list of layer widths")
            m[k] = tuple(m[k])
    try:
        return DLRMSpec(tables=tuple(tables), **m)
    except TypeError as exc:  # pragma: no cover - keys are filtered above
        raise PlanError(f"{path}: {exc}") from None


def _sharder_names(sharders: str | None) -> tuple[str, ...]:
    from traincast.plan.sharders import SHARDERS

    if sharders is None or sharders.strip() == "all":
        return SHARDERS
    return tuple(x.strip() for x in sharders.split(",") if x.strip())


def _sharders_with_models(model: Any, ranks: int, batch: int, models_dir: Path,
                          sharders: str | None, search: bool, format: Format) -> None:
    """``plan dlrm --models``: the sharders' placements ranked by the fitted kernel models."""
    from traincast.costs.kernel_models import KernelModels
    from traincast.plan.sharders import pick_with_models

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
    from traincast.report.tables import render_tables

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


def _trace_dirs(path: Path, et_dir: Path | None) -> tuple[Path, Path | None, list[Path]]:
    """(Kineto folder, execution-trace folder or None, folders looked in for ETs).

    ``DIR`` of Kineto traces, or ``DIR/kineto``; the execution traces are ``--et-dir``, else
    the first of ``DIR/et`` and, when ``DIR`` is itself a Kineto folder, its sibling
    ``DIR/../et`` that holds ``*.et.json[.gz]`` files (the layout of
    ``../shared/data/traces/dlrm_8xv100``)."""
    if not path.is_dir():
        raise PlanError(f"--from-trace {path}: not a folder")
    kdir = path / "kineto" if (path / "kineto").is_dir() else path
    if et_dir is not None:
        return kdir, et_dir, [et_dir]
    looked = [path / "et"] + ([path.parent / "et"] if kdir == path else [])
    for d in looked:
        if d.is_dir() and any(d.glob("*.et.json*")):
            return kdir, d, looked
    return kdir, None, looked


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
    gpus: Annotated[int | None, typer.Option(help="Total GPUs.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Catalog GPU (V100, A100...).")] = None,
    node: Annotated[str | None, typer.Option(help="Catalog node preset (DGX-1-V100...).")]
    = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node.")] = None,
    intra_node_gbps: Annotated[float | None, typer.Option(
        help="Intra-node bandwidth per GPU, Gb/s per direction.")] = None,
    inter_node_gbps: Annotated[float | None, typer.Option(
        help="Inter-node bandwidth per node, Gb/s per direction.")] = None,
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
    from traincast.costs.comm import CommModel
    from traincast.plan import dlrm as D
    from traincast.plan.costs import PlanCalibration
    from traincast.plan.spec import Layout
    from traincast.report.plan import render_dlrm_plan, render_dlrm_search

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
    cfg: dict[str, Any] = {}
    if from_trace is not None:
        import traincast
        from traincast.costs.hardware import load_catalog

        kdir, edir, looked = _trace_dirs(from_trace, et_dir)
        ts = traincast.load(kdir, et_dir=edir)
        try:
            got = D.dlrm_spec_from_trace(ts)
        except PlanError as exc:
            where = ", ".join(str(d) for d in looked)
            found = f"execution traces from {edir}" if edir else f"no execution traces in {where}"
            raise PlanError(f"--from-trace {from_trace}: {exc} ({found}; give --et-dir)"
                            ) from None
        model, placement, measured = got.spec, got.placement, got.measured_step_s
        trace_sharding = got.sharding
        batch = batch or got.batch
        gpus = gpus or len(ts.ranks)
        if gpu is None and node is None:
            cat = load_catalog()
            m = cat.match_first(p for info in ts.ranks.values() for p in info.device_properties)
            gpu = m.name if m is not None else None
        if fit_embeddings:
            from traincast.costs.embedding import fit_embedding_efficiency

            emb_model = fit_embedding_efficiency(ts)
        if fit_host:
            host_fit = D.fit_host_overhead(ts)
    else:
        cfg = _read_config(config)
        model = _dlrm_spec(cfg, config)
    extra = set(cfg) - set(_DLRM_KEYS) - {"model", "system", "batch", "sharding",
                                          *_SYSTEM_KEYS}
    if extra:
        raise PlanError(f"{config}: unknown key(s): {', '.join(sorted(extra))}")
    batch = batch if batch is not None else cfg.get("batch")
    if batch is None:
        raise PlanError("give the global batch (--batch)")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise PlanError(f"batch must be an integer, got {batch!r}")
    if models is not None:  # the device is the models' own: no catalog GPU needed
        ranks = gpus if gpus is not None else _section(cfg, "system", _SYSTEM_KEYS,
                                                       config).get("gpus")
        if ranks is None:
            raise PlanError("give the number of ranks (--gpus)")
        _sharders_with_models(model, int(ranks), int(batch), models, sharders, search, format)
        return
    system = _system(cfg, config, gpus=gpus, gpu=gpu, node=node, gpus_per_node=gpus_per_node,
                     intra_node_gbps=intra_node_gbps, inter_node_gbps=inter_node_gbps)
    shard_val = sharding if sharding is not None else cfg.get("sharding")
    if shard_val is None:
        shard = trace_sharding or ("table",)
    else:
        shard = tuple(x.strip() for x in shard_val.split(",")) if isinstance(shard_val, str) \
            else tuple(shard_val)
        placement = {}  # a new sharding: the trace's placement no longer applies
    cal = PlanCalibration.load(calibration) if calibration else None
    comm = CommModel.from_json(comm_model) if comm_model is not None else None
    if host_fit is not None:
        # count the same thing on both sides: the trace's host time per step over the kernels
        # *the model* launches per step (not the trace's launches: the model enumerates fewer,
        # coarser kernels than a real step's fbgemm/optimizer/pipeline launches)
        probe = D.plan_dlrm(model, system, Layout(dp=system.gpus, sharding=shard), int(batch),
                            calibration=cal, comm=comm, embedding_model=emb_model,
                            placement=placement, optimizer=optimizer,
                            dense_optimizer=dense_optimizer, launch_overhead_us=1.0)
        host_fit = D.per_modelled_kernel(host_fit, probe)
    if host_fit is not None and search:
        import dataclasses

        from traincast.plan.costs import default_calibration

        base = cal or default_calibration()
        cal = dataclasses.replace(base, launch_overhead_us=host_fit.launch_overhead_us,
                                  source=f"{base.source}; {host_fit.notes[0]}")
    title = (f"{model.name}: {len(model.tables)} tables on {system.gpus} x {system.gpu}, "
             f"batch {batch}")
    if sharders is not None:
        from traincast.plan.sharders import rank_sharders

        ranked = rank_sharders(model, system, int(batch), sharders=_sharder_names(sharders),
                               calibration=cal,
                               comm=comm, embedding_model=emb_model, optimizer=optimizer,
                               dense_optimizer=dense_optimizer)
        if format is Format.json:
            typer.echo(json.dumps({"sharders": ranked.to_dict(orient="records")}, indent=1,
                                  default=str))
        else:
            from traincast.report.tables import render_tables

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
    if format is Format.json:
        d = res.to_dict()
        if host_fit is not None:
            d["host_fit"] = host_fit.to_dict()
        if measured is not None:
            d["measured_step_s"] = measured
            d["error_pct"] = (res.iteration_time_s / measured - 1) * 100
        typer.echo(json.dumps(d, indent=1, default=str))
    else:
        render_dlrm_plan(res, title=title, measured_step_s=measured)
