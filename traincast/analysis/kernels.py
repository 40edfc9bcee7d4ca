"""Where device (or host) op time goes: per-family breakdown and the top kernels.

Both functions read the ``events`` table of a TraceSet, measured or predicted (same schema,
same code) and measure one duration per op:

- **device** (``source == "device"``): events with ``device >= 0`` and kind ``kernel``,
  ``memcpy``, ``memset`` or ``collective``, measured by their recorded duration. This is the
  op set of HTA's kernel breakdown (HolisticTraceAnalysis
  ``hta/analyzers/breakdown_analysis.py``, ``get_gpu_kernel_breakdown``: kernels, memory
  copies/sets and communication kernels) and of ``traincast/analysis/breakdown.py``.
- **host-self** (``source == "host-self"``), used only when the TraceSet holds no device op at
  all (CPU-only runs, e.g. the gloo demo): host events of kind ``cpu_op``, measured by their
  *self* (exclusive) time -- the duration minus the parts covered by their direct ``cpu_op``
  children on the same thread, the "self CPU time" of the PyTorch profiler
  (``torch/autograd/profiler_util.py``, ``FunctionEvent.self_cpu_time_total``) and of Kineto's
  op tree. Nesting is by containment on each (rank, pid, tid), events ordered by
  (ts, -dur) as in ``traincast/trace/traceset.py``. The self times of one thread partition the
  union of its ``cpu_op`` intervals. gloo collectives executed on worker threads (kind
  ``collective``) are not host ops here; see :mod:`traincast.analysis.collective_table`.

Percentiles are the linear interpolation between order statistics (numpy's default
``method="linear"``, Hyndman & Fan type 7), rounded to the nearest ns like the means.
All times are int64 ns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traincast.errors import ParameterError
from traincast.graph.nesting import self_times
from traincast.trace import arrow as A
from traincast.trace.schema import DEVICE_KINDS
from traincast.trace.traceset import TraceSet

#: orderings accepted by :func:`top_kernels` (``by``) and the column each sorts on
SORT_KEYS: dict[str, str] = {"total": "total_ns", "count": "count", "mean": "mean_ns"}
_QUANTILES = (0.5, 0.9, 0.99)
_STAT_COLS = ["count", "total_ns", "mean_ns", "p50_ns", "p90_ns", "p99_ns"]


@dataclass
class _Ops:
    """The measured ops of a TraceSet: parallel arrays, one entry per op."""

    source: str  # "device" or "host-self"
    rank: np.ndarray  # int64
    name: np.ndarray  # integer codes into names (the column's index type)
    kind: np.ndarray  # integer codes into kinds
    family: np.ndarray  # integer codes into families
    dur: np.ndarray  # int64 ns (duration or self time)
    names: list[str]
    kinds: list[str]
    families: list[str]


def _strs(values: list[str]) -> pd.Series:
    """A column of strings (pandas' default string dtype)."""
    return pd.Series(values, dtype="str")


def _codes_of(values: list[str], wanted: tuple[str, ...]) -> np.ndarray:
    return np.array([i for i, v in enumerate(values) if v in wanted], np.int32)


def _kind_in(kind: np.ndarray, kinds: list[str], wanted: tuple[str, ...]) -> np.ndarray:
    """bool per row: its kind code is one of ``wanted`` (a missing kind, -1, is not)."""
    lut = np.zeros(len(kinds) + 1, bool)
    lut[_codes_of(kinds, wanted)] = True
    return lut[kind]


def _ops(ts: TraceSet) -> _Ops:
    ev = ts.events
    kind, kinds = A.dictionary_parts(ev.column("kind"))
    device = A.to_numpy(ev.column("device"))
    dev_sel = (device >= 0) & _kind_in(kind, kinds, DEVICE_KINDS)
    name, names = A.dictionary_parts(ev.column("name"))
    family, families = A.dictionary_parts(ev.column("op_family"))
    rank = A.to_numpy(ev.column("rank"))
    dur = A.to_numpy(ev.column("dur"))
    rows = np.flatnonzero(dev_sel)
    if rows.size:
        return _Ops("device", rank[rows].astype(np.int64), name[rows], kind[rows],
                    family[rows], dur[rows].astype(np.int64), names, kinds, families)
    rows = np.flatnonzero((device < 0) & _kind_in(kind, kinds, ("cpu_op",)))
    start = A.to_numpy(ev.column("ts"))[rows]
    pid = A.to_numpy(ev.column("pid"))[rows]
    tid = A.to_numpy(ev.column("tid"))[rows]
    o_rank = rank[rows].astype(np.int64)
    # one integer id per (rank, pid, tid)
    _, thread = np.unique(np.stack([o_rank, pid, tid]), axis=1, return_inverse=True)
    self_ns = self_times(start, dur[rows].astype(np.int64), thread.reshape(-1))
    return _Ops("host-self", o_rank, name[rows], kind[rows], family[rows], self_ns,
                names, kinds, families)


def _packed(hi: np.ndarray, lo: np.ndarray) -> np.ndarray | None:
    """One int64 per element ordered like (``hi``, ``lo``), or None when it would not fit
    62 bits."""
    if hi.size == 0:
        return hi.astype(np.int64)
    h0, l0 = int(hi.min()), int(lo.min())
    bits = (int(lo.max()) - l0).bit_length()
    if (int(hi.max()) - h0).bit_length() + bits > 62:
        return None
    key = hi.astype(np.int64) - h0
    key <<= bits
    key += lo
    key -= l0
    return key


def _group_stats(group: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per distinct ``group`` code: count, total, mean and percentiles of ``values`` (ns)."""
    key = _packed(group, values)
    order = np.lexsort((values, group)) if key is None else np.argsort(key, kind="stable")
    g, v = group[order], values[order]
    if g.size == 0:
        empty = np.empty(0, np.int64)
        return g, {c: empty for c in _STAT_COLS}
    start = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    count = np.diff(np.r_[start, g.size])
    total = np.add.reduceat(v, start)
    stats = {"count": count.astype(np.int64), "total_ns": total.astype(np.int64),
             "mean_ns": np.rint(total / count).astype(np.int64)}
    vf = v.astype(np.float64)
    for q in _QUANTILES:
        at = start + q * (count - 1)
        lo = np.floor(at).astype(np.int64)
        hi = np.minimum(lo + 1, start + count - 1)
        p = vf[lo] + (at - lo) * (vf[hi] - vf[lo])
        stats[f"p{round(q * 100)}_ns"] = np.rint(p).astype(np.int64)
    return g[start], stats


def op_breakdown(ts: TraceSet) -> pd.DataFrame:
    """Op time per (rank, op_family).

    Device ops (``device >= 0``, kind kernel/memcpy/memset/collective) measured by duration;
    for a TraceSet with no device op at all, host ``cpu_op`` events measured by self time
    (see the module docstring for both definitions and their sources).

    Returns:
        One row per (rank, op_family) with ops, sorted by rank then ``total_ns`` descending:
        ``rank`` (int), ``op_family`` (str), ``count`` (ops), ``total_ns``, ``mean_ns``,
        ``p50_ns``, ``p90_ns``, ``p99_ns`` (int64 ns), ``share_pct`` (float: percent of the
        rank's total op time), ``source`` ("device" or "host-self").
    """
    ops = _ops(ts)
    nf = max(len(ops.families), 1)
    key = ops.rank * nf + ops.family
    keys, stats = _group_stats(key, ops.dur)
    df = pd.DataFrame({"rank": (keys // nf).astype(np.int64),
                       "op_family": _strs([ops.families[k] for k in (keys % nf).tolist()]),
                       **stats})
    rank_total = df.groupby("rank")["total_ns"].transform("sum").to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        df["share_pct"] = np.where(rank_total > 0, 100.0 * df["total_ns"] / rank_total, 0.0)
    df["source"] = _strs([ops.source] * len(df))
    df = df.sort_values(["rank", "total_ns", "op_family"], ascending=[True, False, True],
                        kind="stable")
    return df.reset_index(drop=True)


def top_kernels(ts: TraceSet, n: int = 20, by: str = "total") -> pd.DataFrame:
    """The ``n`` op names with the most time (or calls, or mean time) over all ranks.

    Same op set and durations as :func:`op_breakdown` (device ops, else host ``cpu_op``
    self times).

    Args:
        ts: a measured or predicted TraceSet.
        n: how many rows to return (>= 1); fewer when fewer names exist.
        by: ``"total"`` (total_ns), ``"count"`` or ``"mean"`` (mean_ns), descending; ties
            broken by name.

    Returns:
        ``name``, ``kind``, ``op_family`` (str), ``count``, ``ranks`` (number of ranks the name
        appears on), ``total_ns``, ``mean_ns``, ``p50_ns``, ``p90_ns``, ``p99_ns`` (int64 ns),
        ``share_pct`` (percent of all ranks' total op time), ``source`` ("device" or
        "host-self"). A name recorded under two kinds or families gives one row per pair.

    Raises:
        ParameterError: ``by`` is not one of total/count/mean, or ``n`` is not a positive int.
    """
    if by not in SORT_KEYS:
        raise ParameterError(f"by must be one of {', '.join(SORT_KEYS)}, not {by!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ParameterError(f"n must be a positive integer, not {n!r}")
    return _top(_ops(ts), n, by)


def _merge_ops(parts: list[_Ops | None]) -> _Ops:
    """One :class:`_Ops` from those of several TraceSets with distinct ranks (per-rank
    analysis): codes re-mapped onto merged dictionaries; device ops win over host self times
    as in :func:`_ops` (a job with any device op is measured on the device)."""
    parts = [p for p in parts if p is not None]
    if any(p.source == "device" for p in parts):
        parts = [p for p in parts if p.source == "device"]
    if not parts:
        e = np.empty(0, np.int64)
        return _Ops("device", e, e, e, e, e, [], [], [])
    cols: dict[str, list[np.ndarray]] = {"name": [], "kind": [], "family": []}
    dicts: dict[str, dict[str, int]] = {"name": {}, "kind": {}, "family": {}}
    for p in parts:
        for col, values in (("name", p.names), ("kind", p.kinds), ("family", p.families)):
            d = dicts[col]
            remap = np.array([d.setdefault(v, len(d)) for v in values] or [0], np.int64)
            codes = getattr(p, col)
            cols[col].append(remap[codes] if codes.size else codes.astype(np.int64))
    return _Ops(parts[0].source, np.concatenate([p.rank for p in parts]),
                np.concatenate(cols["name"]), np.concatenate(cols["kind"]),
                np.concatenate(cols["family"]), np.concatenate([p.dur for p in parts]),
                list(dicts["name"]), list(dicts["kind"]), list(dicts["family"]))


def _top(ops: _Ops, n: int, by: str) -> pd.DataFrame:
    """The top-names table of :func:`top_kernels` from the ops' arrays."""
    nk, nf = max(len(ops.kinds), 1), max(len(ops.families), 1)
    key = (ops.name.astype(np.int64) * nk + ops.kind) * nf + ops.family
    keys, stats = _group_stats(key, ops.dur)
    # distinct ranks per key
    # the key of each distinct (key, rank), sorted: one 1-d unique of packed pairs
    bits = (int(ops.rank.max()) - int(ops.rank.min())).bit_length() if key.size else 0
    if key.size and (int(key.max()) - int(key.min())).bit_length() + bits <= 62:
        k0, r0 = int(key.min()), int(ops.rank.min())
        rk = (np.unique(((key - k0) << bits) + (ops.rank - r0)) >> bits) + k0
    else:
        rk = np.unique(np.stack([key, ops.rank]), axis=1)[0] if key.size else key
    ranks = np.searchsorted(rk, keys, "right") - np.searchsorted(rk, keys, "left")
    name_codes = keys // (nk * nf)
    df = pd.DataFrame({
        "name": _strs([ops.names[k] for k in name_codes.tolist()]),
        "kind": _strs([ops.kinds[k] for k in ((keys // nf) % nk).tolist()]),
        "op_family": _strs([ops.families[k] for k in (keys % nf).tolist()]),
        "count": stats["count"], "ranks": ranks.astype(np.int64),
        **{c: stats[c] for c in _STAT_COLS[1:]},
    })
    grand = float(ops.dur.sum())
    df["share_pct"] = 100.0 * df["total_ns"] / grand if grand > 0 else 0.0
    df["source"] = _strs([ops.source] * len(df))
    df = df.sort_values([SORT_KEYS[by], "name"], ascending=[False, True], kind="stable")
    return df.head(int(n)).reset_index(drop=True)
