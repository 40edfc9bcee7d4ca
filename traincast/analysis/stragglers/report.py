"""The straggler report: per-rank statistics, findings with evidence, per-step imbalance.

Outliers are scored with the modified z-score ``(x - median) / (1.4826 MAD)`` (Iglewicz and
Hoaglin 1993, "How to Detect and Handle Outliers"; the same as ``0.6745 (x - median) / MAD``),
flagged above :data:`Z_THRESHOLD`. When the MAD is 0 the mean absolute deviation times 1.2533
is used instead, and when both are 0 the score is 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traincast.analysis.breakdown import breakdown_columns
from traincast.analysis.stragglers.arrivals import lateness_core, lateness_order
from traincast.analysis.stragglers.lateness import collective_lateness
from traincast.errors import ParameterError
from traincast.graph.collectives import match_collectives
from traincast.graph.grouped import pair_rows
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

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


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


#: columns of ``straggler_report(ts)["imbalance"]``
IMBALANCE_COLUMNS = ["iteration", "ranks", "max_step_ns", "mean_step_ns", "max_mean_ratio",
                     "slowest_rank", "compute_min_ns", "compute_median_ns", "compute_max_ns",
                     "compute_spread", "most_compute_rank"]
#: the columns of ``straggler_report(ts)["ranks"]`` that :func:`straggler_summary` gives
TOP_WAIT_COLUMNS = ["rank", "top_wait_collective", "top_wait_group", "top_wait_ns",
                    "top_wait_for"]


def _step_columns(ts: TraceSet) -> dict[str, np.ndarray]:
    """Per row of ``ts.iterations`` (its order): ``rank``, ``iteration`` (its dtypes),
    ``step_ns`` (int64 ns) and ``compute_ns`` (int64 ns: the device compute union, else host
    compute, from :func:`~traincast.analysis.breakdown.breakdown_columns` per iteration; 0
    for a step it has no row for)."""
    it = ts.iterations
    rank = A.to_numpy(it.column("rank")).copy()
    iteration = A.to_numpy(it.column("iteration")).copy()
    step = A.to_numpy(it.column("dur")).astype(np.int64)
    bd = breakdown_columns(ts, per="iteration")
    rows, _ = pair_rows((rank, iteration), (bd["rank"], bd["iteration"]))  # the first match
    comp = np.zeros(rank.size, np.int64)
    hit = rows >= 0
    comp[hit] = bd["compute_ns"][rows[hit]]
    return {"rank": rank, "iteration": iteration, "step_ns": step, "compute_ns": comp}


def _step_table(ts: TraceSet) -> pd.DataFrame:
    """Per (rank, iteration): step_ns, compute_ns (device compute union, else host compute)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

    return pd.DataFrame(_step_columns(ts))


def straggler_summary(ts: TraceSet) -> dict[str, dict[str, np.ndarray]]:
    """What the verdict reads of :func:`straggler_report`, as numpy columns, without pandas
    and without the lateness blame.

    Args:
        ts: a TraceSet, measured or predicted.

    Returns:
        ``{"ranks": ..., "imbalance": ...}``: ``ranks`` holds the :data:`TOP_WAIT_COLUMNS`
        of ``straggler_report(ts)["ranks"]`` (one row per rank of ``ts.rank_ids``: ``rank``
        int32, ``top_wait_collective`` object ("" where the rank waited in no matched
        collective), ``top_wait_group`` / ``top_wait_ns`` / ``top_wait_for`` int64, -1 / 0 /
        -1 there); ``imbalance`` the whole ``straggler_report(ts)["imbalance"]`` table
        (:data:`IMBALANCE_COLUMNS`, one row per iteration, the same dtypes; object columns
        when there is no step). Each maps a column name to a 1-D array.

    Raises:
        CollectiveMismatchError: ranks disagree on the sequence of collectives (from
            :func:`~traincast.graph.collectives.match_collectives`).
    """
    matched = match_collectives(ts)
    got = lateness_core(ts, matched)
    rank_ids = np.asarray(ts.rank_ids, np.int32)
    if got is None:
        ranks = _top_wait_columns(rank_ids, None)
    else:
        core = got[0]
        o = lateness_order(core)
        names = np.asarray([*matched.collective_names, None], object)
        coll = names[matched.columns["collective"][core["row"][o]]]
        ranks = _top_wait_columns(rank_ids, (core["rank"][o], core["wait_ns"][o], coll,
                                             core["group_id"][o], core["last_rank"][o]))
    return {"ranks": ranks, "imbalance": _imbalance_columns(_step_columns(ts))}


def _top_wait_columns(rank_ids: np.ndarray,
                      lat: tuple[np.ndarray, ...] | None) -> dict[str, np.ndarray]:
    """The :data:`TOP_WAIT_COLUMNS` per rank of ``rank_ids`` (int32): the call each waited
    longest in, the first such row (``idxmax``'s) of the lateness table ``lat`` = (rank,
    wait_ns, collective, group_id, last_rank) columns in its order; None: no row."""
    n = rank_ids.size
    out = {"rank": rank_ids, "top_wait_collective": np.full(n, "", object),
           "top_wait_group": np.full(n, -1, np.int64), "top_wait_ns": np.zeros(n, np.int64),
           "top_wait_for": np.full(n, -1, np.int64)}
    if lat is None or lat[0].size == 0 or n == 0:
        return out
    rank, wait, coll, gid, last = lat
    o = np.lexsort((-np.asarray(wait, np.int64), rank))  # by rank, the largest wait first
    r = np.asarray(rank, np.int64)[o]
    first = np.r_[True, r[1:] != r[:-1]]
    top_rank, top_row = r[first], o[first]
    pos = np.clip(np.searchsorted(top_rank, rank_ids), 0, top_rank.size - 1)
    has = top_rank[pos] == rank_ids
    at = top_row[pos[has]]
    out["top_wait_collective"][has] = ["" if c is None else c for c in coll[at].tolist()]
    out["top_wait_group"][has] = gid[at]
    out["top_wait_ns"][has] = wait[at]
    out["top_wait_for"][has] = last[at]
    return out


def _imbalance_columns(steps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``straggler_report(ts)["imbalance"]`` from the step columns (:func:`_step_columns`):
    per iteration, ascending, the max and mean step, the min / median / max compute
    (medians and means rounded half to even) and the first rank with the max of each."""
    it = steps["iteration"]
    if it.size == 0:
        return {c: np.empty(0, object) for c in IMBALANCE_COLUMNS}
    o = np.argsort(it, kind="stable")  # each iteration's rows in table order
    its = it[o]
    starts = np.flatnonzero(np.r_[True, its[1:] != its[:-1]])
    counts = np.diff(np.r_[starts, its.size])
    rank = steps["rank"][o]
    step = steps["step_ns"][o].astype(np.int64)
    comp = steps["compute_ns"][o].astype(np.int64)
    pos = np.arange(its.size)

    def first_max(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        top = np.maximum.reduceat(v, starts)
        at = np.where(v == np.repeat(top, counts), pos, its.size)
        return top, rank[np.minimum.reduceat(at, starts)]

    max_step, slowest = first_max(step)
    max_comp, most_comp = first_max(comp)
    mean_step = np.round(np.add.reduceat(step, starts) / counts).astype(np.int64)
    c_sorted = comp[np.lexsort((comp, its))].astype(np.float64)
    med = (c_sorted[starts + (counts - 1) // 2] + c_sorted[starts + counts // 2]) / 2
    med_comp = np.round(med).astype(np.int64)
    min_comp = np.minimum.reduceat(comp, starts)
    ratio = max_step / np.where(mean_step > 0, mean_step.astype(np.float64), np.nan)
    spread = (max_comp - min_comp) / np.where(med_comp > 0, med_comp.astype(np.float64), np.nan)
    return {"iteration": its[starts], "ranks": counts.astype(np.int64),
            "max_step_ns": max_step, "mean_step_ns": mean_step, "max_mean_ratio": ratio,
            "slowest_rank": slowest, "compute_min_ns": min_comp,
            "compute_median_ns": med_comp, "compute_max_ns": max_comp,
            "compute_spread": np.where(np.isnan(spread), 0.0, spread),
            "most_compute_rank": most_comp}


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
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

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
    h_gid = hits["group_id"].to_numpy()
    others = {k: h_gid[v].tolist()
              for k, v in hits.groupby(keys, sort=False).indices.items()}
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
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

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
        top = _top_wait_columns(np.asarray(idx, np.int32), tuple(
            lat[c].to_numpy() for c in ("rank", "wait_ns", "collective", "group_id",
                                        "last_rank")))
        for c in TOP_WAIT_COLUMNS[1:]:
            df[c] = top[c]
    it = df["iterations"].to_numpy()
    df["wait_per_step_ns"] = np.where(it > 0, df["wait_ns"] / np.maximum(it, 1), 0).round(
        ).astype(np.int64)
    return df[cols]


def _imbalance_table(steps: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

    return pd.DataFrame(_imbalance_columns({c: steps[c].to_numpy() for c in (
        "rank", "iteration", "step_ns", "compute_ns")}))


def _period_flags(ts: TraceSet, z_threshold: float, rel_threshold: float) -> list[dict]:
    """irregular_period findings from every collective call in a step (matched or not)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that the verdict's summary skips

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
