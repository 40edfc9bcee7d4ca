"""What-if physics: GPU durations scaled by k, predicted steady steps against an independent bound.

For each trace and k in {1/3, 1/2, 2, 3}, ``traincast.predict(ts, what_if=["speedup=kind:
device=1/k"])`` (every kernel, memcpy and memset k times longer) is compared with a bound
computed from the trace alone, without traincast's execution graph (:func:`bound_ms`):

* ``host`` regime (the step is host-bound at k = 1): ``max(H, k*B + C)`` where ``H`` is the
  host's intrinsic time per step (the step minus the time the main thread spent in blocking
  copies, syncs, queries and launches beyond 20 us each: waits), ``B`` the busiest compute
  stream's busy time per step and ``C`` the communication kernels' busy time, counted only
  when the GPU becomes the bottleneck (``k*B > H``: the last buckets' all_reduce is exposed
  after the backward pass, unscaled);
* ``chain`` regime (the GPU work sits on the step's critical path between delays the trace
  does not explain, e.g. ops whose launch is missing and start long after their stream went
  idle): ``measured + (k - 1) * B``;
* ``synthetic``: :mod:`benchmarks.make_queue_trace`'s own discrete-event simulation with the
  kernels k times longer (the ground truth), for the default queue traces and for two
  GPU-bound ones (``gpu_bound``: a queue that frees space in batches, copies to pageable
  memory).

The steady step is the median of the second half of the steps (after the launch queue has
filled). ``old`` is the same what-if with the wait models off (host calls replayed as
measured, ``model_waits=False``), what traincast did before issue 12.

Run: ``python benchmarks/whatif_physics.py`` (writes ``benchmarks/results/whatif_physics.json``).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent.parent / "shared" / "data" / "traces"
KS = (1 / 3, 1 / 2, 2.0, 3.0)
#: (name, path under ../shared/data/traces, regime: see the module docstring)
SHARED = (
    ("hta/v100_2rank_allreduce", "hta/v100_2rank_allreduce", "host"),
    ("hta/a100_2rank_nccl", "hta/a100_2rank_nccl", "host"),
    ("tracelens/b200_8rank_rank0", "tracelens/b200_8rank_rank0.json.gz", "host"),
    ("hta/a100_16rank_5streams", "hta/a100_16rank_5streams", "chain"),
)
_WAIT = re.compile(r"Memcpy|Synchronize|Query|Launch")


def queue_generator():
    """The synthetic trace generator module (benchmarks/make_queue_trace.py)."""
    spec = importlib.util.spec_from_file_location("make_queue_trace",
                                                  HERE / "make_queue_trace.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_queue_trace", mod)
    spec.loader.exec_module(mod)
    return mod


def step_terms(ts) -> list[dict[str, float]]:
    """Per step of ``ts`` (first rank), from the events alone (ms): measured step, host
    intrinsic time ``H``, busiest compute stream ``B``, communication busy time ``C``."""
    ev = ts.events.to_pandas()
    its = ts.iterations.to_pandas()
    rank = int(its["rank"].iloc[0])
    ev = ev[ev["rank"] == rank]
    dev = ev[(ev["device"] >= 0) & ev["kind"].isin(["kernel", "memcpy", "memset",
                                                     "collective"])]
    rt = ev[(ev["kind"] == "runtime") & ev["name"].str.contains(_WAIT)]
    out = []
    for it in its[its["rank"] == rank].itertuples():
        d = dev[(dev["ts"] >= it.start) & (dev["ts"] < it.end)]
        comp = d[d["kind"] != "collective"].groupby("stream")["dur"].sum()
        comm = float(d[d["kind"] == "collective"]["dur"].sum())
        r = rt[(rt["ts"] >= it.start) & (rt["ts"] < it.end)]
        waits = float(np.maximum(r["dur"].to_numpy() - 20_000, 0).sum())
        out.append({"step": it.dur / 1e6, "H": (it.dur - waits) / 1e6,
                    "B": float(comp.max()) / 1e6 if len(comp) else 0.0, "C": comm / 1e6})
    return out


def bound_ms(terms: list[dict[str, float]], k: float, regime: str) -> float:
    """The independent bound of the steady step (ms) for kernels k times longer."""
    half = terms[len(terms) // 2:]
    vals = []
    for t in half:
        if regime == "chain":
            vals.append(t["step"] + (k - 1) * t["B"])
        else:
            gpu = k * t["B"] + (t["C"] if k * t["B"] > t["H"] else 0.0)
            vals.append(max(t["H"], gpu))
    return float(np.median(vals))


def steady_ms(pred) -> float:
    """Median of the second half of the predicted steps of the first rank (ms)."""
    it = pred.iterations
    it = it[it["rank"] == it["rank"].min()]
    v = it["predicted_ns"].to_numpy()
    return float(np.median(v[len(v) // 2:])) / 1e6


def run() -> list[dict]:
    import traincast

    rows: list[dict] = []
    gen = queue_generator()
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for sync in (True, False):
            p = gen.Params(sync=sync)
            path = gen.write(Path(tmp) / f"queue_sync{int(sync)}.json", p)
            cases.append((f"synthetic queue depth {p.depth}, sync={sync}", path, p))
        for label, p in (("GPU-bound, batched drain 8", gen.gpu_bound(copy_every=0, drain=8)),
                         ("GPU-bound, pageable copies", gen.gpu_bound(drain=8))):
            path = gen.write(Path(tmp) / f"gpu_bound_{len(cases)}.json", p)
            cases.append((f"synthetic {label}", path, p))
        for name, path, p in cases:
            ts = traincast.load(path)
            measured = float(np.median(gen.steps_ns(p)[p.steps // 2:])) / 1e6
            for k in KS:
                truth = float(np.median(gen.steps_ns(p, k)[p.steps // 2:])) / 1e6
                rows.append(_row(traincast, ts, name, "synthetic", k, measured, truth))
    for name, rel, regime in SHARED:
        path = TRACES / rel
        if not path.exists():
            continue
        ts = traincast.load(path)
        terms = step_terms(ts)
        measured = float(np.median([t["step"] for t in terms[len(terms) // 2:]]))
        for k in KS:
            rows.append(_row(traincast, ts, name, regime, k, measured,
                             bound_ms(terms, k, regime)))
    return rows


def _row(traincast, ts, name: str, regime: str, k: float, measured: float,
         bound: float) -> dict:
    what = [f"speedup=kind:device={1 / k:.12g}"]
    new = steady_ms(traincast.predict(ts, what_if=what))
    old = steady_ms(traincast.predict(ts, what_if=what, model_waits=False))
    return {"trace": name, "regime": regime, "k": round(k, 4), "measured_ms": measured,
            "bound_ms": bound, "predicted_ms": new, "old_ms": old,
            "error_pct": 100 * (new - bound) / bound, "old_error_pct": 100 * (old - bound) / bound}


def main() -> None:
    rows = run()
    out = HERE / "results" / "whatif_physics.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(out)
    print(f"{'trace':44} {'k':>5} {'measured':>9} {'bound':>9} {'predicted':>9} {'err%':>6}"
          f" {'old':>9} {'old err%':>8}")
    for r in rows:
        print(f"{r['trace']:44} {r['k']:>5.2f} {r['measured_ms']:>9.2f} {r['bound_ms']:>9.2f} "
              f"{r['predicted_ms']:>9.2f} {r['error_pct']:>+6.1f} {r['old_ms']:>9.2f} "
              f"{r['old_error_pct']:>+8.1f}")


if __name__ == "__main__":
    main()
