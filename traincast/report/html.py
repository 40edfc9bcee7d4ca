"""Self-contained HTML report of analysis tables (plotly charts + sortable tables).

:func:`render_html` turns ``{table name: DataFrame}`` (the output of
:func:`traincast.analyze`) into one HTML document that opens offline: plotly.js is inlined
once (its basic bundle when the charts are bars and scatters:
:func:`traincast.report.encode.plotly_js`), each chart is a ``<div>`` plus a small
``tcPlot(id, figure)`` script holding the figure in the compact JSON of
:func:`traincast.report.encode.encode_figure`, and every table is also shown as a plain HTML
table (first :data:`MAX_TABLE_ROWS` rows) under its chart.

A chart drawing part of its table (representative ranks of many, the longest events of a
long timeline: :mod:`traincast.report.lanes`) is preceded by a ``<p class="note sampled">``
saying what it left out and where the full data is; the table itself is never cut but by
:data:`MAX_TABLE_ROWS` (also noted).

Rendering only: nothing here computes an analysis. Known tables get charts (temporal
breakdown, idle causes, op families and top kernels, collective bandwidth, critical path,
stragglers, measured vs predicted); any other table is shown as a table. Charts pick their
columns by name and are skipped when the columns they need are missing, so a table whose
schema changed still renders as a table.

Event names (kernel names, op names, straggler evidence) are untrusted: every string written
into HTML is escaped with :func:`html.escape`, strings given to plotly are escaped too (plotly
renders a subset of HTML in labels and decodes entities back to the original text), and the
figure JSON embedded in ``<script>`` has ``<``, ``>``, ``&`` and the JS line separators
escaped so no data can close the script element.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from traincast.errors import TraincastError
from traincast.report.charts import CHARTS
from traincast.report.encode import RUNTIME_JS, encode_figure, plotly_js, trace_types

#: rows of each table written as HTML
MAX_TABLE_ROWS = 200

#: sections: (id, heading, tables in display order); tables ``stragglers_*`` not listed here
#: also join the stragglers section
SECTIONS: list[tuple[str, str, list[str]]] = [
    ("verdict", "Verdict: the step and what fixing it would buy (simulated)",
     ["verdict", "opportunities"]),
    ("timeline", "Timeline of one step: measured and predicted, critical path",
     ["timeline"]),
    ("breakdown", "Temporal breakdown", ["breakdown", "breakdown_by_rank"]),
    ("idle", "Idle time by cause", ["idle"]),
    ("kernels", "Op families and top kernels", ["op_breakdown", "top_kernels"]),
    ("collectives", "Collectives", ["collectives"]),
    ("critical_path", "Critical path", ["critical_path", "critical_path_by_family",
                                        "critical_path_by_rank"]),
    ("stragglers", "Stragglers", ["stragglers_flags", "stragglers_ranks",
                                  "stragglers_imbalance"]),
    ("prediction", "Measured vs predicted step time", ["prediction"]),
]

#: columns holding nanoseconds that do not end in ``_ns`` (shown in ms); none today
NS_COLUMNS: dict[str, set[str]] = {}
#: columns holding absolute timestamps (shown as raw integers, not converted to ms)
TIMESTAMP_COLUMNS = {"start", "end", "ts", "start_ns", "end_ns", "ts_ns"}


_PLOTLY_CONFIG = '{"responsive": true, "displaylogo": false, "showLink": false}'


# ---------------------------------------------------------------------------- escaping


def _esc(v: Any) -> str:
    """HTML-escape any value's text (quotes too, so it is safe in attributes)."""
    return html.escape(str(v), quote=True)


def _script_safe(js: str) -> str:
    """Make JSON text safe inside ``<script>``: ``<``, ``>``, ``&`` and U+2028/9 escaped.

    Outside JSON strings these characters cannot occur, so the replacement keeps the JSON
    value identical while no ``</script>`` or ``<!--`` can appear.
    """
    return (js.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(name)).strip("-") or "table"


# ---------------------------------------------------------------------------- tables


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _missing(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    try:
        return bool(isinstance(v, (float, np.floating)) and math.isnan(v))
    except TypeError:
        return False


def _col_kind(table: str, col: Any) -> str:
    c = str(col)
    if c in TIMESTAMP_COLUMNS:
        return "raw"
    if c.endswith("_ns") or c in NS_COLUMNS.get(table, ()):
        return "ns"
    if c.endswith("_pct"):
        return "pct"
    return "plain"


def _header(table: str, col: Any) -> str:
    c, k = str(col), _col_kind(table, col)
    if k == "ns":
        return (c[:-3] if c.endswith("_ns") else c) + " ms"
    if k == "pct":
        return c[:-4] + " %"
    return c


def _cell(kind: str, v: Any) -> str:
    if _missing(v):
        return '<td class="na">\u2013</td>'
    if _is_num(v):
        f = float(v)
        if kind == "ns":
            txt = f"{f / 1e6:,.3f}"
        elif kind == "pct":
            txt = f"{f:.1f}"
        elif isinstance(v, (int, np.integer)):
            txt = str(int(v)) if kind == "raw" else f"{int(v):,}"
        else:
            txt = f"{f:,.4g}" if math.isfinite(f) else str(f)
        raw = str(int(v)) if isinstance(v, (int, np.integer)) else repr(f)
        return f'<td class="num" data-v="{_esc(raw)}">{_esc(txt)}</td>'
    return f"<td>{_esc(v)}</td>"


def _step_origin(df: pd.DataFrame, stamps: list[Any]) -> np.ndarray | None:
    """Per row, the start of its step (ns): the earliest timestamp of the rows of the same
    ``iteration`` (all rows without that column); None without integer timestamps."""
    try:
        vals = df[stamps].apply(pd.to_numeric, errors="coerce").astype("Int64")
    except (TypeError, ValueError):
        return None
    first = vals.min(axis=1)
    if first.isna().all():
        return None
    if "iteration" in df.columns:
        return first.groupby(df["iteration"].to_numpy()).transform("min").to_numpy()
    return np.full(len(df), first.min(), dtype=object)


def _html_table(name: str, df: pd.DataFrame, tid: str) -> str:
    """Timestamps (``start``, ``end``, ...) are shown in ms from their step's start (the
    earliest timestamp of the same iteration in the table); the raw value stays in
    ``data-v`` for sorting."""
    cols = list(df.columns)
    kinds = [_col_kind(name, c) for c in cols]
    stamps = [c for c, k in zip(cols, kinds, strict=True) if k == "raw"]
    origin = _step_origin(df, stamps) if stamps else None
    head = "".join(f'<th title="{_esc(c)}">{_esc(_header(name, c))}'
                   + (" (ms from step start)" if origin is not None and c in stamps else "")
                   + "</th>" for c in cols)
    rows = []
    for i, rec in enumerate(df.head(MAX_TABLE_ROWS).itertuples(index=False, name=None)):
        cells = []
        for c, k, v in zip(cols, kinds, rec, strict=True):
            if origin is not None and c in stamps and _is_num(v) and not _missing(origin[i]):
                rel = (int(v) - int(origin[i])) / 1e6  # ints first: epoch ns exceed a float
                cells.append(f'<td class="num" data-v="{_esc(str(int(v)))}">{rel:,.3f}</td>')
            else:
                cells.append(_cell(k, v))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if len(df) > MAX_TABLE_ROWS:
        more = (f'<p class="more">first {MAX_TABLE_ROWS} of {len(df):,} rows '
                "(use <code>--format json</code> for all)</p>")
    return (f'<div class="table-wrap" id="{tid}"><table class="tc-table">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{more}")


# ---------------------------------------------------------------------------- document

_CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
margin:0;padding:0 24px 40px;color:#222;background:#fafafa}
header{border-bottom:1px solid #ddd;margin-bottom:16px;padding:12px 0}
h1{font-size:1.5em;margin:8px 0;overflow-wrap:anywhere}
h2{font-size:1.25em;margin-top:32px;border-bottom:1px solid #e4e4e4;padding-bottom:4px}
h3{font-size:1.05em;margin:20px 0 6px;font-family:monospace}
.meta{color:#666;font-size:.9em}
nav ul{columns:3;font-size:.9em;padding-left:18px}
nav .empty{color:#999}
.tc-chart{background:#fff;border:1px solid #e4e4e4;margin:8px 0;min-height:300px}
.table-wrap{max-height:480px;overflow:auto;border:1px solid #ddd;background:#fff}
table.tc-table{border-collapse:collapse;font-size:12px;width:100%}
.tc-table th{position:sticky;top:0;background:#f0f0f0;cursor:pointer;text-align:left;
padding:4px 8px;border-bottom:1px solid #ccc;white-space:nowrap;user-select:none}
.tc-table th::after{content:" \\2195";color:#aaa}
.tc-table th[data-dir=asc]::after{content:" \\25B2";color:#333}
.tc-table th[data-dir=desc]::after{content:" \\25BC";color:#333}
.tc-table td{padding:3px 8px;border-bottom:1px solid #eee;max-width:60ch;
overflow-wrap:break-word;vertical-align:top}
.tc-table td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.tc-table td.na{color:#aaa;text-align:center}
.tc-table tbody tr:hover{background:#f5f9ff}
.more,.note{color:#666;font-size:.85em}
"""

_SORT_JS = """
(function(){
  function key(td){var v=td.getAttribute('data-v');
    if(v!==null){var f=parseFloat(v);if(!isNaN(f))return f;}
    return td.textContent;}
  document.querySelectorAll('table.tc-table').forEach(function(t){
    var ths=t.querySelectorAll('thead th');
    ths.forEach(function(th,i){th.addEventListener('click',function(){
      var asc=th.getAttribute('data-dir')!=='asc';
      ths.forEach(function(h){h.removeAttribute('data-dir');});
      th.setAttribute('data-dir',asc?'asc':'desc');
      var tb=t.tBodies[0],rows=Array.prototype.slice.call(tb.rows);
      rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]),c;
        if(typeof x==='number'&&typeof y==='number'){c=x-y;}
        else if(typeof x==='number'){c=-1;}else if(typeof y==='number'){c=1;}
        else{c=String(x).localeCompare(String(y));}
        return asc?c:-c;});
      rows.forEach(function(r){tb.appendChild(r);});
    });});
  });
})();
"""


def _as_frame(v: Any) -> pd.DataFrame | None:
    if isinstance(v, pd.DataFrame):
        return v
    if isinstance(v, pd.Series):
        return v.to_frame()
    try:
        return pd.DataFrame(v)
    except Exception:  # an unexpected value is skipped, never fatal
        return None


def _figure_html(fig: Any, div_id: str, templates: list[str], types: set[str]) -> str:
    """A chart's ``<div>`` and its ``tcPlot`` call (the compact JSON of
    :func:`~traincast.report.encode.encode_figure`), after the chart's note on what it left
    out (``layout.meta.tc_note``) if any; adds the figure's trace types to ``types``."""
    d = fig.to_plotly_json()
    layout = dict(d.get("layout", {}))
    meta = layout.pop("meta", None)
    note = meta.get("tc_note", "") if isinstance(meta, dict) else ""
    d = {"data": d.get("data", []), "layout": layout}
    types |= trace_types(d)
    fig_json = _script_safe(encode_figure(d, templates).decode())
    para = f'<p class="note sampled">{_esc(note)}</p>\n' if note else ""
    return (f'{para}<div id="{div_id}" class="plotly-graph-div tc-chart"></div>\n'
            f'<script>tcPlot("{div_id}",{fig_json},{_PLOTLY_CONFIG});</script>')


def render_html(tables: dict[str, pd.DataFrame], *, title: str) -> str:
    """Render analysis tables as one self-contained (offline) HTML document.

    Args:
        tables: ``{table name: DataFrame}`` as returned by :func:`traincast.analyze`; any
            subset of the known tables, plus any other table (shown as a plain table).
            Empty tables are listed in the header and skipped.
        title: document title (escaped).

    Returns:
        The HTML text: plotly.js inlined once (when there is at least one chart), one
        ``<div id="chart-SECTION-N">`` per chart inside ``<section id="sec-SECTION">``, every
        table as an HTML table ``<div id="table-NAME">`` (first :data:`MAX_TABLE_ROWS` rows)
        under its charts. A chart whose columns are missing is left out; one that fails is
        replaced by a one-line note.

    Raises:
        TraincastError: plotly is not installed.
    """
    try:  # lazy: start-up cost (plotly ~0.15 s), only HTML output needs it
        import plotly.graph_objects as go
    except ImportError:  # pragma: no cover - plotly is a dependency
        raise TraincastError("HTML reports need plotly (pip install plotly)") from None

    frames: dict[str, pd.DataFrame | None] = {str(k): _as_frame(v) for k, v in tables.items()}
    present = {k: v for k, v in frames.items() if v is not None and len(v) > 0
               and len(v.columns) > 0}

    # group tables into sections: known ones first, in order, then the rest one by one
    sections: list[tuple[str, str, list[str]]] = []
    placed: set[str] = set()
    for sid, heading, names in SECTIONS:
        extra = ([n for n in present if n.startswith("stragglers_") and n not in names]
                 if sid == "stragglers" else [])
        members = [n for n in [*names, *extra] if n in present]
        if members:
            sections.append((sid, heading, members))
            placed.update(members)
    used_ids = {s[0] for s in sections}
    for n in present:
        if n not in placed:
            sid = _slug(n)
            while sid in used_ids:
                sid += "_"
            used_ids.add(sid)
            sections.append((sid, n, [n]))

    body: list[str] = []
    table_ids: dict[str, str] = {}
    n_charts = 0
    drawn: set[str] = set()
    templates: list[str] = []
    types: set[str] = set()
    for sid, heading, members in sections:
        body.append(f'<section id="sec-{_esc(sid)}" class="tc-section">'
                    f"<h2>{_esc(heading)}</h2>")
        for name in members:
            df = present[name]
            tid = f"table-{_slug(name)}"
            while tid in table_ids.values():
                tid += "_"
            table_ids[name] = tid
            body.append(f"<h3>{_esc(name)} <span class=\"meta\">({len(df):,} rows)</span></h3>")
            chart = CHARTS.get(name)
            if chart is not None:
                try:
                    figs = []
                    for fig in chart(go, df, present):
                        key = fig.layout.title.text  # the same chart from two tables: once
                        if key not in drawn:
                            drawn.add(key)
                            figs.append(fig)
                    divs = [_figure_html(fig, f"chart-{_slug(sid)}-{n_charts + i + 1}",
                                         templates, types) for i, fig in enumerate(figs)]
                except Exception as exc:  # a chart never breaks the report
                    divs = []
                    body.append(f'<p class="note">chart skipped: {_esc(type(exc).__name__)}: '
                                f"{_esc(exc)}</p>")
                n_charts += len(divs)
                body.extend(divs)
            try:
                body.append(_html_table(name, df, tid))
            except Exception as exc:  # e.g. a value whose str() fails
                body.append(f'<p class="note">table skipped: {_esc(type(exc).__name__)}: '
                            f"{_esc(exc)}</p>")
        body.append("</section>")

    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    nav = []
    for name, df in frames.items():
        if name in present:
            nav.append(f'<li><a href="#{table_ids[name]}">{_esc(name)}</a> '
                       f"({len(present[name]):,} rows)</li>")
        else:
            what = "not a table" if df is None else "empty"
            nav.append(f'<li class="empty">{_esc(name)} ({what}, skipped)</li>')
    header = (f"<header><h1>{_esc(title)}</h1>"
              f'<p class="meta">generated {now} by traincast \u00b7 {len(present)} of '
              f"{len(frames)} tables with rows \u00b7 {n_charts} charts</p>"
              f"<nav><ul>{''.join(nav)}</ul></nav></header>")
    lib = "" if n_charts == 0 else (
        "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
        f"<script>{plotly_js(types)}</script>\n"
        f"<script>var TC_TPL=[{_script_safe(','.join(templates))}];{RUNTIME_JS}</script>\n")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_esc(title)}</title><style>{_CSS}</style>\n{lib}</head>\n"
            f"<body>{header}\n<main>{''.join(body)}</main>\n"
            f"<script>{_SORT_JS}</script></body></html>\n")
