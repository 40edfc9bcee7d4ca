"""Trace diff: which ops got slower or faster between two runs, and how much of the step-time
change they explain.

Works on any two TraceSets: two measured runs (different hardware, code or configuration),
or a measurement and its replay (``traincast.predict(ts).timeline``), since both share the
canonical schema.

Method. Ops are grouped by a key — the event name (``by="name"``) or the op family
(``by="op_family"``) — and the event kind, as HTA's trace diff groups CPU ops and kernels by
name and compares counts and durations (HolisticTraceAnalysis, ``hta/trace_diff.py``,
``TraceDiff.compare_traces``); here every kind of event is compared, with these exceptions:
``cuda_sync`` records (kind ``sync``: they mark waiting, not work) and GPU-side copies of host
annotations (kind ``annotation`` on a device: they mirror the host range) are left out, and
``ProfilerStep#N`` is renamed ``ProfilerStep#*`` so that runs with different step numbers
match. With ``per_iteration`` (default) only events inside a step count and every total is
divided by the number of (rank, step) windows of its trace, so runs with different step or
rank counts compare; without it, totals are sums over the whole trace.

Attribution of the step-time change. The per-op ``delta_ns`` are changes in summed op time;
they explain a change in step time only to the extent that the step is bound by the resource
they run on. For device ops (kernels, copies, memsets and NCCL kernels on a GPU),
``contribution_pct = 100 * delta_ns / step change`` — what the step change would be made of if
the GPU were the critical resource throughout (fully device-bound, no overlap between
streams). The ``summary`` says how far that holds: ``device_busy_*`` is the union of device
ops per step (overlap between streams counted once), ``device_bound_*`` its share of the step,
and the step change splits exactly into ``device_busy_delta_ns`` (GPU busy longer or shorter)
plus ``device_idle_delta_ns`` (GPU idle longer or shorter: host-bound time, launch gaps,
waiting that is not a kernel). ``device_ops_explained_pct`` = sum of device-op deltas over the
step change; it differs from ``device_busy_explained_pct`` by concurrent streams (ops that
overlap) — neither claims more than the device timeline shows. Host ops nest (a parent
includes its children) and overlap the device, so their deltas are not additive and get no
contribution (NaN). NCCL kernels include the time spent waiting for peers, so their deltas
can reflect other ranks.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traincast.errors import ParameterError
from traincast.trace import arrow as A
from traincast.trace.intervals import union
from traincast.trace.schema import DEVICE_KINDS
from traincast.trace.traceset import TraceSet

#: relative change below which an op is "same"
SAME_REL = 0.05
#: absolute change below which an op is "same" (ns)
SAME_ABS_NS = 1_000
#: values of ``status``
STATUSES = ("slower", "faster", "same", "new", "gone")

_STEP = re.compile(r"^ProfilerStep#\d+$")

#: values of ``cause``: what changed the time per step of a slower/faster op
CAUSES = ("per-call", "count", "both", "count, per-call opposite", "per-call, count opposite")

OPS_COLUMNS = ["name", "kind", "op_family", "on_device", "count_a", "count_b", "total_a_ns",
               "total_b_ns", "mean_a_ns", "mean_b_ns", "delta_ns", "delta_pct", "status",
               "cause", "contribution_pct", "delta_share_pct"]


def _side(ts: TraceSet, by: str, per_iteration: bool) -> tuple[pd.DataFrame, int]:
    """Per (key, kind): count, total (ns), family, on_device; and the normaliser."""
    ev = ts.events
    kind_idx, kinds = A.dictionary_parts(ev.column("kind"))
    name_idx, names = A.dictionary_parts(ev.column("name"))
    fam_idx, fams = A.dictionary_parts(ev.column("op_family"))
    device = A.to_numpy(ev.column("device"))
    dur = A.to_numpy(ev.column("dur"))
    iteration = A.to_numpy(ev.column("iteration"))
    keep = np.ones(kind_idx.size, bool)
    if "sync" in kinds:
        keep &= kind_idx != kinds.index("sync")
    if "annotation" in kinds:
        keep &= ~((kind_idx == kinds.index("annotation")) & (device >= 0))
    if per_iteration:
        keep &= iteration >= 0
    if by == "name":
        norm = ["ProfilerStep#*" if _STEP.match(n) else n for n in names]
        code_of_name, labels = pd.factorize(pd.Series(norm, dtype=object))
        key = code_of_name.astype(np.int64)[name_idx] if name_idx.size else name_idx
    else:
        labels = np.asarray(fams, dtype=object)
        key = fam_idx.astype(np.int64)
    nk = max(len(kinds), 1)
    combo = key[keep].astype(np.int64) * nk + kind_idx[keep]
    rows = np.flatnonzero(keep)
    uniq, first, inv = np.unique(combo, return_index=True, return_inverse=True)
    count = np.bincount(inv, minlength=uniq.size)
    total = np.bincount(inv, weights=dur[rows].astype(np.float64), minlength=uniq.size)
    on_dev = np.bincount(inv, weights=(device[rows] >= 0).astype(np.float64),
                         minlength=uniq.size) > 0
    df = pd.DataFrame({
        "name": np.asarray(labels, dtype=object)[uniq // nk] if uniq.size else
        np.empty(0, object),
        "kind": np.asarray(kinds, dtype=object)[uniq % nk] if uniq.size else np.empty(0, object),
        "op_family": (np.asarray(fams, dtype=object)[fam_idx[rows[first]]] if uniq.size
                      else np.empty(0, object)),
        "on_device": on_dev & np.isin(np.asarray(kinds, dtype=object)[uniq % nk]
                                      if uniq.size else np.empty(0, object), DEVICE_KINDS),
        "count": count.astype(np.int64), "total": total,
    })
    n_windows = ts.iterations.num_rows if per_iteration else 1
    return df, max(int(n_windows), 1)


def _device_busy(ts: TraceSet) -> np.ndarray:
    """Per row of ``ts.iterations``: ns during which at least one device op runs."""
    it = ts.iterations
    ranks = A.to_numpy(it.column("rank"))
    lo_w = A.to_numpy(it.column("start")).astype(np.int64)
    hi_w = A.to_numpy(it.column("end")).astype(np.int64)
    out = np.zeros(ranks.size, np.int64)
    ev = ts.events
    kind_idx, kinds = A.dictionary_parts(ev.column("kind"))
    dev_codes = [kinds.index(k) for k in DEVICE_KINDS if k in kinds]
    is_dev = np.isin(kind_idx, dev_codes) & (A.to_numpy(ev.column("device")) >= 0)
    ts_ = A.to_numpy(ev.column("ts"))
    end = ts_ + A.to_numpy(ev.column("dur"))
    for r in np.unique(ranks).tolist():
        lo, hi = ts.rank_slice(int(r))
        m = np.flatnonzero(is_dev[lo:hi]) + lo
        if m.size == 0:
            continue
        s, e = union(ts_[m], end[m])
        cum = np.concatenate([[0], np.cumsum(e - s)])
        sel = np.flatnonzero(ranks == r)
        out[sel] = _covered_before(s, e, cum, hi_w[sel]) - _covered_before(s, e, cum, lo_w[sel])
    return out


def _covered_before(s: np.ndarray, e: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted intervals (s, e) lying before each time in ``t``."""
    k = np.searchsorted(s, t, "right") - 1
    kk = np.clip(k, 0, None)
    part = np.clip(np.minimum(t, e[kk]) - s[kk], 0, None)
    return np.where(k >= 0, cum[kk] + part, 0)


def _pairing(ra: list[int], rb: list[int]) -> list[str]:
    """Why the i-th rank of a is compared with the i-th of b (see :func:`trace_diff`)."""
    n = max(len(ra), len(rb))
    if ra == rb:
        return ["same rank"] * n
    held = (f"a holds rank{'s' if len(ra) > 1 else ''} {', '.join(map(str, ra))}, "
            f"b rank{'s' if len(rb) > 1 else ''} {', '.join(map(str, rb))}")
    out = []
    for i in range(n):
        if i < len(ra) and i < len(rb) and ra[i] == rb[i]:
            out.append("same rank")
        else:
            out.append(f"different ranks, paired in order ({held})")
    return out


def _steps(ts: TraceSet) -> pd.DataFrame:
    it = ts.iterations
    df = pd.DataFrame({"rank": A.to_numpy(it.column("rank")),
                       "dur": A.to_numpy(it.column("dur")).astype(np.int64)})
    df["busy"] = _device_busy(ts)
    return df


def _cause(count_a: np.ndarray, count_b: np.ndarray, mean_a: np.ndarray, mean_b: np.ndarray,
           status: np.ndarray) -> np.ndarray:
    """object[n]: the cause of each slower/faster status (see :func:`trace_diff`)."""
    out = np.full(status.size, "", dtype=object)
    with np.errstate(divide="ignore", invalid="ignore"):
        rc = np.log(count_b / count_a)  # > 0: more calls
        rm = np.log(mean_b / mean_a)  # > 0: longer calls
    thr = np.log1p(SAME_REL)
    moved_c = np.abs(rc) >= thr
    moved_m = np.abs(rm) >= thr
    for st, sign in (("slower", 1.0), ("faster", -1.0)):
        sel = status == st
        up_c = moved_c & (np.sign(rc) == sign)
        up_m = moved_m & (np.sign(rm) == sign)
        down_c = moved_c & ~up_c
        down_m = moved_m & ~up_m
        out[sel & up_m & ~moved_c] = "per-call"
        out[sel & up_c & ~moved_m] = "count"
        out[sel & up_c & up_m] = "both"
        out[sel & up_c & down_m] = "count, per-call opposite"
        out[sel & up_m & down_c] = "per-call, count opposite"
    return out


def trace_diff(a: TraceSet, b: TraceSet, *, by: str = "name", per_iteration: bool = True
               ) -> dict[str, pd.DataFrame]:
    """Compare two runs op by op (``b`` relative to ``a``).

    Args:
        a, b: TraceSets (measured or predicted); ``b`` is compared with ``a``.
        by: ``"name"`` (one row per event name and kind) or ``"op_family"`` (one row per op
            family and kind; ``name`` then holds the family).
        per_iteration: count only events inside steps and divide counts and totals by the
            number of (rank, step) windows of each trace; False sums the whole trace.

    Returns:
        ``ops`` — one row per (key, kind), sorted by ``|delta_ns|`` descending (device ops
        first among equal changes):
        ``name``, ``kind``, ``op_family``, ``on_device`` (runs on a GPU), ``count_a``,
        ``count_b`` (calls; per step when ``per_iteration``, float), ``total_a_ns``,
        ``total_b_ns`` (summed duration, per step when ``per_iteration``; int64 ns),
        ``mean_a_ns``, ``mean_b_ns`` (per call; NaN where absent), ``delta_ns`` (total b -
        total a), ``delta_pct`` (relative to total a; NaN for new ops), ``status``,
        ``contribution_pct`` (device ops: delta as % of the step-time change, NaN for host
        ops or when the step time did not change; see module doc), ``delta_share_pct``
        (delta as % of the summed ``|delta_ns|`` of its domain — device ops or host ops —,
        signed).

        ``status``: ``new`` (only in b), ``gone`` (only in a), ``same`` when ``|delta_ns| <
        1 µs`` or ``|delta_ns| < 5%`` of total a (:data:`SAME_ABS_NS`, :data:`SAME_REL`:
        below either, a change is within run-to-run noise of a profiled step), else
        ``slower`` (more time per step) or ``faster``.

        ``cause`` (slower/faster ops; "" otherwise) names what changed the time per step, from
        the per-call time (``mean_*``) and the calls per step (``count_*``), each changed when
        it moved by 5% or more: ``per-call`` (only the time per call), ``count`` (only the
        number of calls), ``both`` (both, in the direction of the status), ``count, per-call
        opposite`` (the count drove it although each call moved the other way, e.g. 21x more
        calls each 4x faster: slower), ``per-call, count opposite``.

        ``steps`` — per rank pair: the i-th rank of a (ascending) with the i-th of b (the same
        rank when both traces hold the same ranks): ``rank_a``, ``rank_b`` (-1 if missing),
        ``iterations_a``, ``iterations_b``, ``step_a_ns``, ``step_b_ns`` (mean step),
        ``delta_ns``, ``delta_pct``, ``pairing`` (``same rank``, or why two different ranks
        are compared: the traces hold different ranks).

        ``summary`` — one row: ``steps_a``, ``steps_b`` ((rank, step) windows), ``step_a_ns``,
        ``step_b_ns`` (mean step, or total over all steps without ``per_iteration``),
        ``step_delta_ns``, ``step_delta_pct``, ``device_busy_a_ns``, ``device_busy_b_ns``,
        ``device_busy_delta_ns``, ``device_idle_delta_ns`` (the two add up to the step
        change), ``device_bound_a``, ``device_bound_b`` (busy / step),
        ``device_ops_delta_ns`` (sum of device-op deltas), ``device_ops_explained_pct``,
        ``device_busy_explained_pct`` (of the step change; NaN when it is 0),
        ``device_concurrency_delta_ns`` (``device_ops_delta_ns - device_busy_delta_ns``: the
        change in op time overlapping other device ops, why the device-op deltas can exceed
        the step change), ``host_ops_delta_ns`` (sum of host-op deltas; nested, so not a time
        budget), and the number of ops per status (``n_slower`` ... ``n_gone``).

        ``step_change`` — the summary's terms one per row, as they add up: ``term``,
        ``delta_ns``, ``share_of_step_change_pct``, ``meaning`` (step change = device busy +
        device idle change; device-op deltas = device busy + concurrency change; host-op
        deltas: no part of the step change).

    Raises:
        ParameterError: ``by`` is not ``"name"`` or ``"op_family"``, or an argument is not a
            TraceSet.
    """
    if by not in ("name", "op_family"):
        raise ParameterError(f"by must be 'name' or 'op_family', got {by!r}")
    for label, t in (("a", a), ("b", b)):
        if not isinstance(t, TraceSet):
            raise ParameterError(f"{label} must be a TraceSet, got {type(t).__name__}")
        t.require_events("compare")
    per_iteration = bool(per_iteration)
    sa, na = _side(a, by, per_iteration)
    sb, nb = _side(b, by, per_iteration)
    ops = sa.merge(sb, on=["name", "kind"], how="outer", suffixes=("_a", "_b"))
    ops["op_family"] = ops["op_family_a"].where(ops["op_family_a"].notna(), ops["op_family_b"])
    ops["on_device"] = ops["on_device_a"].eq(True) | ops["on_device_b"].eq(True)
    ca = ops["count_a"].fillna(0).to_numpy(np.float64)
    cb = ops["count_b"].fillna(0).to_numpy(np.float64)
    ta = ops["total_a"].fillna(0).to_numpy(np.float64)
    tb = ops["total_b"].fillna(0).to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ops["mean_a_ns"] = np.where(ca > 0, ta / np.maximum(ca, 1), np.nan)
        ops["mean_b_ns"] = np.where(cb > 0, tb / np.maximum(cb, 1), np.nan)
    if per_iteration:
        ops["count_a"], ops["count_b"] = ca / na, cb / nb
    else:
        ops["count_a"], ops["count_b"] = ca.astype(np.int64), cb.astype(np.int64)
    ops["total_a_ns"] = np.round(ta / na).astype(np.int64)
    ops["total_b_ns"] = np.round(tb / nb).astype(np.int64)
    delta = ops["total_b_ns"].to_numpy(np.int64) - ops["total_a_ns"].to_numpy(np.int64)
    ops["delta_ns"] = delta
    tot_a = ops["total_a_ns"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ops["delta_pct"] = np.where(tot_a > 0, 100.0 * delta / tot_a, np.nan)
    same = (np.abs(delta) < SAME_ABS_NS) | (np.abs(delta) < SAME_REL * tot_a)
    status = np.where(delta > 0, "slower", "faster").astype(object)
    status[same] = "same"
    status[(ca == 0) & (cb > 0)] = "new"
    status[(cb == 0) & (ca > 0)] = "gone"
    ops["status"] = status
    ops["cause"] = _cause(ca / na if per_iteration else ca, cb / nb if per_iteration else cb,
                          ops["mean_a_ns"].to_numpy(np.float64),
                          ops["mean_b_ns"].to_numpy(np.float64), status)

    # steps
    st_a, st_b = _steps(a), _steps(b)
    if per_iteration:
        step_a, step_b = float(st_a["dur"].mean()), float(st_b["dur"].mean())
        busy_a, busy_b = float(st_a["busy"].mean()), float(st_b["busy"].mean())
    else:
        step_a, step_b = float(st_a["dur"].sum()), float(st_b["dur"].sum())
        busy_a, busy_b = float(st_a["busy"].sum()), float(st_b["busy"].sum())
    step_delta = step_b - step_a
    dev = ops["on_device"].to_numpy(bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        ops["contribution_pct"] = np.where(dev & (step_delta != 0),
                                           100.0 * delta / step_delta, np.nan)
        abs_dev = np.abs(delta[dev]).sum()
        abs_host = np.abs(delta[~dev]).sum()
        denom = np.where(dev, abs_dev, abs_host).astype(np.float64)
        ops["delta_share_pct"] = np.where(denom > 0, 100.0 * delta / denom, 0.0)
    # largest change first; on ties device ops first (host wrappers absorb the same change)
    ops = ops.assign(_abs=np.abs(delta)).sort_values(["_abs", "on_device", "name", "kind"],
                                                     ascending=[False, False, True, True],
                                                     kind="stable")
    ops = ops[OPS_COLUMNS].reset_index(drop=True)

    # per rank pair
    ga = st_a.groupby("rank")["dur"].agg(["size", "mean"])
    gb = st_b.groupby("rank")["dur"].agg(["size", "mean"])
    n = max(len(ga), len(gb))
    ra = list(ga.index) + [-1] * (n - len(ga))
    rb = list(gb.index) + [-1] * (n - len(gb))
    steps = pd.DataFrame({
        "rank_a": np.asarray(ra, np.int64), "rank_b": np.asarray(rb, np.int64),
        "iterations_a": np.r_[ga["size"].to_numpy(np.int64), np.zeros(n - len(ga), np.int64)],
        "iterations_b": np.r_[gb["size"].to_numpy(np.int64), np.zeros(n - len(gb), np.int64)],
        "step_a_ns": np.r_[ga["mean"].to_numpy(np.float64), np.full(n - len(ga), np.nan)],
        "step_b_ns": np.r_[gb["mean"].to_numpy(np.float64), np.full(n - len(gb), np.nan)],
    })
    steps["delta_ns"] = steps["step_b_ns"] - steps["step_a_ns"]
    steps["delta_pct"] = 100.0 * steps["delta_ns"] / steps["step_a_ns"]
    steps["pairing"] = _pairing(list(ga.index), list(gb.index))

    dev_delta = int(delta[dev].sum())
    pct = (lambda x: 100.0 * x / step_delta) if step_delta != 0 else (lambda x: np.nan)
    counts = pd.Series(status).value_counts()
    summary = pd.DataFrame([{
        "steps_a": int(len(st_a)), "steps_b": int(len(st_b)),
        "step_a_ns": step_a, "step_b_ns": step_b, "step_delta_ns": step_delta,
        "step_delta_pct": 100.0 * step_delta / step_a if step_a else np.nan,
        "device_busy_a_ns": busy_a, "device_busy_b_ns": busy_b,
        "device_busy_delta_ns": busy_b - busy_a,
        "device_idle_delta_ns": step_delta - (busy_b - busy_a),
        "device_bound_a": busy_a / step_a if step_a else np.nan,
        "device_bound_b": busy_b / step_b if step_b else np.nan,
        "device_ops_delta_ns": dev_delta,
        "device_concurrency_delta_ns": dev_delta - (busy_b - busy_a),
        "device_ops_explained_pct": pct(dev_delta),
        "device_busy_explained_pct": pct(busy_b - busy_a),
        "host_ops_delta_ns": int(delta[~dev].sum()),
        **{f"n_{s}": int(counts.get(s, 0)) for s in STATUSES},
    }])
    return {"ops": ops, "steps": steps, "summary": summary,
            "step_change": _step_change(summary.iloc[0])}


def _step_change(s: pd.Series) -> pd.DataFrame:
    """The summary's terms as a reader adds them up: the step change = device busy change +
    device idle change (exact); the device-op deltas = device busy change + concurrency change
    (exact); the host-op deltas are no part of either sum (nested and overlapping)."""
    step = float(s["step_delta_ns"])

    def share(x: float) -> float:
        return 100.0 * x / step if step else np.nan

    rows = [
        ("step change", step, "b - a = the next two rows"),
        ("  device busy", s["device_busy_delta_ns"], "any device op runs (overlap once)"),
        ("  device idle", s["device_idle_delta_ns"], "no device op: host, launch gaps, waits"),
        ("device-op deltas (sum)", s["device_ops_delta_ns"], "= device busy + the next row"),
        ("  concurrency", s["device_concurrency_delta_ns"], "ops overlapping other streams"),
        ("host-op deltas (sum)", s["host_ops_delta_ns"], "nested, beside the device: no part"),
    ]
    return pd.DataFrame([{"term": t, "delta_ns": float(v),
                          "share_of_step_change_pct": np.nan if t.startswith("host") else
                          share(float(v)), "meaning": m} for t, v, m in rows])
