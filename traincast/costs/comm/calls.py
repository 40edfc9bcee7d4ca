"""Collective calls of a trace: one row per call on a rank, with its timing and its match
across ranks (the call table that the communication analysis, the cost model's calibration
and the network what-ifs read), and the calibration samples taken from it.

Message sizes are nccl-tests' ``S`` (:func:`traincast.trace.comm_vocab.message_bytes`). 0
means unknown (e.g. no ``record_param_comms`` args and no recorded shapes) or no payload
(barrier).

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

from typing import TYPE_CHECKING

import numpy as np

from traincast.errors import CollectiveMismatchError
from traincast.graph.collectives import clock_offsets, match_collectives
from traincast.trace import arrow as A
from traincast.trace.comm_vocab import COLLECTIVES, message_bytes
from traincast.trace.traceset import TraceSet

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["CALL_COLUMNS", "collective_calls", "samples_from_trace"]

CALL_COLUMNS = ["rank", "iteration", "collective", "process_group", "group_size", "size_bytes",
                "event", "start_ns", "dur_ns", "transfer_ns", "group_id",
                "arrival_lateness_ns"]

def _empty_calls() -> pd.DataFrame:
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

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
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

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


def samples_from_trace(ts: TraceSet) -> pd.DataFrame:
    """Calibration samples from a trace: one per collective call matched across ranks.

    Uses :func:`collective_calls`: ``time_ns`` is ``transfer_ns``
    (end minus the last member's arrival: the time the data moves once every rank is in),
    ``size_bytes`` the nccl-tests message size. Calls with an unknown size (0), an unmatched
    call (no transfer time), a non-positive time, or a collective the model does not know
    are left out. ``ranks_per_node`` is NaN (a trace does not say where ranks ran).

    Returns:
        ``collective``, ``size_bytes``, ``group_size``, ``time_ns`` (float), ``ranks_per_node``,
        ``rank``, ``iteration``.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    calls = collective_calls(ts)
    keep = (calls["transfer_ns"].notna() & (calls["size_bytes"] > 0)
            & calls["collective"].isin([c for c in COLLECTIVES if c != "barrier"]))
    c = calls[keep]
    t = c["transfer_ns"].astype("float64")
    c, t = c[t > 0], t[t > 0]
    out = pd.DataFrame({
        "collective": c["collective"].astype(str).to_numpy(),
        "size_bytes": c["size_bytes"].to_numpy(np.int64),
        "group_size": c["group_size"].to_numpy(np.int64),
        "time_ns": t.to_numpy(np.float64),
        "ranks_per_node": np.full(len(c), np.nan),
        "rank": c["rank"].to_numpy(np.int64),
        "iteration": c["iteration"].to_numpy(np.int64),
    })
    out.attrs["notes"] = list(calls.attrs.get("notes", [])) + [
        f"{int((~keep).sum())} of {len(calls)} calls left out (unmatched, size unknown, or "
        f"barrier)"]
    return out
