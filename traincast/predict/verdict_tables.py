"""The analyses' tables the verdict reads (:mod:`traincast.predict.verdict`), as numpy
columns: the step's parts (breakdown and idle causes), the collectives' waiting, the job step.

A table is read either as a :class:`pandas.DataFrame` (what :func:`traincast.analysis.analyze`
returns) or as a dict of numpy arrays with the same column names, one value per row (what the
analyses' column functions return: :func:`~traincast.analysis.breakdown.breakdown_columns`,
:func:`~traincast.analysis.idle.idle_columns`, :func:`~traincast.analysis.stragglers.
straggler_summary`); both give the same figures. The terminal verdict of ``traincast analyze``
reads the columns (:func:`verdict_tables`) and so never imports pandas (~0.3 s of a command
that otherwise takes well under a second on a small job: ``docs/design/verdict_nopandas.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from traincast.analysis.breakdown import breakdown_columns
from traincast.analysis.idle import idle_columns
from traincast.analysis.stragglers import straggler_summary
from traincast.graph.grouped import pair_rows
from traincast.simulate.replay import Replay
from traincast.simulate.scaled import halved_times
from traincast.trace.traceset import TraceSet
from traincast.util.allocator import release_memory, small_pages

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["COMM_PART", "HOST_PART", "IDLE_CAUSES", "OTHER_PART", "PARTS", "PEER_PART",
           "Columns", "as_columns", "comm_wait_share", "job_step_ns", "parts", "row_count",
           "verdict_tables"]

#: a table as numpy columns: name -> one value per row (all of one length)
Columns = dict[str, np.ndarray]

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


def as_columns(table: pd.DataFrame | Mapping[str, Any] | None) -> Columns | None:
    """``table`` as numpy columns (a DataFrame's ``to_numpy()`` per column; a mapping's
    values as arrays); None stays None."""
    if table is None:
        return None
    if isinstance(table, Mapping):
        return {k: np.asarray(v) for k, v in table.items()}
    return {c: table[c].to_numpy() for c in table.columns}


def row_count(table: Columns | None) -> int:
    """Rows of a columns table (0 for None or no column)."""
    if not table:
        return 0
    return len(next(iter(table.values())))


def _left_rows(left: Columns, right: Columns) -> np.ndarray | None:
    """int64[rows of ``left``]: the row of ``right`` with the same (rank, iteration), -1
    where none (a left join); None when ``right`` holds a key twice (the caller then merges
    as pandas does, a row per match)."""
    rows, repeated = pair_rows((left["rank"], left["iteration"]),
                               (right["rank"], right["iteration"]))
    return None if repeated else rows


def _joined(bd: Columns, idle: Columns, cols: list[str]) -> dict[str, np.ndarray]:
    """``idle``'s ``cols`` on the rows of ``bd`` (by rank and iteration), float64, 0 where
    ``idle`` has no such row (pandas' left merge then ``fillna(0)``)."""
    rows = _left_rows(bd, idle)
    if rows is None:  # a key twice: pandas' merge gives a row per match
        return {}
    have = rows >= 0
    out = {}
    for c in cols:
        v = np.zeros(rows.size)
        v[have] = np.asarray(idle[c], np.float64)[rows[have]]
        out[c] = v
    return out


def _merged(bd: Columns, idle: Columns, cols: list[str]) -> tuple[Columns, dict]:
    """(``bd``, ``idle``'s ``cols`` on its rows) of the left merge on (rank, iteration) with
    missing values 0; by pandas when ``idle`` holds a key twice."""
    got = _joined(bd, idle, cols)
    if got or not cols:
        return bd, got
    import pandas as pd  # lazy: only for an idle table holding a (rank, iteration) twice

    m = pd.DataFrame(bd).merge(pd.DataFrame({c: idle[c] for c in ("rank", "iteration", *cols)}),
                               on=["rank", "iteration"], how="left").fillna(0)
    return ({c: m[c].to_numpy() for c in bd},
            {c: m[c].to_numpy(np.float64) for c in cols})


def parts(tables: Mapping[str, Any]) -> dict[str, float]:
    """Share of the step of each part (:data:`PARTS`), time-weighted over ranks and
    iterations: sum of the part over the windows / sum of the windows. The parts tile each
    window (breakdown: ``window = compute + exposed comm + memory + idle``), the idle split
    by cause in the proportions of the idle table (whose gaps may come from the replay's
    calibrated graph: its total is scaled to the breakdown's idle; an idle table without
    the window is ``other idle``), so the shares sum to 1.

    ``tables``: ``breakdown`` and ``idle`` (DataFrames or columns, module doc)."""
    bd = as_columns(tables.get("breakdown"))
    if bd is None or not row_count(bd):
        return {}
    idle = as_columns(tables.get("idle"))
    bd = {c: bd[c] for c in ("rank", "iteration", "window_ns", "compute_ns",
                             "comm_exposed_ns", "memory_ns", "idle_ns", "source") if c in bd}
    extra: dict[str, np.ndarray] = {}
    if idle is not None and row_count(idle):
        bd, extra = _merged(bd, idle, [c for c in (*IDLE_CAUSES, "comm_wait_ns") if c in idle])
    n = row_count(bd)
    for c in (*IDLE_CAUSES, "comm_wait_ns"):
        if c not in extra:
            extra[c] = np.zeros(n)
    causes = np.stack([extra[c] for c in IDLE_CAUSES], axis=1) if n else np.zeros((0, 5))
    tot = causes.sum(axis=1)
    idle_ns = np.asarray(bd["idle_ns"], np.float64)
    scale = np.divide(idle_ns, tot, out=np.zeros_like(tot), where=tot > 0)
    causes = causes * scale[:, None]
    causes[:, -1] += np.where(tot > 0, 0.0, idle_ns)  # no cause known: other
    cols = {c: np.asarray(bd[c], np.float64)
            for c in ("compute_ns", "comm_exposed_ns", "memory_ns")}
    cols.update({c: causes[:, i] for i, c in enumerate(IDLE_CAUSES)})
    # collectives waiting for their last member with no compute running: exposed
    # communication that is waiting for peers, not transfer
    wait = np.minimum(extra["comm_wait_ns"], cols["comm_exposed_ns"])
    cols["comm_exposed_ns"] = cols["comm_exposed_ns"] - wait
    cols["peer_wait_ns"] = cols["peer_wait_ns"] + wait
    w = float(np.asarray(bd["window_ns"]).sum())
    host_mpi = "source" in bd and bool((np.asarray(bd["source"], object) == "host").all())
    out: dict[str, float] = {}
    for name, col in PARTS:
        if col == "memory_ns" and host_mpi:  # host (MPI) ranks: library calls such as MPI_Init
            name = "library calls (MPI_Init...)"
        out[name] = float(cols[col].sum() / w) if w > 0 else 0.0
    return out


def comm_wait_share(tables: Mapping[str, Any]) -> float:
    """Share of the step (all ranks and iterations) collectives wait for their last member
    while no compute runs (idle table ``comm_wait_ns``, at most the exposed communication).

    ``tables``: ``breakdown`` and ``idle`` (DataFrames or columns, module doc)."""
    idle, bd = as_columns(tables.get("idle")), as_columns(tables.get("breakdown"))
    if idle is None or bd is None or not row_count(idle) or "comm_wait_ns" not in idle:
        return 0.0
    bd = {c: bd[c] for c in ("rank", "iteration", "window_ns", "comm_exposed_ns")}
    bd, extra = _merged(bd, idle, ["comm_wait_ns"])
    w = float(np.asarray(bd["window_ns"]).sum())
    wait = np.minimum(extra["comm_wait_ns"], np.asarray(bd["comm_exposed_ns"], np.float64)).sum()
    return float(wait / w) if w > 0 else 0.0


def job_step_ns(iterations: pd.DataFrame | Mapping[str, Any], column: str) -> float:
    """Median over iterations of the slowest rank's ``column`` (ns): the job's step.

    ``iterations``: one row per (rank, iteration), as :attr:`Replay.steps
    <traincast.simulate.replay.Replay.steps>` or its :attr:`~traincast.simulate.replay.
    Replay.step_columns`, :attr:`Prediction.iterations <traincast.predict.prediction.
    Prediction.iterations>` or the ``ranks[].iterations`` of ``traincast predict --format
    json``. A missing value (NaN) is skipped; NaN when there is no iteration."""
    cols = as_columns(iterations)
    assert cols is not None
    it = np.asarray(cols["iteration"])
    if not it.size:
        return float("nan")
    keys, inv = np.unique(it, return_inverse=True)
    per = np.full(keys.size, np.nan)
    np.fmax.at(per, inv, np.asarray(cols[column], np.float64))
    return float(np.median(per))


def verdict_tables(ts: TraceSet, prediction: Replay) -> dict[str, Columns]:
    """The tables the verdict reads, as numpy columns, without pandas: ``breakdown``
    (:func:`~traincast.analysis.breakdown.breakdown_columns`, per iteration), ``idle``
    (:func:`~traincast.analysis.idle.idle_columns`, with the replay's graph when it is the
    plain replay of ``ts``), ``stragglers_ranks`` and ``stragglers_imbalance``
    (:func:`~traincast.analysis.stragglers.straggler_summary`: the columns of the straggler
    report the verdict reads). Each equals the column of the same name of
    ``traincast.analyze(ts, VERDICT_ANALYSES, prediction=prediction)``; the analyses run as
    there (many short-lived large arrays in small pages, their pages given back after each,
    the replay's times held in half their pages during the stragglers' pass)."""
    with small_pages():
        out: dict[str, Columns] = {"breakdown": breakdown_columns(ts, per="iteration")}
        release_memory()
        same = prediction.measured is ts and prediction.plain
        out["idle"] = idle_columns(ts, graph=prediction.graph if same else None)
        release_memory()
        with halved_times(prediction.result.times):  # not read meanwhile
            summary = straggler_summary(ts)
        out["stragglers_ranks"] = summary["ranks"]
        out["stragglers_imbalance"] = summary["imbalance"]
        release_memory()
    return out
