"""Every what-if class against its step bounds, per shared trace.

For each trace unit under ``../shared/data/traces`` (:func:`corpus.find_units`) the grid of
:func:`grid` is predicted (:func:`traincast.predict.bounds.bounds_table`: one replay, then
each what-if applied and simulated) and each predicted step is set beside its lower bound
(busiest stream's device work, host's own work, communication at the modelled bandwidth)
and its upper bound (max(measured, replay) + added work).

Usage: ``PYTHONPATH=. python benchmarks/whatif_bounds.py [--out FILE.md] [--only SUBSTR]``
prints (or writes) a Markdown table, one row per trace and what-if (the slowest rank's
worst step: the row whose predicted step lies furthest outside, else the largest step).
The grid is shared with ``tests/predict/test_bounds_properties.py``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpus.py beside this script

from corpus import find_units  # noqa: E402

import traincast  # noqa: E402
from traincast.costs.hardware.files import load_catalog  # noqa: E402
from traincast.errors import ParameterError  # noqa: E402
from traincast.predict.bounds import bounds_table  # noqa: E402
from traincast.simulate.replay import Replay, replay  # noqa: E402
from traincast.whatif.collectives import recorded_links_gbit  # noqa: E402
from traincast.whatif.recorded_batch import infer_recorded_batch  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
#: tolerance of every comparison: relative and absolute (ns)
REL_TOL, ABS_TOL_NS = 0.01, 10_000
#: each axis: its name, the factor (speed: > 1 is faster) and the what-if strings
HOST = (0.1, 1.0, 10.0)
DEVICE = (1 / 3, 1.0, 3.0)
NETWORK = (0.25, 1.0, 4.0)


def host(f: float) -> list[str]:
    return [f"speedup=kind:cpu_op={f:g}", f"speedup=kind:runtime={f:g}"]


def grid(ts: traincast.TraceSet, index: int) -> list[tuple[str, float, list[str]]]:
    """(axis, speed factor, what-if strings) for one trace: host x0.1/x10 (cpu_op and
    runtime), device x1/3/x3, network x0.25/x4 (intra and inter node bandwidth, scaled
    from the catalog's node, where the trace has collectives and a known node), one catalog
    GPU (the ``index``-th, cycling: the 34 shared traces cover every catalog GPU), batch
    x0.5/x2 where the recorded batch can be read, and the identity
    (``speedup=kind:device=1``) against the plain replay (``[]``)."""
    out: list[tuple[str, float, list[str]]] = [("replay", 1.0, []),
                                                ("identity", 1.0, ["speedup=.*=1"])]
    out += [("host", f, host(f)) for f in HOST if f != 1.0]
    out += [("device", f, [f"speedup=kind:device={f:.6g}"]) for f in DEVICE if f != 1.0]
    intra, inter = recorded_links_gbit(ts)
    if ts.collectives.num_rows and intra and ts.world_size > 1:
        for f in NETWORK:
            if f != 1.0:
                w = [f"intra_node_gbps={intra * f:g}"]
                w += [f"inter_node_gbps={inter * f:g}"] if inter else []
                out.append(("network", f, w))
    gpus = list(load_catalog().gpus)
    out.append(("gpu", 1.0, [f"gpu={gpus[index % len(gpus)]}"]))
    if ts.shapes.num_rows:
        got = infer_recorded_batch(ts)
        if got is not None and got.batch >= 2:
            b0 = got.batch
            out += [("batch", 1.0, [f"batch_size_from={b0}", f"batch_size={b}"])
                    for b in (b0 // 2, 2 * b0)]
    return out


def unit_table(path: str, index: int) -> tuple[pd.DataFrame, list[str]]:
    """The grid's :func:`bounds_table` rows for one unit, with columns axis and factor,
    and the what-ifs refused (``ParameterError``: e.g. ``gpu=`` on a CPU-only trace)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(path)
        base: Replay = replay(ts)
    rows, refused = [], []
    for axis, f, w in grid(ts, index):
        try:
            df = bounds_table(base, [w])
        except ParameterError as exc:
            refused.append(f"{' '.join(w)}: {str(exc)[:120]}")
            continue
        df.insert(0, "factor", f)
        df.insert(0, "axis", axis)
        rows.append(df)
    return pd.concat(rows, ignore_index=True), refused


def inside(df: pd.DataFrame) -> pd.Series:
    """True where the predicted step lies within [bound, upper bound] (with the tolerance)."""
    lo = df["predicted_ns"] >= df["bound_ns"] * (1 - REL_TOL) - ABS_TOL_NS
    hi = df["predicted_ns"] <= df["upper_bound_ns"] * (1 + REL_TOL) + ABS_TOL_NS
    return lo & hi


def units() -> list[dict]:
    return find_units(TRACES)[0] if TRACES.is_dir() else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    lines = ["| trace | what-if | predicted ms | lower bound ms (device / host / comm) | "
             "upper bound ms | inside |", "|---|---|---|---|---|---|"]
    n_in = n_all = 0
    for i, u in enumerate(units()):
        if a.only not in u["unit"]:
            continue
        df, refused = unit_table(u["path"], i)
        df["inside"] = inside(df)
        n_in += int(df["inside"].sum())
        n_all += len(df)
        for w, sub in df.groupby("what_if", sort=False):
            out = sub[~sub["inside"]]
            r = (out if len(out) else sub).sort_values("predicted_ns").iloc[-1]
            lines.append(
                f"| {u['unit']} | {w or '(replay)'} | {r.predicted_ns / 1e6:.3f} | "
                f"{r.bound_ns / 1e6:.3f} ({r.device_bound_ns / 1e6:.3f} / "
                f"{r.host_bound_ns / 1e6:.3f} / {r.comm_bound_ns / 1e6:.3f}) | "
                f"{r.upper_bound_ns / 1e6:.3f} | {'yes' if r.inside else 'NO'} |")
        lines += [f"| {u['unit']} | {x} | refused | | | |" for x in refused]
    lines.append(f"\n{n_in} of {n_all} predicted steps (rank, iteration, what-if) inside "
                 f"their bounds (tolerance {REL_TOL:.0%} + {ABS_TOL_NS / 1e3:.0f} us).")
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
