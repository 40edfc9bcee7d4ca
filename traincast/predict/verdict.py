"""The verdict: where a step goes, and what fixing its biggest problems would buy, simulated.

A performance engineer asks three questions of a trace: where does my step go, what is the
biggest thing I can fix, and how much would fixing it buy. :func:`verdict` answers the first
from the analyses (breakdown, idle causes, stragglers) and the other two with the simulator:
each candidate problem found by the analyses becomes a ``--what-if`` change
(:mod:`traincast.whatif.spec`), replayed on the same execution graph as any prediction, and
the candidates are ranked by the step time they would give. No gain comes from a rule of
thumb; each row carries the ``traincast predict --what-if`` command that reproduces it. The
candidates share the replay's graph (:func:`traincast.predict.batch.what_if_steps`: those
that change durations only are simulated as one batch), with the step times that command
gives.

The **job step** of an iteration is its slowest rank's step (ranks that synchronise every
step finish together); the verdict's step is the median of the job steps over iterations,
measured and as replayed. Gains are against the replay (the same simulator on both sides),
so a what-if that changes nothing gains exactly 0.

**Where it goes** (:data:`PARTS`): compute, exposed communication (transfer), memory copies,
then the idle time by the causes of :mod:`traincast.analysis.idle` (host/launch-bound, data
loading, waiting for peers, stream dependencies, other), each a share of the step summed over
every rank and iteration (time-weighted); the parts tile each breakdown window, so the shares
sum to 100%. Collectives waiting for their last member with no compute running (the idle
table's ``comm_wait_ns``) count as waiting for peers, not as transfer. A candidate whose
simulated gain is below :data:`MIN_GAIN_PCT` keeps its row with the reason appended to its
evidence (collectives waiting for a late rank; else the share of the replay's critical path,
:mod:`traincast.analysis.critical_path`, that it shortens; else the largest other part); ``note: ...`` rows of the verdict table say why a candidate was not proposed (a
host-bound step of fewer than :data:`MIN_LAUNCHES` device ops) or what a large "other idle"
is (the time after the step's last device op).

Candidates (each only when the analyses show the problem):

==============================  ==========================================================
problem (evidence)              what-if simulated
==============================  ==========================================================
exposed communication           ``overlap=ideal`` (collectives hidden behind compute:
(breakdown ``comm_exposed_ns``  the bound of any overlap work, e.g. T3 / CO2-style
>= 5% of the step)              overlapping or bucketing)
rank imbalance (stragglers:     ``speedup=rank:R:family:F=x`` with ``x`` = rank R's device
one rank's compute >= 5% above  time in op family F over the ranks' median in F (the family
the median)                     with the largest excess): R's load balanced to the median
host-bound GPU (idle causes:    ``speedup=kind:cpu_op=10`` and ``kind:runtime=10``: the
host >= 20% of the step, >= 50  host path 10x cheaper, as replaying a CUDA graph or
device ops per step)            launching fewer, larger kernels would make it (the factor
                                is an assumption, stated in the evidence)
fp32 GEMMs on a GPU with        ``speedup=sgemm=x``: cuBLAS/CUTLASS fp32 SIMT GEMMs
tensor cores (``sgemm``         (``*sgemm*`` kernels, not the TF32 ``tensorop`` ones) run
kernels >= 5% of the device     in bf16/fp16 on the tensor cores (autocast / AMP), with
time, a catalog GPU with a      ``x`` = the GPU's dense fp16 tensor peak x its achievable
half-precision tensor peak)     GEMM fraction / its fp32 peak (hardware catalog, sourced):
                                the sgemm kernels are taken to run at the fp32 peak today,
                                which understates the gain; memory-bound GEMMs gain less
==============================  ==========================================================
"""

from __future__ import annotations

import re
import shlex

import numpy as np
import pandas as pd
import pyarrow as pa

from traincast.analysis.critical_path import critical_path
from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.predict.batch import what_if_steps
from traincast.predict.prediction import Prediction
from traincast.simulate.replay import Replay, replay
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory, small_pages
from traincast.whatif.match import CHUNK, event_values, spread

__all__ = ["HOST_SPEEDUP", "VERDICT_ANALYSES", "job_step_ns", "opportunities", "verdict"]

#: the analyses (:func:`traincast.analysis.analyze`) whose tables :func:`verdict` reads (the
#: critical path, when absent, is walked only where a gain needs explaining)
VERDICT_ANALYSES = ("breakdown", "idle", "stragglers")

#: share of the step from which a problem is reported
MIN_SHARE = 0.05
#: host share of the step from which the host is called the bottleneck
HOST_SHARE = 0.20
#: how much cheaper the host path is assumed to get under CUDA graphs / fewer kernels
HOST_SPEEDUP = 10
#: device ops per step (median over ranks and iterations) from which a host-bound step is
#: called launch-bound: below, the host is busy with other work than launching, which CUDA
#: graphs would not remove
MIN_LAUNCHES = 50
#: a simulated gain below this share of the step (%) is listed with the reason it is ~0
MIN_GAIN_PCT = 0.5


def job_step_ns(iterations: pd.DataFrame, column: str) -> float:
    """Median over iterations of the slowest rank's ``column`` (ns): the job's step.

    ``iterations``: one row per (rank, iteration), as :attr:`Replay.steps
    <traincast.simulate.replay.Replay.steps>`, :attr:`Prediction.iterations
    <traincast.predict.prediction.Prediction.iterations>` or the ``ranks[].iterations`` of
    ``traincast predict --format json``.
    """
    per = iterations.groupby("iteration")[column].max()
    return float(np.median(per.to_numpy(float))) if len(per) else float("nan")


HOST_PART = "host/launch-bound (launches, Python, syncs)"
COMM_PART = "exposed communication (transfer)"
PEER_PART = "waiting for peers (in or before collectives)"
OTHER_PART = "other idle (step end, unexplained)"
#: the parts of the step, in print order: (name, breakdown or idle column); the idle causes
#: are those of :mod:`traincast.analysis.idle`
PARTS = (("compute", "compute_ns"), (COMM_PART, "comm_exposed_ns"),
         ("memory copies", "memory_ns"),
         (HOST_PART, "host_ns"),
         ("data loading", "data_loading_ns"), (PEER_PART, "peer_wait_ns"),
         ("stream dependencies", "stream_dep_ns"), (OTHER_PART, "other_ns"))
#: idle causes of :mod:`traincast.analysis.idle`, as columns of its table
IDLE_CAUSES = ("host_ns", "data_loading_ns", "peer_wait_ns", "stream_dep_ns", "other_ns")


def _parts(tables: dict[str, pd.DataFrame]) -> dict[str, float]:
    """Share of the step of each part (:data:`PARTS`), time-weighted over ranks and
    iterations: sum of the part over the windows / sum of the windows. The parts tile each
    window (breakdown: ``window = compute + exposed comm + memory + idle``), the idle split
    by cause in the proportions of the idle table (whose gaps may come from the replay's
    calibrated graph: its total is scaled to the breakdown's idle; an idle table without
    the window is ``other idle``), so the shares sum to 1."""
    bd = tables.get("breakdown")
    if bd is None or not len(bd):
        return {}
    idle = tables.get("idle")
    m = bd[["rank", "iteration", "window_ns", "compute_ns", "comm_exposed_ns", "memory_ns",
            "idle_ns"]]
    if idle is not None and len(idle):
        cols = [c for c in (*IDLE_CAUSES, "comm_wait_ns") if c in idle]
        m = m.merge(idle[["rank", "iteration", *cols]], on=["rank", "iteration"], how="left")
    m = m.fillna(0)
    for c in (*IDLE_CAUSES, "comm_wait_ns"):
        if c not in m:
            m[c] = 0.0
    causes = m[list(IDLE_CAUSES)].to_numpy(float)
    tot = causes.sum(axis=1)
    idle_ns = m["idle_ns"].to_numpy(float)
    scale = np.divide(idle_ns, tot, out=np.zeros_like(tot), where=tot > 0)
    causes = causes * scale[:, None]
    causes[:, -1] += np.where(tot > 0, 0.0, idle_ns)  # no cause known: other
    cols = {c: m[c].to_numpy(float) for c in ("compute_ns", "comm_exposed_ns", "memory_ns")}
    cols.update({c: causes[:, i] for i, c in enumerate(IDLE_CAUSES)})
    # collectives waiting for their last member with no compute running: exposed
    # communication that is waiting for peers, not transfer
    wait = np.minimum(m["comm_wait_ns"].to_numpy(float), cols["comm_exposed_ns"])
    cols["comm_exposed_ns"] = cols["comm_exposed_ns"] - wait
    cols["peer_wait_ns"] = cols["peer_wait_ns"] + wait
    w = float(m["window_ns"].sum())
    host_mpi = "source" in bd and (bd["source"] == "host").all()
    out: dict[str, float] = {}
    for name, col in PARTS:
        if col == "memory_ns" and host_mpi:  # host (MPI) ranks: library calls such as MPI_Init
            name = "library calls (MPI_Init...)"
        out[name] = float(cols[col].sum() / w) if w > 0 else 0.0
    return out


def _imbalance(ts: TraceSet, tables: dict[str, pd.DataFrame]) -> tuple[int, str, float,
                                                                          str] | None:
    """(rank, family, factor, evidence) of the most overloaded rank's worst family."""
    imb = tables.get("stragglers_imbalance")
    if imb is None or not len(imb):
        return None
    row = imb.iloc[0]
    if not np.isfinite(row["compute_spread"]) or row["compute_spread"] < MIN_SHARE:
        return None
    r = int(row["most_compute_rank"])
    per = _family_rank_time(ts)
    if per is None:  # the device time per family and rank, by pandas
        ev = ts.events.select(["rank", "kind", "op_family", "dur", "iteration"])
        if ev.column("kind").null_count == 0 and ev.column("iteration").null_count == 0:
            # the device ops of the steps only, to pandas
            ev = ev.filter(pa.array(_step_device_ops(ts)))
        ev = ev.to_pandas()
        dev = ev[ev["kind"].isin(GPU_WORK_KINDS) & (ev["op_family"] != "comm")
                 & (ev["iteration"] >= 0)]
        if dev.empty:
            return None
        per = dev.groupby(["op_family", "rank"], observed=True)["dur"].sum().unstack(
            fill_value=0)
    if r not in per.columns:
        return None
    med = per.median(axis=1)
    excess = (per[r] - med).sort_values(ascending=False)
    fam = str(excess.index[0])
    if excess.iloc[0] <= 0 or med[fam] <= 0:
        return None
    factor = float(per.at[fam, r] / med[fam])
    evidence = (f"rank {r} computes the most (the ranks' compute spreads "
                f"{100 * row['compute_spread']:.0f}%); its {fam} kernels take "
                f"{per.at[fam, r] / 1e6:.3g} ms against a median of {med[fam] / 1e6:.3g} ms "
                "over the ranks")
    return r, fam, factor, evidence


def _family_rank_time(ts: TraceSet) -> pd.DataFrame | None:
    """The device time (``dur`` summed, int64 ns) of the steps' device ops other than
    communication, one row per op family (the families present, in the column's dictionary
    order) and one column per rank (ascending, 0 where none): the table
    ``groupby(["op_family", "rank"], observed=True)["dur"].sum().unstack(fill_value=0)``
    gives, from the codes (an empty table when there is no such op). None when this does
    not apply: nullable columns, a dictionary that holds a value twice, sums that a float64
    would not hold exactly."""
    ev = ts.events
    if any(ev.column(c).null_count for c in ("rank", "kind", "op_family", "dur",
                                              "iteration")):
        return None
    fams = event_values(ts, "op_family")
    if len(set(fams.values)) != len(fams.values):
        return None
    keep = np.fromiter((v != "comm" for v in fams.values), bool, len(fams.values))
    rank = ts.column("rank")
    lo, hi = (int(rank.min()), int(rank.max())) if rank.size else (0, -1)
    if not keep.any() or hi - lo >= 1 << 16:
        return _family_rank_time_whole(ts, fams, keep)
    # the sums of a chunk of events at a time (no whole-job row list): every partial sum
    # is exact when the absolute durations sum below 2**53, as the test below asks
    dur_all = ts.column("dur")
    n_r = hi - lo + 1
    sums = np.zeros(len(fams.values) * n_r)
    seen = np.zeros(len(fams.values) * n_r, bool)
    total = 0.0
    for a in range(0, dur_all.size, CHUNK):
        f = fams.codes[a:a + CHUNK]
        rows = np.flatnonzero(_step_device_ops(ts, a, a + CHUNK) & keep[f])
        if not rows.size:
            continue
        dur = dur_all[a:a + CHUNK][rows]
        total += float(np.abs(dur.astype(np.float64)).sum())
        key = f[rows].astype(np.int64) * n_r + (rank[a:a + CHUNK][rows] - lo)
        sums += np.bincount(key, weights=dur, minlength=sums.size)
        seen[key] = True
    if not seen.any():
        return pd.DataFrame()
    if total >= 2.0 ** 53:
        return None
    seen = seen.reshape(-1, n_r)
    fam_u, rank_u = np.flatnonzero(seen.any(axis=1)), np.flatnonzero(seen.any(axis=0))
    table = sums.reshape(-1, n_r)[np.ix_(fam_u, rank_u)]
    return pd.DataFrame(table.astype(np.int64), index=[fams.values[c] for c in fam_u.tolist()],
                        columns=(rank_u + lo).tolist())


def _family_rank_time_whole(ts: TraceSet, fams, keep: np.ndarray  # type: ignore[no-untyped-def]
                            ) -> pd.DataFrame | None:
    """:func:`_family_rank_time` from the whole job's rows at once (rank ids far apart)."""
    ev = ts.events
    rows = np.flatnonzero(_step_device_ops(ts) & keep[fams.codes] if keep.size else
                          np.zeros(ev.num_rows, bool))
    if not rows.size:
        return pd.DataFrame()
    dur = ts.column("dur")[rows]
    if float(np.abs(dur.astype(np.float64)).sum()) >= 2.0 ** 53:
        return None
    fam_u, fam_i = _dense(fams.codes[rows])
    rank_u, rank_i = _dense(ts.column("rank")[rows])
    key = fam_i.astype(np.int64) * rank_u.size + rank_i
    sums = np.bincount(key, weights=dur, minlength=fam_u.size * rank_u.size)
    return pd.DataFrame(sums.astype(np.int64).reshape(fam_u.size, rank_u.size),
                        index=[fams.values[c] for c in fam_u.tolist()],
                        columns=rank_u.tolist())


def _dense(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` of integers, counted rather than sorted when
    their range is small."""
    lo, hi = (int(x.min()), int(x.max())) if x.size else (0, -1)
    if hi - lo >= 4 * x.size + 1024:
        return np.unique(x, return_inverse=True)
    present = np.bincount(x - lo, minlength=hi - lo + 1) > 0
    slot = np.cumsum(present) - 1
    return (np.flatnonzero(present) + lo).astype(x.dtype), slot[x - lo]


def _step_device_ops(ts: TraceSet, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """bool[hi - lo]: which events of rows ``[lo, hi)`` (None: to the end) are device ops
    (kinds of :data:`GPU_WORK_KINDS`) inside a step (``iteration >= 0``). Not kept: the
    passes over all events take it a chunk at a time (:data:`CHUNK`)."""
    kinds = event_values(ts, "kind")
    want = np.fromiter((v in GPU_WORK_KINDS for v in kinds.values), bool, len(kinds.values))
    codes = kinds.codes[lo:hi]
    dev = spread(want, codes) if want.size else np.zeros(codes.size, bool)
    dev &= ts.column("iteration")[lo:hi] >= 0
    return dev


#: fp32 SIMT GEMM kernels of cuBLAS (``volta_sgemm_128x64_nn``, ``ampere_sgemm_...``) and
#: CUTLASS (``cutlass_80_simt_sgemm_...``); the TF32 tensor-core ones are named ``tensorop``
#: (``cutlass_80_tensorop_s1688gemm``) and do not match
FP32_GEMM = "sgemm"


def _fp32_gemms(ts: TraceSet) -> tuple[float, str] | None:
    """(speedup, evidence) when fp32 SIMT GEMMs take >= :data:`MIN_SHARE` of the device
    time on a catalog GPU that has a half-precision tensor peak above its fp32 peak."""
    # the trace's share first (no catalog read for a trace without fp32 GEMMs)
    # the names are tested once each (the dictionary), then spread to the events by code;
    # a chunk of events at a time (no whole-job row list)
    names = event_values(ts, "name")
    is_sg = np.fromiter((FP32_GEMM in n and "tensorop" not in n for n in names.values), bool,
                        len(names.values))
    dur_all = ts.column("dur")
    total = sg_total = 0
    sg_dur, sg_codes = [], []
    for a in range(0, dur_all.size, CHUNK):
        rows = np.flatnonzero(_step_device_ops(ts, a, a + CHUNK))
        codes = names.codes[a:a + CHUNK][rows]
        sg = is_sg[codes] if is_sg.size else np.zeros(rows.size, bool)
        # a negative duration (a broken clock) is no device time (the device ops' only)
        dur = np.maximum(dur_all[a:a + CHUNK][rows].astype(np.int64), 0)
        total += int(dur.sum())
        sg_dur.append(dur[sg])
        sg_codes.append(codes[sg])
        sg_total += int(sg_dur[-1].sum())
    if total <= 0:
        return None
    share = float(sg_total) / float(total)
    if share < MIN_SHARE:
        return None
    cat = load_catalog()
    gpu = cat.match_first(p for info in ts.ranks.values() for p in info.device_properties)
    if gpu is None:
        return None
    try:
        fp32, half = gpu.peak_flops("fp32"), gpu.peak_flops("fp16")
    except Exception:  # noqa: BLE001 - no such peak in the entry: no opportunity
        return None
    factor = half * gpu.gemm_efficiency / fp32 if fp32 > 0 else 0.0
    if factor <= 1.0:
        return None
    per_code = pd.Series(np.concatenate(sg_dur)).groupby(np.concatenate(sg_codes)).sum()
    per_name = pd.Series(per_code.to_numpy(),
                         index=[names.values[c] for c in per_code.index.tolist()])
    top = per_name.groupby(level=0).sum().sort_values(ascending=False)
    # the kernel's own name (``cutlass_80_simt_sgemm_...`` inside ``cutlass::Kernel2<...>``)
    m = re.search(r"\w*" + FP32_GEMM + r"\w*", str(top.index[0]))
    evidence = (f"fp32 SIMT GEMM kernels ({m.group(0) if m else top.index[0]}, {len(top)} "
                f"kind{'s' if len(top) > 1 else ''}) take "
                f"{100 * share:.0f}% of the device time on {gpu.name}, whose tensor cores run "
                f"fp16 at {half / 1e12:.0f} TFLOP/s against {fp32 / 1e12:.1f} TFLOP/s fp32; "
                f"simulated {factor:.2g}x faster (half-precision peak x achievable GEMM "
                f"fraction {gpu.gemm_efficiency:.2f} / fp32 peak; catalog figures, an "
                "upper bound for compute-bound GEMMs)")
    return factor, evidence


#: what each opportunity shortens (a part of :data:`PARTS`), by its title's first word
_TARGET = {"overlap": COMM_PART, "balance": "compute",
           "launch-bound": HOST_PART, "GEMMs": "compute"}


def _launches_per_step(ts: TraceSet) -> float:
    """Median over (rank, iteration) of the device ops (kernels, copies) in the step
    (memoised on ``ts`` while its events are the same table)."""
    hit = ts.memo.get("launches_per_step")
    if hit is not None and hit[0] is ts.events:
        return hit[1]
    rank, iteration = ts.column("rank"), ts.column("iteration")
    out = 0.0
    lo, hi = (int(rank.min()), int(rank.max())) if rank.size else (0, -1)
    n_it = max(int(iteration.max()) + 1 if iteration.size else 0, 0)
    if (hi - lo + 1) * n_it <= max(4 * rank.size, 1 << 20):
        # counted per (rank, iteration), a chunk of events at a time
        counts = np.zeros((hi - lo + 1) * n_it, np.int64)
        for a in range(0, rank.size, CHUNK):
            rows = np.flatnonzero(_step_device_ops(ts, a, a + CHUNK))
            key = (rank[a:a + CHUNK][rows] - lo).astype(np.int64) * n_it
            key += iteration[a:a + CHUNK][rows]
            counts += np.bincount(key, minlength=counts.size)
        if counts.any():
            out = float(np.median(counts[counts > 0]))
    elif (dev := _step_device_ops(ts)).any():
        dev = np.flatnonzero(dev)
        it = ts.column("iteration")[dev].astype(np.int64)
        key = ts.column("rank")[dev].astype(np.int64) * (int(it.max()) + 1) + it
        counts = np.unique(key, return_counts=True)[1]
        out = float(np.median(counts))
    ts.memo["launches_per_step"] = (ts.events, out)
    return out


def _comm_wait_share(tables: dict[str, pd.DataFrame]) -> float:
    """Share of the step (all ranks and iterations) collectives wait for their last member
    while no compute runs (idle table ``comm_wait_ns``, at most the exposed communication)."""
    idle, bd = tables.get("idle"), tables.get("breakdown")
    if idle is None or bd is None or not len(idle) or "comm_wait_ns" not in idle:
        return 0.0
    m = bd.merge(idle[["rank", "iteration", "comm_wait_ns"]], on=["rank", "iteration"],
                 how="left").fillna(0)
    w = float(m["window_ns"].sum())
    wait = np.minimum(m["comm_wait_ns"], m["comm_exposed_ns"]).sum()
    return float(wait / w) if w > 0 else 0.0


def _tail_share(ts: TraceSet) -> tuple[float, int]:
    """Share of the measured steps (all ranks and iterations) after each step's last device
    op ends (the whole step when it has none), and the number of device ops in the steps."""
    it = ts.iterations.select(["rank", "iteration", "start", "end"]).to_pandas()
    ev = ts.events.select(["rank", "kind", "iteration", "ts", "dur"]).to_pandas()
    dev = ev[ev["kind"].isin(GPU_WORK_KINDS) & (ev["iteration"] >= 0)]
    last = (dev["ts"] + dev["dur"]).groupby([dev["rank"], dev["iteration"]]).max()
    m = it.merge(last.rename("last").reset_index(), on=["rank", "iteration"], how="left")
    lo, hi = m["start"].to_numpy(float), m["end"].to_numpy(float)
    last_end = np.clip(m["last"].fillna(m["start"]).to_numpy(float), lo, hi)
    w = float((hi - lo).sum())
    return (float((hi - last_end).sum() / w) if w > 0 else 0.0), len(dev)


#: critical-path categories (:mod:`traincast.analysis.critical_path`) each opportunity shortens
_ON_PATH = {"overlap": ("comm", "comm_unmatched"), "GEMMs": ("gemm",)}
#: readable names of critical-path categories in the reasons
_PATH_NAMES = {"host_untraced": "untraced host time (Python, framework code)",
               "late_start": "a rank's late start", "launch_latency": "kernel launches"}


def _path_shares(prediction: Replay, tables: dict[str, pd.DataFrame]) -> pd.DataFrame | None:
    """``by_family`` of the replay's critical path (default step and rank), None when the
    replay has no step to walk: the analyses' ``critical_path_by_family`` when ``tables``
    hold it (:func:`traincast.analysis.analyze` with this replay), else walked here."""
    hit = tables.get("critical_path_by_family")
    if hit is not None:
        return hit
    try:
        return critical_path(prediction).by_family
    except ParameterError:
        return None


def _why_no_gain(title: str, gain_pct: float, parts: dict[str, float],
                 tables: dict[str, pd.DataFrame], path: pd.DataFrame | None = None) -> str:
    """Why a simulated change gains ~0: the ranks wait inside their collectives (overlap
    hides transfers, not waits), or the step is mostly a part the change does not shorten."""
    target = _TARGET.get(title.split()[0], "")
    head = f"yet simulated it gains {gain_pct:.1f}%"
    wait = _comm_wait_share(tables)
    if target == COMM_PART and wait > parts.get(target, 0.0):
        return (f"{head}: the ranks wait for their peers inside the collectives "
                f"({100 * wait:.0f}% of the step): the step waits for the last rank to arrive "
                "whether or not the communication overlaps compute")
    cats = _ON_PATH.get(title.split()[0])
    if cats and path is not None and len(path):
        share = path.set_index("family")["share_pct"]
        on = float(share.reindex(list(cats)).fillna(0).sum())
        top = path.iloc[0]
        name = _PATH_NAMES.get(str(top["family"]), str(top["family"]))
        return (f"{head}: it is {on:.0f}% of the critical path (last step, slowest rank), which "
                f"runs through {name} ({top['share_pct']:.0f}%)")
    rest = sorted(((v, k) for k, v in parts.items() if k != target), reverse=True)
    if not rest:
        return head
    v, k = rest[0]
    return f"{head}: the step is mostly {k} ({100 * v:.0f}%), which this does not shorten"


def opportunities(ts: TraceSet, tables: dict[str, pd.DataFrame], prediction: Replay,
                  source: str = "TRACE_DIR") -> pd.DataFrame:
    """The candidate problems of the module docstring, each simulated, best first.

    Args:
        ts: the measured run; ``tables``: its analyses (breakdown, idle, stragglers; the
            critical path's ``critical_path_by_family`` when it was analysed, which must then
            be ``prediction``'s, as :func:`traincast.analysis.analyze` with
            ``prediction=prediction`` gives it);
        prediction: its replay (:func:`traincast.predict`, or any
            :class:`~traincast.simulate.replay.Replay` of it).
        source: the trace folder as the printed commands should name it (the commands are
            shell-quoted, :func:`shlex.join`).

    Returns:
        one row per candidate: ``opportunity``, ``what_if`` (list of KEY=VALUE),
        ``replay_ns`` and ``predicted_ns`` (job steps), ``gain_ns``, ``gain_pct``,
        ``evidence``, ``command``; sorted by ``predicted_ns``.
    """
    base = job_step_ns(prediction.steps, "predicted_ns")
    parts = _parts(tables)
    cands: list[tuple[str, list[str], str]] = []
    wait = _comm_wait_share(tables)
    exposed = parts.get(COMM_PART, 0.0) + wait  # the breakdown's exposed communication
    if exposed >= MIN_SHARE:
        top = ""
        sr = tables.get("stragglers_ranks")
        if sr is not None and len(sr) and "top_wait_collective" in sr:
            top = str(sr["top_wait_collective"].mode().iloc[0])
        what = top or "communication"
        cands.append((f"overlap {what} with compute", ["overlap=ideal"],
                      f"exposed communication is {100 * exposed:.0f}% of the step (all ranks: "
                      f"{100 * (exposed - wait):.0f}% transfer, {100 * wait:.0f}% waiting "
                      "for the last member to arrive)"
                      + (f"; the ranks wait longest at {top}" if top else "")))
    imb = _imbalance(ts, tables)
    if imb is not None:
        r, fam, factor, evidence = imb
        cands.append((f"balance rank {r}'s {fam} load",
                      [f"speedup=rank:{r}:family:{fam}={factor:.4g}"], evidence))
    host = parts.get(HOST_PART, 0.0)
    launches = _launches_per_step(ts)
    if host >= HOST_SHARE and launches >= MIN_LAUNCHES:
        cands.append(("launch-bound host: CUDA graphs or fewer kernels",
                      [f"speedup=kind:cpu_op={HOST_SPEEDUP}",
                       f"speedup=kind:runtime={HOST_SPEEDUP}"],
                      f"the GPU waits for the host {100 * host:.0f}% of the step, which "
                      f"launches {launches:.0f} device ops (median over ranks and steps); "
                      f"simulated with the host path {HOST_SPEEDUP}x cheaper (an assumption)"))
    fp32 = _fp32_gemms(ts)
    if fp32 is not None:
        factor, evidence = fp32
        cands.append(("GEMMs in fp32 on a GPU with tensor cores: bf16/fp16 (AMP)",
                      [f"speedup={FP32_GEMM}={factor:.4g}"], evidence))
    rows = []
    path = None  # the critical path, walked when a gain needs explaining
    # one graph for all candidates: the replay's when it is the graph ``predict`` builds
    steps = what_if_steps(ts, _default_replay(ts, prediction), [c[1] for c in cands])
    for (title, what_if, evidence), st in zip(cands, steps, strict=True):
        new = job_step_ns(st, "predicted_ns")
        cmd = shlex.join(["traincast", "predict", source,
                          *(x for w in what_if for x in ("--what-if", w))])
        gain_pct = 100 * (base - new) / base if base else 0.0
        if gain_pct < MIN_GAIN_PCT:
            if path is None:
                path = _path_shares(prediction, tables)
            evidence += "; " + _why_no_gain(title, gain_pct, parts, tables, path)
        rows.append({"opportunity": title, "what_if": what_if, "replay_ns": base,
                     "predicted_ns": new, "gain_ns": base - new, "gain_pct": gain_pct,
                     "evidence": evidence, "command": cmd})
    df = pd.DataFrame(rows, columns=["opportunity", "what_if", "replay_ns", "predicted_ns",
                                     "gain_ns", "gain_pct", "evidence", "command"])
    return df.sort_values("predicted_ns", kind="stable").reset_index(drop=True)


def _default_replay(ts: TraceSet, prediction: Replay) -> Replay:
    """``prediction`` when it is the plain replay :func:`~traincast.predict.prediction.
    predict` builds by default (what each printed ``traincast predict --what-if`` command
    changes), else that replay, built here."""
    if (isinstance(prediction, Prediction) and prediction.plain and not prediction.exact
            and prediction.model_waits and prediction.measured is ts):
        return prediction
    return replay(ts)


def verdict(ts: TraceSet, tables: dict[str, pd.DataFrame], prediction: Replay,
            source: str = "TRACE_DIR") -> dict[str, pd.DataFrame]:
    """``{"verdict": ..., "opportunities": ...}``: the step (``metric``, ``value``, ``unit``
    rows: measured and replayed job step, slowest rank, each part's share) and
    :func:`opportunities`. ``tables`` must hold ``breakdown``, ``idle`` and the stragglers
    tables (:func:`traincast.analysis.analyze`)."""
    with small_pages():  # many short-lived large arrays (traincast.util.allocator)
        out = _verdict(ts, tables, prediction, source)
    release_memory()  # the intermediates' pages, freed, back to the OS
    return out


def _verdict(ts: TraceSet, tables: dict[str, pd.DataFrame], prediction: Replay,
             source: str) -> dict[str, pd.DataFrame]:
    it = prediction.steps
    per_rank = it.groupby("rank")["measured_ns"].median()
    rows = [("step (measured, slowest rank, median over iterations)",
             job_step_ns(it, "measured_ns") / 1e6, "ms"),
            ("step (replayed)", job_step_ns(it, "predicted_ns") / 1e6, "ms"),
            ("slowest rank", float(per_rank.idxmax()) if len(per_rank) else float("nan"),
             "rank")]
    parts = _parts(tables)
    rows += [(f"{k} (share of the step)", 100 * v, "%") for k, v in parts.items()]
    host = parts.get(HOST_PART, 0.0)
    if host >= HOST_SHARE:
        launches = _launches_per_step(ts)
        if launches == 0:  # a CPU run: no device waits for anything
            rows.append((f"note: the step runs no device op (a CPU run): the "
                         f"{100 * host:.0f}% counted as host-bound is time between the host's "
                         "ops (Python, the framework's dispatch), so CUDA graphs do not apply",
                         float("nan"), ""))
        elif launches < MIN_LAUNCHES:
            rows.append((f"note: the GPU waits for the host {100 * host:.0f}% of the step, but "
                         f"the step runs only {launches:.0f} device ops (fewer than "
                         f"{MIN_LAUNCHES}): the host is busy with other work than launching "
                         "kernels, so CUDA graphs are not suggested", float("nan"), ""))
    other = parts.get(OTHER_PART, 0.0)
    if other >= HOST_SHARE:
        tail, n_ops = _tail_share(ts)
        where = (f"{100 * tail:.0f}% of the step comes after its last device op" if n_ops else
                 "the steps run no device op")
        rows.append((f"note: other idle is {100 * other:.0f}% of the step; {where}: the host "
                     "ran on without device work (e.g. while capturing CUDA graphs, which "
                     "records kernels without running them) or on work the trace does not "
                     "show", float("nan"), ""))
    return {"verdict": pd.DataFrame(rows, columns=["metric", "value", "unit"]),
            "opportunities": opportunities(ts, tables, prediction, source)}
