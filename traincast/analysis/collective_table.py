"""Collective communication: an nccl-tests style summary table of a trace's collectives.

Definitions (message size ``S``, bus factor) are nccl-tests', in
:mod:`traincast.trace.comm_vocab`; the per-call detail it summarises (times, cross-rank
matching, clock alignment) is :func:`traincast.costs.comm.calls.collective_calls`.

- ``algbw = S / t``; ``busbw = algbw * f(n)`` (``n`` = process-group size), NaN where
  nccl-tests defines no factor (barrier, other names: ``bus_factor(..., undefined="nan")``)
  and where ``S`` is 0 (unknown or no payload: such calls still get rows).
  GB/s are 1e9 bytes/s, as nccl-tests prints them (``/ 1.0E9 / sec``); with ``t`` in ns,
  GB/s = bytes / ns.
- arrival skew of a matched collective: last arrival minus first arrival across its ranks.

Predicted timelines carry their collectives and are analysed the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traincast.costs.comm.calls import collective_calls
from traincast.trace.comm_vocab import bus_factor
from traincast.trace.traceset import TraceSet

__all__ = ["TABLE_COLUMNS", "collective_table"]

TABLE_COLUMNS = ["collective", "process_group", "group_size", "size_bytes", "count", "ranks",
                 "matched", "total_ns", "mean_ns", "mean_transfer_ns", "algbw_gbps",
                 "busbw_gbps", "bw_basis", "arrival_skew_mean_ns", "arrival_skew_max_ns"]


def _empty_table() -> pd.DataFrame:
    df = pd.DataFrame({c: pd.Series(dtype="int64") for c in TABLE_COLUMNS})
    for c in ("collective", "process_group", "bw_basis"):
        df[c] = df[c].astype("str")
    for c in ("algbw_gbps", "busbw_gbps"):
        df[c] = df[c].astype("float64")
    for c in ("mean_transfer_ns", "arrival_skew_mean_ns", "arrival_skew_max_ns"):
        df[c] = df[c].astype("Int64")
    return df


def collective_table(ts: TraceSet) -> pd.DataFrame:
    """nccl-tests style summary: one row per (collective, process_group, group_size,
    size_bytes).

    Returns:
        ``collective``, ``process_group`` (str), ``group_size``, ``size_bytes`` (nccl-tests
        message size ``S``, bytes; 0 = unknown), ``count`` (calls, all ranks), ``ranks``
        (number of ranks with calls in the row), ``matched`` (calls matched across ranks),
        ``total_ns``, ``mean_ns`` (measured duration of the executing event, int64 ns, incl.
        waiting for late peers), ``mean_transfer_ns`` (mean end minus last arrival over the
        matched calls; Int64, <NA> if none matched), ``algbw_gbps`` (``S / t``, GB/s = 1e9
        B/s), ``busbw_gbps`` (algbw x the nccl-tests factor), ``bw_basis`` ("transfer" when
        ``t`` is ``mean_transfer_ns``, used whenever a call in the row was matched, else
        "duration": ``t`` is ``mean_ns``), ``arrival_skew_mean_ns`` and
        ``arrival_skew_max_ns`` (last minus first arrival of each matched cross-rank
        collective in the row, over those collectives; Int64, <NA> if none matched).
        Bandwidths are NaN when ``S`` is 0 or ``t <= 0``. Sorted by ``total_ns`` descending.
        Definitions and sources in the module docstring; ``df.attrs["notes"]`` as in
        :func:`~traincast.costs.comm.calls.collective_calls`.
    """
    calls = collective_calls(ts)
    if calls.empty:
        out = _empty_table()
        out.attrs["notes"] = calls.attrs.get("notes", [])
        return out
    keys = ["collective", "process_group", "group_size", "size_bytes"]
    c = calls.assign(
        matched=calls["group_id"] >= 0,
        transfer=calls["transfer_ns"].astype("float64"),
    )
    g = c.groupby(keys, sort=False)
    tab = g.agg(count=("dur_ns", "size"), ranks=("rank", "nunique"), matched=("matched", "sum"),
                total_ns=("dur_ns", "sum"), mean_dur=("dur_ns", "mean"),
                mean_transfer=("transfer", "mean")).reset_index()
    # skew per matched cross-rank collective, then over the collectives of each row
    m = c[c["matched"]]
    if len(m):
        per_group = m.groupby(keys + ["group_id"], sort=False)["start_ns"].agg(["min", "max"])
        per_group["skew"] = (per_group["max"] - per_group["min"]).astype(np.float64)
        skew = per_group.groupby(level=keys, sort=False)["skew"].agg(["mean", "max"])
        tab = tab.merge(skew.reset_index(), on=keys, how="left")
    else:
        tab["mean"] = np.nan
        tab["max"] = np.nan
    has_tr = tab["mean_transfer"].notna().to_numpy()
    t_ns = np.where(has_tr, tab["mean_transfer"].to_numpy(np.float64),
                    tab["mean_dur"].to_numpy(np.float64))
    size = tab["size_bytes"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((size > 0) & (t_ns > 0), size / t_ns, np.nan)  # bytes/ns == GB/s
    busbw = algbw * bus_factor(tab["collective"].to_numpy(object),
                               tab["group_size"].to_numpy(np.int64), undefined="nan")

    def _int(x: pd.Series) -> pd.arrays.IntegerArray:
        return pd.array(np.rint(x.to_numpy(np.float64)), dtype="Int64")

    out = pd.DataFrame({
        "collective": pd.Series(tab["collective"].to_numpy(object), dtype="str"),
        "process_group": pd.Series(tab["process_group"].to_numpy(object), dtype="str"),
        "group_size": tab["group_size"].to_numpy(np.int64),
        "size_bytes": tab["size_bytes"].to_numpy(np.int64),
        "count": tab["count"].to_numpy(np.int64),
        "ranks": tab["ranks"].to_numpy(np.int64),
        "matched": tab["matched"].to_numpy(np.int64),
        "total_ns": tab["total_ns"].to_numpy(np.int64),
        "mean_ns": np.rint(tab["mean_dur"].to_numpy(np.float64)).astype(np.int64),
        "mean_transfer_ns": _int(tab["mean_transfer"]),
        "algbw_gbps": algbw,
        "busbw_gbps": busbw,
        "bw_basis": pd.Series(np.where(has_tr, "transfer", "duration"), dtype="str"),
        "arrival_skew_mean_ns": _int(tab["mean"]),
        "arrival_skew_max_ns": _int(tab["max"]),
    })
    out = out.sort_values(["total_ns"] + keys, ascending=[False, True, True, True, True],
                          kind="stable").reset_index(drop=True)
    out.attrs["notes"] = calls.attrs.get("notes", [])
    return out
