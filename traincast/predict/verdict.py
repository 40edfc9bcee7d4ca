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

import math
import re
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.costs.hardware import load_catalog
from traincast.errors import ParameterError
from traincast.predict.batch import what_if_step_columns
from traincast.predict.prediction import Prediction
from traincast.predict.verdict_tables import (
    COMM_PART,
    HOST_PART,
    IDLE_CAUSES,
    OTHER_PART,
    PARTS,
    PEER_PART,
    Columns,
    as_columns,
    comm_wait_share,
    job_step_ns,
    parts,
    row_count,
)
from traincast.simulate.replay import Replay, replay
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory, small_pages
from traincast.whatif.match import CHUNK, event_values, spread

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["COMM_PART", "HOST_PART", "HOST_SPEEDUP", "IDLE_CAUSES", "OPPORTUNITY_COLUMNS",
           "OTHER_PART", "PARTS", "PEER_PART", "VERDICT_ANALYSES", "VERDICT_COLUMNS",
           "job_step_ns", "opportunities", "opportunity_rows", "verdict", "verdict_rows"]

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


#: columns of the ``verdict`` table (:func:`verdict`)
VERDICT_COLUMNS = ["metric", "value", "unit"]
#: columns of the ``opportunities`` table (:func:`opportunities`)
OPPORTUNITY_COLUMNS = ["opportunity", "what_if", "replay_ns", "predicted_ns", "gain_ns",
                       "gain_pct", "evidence", "command"]

def _desc_order(values: np.ndarray) -> np.ndarray:
    """Positions of ``values`` (no NaN) largest first, ties as pandas'
    ``Series.sort_values(ascending=False)`` orders them (its ``nargsort``: the reversed
    values argsorted with numpy's default kind, the positions then reversed)."""
    rev = np.arange(values.size)[::-1]
    return rev[values[::-1].argsort()][::-1]


@dataclass(frozen=True)
class FamilyRankTime:
    """Device time (int64 ns) of the steps' device ops other than communication:
    ``table[f, r]`` for op family ``families[f]`` on rank ``ranks[r]`` (0 where none);
    families in the column's dictionary order, ranks ascending."""

    families: list[str]
    ranks: list[int]
    table: np.ndarray  # int64[len(families), len(ranks)]

    @classmethod
    def empty(cls) -> FamilyRankTime:
        """No such op."""
        return cls([], [], np.zeros((0, 0), np.int64))

    def to_frame(self) -> pd.DataFrame:
        """The table with families as index and ranks as columns (pandas' ``groupby([
        "op_family", "rank"])["dur"].sum().unstack(fill_value=0)``)."""
        import pandas as pd  # lazy: a view for the tests and the pandas fallback only

        if not self.families:
            return pd.DataFrame()
        return pd.DataFrame(self.table, index=self.families, columns=self.ranks)


def _imbalance(ts: TraceSet, tables: Mapping[str, Any]) -> tuple[int, str, float,
                                                                   str] | None:
    """(rank, family, factor, evidence) of the most overloaded rank's worst family."""
    imb = as_columns(tables.get("stragglers_imbalance"))
    if imb is None or not row_count(imb):
        return None
    spread_ = float(imb["compute_spread"][0])  # the first step's, as the table lists it
    if not np.isfinite(spread_) or spread_ < MIN_SHARE:
        return None
    r = int(imb["most_compute_rank"][0])
    per = _family_rank_time(ts)
    if per is None:
        per = _family_rank_time_pandas(ts)
        if per is None:
            return None
    if r not in per.ranks:
        return None
    table = per.table
    col = table[:, per.ranks.index(r)]
    med = np.median(table, axis=1)
    order = _desc_order(col - med)
    f = int(order[0])
    fam = str(per.families[f])
    if col[f] - med[f] <= 0 or med[f] <= 0:
        return None
    factor = float(col[f] / med[f])
    evidence = (f"rank {r} computes the most (the ranks' compute spreads "
                f"{100 * spread_:.0f}%); its {fam} kernels take "
                f"{col[f] / 1e6:.3g} ms against a median of {med[f] / 1e6:.3g} ms "
                "over the ranks")
    return r, fam, factor, evidence


def _family_rank_time_pandas(ts: TraceSet) -> FamilyRankTime | None:
    """:func:`_family_rank_time` by pandas over the events, where the codes do not apply
    (nullable columns, a dictionary holding a value twice, sums a float64 would not hold)."""
    import pyarrow as pa  # lazy: pa.array imports pandas (the codes serve other traces)

    ev = ts.events.select(["rank", "kind", "op_family", "dur", "iteration"])
    if ev.column("kind").null_count == 0 and ev.column("iteration").null_count == 0:
        # the device ops of the steps only, to pandas
        ev = ev.filter(pa.array(_step_device_ops(ts)))
    df = ev.to_pandas()
    dev = df[df["kind"].isin(GPU_WORK_KINDS) & (df["op_family"] != "comm")
             & (df["iteration"] >= 0)]
    if dev.empty:
        return None
    per = dev.groupby(["op_family", "rank"], observed=True)["dur"].sum().unstack(fill_value=0)
    return FamilyRankTime([str(f) for f in per.index], per.columns.tolist(),
                          per.to_numpy())


def _family_rank_time(ts: TraceSet) -> FamilyRankTime | None:
    """The device time (``dur`` summed, int64 ns) of the steps' device ops other than
    communication per op family (the families present, in the column's dictionary order)
    and rank (ascending, 0 where none): the table ``groupby(["op_family", "rank"],
    observed=True)["dur"].sum().unstack(fill_value=0)`` gives, from the codes (empty when
    there is no such op). None when this does not apply: nullable columns, a dictionary
    that holds a value twice, sums that a float64 would not hold exactly."""
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
        return FamilyRankTime.empty()
    if total >= 2.0 ** 53:
        return None
    seen = seen.reshape(-1, n_r)
    fam_u, rank_u = np.flatnonzero(seen.any(axis=1)), np.flatnonzero(seen.any(axis=0))
    table = sums.reshape(-1, n_r)[np.ix_(fam_u, rank_u)]
    return FamilyRankTime([fams.values[c] for c in fam_u.tolist()], (rank_u + lo).tolist(),
                          table.astype(np.int64))


def _family_rank_time_whole(ts: TraceSet, fams, keep: np.ndarray  # type: ignore[no-untyped-def]
                            ) -> FamilyRankTime | None:
    """:func:`_family_rank_time` from the whole job's rows at once (rank ids far apart)."""
    ev = ts.events
    rows = np.flatnonzero(_step_device_ops(ts) & keep[fams.codes] if keep.size else
                          np.zeros(ev.num_rows, bool))
    if not rows.size:
        return FamilyRankTime.empty()
    dur = ts.column("dur")[rows]
    if float(np.abs(dur.astype(np.float64)).sum()) >= 2.0 ** 53:
        return None
    fam_u, fam_i = _dense(fams.codes[rows])
    rank_u, rank_i = _dense(ts.column("rank")[rows])
    key = fam_i.astype(np.int64) * rank_u.size + rank_i
    sums = np.bincount(key, weights=dur, minlength=fam_u.size * rank_u.size)
    return FamilyRankTime([fams.values[c] for c in fam_u.tolist()], rank_u.tolist(),
                          sums.astype(np.int64).reshape(fam_u.size, rank_u.size))


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
    # the time per kernel name (codes of one name summed), names sorted, largest first
    codes, inv = np.unique(np.concatenate(sg_codes), return_inverse=True)
    per_code = np.zeros(codes.size, np.int64)
    np.add.at(per_code, inv, np.concatenate(sg_dur))
    per_name: dict[str, int] = {}
    for c, v in zip(codes.tolist(), per_code.tolist(), strict=True):
        per_name[names.values[c]] = per_name.get(names.values[c], 0) + v
    kinds = sorted(per_name)
    top = kinds[int(_desc_order(np.array([per_name[k] for k in kinds], np.int64))[0])]
    # the kernel's own name (``cutlass_80_simt_sgemm_...`` inside ``cutlass::Kernel2<...>``)
    m = re.search(r"\w*" + FP32_GEMM + r"\w*", str(top))
    evidence = (f"fp32 SIMT GEMM kernels ({m.group(0) if m else top}, {len(kinds)} "
                f"kind{'s' if len(kinds) > 1 else ''}) take "
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


def _tail_share(ts: TraceSet) -> tuple[float, int]:
    """Share of the measured steps (all ranks and iterations) after each step's last device
    op ends (the whole step when it has none), and the number of device ops in the steps."""
    # pandas (to_pandas) only for a step mostly "other idle" (the verdict's note)
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


def _path_shares(prediction: Replay, tables: Mapping[str, Any]) -> Columns | None:
    """``by_family`` of the replay's critical path (default step and rank), as columns; None
    when the replay has no step to walk: the analyses' ``critical_path_by_family`` when
    ``tables`` hold it (:func:`traincast.analysis.analyze` with this replay), else walked
    here (:func:`~traincast.analysis.critical_path.critical_path_family_columns`)."""
    hit = tables.get("critical_path_by_family")
    if hit is not None:
        return as_columns(hit)
    # lazy: the walk, imported when a gain needs explaining
    from traincast.analysis.critical_path import critical_path_family_columns

    try:
        return critical_path_family_columns(prediction)
    except ParameterError:
        return None


def _why_no_gain(title: str, gain_pct: float, parts: dict[str, float],
                 tables: Mapping[str, Any], path: Columns | None = None) -> str:
    """Why a simulated change gains ~0: the ranks wait inside their collectives (overlap
    hides transfers, not waits), or the step is mostly a part the change does not shorten."""
    target = _TARGET.get(title.split()[0], "")
    head = f"yet simulated it gains {gain_pct:.1f}%"
    wait = comm_wait_share(tables)
    if target == COMM_PART and wait > parts.get(target, 0.0):
        return (f"{head}: the ranks wait for their peers inside the collectives "
                f"({100 * wait:.0f}% of the step): the step waits for the last rank to arrive "
                "whether or not the communication overlaps compute")
    cats = _ON_PATH.get(title.split()[0])
    if cats and path is not None and row_count(path):
        fams = [str(f) for f in np.asarray(path["family"], object).tolist()]
        share = np.asarray(path["share_pct"], np.float64)
        where = {f: i for i, f in enumerate(fams)}
        on = float(np.sum([share[where[c]] if c in where else 0.0 for c in cats]))
        name = _PATH_NAMES.get(fams[0], fams[0])
        return (f"{head}: it is {on:.0f}% of the critical path (last step, slowest rank), which "
                f"runs through {name} ({share[0]:.0f}%)")
    rest = sorted(((v, k) for k, v in parts.items() if k != target), reverse=True)
    if not rest:
        return head
    v, k = rest[0]
    return f"{head}: the step is mostly {k} ({100 * v:.0f}%), which this does not shorten"


def _mode(values: np.ndarray) -> str:
    """The most frequent value (the smallest of those tied; missing values skipped), as
    pandas' ``Series.mode().iloc[0]``; "" when there is none."""
    counts = Counter(v for v in np.asarray(values, object).tolist()
                     if v is not None and v == v)  # NaN != NaN
    if not counts:
        return ""
    best = max(counts.values())
    return str(sorted(v for v, c in counts.items() if c == best)[0])


def opportunities(ts: TraceSet, tables: Mapping[str, Any], prediction: Replay,
                  source: str = "TRACE_DIR") -> pd.DataFrame:
    """The candidate problems of the module docstring, each simulated, best first.

    Args:
        ts: the measured run; ``tables``: its analyses (breakdown, idle, stragglers; the
            critical path's ``critical_path_by_family`` when it was analysed, which must then
            be ``prediction``'s, as :func:`traincast.analysis.analyze` with
            ``prediction=prediction`` gives it), as DataFrames or numpy columns
            (:mod:`traincast.predict.verdict_tables`);
        prediction: its replay (:func:`traincast.predict`, or any
            :class:`~traincast.simulate.replay.Replay` of it).
        source: the trace folder as the printed commands should name it (the commands are
            shell-quoted, :func:`shlex.join`).

    Returns:
        one row per candidate (:data:`OPPORTUNITY_COLUMNS`): ``opportunity``, ``what_if``
        (list of KEY=VALUE), ``replay_ns`` and ``predicted_ns`` (job steps), ``gain_ns``,
        ``gain_pct``, ``evidence``, ``command``; sorted by ``predicted_ns``.
    """
    import pandas as pd  # lazy: the terminal verdict reads the rows (opportunity_rows)

    return pd.DataFrame(opportunity_rows(ts, tables, prediction, source),
                        columns=OPPORTUNITY_COLUMNS)


def opportunity_rows(ts: TraceSet, tables: Mapping[str, Any], prediction: Replay,
                     source: str = "TRACE_DIR") -> list[dict[str, Any]]:
    """:func:`opportunities` as rows (one dict per row, in order), without pandas."""
    base = job_step_ns(prediction.step_columns, "predicted_ns")
    parts_ = parts(tables)
    cands: list[tuple[str, list[str], str]] = []
    wait = comm_wait_share(tables)
    exposed = parts_.get(COMM_PART, 0.0) + wait  # the breakdown's exposed communication
    if exposed >= MIN_SHARE:
        top = ""
        sr = as_columns(tables.get("stragglers_ranks"))
        if sr is not None and row_count(sr) and "top_wait_collective" in sr:
            top = _mode(sr["top_wait_collective"])
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
    host = parts_.get(HOST_PART, 0.0)
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
    steps = what_if_step_columns(ts, _default_replay(ts, prediction), [c[1] for c in cands])
    for (title, what_if, evidence), st in zip(cands, steps, strict=True):
        new = job_step_ns(st, "predicted_ns")
        cmd = shlex.join(["traincast", "predict", source,
                          *(x for w in what_if for x in ("--what-if", w))])
        gain_pct = 100 * (base - new) / base if base else 0.0
        if gain_pct < MIN_GAIN_PCT:
            if path is None:
                path = _path_shares(prediction, tables)
            evidence += "; " + _why_no_gain(title, gain_pct, parts_, tables, path)
        rows.append({"opportunity": title, "what_if": what_if, "replay_ns": base,
                     "predicted_ns": new, "gain_ns": base - new, "gain_pct": gain_pct,
                     "evidence": evidence, "command": cmd})
    # by predicted step, stable, a missing one (NaN) last: pandas' sort_values(kind="stable")
    return sorted(rows, key=lambda row: (math.isnan(row["predicted_ns"]), row["predicted_ns"]))


def _default_replay(ts: TraceSet, prediction: Replay) -> Replay:
    """``prediction`` when it is the plain replay :func:`~traincast.predict.prediction.
    predict` builds by default (what each printed ``traincast predict --what-if`` command
    changes), else that replay, built here."""
    if (isinstance(prediction, Prediction) and prediction.plain and not prediction.exact
            and prediction.model_waits and prediction.measured is ts):
        return prediction
    return replay(ts)


def verdict(ts: TraceSet, tables: Mapping[str, Any], prediction: Replay,
            source: str = "TRACE_DIR") -> dict[str, pd.DataFrame]:
    """``{"verdict": ..., "opportunities": ...}``: the step (:data:`VERDICT_COLUMNS`:
    ``metric``, ``value``, ``unit`` rows: measured and replayed job step, slowest rank, each
    part's share) and :func:`opportunities`. ``tables`` must hold ``breakdown``, ``idle``
    and the stragglers tables (:func:`traincast.analysis.analyze`, or their numpy columns:
    :func:`~traincast.predict.verdict_tables.verdict_tables`)."""
    import pandas as pd  # lazy: the terminal verdict reads the rows (verdict_rows)

    rows = verdict_rows(ts, tables, prediction, source)
    return {"verdict": pd.DataFrame(rows["verdict"], columns=VERDICT_COLUMNS),
            "opportunities": pd.DataFrame(rows["opportunities"], columns=OPPORTUNITY_COLUMNS)}


def verdict_rows(ts: TraceSet, tables: Mapping[str, Any], prediction: Replay,
                 source: str = "TRACE_DIR") -> dict[str, list[dict[str, Any]]]:
    """:func:`verdict` as rows (one dict per row, in order), without pandas: what
    :func:`traincast.report.verdict.render_verdict` prints."""
    with small_pages():  # many short-lived large arrays (traincast.util.allocator)
        out = _verdict(ts, tables, prediction, source)
    release_memory()  # the intermediates' pages, freed, back to the OS
    return out


def _slowest_rank(st: Columns) -> float:
    """The rank whose median measured step is the largest (the lowest on ties), NaN
    without rows: pandas' ``groupby("rank")["measured_ns"].median().idxmax()``."""
    rank = np.asarray(st["rank"])
    if not rank.size:
        return float("nan")
    ranks, inv = np.unique(rank, return_inverse=True)
    meas = np.asarray(st["measured_ns"], np.float64)
    order = np.lexsort((meas, inv))  # by rank, then value
    n = np.bincount(inv, minlength=ranks.size)
    first = np.concatenate([[0], np.cumsum(n)[:-1]])
    v = meas[order]
    med = (v[first + (n - 1) // 2] + v[first + n // 2]) / 2
    return float(ranks[int(np.argmax(med))])


def _verdict(ts: TraceSet, tables: Mapping[str, Any], prediction: Replay,
             source: str) -> dict[str, list[dict[str, Any]]]:
    it = prediction.step_columns
    rows = [("step (measured, slowest rank, median over iterations)",
             job_step_ns(it, "measured_ns") / 1e6, "ms"),
            ("step (replayed)", job_step_ns(it, "predicted_ns") / 1e6, "ms"),
            ("slowest rank", _slowest_rank(it), "rank")]
    parts_ = parts(tables)
    rows += [(f"{k} (share of the step)", 100 * v, "%") for k, v in parts_.items()]
    host = parts_.get(HOST_PART, 0.0)
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
    other = parts_.get(OTHER_PART, 0.0)
    if other >= HOST_SHARE:
        tail, n_ops = _tail_share(ts)
        where = (f"{100 * tail:.0f}% of the step comes after its last device op" if n_ops else
                 "the steps run no device op")
        rows.append((f"note: other idle is {100 * other:.0f}% of the step; {where}: the host "
                     "ran on without device work (e.g. while capturing CUDA graphs, which "
                     "records kernels without running them) or on work the trace does not "
                     "show", float("nan"), ""))
    return {"verdict": [dict(zip(VERDICT_COLUMNS, r, strict=True)) for r in rows],
            "opportunities": opportunity_rows(ts, tables, prediction, source)}
