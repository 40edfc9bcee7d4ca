"""Structural checks and critical paths of Chakra nodes (:func:`check_chakra`).

Input: ``{rank: [Node, ...]}``, a :class:`~traincast.export.chakra.nodes.ChakraTrace` or a
file prefix. Output: a JSON-able report (durations in whole microseconds, the unit of
``duration_micros``). The schedule runs every node as soon as its ``data_deps`` and
``ctrl_deps`` are done, and starts the members of each matched collective (attribute
``traincast_collective``) together once all are ready, as Chakra consumers run collectives.

Errors: :class:`~traincast.export.chakra.et_def.ChakraError` when a prefix has no file or a
file cannot be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from traincast.export.chakra.et_def import (
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    NODE_TYPE_NAMES,
    ChakraError,
)
from traincast.export.chakra.et_file import find_et_files, read_chakra
from traincast.export.chakra.nodes import COLLECTIVE_ATTR, ChakraTrace


def check_chakra(ranks: dict[int, list[Any]] | ChakraTrace | str | Path) -> dict[str, Any]:
    """Structural checks and the critical path of Chakra nodes (read back or in memory).

    Per rank: node count by type, ``data_deps``/``ctrl_deps`` counts, dependencies on ids
    that do not exist, duplicate ids, whether the dependencies form a DAG, and the longest
    path through it with node durations (µs; collectives count their own duration, without
    waiting for peers). ``makespan_us`` is the longest path over all ranks together, the
    members of each matched collective (attribute ``traincast_collective``) starting together
    once all of them are ready, as Chakra consumers run collectives; each rank's
    ``finish_us`` is its last node's end in that schedule, and ``start_drift_us`` compares the
    schedule's start of every non-communication node with its ``start_time_micros`` (the
    replayed start).

    Args:
        ranks: ``{rank: [Node, ...]}``, a :class:`ChakraTrace`, or a file prefix whose
            ``<prefix>.<rank>.et`` files are read.
    """
    if isinstance(ranks, ChakraTrace):
        ranks = ranks.nodes
    elif isinstance(ranks, (str, Path)):
        files = find_et_files(ranks)
        if not files:
            raise ChakraError("no <prefix>.<rank>.et file", ranks)
        ranks = {r: read_chakra(p)[1] for r, p in files.items()}
    report: dict[str, Any] = {"ranks": {}, "ok": True}
    # global graph: (rank, id) -> index
    gid: dict[tuple[int, int], int] = {}
    dur: list[int] = []
    recorded: list[int] = []
    is_comm: list[bool] = []
    deps: list[list[int]] = []
    coll: dict[int, list[int]] = {}
    for r, nodes in sorted(ranks.items()):
        ids = [int(nd.id) for nd in nodes]
        idset = set(ids)
        missing = sum(1 for nd in nodes for d in list(nd.data_deps) + list(nd.ctrl_deps)
                      if int(d) not in idset)
        types: dict[str, int] = {}
        for nd in nodes:
            t = NODE_TYPE_NAMES.get(int(nd.type), str(int(nd.type)))
            types[t] = types.get(t, 0) + 1
        for nd in nodes:
            gid[(r, int(nd.id))] = len(dur)
            dur.append(int(nd.duration_micros))
            recorded.append(int(nd.start_time_micros))
            is_comm.append(int(nd.type) in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE))
            deps.append([])
        for nd in nodes:
            me = gid[(r, int(nd.id))]
            deps[me] = [gid[(r, int(d))] for d in list(nd.data_deps) + list(nd.ctrl_deps)
                        if int(d) in idset]
            for a in nd.attr:
                if a.name == COLLECTIVE_ATTR:
                    coll.setdefault(int(a.int64_val), []).append(me)
        local = [gid[(r, i)] for i in ids]
        acyclic, cp, path = _longest_path(local, dur, deps)
        rep = {
            "nodes": len(nodes), "by_type": types,
            "data_deps": sum(len(nd.data_deps) for nd in nodes),
            "ctrl_deps": sum(len(nd.ctrl_deps) for nd in nodes),
            "missing_deps": missing, "duplicate_ids": len(ids) - len(idset),
            "acyclic": acyclic, "critical_path_us": cp, "critical_path_nodes": len(path),
        }
        report["ranks"][r] = rep
        if missing or rep["duplicate_ids"] or not acyclic:
            report["ok"] = False
    # collectives: a barrier node per matched collective
    base = len(dur)
    for k, members in enumerate(coll.values()):
        b = base + k
        dur.append(0)
        deps.append(sorted({d for m in members for d in deps[m]}))
        for m in members:
            deps[m] = [b]
    acyclic, span, path, start = _schedule(list(range(len(dur))), dur, deps)
    report["makespan_us"] = span
    report["makespan_acyclic"] = acyclic
    report["collectives_synchronised"] = len(coll)
    report["nodes"] = base
    report["data_deps"] = sum(v["data_deps"] for v in report["ranks"].values())
    if not acyclic:
        report["ok"] = False
        return report
    # earliest start of every node in that schedule against its recorded start_time_micros
    drift = []
    for (r, _i), k in gid.items():
        rep = report["ranks"][r]
        rep["finish_us"] = max(rep.get("finish_us", 0), start[k] + dur[k])
        if not is_comm[k]:  # a collective's recorded start is its own arrival
            drift.append(start[k] - recorded[k])
    if drift and any(recorded):
        d = np.asarray(drift, np.int64)
        report["start_drift_us"] = {"mean_abs": float(np.abs(d).mean()),
                                    "max_early": int(-min(d.min(), 0)),
                                    "max_late": int(max(d.max(), 0))}
    return report


def _longest_path(members: list[int], dur: list[int], deps: list[list[int]]
                  ) -> tuple[bool, int, list[int]]:
    """(acyclic, length, path) of the longest path among ``members`` (node durations)."""
    acyclic, span, path, _ = _schedule(members, dur, deps)
    return acyclic, span, path


def _schedule(members: list[int], dur: list[int], deps: list[list[int]]
              ) -> tuple[bool, int, list[int], dict[int, int]]:
    """(acyclic, length, path, earliest starts) of the longest path among ``members``."""
    mset = set(members)
    indeg = dict.fromkeys(members, 0)
    succ: dict[int, list[int]] = {i: [] for i in members}
    for i in members:
        for d in deps[i]:
            if d in mset:
                indeg[i] += 1
                succ[d].append(i)
    ready = [i for i in members if indeg[i] == 0]
    finish: dict[int, int] = {}
    best_pred: dict[int, int] = {}
    start: dict[int, int] = dict.fromkeys(members, 0)
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        finish[i] = start[i] + dur[i]
        for j in succ[i]:
            if finish[i] >= start[j]:
                if finish[i] > start[j] or j not in best_pred:
                    best_pred[j] = i
                start[j] = finish[i]
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if done != len(members):
        return False, 0, [], start
    if not finish:
        return True, 0, [], start
    last = max(finish, key=lambda i: finish[i])
    path = [last]
    while path[-1] in best_pred:
        path.append(best_pred[path[-1]])
    return True, int(finish[last]), path[::-1], start
