"""What-if "another GPU": rescale device ops by their position on the roofline.

For each device op with known work (FLOPs, bytes from the shapes of the op that launched it,
:func:`traincast.costs.work.event_work`), the recorded GPU's machine balance
``peak FLOP/s / HBM B/s`` tells whether it is compute- or memory-bound (Williams et al.,
"Roofline", CACM 2009); its time is multiplied by the peak-FLOP ratio or the bandwidth ratio
of the two GPUs from the hardware catalog (:mod:`traincast.costs.hardware`). Ops without
known work are taken as memory-bound (the conservative, usual case of elementwise and copy
kernels). When the trace has shapes, the compute model fitted on it
(:func:`traincast.costs.compute.fit_compute_model`) is retargeted to the new GPU and ops with
known work take its ratio instead: their efficiency is read at their new ideal time, so
small, latency-bound kernels speed up less than the peaks (Lin et al., arXiv 2404.12674,
per-op kernel models). Communication kernels and host time are unchanged (same network,
same host). No op gets faster than the larger of the two peak ratios.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traincast.errors import ParameterError
from traincast.trace.traceset import TraceSet

#: Kineto/ET dtype names -> catalog dtype keys
_DTYPE = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp64",
          "Half": "fp16", "BFloat16": "bf16", "Float": "fp32"}


def gpu_factors(ts: TraceSet, gpu_name: str, compute: Any = None
                ) -> tuple[np.ndarray, list[str]]:
    """float[n_events] time multipliers for running the device ops on ``gpu_name``.

    ``compute`` is accepted for symmetry with the other what-ifs; the roofline split uses
    the catalog's peaks, which bound any fitted efficiency curve.

    Raises:
        ParameterError: unknown GPU name, or the recorded GPU is not in the catalog.
    """
    from traincast.costs.hardware import load_catalog
    from traincast.costs.work import event_work

    cat = load_catalog()
    new = cat.gpu(gpu_name)
    recorded = cat.match_first(p for info in ts.ranks.values() for p in info.device_properties)
    if recorded is None:
        names = sorted({d for i in ts.ranks.values() for d in i.devices})
        raise ParameterError(f"--what-if gpu={gpu_name}: the recorded device "
                             f"({', '.join(names) or 'a CPU'}) is not in the hardware catalog; "
                             "add it with a user catalog file")
    f = np.ones(ts.events.num_rows)
    work = event_work(ts)
    if work.empty:
        return f, [f"gpu {recorded.name} -> {new.name}: no device op with known work"]
    dev_rows = work["event"].to_numpy(np.int64)
    kinds = np.asarray(ts.events.column("kind").to_pylist(), dtype=object)
    flops = work["flops"].to_numpy(float)
    nbytes = work["bytes"].to_numpy(float)
    dtype = dominant_dtype(ts)
    p_old = cat.peak_flops(recorded, dtype)
    p_new = cat.peak_flops(new, dtype)
    bw_old, bw_new = recorded.hbm_gbps, new.hbm_gbps
    balance = p_old / (bw_old * 1e9)  # FLOP per byte
    compute_bound = (nbytes > 0) & (flops / np.maximum(nbytes, 1.0) > balance)
    ratio = np.where(compute_bound, p_old / p_new, bw_old / bw_new)
    device = np.isin(kinds[dev_rows], ["kernel", "memcpy", "memset"])
    f[dev_rows[device]] = ratio[device]
    # device ops without a row in ``work``: memory-bound
    all_dev = np.flatnonzero(np.isin(kinds, ["kernel", "memcpy", "memset"]))
    missing = np.setdiff1d(all_dev, dev_rows)
    f[missing] = bw_old / bw_new
    notes = [f"gpu {recorded.name} -> {new.name} ({dtype}: peak {p_old / 1e12:.0f} -> "
             f"{p_new / 1e12:.0f} TFLOP/s, HBM {bw_old:.0f} -> {bw_new:.0f} GB/s); "
             f"{int(compute_bound[device].sum())} compute-bound and "
             f"{int((~compute_bound[device]).sum()) + missing.size} memory-bound device ops"]
    # with a compute model fitted on the trace, ops with known work follow its retargeted
    # roofline: efficiency is read at the op's new ideal time (small kernels stay latency-
    # bound), never faster than the peak ratios (ComputeModel.retarget)
    model = compute if compute is not None else _fit(ts)
    if model is not None:
        try:
            moved = model.retarget(p_new, bw_new, p_old, bw_old)
            sub = work.iloc[np.flatnonzero(device)]
            t_old = model.predict(sub)
            t_new = moved.predict(sub)
            ok = np.isfinite(t_old) & np.isfinite(t_new) & (t_old > 0) & (t_new > 0)
            rows = dev_rows[device][ok]
            f[rows] = t_new[ok] / t_old[ok]
            notes.append(f"{int(ok.sum())} ops with known work follow the compute model fitted "
                         "on the trace (size-dependent efficiency); the rest the roofline "
                         "ratios")
        except (ParameterError, ValueError, KeyError) as exc:
            notes.append(f"compute model not used ({exc}); roofline ratios for all ops")
    return f, notes


def _fit(ts: TraceSet) -> Any:
    """The compute model fitted on ``ts`` (None when its ops have no known work)."""
    from traincast.costs.compute import fit_compute_model

    try:
        return fit_compute_model(ts)
    except ParameterError:
        return None



def dominant_dtype(ts: TraceSet) -> str:
    """The floating dtype most tensors of the recorded ops have (catalog key; fp32 default)."""
    if ts.shapes.num_rows == 0:
        return "fp32"
    counts: dict[str, int] = {}
    for text in ts.shapes.column("input_types").to_pylist():
        for k, v in _DTYPE.items():
            n = text.count(f'"{k}"') + text.count(f"Tensor({k})")
            if n:
                counts[v] = counts.get(v, 0) + n
    return max(counts, key=counts.get) if counts else "fp32"
