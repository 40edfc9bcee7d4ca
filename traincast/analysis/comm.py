"""Collective communication: per-call detail and an nccl-tests style summary table.

Definitions follow NVIDIA nccl-tests, ``doc/PERFORMANCE.md`` and the ``*GetBw`` functions in
``src/*.cu`` (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):

- message size ``S`` (bytes) per call, as nccl-tests counts it (``size_bytes``):
  all_reduce, broadcast, reduce: the buffer (``in_bytes``); all_gather: the total output
  (``out_bytes``, ``sendcount * n``); reduce_scatter: the total input (``in_bytes``,
  ``recvcount * n``); all_to_all: the bytes a rank sends in total (``in_bytes``,
  ``src/alltoall.cu``: ``count * nranks * typesize``); gather: ``in_bytes * n``; scatter:
  ``out_bytes * n`` (``src/gather.cu``, ``src/scatter.cu``); send: ``in_bytes``; recv:
  ``out_bytes`` (``src/sendrecv.cu``). 0 means unknown (e.g. no ``record_param_comms`` args
  and no recorded shapes) or no payload (barrier); such calls still get rows, with NaN
  bandwidth.
- ``algbw = S / t``; ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for all_reduce,
  ``(n-1)/n`` for all_gather, reduce_scatter, all_to_all, gather and scatter, ``1`` for
  broadcast, reduce, send and recv (``n`` = process-group size); NaN for other collectives.
  GB/s are 1e9 bytes/s, as nccl-tests prints them (``/ 1.0E9 / sec``); with ``t`` in ns,
  GB/s = bytes / ns.

Times per call (the executing event: the NCCL kernel, ``kernel_event``, else the gloo range,
``event``; as in :func:`traincast.graph.collectives.match_collectives`):

- ``dur_ns``: the executing event's measured duration. It includes waiting for late peers.
- ``transfer_ns``: for calls matched across ranks by
  :func:`~traincast.graph.collectives.match_collectives`, end minus the *last* member's
  arrival (start): the time the data actually moves once every rank is in, the definition the
  execution graph uses for a collective's duration (``traincast/graph/build.py``, README
  "How it works"). Missing (``<NA>``) for unmatched calls (peers' traces absent, calls outside
  a step).
- arrival skew of a matched collective: last arrival minus first arrival across its ranks;
  ``arrival_lateness_ns`` of a call: its arrival minus the first arrival of its group.

Cross-rank times are first put on one clock with
:func:`~traincast.graph.collectives.clock_offsets` (the alignment the execution graph and the
straggler analysis use). ``start_ns`` is reported on that aligned clock. Predicted timelines
carry their collectives and are analysed the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traincast.errors import CollectiveMismatchError
from traincast.graph.collectives import clock_offsets, match_collectives
from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet

#: busbw correction factors (nccl-tests doc/PERFORMANCE.md "Summary"); n = group size
_BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: np.ones_like(n),
    "reduce": lambda n: np.ones_like(n),
    "send": lambda n: np.ones_like(n),
    "recv": lambda n: np.ones_like(n),
}

CALL_COLUMNS = ["rank", "iteration", "collective", "process_group", "group_size", "size_bytes",
                "event", "start_ns", "dur_ns", "transfer_ns", "group_id",
                "arrival_lateness_ns"]
TABLE_COLUMNS = ["collective", "process_group", "group_size", "size_bytes", "count", "ranks",
                 "matched", "total_ns", "mean_ns", "mean_transfer_ns", "algbw_gbps",
                 "busbw_gbps", "bw_basis", "arrival_skew_mean_ns", "arrival_skew_max_ns"]


def message_bytes(collective: np.ndarray, in_bytes: np.ndarray, out_bytes: np.ndarray,
                  group_size: np.ndarray) -> np.ndarray:
    """nccl-tests message size ``S`` (bytes) per call; see the module docstring."""
    coll = np.asarray(collective, object)
    in_b = np.asarray(in_bytes, np.int64)
    out_b = np.asarray(out_bytes, np.int64)
    n = np.asarray(group_size, np.int64)
    s = in_b.copy()
    s = np.where(coll == "all_gather", out_b, s)
    s = np.where(coll == "recv", np.where(out_b > 0, out_b, in_b), s)
    s = np.where(coll == "gather", in_b * n, s)
    s = np.where(coll == "scatter", out_b * n, s)
    s = np.where(coll == "barrier", 0, s)
    return s.astype(np.int64)


def bus_factor(collective: np.ndarray, group_size: np.ndarray) -> np.ndarray:
    """nccl-tests busbw / algbw factor per call (NaN for collectives it does not define)."""
    coll = np.asarray(collective, object)
    n = np.asarray(group_size, np.float64)
    out = np.full(coll.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, f in _BUS_FACTOR.items():
            m = coll == name
            if m.any():
                out[m] = f(n[m])
    out[n <= 0] = np.nan
    return out


def _empty_calls() -> pd.DataFrame:
    df = pd.DataFrame({c: pd.Series(dtype="int64") for c in CALL_COLUMNS})
    for c in ("collective", "process_group"):
        df[c] = df[c].astype("str")
    for c in ("transfer_ns", "arrival_lateness_ns"):
        df[c] = df[c].astype("Int64")
    return df


def collective_calls(ts: TraceSet) -> pd.DataFrame:
    """One row per collective call on a rank, with its timing and cross-rank match.

    Returns:
        ``rank``, ``iteration`` (step of the host-side call, -1 outside steps),
        ``collective``, ``process_group`` (str), ``group_size``, ``size_bytes`` (nccl-tests
        ``S``), ``event`` (row in ``ts.events`` of the executing event: NCCL kernel or gloo
        range), ``start_ns``, ``dur_ns`` (int64 ns), ``transfer_ns`` (end minus the last
        member's arrival; Int64, <NA> if unmatched), ``group_id`` (id of the matched
        cross-rank collective, -1 if unmatched), ``arrival_lateness_ns`` (this rank's
        arrival minus the first arrival in its group; Int64, <NA> if unmatched). Sorted by
        rank, then start. Definitions and sources in the module docstring.

        If ranks disagree on the order of collectives (``CollectiveMismatchError`` from
        :func:`~traincast.graph.collectives.match_collectives`), every call is reported
        unmatched and the message is kept in ``df.attrs["notes"]``.
    """
    notes: list[str] = []
    try:
        m = match_collectives(ts)
        t = m.table
    except CollectiveMismatchError as exc:
        notes.append(f"collectives not matched across ranks: {exc}")
        t = ts.collectives.to_pandas()
        if not t.empty:
            iteration = A.to_numpy(ts.events.column("iteration"))
            t["exec_event"] = np.where(t["kernel_event"] >= 0, t["kernel_event"], t["event"])
            t["step"] = iteration[t["event"].to_numpy(np.int64)]
            t["group_id"] = -1
    if t.empty:
        out = _empty_calls()
        out.attrs["notes"] = notes
        return out
    exec_ev = t["exec_event"].to_numpy(np.int64)
    offsets = clock_offsets(ts, m) if not notes else {}
    shift = np.array([offsets.get(int(r), 0) for r in t["rank"].to_numpy()], np.int64)
    start = A.to_numpy(ts.events.column("ts"))[exec_ev].astype(np.int64) - shift
    dur = A.to_numpy(ts.events.column("dur"))[exec_ev].astype(np.int64)
    end = start + dur
    gid = t["group_id"].to_numpy(np.int64)
    coll = t["collective"].to_numpy(object)
    n = t["group_size"].to_numpy(np.int64)
    matched = gid >= 0
    first = np.zeros(gid.size, np.int64)
    last = np.zeros(gid.size, np.int64)
    if matched.any():
        g = gid[matched]
        ng = int(g.max()) + 1
        lo = np.full(ng, np.iinfo(np.int64).max)
        hi = np.full(ng, np.iinfo(np.int64).min)
        np.minimum.at(lo, g, start[matched])
        np.maximum.at(hi, g, start[matched])
        first[matched], last[matched] = lo[g], hi[g]
    transfer = pd.array(np.where(matched, end - last, 0), dtype="Int64")
    transfer[~matched] = pd.NA
    lateness = pd.array(np.where(matched, start - first, 0), dtype="Int64")
    lateness[~matched] = pd.NA
    df = pd.DataFrame({
        "rank": t["rank"].to_numpy(np.int64),
        "iteration": t["step"].to_numpy(np.int64),
        "collective": pd.Series(coll, dtype="str"),
        "process_group": pd.Series(t["process_group"].to_numpy(object), dtype="str"),
        "group_size": n,
        "size_bytes": message_bytes(coll, t["in_bytes"].to_numpy(), t["out_bytes"].to_numpy(),
                                    n),
        "event": exec_ev,
        "start_ns": start,
        "dur_ns": dur,
        "transfer_ns": transfer,
        "group_id": gid,
        "arrival_lateness_ns": lateness,
    })
    df = df.sort_values(["rank", "start_ns", "event"], kind="stable").reset_index(drop=True)
    df.attrs["notes"] = notes
    return df


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
        :func:`collective_calls`.
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
                               tab["group_size"].to_numpy(np.int64))

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
