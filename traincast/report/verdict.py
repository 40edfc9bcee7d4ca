"""The verdict on one screen (terminal) and in the JSON output: the step, where it goes, and
the simulated opportunities (:mod:`traincast.predict.verdict` computes them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console

from traincast.report.tables import plain
from traincast.report.wrap import wrap_command, wrap_prose

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["render_verdict", "verdict_to_json"]

#: joins a figure to its unit on one line (wrapping breaks at plain spaces only)
NBSP = "\u00a0"


def _rows(table: pd.DataFrame | list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """A table's rows as dicts: a DataFrame's records, or the rows as they are."""
    if table is None or isinstance(table, list):
        return table
    return table.to_dict("records")


def render_verdict(tables: Mapping[str, pd.DataFrame | list[dict[str, Any]]],
                   console: Console | None = None) -> None:
    """Print the ``verdict`` and ``opportunities`` tables (DataFrames, or their rows as
    :func:`traincast.predict.verdict.verdict_rows` gives them) as a short text: the step, its
    parts, then each opportunity as ``a -> b ms (-c%)`` with its evidence and the command
    that reproduces the number. Names are escaped (:func:`plain`). Prose is wrapped to the
    console's width at spaces (:func:`~traincast.report.wrap.wrap_prose`: a number is never
    cut) and the commands between arguments with ``\\`` continuations
    (:func:`~traincast.report.wrap.wrap_command`)."""
    console = console or Console()
    v, opp = _rows(tables.get("verdict")), _rows(tables.get("opportunities"))
    if v is None:
        return
    width = console.width

    def out(text: str, indent: str = "", first: str | None = None, **_: object) -> None:
        for line in wrap_prose(text, width, indent=indent, first=first):
            console.print(line.replace(NBSP, " "), highlight=False, markup=False,
                          soft_wrap=True)
    vals = {r["metric"]: r["value"] for r in v}
    step = vals.get("step (measured, slowest rank, median over iterations)")
    replay = vals.get("step (replayed)")
    slow = vals.get("slowest rank")
    out(f"step {step:.3f} ms (job step: the slowest rank's, median over iterations; "
        f"slowest rank {int(slow)}; replayed {replay:.3f} ms)", indent="  ", first="")
    parts = [(m.replace(" (share of the step)", ""), val) for m, val in vals.items()
             if m.endswith("(share of the step)")]
    if parts:
        shown = [p for p in sorted(parts, key=lambda p: -p[1]) if p[1] >= 0.05]
        rest = sum(val for _, val in parts) - sum(val for _, val in shown)
        out("where it goes (shares of the step, all ranks and iterations, summing to 100%): "
            + ", ".join(f"{name} {val:.1f}%" for name, val in shown)
            + (f", the rest {rest:.1f}%" if rest >= 0.05 else ""), indent="  ", first="")
    for m in vals:
        if m.startswith("note: "):
            out(plain(m), indent="  ", first="")
    if not opp:
        out("no opportunity found by the analyses", highlight=False, markup=False)
        return
    out("opportunities, simulated (best first):", highlight=False, markup=False)
    for i, r in enumerate(opp, 1):
        out(f"{plain(r['opportunity'])}: {r['replay_ns'] / 1e6:.3f}{NBSP}->{NBSP}"
            f"{r['predicted_ns'] / 1e6:.3f}{NBSP}ms{NBSP}({-r['gain_pct']:+.1f}%)",
            first=f"{i:>2}. ", indent="    ")
        out(plain(r["evidence"]), indent="    ")
        for line in wrap_command(plain(r["command"]), width, indent="    "):
            console.print(line, highlight=False, markup=False, soft_wrap=True)


def verdict_to_json(doc: dict[str, Any]) -> dict[str, Any]:
    """Fold the ``verdict`` and ``opportunities`` rows of a tables-as-JSON document into one
    ``verdict`` object: ``{"summary": [...], "opportunities": [...]}``."""
    if "verdict" in doc:
        doc["verdict"] = {"summary": doc.pop("verdict"),
                          "opportunities": doc.pop("opportunities", [])}
    return doc
