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
    df = pred.iterations
    table = Table(title="measured vs replayed step time (ms) and predicted breakdown (ms)",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    cols = ["rank", "step", "measured", "predicted", "err %", "unprofiled", "compute",
            "exp.comm", "idle", "other"]
    cells: dict[str, list[str]] = {c: [] for c in cols}
    styles = []
    for row in df.itertuples(index=False):
        err = row.error_pct
        styles.append("green" if abs(err) <= 3 else ("yellow" if abs(err) <= 8 else "red"))
        for c, v in zip(cols, (str(row.rank), str(row.iteration), _ms(row.measured_ns),
                               _ms(row.predicted_ns), f"{err:+.2f}", _ms(row.unprofiled_ns),
                               _ms(row.compute_ns), _ms(row.exposed_comm_ns),
                               _ms(row.host_idle_ns), _ms(row.other_ns)), strict=True):
            cells[c].append(v)
    # every number whole: columns that do not fit the width are left out, and named
    shown, left_out = fit_columns(cols, cells, console.width)
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
