"""Writing Chakra files: ``<prefix>.<rank>.et`` per rank and ``<prefix>.comm_groups.json``.

``comm_groups.json`` is ASTRA-sim's communicator-group file, ``{pg_name: [ranks]}``, written
only when a process group other than the default one is used. The files are written
together: all new or, on failure, all as they were
(:func:`traincast.util.fileio.atomic_write_many`); an output that is one of the run's trace
files is refused.

Errors: :class:`~traincast.errors.OutputError` when the folder does not exist or is not
writable, the disk is full, or an output is an input; :class:`~traincast.export.chakra.et_def.ChakraError` when protobuf is missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from traincast.export.chakra.et_file import et_paths
from traincast.export.chakra.nodes import ChakraTrace, to_chakra
from traincast.trace.traceset import TraceSet
from traincast.util.fileio import atomic_write_many

if TYPE_CHECKING:  # pragma: no cover
    from traincast.predict.prediction import Prediction


def chakra_outputs(prefix: str | Path, ranks: Iterable[int]) -> list[Path]:
    """Every file :func:`write_chakra` may write for ``ranks`` under ``prefix``."""
    p = Path(prefix)
    return [*et_paths(p, ranks).values(), p.parent / f"{p.name}.comm_groups.json"]


def write_chakra(trace: ChakraTrace, prefix: str | Path,
                 inputs: Iterable[str | Path | None] = ()) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` per rank (and ``<prefix>.comm_groups.json`` when process
    groups other than the default one are used): all new, or none changed.

    Raises:
        OutputError: the folder does not exist or is not writable, the disk is full, or an
            output is one of ``inputs`` (files or folders).
    """
    items = [(path, trace.encode(r)) for r, path in et_paths(prefix, sorted(trace.nodes)).items()]
    if trace.comm_groups:
        p = Path(prefix)
        items.append((p.parent / f"{p.name}.comm_groups.json",
                      orjson.dumps(trace.comm_groups, option=orjson.OPT_INDENT_2)))
    return atomic_write_many(items, gzip_if_gz=False, inputs=inputs)


def export_chakra(source: Prediction | TraceSet, prefix: str | Path, **kwargs: Any
                  ) -> tuple[list[Path], ChakraTrace]:
    """:func:`to_chakra` then :func:`write_chakra`; returns (paths written, trace)."""
    trace = to_chakra(source, **kwargs)
    ts = source if isinstance(source, TraceSet) else source.measured
    return write_chakra(trace, prefix, [info.path for info in ts.ranks.values()]), trace
