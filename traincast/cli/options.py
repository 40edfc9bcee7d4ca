"""Options shared by the ``traincast`` commands, declared once as ``Annotated`` aliases.

A command takes ``workers: WorkersOpt = None`` and gets the same flag, type and help as every
other command. Help texts here are part of the CLI's output (``--help``): change them only on
purpose. Also the small parsers of option values (``--rank-map``, the ingest options), which
raise :class:`~traincast.errors.ParameterError` (one line, exit code 2) on bad values.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from traincast.errors import ParameterError


class Format(str, Enum):
    table = "table"
    json = "json"


class ReportFormat(str, Enum):
    table = "table"
    json = "json"
    html = "html"


class Executor(str, Enum):
    process = "process"
    ray = "ray"
    serial = "serial"


# ---------------------------------------------------------------- shared by every command

#: where trace files are parsed (and per-rank analyses run); None: automatic
ExecutorOpt = Annotated[Executor | None, typer.Option(
    help="Where trace files are parsed (and, with --per-rank, analysed): process, ray or "
         "serial (default: automatic, local processes for large inputs).")]
#: where a planner search simulates its candidates
SearchExecutorOpt = Annotated[Executor, typer.Option(help="Where --search simulates.")]
AddressOpt = Annotated[str | None, typer.Option(
    help="Ray cluster address for --executor ray (default: a local Ray instance).")]
WorkersOpt = Annotated[int | None, typer.Option(help="Parallel workers (default: CPU count).")]
CommModelOpt = Annotated[Path | None, typer.Option(
    help="Communication model JSON (`traincast calibrate comm`).")]
FormatOpt = Annotated[Format, typer.Option("--format", help="Output format: table or json.")]
ReportFormatOpt = Annotated[ReportFormat, typer.Option("--format", help="Output format.")]
StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="Refuse traces whose ranks disagree on a collective's size (default: "
                     "a warning, and each rank replayed with its own size).")]
EtDirOpt = Annotated[Path | None, typer.Option(help="Folder of execution traces.")]

# ---------------------------------------------------------------- the plan commands' system

GpusOpt = Annotated[int | None, typer.Option(help="Total GPUs.")]
GpusPerNodeOpt = Annotated[int | None, typer.Option(help="GPUs per node.")]
IntraNodeGbpsOpt = Annotated[float | None, typer.Option(
    help="Intra-node bandwidth per GPU in Gb/s (gigabits, as links are rated) per "
         "direction; the tables report busbw in GB/s (gigabytes).")]
InterNodeGbpsOpt = Annotated[float | None, typer.Option(
    help="Inter-node bandwidth per node in Gb/s (gigabits) per direction.")]


def parse_rank_map(items: list[str] | None) -> dict[str, int] | None:
    """``--rank-map FILE=RANK`` values as ``{FILE: RANK}`` (None when none are given)."""
    if not items:
        return None
    out = {}
    for it in items:
        name, sep, rank = it.rpartition("=")
        if not sep or not rank.isdigit():
            raise ParameterError(f"--rank-map expects FILE=RANK, got {it!r}")
        out[name] = int(rank)
    return out


def ingest_options(executor: Executor | None, workers: int | None, address: str | None
                   ) -> dict:
    """The keyword arguments of :func:`traincast.load` for ``--executor/--workers/--address``."""
    if address is not None and executor is not Executor.ray:
        raise ParameterError("--address is for --executor ray")
    return {"executor": executor.value if executor is not None else None,
            "workers": workers, "address": address}
