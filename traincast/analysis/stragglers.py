"""Stragglers: who arrives late at collectives, who waits, and what made the late ones late.

Method (sources):

* **C4** (Dong et al., "Boosting Large-scale Parallel Training Efficiency with C4: A
  Communication-Driven Approach", arXiv 2406.04594, HPCA 2025): collectives in data/model
  parallel training are *periodic* (the same calls every step) and *homogeneous* (every member
  does the same work between two of them), so a rank that keeps the others waiting at a
  collective, or a call whose period departs from the others, points at a fault or a
  straggler. C4D compares per-rank timestamps of each collective; here the timestamps come
  from the profiler trace.
* **StragglerAnalysis** (Lin et al., "Understanding Stragglers in Large Model Training Using
  What-if Analysis", arXiv 2505.05713; github.com/ByteDance-Seed/StragglerAnalysis): an op is
  identified across workers by its type and its sequence number among ops of that type in the
  step (``seq_id``), and a worker's slowdown is judged against the cross-worker typical
  (median) duration of the same op. :func:`collective_lateness` blames with the same
  identity (name and position) and the same reference (cross-rank median).
* Outliers: the modified z-score ``0.6745 (x - median) / MAD`` of Iglewicz and Hoaglin (1993,
  "How to Detect and Handle Outliers"), flagged above 3.5 — written here as
  ``(x - median) / (1.4826 MAD)``. When the MAD is 0 the mean absolute deviation times
  1.2533 is used instead (a common fallback), and when both are 0 the score is 0.

Clocks: a rank's times are recorded on its own clock. Arrivals are compared on an aligned
clock: every rank is shifted by the median, over matched collectives, of its kernel end minus
the lowest rank's (the members of an NCCL collective finish together) — the estimator
:func:`traincast.graph.build.build_graph` uses. On traces from one host (DLRM, HTA) the shift
is a few µs.

The same functions run on a predicted timeline (``traincast.predict(ts).timeline`` keeps the
collectives table, renumbered), so a replay or a what-if can be checked for stragglers too.
A TraceSet whose collectives cannot be matched across ranks (single-rank traces, peers'
traces absent) gives an empty lateness table; the step-time parts of the report still work.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traincast.errors import ParameterError
from traincast.graph.collectives import clock_offsets, match_collectives
from traincast.graph.jit import kernel
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet

#: modified z-score above which a value is an outlier (Iglewicz & Hoaglin 1993)
Z_THRESHOLD = 3.5
#: a step (or a rank's compute, or a collective's period) departing from the median by this
#: fraction is reported even when the MAD is too coarse to call it an outlier: a trace holds a
#: handful of ranks, and a 4/4 split (DLRM) has no outlier by the MAD although half the ranks
#: are 20% slower. 5% is also the band :func:`traincast.analysis.diff.trace_diff` calls "same".
REL_THRESHOLD = 0.05
#: a late arrival is reported when it is an outlier *and* costs at least this fraction of the
#: median step (smaller lateness is launch jitter, however regular the rest)
MIN_LATE_FRACTION = 0.01
#: nested ops share their excess; among ops whose excess is at least this share of the
#: largest, the shortest (innermost) is blamed
NEST_SHARE = 0.9

#: columns of :func:`collective_lateness`
LATENESS_COLUMNS = [
    "rank", "iteration", "group_id", "collective", "process_group", "seq", "group_size",
    "exec_event", "arrival_ns", "end_ns", "lateness_ns", "wait_ns", "last_rank",
    "window_start_ns", "blamed_event", "blamed_name", "blamed_kind", "blamed_excess_ns",
]
#: kinds of events that can be blamed (host annotations only; GPU annotations mirror them)
_BLAME_KINDS = ("cpu_op", "annotation", "python", "runtime", "kernel", "memcpy", "memset",
                "collective")


def robust_z(x: np.ndarray) -> np.ndarray:
    """Modified z-scores ``(x - median) / (1.4826 MAD)`` of ``x`` (see the module doc)."""
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return x
    med = np.median(x)
    dev = np.abs(x - med)
    scale = 1.4826 * np.median(dev)
    if scale <= 0:
        scale = 1.2533 * dev.mean()
    if scale <= 0:
        return np.zeros_like(x)
    return (x - med) / scale


def _empty_lateness() -> pd.DataFrame:
    dtypes = {"rank": "int32", "iteration": "int32", "group_id": "int64", "collective": "object",
              "process_group": "object", "seq": "int64", "group_size": "int32",
              "exec_event": "int64", "arrival_ns": "int64", "end_ns": "int64",
              "lateness_ns": "int64", "wait_ns": "int64", "last_rank": "int32",
              "window_start_ns": "int64", "blamed_event": "int64", "blamed_name": "object",
              "blamed_kind": "object", "blamed_excess_ns": "int64"}
    return pd.DataFrame({c: pd.Series(dtype=dtypes[c]) for c in LATENESS_COLUMNS})


def collective_lateness(ts: TraceSet) -> pd.DataFrame:
    """Arrival, lateness and waiting of every rank at every matched collective, with blame.

    Collectives are grouped across ranks by :func:`traincast.graph.collectives.
    match_collectives`; calls it leaves unmatched (peers' traces absent, outside a step) get no
    row.

    Returns:
        One row per matched call and rank, sorted by (group_id, rank):

        * ``rank``, ``iteration`` (step of the call), ``group_id`` (the cross-rank group),
          ``collective``, ``process_group``, ``seq`` (order in the process group on the rank),
          ``group_size``, ``exec_event`` (row in ``ts.events`` of the executing event);
        * ``arrival_ns``: start of the executing event (NCCL kernel, or gloo range) and
          ``end_ns`` its end, on the aligned clock (module doc);
        * ``lateness_ns``: arrival minus the group's first arrival;
        * ``wait_ns``: how long this rank waited in the collective for the others, the group's
          last arrival minus its own; ``last_rank``: the rank that arrived last (ties: lowest);
        * ``window_start_ns``: start of the path compared for blame (below);
        * ``blamed_event``, ``blamed_name``, ``blamed_kind``, ``blamed_excess_ns``: for a late
          rank (``lateness_ns > 0``), the op that most exceeded its cross-rank median on the
          way to this collective; -1 / "" / "" / 0 when none exceeds it or the rank was first.

    Blame (cf. StragglerAnalysis's per-op ``seq_id`` identity and median reference):

    1. The *path* of rank r to collective k is the window from the end of r's previous matched
       call in the same process group (ranks finish a collective together, so windows start
       aligned) — or, for the first call, the start of r's step (``ProfilerStep#N``) — to r's
       arrival at k.
    2. The candidates are r's events that lie within the window (host ops, runtime calls,
       kernels, copies, other collectives; any thread or stream; GPU-side annotations and
       step markers excepted). Ops still running at the arrival are left out: their time
       includes waiting at this very collective (an effect, not a cause).
    3. An op is identified across ranks as StragglerAnalysis does: (iteration, kind, name,
       position among the rank's events of that kind and name in the iteration). Its
       reference is the median of its duration over the process group's ranks, a rank
       without it counting 0 (so an op only the late rank ran is blamed in full). The
       window start itself is a pseudo-op (``<start of iteration N>`` or ``<end of previous
       collective>``) whose excess is the rank's window start minus the window start of the
       group's first arriver — lateness is exactly that difference plus the difference in
       path length — so a rank that entered the step late is shown late for reasons before
       the step (previous, possibly unprofiled, iteration; data loading).
    4. The blamed op has the largest positive excess (duration minus reference). Nested ops
       share excess; among ops within :data:`NEST_SHARE` of the largest, the shortest
       (innermost) is named, and a real op is preferred to the window start.
       ``blamed_excess_ns / lateness_ns`` says how much of the lateness the op explains; a
       small share means no single op did (e.g. a host that had no slack left after the
       previous collective, because it was late there too).

    Raises:
        CollectiveMismatchError: ranks disagree on the sequence of collectives (from
            :func:`~traincast.graph.collectives.match_collectives`).
    """
    matched = match_collectives(ts)
    tbl = matched.table
    if tbl.empty or not (tbl["group_id"] >= 0).any():
        return _empty_lateness()
    tbl = tbl[tbl["group_id"].to_numpy() >= 0].reset_index(drop=True)
    ev = ts.events
    ev_ts = A.to_numpy(ev.column("ts"))
    ev_dur = A.to_numpy(ev.column("dur"))
    ex = tbl["exec_event"].to_numpy(np.int64)
    rank = tbl["rank"].to_numpy(np.int32)
    gid = tbl["group_id"].to_numpy(np.int64)
    offsets = clock_offsets(ts, matched)
    off_of = np.vectorize(offsets.get, otypes=[np.int64])
    arr = ev_ts[ex] - off_of(rank)
    end = arr + ev_dur[ex]
    out = pd.DataFrame({
        "rank": rank, "iteration": tbl["step"].to_numpy(np.int32), "group_id": gid,
        "collective": tbl["collective"].to_numpy(object),
        "process_group": tbl["process_group"].to_numpy(object),
        "seq": tbl["seq"].to_numpy(np.int64), "group_size": tbl["group_size"].to_numpy(np.int32),
        "exec_event": ex, "arrival_ns": arr, "end_ns": end,
    })
    g = out.groupby("group_id", sort=False)["arrival_ns"]
    first = g.transform("min").to_numpy(np.int64)
    last = g.transform("max").to_numpy(np.int64)
    out["lateness_ns"] = arr - first
    out["wait_ns"] = last - arr
    # rank arriving last (lowest rank among ties)
    is_last = arr == last
    last_rank = (out.loc[is_last].groupby("group_id")["rank"].min())
    out["last_rank"] = last_rank.reindex(gid).to_numpy(np.int32)
    pg_key = tbl["process_group"].astype(str) + "|" + tbl["ranks_key"].astype(str)
    out["_pg"] = pg_key.to_numpy(object)
    _blame(ts, out, offsets)
    out = out.drop(columns="_pg").sort_values(["group_id", "rank"], kind="stable")
    return out[LATENESS_COLUMNS].reset_index(drop=True)


def _blame(ts: TraceSet, out: pd.DataFrame, offsets: dict[int, int]) -> None:
    """Fill window_start_ns and the blamed_* columns of ``out`` in place (see the doc above)."""
    ev = ts.events
    ev_rank = A.to_numpy(ev.column("rank"))
    ev_ts = A.to_numpy(ev.column("ts"))
    ev_dur = A.to_numpy(ev.column("dur"))
    device = A.to_numpy(ev.column("device"))
    kind_idx, kinds = A.dictionary_parts(ev.column("kind"))
    name_idx, names = A.dictionary_parts(ev.column("name"))
    n_ev = ev_ts.size
    off = np.zeros(n_ev, np.int64)
    for r, o in offsets.items():
        if o:
            lo, hi = ts.rank_slice(r)
            off[lo:hi] = o
    t0 = ev_ts - off
    del off  # end times are taken per rank below (t0 + dur of the rows looked at)
    kind_ok = np.isin(np.arange(len(kinds)), [kinds.index(k) for k in _BLAME_KINDS
                                              if k in kinds])
    cand = kind_ok[kind_idx] if n_ev else np.zeros(0, bool)
    if "annotation" in kinds:
        cand &= ~((kind_idx == kinds.index("annotation")) & (device >= 0))
    iters = ts.iterations.to_pandas()
    markers = iters["marker_event"].to_numpy(np.int64)
    cand[markers[markers >= 0]] = False

    # window start: the latest end, before this arrival, of an earlier call of the process
    # group on the rank (calls that overlap it are no sync point for it), else the step start
    n = len(out)
    order = np.lexsort((out["arrival_ns"].to_numpy(), out["_pg"].to_numpy().astype(str),
                        out["rank"].to_numpy()))
    o_rank = out["rank"].to_numpy()[order]
    o_pg = out["_pg"].to_numpy()[order]
    o_arr = out["arrival_ns"].to_numpy()[order]
    o_end = out["end_ns"].to_numpy()[order]
    o_coll = out["collective"].to_numpy()[order]
    o_exec = out["exec_event"].to_numpy()[order]
    seg = np.ones(n, bool)
    seg[1:] = (o_rank[1:] != o_rank[:-1]) | (o_pg[1:] != o_pg[:-1])
    bounds = np.r_[np.flatnonzero(seg), n]
    arg = np.zeros(n, np.int64)  # per position: the earlier-or-same call ending last
    seg_start = np.zeros(n, np.int64)
    j = np.full(n, -1, np.int64)  # last position whose calls all ended before this arrival
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        e = o_end[a:b]
        cm = np.maximum.accumulate(e)
        arg[a:b] = np.maximum.accumulate(np.where(e == cm, np.arange(b - a), 0)) + a
        seg_start[a:b] = a
        j[a:b] = np.searchsorted(cm, o_arr[a:b], "right") - 1  # cm[k] > arrival[k]: j < k
    # one anchor position for the whole group, so every member's window starts after the
    # same collective
    j = pd.Series(j).groupby(out["group_id"].to_numpy()[order]).transform("min").to_numpy()
    prev = np.where(j >= 0, arg[seg_start + np.clip(j, 0, None)], -1)
    same_prev = prev >= 0
    start = np.empty(n, np.int64)
    anchor_event = np.full(n, -1, np.int64)
    anchor_name = np.empty(n, object)
    prev_idx = np.flatnonzero(same_prev)
    start[prev_idx] = o_end[prev[prev_idx]]
    anchor_event[prev_idx] = o_exec[prev[prev_idx]]
    anchor_name[prev_idx] = ["<end of previous " + str(c) + ">" for c in o_coll[prev[prev_idx]]]
    first_idx = np.flatnonzero(~same_prev)
    if first_idx.size:
        it_of = {(int(a), int(b)): (int(c), int(d)) for a, b, c, d in zip(
            iters["rank"], iters["iteration"], iters["start"], markers, strict=True)}
        o_iter = out["iteration"].to_numpy()[order]
        for i in first_idx.tolist():
            r, it = int(o_rank[i]), int(o_iter[i])
            if (r, it) in it_of:
                s0, mk = it_of[(r, it)]
                start[i] = s0 - offsets.get(r, 0)
                anchor_event[i] = mk
                anchor_name[i] = f"<start of iteration {it}>"
            else:
                lo, hi = ts.rank_slice(r)
                start[i] = int(t0[lo:hi].min()) if hi > lo else int(o_end[i])
                anchor_name[i] = "<start of trace>"
    win_start = np.empty(n, np.int64)
    win_start[order] = start
    out["window_start_ns"] = win_start
    w_anchor_event = np.empty(n, np.int64)
    w_anchor_event[order] = anchor_event
    w_anchor_name = np.empty(n, object)
    w_anchor_name[order] = anchor_name

    # identity of every candidate event on its rank: (iteration, kind, name, occurrence)
    it_ev = A.to_numpy(ev.column("iteration"))
    crow = np.flatnonzero(cand)
    op_key = _pack([it_ev[crow], kind_idx[crow], name_idx[crow]])  # one int64 when it fits
    fast = _occurrences_in_row_order(op_key, ev_rank[crow], t0[crow])
    if fast is not None:  # rows already in time order per rank: no sort needed
        occ = np.full(n_ev, -1, np.int64)
        occ[crow] = fast
        del fast
    else:
        crow, op_key, occ = _occurrences_by_sort(crow, op_key, ev_rank, it_ev, kind_idx,
                                                 name_idx, t0)

    # events of each window (within [window start, arrival]), per process group
    arrival = out["arrival_ns"].to_numpy(np.int64)
    win_parts: dict[str, list[np.ndarray]] = {}
    row_parts: dict[str, list[np.ndarray]] = {}
    for (r, pg), sub in out.groupby(["rank", "_pg"], sort=False):
        lo, hi = ts.rank_slice(int(r))
        rows = np.flatnonzero(cand[lo:hi]) + lo
        if rows.size == 0:
            continue
        wins = sub.index.to_numpy()
        wins = wins[np.argsort(win_start[wins], kind="stable")]
        k = np.searchsorted(win_start[wins], t0[rows], "right") - 1
        ok = k >= 0
        r_ok = rows[ok]
        ok[ok] = t0[r_ok] + ev_dur[r_ok] <= arrival[wins[k[ok]]]  # ended on the path, not
        # still waiting in k
        win_parts.setdefault(pg, []).append(wins[k[ok]])
        row_parts.setdefault(pg, []).append(rows[ok])
    out["blamed_event"] = -1
    out["blamed_name"] = ""
    out["blamed_kind"] = ""
    out["blamed_excess_ns"] = 0
    # reference: median over the process group's ranks of the same op (missing = 0)
    wl, rl, xl = [], [], []
    for pg, parts in win_parts.items():
        members = np.unique(out.loc[out["_pg"] == pg, "rank"].to_numpy())
        # a group of every rank (the world): no per-event membership test
        world = set(int(r) for r in ts.rank_ids) <= set(members.tolist())
        in_pg = None if world else np.isin(ev_rank[crow], members)
        sel = crow if in_pg is None else crow[in_pg]
        pg_op_key = op_key if op_key is None or in_pg is None else op_key[in_pg]
        key = _pack([pg_op_key, occ[sel]]) if pg_op_key is not None else None
        if key is not None:  # one hash pass over one int64 key
            kid = pd.factorize(key)[0].astype(np.int64)
        else:
            keys = pd.DataFrame({"i": it_ev[sel], "k": kind_idx[sel], "n": name_idx[sel],
                                 "o": occ[sel]})
            kid = keys.groupby(["i", "k", "n", "o"], sort=False).ngroup().to_numpy(np.int64)
        med = np.zeros(n_ev)
        med[sel] = _median_missing_zero(kid, ev_dur[sel], np.full(sel.size, members.size))[kid]
        del key, kid, sel
        w_ = _joined(parts)
        r_ = _joined(row_parts[pg])
        wl.append(w_)
        rl.append(r_)
        xl.append((ev_dur[r_] - med[r_]).astype(np.float64, copy=False))
        del med, parts, w_, r_
        win_parts[pg] = row_parts[pg] = []
    del occ, win_parts, row_parts
    win = _joined(wl) if wl else np.empty(0, np.int64)
    row = _joined(rl) if rl else np.empty(0, np.int64)
    excess = _joined(xl) if xl else np.empty(0)
    del wl, rl, xl
    gid = out["group_id"].to_numpy(np.int64)
    # pseudo-op: the window start
    first_row = out.groupby("group_id")["arrival_ns"].idxmin()
    first_start = pd.Series(win_start[first_row.to_numpy()], index=first_row.index)
    p_excess = (win_start - first_start.reindex(gid).to_numpy(np.int64)).astype(np.float64)
    late = out["lateness_ns"].to_numpy() > 0
    # candidates: real ops (index i < row.size) then one pseudo-op per call (row.size + w);
    # only late calls' positive excesses are kept before anything else is gathered
    cw = np.concatenate([win, np.arange(n)])
    cx = np.concatenate([excess, p_excess])
    del win, excess
    keep = np.flatnonzero(late[cw] & (cx > 0))
    if keep.size == 0:
        return
    cw, cx = cw[keep], cx[keep]
    best = np.zeros(n)
    np.maximum.at(best, cw, cx)
    elig = cx >= NEST_SHARE * best[cw]
    keep, cw, cx = keep[elig], cw[elig], cx[elig]
    real = keep < row.size
    r_i = np.where(real, keep, 0)
    p_i = np.where(real, 0, keep - row.size)
    cd = np.where(real, ev_dur[row[r_i]] if row.size else 0,
                  np.iinfo(np.int64).max)  # real ops win ties
    ct = np.where(real, t0[row[r_i]] if row.size else 0, win_start[p_i])
    o = np.lexsort((ct, cd, cw))
    firsts = o[np.r_[True, cw[o][1:] != cw[o][:-1]]]
    w = cw[firsts]
    f_real = real[firsts]
    f_row = row[r_i[firsts]] if row.size else np.zeros(firsts.size, np.int64)
    f_p = p_i[firsts]
    name_arr = np.asarray(names, object)
    kind_arr = np.asarray(kinds, object)
    out.loc[w, "blamed_event"] = np.where(f_real, f_row, w_anchor_event[f_p])
    out.loc[w, "blamed_name"] = np.where(
        f_real, name_arr[name_idx[f_row]] if len(names) else "", w_anchor_name[f_p])
    out.loc[w, "blamed_kind"] = np.where(
        f_real, kind_arr[kind_idx[f_row]] if len(kinds) else "", "window")
    out.loc[w, "blamed_excess_ns"] = np.round(cx[firsts]).astype(np.int64)


_OCC: list = []


def _occurrences_in_row_order(op_key: np.ndarray | None, rank: np.ndarray, t0: np.ndarray
                              ) -> np.ndarray | None:
    """Occurrence index of each candidate among its rank's candidates with the same
    ``op_key`` (iteration, kind, name), counted in row order, or None when that is not the
    time order the blame needs (a rank's rows not contiguous and ascending, or not sorted by
    start time within a rank, as a reader's rows are), when the key did not fit one int64,
    or without the compiled kernel: :func:`_occurrences_by_sort` then gives the same."""
    if op_key is None:
        return None
    if not _OCC:
        _OCC.append(kernel("traincast.analysis.numba_kernels", "occurrences"))
    if _OCC[0] is None:
        return None
    if rank.size == 0:
        return np.zeros(0, np.int64)
    new_rank = rank[1:] != rank[:-1]
    if not (np.all(rank[1:] >= rank[:-1]) and np.all((t0[1:] >= t0[:-1]) | new_rank)):
        return None
    codes, uniques = pd.factorize(op_key)
    bounds = np.r_[0, np.flatnonzero(new_rank) + 1, rank.size].astype(np.int64)
    return _OCC[0](codes.astype(np.int64, copy=False), bounds, len(uniques))


def _occurrences_by_sort(crow: np.ndarray, op_key: np.ndarray | None, ev_rank: np.ndarray,
                         it_ev: np.ndarray, kind_idx: np.ndarray, name_idx: np.ndarray,
                         t0: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(candidates sorted by (rank, iteration, kind, name, start), ``op_key`` in that order,
    occurrence index per event row, -1 for non-candidates): one stable sort."""
    rank_key = _pack([ev_rank[crow], op_key]) if op_key is not None else None
    full_key = _pack([rank_key, t0[crow]]) if rank_key is not None else None
    if full_key is not None:  # one stable sort of one key (a trace spanning < ~2^30 ns)
        o = np.argsort(full_key, kind="stable")
        del full_key
    elif rank_key is not None:
        o = np.lexsort((t0[crow], rank_key))
    else:
        o = np.lexsort((t0[crow], name_idx[crow], kind_idx[crow], it_ev[crow], ev_rank[crow]))
    crow = crow[o]
    new = np.zeros(crow.size, bool)  # the first event of each (rank, iteration, kind, name)
    new[:1] = True
    if rank_key is not None and op_key is not None:
        c = rank_key[o]
        new[1:] = c[1:] != c[:-1]
        op_key = op_key[o]
    else:
        for col in (ev_rank, it_ev, kind_idx, name_idx):
            c = col[crow]
            new[1:] |= c[1:] != c[:-1]
    del o, rank_key, c
    run_start = np.maximum.accumulate(np.where(new, np.arange(crow.size), 0))
    occ = np.full(t0.size, -1, np.int64)
    occ[crow] = np.arange(crow.size) - run_start
    return crow, op_key, occ


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)``, without the copy when there is one part."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _pack(cols: list[np.ndarray]) -> np.ndarray | None:
    """The integer columns ``cols`` (equal lengths) as one int64 key ordered like the
    columns lexicographically (first column most significant), or None when their ranges
    need more than 62 bits together. Built in place (one temporary column at a time)."""
    ranges, bits = [], 0
    for c in cols:
        lo = int(c.min()) if c.size else 0
        width = max(int(c.max()) - lo if c.size else 0, 0).bit_length()
        ranges.append((lo, width))
        bits += width
    if bits > 62:
        return None
    key = np.zeros(len(cols[0]), np.int64)
    for c, (lo, width) in zip(cols, ranges, strict=True):
        part = c.astype(np.int64)  # a copy, made non-negative in place
        part -= lo
        key <<= width
        key |= part
        del part
    return key


_MEDIAN: list = []


def _median_kernel():  # type: ignore[no-untyped-def]
    """:func:`traincast.analysis.numba_kernels.median_missing_zero`, or None
    (:func:`traincast.graph.jit.kernel`)."""
    if not _MEDIAN:
        _MEDIAN.append(kernel("traincast.analysis.numba_kernels", "median_missing_zero"))
    return _MEDIAN[0]


def _median_missing_zero(kid: np.ndarray, dur: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Median per key of ``dur`` over ``size`` members, members without a row counting 0."""
    if kid.size == 0:
        return np.zeros(0)
    compiled = _median_kernel()
    if compiled is not None:  # the same medians, bucketed and sorted per key (compiled)
        return compiled(np.asarray(kid, np.int64), np.asarray(dur, np.float64),
                        np.asarray(size, np.int64), int(kid.max()) + 1)
    o = np.lexsort((dur, kid))
    k, d, sz = kid[o], dur[o].astype(np.float64), size[o]
    new = np.ones(k.size, bool)
    new[1:] = k[1:] != k[:-1]
    run_start = np.maximum.accumulate(np.where(new, np.arange(k.size), 0))
    pos = np.arange(k.size) - run_start
    count = np.bincount(k)
    zeros = sz - count[k]
    cpos = pos + zeros
    lo, hi = (sz - 1) // 2, sz // 2
    weight = 0.5 * ((cpos == lo).astype(np.float64) + (cpos == hi))
    return np.bincount(k, weights=d * weight, minlength=count.size)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _step_table(ts: TraceSet) -> pd.DataFrame:
    """Per (rank, iteration): step_ns, compute_ns (device compute union, else host compute)."""
    it = ts.iterations.to_pandas()
    df = it[["rank", "iteration"]].copy()
    df["step_ns"] = it["dur"].to_numpy(np.int64)
    try:
        from traincast.analysis.breakdown import temporal_breakdown

        bd = temporal_breakdown(ts, per="iteration")
        comp = bd.set_index(["rank", "iteration"])["compute_ns"]
        df["compute_ns"] = comp.reindex(pd.MultiIndex.from_frame(df[["rank", "iteration"]])
                                        ).fillna(0).to_numpy(np.int64)
    except ImportError:  # pragma: no cover - breakdown is part of the package
        df["compute_ns"] = 0
    return df


def straggler_report(ts: TraceSet, *, z_threshold: float = Z_THRESHOLD,
                     rel_threshold: float = REL_THRESHOLD,
                     min_late_fraction: float = MIN_LATE_FRACTION) -> dict[str, pd.DataFrame]:
    """Per-rank straggler statistics, findings with evidence, and per-step imbalance.

    Args:
        ts: a TraceSet, measured or predicted.
        z_threshold: modified z-score from which a value is an outlier (default 3.5).
        rel_threshold: relative departure from the median reported whatever the MAD says
            (default 0.05).
        min_late_fraction: smallest lateness reported, as a fraction of the median step
            (default 0.01).

    Returns:
        ``ranks`` — one row per rank: ``rank``, ``iterations``, ``step_ns`` (mean step),
        ``step_vs_median`` (mean step / median of all steps of all ranks), ``compute_ns``
        (mean per step, as :func:`~traincast.analysis.breakdown.temporal_breakdown`),
        ``collectives`` (matched calls), ``mean_lateness_ns``, ``max_lateness_ns``,
        ``last_share`` (fraction of its collectives where it arrived last; when all members
        arrive at the same ns nobody is last), ``wait_ns`` (total
        time it waited in collectives), ``waited_for_ns`` (total time the other members waited
        in collectives where it arrived last; ties split evenly), ``wait_per_step_ns``,
        ``busy_per_step_ns`` (mean step minus wait per step: its step had it not waited),
        ``top_wait_collective`` / ``top_wait_group`` / ``top_wait_ns`` (the call it waited
        longest in) and ``top_wait_for`` (the rank that arrived last there).

        ``flags`` — one row per finding, sorted by kind, iteration, rank: ``rank``,
        ``iteration``, ``kind``, ``score`` (modified z-score), ``value_ns`` (the quantity
        judged), ``group_id`` (-1 if none), ``collective`` ("" if none), ``cause`` (short
        tag), ``evidence`` (one line). Kinds and rules:

        * ``late_at_collective``: calls where the rank's lateness scores >= ``z_threshold``
          among all lateness values of its process group (C4: calls are homogeneous and
          periodic, so the whole pool is the reference) and is at least ``min_late_fraction``
          of the median step. One row per (rank, iteration, blamed op); the worst call is
          named and counted with the others. ``value_ns`` = worst lateness, ``cause`` = the
          blamed op's name.
        * ``long_step``: a (rank, iteration) whose step exceeds the median of all steps in the
          trace by ``rel_threshold`` or more, or scores >= ``z_threshold``. ``value_ns`` =
          step minus median. ``cause`` is ``waiting`` when the step minus the rank's waiting
          in collectives (``busy``) is within ``rel_threshold`` of the median — without the
          waiting the step would not be long — else ``own_work``, and ``unknown`` when no
          collective of the step is matched (single-rank traces); ``collective`` and
          ``group_id`` name the call it waited longest in.
        * ``imbalance``: an iteration (with >= 2 ranks) whose largest compute time exceeds the
          median compute by ``rel_threshold`` or more; ``rank`` is the rank with the most
          compute, ``value_ns`` its excess over the median.
        * ``irregular_period``: the period of a call (its arrival minus the arrival of the same
          call — same process group, same position in the step — one step earlier on the same
          rank) departs from the median period of its process group by ``rel_threshold`` or
          more and scores ``|z| >= z_threshold``. One row per (rank, process group,
          iteration), naming the worst call; ``value_ns`` = period minus median.

        ``imbalance`` — per iteration: ``iteration``, ``ranks``, ``max_step_ns``,
        ``mean_step_ns``, ``max_mean_ratio`` (max / mean step), ``slowest_rank``,
        ``compute_min_ns``, ``compute_median_ns``, ``compute_max_ns``, ``compute_spread``
        ((max - min) / median compute), ``most_compute_rank``.

    Waiting is measured on the executing event (GPU stream for NCCL): it lengthens the
    host's step to the extent the host waits for that stream (it does in synchronous
    training, where the step ends with the optimizer after the last gradient collective).

    Raises:
        ParameterError: a threshold is not a finite number, or is negative (``z_threshold``
            must be positive).
    """
    for name, v, allow_zero in (("z_threshold", z_threshold, False),
                                ("rel_threshold", rel_threshold, True),
                                ("min_late_fraction", min_late_fraction, True)):
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise ParameterError(f"{name} must be a number, got {v!r}") from None
        if isinstance(v, bool) or not np.isfinite(fv) or fv < 0 or (fv == 0 and not allow_zero):
            raise ParameterError(f"{name} must be a {'non-negative' if allow_zero else 'positive'}"
                                 f" finite number, got {v!r}")
    lat = collective_lateness(ts)
    steps = _step_table(ts)
    med_step = float(steps["step_ns"].median()) if len(steps) else 0.0
    if lat.empty:
        steps["wait_ns"] = 0
    else:
        wait_by = lat.groupby(["rank", "iteration"])["wait_ns"].sum()
        steps["wait_ns"] = wait_by.reindex(pd.MultiIndex.from_frame(
            steps[["rank", "iteration"]])).fillna(0).to_numpy(np.int64)
    steps["busy_ns"] = steps["step_ns"] - steps["wait_ns"]
    ranks = _ranks_table(ts, lat, steps, med_step)
    imb = _imbalance_table(steps)
    flags = (_late_flags(lat, steps, med_step, z_threshold, min_late_fraction)
             + _long_step_flags(lat, steps, med_step, z_threshold, rel_threshold)
             + _imbalance_flags(imb, steps, rel_threshold)
             + _period_flags(ts, z_threshold, rel_threshold))
    cols = ["rank", "iteration", "kind", "score", "value_ns", "group_id", "collective", "cause",
            "evidence"]
    fl = pd.DataFrame(flags, columns=cols)
    if len(fl):
        order = {k: i for i, k in enumerate(FLAG_KINDS)}
        fl = fl.assign(_k=fl["kind"].map(order)).sort_values(
            ["_k", "iteration", "rank", "value_ns"], ascending=[True, True, True, False],
            kind="stable").drop(columns="_k").reset_index(drop=True)
    fl = fl.astype({"rank": "int32", "iteration": "int32", "score": "float64",
                    "value_ns": "int64", "group_id": "int64"})
    return {"ranks": ranks, "flags": fl, "imbalance": imb}


#: values of the ``kind`` column of ``straggler_report(ts)["flags"]``, in report order
FLAG_KINDS = ("late_at_collective", "long_step", "imbalance", "irregular_period")


def _late_flags(lat: pd.DataFrame, steps: pd.DataFrame, med_step: float, z_threshold: float,
                min_late_fraction: float) -> list[dict]:
    if lat.empty:
        return []
    z = np.zeros(len(lat))
    for _, idx in lat.groupby("process_group", sort=False).indices.items():
        z[idx] = robust_z(lat["lateness_ns"].to_numpy()[idx])
    late = lat["lateness_ns"].to_numpy()
    sel = (z >= z_threshold) & (late >= min_late_fraction * med_step) & (late > 0)
    if not sel.any():
        return []
    g_wait = lat.groupby("group_id")["wait_ns"].sum()
    first_rank = lat.loc[lat.groupby("group_id")["arrival_ns"].idxmin()].set_index(
        "group_id")["rank"]
    hits = lat[sel].assign(score=z[sel]).reset_index(drop=True)
    keys = ["rank", "iteration", "blamed_name"]
    # one flag per (rank, step, blamed op): its latest call (the first on ties), and the
    # other calls of the group in their order
    top = hits.sort_values("lateness_ns", ascending=False, kind="stable").drop_duplicates(keys)
    top = top.sort_values(keys, kind="stable")
    others = hits.groupby(keys, sort=False)["group_id"].agg(list).to_dict()
    g_wait_of = g_wait.to_dict()
    first_of = first_rank.to_dict()
    out = []
    for w in top.itertuples(index=False):
        calls = others[(w.rank, w.iteration, w.blamed_name)]
        blame = (f"blamed: {w.blamed_name} ({w.blamed_kind}), excess "
                 f"+{_ms(w.blamed_excess_ns)} = {100 * w.blamed_excess_ns / w.lateness_ns:.0f}%"
                 " of the lateness" if w.blamed_name else
                 "no op on its path took longer than on the other ranks")
        more = (f"; late likewise at {len(calls) - 1} more call(s) of the step "
                f"({', '.join(f'group {int(x)}' for x in calls if x != w.group_id)})"
                if len(calls) > 1 else "")
        out.append({
            "rank": int(w.rank), "iteration": int(w.iteration), "kind": "late_at_collective",
            "score": float(w.score), "value_ns": int(w.lateness_ns),
            "group_id": int(w.group_id), "collective": str(w.collective),
            "cause": str(w.blamed_name),
            "evidence": (f"arrived {_ms(w.lateness_ns)} after rank "
                         f"{int(first_of[w.group_id])} at {w.collective} (group "
                         f"{int(w.group_id)}, process group {w.process_group!r}, call "
                         f"{int(w.seq)}), where the group waited {_ms(g_wait_of[w.group_id])} "
                         f"in total; {blame}{more}"),
        })
    return out


def _long_step_flags(lat: pd.DataFrame, steps: pd.DataFrame, med_step: float,
                     z_threshold: float, rel_threshold: float) -> list[dict]:
    if len(steps) < 2 or med_step <= 0:
        return []
    zs = robust_z(steps["step_ns"].to_numpy())
    excess = steps["step_ns"].to_numpy(np.float64) - med_step
    sel = (excess >= rel_threshold * med_step) | ((zs >= z_threshold) & (excess > 0))
    med_comp = float(steps["compute_ns"].median())
    med_wait = float(steps["wait_ns"].median())
    # the call each (rank, step) waited longest in (the first on ties), found once
    lw = lat.reset_index(drop=True)  # labels are positions
    longest = (lw.groupby(["rank", "iteration"], sort=False)["wait_ns"].idxmax().to_dict()
               if len(lw) else {})
    cols = {c: lw[c].to_numpy() for c in ("collective", "group_id", "seq", "wait_ns",
                                          "last_rank")}
    out = []
    for i, s in zip(np.flatnonzero(sel).tolist(), steps[sel].itertuples(index=False),
                    strict=True):
        r, it = int(s.rank), int(s.iteration)
        w, busy = int(s.wait_ns), int(s.busy_ns)
        coll, gid, where = "", -1, ""
        at = longest.get((r, it))
        mine = at is not None
        if mine:
            coll, gid = str(cols["collective"][at]), int(cols["group_id"][at])
            where = (f", {_ms(cols['wait_ns'][at])} of it at {coll} (group {gid}, call "
                     f"{int(cols['seq'][at])}) waiting for rank {int(cols['last_rank'][at])}")
        if not mine:
            cause = "unknown"
            verdict = ("waiting unknown: no collective of this step is matched across ranks "
                       "(peers' traces absent?)")
        elif busy <= (1 + rel_threshold) * med_step:
            cause, verdict = "waiting", "long because it waits"
        else:
            cause, verdict = "own_work", "long by its own work"
        out.append({
            "rank": r, "iteration": it, "kind": "long_step", "score": float(zs[i]),
            "value_ns": int(excess[i]), "group_id": gid, "collective": coll, "cause": cause,
            "evidence": (f"step {_ms(s.step_ns)} is {s.step_ns / med_step:.2f}x the median "
                         f"{_ms(med_step)}; " + (
                             f"it waited {_ms(w)} in collectives (median rank {_ms(med_wait)})"
                             f"{where}; without waiting the step would be {_ms(busy)}: "
                             if mine else "") +
                         f"{verdict}; compute {_ms(s.compute_ns)} vs median {_ms(med_comp)}"),
        })
    return out


def _imbalance_flags(imb: pd.DataFrame, steps: pd.DataFrame, rel_threshold: float
                     ) -> list[dict]:
    out = []
    for row in imb.itertuples(index=False):
        if row.ranks < 2 or row.compute_median_ns <= 0:
            continue
        ex = row.compute_max_ns - row.compute_median_ns
        if ex < rel_threshold * row.compute_median_ns or ex <= 0:
            continue
        comp = steps.loc[steps["iteration"] == row.iteration, "compute_ns"].to_numpy()
        out.append({
            "rank": int(row.most_compute_rank), "iteration": int(row.iteration),
            "kind": "imbalance", "score": float(robust_z(comp).max()), "value_ns": int(ex),
            "group_id": -1, "collective": "", "cause": "compute",
            "evidence": (f"compute {_ms(row.compute_max_ns)} on rank "
                         f"{int(row.most_compute_rank)} vs median "
                         f"{_ms(row.compute_median_ns)} (+{100 * ex / row.compute_median_ns:.0f}"
                         f"%; spread (max-min)/median {100 * row.compute_spread:.0f}%); steps "
                         f"max/mean {row.max_mean_ratio:.2f}"),
        })
    return out


def _ranks_table(ts: TraceSet, lat: pd.DataFrame, steps: pd.DataFrame, med_step: float
                 ) -> pd.DataFrame:
    cols = ["rank", "iterations", "step_ns", "step_vs_median", "compute_ns", "collectives",
            "mean_lateness_ns", "max_lateness_ns", "last_share", "wait_ns", "waited_for_ns",
            "wait_per_step_ns", "busy_per_step_ns", "top_wait_collective", "top_wait_group",
            "top_wait_ns", "top_wait_for"]
    df = pd.DataFrame({"rank": np.asarray(ts.rank_ids, np.int32)})
    idx = df["rank"].to_numpy()
    st = steps.groupby("rank").agg(iterations=("iteration", "size"),
                                   step_ns=("step_ns", "mean"),
                                   compute_ns=("compute_ns", "mean"),
                                   busy_per_step_ns=("busy_ns", "mean"))
    st = st.reindex(idx)
    df["iterations"] = st["iterations"].fillna(0).to_numpy(np.int64)
    for c in ("step_ns", "compute_ns", "busy_per_step_ns"):
        df[c] = st[c].fillna(0).round().to_numpy(np.int64)
    df["step_vs_median"] = (st["step_ns"] / med_step).to_numpy(np.float64) if med_step > 0 \
        else np.nan
    n = len(df)
    if lat.empty:
        for c in ("collectives", "mean_lateness_ns", "max_lateness_ns", "wait_ns",
                  "waited_for_ns", "top_wait_ns"):
            df[c] = np.zeros(n, np.int64)
        df["last_share"] = 0.0
        df["top_wait_collective"] = ""
        df["top_wait_group"] = -1
        df["top_wait_for"] = -1
    else:
        g = lat.groupby("rank")
        df["collectives"] = g.size().reindex(idx).fillna(0).to_numpy(np.int64)
        df["mean_lateness_ns"] = g["lateness_ns"].mean().reindex(idx).fillna(0).round(
            ).to_numpy(np.int64)
        df["max_lateness_ns"] = g["lateness_ns"].max().reindex(idx).fillna(0).to_numpy(np.int64)
        g_arr = lat.groupby("group_id")["arrival_ns"]
        last = ((lat["arrival_ns"] == g_arr.transform("max"))
                & (g_arr.transform("max") > g_arr.transform("min")))  # all together: none
        n_last = last.groupby(lat["group_id"]).transform("sum").clip(lower=1)
        others = lat.groupby("group_id")["wait_ns"].transform("sum")
        share = pd.Series(np.where(last, others / n_last, 0.0), index=lat.index)
        df["last_share"] = last.groupby(lat["rank"]).mean().reindex(idx).fillna(0).to_numpy(
            np.float64)
        df["wait_ns"] = g["wait_ns"].sum().reindex(idx).fillna(0).to_numpy(np.int64)
        df["waited_for_ns"] = share.groupby(lat["rank"]).sum().reindex(idx).fillna(0).round(
            ).to_numpy(np.int64)
        top = lat.loc[g["wait_ns"].idxmax()].set_index("rank").reindex(idx)
        df["top_wait_collective"] = top["collective"].fillna("").to_numpy(object)
        df["top_wait_group"] = top["group_id"].fillna(-1).to_numpy(np.int64)
        df["top_wait_ns"] = top["wait_ns"].fillna(0).to_numpy(np.int64)
        df["top_wait_for"] = top["last_rank"].fillna(-1).to_numpy(np.int64)
    it = df["iterations"].to_numpy()
    df["wait_per_step_ns"] = np.where(it > 0, df["wait_ns"] / np.maximum(it, 1), 0).round(
        ).astype(np.int64)
    return df[cols]


def _imbalance_table(steps: pd.DataFrame) -> pd.DataFrame:
    cols = ["iteration", "ranks", "max_step_ns", "mean_step_ns", "max_mean_ratio",
            "slowest_rank", "compute_min_ns", "compute_median_ns", "compute_max_ns",
            "compute_spread", "most_compute_rank"]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    g = steps.groupby("iteration", sort=True)
    df = pd.DataFrame({
        "ranks": g.size(), "max_step_ns": g["step_ns"].max(),
        "mean_step_ns": g["step_ns"].mean().round().astype(np.int64),
        "slowest_rank": steps.loc[g["step_ns"].idxmax(), ["iteration", "rank"]].set_index(
            "iteration")["rank"],
        "compute_min_ns": g["compute_ns"].min(),
        "compute_median_ns": g["compute_ns"].median().round().astype(np.int64),
        "compute_max_ns": g["compute_ns"].max(),
        "most_compute_rank": steps.loc[g["compute_ns"].idxmax(), ["iteration", "rank"]
                                       ].set_index("iteration")["rank"],
    })
    df["max_mean_ratio"] = df["max_step_ns"] / df["mean_step_ns"].where(df["mean_step_ns"] > 0)
    df["compute_spread"] = ((df["compute_max_ns"] - df["compute_min_ns"])
                            / df["compute_median_ns"].where(df["compute_median_ns"] > 0)
                            ).fillna(0.0)
    df = df.reset_index()
    return df[cols]


def _period_flags(ts: TraceSet, z_threshold: float, rel_threshold: float) -> list[dict]:
    """irregular_period findings from every collective call in a step (matched or not)."""
    c = ts.collectives
    if c.num_rows == 0:
        return []
    ev_ts = A.to_numpy(ts.events.column("ts"))
    it_col = A.to_numpy(ts.events.column("iteration"))
    ev_row = A.to_numpy(c.column("event"))
    kern = A.to_numpy(c.column("kernel_event"))
    ex = np.where(kern >= 0, kern, ev_row)
    df = pd.DataFrame({"rank": A.to_numpy(c.column("rank")),
                       "pg": c.column("process_group").to_pylist(),
                       "collective": c.column("collective").to_pylist(),
                       "iteration": it_col[ev_row], "arrival": ev_ts[ex]})
    df = df[df["iteration"] >= 0].sort_values(["rank", "pg", "arrival"], kind="stable")
    if df.empty:
        return []
    grp = df.groupby(["rank", "pg", "iteration"])
    df["pos"] = grp.cumcount()
    df["n"] = grp["arrival"].transform("size")
    df = df.sort_values(["rank", "pg", "pos", "iteration"], kind="stable")
    prev = df.groupby(["rank", "pg", "pos"])[["iteration", "arrival", "n", "collective"]
                                             ].shift(1)
    # the same call one step earlier: consecutive steps with the same number of calls
    ok = (prev["iteration"].notna() & (prev["iteration"] == df["iteration"] - 1)
          & (prev["n"] == df["n"]) & (prev["collective"] == df["collective"])).to_numpy()
    df = df[ok].copy()
    if df.empty:
        return []
    df["period"] = df["arrival"].to_numpy(np.int64) - prev.loc[df.index, "arrival"].to_numpy(
        np.int64)
    out: list[dict] = []
    for pg, sub in df.groupby("pg", sort=False):
        if len(sub) < 3:
            continue
        per = sub["period"].to_numpy(np.float64)
        med = float(np.median(per))
        z = robust_z(per)
        dev = per - med
        sel = (np.abs(z) >= z_threshold) & (np.abs(dev) >= rel_threshold * abs(med))
        if not sel.any():
            continue
        hit = sub[sel].assign(z=z[sel], dev=dev[sel])
        for (r, it), h in hit.groupby(["rank", "iteration"], sort=True):
            w = h.loc[h["z"].abs().idxmax()]
            out.append({
                "rank": int(r), "iteration": int(it), "kind": "irregular_period",
                "score": float(w.z), "value_ns": int(w.dev), "group_id": -1,
                "collective": str(w.collective), "cause": "longer" if w.dev > 0 else "shorter",
                "evidence": (f"{len(h)} of {int(w.n)} calls in process group {pg!r} recurred "
                             f"off period; worst: {w.collective} call {int(w.pos)} of the "
                             f"step came {_ms(w.period)} after the same call one step earlier, "
                             f"{'+' if w.dev >= 0 else '-'}{_ms(abs(w.dev))} vs the median "
                             f"period {_ms(med)}"),
            })
    return out
