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
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from traincast.errors import CollectiveMismatchError, TraincastWarning
from traincast.trace import arrow as A
from traincast.trace.arrow import to_numpy
from traincast.trace.traceset import TraceSet

if TYPE_CHECKING:
    import pandas as pd

#: the columns of :func:`size_mismatches` (``MatchedCollectives.size_mismatch``)
_MISMATCH_COLUMNS = ["group_id", "collective", "process_group", "step", "which", "rank_small",
                     "bytes_small", "rank_large", "bytes_large"]


class MatchedCollectives:
    """Result of matching.

    ``groups``: list of int64 arrays of event rows (the executing events: NCCL kernels or
    gloo ranges) that form one collective across ranks. ``unmatched``: executing event rows
    of calls replayed with measured durations. ``table``: the collectives table with the
    executing event, step, group id (-1 unmatched) and ``ranks_key`` (int64, equal for calls
    whose process groups have the same member ranks; it replaces the ``members`` ids,
    see :func:`rank_list_keys` for the members) added, as pandas, rows sorted by (rank,
    event); made when first read. ``columns``: the same rows as numpy, without pandas
    (see :attr:`columns`). All of them are shared between callers (memoised on the
    TraceSet): read them, do not modify them.
    """

    def __init__(self, groups: list[np.ndarray], unmatched: np.ndarray,
                 columns: dict[str, np.ndarray], collective_names: list[str | None],
                 process_group_names: list[str | None], source: pa.Table,
                 order: np.ndarray) -> None:
        self.groups = groups
        self.unmatched = unmatched
        #: the rows of :attr:`table` (the collectives table's, sorted by (rank, event)) as
        #: numpy arrays, one value per call on a rank, without pandas: ``rank`` (int32),
        #: ``event``, ``kernel_event``, ``issue_event``, ``exec_event`` (int64 event rows;
        #: -1: none), ``step`` (int32 like the events' ``iteration``; -1 outside steps),
        #: ``group_id`` (int64, -1 unmatched), ``ranks_key`` (int64), ``in_bytes``,
        #: ``out_bytes`` (int64, -1 not recorded), ``collective`` and ``process_group``
        #: (int64 codes into :attr:`collective_names` / :attr:`process_group_names`, -1 for
        #: a null). Read-only (``writeable`` off) and shared by every caller. Readers write
        #: no nulls; in a hand-made table a null integer reads -1 here, and a null
        #: ``iteration`` makes ``step`` float64 with NaN (as in :attr:`table`).
        self.columns = columns
        self.collective_names = collective_names
        self.process_group_names = process_group_names
        self._source = source  # the collectives table, for ``table``
        self._order = order  # its rows in (rank, event) order
        self._mismatch_rows: list[list[Any]] | None = None

    def __repr__(self) -> str:
        return (f"MatchedCollectives({len(self.groups)} groups, {self.unmatched.size} unmatched"
                f" of {self._order.size} calls)")

    @cached_property
    def table(self) -> pd.DataFrame:
        """The collectives table (without ``members``) with ``exec_event``, ``step``,
        ``group_id`` and ``ranks_key`` added, rows sorted by (rank, event), as pandas."""
        import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

        df = self._source.drop_columns(["members"]).to_pandas()
        c = self.columns
        if df.empty:
            df["exec_event"] = pd.Series(dtype="int64")
            df["step"] = pd.Series(dtype="int32")
            df["group_id"] = pd.Series(dtype="int64")
            df["ranks_key"] = pd.Series(dtype="int64")
            return df
        df = df.take(self._order).reset_index(drop=True)
        # (computed as before from the pandas columns: a null kernel_event reads NaN there)
        df["exec_event"] = np.where(df["kernel_event"] >= 0, df["kernel_event"], df["event"])
        df["step"] = c["step"]
        df["group_id"] = c["group_id"]
        df["ranks_key"] = c["ranks_key"]
        return df

    @property
    def size_mismatch(self) -> pd.DataFrame:
        """Matched calls whose ranks disagree on the size (:func:`size_mismatches`)."""
        return _mismatch_frame(self)


def _mismatch_frame(matched: MatchedCollectives) -> pd.DataFrame:
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    if not matched._order.size:
        return pd.DataFrame(columns=_MISMATCH_COLUMNS)
    out = pd.DataFrame(_mismatch_rows(matched), columns=_MISMATCH_COLUMNS)
    return out.drop_duplicates("group_id").sort_values("group_id").reset_index(drop=True)


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
        bad = _mismatch_rows(res)
        ts.memo["match_collectives"] = (key, res)
        if bad and not strict:
            warnings.warn(_mismatch_line(ts, bad) + "; matched anyway, each rank "
                          "replayed with its own size (--strict: refuse)", TraincastWarning,
                          stacklevel=2)
    bad = _mismatch_rows(res)
    if strict and bad:
        raise CollectiveMismatchError(_mismatch_line(ts, bad, path=False),
                                      ts.ranks[int(bad[0][5])].path)
    return res


def size_mismatches(matched: MatchedCollectives) -> pd.DataFrame:
    """Matched calls of a :data:`SYMMETRIC` collective whose members disagree on ``in_bytes``
    or ``out_bytes`` (sizes the trace does not record, < 0, are not compared).

    Returns one row per such call: ``group_id``, ``collective``, ``process_group``, ``step``,
    ``which`` (``in_bytes`` or ``out_bytes``), ``rank_small``, ``bytes_small``,
    ``rank_large``, ``bytes_large``; sorted by ``group_id``.
    """
    return _mismatch_frame(matched)


def has_size_mismatches(matched: MatchedCollectives) -> bool:
    """Whether members of a matched collective recorded different sizes (what
    :func:`match_collectives` warns about, or refuses with ``strict``)."""
    return bool(_mismatch_rows(matched))


def _mismatch_rows(matched: MatchedCollectives) -> list[list[Any]]:
    """The rows of :func:`size_mismatches` as lists (memoised on ``matched``), one per group
    (its ``in_bytes`` row where both sizes differ), sorted by group id; without pandas.

    In a group, the small (large) member is the first, in (rank, event) order, with the
    smallest (largest) size: its collective, process group and step name the row."""
    if matched._mismatch_rows is not None:
        return matched._mismatch_rows
    c = matched.columns
    names = matched.collective_names
    sym = np.array([v in SYMMETRIC for v in names] + [False], bool)  # (-1: a null name)
    gid = c["group_id"]
    base = (gid >= 0) & sym[c["collective"]]
    found: dict[int, list[Any]] = {}
    for which in ("in_bytes", "out_bytes"):
        rows = np.flatnonzero(base & (c[which] >= 0))
        if rows.size == 0:
            continue
        g, v = gid[rows], c[which][rows]
        # per group: rows ordered by size, ties in table order (first min, first max)
        o = np.lexsort((rows, v, g))
        g_o = g[o]
        starts = np.flatnonzero(np.r_[True, g_o[1:] != g_o[:-1]])
        ends = np.r_[starts[1:], g_o.size]
        lo_v, hi_v = v[o[starts]], v[o[ends - 1]]
        for s0, e0 in zip(starts[lo_v != hi_v].tolist(), ends[lo_v != hi_v].tolist(),
                          strict=True):
            small = int(rows[o[s0]])
            top = v[o[e0 - 1]]  # the first row (table order) of the largest size
            k = e0 - 1
            while k > s0 and v[o[k - 1]] == top:
                k -= 1
            large = int(rows[o[k]])
            group = int(g_o[s0])
            if group in found:  # (drop_duplicates: the in_bytes row is kept)
                continue
            pg = int(c["process_group"][small])
            found[group] = [group, names[int(c["collective"][small])],
                            matched.process_group_names[pg] if pg >= 0 else None,
                            int(c["step"][small]), which, int(c["rank"][small]),
                            int(c[which][small]), int(c["rank"][large]),
                            int(c[which][large])]
    matched._mismatch_rows = [found[k] for k in sorted(found)]
    return matched._mismatch_rows


def _mismatch_line(ts: TraceSet, bad: list[list[Any]], path: bool = True) -> str:
    f = dict(zip(_MISMATCH_COLUMNS, bad[0], strict=True))
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


def _ints(col: pa.Array | pa.ChunkedArray, fill: int = -1) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, non-null mask or None) of an integer column, nulls read ``fill``."""
    arr = A.combined(col)
    return A.filled(arr, fill), A.valid_mask(arr)


def _string_codes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str | None]]:
    """int64 codes of a string column (equal strings, equal codes; -1 for a null) and the
    string of each code, without ``pyarrow.compute`` or Python objects per row: the rows
    are laid out as fixed-width bytes and sorted (numpy), their lengths told apart too.

    Dictionary columns are read through their codes and dictionary."""
    arr = A.combined(col)
    if isinstance(arr, pa.DictionaryArray):
        d_codes, values = _string_codes(arr.dictionary)
        idx, valid = _ints(arr.indices, 0)
        codes = d_codes[idx.astype(np.int64)] if d_codes.size else np.zeros(len(arr), np.int64)
        if valid is not None:
            codes[~valid] = -1
        return codes, values
    n = len(arr)
    if n == 0:
        return np.empty(0, np.int64), []
    plain = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
    off = np.zeros(n + 1, np.int64)
    if plain:  # (offsets into the data buffer; a slice starts at ``arr.offset``)
        wide = np.int64 if pa.types.is_large_string(arr.type) else np.int32
        off = np.frombuffer(arr.buffers()[1], wide)[arr.offset: arr.offset + n + 1].astype(
            np.int64)
    lens = np.diff(off)
    width = max(int(lens.max()), 1)
    if not plain or n * width > 1 << 26:  # (long names: Python strings cost less)
        known: dict[str | None, int] = {}
        codes = np.fromiter((known.setdefault(v, len(known)) for v in arr.to_pylist()),
                            np.int64, n)
        values = list(known)
        if None in known:
            codes[codes == known[None]] = -1
        return codes, values
    data = arr.buffers()[2]
    raw = (np.frombuffer(data, np.uint8)[off[0]:off[-1]] if data is not None
           else np.empty(0, np.uint8))
    short = width < 8  # (the bytes and the length in one uint64: one integer sort)
    mat = np.zeros((n, 8 if short else width), np.uint8)
    at = np.arange(raw.size) - np.repeat(off[:-1] - off[0], lens)
    mat[np.repeat(np.arange(n), lens), at] = raw
    if short:
        mat[:, 7] = lens
        key = mat.view(np.uint64).reshape(n)
    else:  # (S-strings drop trailing NULs: the lengths tell "a" from "a\0")
        _, text = np.unique(mat.view(f"S{width}").reshape(n), return_inverse=True)
        key = text.reshape(-1) * (width + 1) + lens
    _, first, codes = np.unique(key, return_index=True, return_inverse=True)
    codes = codes.reshape(-1).astype(np.int64)
    base = off[0]
    values: list[str | None] = [
        raw[off[i] - base: off[i + 1] - base].tobytes().decode("utf-8", "surrogatepass")
        for i in first.tolist()]
    valid = A.valid_mask(arr)
    if valid is not None:
        codes[~valid] = -1
    return codes, values


def _in_first_order(keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal ``keys`` (rows 0..m-1 in their order; like pandas ``groupby(
    sort=False)``): groups in the order of their first row, each group's rows in order.

    Returns:
        (int64[m] rows in that order, int64[groups + 1] group bounds in it).
    """
    m = keys[0].size
    if m == 0:
        return np.empty(0, np.int64), np.zeros(1, np.int64)
    o = np.lexsort([np.arange(m), *keys[::-1]])  # by the keys, then row: each group's run
    change = np.zeros(m, bool)
    for k in keys:
        ks = k[o]
        change[1:] |= ks[1:] != ks[:-1]
    change[0] = True
    starts = np.flatnonzero(change)
    group = np.cumsum(change) - 1  # group (in key order) of each sorted row
    rank_of = np.empty(starts.size, np.int64)
    rank_of[np.argsort(o[starts], kind="stable")] = np.arange(starts.size)
    o = o[np.argsort(rank_of[group], kind="stable")]
    sizes = np.bincount(rank_of[group], minlength=starts.size)
    bounds = np.zeros(starts.size + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return o, bounds


def _runs(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """bool[m]: the row starts a run of equal ``values`` or a group (``bounds``)."""
    new = np.ones(values.size, bool)
    new[1:] = values[1:] != values[:-1]
    new[bounds[:-1]] = True
    return new


def _match(ts: TraceSet) -> MatchedCollectives:
    # numpy throughout (no pandas): rows sorted by (rank, event) form "the frame"; the
    # groupings follow pandas' groupby semantics of the reference (rows whose key holds a
    # null take no part; groups in order of first row)
    c = ts.collectives
    n = c.num_rows
    rank = to_numpy(c.column("rank"))
    event = to_numpy(c.column("event")).astype(np.int64, copy=False)
    kernel, _ = _ints(c.column("kernel_event"))
    issue, _ = _ints(c.column("issue_event"))
    in_b, _ = _ints(c.column("in_bytes"))
    out_b, _ = _ints(c.column("out_bytes"))
    seq, seq_valid = _ints(c.column("recorded_seq"))
    coll, coll_names = _string_codes(c.column("collective"))
    pg, pg_names = _string_codes(c.column("process_group"))
    it = ts.events.column("iteration")
    # (a null step reads NaN, as it did through pandas: outside every step)
    iteration = to_numpy(it) if it.null_count == 0 else it.to_numpy()
    keys, complete, ranks_of = rank_list_keys(ts)
    order = np.lexsort((event, rank))  # stable, like sort_values(kind="stable")
    step = iteration[event[order]]
    s_rank, s_pg, s_rk, s_coll = rank[order], pg[order], keys[order], coll[order]
    s_seq = seq[order]
    s_exec = np.where(kernel >= 0, kernel, event)[order]
    n_members = np.array([len(m) for m in ranks_of.values()], np.int64)

    # where every call of a process group carries its c10d sequence number, match on it:
    # robust to profiling windows that start or end at different calls on different ranks
    n_pg = len(pg_names)
    seq_ok = np.ones(n, bool) if seq_valid is None else seq_valid[order]
    counted = (s_pg >= 0) & seq_ok
    low = np.full(n_pg, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(low, s_pg[counted], s_seq[counted].astype(np.int64))
    pg_by_seq = (low >= 0) & (np.bincount(s_pg[counted], minlength=n_pg) > 0)
    by_seq = (s_pg >= 0) & pg_by_seq[np.maximum(s_pg, 0)] if n else np.zeros(0, bool)
    s_complete = complete[order]
    # (group keys print as pandas' did: floats in a column that holds a null)
    seq_key = s_seq.astype(np.float64) if seq_valid is not None else s_seq
    floats = bool((s_pg < 0).any()) or (step.dtype.kind == "f" and bool(np.isnan(step).any()))

    def check(rows: np.ndarray, where: str) -> None:
        names = {coll_names[k] if k >= 0 else None for k in s_coll[rows].tolist()}
        # a point-to-point message is one send and its matching recv (MPI, NCCL send/recv)
        if len(names) > 1 and not (rows.size == 2 and names == {"send", "recv"}):
            raise CollectiveMismatchError(
                f"{where}: ranks disagree on the collective ({', '.join(sorted(names))})",
                ts.ranks[int(s_rank[rows[0]])].path)

    pair = (sorted((coll_names.index("send"), coll_names.index("recv")))
            if "send" in coll_names and "recv" in coll_names else [-2, -2])

    def mixed(rows: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """bool[groups]: the group's calls name more than one collective, and are not one
        send and one recv (the groups :func:`check` refuses)."""
        if bounds.size == 1:
            return np.zeros(0, bool)
        cc = s_coll[rows]
        lo, hi = np.minimum.reduceat(cc, bounds[:-1]), np.maximum.reduceat(cc, bounds[:-1])
        p2p = (np.diff(bounds) == 2) & (lo == pair[0]) & (hi == pair[1])
        return (lo != hi) & ~p2p

    parts: list[np.ndarray] = []  # frame rows of each group, in group order
    sel = np.flatnonzero(by_seq & s_complete & seq_ok)
    o, bounds = _in_first_order([s_pg[sel], s_rk[sel], s_seq[sel]])
    rows = sel[o]
    if rows.size:
        size = np.diff(bounds)
        n_ranks = np.add.reduceat(_runs(s_rank[rows], bounds).astype(np.int64), bounds[:-1])
        first = rows[bounds[:-1]]
        need = n_members[s_rk[first]]
        keep = (n_ranks == need) & (need == size)  # absent windows: unmatched
        bad = keep & mixed(rows, bounds)
        if bad.any():
            k = int(np.argmax(bad))
            check(rows[bounds[k]:bounds[k + 1]],
                  f"process group {pg_names[s_pg[first[k]]]!r} sequence number "
                  f"{seq_key[first[k]]}")
        parts += [rows[bounds[k]:bounds[k + 1]] for k in np.flatnonzero(keep).tolist()]

    cand = np.flatnonzero(~by_seq & s_complete & (step >= 0) & (s_pg >= 0))
    o, bounds = _in_first_order([s_pg[cand], s_rk[cand], step[cand]])
    rows = cand[o]  # by group, each in frame order (rank by rank)
    if rows.size:
        n_groups = bounds.size - 1
        group = np.repeat(np.arange(n_groups), np.diff(bounds))
        # the calls of each (group, rank): a run; the ordinal is the place in the run
        run = _runs(s_rank[rows], bounds)
        run_at = np.flatnonzero(run)
        run_len = np.diff(np.r_[run_at, rows.size])
        ordinal = np.arange(rows.size) - np.repeat(run_at, run_len)
        runs_of = np.add.reduceat(run.astype(np.int64), bounds[:-1])
        run_bounds = np.r_[0, np.cumsum(runs_of)]
        need = n_members[s_rk[rows[bounds[:-1]]]]
        uneven = ((runs_of != need)
                  | (np.minimum.reduceat(run_len, run_bounds[:-1])
                     != np.maximum.reduceat(run_len, run_bounds[:-1])))
        # the calls by (group, ordinal), each in frame order
        o2 = np.lexsort((np.arange(rows.size), ordinal, group))
        rows2, ord2, grp2 = rows[o2], ordinal[o2], group[o2]
        new = np.ones(rows2.size, bool)
        new[1:] = (ord2[1:] != ord2[:-1]) | (grp2[1:] != grp2[:-1])
        sub_bounds = np.r_[np.flatnonzero(new), rows2.size]
        sub_group = grp2[sub_bounds[:-1]]
        bad_sub = mixed(rows2, sub_bounds)
        k_uneven = int(np.argmax(uneven)) if uneven.any() else n_groups
        k_sub = int(np.argmax(bad_sub)) if bad_sub.any() else -1
        # the reference checks a group's counts, then its calls, group by group
        if k_sub >= 0 and sub_group[k_sub] < k_uneven:
            r0 = rows2[sub_bounds[k_sub]]
            o_txt = float(ord2[sub_bounds[k_sub]]) if floats else int(ord2[sub_bounds[k_sub]])
            check(rows2[sub_bounds[k_sub]:sub_bounds[k_sub + 1]],
                  f"process group {pg_names[s_pg[r0]]!r} step {step[r0]} call #{o_txt}")
        if k_uneven < n_groups:
            r0 = rows[bounds[k_uneven]]
            at = slice(run_bounds[k_uneven], run_bounds[k_uneven + 1])
            counts = run_len[at]
            who = s_rank[rows[run_at[at]]]
            lo, hi = int(who[np.argmin(counts)]), int(who[np.argmax(counts)])
            missing = sorted(set(ranks_of[int(s_rk[r0])]) - set(who.tolist()))
            detail = (f"rank {missing[0]} has none" if missing else
                      f"rank {lo} has {counts[np.argmin(counts)]}, "
                      f"rank {hi} has {counts[np.argmax(counts)]}")
            raise CollectiveMismatchError(
                f"process group {pg_names[s_pg[r0]]!r} step {step[r0]}: ranks issued "
                f"different numbers of collectives ({detail})", ts.ranks[lo].path)
        parts += np.split(rows2, sub_bounds[1:-1])

    gid = np.full(n, -1, np.int64)
    sizes = np.fromiter(map(len, parts), np.int64, len(parts))
    members = np.concatenate(parts) if parts else np.empty(0, np.int64)
    gid[members] = np.repeat(np.arange(len(parts), dtype=np.int64), sizes)
    groups = np.split(s_exec[members], np.cumsum(sizes)[:-1]) if parts else []
    unmatched = s_exec[gid < 0]
    columns = {"rank": s_rank, "event": event[order], "kernel_event": kernel[order],
               "issue_event": issue[order], "exec_event": s_exec, "step": step,
               "group_id": gid, "ranks_key": s_rk, "in_bytes": in_b[order],
               "out_bytes": out_b[order], "collective": s_coll, "process_group": s_pg}
    for v in columns.values():
        v.flags.writeable = False
    return MatchedCollectives(groups, unmatched, columns, coll_names, pg_names, c, order)


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
    # the median per rank (the ranks in order), of float64 values as pandas took it
    r_has = r_of[has]
    o = np.lexsort((diff, r_has))
    r_sorted, v = r_has[o], diff[o].astype(np.float64)
    starts = np.flatnonzero(np.r_[True, r_sorted[1:] != r_sorted[:-1]])
    count = np.diff(np.r_[starts, v.size])
    med = (v[starts + (count - 1) // 2] + v[starts + count // 2]) / 2
    if np.abs(med).max() <= SAME_CLOCK_NS:
        return offsets
    for r, m in zip(r_sorted[starts].tolist(), med.tolist(), strict=True):
        offsets[int(r)] = int(m)
    return offsets
    for r, v in med.items():
        offsets[int(r)] = int(v)
    return offsets
