"""Training iterations (steps) of one rank's events.

A step is delimited by ``ProfilerStep#N`` (the annotation ``torch.profiler.profile.step()``
records), else by a user-given annotation name or regular expression, else the whole file is
one iteration. Host events take the step whose interval holds their start; GPU events take
the step of the runtime call that launched them (by correlation id), else their start time.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from traincast.errors import IterationError
from traincast.util.user_regex import UserRegexError, compile_user_regex

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")

#: the largest step number: the ``iteration`` column is int32, -1 meaning "outside every step"
MAX_STEP = 2**31 - 1


@functools.lru_cache(maxsize=1 << 16)
def _is_profiler_step(name: str) -> bool:
    """Whether ``name`` is a ``ProfilerStep#N`` marker; memoised across ranks (each rank
    repeats the same names)."""
    return PROFILER_STEP.search(name) is not None


@dataclass
class Steps:
    """Measured steps of one rank: parallel int64 arrays, sorted by start (ns)."""

    number: np.ndarray
    start: np.ndarray
    end: np.ndarray
    marker_rows: np.ndarray  # rank-local row of the marker event, -1 if synthetic
    synthetic: bool = False


@functools.lru_cache(maxsize=64)
def _matching(marker: str | None, rx: Any, names: tuple[str, ...]) -> np.ndarray:
    """Whether each name is a step marker (bool, at least one long, read-only): ``rx`` (the
    compiled ``marker``), or :func:`_is_profiler_step` without a marker; memoised per
    (marker, dictionary): the ranks of a job share theirs."""
    test = _is_profiler_step if marker is None else (lambda n: bool(rx.search(n)))
    out = np.array([test(n) for n in names] or [False], bool)
    out.flags.writeable = False
    return out


def find_steps(
    names: np.ndarray,
    name_dict: list[str],
    kind_codes: np.ndarray,
    host: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    *,
    annotation_code: int,
    marker: str | None = None,
    source: str = "",
) -> Steps:
    """Locate the steps of one rank.

    Args:
        names: per-event int32 codes into ``name_dict``.
        kind_codes: per-event kind codes; markers must be host annotations or cpu ops.
        host: per-event bool, True for host events.
        ts, dur: per-event start and duration, ns.
        annotation_code: code of the ``annotation`` kind.
        marker: exact name or regular expression of the step annotation; None means
            ``ProfilerStep#N``. A first capture group, if any, gives the step number.

    Raises:
        IterationError: ``marker`` is not a valid regular expression, or matches nothing; a
            step number is beyond :data:`MAX_STEP`.
    """
    if marker is None:
        rx = PROFILER_STEP
    else:
        try:
            rx = compile_user_regex(marker if any(c in marker for c in "^$.*+?[](){}|\\") else
                                    "^" + re.escape(marker) + "$", "--iteration-marker")
        except UserRegexError as exc:
            raise IterationError(str(exc), source) from None
    matching = _matching(marker, rx, tuple(name_dict))
    sel = np.flatnonzero(matching[names] & host) if names.size else np.empty(0, np.int64)
    if marker is None:
        sel = sel[kind_codes[sel] == annotation_code]
    if sel.size == 0:
        if marker is not None:
            raise IterationError(f"iteration marker {marker!r} matches no host event", source)
        return Steps(np.zeros(1, np.int64), np.array([ts.min() if ts.size else 0]),
                     np.array([(ts + dur).max() if ts.size else 0]),
                     np.full(1, -1, np.int64), synthetic=True)
    sel = sel[np.argsort(ts[sel], kind="stable")]
    numbers = []
    for k, row in enumerate(sel.tolist()):
        m = rx.search(name_dict[names[row]])
        grp = m.group(1) if m and m.groups() else None
        number = int(grp) if grp is not None and grp.isdigit() else k
        if number > MAX_STEP:
            raise IterationError(f"step number {grp[:40]}{'...' if len(grp) > 40 else ''} is "
                                 f"beyond {MAX_STEP}", source)
        numbers.append(number)
    return Steps(np.asarray(numbers, np.int64), ts[sel].astype(np.int64),
                 (ts[sel] + dur[sel]).astype(np.int64), sel.astype(np.int64))


def assign_iterations(
    steps: Steps,
    ts: np.ndarray,
    host: np.ndarray,
    correlation: np.ndarray,
    is_runtime: np.ndarray,
) -> np.ndarray:
    """Iteration number of each event (-1 outside every step), as an int32 array."""
    it = np.full(ts.size, -1, np.int32)
    if steps.synthetic:
        it[:] = int(steps.number[0])
        return it
    k = np.searchsorted(steps.start, ts, "right") - 1
    ok = (k >= 0) & (ts < steps.end[np.clip(k, 0, None)])
    it[ok] = steps.number[k[ok]]
    # GPU events inherit the step of their launching runtime call
    rt = np.flatnonzero(is_runtime & (correlation >= 0))
    gpu = np.flatnonzero(~host & (correlation >= 0))
    if rt.size and gpu.size:
        order = rt[np.argsort(correlation[rt], kind="stable")]
        keys = correlation[order]
        pos = np.searchsorted(keys, correlation[gpu])
        pos_c = np.clip(pos, 0, keys.size - 1)
        hit = keys[pos_c] == correlation[gpu]
        it[gpu[hit]] = it[order[pos_c[hit]]]
    return it
