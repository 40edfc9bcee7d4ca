"""Speedups: the time multiplier of each event under ``speedup=TARGET=X`` changes.

A speedup divides the time of the events it matches by ``X`` (a kind or op family, a name
regex, optionally one rank: :class:`traincast.whatif.spec.Speedup`); several multiply.
:func:`speedup_factors` gives the factor per event, :func:`speedup_codes` the same factors
as one code per event (which speedups match it) and a table of their products, for callers
that keep several what-ifs' factors at once. A regex matching nothing is refused with the
closest event names (:func:`closest_names`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

import numpy as np

from traincast.errors import ParameterError
from traincast.trace.traceset import TraceSet
from traincast.whatif.match import event_values
from traincast.whatif.spec import WhatIf

__all__ = ["MAX_CODED_SPEEDUPS", "closest_names", "speedup_codes", "speedup_factors"]


def speedup_factors(ts: TraceSet, what: WhatIf, notes: list[str] | None = None
                    ) -> np.ndarray:
    """float[n_events]: time multipliers of the ``speedup`` changes.

    A speedup that matches no event is refused (:class:`ParameterError` naming the target
    and, for a regex, the closest event names, :func:`closest_names`), except a ``family:``
    or ``kind:`` target when another change of ``what`` does act: it is then named in
    ``notes`` (a ``kind:runtime`` of a host-speed what-if on a CPU-only trace).
    """
    f = np.ones(ts.events.num_rows)
    for hit, factor in _speedup_hits(ts, what, notes):
        np.divide(f, factor, out=f, where=hit)  # f[hit] /= factor, without a gather
        del hit  # before the next mask
    return f


#: the most speedups :func:`speedup_codes` encodes (one bit each)
MAX_CODED_SPEEDUPS = 8


def speedup_codes(ts: TraceSet, what: WhatIf, out: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`speedup_factors` as (uint8[n_events] codes, float64[256] table): each event's
    factor is ``table[code]`` (bit ``i`` of the code: the ``i``-th speedup matches it; the
    table divides 1.0 by the matching speedups' factors in order, as
    :func:`speedup_factors` does, so the values are the same floats), 1.0 for code 0.
    None when ``what`` has more than :data:`MAX_CODED_SPEEDUPS` speedups. ``out``:
    uint8[n_events] (a column of a wider array may do) the codes are written into (and
    returned) instead of a new array.

    Raises:
        ParameterError: as :func:`speedup_factors`.
    """
    if len(what.speedups) > MAX_CODED_SPEEDUPS:
        return None
    if out is None:
        codes = np.zeros(ts.events.num_rows, np.uint8)
    else:
        codes = out
        codes.fill(0)
    factors = []
    for hit, factor in _speedup_hits(ts, what):
        np.bitwise_or(codes, np.uint8(1 << len(factors)), out=codes, where=hit)
        factors.append(factor)
        del hit  # before the next mask
    table = np.ones(256)
    for c in range(1, 1 << len(factors)):
        v = 1.0
        for i, factor in enumerate(factors):
            if c >> i & 1:
                v = v / factor
        table[c] = v
    return codes, table


def _speedup_hits(ts: TraceSet, what: WhatIf, notes: list[str] | None = None
                  ) -> Iterator[tuple[np.ndarray, float]]:
    """(bool[n_events] events matched, factor) of each speedup of ``what``, in order
    (:func:`speedup_factors` divides the events' factors by each in turn), one at a time
    (a caller done with a mask drops it before the next is made); the refusals of
    :func:`speedup_factors` are raised as the speedups are met, and those of speedups that
    match nothing once all were given."""
    if not what.speedups:
        return
    # each test runs once per distinct name / kind / family, spread to the events by code
    fams = event_values(ts, "op_family")
    ranks = ts.column("rank") if any(sp.rank is not None for sp in what.speedups) else None
    missed: list[str] = []
    for sp in what.speedups:
        if sp.rank is not None and sp.rank not in ts.ranks:
            raise ParameterError(f"--what-if speedup: rank {sp.rank} is not in the traces "
                                 f"(ranks {', '.join(map(str, ts.rank_ids))})")
        if sp.kinds:
            hit = event_values(ts, "kind").isin(sp.kinds)
            if "kernel" in sp.kinds:  # collectives' kernels are communication, not compute
                hit &= fams.mask(lambda v: v != "comm")  # one mask, not two
        elif sp.family is not None:
            hit = fams.equals(sp.family)
        else:
            hit = event_values(ts, "name").mask(
                lambda n, p=sp.pattern: p.search(n))  # type: ignore[union-attr]
        if sp.rank is not None:
            hit = hit & (ranks == sp.rank)
        if not hit.any():
            if sp.pattern is not None:
                near = closest_names(sp.pattern.pattern, event_values(ts, "name").present())
                where = f" of rank {sp.rank}" if sp.rank is not None else ""
                raise ParameterError(
                    f"--what-if speedup {sp.describe()}: the regex matches no event{where} "
                    f"of the traces (closest names: "
                    f"{'; '.join(near) if near else 'none'})")
            missed.append(sp.describe())
        yield hit, sp.factor
        del hit
    if missed:
        present = sorted((event_values(ts, "kind") if any(
            sp.kinds for sp in what.speedups) else fams).present())
        what_txt = "event kinds" if any(sp.kinds for sp in what.speedups) else "op families"
        msg = (f"--what-if speedup {', '.join(missed)}: matches no event of the traces "
               f"({what_txt} present: {', '.join(map(str, present))})")
        if len(missed) == len(what.speedups) and not _other_changes(what):
            raise ParameterError(msg)
        if notes is not None:
            notes.append(msg[len("--what-if "):] + ": it changes nothing")


def _other_changes(what: WhatIf) -> bool:
    """True when ``what`` changes something besides its speedups."""
    return bool(what.batch_size or what.gpu or what.world_size or what.inter_node_gbps
                or what.intra_node_gbps or what.overlap or what.comm_algorithm)


def closest_names(pattern: str, names: list[str], n: int = 5) -> list[str]:
    """Up to ``n`` distinct event names closest to a regex ``pattern`` (difflib ratio of the
    pattern, its metacharacters removed, against each name and against the name's prefix of
    the same length), best first; names longer than 60 characters are cut with ``...``."""
    lit = re.sub(r"[.*+?^$()\[\]{}|\\]", "", pattern) or pattern
    scored: list[tuple[float, str]] = []
    m = difflib.SequenceMatcher(autojunk=False)
    m.set_seq2(lit)
    for name in names:
        best = 0.0
        for cand in (name, name[:len(lit)]):
            m.set_seq1(cand)
            if m.real_quick_ratio() > best and m.quick_ratio() > best:
                best = max(best, m.ratio())
        scored.append((best, name))
    scored.sort(key=lambda x: (-x[0], x[1]))
    out = [nm if len(nm) <= 60 else nm[:57] + "..." for sc, nm in scored[:n] if sc >= 0.4]
    return out
