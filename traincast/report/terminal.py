"""Terminal rendering (rich) of predictions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from traincast.prediction import Prediction


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
    for col in ("rank", "step", "measured", "predicted", "err %", "unprofiled", "compute",
                "exp.comm", "idle", "other"):
        table.add_column(col, justify="right", no_wrap=True)
    for row in df.itertuples(index=False):
        err = row.error_pct
        style = "green" if abs(err) <= 3 else ("yellow" if abs(err) <= 8 else "red")
        table.add_row(str(row.rank), str(row.iteration), _ms(row.measured_ns),
                      _ms(row.predicted_ns), f"[{style}]{err:+.2f}[/{style}]",
                      _ms(row.unprofiled_ns), _ms(row.compute_ns), _ms(row.exposed_comm_ns),
                      _ms(row.host_idle_ns), _ms(row.other_ns))
    console.print(table)
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
