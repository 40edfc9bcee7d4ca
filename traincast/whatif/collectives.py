"""What-if changes of the network or of the data-parallel world size.

Each matched collective's transfer time (its EXEC edge and the COLLECTIVE edges into its end)
is multiplied by ``model(S, n_new, topology_new) / model(S, n_old, topology_old)`` from the
communication model (:mod:`traincast.costs.comm`), fitted on the trace's own collectives
when no model is given. A world size of 1 removes the collectives' cost and the waiting for
peers. A recording with one rank has one-rank collectives that moved no data; they get the
model's absolute time for the new group size (a model must then be given: nothing in the
trace calibrates the network). Extra ranks are assumed to behave like the recorded ones (data parallelism: every
rank runs the same program), so the recorded ranks are simulated and only the collectives
change; this cannot show a straggler among ranks that were never recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.costs.comm import CommModel, collective_calls, samples_from_trace
from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.graph.nesting import thread_edge_owner
from traincast.trace.traceset import TraceSet
from traincast.whatif.spec import WhatIf

if TYPE_CHECKING:  # pragma: no cover
    pass


def rescale_collectives(ts: TraceSet, g: ExecutionGraph, what: WhatIf, comm: Any = None
                        ) -> list[str]:
    """Rescale the collectives of ``g`` in place; returns notes for the report.

    Raises:
        ParameterError: world size below the largest process group's own layout, or no way
            to model the collectives.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    calls = collective_calls(ts)
    # matched calls carry their transfer time; unmatched ones (peers' traces absent) their
    # measured duration, which is rescaled the same way (a coarser approximation: it may
    # include waiting for peers)
    matched = calls
    if matched.empty:
        return ["no collectives: the network what-if changes nothing"]
    world = ts.world_size
    new_world = what.world_size or world
    if world <= 1 and comm is None:
        raise ParameterError(
            f"--what-if world_size={new_world}: the recording has one rank, so nothing "
            "calibrates the network; give a communication model (`traincast calibrate comm` "
            "on an nccl-tests log or a multi-rank trace, then --comm-model)")
    if comm is None:
        samples = samples_from_trace(ts)
        intra, inter = recorded_links_gbit(ts)
        if not samples.empty:
            comm = CommModel.fit(samples, intra_gbps=intra)
        elif intra is not None:
            # nothing to calibrate on (peers' traces absent): the catalog's links, with no
            # latency term (unknown), so ratios are bandwidth ratios
            comm = CommModel.from_links(intra, inter, 0.0, gpus_per_node=world)
        else:
            raise ParameterError("no matched collective with a known size to calibrate the "
                                 "communication model and no catalog node for the recorded "
                                 "device; load all ranks' traces")
    per_node = what.ranks_per_node or _recorded_ranks_per_node(ts)
    if what.ranks_per_node is None and recorded_node(ts) is None and \
            len({i.host for i in ts.ranks.values()}) <= 1:
        per_node = max(per_node, new_world)  # no catalog node: the new ranks share the host
    base = comm
    inter = what.inter_node_gbps
    if inter is None and new_world > per_node:
        inter = recorded_links_gbit(ts)[1]
        if inter is None:
            raise ParameterError(f"--what-if world_size={new_world} spans nodes of {per_node} "
                                 "ranks: give the network with inter_node_gbps=N (Gb/s per "
                                 "GPU) or ranks_per_node")
    changed = comm.with_bandwidth(intra_gbps=what.intra_node_gbps, inter_gbps=inter) if (
        what.intra_node_gbps or inter) else comm
    exe_of = g.exec_edge_of_node()
    # host-side collectives that no peer matched (gloo with absent peers, one-rank groups)
    # have no EXEC edge: their time is the THREAD segment(s) they own on their thread
    owner = thread_edge_owner(g)
    owned = pd.Series(np.flatnonzero(owner >= 0)).groupby(owner[owner >= 0]).apply(list)
    col = g.edges_of_kind(EdgeKind.COLLECTIVE)
    col_dst = g.dst[col] // 2
    n_done = 0
    removed = 0
    for row in matched.itertuples(index=False):
        node = int(row.event)
        n_old = int(row.group_size)
        n_new = n_old if n_old != world else new_world  # data-parallel groups span the world
        e = int(exe_of[node])
        if e < 0:
            segs = owned.get(node)
            if not segs:
                continue
            e = int(max(segs, key=lambda k: g.lag[k]))  # its longest own segment
        if n_new <= 1:
            g.set_lags(e, 0)
            into = col[col_dst == node]
            g.set_lags(into, 0)
            g.src[into] = g.dst[into] - 1  # no peer to wait for: depend on own start
            removed += 1
            continue
        size = int(row.size_bytes)
        if size <= 0:
            continue
        if n_old <= 1:
            # a one-rank group moved no data: the new collective takes the model's absolute
            # time (the ranks are clones, so none waits for a late peer)
            t_new = _predict(changed, row.collective, size, n_new, min(per_node, n_new),
                             what.comm_algorithm)
            g.set_lags(e, max(int(g.lag[e]), int(round(t_new))))
            n_done += 1
            continue
        t_old = base.predict_ns(row.collective, size, n_old,
                                ranks_per_node=min(per_node, n_old))
        t_new = _predict(changed, row.collective, size, n_new, min(per_node, n_new),
                         what.comm_algorithm)
        if not (t_old > 0 and np.isfinite(t_new)):
            continue
        r = t_new / t_old
        g.set_lags(e, int(round(g.lag[e] * r)))
        into = col[col_dst == node]
        g.set_lags(into, np.rint(g.lag[into] * r).astype(np.int64))
        n_done += 1
    notes = [f"{n_done} collectives rescaled with the communication model"
             f" (world size {world} -> {new_world}, {per_node} ranks per node)"]
    n_unmatched = int((calls["group_id"] < 0).sum())
    if n_unmatched:
        notes.append(f"{n_unmatched} of them unmatched across ranks: their whole measured "
                     "duration (which may include waiting for peers) was rescaled")
    if removed:
        notes.append(f"{removed} collectives removed (world size 1)")
    return notes


def _predict(model: Any, collective: str, size: int, n: int, per_node: int,
             algorithm: str | None) -> float:
    """The model's time; with an algorithm that does not apply to this collective (e.g.
    tree for an all_gather), the fitted curve."""
    if algorithm is None:
        return float(model.predict_ns(collective, size, n, ranks_per_node=per_node))
    try:
        return float(model.predict_ns(collective, size, n, ranks_per_node=per_node,
                                      algorithm=algorithm))
    except ParameterError:
        return float(model.predict_ns(collective, size, n, ranks_per_node=per_node))


def recorded_node(ts: TraceSet) -> Any:
    """The catalog node preset of the recorded GPU (exact GPU, else same family and form
    factor), or None."""
    cat = load_catalog()
    gpu = cat.match_first(p for info in ts.ranks.values() for p in info.device_properties)
    if gpu is None:
        return None

    def family(name: str) -> tuple[str, bool]:
        return name.split("-")[0], "SXM" in name

    nodes = [cat.node(n) for n in cat.names()["node"]]
    for same in (lambda nd: nd.gpu.name == gpu.name,
                 lambda nd: family(nd.gpu.name) == family(gpu.name)):
        for node in nodes:
            if same(node):
                return node
    return None


def recorded_links_gbit(ts: TraceSet) -> tuple[float | None, float | None]:
    """Nominal intra- and inter-node bandwidth per GPU (Gb/s per direction) of the recorded
    system: the catalog node preset whose GPU is the recorded device, else one of the same
    GPU family and form factor (e.g. DGX A100 for an A100-SXM4-40GB); None if none."""
    node = recorded_node(ts)
    if node is None:
        return None, None
    inter = node.inter_gbps_per_gpu if node.inter_link is not None else None
    return node.intra_gbps_per_gpu * 8, (inter * 8 if inter else None)


def _recorded_ranks_per_node(ts: TraceSet) -> int:
    """GPUs per node: the catalog node of the recorded GPU, else the ranks seen per host."""
    node = recorded_node(ts)
    if node is not None:
        return int(node.gpus_per_node)
    hosts = {info.host for info in ts.ranks.values() if info.host}
    if len(hosts) == 1:
        return ts.world_size
    return max(1, len(ts.ranks) // max(1, len(hosts))) if hosts else ts.world_size
