"""Tolerant decoding of trace events whose fields have surprising types.

Newer Kineto and ROCm builds write some numbers as strings (``"bytes": "1048576"``), some
ids as floats, and now and then a list or ``null`` where a scalar is expected. The typed
decode (:mod:`traincast.trace.readers.kineto`) is strict and fast; when it rejects a chunk of
events for a *type* (not for broken JSON), that chunk is decoded again here, event by
event, with unambiguous values coerced and the rest dropped, every change counted:

* a number written as a string (``"12"``, ``"0x1f"``, ``"3.0"``) -> the number;
* an integral float where an int is expected (``3.0``) -> ``3``;
* a number where a string is expected -> its decimal text;
* a one-element list where a scalar is expected -> its element (coerced as above);
* anything else (``null``, ``NaN``, a longer list, an object, text that is no number) ->
  the field is dropped and takes its default, or, for the fields that place the event on
  the timeline (``ph``, ``ts``, ``dur``), the event is dropped (a non-finite ``ts``/``dur``
  is dropped, and counted, when the reader builds its columns).

The counts (:class:`DecodeStats`) travel with the file's tables into the TraceSet
(``RankInfo.decode_stats``), the loader's warnings and the JSON output's notes: nothing is
lost silently. Syntax errors are not handled here: broken JSON is corrupt input.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

#: fields that place an event on the timeline: an unusable value drops the event
TIMELINE_FIELDS = frozenset({"ph", "ts", "dur"})

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_EXPECTED = re.compile(r"Expected `(?P<exp>[^`]+)`")


@dataclass
class DecodeStats:
    """What tolerant decoding changed in one file.

    Attributes:
        coerced: field path (``args.bytes``) -> values coerced to the expected type.
        dropped_fields: field path -> values dropped (the field took its default).
        dropped_events: reason (a field path, or ``not an event``) -> events dropped.
    """

    coerced: Counter[str] = field(default_factory=Counter)
    dropped_fields: Counter[str] = field(default_factory=Counter)
    dropped_events: Counter[str] = field(default_factory=Counter)

    def __bool__(self) -> bool:
        return bool(self.coerced or self.dropped_fields or self.dropped_events)

    def to_dict(self) -> dict[str, dict[str, int]]:
        """JSON-ready counts: ``{"coerced": {...}, "dropped_fields": {...},
        "dropped_events": {...}}`` (empty groups left out)."""
        out = {k: dict(sorted(v.items())) for k, v in (
            ("coerced", self.coerced), ("dropped_fields", self.dropped_fields),
            ("dropped_events", self.dropped_events)) if v}
        return out


def summary_line(counts: dict[str, dict[str, int]], *, verbose: bool = False) -> str:
    """One line: ``N values coerced, M fields dropped, K events dropped``; with ``verbose``
    each group lists its fields (``args.bytes x3``)."""
    parts = []
    for key, label in (("coerced", "values coerced"), ("dropped_fields", "fields dropped"),
                       ("dropped_events", "events dropped")):
        group = counts.get(key) or {}
        total = sum(group.values())
        if not total:
            continue
        text = f"{total} {label}"
        if verbose:
            text += " (" + ", ".join(f"{k} x{v}" for k, v in sorted(group.items())) + ")"
        parts.append(text)
    return ", ".join(parts)


def decode_tolerant(chunk: bytes, event_type: Any, stats: DecodeStats,
                    raw_fields: dict[str, str]) -> list[Any]:
    """Decode a JSON array of events into ``event_type`` structs, coercing or dropping the
    values of the wrong type (see the module docstring).

    ``raw_fields`` maps the JSON key of each ``args`` field kept as :class:`msgspec.Raw`
    to its attribute name. Raises :class:`msgspec.DecodeError` when ``chunk`` is not JSON.
    """
    items = msgspec.json.decode(chunk)
    if not isinstance(items, list):
        raise msgspec.DecodeError("traceEvents chunk is not a JSON array")
    out = []
    for item in items:
        ev = _one(item, event_type, stats, raw_fields)
        if ev is not None:
            out.append(ev)
    return out


def _one(item: Any, event_type: Any, stats: DecodeStats, raw_fields: dict[str, str]) -> Any:
    if not isinstance(item, dict):
        stats.dropped_events["not an event"] += 1
        return None
    ev = dict(item)
    args = ev.get("args")
    raw: dict[str, bytes] = {}
    if isinstance(args, dict):
        args = dict(args)
        for key in raw_fields:
            if key in args:
                raw[raw_fields[key]] = msgspec.json.encode(args.pop(key))
        ev["args"] = args
    for _ in range(64):  # each round fixes one field; real events need one or two
        try:
            obj = msgspec.convert(ev, event_type)  # strict: every coercion is ours, counted
            break
        except msgspec.ValidationError as exc:
            if not _fix(ev, str(exc), stats):
                return None
    else:
        stats.dropped_events["too many bad fields"] += 1
        return None
    if raw and hasattr(obj, "args"):
        obj.args = msgspec.structs.replace(
            obj.args, **{k: msgspec.Raw(v) for k, v in raw.items()})
    return obj


def _fix(ev: dict[str, Any], message: str, stats: DecodeStats) -> bool:
    """Coerce or drop the value ``message`` (a msgspec ValidationError) points at; False
    when the event itself is dropped."""
    m = _AT.match(message)
    path = (m.group("path") or "") if m else ""
    keys = [k for k in path.split(".") if k] if path.startswith(".") else []
    if not keys:  # the event itself (not an object, unknown or missing ph...)
        reason = "ph" if "ph" in message or "tag" in message.lower() else "not an event"
        stats.dropped_events[reason] += 1
        return False
    container: Any = ev
    for k in keys[:-1]:
        container = container.get(k) if isinstance(container, dict) else None
    key = keys[-1]
    name = ".".join(keys)
    if not isinstance(container, dict) or key not in container:
        stats.dropped_events[name or "not an event"] += 1
        return False
    exp = _EXPECTED.search(message)
    fixed, ok = _coerce(container[key], exp.group("exp") if exp else "")
    if ok:
        container[key] = fixed
        stats.coerced[name] += 1
        return True
    if len(keys) == 1 and key in TIMELINE_FIELDS:
        stats.dropped_events[name] += 1
        return False
    del container[key]
    stats.dropped_fields[name] += 1
    return True


def _coerce(value: Any, expected: str) -> tuple[Any, bool]:
    """(the value as ``expected``, True) when unambiguous, else (None, False)."""
    if isinstance(value, list) and len(value) == 1:
        return _coerce(value[0], expected)
    if isinstance(value, bool) or value is None:
        return None, False
    wants = {w.strip() for w in expected.split("|")}
    if "int" in wants:
        n = _as_number(value)
        if isinstance(n, int):
            return n, True
        if isinstance(n, float) and math.isfinite(n) and n == int(n) and abs(n) < 2**63:
            return int(n), True
    if "float" in wants:
        n = _as_number(value)
        if n is not None and math.isfinite(n):
            return float(n), True
    if "str" in wants and isinstance(value, (int, float)) and math.isfinite(value):
        return (str(int(value)) if float(value).is_integer() else repr(float(value))), True
    return None, False


def _as_number(value: Any) -> int | float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 0)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None
