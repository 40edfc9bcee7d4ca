"""Terminal rendering (rich) of analysis tables, and JSON conversion."""

from __future__ import annotations

import math
import re
import textwrap
from typing import TYPE_CHECKING, Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from traincast.report.wrap import distinct_labels, fold_name
from traincast.util.names import short_name

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: how many rows of each table the terminal shows
MAX_ROWS = 20

#: the columns each table shows in a terminal (JSON and HTML carry all of them)
VIEWS: dict[str, list[str]] = {
    "breakdown": ["rank", "iteration", "window_ns", "compute_pct", "non_compute_pct",
                  "idle_pct", "overlap_pct"],
    "breakdown_by_rank": ["rank", "window_ns", "compute_pct", "non_compute_pct", "idle_pct",
                          "overlap_pct", "source"],
    "idle": ["rank", "iteration", "idle_ns", "host_ns", "peer_wait_ns", "stream_dep_ns",
             "other_ns", "comm_wait_ns"],
    "prediction": ["rank", "iteration", "measured_ns", "predicted_ns", "error_pct"],
    "op_breakdown": ["rank", "op_family", "count", "total_ns", "mean_ns", "p90_ns",
                     "share_pct"],
    "top_kernels": ["name", "op_family", "count", "ranks", "total_ns", "mean_ns",
                    "share_pct"],
    "collectives": ["collective", "group_size", "size_bytes", "count", "mean_ns",
                    "mean_transfer_ns", "busbw_gbps", "arrival_skew_max_ns"],
    "critical_path": ["rank", "name", "edge_kind", "category", "dur_ns"],
    "stragglers_flags": ["rank", "iteration", "kind", "score", "evidence"],
    "ops": ["name", "status", "calls/step", "ms/step", "ms/call"],
}

#: how the terminal orders a table before cutting it (JSON/HTML keep the analysis order)
TERMINAL_SORT: dict[str, tuple[str, bool]] = {
    "critical_path": ("dur_ns", False),
}




def display_name(name: str) -> str:
    """A kernel/op name for chart labels: :func:`short_name` with folded template and call
    arguments marked (``at::native::vectorized_elementwise_kernel<…>``), the full name kept
    for hover text and tables."""
    short = short_name(name)
    if short == name:
        return name
    base = short
    rest = name.split(short, 1)[1] if short in name else ""
    return base + ("<…>" if rest.startswith("<") else "") + ("(…)" if "(" in rest else "")


#: C0/C1 control characters (ESC sequences clear screens, OSC 52 writes the clipboard)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: str) -> str:
    """``text`` with control characters shown as ``\\xNN``: trace names reach the terminal
    and text files verbatim otherwise."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


#: narrowest a folded text column gets
_MIN_TEXT = 12
#: widest the name column gets (longer names fold onto more lines)
_MAX_NAME = 36
#: text columns shown whole, wrapped at spaces (never cut: they hold numbers)
_PROSE = ("evidence", "name", "status")


def _col_width(c: str, cells: list[str]) -> int:
    """The width a column needs: numbers their widest cell, text at least :data:`_MIN_TEXT`."""
    need = max([len(_header(c))] + [len(x) for x in cells])
    return min(need, _MIN_TEXT) if c in _PROSE or not is_number_column(cells) else need


def fit_columns(cols: list[str], cells: dict[str, list[str]], width: int
                 ) -> tuple[list[str], list[str]]:
    """The columns that fit ``width`` with every number whole: numbers take their widest
    cell, text columns at least :data:`_MIN_TEXT` (they fold); columns are kept in order and
    those that do not fit are left out (the first is always kept)."""
    keep, out, used = [], [], 0
    for c in cols:
        w = _col_width(c, cells[c])
        if keep and used + w + 3 > width:
            out.append(c)
            continue
        keep.append(c)
        used += w + 3
    return keep, out


#: a cell that is one number or a pair/ratio of numbers (never folded: a number stays whole)
_NUMBER_CELL = re.compile(r"^(?:-|[-+]?[\d,.]+(?:e[-+]?\d+)?%?(?:\s?[→/]\s?[-+]?[\d,.]+"
                          r"(?:e[-+]?\d+)?%?)*)$")


def is_number_column(values: list[str]) -> bool:
    """Whether every cell is a number, ``-``, or numbers joined by ``→`` or ``/``."""
    return bool(values) and all(_NUMBER_CELL.match(v.strip()) for v in values if v.strip())


def render_rows(title: str, header: list[str], rows: list[list[str]], console: Console,
                left: tuple[str, ...] = ()) -> list[str]:
    """Print ``rows`` (cells already formatted) under ``header`` as a rich table that fits
    ``console.width``: number columns (:func:`is_number_column`) whole and unwrapped, text
    columns folded at their joints (:func:`~traincast.report.wrap.fold_name`), headers wrapped
    at spaces; columns that still do not fit are left out from the right and named in a dim
    line. ``left``: columns justified left (default: text columns). Returns the columns left
    out."""
    cells = {h: [r[i] for r in rows] for i, h in enumerate(header)}
    numeric = {h: is_number_column(cells[h]) for h in header}
    word = {h: max(len(w) for w in h.split()) if h.split() else 1 for h in header}
    need = {h: max([word[h]] + [len(x) for x in cells[h]]) for h in header}
    width = {h: need[h] if numeric[h] else min(need[h], max(word[h], 8)) for h in header}
    keep, out, used = [], [], 1
    for h in header:
        if keep and used + width[h] + 3 > console.width:
            out.append(h)
            continue
        keep.append(h)
        used += width[h] + 3
    spare = console.width - used
    t = Table(title=title or None, title_justify="left")
    for h in keep:
        w = need[h]
        if not numeric[h]:
            w = min(need[h], width[h] + max(spare, 0))
            spare -= w - width[h]
            cells[h] = ["\n".join(fold_name(x, w)) for x in cells[h]]
        head = "\n".join(textwrap.wrap(h, w, break_long_words=False)) if len(h) > w else h
        t.add_column(head, justify="left" if h in left or not numeric[h] else "right",
                     no_wrap=True, min_width=w, max_width=w)
    for i in range(len(rows)):
        t.add_row(*[Text(cells[h][i]) for h in keep])
    console.print(t)
    if out:
        console.print(Text(f"{len(out)} column{'s' if len(out) > 1 else ''} left out at this "
                           f"width ({', '.join(out)}); "
                           "a wider terminal shows them", style="dim"))
    return out


def _fmt(col: str, v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if col.endswith("_ns") and isinstance(v, (int, float, np.integer, np.floating)):
        return f"{float(v) / 1e6:,.3f}"
    if col.endswith("_pct") and isinstance(v, (int, float, np.integer, np.floating)):
        return f"{float(v):.1f}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.3g}"
    s = plain(short_name(str(v)) if col == "name" else str(v))
    return s if len(s) <= 60 or col in _PROSE else s[:57] + "..."


def _header(col: str) -> str:
    if col.endswith("_gbps"):  # busbw/algbw as nccl-tests report them: gigabytes per second
        return col[:-5] + " GB/s"
    if col.endswith("_ns"):
        return col[:-3] + " ms"
    if col.endswith("_pct"):
        return col[:-4] + " %"
    return col


def _pair(a: Any, b: Any, fmt: str) -> str:
    """``"a→b"`` with ``-`` for a missing side."""
    def one(v: Any) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)
    return f"{one(a)}→{one(b)}"


def diff_ops_view(df: pd.DataFrame) -> pd.DataFrame:
    """The terminal view of ``trace_diff``'s ``ops``: name, status with its cause, and calls
    per step, ms per step and ms per call as ``a→b`` pairs (both runs side by side)."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    status = df["status"].astype(str)
    cause = df["cause"].astype(str) if "cause" in df else pd.Series("", index=df.index)
    names = df["name"].astype(str)
    if "kind" in df and names.duplicated(keep=False).any():
        # rows of one name (``--by op_family``: "other" per event kind) told apart by kind
        where = df["kind"].astype(str)
        if "on_device" in df:
            where = where.where(~df["on_device"].fillna(False).astype(bool), where + ", GPU")
        names = names.where(~names.duplicated(keep=False), names + " [" + where + "]")
    return pd.DataFrame({
        "name": names,
        "status": np.where(cause != "", status + ": " + cause, status),
        "calls/step": [_pair(a, b, "{:,.4g}") for a, b in zip(df["count_a"], df["count_b"],
                                                              strict=True)],
        "ms/step": [_pair(a / 1e6, b / 1e6, "{:,.3f}") for a, b in
                    zip(df["total_a_ns"], df["total_b_ns"], strict=True)],
        "ms/call": [_pair(a / 1e6, b / 1e6, "{:,.3f}") for a, b in
                    zip(df["mean_a_ns"], df["mean_b_ns"], strict=True)],
    })


def _render_record(name: str, df: pd.DataFrame, console: Console) -> None:
    """A one-row table as ``metric  value`` lines (wide rows would be cut at the margin)."""
    t = Table(title=f"{name}", box=box.SIMPLE_HEAD, title_justify="left")
    t.add_column("metric", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    for c, v in df.iloc[0].items():
        t.add_row(_header(str(c)), Text(_fmt(str(c), v)))
    console.print(t)


def render_tables(tables: dict[str, pd.DataFrame], console: Console | None = None,
                  max_rows: int = MAX_ROWS) -> None:
    """Print each table (first ``max_rows`` rows); ns columns in ms, names as plain text,
    folded onto several lines rather than cut; one-row tables as ``metric value`` lines."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    console = console or Console()
    for name, df in tables.items():
        if len(df) == 1 and len(df.columns) > 6:
            _render_record(name, df, console)
            continue
        notes: list[str] = []
        if name == "ops" and {"count_a", "mean_a_ns", "cause"} <= set(df.columns):
            df = diff_ops_view(df)
        if name == "steps" and "pairing" in df.columns:
            notes = [p for p in dict.fromkeys(df["pairing"]) if p != "same rank"]
            df = df.drop(columns="pairing")
        note = " (longest segments first)" if name in TERMINAL_SORT else ""
        t = Table(title=f"{name} ({len(df)} rows){note}", box=box.SIMPLE_HEAD,
                  title_justify="left")
        if name in TERMINAL_SORT and TERMINAL_SORT[name][0] in df.columns:
            col, asc = TERMINAL_SORT[name]
            df = df.sort_values(col, ascending=asc, kind="stable")
        view = VIEWS.get(name)
        cols = ([c for c in view if c in df.columns] if view else
                [c for c in df.columns if c not in ("start", "end")])
        shown = df[cols].head(max_rows)
        cells = {c: [_fmt(c, v) for v in shown[c]] for c in cols}
        if "name" in cells and name != "ops":
            full = [plain(str(v)) for v in shown["name"]]
            cells["name"] = distinct_labels(full, cells["name"])
        cols, left_out = fit_columns(cols, cells, console.width)
        if "name" in cols:
            fixed = sum(_col_width(c, cells[c]) + 3 for c in cols if c != "name")
            name_w = max(_MIN_TEXT, min(_MAX_NAME, console.width - fixed - 4,
                                        max(len(x) for x in cells["name"] + ["name"])))
            cells["name"] = ["\n".join(fold_name(x, name_w)) for x in cells["name"]]
        for c in cols:
            numeric = pd.api.types.is_numeric_dtype(df[c])
            wrap = c in _PROSE or not (numeric or is_number_column(cells[c]))
            need = max([len(_header(c))] + [len(x) for x in cells[c]])
            if c == "name":
                t.add_column("name", justify="left", no_wrap=True, min_width=name_w,
                             max_width=name_w)
                continue
            t.add_column(_header(c), justify="right" if numeric else "left",
                         overflow="fold", no_wrap=not wrap,
                         min_width=None if wrap else need)
        for i in range(len(shown)):
            t.add_row(*[Text(cells[c][i]) for c in cols])
        console.print(t)
        if left_out:
            console.print(f"[dim]{name}: {len(left_out)} column{'s' if len(left_out) > 1 else ''} "
                          "left out at this width "
                          f"({', '.join(_header(c) for c in left_out)}); wider terminal, "
                          "--format json or html for all[/dim]")
        for note in notes:
            console.print(f"[dim]{name}: {note}[/dim]")
        if len(df) > max_rows:
            console.print(f"[dim]... {len(df) - max_rows} more rows (use --format json or "
                          "html for all)[/dim]")


def tables_to_json(tables: dict[str, pd.DataFrame]) -> dict[str, list[dict[str, Any]]]:
    """``{name: [row dicts]}`` with NaN as null and numpy scalars as Python numbers."""
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    out = {}
    for name, df in tables.items():
        clean = df.astype(object).where(pd.notna(df), None)
        out[name] = [
            {k: (v.item() if isinstance(v, np.generic) else v) for k, v in rec.items()}
            for rec in clean.to_dict(orient="records")
        ]
    return out
