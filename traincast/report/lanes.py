"""What the report's charts draw when a table is too big to draw whole: representative ranks
and the longest events, each choice with the note the report shows beside the chart.

Display only: the analyses' tables are never changed (every row stays in ``--format json``);
these functions pick which rows a chart draws.

- :func:`pick_ranks`: up to ``limit`` ranks out of many, by a per-rank score (larger = slower):
  the ranks that must be shown (e.g. those the critical path visits), then the slowest, the
  median and the fastest, then the next slowest until ``limit``; each with its role.
- :func:`longest`: the ``limit`` longest rows (events, segments) of a table.
- :func:`sampled_note`: the sentence saying what was left out and where the full data is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

#: ranks drawn one by one in a per-rank chart; more ranks are represented by :func:`pick_ranks`
MAX_RANKS = 32
#: ranks drawn in a Gantt chart (lanes per rank and stream)
GANTT_RANKS = 8
#: events (bars) drawn in one Gantt chart at most (the longest when there are more)
MAX_GANTT_EVENTS = 10_000
#: points drawn in a scatter of per-rank flags at most (the highest scores)
MAX_FLAGS = 500


def pick_ranks(score: pd.Series, limit: int, keep: Iterable[Any] = (),
               keep_role: str = "critical path",
               words: tuple[str, str] = ("slowest", "fastest")
               ) -> tuple[list[Any], dict[Any, str]]:
    """Representative ranks of a per-rank score.

    Args:
        score: indexed by rank, larger = slower (NaN counts as the fastest).
        limit: ranks to return at most (all of them when there are no more than ``limit``).
        keep: ranks always returned first (in this order, at most ``limit``), with role
            ``keep_role``.
        words: the roles of the largest and of the smallest score.

    Returns:
        (the chosen ranks in rank order, {rank: role} for every chosen rank in the order
        chosen: ``keep_role``, ``slowest`` (the slowest first), ``median``, ``fastest`` (with
        ``words``); empty when every rank is returned).
    """
    ranks = list(score.index)
    if len(ranks) <= limit:
        return _sorted(ranks), {}
    order = list(score.fillna(float("-inf")).sort_values(ascending=False, kind="stable").index)
    roles: dict[Any, str] = {}
    for r in keep:
        if r in score.index and r not in roles and len(roles) < limit:
            roles[r] = keep_role
    top, bottom = words
    want = [(order[0], top), (order[len(order) // 2], "median"), (order[-1], bottom)]
    want += [(r, top) for r in order[1:]]
    for r, role in want:
        if len(roles) >= limit:
            break
        if r not in roles:
            roles[r] = role
    return _sorted(list(roles)), roles


def _sorted(ranks: list[Any]) -> list[Any]:
    try:
        return sorted(ranks)
    except TypeError:
        return ranks


def longest(df: pd.DataFrame, dur: str, limit: int) -> pd.DataFrame:
    """The ``limit`` rows of ``df`` with the largest ``dur`` (all rows when no more)."""
    return df if len(df) <= limit else df.nlargest(limit, dur)


def ranks_note(shown: int, total: int, roles: dict[Any, str], by: str) -> str:
    """``showing 8 of 1,024 ranks by busy time: r3, r9 (slowest first); r7 (median); r0
    (fastest)`` ('' when all are shown)."""
    if shown >= total:
        return ""
    groups: dict[str, list[str]] = {}
    for r, role in roles.items():
        groups.setdefault(role, []).append(f"r{r}")
    who = "; ".join(f"{', '.join(rs)} ({role}{' first' if len(rs) > 1 else ''})"
                    for role, rs in groups.items())
    return f"showing {shown:,} of {total:,} ranks by {by}: {who}"


def sampled_note(parts: list[str], full: str) -> str:
    """One sentence of what a chart left out (``parts``, empty ones skipped) and where the
    full data is (``full``); '' when nothing was left out."""
    parts = [p for p in parts if p]
    if not parts:
        return ""
    return "; ".join(parts) + f". Full data: {full}."
