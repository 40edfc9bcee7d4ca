"""Collective lateness: who arrives late at each matched collective, who waits, and the op
that made a late rank late.

Clocks: a rank's times are recorded on its own clock. Arrivals are compared on an aligned
clock: every rank is shifted by the median, over matched collectives, of its kernel end minus
the lowest rank's (the members of an NCCL collective finish together) — the estimator
:func:`traincast.graph.build.build_graph` uses.

Blame follows StragglerAnalysis (Lin et al., arXiv 2505.05713): an op is identified across
ranks by its name and its position among ops of that name in the window, and its excess is
measured against the cross-rank median duration of the same op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traincast.analysis.stragglers.arrivals import lateness_core
from traincast.analysis.stragglers.compiled import (
    candidate_ops,
    has_window_blame,
    median_values_type,
    preload,
    window_blame,
)
from traincast.graph.collectives import match_collectives
from traincast.graph.jit import kernel, read_only, worth_compiling
from traincast.trace import arrow as A
from traincast.trace.intervals import RankLine
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory
from traincast.whatif.match import CHUNK

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

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


def _empty_lateness() -> pd.DataFrame:
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

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
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

    matched = match_collectives(ts)
    got = lateness_core(ts, matched)
    if got is None:
        return _empty_lateness()
    core, offsets = got
    tbl = matched.table
    tbl = tbl[tbl["group_id"].to_numpy() >= 0].reset_index(drop=True)
    out = pd.DataFrame({
        "rank": core["rank"], "iteration": tbl["step"].to_numpy(np.int32),
        "group_id": core["group_id"], "collective": tbl["collective"].to_numpy(object),
        "process_group": tbl["process_group"].to_numpy(object),
        "seq": tbl["seq"].to_numpy(np.int64), "group_size": tbl["group_size"].to_numpy(np.int32),
        "exec_event": core["exec_event"], "arrival_ns": core["arrival_ns"],
        "end_ns": core["end_ns"], "lateness_ns": core["lateness_ns"],
        "wait_ns": core["wait_ns"], "last_rank": core["last_rank"],
    })
    pg_key = tbl["process_group"].astype(str) + "|" + tbl["ranks_key"].astype(str)
    out["_pg"] = pg_key.to_numpy(object)
    _blame(ts, out, offsets)
    release_memory()  # the blame's candidate arrays' heap pages, before the report's work
    out = out.drop(columns="_pg").sort_values(["group_id", "rank"], kind="stable")
    return out[LATENESS_COLUMNS].reset_index(drop=True)


def _blame(ts: TraceSet, out: pd.DataFrame, offsets: dict[int, int]) -> None:
    """Fill window_start_ns and the blamed_* columns of ``out`` in place (see the doc above)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

    ev = ts.events
    ev_rank = A.to_numpy(ev.column("rank"))
    ev_ts = A.to_numpy(ev.column("ts"))
    ev_dur = A.to_numpy(ev.column("dur"))
    device = A.to_numpy(ev.column("device"))
    kind_idx, kinds = A.dictionary_parts(ev.column("kind"))
    name_idx, names = A.dictionary_parts(ev.column("name"))
    n_ev = ev_ts.size
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
    arg, seg_start, j = _running_ends(seg, o_end, o_arr)
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
                start[i] = (int(ev_ts[lo:hi].min()) - offsets.get(r, 0) if hi > lo
                            else int(o_end[i]))
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
    ids = np.int32 if n_ev < 2**31 else np.int64
    n_cand = int(np.count_nonzero(cand))
    # the kernels' loads before the candidates' arrays (their transient pages not on top)
    preload(n_cand, ids, it_ev, kind_idx, name_idx, ev_rank, ev_ts, ev_dur)
    crow = np.empty(n_cand, ids)  # np.flatnonzero(cand), a chunk at a time (no int64 copy)
    at = 0
    for a in range(0, n_ev, CHUNK):
        part = np.flatnonzero(cand[a:a + CHUNK])
        part += a
        crow[at:at + part.size] = part
        at += part.size
    del cand
    fused = candidate_ops(crow, it_ev, kind_idx, name_idx, ev_rank, ev_ts, offsets,
                           len(kinds), len(names))
    if fused is not None:  # the same codes and occurrences, compiled in one go
        code, n_codes, occ, most = fused
    else:
        code, n_codes = _op_codes(it_ev[crow], kind_idx[crow], name_idx[crow], len(kinds),
                                  len(names))
        occ, most = _occurrences(crow, code, n_codes, ev_rank, ev_ts, offsets, it_ev,
                                 kind_idx, name_idx)
    in_order = most is not None  # the candidates are in (rank, aligned start) order
    release_memory()  # the heap pages of the temporaries above, before the windows' own
    out["blamed_event"] = -1
    out["blamed_name"] = ""
    out["blamed_kind"] = ""
    out["blamed_excess_ns"] = 0
    # the events of each window (within [window start, arrival]) with their excess over the
    # median over the process group's ranks of the same op (missing = 0), per process group;
    # only late calls' positive excesses are kept
    arrival = out["arrival_ns"].to_numpy(np.int64)
    late = out["lateness_ns"].to_numpy() > 0
    off = [int(o) for o in offsets.values()] or [0]  # aligned times: ts shifted within these
    t_range = ((int(ev_ts.min()) - max(max(off), 0), int(ev_ts.max()) - min(min(off), 0))
               if n_ev else (0, 0))
    # pseudo-op: the window start
    gid = out["group_id"].to_numpy(np.int64)
    first_row = out.groupby("group_id")["arrival_ns"].idxmin()
    first_start = pd.Series(win_start[first_row.to_numpy()], index=first_row.index)
    p_excess = (win_start - first_start.reindex(gid).to_numpy(np.int64)).astype(np.float64)
    p_keep = np.flatnonzero(late & (p_excess > 0))
    # compiled (candidates in (rank, aligned start) order): the blamed op of each window
    # from two merges, the candidates never listed; per window (best, row, excess)
    chosen = ((np.zeros(n), np.full(n, -1, np.int64), np.zeros(n))
              if in_order and has_window_blame(2 * crow.size) else None)
    w_pseudo = np.zeros(n)
    w_pseudo[p_keep] = p_excess[p_keep]
    wl, rl, xl = [], [], []
    all_ranks = set(int(r) for r in ts.rank_ids)
    pg_of = out["_pg"].to_numpy()
    out_rank = out["rank"].to_numpy().astype(np.int64)
    for pg in pd.unique(pg_of):
        wins = np.flatnonzero(pg_of == pg)
        members = np.unique(out_rank[wins])
        world = all_ranks <= set(members.tolist())
        pos = None if world else np.flatnonzero(np.isin(ev_rank[crow], members))
        s_code, s_occ, s_row = (code, occ, crow) if pos is None else (code[pos], occ[pos],
                                                                       crow[pos])
        first, med = _op_medians(s_code, s_occ, s_row, n_codes, most if pos is None else None,
                                 ev_dur, members.size)
        release_memory()  # the medians' buckets (freed), back before the windows' pass
        hit = (window_blame(wins, out_rank[wins], win_start[wins], arrival[wins], late[wins],
                            w_pseudo[wins], s_row, s_code, s_occ, first, med, ev_rank, ev_ts,
                            ev_dur, offsets, NEST_SHARE) if chosen is not None else None)
        if hit is not None:  # the same choice, compiled
            for into, part in zip(chosen, hit, strict=True):
                into[wins] = part
            continue
        chosen = None  # (the kernel did not load: the numpy path for every group)
        for w_, r_, x_ in _window_events(wins, out_rank[wins], win_start[wins], arrival[wins],
                                         s_row, ev_rank, ev_ts, ev_dur, offsets, s_code,
                                         s_occ, first, med, t_range):
            keep = late[w_] & (x_ > 0)
            wl.append(w_[keep])
            rl.append(r_[keep])
            xl.append(x_[keep])
        del s_code, s_occ, s_row, first, med
    del occ, most, code, crow
    name_arr = np.asarray(names, object)
    kind_arr = np.asarray(kinds, object)
    if chosen is not None:
        best, c_row, c_x = chosen
        real = c_row >= 0  # a real op is eligible: it wins (the pseudo-op's duration is max)
        pseudo = ~real & (w_pseudo > 0) & (w_pseudo >= NEST_SHARE * best)
        w = np.flatnonzero(real | pseudo)
        f_row = np.clip(c_row[w], 0, None)
        _fill(out, w, real[w], c_row[w], np.where(real[w], c_x[w], p_excess[w]),
              w_anchor_event[w], w_anchor_name[w], name_arr[name_idx[f_row]]
              if len(names) else "", kind_arr[kind_idx[f_row]] if len(kinds) else "")
        return
    n_real = sum(x.size for x in xl)
    # candidates: real ops (index i < n_real) then the pseudo-ops
    cw = np.concatenate([*(w.astype(np.int64) for w in wl), p_keep])
    cx = np.concatenate([*xl, p_excess[p_keep]])
    row = np.concatenate([*(r.astype(np.int64) for r in rl), np.zeros(0, np.int64)])
    del wl, rl, xl
    if cw.size == 0:
        return
    keep = np.arange(cw.size)
    best = np.zeros(n)
    np.maximum.at(best, cw, cx)
    elig = cx >= NEST_SHARE * best[cw]
    keep, cw, cx = keep[elig], cw[elig], cx[elig]
    real = keep < n_real
    r_i = np.where(real, keep, 0)
    p_i = np.where(real, 0, p_keep[np.clip(keep - n_real, 0, None)] if p_keep.size else 0)
    r_row = row[r_i] if row.size else np.zeros(r_i.size, np.int64)
    cd = np.where(real, ev_dur[r_row] if row.size else 0,
                  np.iinfo(np.int64).max)  # real ops win ties
    ct = np.where(real, ev_ts[r_row] - _offset_of(ev_rank[r_row], offsets) if row.size else 0,
                  win_start[p_i])
    o = np.lexsort((ct, cd, cw))
    firsts = o[np.r_[True, cw[o][1:] != cw[o][:-1]]]
    w = cw[firsts]
    f_real = real[firsts]
    f_row = r_row[firsts]
    f_p = p_i[firsts]
    _fill(out, w, f_real, f_row, cx[firsts], w_anchor_event[f_p], w_anchor_name[f_p],
          name_arr[name_idx[f_row]] if len(names) else "",
          kind_arr[kind_idx[f_row]] if len(kinds) else "")


def _fill(out: pd.DataFrame, w: np.ndarray, real: np.ndarray, row: np.ndarray,
          excess: np.ndarray, anchor_event: np.ndarray, anchor_name: np.ndarray,
          name: np.ndarray | str, kind: np.ndarray | str) -> None:
    """The blamed_* columns of rows ``w`` of ``out``: the real op ``row`` (its ``name``,
    ``kind``) where ``real``, else the window start (its anchor event and name)."""
    out.loc[w, "blamed_event"] = np.where(real, row, anchor_event)
    out.loc[w, "blamed_name"] = np.where(real, name, anchor_name)
    out.loc[w, "blamed_kind"] = np.where(real, kind, "window")
    out.loc[w, "blamed_excess_ns"] = np.round(excess).astype(np.int64)


def _running_ends(seg: np.ndarray, end: np.ndarray, arr: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over segments of calls (``seg``: True at each segment's first call) sorted by
    arrival: per call, the position of the call ending last among the segment's calls up to
    it (``arg``), its segment's first position (``seg_start``), and the segment-relative
    index of the last call before which every call of the segment ended at or before this
    call's arrival (``j``, -1 for none). All segments in one pass: each is shifted onto its
    own stretch of one axis, so running maxima and searches never cross segments."""
    n = seg.size
    pos = np.arange(n, dtype=np.int64)
    seg_start = np.maximum.accumulate(np.where(seg, pos, 0)) if n else pos
    if n == 0:
        return pos, pos, pos
    t_lo = min(int(end.min()), int(arr.min()))
    span = max(int(end.max()), int(arr.max())) - t_lo + 1
    sid = np.cumsum(seg) - 1
    if int(sid[-1] + 1) * span >= 2**62:  # one segment at a time
        arg = np.zeros(n, np.int64)
        j = np.full(n, -1, np.int64)
        bounds = np.r_[np.flatnonzero(seg), n]
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            e = end[a:b]
            cm = np.maximum.accumulate(e)
            arg[a:b] = np.maximum.accumulate(np.where(e == cm, np.arange(b - a), 0)) + a
            j[a:b] = np.searchsorted(cm, arr[a:b], "right") - 1
        return arg, seg_start, j
    base = sid * span - t_lo
    cm = np.maximum.accumulate(base + end)
    arg = np.maximum.accumulate(np.where(base + end == cm, pos, 0))
    j = np.searchsorted(cm, base + arr, "right") - 1 - seg_start
    return arg, seg_start, j


def _op_codes(it: np.ndarray, kind: np.ndarray, name: np.ndarray, n_kinds: int,
              n_names: int) -> tuple[np.ndarray, int]:
    """(int code per candidate, number of codes): equal codes for equal (iteration, kind,
    name). Dense arithmetic codes (int32) when their range is small, else factorised."""
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

    if it.size == 0:
        return np.zeros(0, np.int64), 0
    it_lo = int(it.min())
    n_codes = (int(it.max()) - it_lo + 1) * max(n_kinds, 1) * max(n_names, 1)
    if int(kind.min()) >= 0 and int(name.min()) >= 0 and n_codes <= max(it.size, 1 << 20):
        code = it.astype(np.int32)  # every partial value below n_codes < 2**31
        code -= it_lo
        code *= n_kinds
        code += kind
        code *= n_names
        code += name
        return code, n_codes
    key = _pack([it, kind, name])
    if key is None:
        keys = pd.DataFrame({"i": it, "k": kind, "n": name})
        code = keys.groupby(["i", "k", "n"], sort=False).ngroup().to_numpy(np.int64)
        return code, int(code.max()) + 1
    codes, uniques = pd.factorize(key)
    return codes.astype(np.int64, copy=False), len(uniques)


def _offset_of(rank: np.ndarray, offsets: dict[int, int]) -> np.ndarray | np.int64:
    """int64 per element: the clock offset of its rank (0 for a rank without one)."""
    keys = sorted(r for r, o in offsets.items() if o)
    if not keys or rank.size == 0:
        return np.int64(0)
    k = np.asarray(keys, np.int64)
    vals = np.asarray([offsets[r] for r in keys], np.int64)
    new = np.flatnonzero(rank[1:] != rank[:-1]) + 1
    if new.size < rank.size // 8:  # runs of one rank: one look-up per run
        starts = np.r_[0, new]
        run_rank = rank[starts].astype(np.int64)
        pos = np.clip(np.searchsorted(k, run_rank), 0, k.size - 1)
        run_off = np.where(k[pos] == run_rank, vals[pos], 0)
        return np.repeat(run_off, np.diff(np.r_[starts, rank.size]))
    pos = np.clip(np.searchsorted(k, rank), 0, k.size - 1)
    return np.where(k[pos] == rank, vals[pos], 0)


def _occurrences(crow: np.ndarray, code: np.ndarray, n_codes: int, ev_rank: np.ndarray,
                 ev_ts: np.ndarray, offsets: dict[int, int], it_ev: np.ndarray,
                 kind_idx: np.ndarray, name_idx: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """(per candidate (``crow``, ascending rows): its index among its rank's candidates of
    the same ``code`` (iteration, kind, name) in aligned start order (ties: row order); per
    code, its most candidates on one rank, or None when not counted)."""
    c_rank = ev_rank[crow]
    c_t0 = ev_ts[crow]
    keys = [r for r, o in offsets.items() if o]
    if keys and c_rank.size and np.all(c_rank[1:] >= c_rank[:-1]):  # in place, per rank
        k = np.asarray(keys, c_rank.dtype)
        lo = np.searchsorted(c_rank, k, "left").tolist()
        hi = np.searchsorted(c_rank, k, "right").tolist()
        for r, a, b in zip(keys, lo, hi, strict=True):
            c_t0[a:b] -= offsets[r]
    elif keys:
        c_t0 -= _offset_of(c_rank, offsets)
    fast = _occurrences_in_row_order(code, c_rank, c_t0, n_codes, most=True)
    if fast is not None:
        return fast
    t0 = np.zeros(ev_ts.size, np.int64)
    t0[crow] = c_t0
    del c_rank, c_t0
    _, _, occ = _occurrences_by_sort(crow, code, ev_rank, it_ev, kind_idx, name_idx, t0)
    return occ[crow], None


_OP_MEDIANS: list = []


def _op_medians(code: np.ndarray, occ: np.ndarray, rows: np.ndarray, n_codes: int,
                most: np.ndarray | None, dur: np.ndarray, size: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """(``first``, ``med``): op ids ``first[code] + occ`` (equal for equal (code,
    occurrence), the codes' blocks laid end to end, each as long as the code's ``most``
    occurrences on one rank, counted here when None) and per id the median of ``dur[rows]``
    over ``size`` members, missing members counting 0 (:func:`_median_missing_zero`)."""
    if most is None:
        most = np.zeros(n_codes, np.int64)
        if code.size:
            np.maximum.at(most, code, occ.astype(np.int64) + 1)
    first = np.zeros(n_codes, np.int64)
    if n_codes:
        np.cumsum(most[:-1], out=first[1:])
    if code.size == 0:
        return first, np.zeros(0)
    if worth_compiling(2 * code.size):  # the same medians, compiled
        if not _OP_MEDIANS:
            _OP_MEDIANS.append(kernel("traincast.analysis.numba_kernels", "op_medians"))
        if _OP_MEDIANS[0] is not None:
            n_keys = int(first[-1] + most[-1])
            vals = np.empty(code.size, median_values_type(dur))  # the kernel's buckets
            return first, _OP_MEDIANS[0](*read_only(code, occ, first, rows, dur), int(size),
                                         n_keys, vals)
    kid = first[code]
    kid += occ
    return first, _median_missing_zero(kid, dur[rows], np.full(kid.size, size))


def _window_events(wins: np.ndarray, w_rank: np.ndarray, w_start: np.ndarray,
                   w_arr: np.ndarray, rows: np.ndarray, ev_rank: np.ndarray,
                   ev_ts: np.ndarray, ev_dur: np.ndarray, offsets: dict[int, int],
                   code: np.ndarray, occ: np.ndarray, first: np.ndarray, med: np.ndarray,
                   t_range: tuple[int, int], chunk: int = 1 << 18
                   ):  # type: ignore[no-untyped-def]
    """The candidates (event ``rows``, ascending, with their ``code`` and ``occ``) that lie
    in a window of their rank (start at or after the window's start, the latest such
    window; ended by its arrival), with their excess over the op's median ``med[first[code]
    + occ]``: (window, row, excess) arrays, a chunk of candidates at a time, in candidate
    order. ``wins`` are the windows' rows in ``out`` (one process group); ``t_range``
    bounds the candidates' aligned start times."""
    if wins.size == 0 or rows.size == 0:
        return
    o = np.lexsort((wins, w_start, w_rank))
    wins, w_rank, w_start, w_arr = wins[o], w_rank[o], w_start[o], w_arr[o]
    keys = np.unique(w_rank)
    parts = [(a, min(a + chunk, rows.size)) for a in range(0, rows.size, chunk)]
    t_lo = min(int(w_start.min()), t_range[0])
    t_hi = max(int(w_start.max()), t_range[1])
    span = t_hi - t_lo + 1
    if keys.size * span >= 2**62 and keys.size > 1:  # one rank at a time
        for r in keys.tolist():
            m = w_rank == r
            mine = np.flatnonzero(ev_rank[rows] == r)
            yield from _window_events(wins[m], w_rank[m], w_start[m], w_arr[m], rows[mine],
                                      ev_rank, ev_ts, ev_dur, offsets, code[mine],
                                      occ[mine], first, med, t_range, chunk)
        return
    line = RankLine(keys, t_lo, span) if keys.size * span < 2**62 else RankLine(keys, 0, 0)
    wc = line.base(w_rank) + w_start
    w_end = line.base(w_rank) + w_arr  # arrivals, on the same axis
    for a, b in parts:
        r_ = rows[a:b]
        rank = ev_rank[r_]
        c, known = _coordinates(line, rank, ev_ts[r_], offsets)
        if np.all(c[1:] >= c[:-1]):  # candidates in (rank, time) order: one merge
            marks = np.bincount(np.searchsorted(c, wc, "left"), minlength=c.size + 1)
            k = np.cumsum(marks[:c.size]) - 1
        else:
            k = np.searchsorted(wc, c, "right") - 1
        ok = known & (k >= 0)
        kk = np.clip(k, 0, None)
        ok &= w_rank[kk] == rank
        d = ev_dur[r_]
        c += d
        ok &= c <= w_end[kk]
        del c, kk, rank
        p = np.flatnonzero(ok)
        kid = first[code[a:b][p]]
        kid += occ[a:b][p]
        yield (wins[k[p]], r_[p], (d[p] - med[kid]).astype(np.float64, copy=False))


def _coordinates(line: RankLine, rank: np.ndarray, ts: np.ndarray, offsets: dict[int, int]
                 ) -> tuple[np.ndarray, np.ndarray | bool]:
    """(coordinates along ``line`` of times ``ts`` on ranks ``rank``, aligned by the ranks'
    clock ``offsets``; whether each rank is one of the line's, True when all are)."""
    keys = line.keys
    off = np.zeros(keys.size, np.int64)
    for i, r in enumerate(keys.tolist()):
        off[i] = offsets.get(r, 0)
    base = np.arange(keys.size, dtype=np.int64) * line.span - line.t0 - off
    if rank.size and np.all(rank[1:] >= rank[:-1]):  # no search: one run per rank
        count = np.searchsorted(rank, keys, "right") - np.searchsorted(rank, keys, "left")
        if int(count.sum()) == rank.size:
            c = np.repeat(base, count)
            c += ts
            return c, True
    k_pos = np.clip(np.searchsorted(keys, rank), 0, max(keys.size - 1, 0))
    known = keys[k_pos] == rank if keys.size else np.zeros(rank.size, bool)
    c = base[k_pos] if keys.size else np.zeros(rank.size, np.int64)
    c += ts
    return c, known


_OCC: list = []


def _occurrences_in_row_order(op_key: np.ndarray | None, rank: np.ndarray, t0: np.ndarray,
                              n_codes: int | None = None, most: bool = False):  # type: ignore[no-untyped-def]
    """Occurrence index of each candidate among its rank's candidates with the same
    ``op_key`` (iteration, kind, name), counted in row order, or None when that is not the
    time order the blame needs (a rank's rows not contiguous and ascending, or not sorted by
    start time within a rank, as a reader's rows are), when the key did not fit one int64,
    or without the compiled kernel: :func:`_occurrences_by_sort` then gives the same.
    With ``n_codes``, ``op_key`` holds codes in ``[0, n_codes)`` already (no factorising);
    with ``most``, returns (occurrences, per code its most rows on one rank)."""
    if op_key is None or not worth_compiling(2 * rank.size):
        return None
    if not _OCC:
        _OCC.append(kernel("traincast.analysis.numba_kernels", "occurrences_most"))
    if _OCC[0] is None:
        return None
    if rank.size == 0:
        return (np.zeros(0, np.int64), np.zeros(n_codes or 0, np.int64)) if most else \
            np.zeros(0, np.int64)
    new_rank = rank[1:] != rank[:-1]
    if not (np.all(rank[1:] >= rank[:-1]) and np.all((t0[1:] >= t0[:-1]) | new_rank)):
        return None
    if n_codes is None:
        import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

        codes, uniques = pd.factorize(op_key)
        op_key, n_codes = codes.astype(np.int64, copy=False), len(uniques)
    bounds = np.r_[0, np.flatnonzero(new_rank) + 1, rank.size].astype(np.int64)
    occ, most_rows = _OCC[0](op_key, bounds, n_codes)
    return (occ, most_rows) if most else occ.astype(np.int64)


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


def _median_kernel(size: int | None = None):  # type: ignore[no-untyped-def]
    """:func:`traincast.analysis.numba_kernels.median_missing_zero`, or None
    (:func:`traincast.graph.jit.kernel`; ``size``: twice the rows)."""
    if not worth_compiling(size):
        return None
    if not _MEDIAN:
        _MEDIAN.append(kernel("traincast.analysis.numba_kernels", "median_missing_zero"))
    return _MEDIAN[0]


def _median_missing_zero(kid: np.ndarray, dur: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Median per key of ``dur`` over ``size`` members, members without a row counting 0."""
    if kid.size == 0:
        return np.zeros(0)
    compiled = _median_kernel(2 * kid.size)
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
