"""Terminal rendering of plans and layout searches (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from traincast.plan.dlrm import why_best
from traincast.report.tables import render_rows
from traincast.report.wrap import wrap_prose


def render_plan(result: Any, title: str = "", console: Console | None = None) -> None:
    """Print one :class:`~traincast.plan.api.PlanResult`."""
    c = console or Console()
    t = Table(title=title or "plan", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    d = result.to_dict()
    rows = [("iteration time", f"{d['iteration_time_s']:.4f} s"),
            ("tokens/s", f"{d['tokens_per_s']:,.0f}"),
            ("model TFLOP/s per GPU", f"{d['tflops_per_gpu']:.1f}"),
            ("MFU", f"{d['mfu_pct']:.1f} %"), ("HFU", f"{d['hfu_pct']:.1f} %"),
            ("pipeline bubble", f"{d['bubble_pct']:.1f} %"),
            ("exposed communication", f"{d['exposed_comm_s']:.4f} s"),
            ("memory per GPU", f"{d['memory_gib_per_gpu']:.2f} GiB"),
            ("fits", {True: "yes", False: "NO (out of memory)", None: "unknown"}[d["fits"]])]
    for k, v in d["memory_gib"].items():
        if k not in ("total", "capacity"):
            rows.append((f"  memory: {k}", f"{v:.2f} GiB"))
    for k, v in d["breakdown_s"].items():
        rows.append((f"  critical stage: {k.removesuffix('_s')}", f"{v:.4f} s"))
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)
    for n in d["notes"]:
        c.print(f"[dim]{n}[/dim]")


def render_search(result: Any, top: int = 10, title: str = "",
                  console: Console | None = None) -> None:
    """Print the top layouts of a :class:`~traincast.plan.search.SearchResult` and why the
    best wins."""
    c = console or Console()
    rows = [[str(i + 1), str(r["describe"]), f"{r['iteration_time_s']:.4f}",
             f"{r['tokens_per_s']:,.0f}", f"{r['mfu_pct']:.1f}", f"{r['bubble_pct']:.1f}",
             f"{r['exposed_comm_s']:.4f}", f"{r['memory_gib_per_gpu']:.1f}"]
            for i, r in result.top(top).iterrows()]
    render_rows(title or "layout search", ["#", "layout", "s/step", "tokens/s", "MFU %",
                                           "bubble %", "exp. comm s", "GiB/GPU"], rows, c)
    _lines(c, [f"{result.enumerated} layouts enumerated: {result.invalid} invalid, "
               f"{result.out_of_memory} out of memory, {len(result.table)} simulated"])
    _lines(c, result.reasons, "- ")


def _lines(c: Console, lines: Any, bullet: str = "") -> None:
    """Prose lines wrapped to the console's width at spaces (numbers whole)."""
    for line in lines:
        for part in wrap_prose(str(line), c.width, indent=" " * len(bullet), first=bullet):
            c.print(part, highlight=False, markup=False, soft_wrap=True)


def render_dlrm_plan(result: Any, title: str = "", measured_step_s: float | None = None,
                     console: Console | None = None) -> None:
    """Print one :class:`~traincast.plan.dlrm.DLRMPlanResult`: metrics, then the per-rank
    table (lookups, all_to_all, memory)."""
    c = console or Console()
    d = result.to_dict()
    t = Table(title=title or "DLRM plan", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [("iteration time", f"{d['iteration_time_s'] * 1e3:.4f} ms"),
            ("samples/s", f"{d['samples_per_s']:,.0f}"),
            ("exposed communication", f"{d['exposed_comm_s'] * 1e3:.4f} ms"),
            ("memory per GPU", f"{d['memory_gib_per_gpu']:.2f} GiB"),
            ("fits", {True: "yes", False: "NO (out of memory)", None: "unknown"}[d["fits"]])]
    if measured_step_s:
        rows += [("measured step (median, all ranks)", f"{measured_step_s * 1e3:.4f} ms"),
                 ("error", f"{(d['iteration_time_s'] / measured_step_s - 1) * 100:+.1f} %")]
    for k, v in d["breakdown_s"].items():
        rows.append((f"  {k.removesuffix('_s')}", f"{v * 1e3:.4f} ms"))
    for k, v in rows:
        t.add_row(k, v)
    c.print(t)
    rows = [[str(r["rank"]), str(r["tables"]), f"{r['lookup_fwd_ns'] / 1e3:.2f}",
             f"{r['lookup_bwd_ns'] / 1e3:.2f}", f"{r['a2a_fwd_ns'] / 1e3:.2f}",
             f"{r['a2a_bwd_ns'] / 1e3:.2f}", f"{r['memory_gib']:.2f}"] for r in d["per_rank"]]
    render_rows("per rank", ["rank", "tables", "lookup fwd us", "lookup bwd us", "a2a fwd us",
                             "a2a bwd us", "GiB"], rows, c)
    for n in d["notes"]:
        c.print(f"[dim]{n}[/dim]")


def render_dlrm_search(table: Any, title: str = "", console: Console | None = None) -> None:
    """Print a ranked DLRM sharding search (:func:`~traincast.plan.dlrm.search_sharding`)
    and why the best plan wins."""
    c = console or Console()
    rows = [[str(i + 1), str(r["plan"]), str(r["sharding"]),
             f"{r['iteration_time_s'] * 1e3:.3f}",
             f"{r['lookup_max_ms']:.3f}/{r['lookup_mean_ms']:.3f}", f"{r['a2a_ms']:.3f}",
             f"{r['all_reduce_ms']:.3f}", f"{r['memory_gib_per_gpu']:.2f}",
             "yes" if r["fits"] else "NO"] for i, r in table.iterrows()]
    render_rows(title or "DLRM sharding search",
                ["#", "plan", "sharding", "ms/step", "lookup max/mean ms", "exch. ms",
                 "all_reduce ms", "GiB/GPU", "fits"], rows, c)
    _lines(c, why_best(table), "- ")
