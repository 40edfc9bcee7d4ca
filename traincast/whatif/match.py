"""Matching events by name, kind or op family through the column's dictionary.

``name``, ``kind`` and ``op_family`` of ``TraceSet.events`` are dictionary columns
(:data:`traincast.trace.schema.EVENTS_SCHEMA`): a few thousand distinct names over millions of
events. A test on the values (a regex, a set of kinds) is therefore evaluated once per
distinct value and spread to the events by their codes, never once per event.

:func:`event_values` gives the codes (one per event, of the column's index type: int8 to
int32; a view of the Arrow indices when the column is one chunk) and the dictionary of a
column, memoised on the TraceSet (``TraceSet.memo``, keyed by the events table's
identity); :meth:`EventValues.mask` the events whose value passes a test. The result
equals testing every event's value one by one (values are compared as the Python strings
of the dictionary). Both pass over the codes :data:`CHUNK` events at a time: the int64
copy of the codes that a gather or a count makes is one chunk's, never the whole job's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet

__all__ = ["CHUNK", "EventValues", "event_values", "spread"]

#: events per chunk of the passes over all events' codes (a chunk's temporaries: ~2 MiB)
CHUNK = 1 << 18


def spread(table: np.ndarray, codes: np.ndarray, out: np.ndarray | None = None
           ) -> np.ndarray:
    """``table[codes]`` (codes: integer indices into ``table``), gathered :data:`CHUNK`
    codes at a time into ``out`` (a new array of ``table``'s dtype when None): numpy casts
    int32 indices to int64, here one chunk's at a time."""
    if out is None:
        out = np.empty(codes.size, table.dtype)
    for a in range(0, codes.size, CHUNK):
        np.take(table, codes[a:a + CHUNK], out=out[a:a + CHUNK])
    return out


@dataclass(frozen=True)
class EventValues:
    """One dictionary column of ``TraceSet.events``.

    Attributes:
        codes: int32[n_events], index of each event's value in ``values`` (read-only).
        values: the dictionary (may hold values no event has, or a value twice).
        used: bool[len(values)], True where some event has the value.
    """

    codes: np.ndarray
    values: list[str]
    used: np.ndarray

    def mask(self, test: Callable[[str], bool]) -> np.ndarray:
        """bool[n_events]: the events whose value passes ``test`` (called once per value)."""
        ok = np.fromiter((bool(test(v)) for v in self.values), bool, len(self.values))
        return spread(ok, self.codes) if ok.size else np.zeros(self.codes.size, bool)

    def isin(self, wanted: Iterable[str]) -> np.ndarray:
        """bool[n_events]: the events whose value is one of ``wanted``."""
        want = set(wanted)
        return self.mask(want.__contains__)

    def equals(self, value: str) -> np.ndarray:
        """bool[n_events]: the events whose value is ``value``."""
        return self.mask(value.__eq__)

    def present(self) -> list[str]:
        """The distinct values some event has, in dictionary order."""
        return list(dict.fromkeys(v for v, u in zip(self.values, self.used.tolist(),
                                                    strict=True) if u))

    def of(self, rows: np.ndarray) -> list[str]:
        """The values of the events ``rows`` (int array), in order."""
        return [self.values[c] for c in self.codes[np.asarray(rows, np.int64)].tolist()]


def event_values(ts: TraceSet, column: str) -> EventValues:
    """The codes and dictionary of the dictionary column ``column`` of ``ts.events``
    (``name``, ``kind``, ``op_family``), memoised on ``ts`` while ``ts.events`` is the same
    table."""
    key = f"event_values:{column}"
    hit = ts.memo.get(key)
    if hit is not None and hit[0] is ts.events:
        return hit[1]
    codes, values = A.dictionary_parts(ts.events.column(column))
    codes = codes[:ts.events.num_rows]
    codes.flags.writeable = False
    used = np.zeros(len(values), bool)
    for a in range(0, codes.size, CHUNK):  # (bincount casts its input to int64: by chunk)
        used |= np.bincount(codes[a:a + CHUNK], minlength=len(values))[:len(values)] > 0
    out = EventValues(codes, values, used)
    ts.memo[key] = (ts.events, out)
    return out
