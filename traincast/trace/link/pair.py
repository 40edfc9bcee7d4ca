"""Pairing PyTorch execution-trace (ET) files with the ranks of a TraceSet, and attaching them.

Each ET file is paired with a rank by the number in its name (``rank-N.et.json.gz``,
``worker_N...``), or, with one rank and one ET, with that rank (:func:`pair_files`). The ET
nodes are linked to the rank's events by :func:`traincast.trace.link.match.link_execution_trace`
(``rf_id`` <-> ``Record function id``, else op names in order), which also refuses an ET that
belongs to another run; an ET whose collectives name another issuing rank is refused too.
:func:`attach_execution_traces` stores the result in ``ts.et_nodes`` / ``ts.et_links`` and gives
linked events without recorded shapes the ET's input shapes.

Raises :class:`~traincast.errors.ExecutionTraceMismatchError` for files that cannot be paired
or linked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traincast.errors import ExecutionTraceMismatchError
from traincast.trace import arrow as A
from traincast.trace.cache_et import read_et_cached
from traincast.trace.link.cache_link import link_cached
from traincast.trace.readers.et import ExecutionTrace
from traincast.trace.traceset import TraceSet

__all__ = ["attach_execution_traces", "pair_files"]

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


def _check_comm_rank(et: ExecutionTrace, rank: int, ts: TraceSet, path: Path) -> None:
    """Refuse an ET whose collectives were issued by another rank.

    ``record_param_comms`` nodes record the issuing rank within the process group; it is the
    global rank when the group is the world (its size equals the world size, or the run has
    a single process group). Linking by op names alone cannot tell two ranks of the same
    program apart, this can.
    """
    nodes = et.nodes
    if "comm_rank" not in nodes.column_names:
        return
    comm_rank = A.to_numpy(nodes.column("comm_rank"))
    size = A.to_numpy(nodes.column("comm_pg_size"))
    info = ts.ranks[rank]
    single_group = len(info.pg_config) <= 1
    world = ts.world_size
    global_view = (comm_rank >= 0) & ((size == world) | ((size <= 0) & single_group))
    seen = np.unique(comm_rank[global_view])
    if seen.size and rank not in seen.tolist():
        raise ExecutionTraceMismatchError(
            f"its collectives were issued by rank {int(seen[0])}, not by rank {rank} "
            f"({info.path.name if info.path else 'profiler trace'})", path)


def attach_execution_traces(ts: TraceSet, ets: list[Path], store: Any = None) -> None:
    """Read and link (through the parse cache ``store``, a
    :class:`~traincast.trace.cache.TraceCache`, when given: :mod:`~traincast.trace.cache_et`,
    :mod:`~traincast.trace.link.cache_link`) and store the ETs in ``ts.et_nodes`` and
    ``ts.et_links`` (in place)."""
    pairs = pair_files(ts.rank_ids, ets)
    link_rank, link_node, link_event = [], [], []
    for rank, path in sorted(pairs.items()):
        et = read_et_cached(path, store)
        _check_comm_rank(et, rank, ts, path)
        lo, hi = ts.rank_slice(rank)
        nodes, rows = link_cached(et, ts.events.slice(lo, hi - lo), path,
                                  ts.ranks[rank].path, rank, store)
        rows = rows + lo
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
    _add_shapes(ts)


def _add_shapes(ts: TraceSet) -> None:
    """Give linked events that have no recorded shapes the ET's input shapes and types."""
    if ts.et_links is None or ts.et_links.num_rows == 0:
        return
    links = ts.et_links
    link_rank = A.to_numpy(links.column("rank"))
    link_node = A.to_numpy(links.column("node_id"))
    link_event = A.to_numpy(links.column("event"))
    # events with recorded shapes keep them
    bare = ~np.isin(link_event, A.to_numpy(ts.shapes.column("event")))
    ev_rows, dims, types = [], [], []
    for rank in np.unique(link_rank).tolist():
        nodes = ts.et_nodes[rank].nodes
        ids = A.to_numpy(nodes.column("id"))
        sel = bare & (link_rank == rank)
        nid, rows = link_node[sel], link_event[sel]
        at = np.searchsorted(ids, nid)
        found = at < ids.size
        found[found] = ids[at[found]] == nid[found]
        at, rows = at[found], rows[found]
        if not at.size:
            continue
        shp = A.take_strings(nodes.column("input_shapes"), at)
        typ = A.take_strings(nodes.column("input_types"), at)
        for row, s, t in zip(rows.tolist(), shp, typ, strict=True):
            if s not in (None, "", "[]"):
                ev_rows.append(row)
                dims.append(s)
                types.append(t or "")
    if ev_rows:
        extra = pa.Table.from_arrays(
            [A.from_numpy(np.asarray(ev_rows, np.int64)), A.strings(dims), A.strings(types)],
            names=["event", "input_dims", "input_types"])
        ts.shapes = _by_event(pa.concat_tables([ts.shapes, extra]))


def _by_event(shapes: pa.Table) -> pa.Table:
    """``shapes.sort_by("event")`` (stable) from the buffers: ``sort_by`` imports Arrow's
    compute functions (and pandas with them). The texts must hold no null."""
    event = A.to_numpy(shapes.column("event"))
    order = np.argsort(event, kind="stable")
    texts = [A.strings(A.take_strings(shapes.column(c), order))  # type: ignore[arg-type]
             for c in shapes.column_names[1:]]
    return pa.Table.from_arrays([A.from_numpy(event[order]), *texts], schema=shapes.schema)
