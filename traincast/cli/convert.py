"""``traincast convert``: a run's execution graph in another tool's format.

Bad input (unreadable traces, an unknown iteration, a missing output folder) raises a
:class:`~traincast.errors.TraincastError`, which ``traincast.cli.main`` prints as one line
with exit code 2; a wrong ``--to`` is a usage error (exit 2) from click.
"""

from __future__ import annotations

import os
import re
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

import traincast
from traincast.cli.output import say
from traincast.errors import OutputError, ParameterError
from traincast.util.fileio import input_files, refuse_inputs


class Target(str, Enum):
    chakra = "chakra"


class ConvertFormat(str, Enum):
    table = "table"
    json = "json"


def convert(
    trace_dir: Annotated[Path, typer.Argument(help="Folder of profiler traces, one per rank "
                                                   "(.json or .json.gz), or one file.")],
    out: Annotated[Path, typer.Option(
        "--out", help="Output prefix: writes PREFIX.<rank>.et per rank (Chakra).")],
    to: Annotated[Target, typer.Option("--to", help="Output format.")] = Target.chakra,
    iteration: Annotated[int | None, typer.Option(
        help="Export only this step (ProfilerStep#N); default: every simulated event.")
    ] = None,
    delays: Annotated[bool, typer.Option(
        help="Keep measured start offsets (threads starting late, ops launched before the "
             "trace) as traincast::delay nodes.")] = True,
    exact: Annotated[bool, typer.Option(
        help="Replay with every latency calibrated to its measured value.")] = False,
    et_dir: Annotated[Path | None, typer.Option(help="Folder of execution traces.")] = None,
    iteration_marker: Annotated[str | None, typer.Option(
        help="Annotation name or regex delimiting steps when there is no ProfilerStep#N.")
    ] = None,
    format: Annotated[ConvertFormat, typer.Option(
        "--format", help="Summary format on stdout.")] = ConvertFormat.table,
) -> None:
    """Export the replayed execution graph as Chakra execution traces (MLCommons Chakra
    protobuf, one PREFIX.<rank>.et per rank) for ASTRA-sim and the Chakra tools, then read
    the files back and check them."""
    # lazy: the exporter loads numpy, pandas and pyarrow (CLI start-up time)
    from traincast.export.chakra import check_chakra, et_paths, export_chakra, read_chakra
    from traincast.export.chakra.write import chakra_outputs  # lazy: as the line above

    if out.is_dir() or out.name in ("", ".", ".."):
        raise ParameterError(f"--out {out}: give a file prefix (e.g. {out / 'trace'}), "
                             "not a folder")
    if out.parent.exists() and not out.parent.is_dir():
        raise ParameterError(f"--out {out}: {out.parent} is not a folder")
    _refuse_input_prefix(out, [trace_dir, et_dir])
    ts = traincast.load(trace_dir, et_dir=et_dir, iteration_marker=iteration_marker)
    refuse_inputs(chakra_outputs(out, ts.ranks), [trace_dir, et_dir])
    try:  # the prefix's folder (``--out et/run``) is created once the input has loaded
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ParameterError(f"--out {out}: cannot create folder {out.parent}: "
                             f"{exc.strerror}") from None
    pred = traincast.predict(ts, exact=exact)
    paths, trace = export_chakra(pred, out, iteration=iteration, anchors=delays)
    # read back exactly the files just written (not older ranks' files under the prefix)
    check = check_chakra({r: read_chakra(p)[1] for r, p in et_paths(out, trace.nodes).items()})
    st = trace.stats
    summary = {
        "files": [str(p) for p in paths],
        "ranks": sorted(trace.nodes),
        "nodes": st["nodes"],
        "nodes_by_type": st["by_type"],
        "data_deps": st["data_deps"],
        "dependency_edges": st["dep_edges"],
        "iteration": iteration,
        "read_back_ok": check["ok"],
        "makespan_us": check["makespan_us"],
        "replay_span_us": round(st["replay_span_ns"] / 1000, 3),
        "start_drift_us": check.get("start_drift_us"),
    }
    if format is ConvertFormat.json:
        import orjson

        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2
                                      | orjson.OPT_NON_STR_KEYS).decode() + "\n")
        return
    types = ", ".join(f"{k.removesuffix('_NODE').lower()} {v}"
                      for k, v in sorted(st["by_type"].items()))
    say(f"chakra: {len(trace.nodes)} rank file(s) {out}.<rank>.et: {st['nodes']} nodes "
        f"({types}), {st['data_deps']} data deps")
    span = st["replay_span_ns"] / 1000
    rel = 100 * (check["makespan_us"] - span) / span if span else 0.0
    say(f"read back: {'ok' if check['ok'] else 'FAILED'}; critical path "
        f"{check['makespan_us'] / 1000:.3f} ms vs replay {span / 1000:.3f} ms ({rel:+.2f}%)")
    if trace.comm_groups:
        typer.echo(f"communicator groups: {out}.comm_groups.json")


def _refuse_input_prefix(prefix: Path, inputs: list[Path | None]) -> None:
    """Refuse a prefix whose output names (``PREFIX.<rank>.et``, ``PREFIX.comm_groups.json``)
    are input files, before anything is read."""
    rx = re.compile(re.escape(prefix.name) + r"\.(\d+\.et|comm_groups\.json)$")
    for f in input_files(inputs):
        if rx.fullmatch(f.name):
            try:
                same = os.path.samefile(f.parent, prefix.parent)
            except OSError:
                continue
            if same and f.exists():
                raise OutputError(f"would write over the input {f} "
                                  "(choose another prefix)", prefix)
