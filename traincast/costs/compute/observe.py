"""The (work, measured time) pairs a compute model is fitted on: :func:`observations`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.ops import event_work
from traincast.errors import ParameterError
from traincast.trace import arrow as A
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet

#: A CPU op spending more than this fraction of its time in nested ops with known work is a
#: wrapper of them and is not an observation.
WRAPPER_FRACTION = 0.5


def _event_mask(events: Any, n: int) -> np.ndarray:
    if events is None:
        return np.ones(n, bool)
    arr = np.asarray(events)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise ParameterError(f"events mask has {arr.size} entries, the trace {n} events")
        return arr
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ParameterError("events must be a boolean mask or an array of event rows")
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ParameterError(f"events rows must be in [0, {n})")
    mask = np.zeros(n, bool)
    mask[arr] = True
    return mask


def _device_names(ts: TraceSet, rank: np.ndarray, dev: np.ndarray) -> np.ndarray:
    out = np.empty(rank.size, object)
    for r in np.unique(rank).tolist():
        info = ts.ranks.get(int(r))
        names = list(info.devices) if info is not None else []
        sel = rank == r
        for d in np.unique(dev[sel]).tolist():
            if 0 <= d < len(names) and names[d]:
                nm = names[d]
            elif names and names[0]:
                nm = names[0]
            else:
                nm = "gpu"
            out[sel & (dev == d)] = nm
    return out


def observations(ts: TraceSet, *, device: str | None = None, events: Any = None,
                 work: pd.DataFrame | None = None) -> pd.DataFrame:
    """The (work, measured time) pairs a compute model is fitted on, one row per op.

    Args:
        ts: the trace.
        device: None picks the GPU ops when the trace has device ops with known work (named
            by the trace's device names, else ``gpu``), else the CPU ops (``cpu``). ``"cpu"``
            forces host ops; any other name labels the observations with it.
        events: boolean mask over ``ts.events`` rows, or row numbers: only these events are
            used (device ops on GPU traces, cpu ops on CPU traces). None: all.
        work: :func:`~traincast.costs.ops.event_work` of ``ts`` if already computed.

    Returns:
        DataFrame ``event`` (the op's row), ``rank``, ``device``, ``family``, ``op`` (its
        name; for memcpy, the transfer as the device event names it, e.g.
        ``Memcpy HtoD (Pinned -> Device)``, as direction matters more than the ATen op),
        ``dtype``, ``flops``, ``bytes``, ``measured_ns``. On GPU traces an op's time is
        the sum of the durations of all device ops it launched (kernels, memsets, copies); on
        CPU traces it is the op's own time (see the module docstring).

    Raises:
        ParameterError: ``events`` does not fit the trace.
    """

    n = ts.events.num_rows
    mask = _event_mask(events, n)
    w = event_work(ts) if work is None else work
    kind_idx, kind_dict = A.dictionary_parts(ts.events.column("kind"))
    dur = A.to_numpy(ts.events.column("dur")).astype(np.float64)
    ev_rows = w["event"].to_numpy()
    kinds = np.asarray(kind_dict, dtype=object)[kind_idx[ev_rows]]
    is_dev = np.isin(kinds, GPU_WORK_KINDS)
    known = w["known"].to_numpy(bool)
    src = w["source_event"].to_numpy()
    gpu = is_dev & known & (src >= 0) & mask[ev_rows]
    use_gpu = (device is None or device != "cpu") and bool(gpu.any())
    cols = ["event", "rank", "device", "family", "op", "dtype", "flops", "bytes",
            "measured_ns"]
    name_idx, name_dict = A.dictionary_parts(ts.events.column("name"))
    names = np.asarray(name_dict, dtype=object)[name_idx]
    if use_gpu:
        g = w.loc[gpu, ["rank", "dtype", "flops", "bytes", "source_event"]].copy()
        g["measured_ns"] = dur[ev_rows[gpu]]
        dev = A.to_numpy(ts.events.column("device"))[ev_rows[gpu]]
        g["device"] = (_device_names(ts, g["rank"].to_numpy(), dev) if device is None
                       else device)
        g["family"] = w.loc[gpu, "family"].astype(str)
        g["op"] = names[g["source_event"].to_numpy()]
        copy = (g["family"] == "memcpy").to_numpy()
        g.loc[copy, "op"] = names[ev_rows[gpu][copy]]  # the transfer: Memcpy HtoD (...)
        # the op's family is that of its longest device op (a copy op running as a kernel
        # is elementwise, as a DMA transfer memcpy; see event_work)
        g = g.sort_values("measured_ns", ascending=False, kind="stable")
        agg = g.groupby(["source_event", "device"], sort=True, observed=True).agg(
            rank=("rank", "first"), family=("family", "first"), op=("op", "first"),
            dtype=("dtype", "first"), flops=("flops", "sum"), bytes=("bytes", "sum"),
            measured_ns=("measured_ns", "sum")).reset_index()
        agg = agg.rename(columns={"source_event": "event"})
    else:
        cpu = (kinds == "cpu_op") & known & mask[ev_rows]
        cpu &= (w["flops"].to_numpy() + w["bytes"].to_numpy()) > 0
        d = dur[ev_rows]
        nested = w["nested_dur"].to_numpy(np.float64)
        cpu &= nested <= WRAPPER_FRACTION * d
        agg = w.loc[cpu, ["event", "rank", "family", "dtype", "flops", "bytes"]].copy()
        agg["family"] = agg["family"].astype(str)
        agg["measured_ns"] = (d - nested)[cpu]
        agg["device"] = device or "cpu"
        agg["op"] = names[agg["event"].to_numpy()] if len(agg) else []
    agg = agg[agg["measured_ns"] > 0]
    return pd.DataFrame(agg[cols]).reset_index(drop=True)
