"""Writing Chakra files: ``<prefix>.<rank>.et`` per rank and ``<prefix>.comm_groups.json``.

``comm_groups.json`` is ASTRA-sim's communicator-group file, ``{pg_name: [ranks]}``, written
only when a process group other than the default one is used. Every file is written
atomically (:func:`traincast.util.fileio.atomic_write`).

Errors: :class:`~traincast.errors.OutputError` when the folder does not exist or is not
writable; :class:`~traincast.export.chakra.et_def.ChakraError` when protobuf is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from traincast.export.chakra.et_file import et_paths
from traincast.export.chakra.nodes import ChakraTrace, to_chakra
from traincast.util.fileio import atomic_write

if TYPE_CHECKING:  # pragma: no cover
    from traincast.predict.prediction import Prediction
    from traincast.trace.traceset import TraceSet


def write_chakra(trace: ChakraTrace, prefix: str | Path) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` per rank (and ``<prefix>.comm_groups.json`` when process
    groups other than the default one are used), each atomically.

    Raises:
        OutputError: the folder does not exist or is not writable.
    """
    out = []
    for r, path in et_paths(prefix, sorted(trace.nodes)).items():
        out.append(atomic_write(path, trace.encode(r), gzip_if_gz=False))
    if trace.comm_groups:
        p = Path(prefix)
        out.append(atomic_write(p.parent / f"{p.name}.comm_groups.json",
                                orjson.dumps(trace.comm_groups, option=orjson.OPT_INDENT_2)))
    return out


def export_chakra(source: Prediction | TraceSet, prefix: str | Path, **kwargs: Any
                  ) -> tuple[list[Path], ChakraTrace]:
    """:func:`to_chakra` then :func:`write_chakra`; returns (paths written, trace)."""
    trace = to_chakra(source, **kwargs)
    return write_chakra(trace, prefix), trace
