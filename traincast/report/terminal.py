"""Terminal rendering (rich) of predictions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from traincast.report.tables import fit_columns

if TYPE_CHECKING:  # pragma: no cover
    from traincast.predict.prediction import Prediction


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.2f}"


def _signed(ns: int) -> str:
    return f"{ns / 1e6:+,.2f}"


def render_prediction(pred: Prediction, console: Console | None = None) -> None:
    """Print the per-(rank, iteration) table and the summary."""
    console = console or Console()
    cols = pred.iteration_columns
    table = Table(title="measured vs replayed step time (ms) and predicted breakdown (ms)",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    names = ["rank", "step", "measured", "predicted", "err %", "unprofiled", "compute",
             "exp.comm", "idle", "other"]
    # the table's numbers as Python values, column by column
    err_pct = cols["error_pct"].tolist()
    cells: dict[str, list[str]] = {
        "rank": [str(v) for v in cols["rank"].tolist()],
        "step": [str(v) for v in cols["iteration"].tolist()],
        **{name: [_ms(v) for v in cols[c].tolist()] for name, c in (
            ("measured", "measured_ns"), ("predicted", "predicted_ns"))},
        "err %": [f"{err:+.2f}" for err in err_pct],
        **{name: [_ms(v) for v in cols[c].tolist()] for name, c in (
            ("unprofiled", "unprofiled_ns"), ("compute", "compute_ns"),
            ("exp.comm", "exposed_comm_ns"), ("idle", "host_idle_ns"),
            ("other", "other_ns"))},
    }
    styles = ["green" if abs(err) <= 3 else ("yellow" if abs(err) <= 8 else "red")
              for err in err_pct]
    # every number whole: columns that do not fit the width are left out, and named
    shown, left_out = fit_columns(names, cells, console.width)
    for col in shown:
        need = max([len(col)] + [len(x) for x in cells[col]])
        table.add_column(col, justify="right", no_wrap=True, min_width=need)
    for i, style in enumerate(styles):
        table.add_row(*[f"[{style}]{cells[c][i]}[/{style}]" if c == "err %" else cells[c][i]
                        for c in shown])
    console.print(table)
    if left_out:
        console.print(f"[dim]{len(left_out)} columns left out at this width "
                      f"({', '.join(left_out)}); wider terminal or --format json for "
                      "all[/dim]")
    console.print("[dim]unprofiled: the predicted step without the profiler's own host cost "
                  "per recorded event (see the notes)[/dim]")
    if pred.what_if is not None:
        console.print(f"[bold]what-if:[/bold] {pred.what_if}")
        w = pred.iterations
        for row in w.itertuples(index=False):
            why = ""
            if hasattr(row, "host_waits_ns"):
                why = (f"; change: op time {_signed(row.op_time_ns)}, host waits "
                       f"{_signed(row.host_waits_ns)}, communication {_signed(row.comm_ns)} ms")
            console.print(f"  rank {row.rank} step {row.iteration}: replay "
                          f"{_ms(row.replay_ns)} ms -> predicted {_ms(row.predicted_ns)} ms "
                          f"(95% interval {_ms(row.interval_lo_ns)}–{_ms(row.interval_hi_ns)})"
                          f"{why}")
    s = pred.summary
    console.print(f"MAPE {s['mape_pct']:.2f}%  max APE {s['max_ape_pct']:.2f}%  over "
                  f"{s['iterations']} rank-steps")
    console.print(f"[dim]{pred.graph!r}[/dim]")
    for note in pred.notes:
        console.print(f"[dim]note: {note}[/dim]")
