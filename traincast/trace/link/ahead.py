"""ET links found before the assembly, by the processes that parse a small job's files.

A first load of a job with execution traces links each rank's ET to its events in the
assembly (:func:`~traincast.trace.link.pair.attach_execution_traces`), after the files are
parsed, in the loading process alone. The processes that parse them (the load and its read-ahead child,
:mod:`traincast.trace.prefetch`) each hold the profiler traces they parsed; once the queue of
files is empty, :func:`link_ahead` links those, each in its own process, and stores the links
where the assembly's :func:`~traincast.trace.link.cache_link.link_cached` finds them.

The stored link is the one the assembly would find: the link of an ET and a rank reads only
that rank's events (:mod:`~traincast.trace.link.cache_link`), and a parsed file's events are
the rank's events in the assembled job, row for row, with the same values in the columns the
link reads (the assembly adds the ``rank`` and ``iteration`` columns and narrows the id
columns' types) -- except where gloo ranges become collectives (their ``kind`` changes:
:func:`~traincast.trace.rank_part.rank_part`), so a file with gloo calls is left to the
assembly. The rank is the one the file records, the ET the one whose name holds that rank
(:func:`~traincast.trace.link.pair.pair_files`' rule). The entry's key names the two files
and the rank: where the load assigns ranks otherwise (``--rank-map``), the entry is only
not found. A link refused by the match score stores nothing; the assembly links that rank
again and raises. Nothing here raises.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from traincast.trace import arrow as A
from traincast.trace.cache import TraceCache
from traincast.trace.cache_et import cached_et
from traincast.trace.collectives import _call_parts
from traincast.trace.link.cache_link import link_cached
from traincast.trace.link.pair import _RANK
from traincast.trace.readers.base import TraceFile
from traincast.trace.readers.et import ExecutionTrace

__all__ = ["link_ahead"]

log = logging.getLogger(__name__)


def et_of_rank(rank: int, ets: Sequence[Path]) -> Path | None:
    """The one ET among ``ets`` whose name holds rank ``rank`` (``rank-N``, ``worker_N``),
    else None (none, or several)."""
    found = [f for f in ets if (m := _RANK.search(f.name)) and int(m.group(1)) == rank]
    return found[0] if len(found) == 1 else None


def _has_gloo_calls(record: TraceFile) -> bool:
    """Whether any event of ``record`` is named as a gloo collective call (``gloo:...``)."""
    _, names = A.shared_dictionary_parts(record.events.column("name"))
    return any((parts := _call_parts(name)) is not None and parts[0] == "gloo"
               for name in names if name)


def link_ahead(record: TraceFile, kineto_path: Path, ets: Sequence[Path], store: TraceCache,
               known: Mapping[Path, ExecutionTrace] | None = None) -> bool:
    """Link ``record`` (the profiler trace ``kineto_path``, as parsed) to the ET of the rank
    it records and store the link in ``store`` (module docstring); True when stored or
    found there. The ET is taken from ``known`` (read by this process) or from its entry in
    ``store``; a file is never read here."""
    try:
        rank = record.distributed_info.get("rank")
        if type(rank) is not int or rank < 0:
            return False
        et_path = et_of_rank(rank, ets)
        if et_path is None:
            return False
        et = (known or {}).get(et_path) or cached_et(et_path, store)
        if et is None or _has_gloo_calls(record):
            return False
        link_cached(et, record.events, et_path, kineto_path, rank, store)
        return True
    except Exception:  # noqa: BLE001 - the assembly links it again and says what is wrong
        log.debug("traincast: %s not linked ahead", kineto_path, exc_info=True)
        return False
