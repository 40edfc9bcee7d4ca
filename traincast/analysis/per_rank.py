"""Rank-local analyses with memory bounded by one rank's trace, in parallel or on Ray.

``breakdown`` (temporal breakdown per step and per rank) and ``kernels`` (op time per family
and the top op names) need nothing from other ranks: the first is computed per rank by
definition (HTA's temporal breakdown is per rank too), and the second's per-name statistics
(count, total, mean, p50/p90/p99) are exact over the concatenation of the ranks' op durations.
:func:`analyze_per_rank` therefore never holds more than one rank's TraceSet per worker:

1. the trace files are listed (:func:`traincast.trace.load.discover`);
2. each file is loaded on its own (``traincast.load(file)``, through the parse cache) and its
   tables are computed, in this process (``executor="serial"``: peak memory is one rank's
   trace plus the results), in local worker processes (``"process"``, the default for large
   jobs: one rank per worker at a time) or as Ray tasks (``"ray"``, locally or on a cluster
   given by ``address``), via :func:`traincast.util.executor.map_tasks`;
3. what comes back is small: the breakdown rows, the per-family rows, and for the top-names
   table each rank's device-op durations (8 bytes per op plus 12 bytes of codes) -- the
   durations are needed for exact cross-rank percentiles;
4. the per-rank tables are concatenated in rank order and the top-names table is computed
   from the merged durations, so every table equals the one ``traincast.analyze`` computes
   from the whole job loaded at once (a test checks it on real traces).

Analyses that follow dependencies across ranks (idle causes, collectives, critical path,
stragglers, the replay) need the whole job and are not available here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from traincast.analysis import split_names
from traincast.analysis.breakdown import temporal_breakdown
from traincast.analysis.kernels import _merge_ops, _ops, _top, op_breakdown
from traincast.errors import ParameterError, RankError
from traincast.trace import load as trace_load
from traincast.trace.load import choose_executor, discover, estimated_text_bytes, load
from traincast.util.executor import map_tasks

#: the analyses :func:`analyze_per_rank` runs (names of :data:`traincast.analysis.ANALYSES`)
RANK_LOCAL = ("breakdown", "kernels")


def per_rank_by_default(trace_dir: str | Path, what: str | None, possible: bool = True) -> bool:
    """Whether ``traincast analyze`` runs per rank when neither ``--per-rank`` nor
    ``--whole-job`` is given: when it gives the same tables (``what`` names only
    :data:`RANK_LOCAL` analyses; None or empty means all, so no), ``possible`` (nothing asked
    for needs the whole job) and the job is large enough for the memory bound to matter (more
    than one file and at least :data:`~traincast.trace.load.PARALLEL_MIN_BYTES` of text)."""
    names = split_names(what or "")
    if not possible or not names or any(n not in RANK_LOCAL for n in names):
        return False
    files, _ = discover(trace_dir)
    # the threshold is read when called (a module attribute, tunable)
    return len(files) > 1 and (sum(map(estimated_text_bytes, files))
                               >= trace_load.PARALLEL_MIN_BYTES)


@dataclass
class _RankTables:
    """What one worker sends back for one trace file."""

    path: str
    ranks: list[int]
    tables: dict[str, pd.DataFrame]
    ops: object | None  # traincast.analysis.kernels._Ops, for the top-names table


def _one_file(item: tuple[str, tuple[str, ...], str | None, dict[str, int] | None]
              ) -> _RankTables:
    """Load one trace file and compute its rank-local tables (runs in a worker)."""
    path, what, marker, rank_map = item
    ts = load(path, iteration_marker=marker, rank_map=rank_map, executor="serial")
    tables: dict[str, pd.DataFrame] = {}
    ops = None
    if "breakdown" in what:
        tables["breakdown"] = temporal_breakdown(ts, per="iteration")
        tables["breakdown_by_rank"] = temporal_breakdown(ts, per="rank")
    if "kernels" in what:
        tables["op_breakdown"] = op_breakdown(ts)
        ops = _ops(ts)
    return _RankTables(path, sorted(ts.rank_ids), tables, ops)


def analyze_per_rank(path: str | Path | Iterable[str | Path],
                     what: Sequence[str] | str | None = None, *,
                     executor: str | None = None, workers: int | None = None,
                     address: str | None = None, iteration_marker: str | None = None,
                     rank_map: Mapping[str, int] | None = None, top_n: int = 20,
                     progress: Callable[[int, int], None] | None = None
                     ) -> dict[str, pd.DataFrame]:
    """Rank-local analyses of a run, one trace file at a time (see the module docstring).

    Args:
        path: a folder of trace files (one or more ranks each), a file, or a list of files.
        what: names from :data:`RANK_LOCAL` (comma-separated string or list; default: all).
        executor: ``"serial"``, ``"process"`` or ``"ray"`` (:func:`traincast.util.executor.
            map_tasks`); each task loads and analyses one file. Default: the local process
            pool for at least two files holding more than 256 MiB of trace text, else
            serial (:func:`traincast.trace.load.choose_executor`).
        workers: worker processes (or local Ray CPUs); default: the CPU count.
        address: Ray cluster address (``"ray"`` only; default: a local Ray instance).
        iteration_marker, rank_map: as for :func:`traincast.load`.
        top_n: rows of the ``top_kernels`` table.
        progress: ``progress(done, total)`` as files complete.

    Returns:
        The tables of ``traincast.analyze(traincast.load(path), what)`` for these analyses:
        ``breakdown``, ``breakdown_by_rank``, ``op_breakdown``, ``top_kernels``.

    Raises:
        ParameterError: an analysis that is not rank-local was asked for.
        RankError: two files hold the same rank.
        EmptyTraceDirError, TraceFormatError: as for :func:`traincast.load`.
        ExecutorError: the executor cannot run (unknown name, Ray missing, bad address).
    """
    names = _names(what)
    files, _ets = discover(path)
    executor = choose_executor(executor, files, workers)
    items = [(str(f), names, iteration_marker, dict(rank_map) if rank_map else None)
             for f in files]
    results: list[_RankTables] = map_tasks(
        _one_file, items, executor=executor, workers=workers, address=address, chunksize=1,
        progress=progress)
    seen: dict[int, str] = {}
    for res in results:
        for r in res.ranks:
            if r in seen:
                raise RankError(f"rank {r} appears twice (also in {Path(seen[r]).name})",
                                Path(res.path))
            seen[r] = res.path
    # rank order (a file's ranks are already in order within its tables)
    results.sort(key=lambda res: min(res.ranks, default=-1))
    out: dict[str, pd.DataFrame] = {}
    for key in ("breakdown", "breakdown_by_rank", "op_breakdown"):
        parts = [res.tables[key] for res in results if key in res.tables]
        if parts:
            out[key] = pd.concat(parts, ignore_index=True)
    if "kernels" in names:
        out["top_kernels"] = _top(_merge_ops([res.ops for res in results]), top_n, "total")
    return out


def _names(what: Sequence[str] | str | None) -> tuple[str, ...]:
    if what is None:
        return RANK_LOCAL
    names = split_names(what)
    other = [w for w in names if w not in RANK_LOCAL]
    if other or not names:
        raise ParameterError(
            f"per-rank analysis runs only the rank-local analyses ({', '.join(RANK_LOCAL)}); "
            f"not {', '.join(other) or 'nothing'}: the others follow dependencies across "
            "ranks and need the whole job loaded")
    return tuple(dict.fromkeys(names))


__all__ = ["RANK_LOCAL", "analyze_per_rank"]
