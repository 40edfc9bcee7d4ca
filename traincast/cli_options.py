"""Option types shared by the ``traincast`` commands (``cli.py``, ``cli_plan.py``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


class Format(str, Enum):
    table = "table"
    json = "json"


class Executor(str, Enum):
    process = "process"
    ray = "ray"
    serial = "serial"


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
