"""Attach PyTorch execution traces (ET) to the ranks of a TraceSet.

Each ET file is paired with a rank by the number in its name (``rank-N.et.json.gz``), or,
with one rank and one ET, with that rank. The ET nodes are linked to the rank's events by
:func:`traincast.trace.readers.et.link_execution_trace` (``rf_id`` <-> ``Record function
id``), which also refuses an ET that belongs to another run.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from traincast.errors import ExecutionTraceMismatchError
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet

_RANK = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def pair_files(ranks: list[int], ets: list[Path]) -> dict[int, Path]:
    """rank -> ET file.

    Raises:
        ExecutionTraceMismatchError: an ET names a rank that has no profiler trace, or
            names cannot be paired.
    """
    if len(ets) == 1 and len(ranks) == 1 and not _RANK.search(ets[0].name):
        return {ranks[0]: ets[0]}
    out: dict[int, Path] = {}
    for f in ets:
        m = _RANK.search(f.name)
        if not m:
            raise ExecutionTraceMismatchError(
                "cannot tell the rank of this execution trace from its name (rank-N...)", f)
        r = int(m.group(1))
        if r not in ranks:
            raise ExecutionTraceMismatchError(
                f"execution trace of rank {r}, but no profiler trace of rank {r}", f)
        out[r] = f
    return out


def attach_execution_traces(ts: TraceSet, ets: list[Path]) -> None:
    """Read, link and store the ETs in ``ts.et_nodes`` and ``ts.et_links`` (in place)."""
    from traincast.trace.readers.et import link_execution_trace, read_execution_trace

    pairs = pair_files(ts.rank_ids, ets)
    link_rank, link_node, link_event = [], [], []
    for rank, path in sorted(pairs.items()):
        et = read_execution_trace(path)
        lo, hi = ts.rank_slice(rank)
        links = link_execution_trace(et, ts.events.slice(lo, hi - lo), path=path)
        nodes = links.column("node_id").to_numpy()
        rows = links.column("event").to_numpy() + lo
        link_rank.append(np.full(nodes.size, rank, np.int32))
        link_node.append(nodes.astype(np.int64))
        link_event.append(rows.astype(np.int64))
        ts.et_nodes[rank] = et
        ts.ranks[rank].et_path = path

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)

    ts.et_links = pa.Table.from_arrays(
        [A.from_numpy(cat(link_rank, np.int32)), A.from_numpy(cat(link_node, np.int64)),
         A.from_numpy(cat(link_event, np.int64))],
        names=["rank", "node_id", "event"],
    )
