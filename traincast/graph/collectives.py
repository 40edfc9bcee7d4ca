"""Matching collective calls across ranks.

Calls are matched by process group and c10d sequence number where the trace records it,
otherwise by their order within the group on each rank, per training step (the k-th call of group G in step N on rank a is the k-th on rank b), which is
the order NCCL and gloo require every member to issue them in (NCCL user guide, "Group
calls"/communicator semantics; c10d sequence numbers count the same thing). Calls outside any
step, and calls whose peers' traces are absent, stay unmatched and are replayed with their
measured durations.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traincast.errors import CollectiveMismatchError, TraincastWarning
from traincast.trace.arrow import to_numpy
from traincast.trace.traceset import TraceSet


@dataclass
class MatchedCollectives:
    """Result of matching.

    ``groups``: list of int64 arrays of event rows (the executing events: NCCL kernels or
    gloo ranges) that form one collective across ranks. ``unmatched``: executing event rows
    of calls replayed with measured durations. ``table``: the collectives table with the
    executing event, step, group id (-1 unmatched) and ``ranks_key`` (int64, equal for calls
    whose process groups have the same member ranks; it replaces the ``members`` ids,
    see :func:`rank_list_keys` for the members) added, as pandas. Shared between
    callers (memoised on the TraceSet): read it, do not modify it.
    """

    groups: list[np.ndarray]
    unmatched: np.ndarray
    table: pd.DataFrame
    #: matched calls whose ranks disagree on the size (:func:`size_mismatches`)
    size_mismatch: pd.DataFrame = field(default_factory=pd.DataFrame)


#: collectives whose every member moves the same number of bytes (in and out): a member with
#: another size is a bug of the program or of the trace (all_to_all, send/recv, gather and
#: scatter are uneven by design and are not checked)
SYMMETRIC = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter")


def match_collectives(ts: TraceSet, *, strict: bool = False) -> MatchedCollectives:
    """Group the collective calls of ``ts`` into cross-rank collectives.

    The result is memoised on ``ts`` (predict, the collectives table and the straggler
    report all need it) and recomputed when its tables are replaced. Matched calls of a
    :data:`SYMMETRIC` collective whose ranks disagree on the size are matched anyway (each
    rank's call keeps its own size) with one warning naming the first of them
    (``size_mismatch`` of the result lists them all).

    Args:
        strict: refuse size mismatches instead of warning.

    Raises:
        CollectiveMismatchError: ranks disagree on which collective comes next in a process
            group (different op or different number of calls in a step); with ``strict``,
            also on the size of a matched call.
    """
    key = (id(ts.events), id(ts.collectives), id(ts.iterations))
    hit = ts.memo.get("match_collectives")
    if hit is not None and hit[0] == key:
        res = hit[1]
    else:
        res = _match(ts)
        res.size_mismatch = size_mismatches(res)
        ts.memo["match_collectives"] = (key, res)
        if len(res.size_mismatch) and not strict:
            warnings.warn(_mismatch_line(ts, res.size_mismatch) + "; matched anyway, each rank "
                          "replayed with its own size (--strict: refuse)", TraincastWarning,
                          stacklevel=2)
    if strict and len(res.size_mismatch):
        first = res.size_mismatch.iloc[0]
        raise CollectiveMismatchError(_mismatch_line(ts, res.size_mismatch, path=False),
                                      ts.ranks[int(first["rank_small"])].path)
    return res


def size_mismatches(matched: MatchedCollectives) -> pd.DataFrame:
    """Matched calls of a :data:`SYMMETRIC` collective whose members disagree on ``in_bytes``
    or ``out_bytes`` (sizes the trace does not record, < 0, are not compared).

    Returns one row per such call: ``group_id``, ``collective``, ``process_group``, ``step``,
    ``which`` (``in_bytes`` or ``out_bytes``), ``rank_small``, ``bytes_small``,
    ``rank_large``, ``bytes_large``.
    """
    cols = ["group_id", "collective", "process_group", "step", "which", "rank_small",
            "bytes_small", "rank_large", "bytes_large"]
    t = matched.table
    if t.empty:
        return pd.DataFrame(columns=cols)
    t = t[(t["group_id"] >= 0) & t["collective"].isin(SYMMETRIC)]
    rows = []
    for which in ("in_bytes", "out_bytes"):
        v = t[t[which] >= 0]
        if v.empty:
            continue
        g = v.groupby("group_id")[which]
        lo, hi = g.transform("min"), g.transform("max")
        bad = v[(lo != hi).to_numpy()]
        for gid, sub in bad.groupby("group_id", sort=True):
            small, large = sub.loc[sub[which].idxmin()], sub.loc[sub[which].idxmax()]
            rows.append([int(gid), small["collective"], small["process_group"],
                         int(small["step"]), which, int(small["rank"]), int(small[which]),
                         int(large["rank"]), int(large[which])])
    out = pd.DataFrame(rows, columns=cols)
    return out.drop_duplicates("group_id").sort_values("group_id").reset_index(drop=True)


def _mismatch_line(ts: TraceSet, bad: pd.DataFrame, path: bool = True) -> str:
    f = bad.iloc[0]
    where = (f"{ts.ranks[int(f['rank_small'])].path}: "
             if path and ts.ranks[int(f["rank_small"])].path else "")
    more = f" (and {len(bad) - 1} more calls)" if len(bad) > 1 else ""
    return (f"{where}{f['collective']} sizes differ across ranks{more}: process group "
            f"{f['process_group']!r} step {int(f['step'])}, rank {int(f['rank_small'])} "
            f"{int(f['bytes_small']):,} B, rank {int(f['rank_large'])} "
            f"{int(f['bytes_large']):,} B ({f['which']})")


def rank_list_keys(ts: TraceSet) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, ...]]]:
    """Per collectives-table row: a key shared by rows with the same member ranks (as a
    set), whether every member's trace is loaded (and there are at least two), and the sorted
    members of each key.

    The member lists are stored once per distinct list (``TraceSet.member_lists``,
    referenced by ``collectives.members``), so the work is per distinct list, not per call
    and rank; keys are numbered in the order of their first row.

    Returns:
        (int64[rows] keys, bool[rows] complete, key -> sorted tuple of ranks).

    Raises:
        CollectiveMismatchError: a row references a member list the TraceSet does not hold.
    """
    n = ts.collectives.num_rows
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, bool), {}
    ids = to_numpy(ts.collectives.column("members")).astype(np.int64)
    lists = [] if ts.member_lists is None else ts.member_lists.column("ranks").to_pylist()
    if ids.min() < 0 or ids.max() >= len(lists):
        raise CollectiveMismatchError("collectives.members references a missing member list")
    key_of: dict[tuple[int, ...], int] = {}
    list_key = np.array([key_of.setdefault(tuple(sorted(m or ())), len(key_of))
                         for m in lists], np.int64)
    sorted_lists = list(key_of)
    raw = list_key[ids]
    uniq, first_idx, inv = np.unique(raw, return_index=True, return_inverse=True)
    renumber = np.empty(uniq.size, np.int64)
    renumber[np.argsort(first_idx, kind="stable")] = np.arange(uniq.size)
    codes = renumber[inv.reshape(-1)]
    members = {int(renumber[i]): sorted_lists[int(k)] for i, k in enumerate(uniq.tolist())}
    members = dict(sorted(members.items()))
    present = set(ts.rank_ids)
    key_complete = np.array([len(m) > 1 and present.issuperset(m)
                             for m in members.values()], bool)
    return codes, key_complete[codes], members


def _match(ts: TraceSet) -> MatchedCollectives:
    # the member lists are keyed in rank_list_keys; pandas gets their key
    df = ts.collectives.drop_columns(["members"]).to_pandas()
    if df.empty:
        df["exec_event"] = pd.Series(dtype="int64")
        df["step"] = pd.Series(dtype="int32")
        df["group_id"] = pd.Series(dtype="int64")
        df["ranks_key"] = pd.Series(dtype="int64")
        return MatchedCollectives([], np.empty(0, np.int64), df)
    iteration = ts.events.column("iteration").to_numpy()
    df["exec_event"] = np.where(df["kernel_event"] >= 0, df["kernel_event"], df["event"])
    df["step"] = iteration[df["event"].to_numpy()]
    df["group_id"] = -1
    keys, complete, ranks_of = rank_list_keys(ts)
    df["complete"] = complete
    df["ranks_key"] = keys
    df = df.sort_values(["rank", "event"], kind="stable").reset_index(drop=True)
    df["ordinal"] = df.groupby(["rank", "process_group", "ranks_key", "step"]).cumcount()
    # where every call of a process group carries its c10d sequence number, match on it:
    # robust to profiling windows that start or end at different calls on different ranks
    by_seq = (df.groupby("process_group")["recorded_seq"].transform("min") >= 0).to_numpy()
    groups: list[np.ndarray] = []

    members: list[np.ndarray] = []

    def add_group(g: pd.DataFrame, where: str) -> None:
        names = g["collective"].unique()
        # a point-to-point message is one send and its matching recv (MPI, NCCL send/recv)
        if len(names) > 1 and not (len(g) == 2 and set(names) == {"send", "recv"}):
            raise CollectiveMismatchError(
                f"{where}: ranks disagree on the collective ({', '.join(sorted(names))})",
                ts.ranks[int(g["rank"].iloc[0])].path)
        members.append(g.index.to_numpy())
        groups.append(g["exec_event"].to_numpy(np.int64))

    seq_rows = df[by_seq & df["complete"].to_numpy()]
    for (pg, rk, seq), g in seq_rows.groupby(["process_group", "ranks_key", "recorded_seq"],
                                              sort=False):
        if g["rank"].nunique() == len(ranks_of[rk]) == len(g):  # absent windows: unmatched
            add_group(g, f"process group {pg!r} sequence number {seq}")
    cand = df[~by_seq & df["complete"].to_numpy() & (df["step"] >= 0).to_numpy()]
    for (pg, rk, step), sub in cand.groupby(["process_group", "ranks_key", "step"],
                                             sort=False):
        ranks = ranks_of[rk]
        counts = sub.groupby("rank").size()
        if len(counts) != len(ranks) or counts.nunique() != 1:
            lo, hi = counts.idxmin(), counts.idxmax()
            missing = sorted(set(ranks) - set(counts.index))
            detail = (f"rank {missing[0]} has none" if missing else
                      f"rank {lo} has {counts[lo]}, rank {hi} has {counts[hi]}")
            raise CollectiveMismatchError(
                f"process group {pg!r} step {step}: ranks issued different numbers of "
                f"collectives ({detail})", ts.ranks[int(lo)].path)
        for ordinal, g in sub.groupby("ordinal", sort=True):
            add_group(g, f"process group {pg!r} step {step} call #{ordinal}")
    gid = np.full(len(df), -1, np.int64)
    for k, idx in enumerate(members):
        gid[idx] = k
    df["group_id"] = gid
    unmatched = df.loc[df["group_id"] < 0, "exec_event"].to_numpy(np.int64)
    return MatchedCollectives(groups, unmatched,
                              df.drop(columns=["complete", "ordinal"]))


#: offsets this small are the jitter of collective end times on one clock, not clock skew
SAME_CLOCK_NS = 20_000


def clock_offsets(ts: TraceSet, matched: MatchedCollectives) -> dict[int, int]:
    """Per-rank clock offset (ns to subtract from the rank's times) from matched collectives.

    Ranks on different hosts have different clocks. Every member of a collective finishes it
    at nearly the same instant (the last data arrives everywhere together, NCCL user guide;
    HTA aligns ranks the same way), so the offset of rank r is the median over matched
    collectives of (end on r - end on the lowest loaded rank). 0 for the lowest rank, for
    ranks sharing no collective with it, and when fewer than two ranks are loaded.

    Ranks that share one clock need no alignment, and aligning them would only trade true
    differences of a few µs between the members' end times for noise: when every offset is
    within :data:`SAME_CLOCK_NS` (clocks of different hosts differ by far more), or all
    ranks recorded the same ``host_name``, all offsets are 0.
    """
    ranks = ts.rank_ids
    offsets = {r: 0 for r in ranks}
    hosts = {info.host for info in ts.ranks.values()}
    if not matched.groups or len(ranks) < 2 or (len(hosts) == 1 and "" not in hosts):
        return offsets
    rows = np.concatenate(matched.groups)
    # the members' ends only (not a whole-job column)
    end = (to_numpy(ts.events.column("ts"))[rows].astype(np.int64)
           + to_numpy(ts.events.column("dur"))[rows])
    gid = np.repeat(np.arange(len(matched.groups)), [g.size for g in matched.groups])
    r_of = to_numpy(ts.events.column("rank"))[rows]
    ref = ranks[0]
    is_ref = r_of == ref
    ref_end = np.full(len(matched.groups), np.iinfo(np.int64).min, np.int64)
    ref_end[gid[is_ref]] = end[is_ref]
    has = ref_end[gid] != np.iinfo(np.int64).min
    if not has.any():
        return offsets
    diff = end[has] - ref_end[gid[has]]
    med = pd.Series(diff).groupby(r_of[has]).median()
    if med.abs().max() <= SAME_CLOCK_NS:
        return offsets
    for r, v in med.items():
        offsets[int(r)] = int(v)
    return offsets
