"""Self-contained HTML report of analysis tables (plotly charts + sortable tables).

:func:`render_html` turns ``{table name: DataFrame}`` (the output of
:func:`traincast.analyze`) into one HTML document that opens offline: plotly.js is inlined
once, each chart is a ``<div>`` plus a small ``Plotly.newPlot`` script, and every table is
also shown as a plain HTML table (first :data:`MAX_TABLE_ROWS` rows) under its chart.

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
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from traincast.errors import TraincastError
from traincast.report.tables import display_name

#: rows of each table written as HTML
MAX_TABLE_ROWS = 200
#: critical-path segments drawn in the timeline (the longest ones when there are more)
MAX_TIMELINE_SEGMENTS = 5000
#: bars (rows) drawn per-iteration before a chart falls back to per-rank means
MAX_BARS = 1500
#: characters of a name shown in chart labels / hover text (tables show the full name)
LABEL_CHARS = 80
HOVER_CHARS = 200
#: characters of a kernel's full (templated) name in hover text
FULL_NAME_CHARS = 1000

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

_COLORS = {
    "compute": "#2ca02c", "exposed comm": "#d62728", "memory": "#9467bd", "idle": "#b0b0b0",
    "other": "#8c564b", "measured": "#1f77b4", "predicted": "#ff7f0e", "error": "#444444",
}
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
            "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363"]

_PLOTLY_CONFIG = '{"responsive": true, "displaylogo": false, "showLink": false}'


# ---------------------------------------------------------------------------- escaping


def _esc(v: Any) -> str:
    """HTML-escape any value's text (quotes too, so it is safe in attributes)."""
    return html.escape(str(v), quote=True)


def _label(v: Any, n: int = LABEL_CHARS) -> str:
    """A string for a plotly label: shortened, then escaped (plotly decodes entities)."""
    s = "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
    if len(s) > n:
        s = s[: n - 1] + "\u2026"
    return html.escape(s, quote=True)


def _script_safe(js: str) -> str:
    """Make JSON text safe inside ``<script>``: ``<``, ``>``, ``&`` and U+2028/9 escaped.

    Outside JSON strings these characters cannot occur, so the replacement keeps the JSON
    value identical while no ``</script>`` or ``<!--`` can appear.
    """
    return (js.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(name)).strip("-") or "table"


# ---------------------------------------------------------------------------- helpers


def _first(df: pd.DataFrame, *names: str) -> str | None:
    """The first of ``names`` that is a column of ``df``."""
    for n in names:
        if n in df.columns:
            return n
    return None


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


def _ms(s: pd.Series) -> pd.Series:
    return _num(s).astype("float64") / 1e6


def _has(df: pd.DataFrame, *cols: str) -> bool:
    return all(c in df.columns for c in cols)


def _rank_labels(ranks: Iterable[Any]) -> list[str]:
    out = []
    for r in ranks:
        try:
            out.append(f"r{int(r)}")
        except (TypeError, ValueError):
            out.append(_label(r))
    return out


def _sort_rank_iter(df: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("iteration", "rank") if c in df.columns]
    if not keys:
        return df
    try:
        return df.sort_values(keys, kind="stable")
    except TypeError:
        return df


def _x_rank_iter(df: pd.DataFrame) -> tuple[Any, str]:
    """x values for per-(iteration, rank) bars: multi-category when several iterations."""
    ranks = _rank_labels(df["rank"]) if "rank" in df.columns else [str(i) for i in range(len(df))]
    if "iteration" in df.columns and df["iteration"].nunique(dropna=False) > 1:
        iters = [f"it {_label(i)}" for i in df["iteration"]]
        return [iters, ranks], "iteration / rank"
    return ranks, "rank"


def _layout(fig: Any, title: str, *, x: str = "", y: str = "", height: int = 400,
            **kw: Any) -> Any:
    fig.update_layout(title={"text": _label(title, 200), "x": 0.01, "y": 0.98,
                             "yanchor": "top"},
                      template="plotly_white", height=height,
                      margin={"l": 60, "r": 30, "t": 90, "b": 50},
                      legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1.01,
                              "yanchor": "bottom"}, **kw)
    if x:
        fig.update_layout(xaxis_title_text=x)
    if y:
        fig.update_layout(yaxis_title_text=y)
    return fig


def _bar(go: Any, x: Any, y: Any, name: str, color: str | None = None, **kw: Any) -> Any:
    marker = {"color": color} if color else {}
    return go.Bar(x=x, y=y, name=_label(name), marker=marker, **kw)


# ---------------------------------------------------------------------------- charts
# each chart function: (go, df, all tables) -> list of figures (possibly empty)

_Chart = Callable[[Any, pd.DataFrame, dict[str, pd.DataFrame]], list[Any]]


def _chart_breakdown(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    parts = [(c, n) for c, n in (("compute_ns", "compute"), ("comm_exposed_ns", "exposed comm"),
                                 ("memory_ns", "memory"), ("idle_ns", "idle"))
             if c in df.columns]
    if "rank" not in df.columns or not parts:
        return []
    df = _sort_rank_iter(df)
    per_rank = "iteration" not in df.columns or df["iteration"].nunique() <= 1
    if not per_rank and len(df) > MAX_BARS:  # too many bars: mean per rank
        df = df.groupby("rank", as_index=False)[[c for c, _ in parts]
                                                + (["overlap_pct"] if "overlap_pct" in df.columns
                                                   else [])].mean(numeric_only=True)
        per_rank = True
    x, xt = _x_rank_iter(df) if not per_rank else (_rank_labels(df["rank"]), "rank")
    fig = go.Figure()
    for col, name in parts:
        fig.add_trace(_bar(go, x, _ms(df[col]), name, _COLORS.get(name)))
    if "overlap_pct" in df.columns:
        fig.add_trace(go.Scatter(x=x, y=_num(df["overlap_pct"]), name="comm overlap %",
                                 mode="markers", yaxis="y2",
                                 marker={"color": "#000000", "symbol": "diamond", "size": 8}))
        fig.update_layout(yaxis2={"title": {"text": "overlap %"}, "overlaying": "y",
                                  "side": "right", "rangemode": "tozero", "showgrid": False})
    what = "per rank" if per_rank else "per rank and iteration"
    return [_layout(fig, f"Step window {what}: compute / exposed comm / memory / idle",
                    x=xt, y="ms", barmode="stack")]


def _chart_idle(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    if "rank" not in df.columns:
        return []
    known = ["host_ns", "data_loading_ns", "peer_wait_ns", "stream_dep_ns", "other_ns"]
    skip = {"idle_ns", "comm_wait_ns", "rank", "iteration", "gaps"}
    causes = [c for c in known if c in df.columns]
    causes += [c for c in df.columns if isinstance(c, str) and c.endswith("_ns")
               and c not in skip and c not in causes]
    if not causes:
        return []
    n_iter = df["iteration"].nunique() if "iteration" in df.columns else 1
    data = df[["rank", *causes]].copy()
    for c in causes:
        data[c] = _num(data[c])
    g = data.groupby("rank", as_index=False).mean(numeric_only=True).sort_values("rank")
    x = _rank_labels(g["rank"])
    fig = go.Figure()
    for i, c in enumerate(causes):
        fig.add_trace(_bar(go, x, _ms(g[c]), c[:-3].replace("_", " "),
                           _PALETTE[i % len(_PALETTE)]))
    ylab = f"ms per iteration (mean of {n_iter})" if n_iter > 1 else "ms"
    return [_layout(fig, "GPU idle time by cause, per rank", x="rank", y=ylab,
                    barmode="stack")]


def _chart_op_breakdown(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    fam = _first(df, "op_family", "family")
    val = _first(df, "share_pct", "total_ns")
    if "rank" not in df.columns or fam is None or val is None:
        return []
    data = df[["rank", fam]].copy()
    data["v"] = _num(df[val]) if val == "share_pct" else _ms(df[val])
    pv = data.pivot_table(index="rank", columns=fam, values="v", aggfunc="sum", fill_value=0)
    pv = pv[pv.sum().sort_values(ascending=False).index]
    x = _rank_labels(pv.index)
    fig = go.Figure()
    for i, f in enumerate(pv.columns):
        fig.add_trace(_bar(go, x, pv[f].to_numpy(), str(f), _PALETTE[i % len(_PALETTE)]))
    ylab = "share of device time %" if val == "share_pct" else "ms"
    return [_layout(fig, "Op family share per rank", x="rank", y=ylab, barmode="stack")]


def _chart_top_kernels(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    name = _first(df, "name", "kernel")
    val = _first(df, "total_ns")
    if name is None or val is None:
        return []
    d = df.assign(_v=_ms(df[val])).dropna(subset=["_v"]).sort_values("_v", ascending=False)
    d = d.head(25).iloc[::-1]
    labels = [f"{i + 1}. {_label(display_name(str(n)), 60)}"
              for i, n in zip(range(len(d) - 1, -1, -1), d[name], strict=True)]
    hover = []
    for _, r in d.iterrows():
        h = [_label(r[name], FULL_NAME_CHARS), f"total {r['_v']:.3f} ms"]
        for c in ("count", "mean_ns", "share_pct", "op_family", "kind"):
            if c in d.columns:
                v = r[c]
                h.append(f"{c[:-3]} {float(v) / 1e6:.4f} ms" if c.endswith("_ns")
                         else f"{c} {_label(v)}")
        hover.append("<br>".join(h))
    fig = go.Figure(go.Bar(x=d["_v"], y=labels, orientation="h", hovertext=hover,
                           hoverinfo="text", marker={"color": "#1f77b4"}, name="total"))
    fig.update_yaxes(automargin=True, tickfont={"size": 10})
    return [_layout(fig, "Top kernels by total time", x="total ms", y="",
                    height=max(380, 22 * len(d) + 120))]


def _chart_collectives(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    kind = _first(df, "collective", "name")
    size = _first(df, "size_bytes", "bytes", "input_bytes")
    bw = _first(df, "busbw_gbps", "algbw_gbps")
    if kind is None or size is None or bw is None:
        return []
    d = df.assign(_s=_num(df[size]), _b=_num(df[bw]))
    d = d[(d["_s"] > 0) & d["_b"].notna()]
    if d.empty:
        return []
    fig = go.Figure()
    for i, (k, g) in enumerate(d.groupby(kind, sort=True)):
        g = g.sort_values("_s")
        hover = []
        for _, r in g.iterrows():
            h = [_label(k), f"{int(r['_s']):,} B", f"{bw[:-5]} {r['_b']:.3g} GB/s"]
            for c in ("process_group", "group_size", "count", "mean_ns"):
                if c in g.columns:
                    v = r[c]
                    h.append(f"mean {float(v) / 1e6:.4f} ms" if c == "mean_ns"
                             else f"{c} {_label(v)}")
            hover.append("<br>".join(h))
        fig.add_trace(go.Scatter(x=g["_s"], y=g["_b"], mode="lines+markers", name=_label(k),
                                 hovertext=hover, hoverinfo="text",
                                 marker={"size": 9, "color": _PALETTE[i % len(_PALETTE)]}))
    fig.update_xaxes(type="log")
    return [_layout(fig, f"Collective bandwidth ({bw.replace('_gbps', '')}) vs message size",
                    x="message size (bytes, log)", y="GB/s")]


def _step_start(d: pd.DataFrame, tables: dict[str, pd.DataFrame], start: str) -> int:
    """The start (ns) of the step the critical path lies in: the ``breakdown`` table's
    step-window start nearest to the path's first segment (the replayed path starts within
    the replay's error of the measured step start), else the path's own start."""
    first = int(d["_s"].min())
    bd = tables.get("breakdown")
    if bd is not None and {"start", "end"} <= set(bd.columns) and start in ("start_ns", "start"):
        b = bd[["start", "end"]].apply(_num).dropna()
        if len(b):
            dist = (b["start"] - first).abs()
            i = dist.idxmin()
            if dist[i] <= 0.05 * max(float(b.loc[i, "end"] - b.loc[i, "start"]), 1.0):
                return min(int(b.loc[i, "start"]), first)  # never a negative time
    return first


def _longest(df: pd.DataFrame, start: str, dur: str, what: str) -> tuple[pd.DataFrame, str]:
    """Rows with a start and a duration, the :data:`MAX_TIMELINE_SEGMENTS` longest when there
    are more, and the note saying so."""
    d = df.dropna(subset=[start, dur])
    if len(d) <= MAX_TIMELINE_SEGMENTS:
        return d, ""
    return (d.nlargest(MAX_TIMELINE_SEGMENTS, dur),
            f" (longest {MAX_TIMELINE_SEGMENTS} of {len(df)} {what})")


def _chart_critical_path(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    start = _first(df, "start_ns", "start", "ts")
    if "rank" not in df.columns or start is None:
        return []
    s = _num(df[start])
    if "dur_ns" in df.columns:
        dur = _num(df["dur_ns"])
    elif "end_ns" in df.columns:
        dur = _num(df["end_ns"]) - s
    else:
        return []
    d, note = _longest(df.assign(_s=s, _d=dur), "_s", "_d", "segments")
    if d.empty:
        return []
    t0 = _step_start(d, tables, start)
    # subtract before converting to float: epoch ns do not fit a float64 exactly
    rel = (d["_s"] - t0).astype("float64") / 1e6
    d = d.assign(_rel=rel, _dms=d["_d"].astype("float64") / 1e6)
    color_col = _first(d, "edge_kind", "category", "kind")
    try:
        ranks = sorted(d["rank"].unique())
    except TypeError:
        ranks = list(d["rank"].unique())
    fig = go.Figure()
    groups = d.groupby(color_col, sort=True, dropna=False) if color_col else [("path", d)]
    for i, (k, g) in enumerate(groups):
        hover = []
        for _, r in g.iterrows():
            h = [_label(r["name"], FULL_NAME_CHARS) if "name" in g.columns else ""]
            sub = [_label(r[c]) for c in ("kind", "op_family") if c in g.columns]
            if sub:
                h.append(" \u00b7 ".join(sub))
            if color_col:
                h.append(f"{color_col} {_label(k)}")
            h.append(f"rank {_label(r['rank'])}, start {r['_rel']:.3f} ms, "
                     f"dur {r['_dms']:.4f} ms")
            hover.append("<br>".join(x for x in h if x))
        fig.add_trace(go.Bar(base=g["_rel"], x=g["_dms"], y=_rank_labels(g["rank"]),
                             orientation="h", name=_label(k), hovertext=hover,
                             hoverinfo="text", width=0.6,
                             marker={"color": _PALETTE[i % len(_PALETTE)],
                                     "line": {"width": 0}}))
    fig.update_yaxes(categoryorder="array", categoryarray=_rank_labels(ranks),
                     autorange="reversed")
    return [_layout(fig, f"Critical path over time, coloured by {color_col or 'segment'}{note}",
                    x="ms from the step start", y="rank",
                    barmode="overlay", height=max(300, 60 * len(ranks) + 160))]


def _chart_timeline(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    """Gantt of :func:`traincast.analysis.timeline.step_timeline`: one lane per rank and
    stream for each source (measured, predicted) and one per rank for the critical path;
    bars coloured by kind, critical-path events outlined; ms from the step start."""
    if not _has(df, "source", "lane", "start_ms", "dur_ms"):
        return []
    d, note = _longest(df, "start_ms", "dur_ms", "events")
    if d.empty:
        return []
    d = d.assign(_y=[f"{_label(lane)} · {src}" for lane, src
                     in zip(d["lane"], d["source"], strict=True)])
    order = sorted(d["_y"].unique(), key=lambda y: (
        y.split(" · ")[0], {"measured": 0, "predicted": 1}.get(y.split(" · ")[-1], 2)))
    fig = go.Figure()
    colors = {"kernel": "#1f77b4", "memcpy": "#9467bd", "memset": "#8c564b",
              "collective": "#ff7f0e"}
    for src, g in d.groupby("source", sort=False):
        for kind, gk in g.groupby("kind", sort=True):
            crit = gk["critical"].astype(bool).to_numpy() if "critical" in gk else None
            color = "#d62728" if src == "critical path" else colors.get(str(kind), "#7f7f7f")
            hover = [f"{_label(n, HOVER_CHARS)}<br>{_label(kind)} · {_label(src)}<br>"
                     f"start {a:.3f} ms, dur {b:.4f} ms" for n, a, b
                     in zip(gk["name"], gk["start_ms"], gk["dur_ms"], strict=True)]
            line = ({"width": np.where(crit, 2, 0).tolist(), "color": "#d62728"}
                    if crit is not None and src != "critical path" else {"width": 0})
            fig.add_trace(go.Bar(base=gk["start_ms"], x=gk["dur_ms"], y=gk["_y"],
                                 orientation="h", name=_label(f"{src}: {kind}"),
                                 hovertext=hover, hoverinfo="text", width=0.7,
                                 marker={"color": color, "line": line}))
    fig.update_yaxes(categoryorder="array", categoryarray=order, autorange="reversed")
    fig = _layout(fig, "Device work per rank and stream, measured and predicted; critical "
                  f"path in red{note}", x="ms from the step start", barmode="overlay",
                  height=max(320, 22 * len(order) + 220))
    fig.update_layout(margin={"l": 60, "r": 30, "t": 160, "b": 50})  # room for the legend
    return [fig]


def _share_chart(go: Any, df: pd.DataFrame, title: str) -> list[Any]:
    val = _first(df, "share_pct", "time_ns")
    if val is None:
        return []
    skip = {"time_ns", "share_pct"}
    key = next((c for c in df.columns if c not in skip), None)
    if key is None:
        return []
    d = df.assign(_v=_num(df[val])).dropna(subset=["_v"]).sort_values("_v").tail(30)
    labels = (_rank_labels(d[key]) if key == "rank" else [_label(k, 60) for k in d[key]])
    hover = [f"{_label(k, HOVER_CHARS)}<br>{v:.2f}" + (" %" if val == "share_pct" else " ns")
             + (f"<br>{float(t) / 1e6:.3f} ms" if "time_ns" in d.columns else "")
             for k, v, t in zip(d[key], d["_v"], d["time_ns"] if "time_ns" in d.columns
                                else d["_v"], strict=True)]
    fig = go.Figure(go.Bar(x=d["_v"], y=labels, orientation="h", hovertext=hover,
                           hoverinfo="text", marker={"color": "#1f77b4"}))
    fig.update_yaxes(automargin=True)
    return [_layout(fig, title, x="share %" if val == "share_pct" else "ns",
                    height=max(300, 24 * len(d) + 120))]


def _chart_cp_family(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    return _share_chart(go, df, "Critical path time by op family")


def _chart_cp_rank(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    return _share_chart(go, df, "Critical path time by rank")


def _chart_straggler_flags(go: Any, df: pd.DataFrame,
                           tables: dict[str, pd.DataFrame]) -> list[Any]:
    score = _first(df, "score")
    if "rank" not in df.columns or score is None:
        return []
    d = df.assign(_v=_num(df[score])).dropna(subset=["_v"])
    if d.empty:
        return []
    kind = _first(d, "kind")
    fig = go.Figure()
    groups = d.groupby(kind, sort=True, dropna=False) if kind else [("flag", d)]
    for i, (k, g) in enumerate(groups):
        hover = []
        for _, r in g.iterrows():
            h = [f"rank {_label(r['rank'])}", f"kind {_label(k)}", f"score {r['_v']:.3g}"]
            if "iteration" in g.columns:
                h.append(f"iteration {_label(r['iteration'])}")
            if "evidence" in g.columns:
                h.append(_label(r["evidence"], HOVER_CHARS))
            hover.append("<br>".join(h))
        fig.add_trace(go.Scatter(x=_rank_labels(g["rank"]), y=g["_v"], mode="markers",
                                 name=_label(k), hovertext=hover, hoverinfo="text",
                                 marker={"size": 10, "color": _PALETTE[i % len(_PALETTE)]}))
    try:
        order = _rank_labels(sorted(d["rank"].unique()))
    except TypeError:
        order = _rank_labels(d["rank"].unique())
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=order)
    return [_layout(fig, "Straggler flags: score per rank", x="rank", y="score")]


_LATENESS = ("lateness_ns", "mean_lateness_ns", "late_ns", "mean_late_ns", "lateness_mean_ns",
             "total_lateness_ns", "delay_ns", "mean_delay_ns", "excess_ns", "slowdown_ns",
             "lateness_pct", "slowdown_pct", "lateness", "score")


def _chart_straggler_ranks(go: Any, df: pd.DataFrame,
                           tables: dict[str, pd.DataFrame]) -> list[Any]:
    if "rank" not in df.columns:
        return []
    val = _first(df, *_LATENESS)
    if val is None:
        val = next((c for c in df.columns if c not in ("rank", "iteration")
                    and pd.api.types.is_numeric_dtype(df[c])), None)
    if val is None:
        return []
    cols = ["rank", *(c for c in ("iteration",) if c in df.columns)]
    d = df[cols].assign(_v=_num(df[val]))
    g = d.groupby("rank", as_index=False)["_v"].mean().sort_values("rank")
    is_ns = isinstance(val, str) and val.endswith("_ns")
    y = g["_v"] / 1e6 if is_ns else g["_v"]
    fig = go.Figure(_bar(go, _rank_labels(g["rank"]), y, str(val), "#d62728"))
    unit = "ms" if is_ns else str(val)
    return [_layout(fig, f"Lateness per rank ({val})", x="rank", y=unit)]


def _chart_prediction(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    if not _has(df, "measured_ns", "predicted_ns") or "rank" not in df.columns:
        return []
    df = _sort_rank_iter(df)
    if len(df) > MAX_BARS:
        cols = ["measured_ns", "predicted_ns"] + (["error_pct"] if "error_pct" in df.columns
                                                  else [])
        df = df.groupby("rank", as_index=False)[cols].mean(numeric_only=True)
        x, xt = _rank_labels(df["rank"]), "rank (mean over iterations)"
    else:
        x, xt = _x_rank_iter(df)
    fig = go.Figure()
    fig.add_trace(_bar(go, x, _ms(df["measured_ns"]), "measured", _COLORS["measured"]))
    fig.add_trace(_bar(go, x, _ms(df["predicted_ns"]), "predicted", _COLORS["predicted"]))
    if "error_pct" in df.columns:
        fig.add_trace(go.Scatter(x=x, y=_num(df["error_pct"]), name="error %", mode="markers",
                                 yaxis="y2", marker={"color": _COLORS["error"],
                                                     "symbol": "diamond", "size": 8}))
        err = _num(df["error_pct"]).abs().max()
        lim = 1.25 * float(err) if pd.notna(err) and err > 0 else 1.0
        fig.update_layout(yaxis2={"title": {"text": "error %"}, "overlaying": "y",
                                  "side": "right", "showgrid": False, "zeroline": True,
                                  "range": [-lim, lim]})
    return [_layout(fig, "Measured vs predicted step time", x=xt, y="ms", barmode="group")]


#: table name -> chart builder
CHARTS: dict[str, _Chart] = {
    "timeline": _chart_timeline,
    "breakdown": _chart_breakdown,
    "breakdown_by_rank": _chart_breakdown,
    "idle": _chart_idle,
    "op_breakdown": _chart_op_breakdown,
    "top_kernels": _chart_top_kernels,
    "collectives": _chart_collectives,
    "critical_path": _chart_critical_path,
    "critical_path_by_family": _chart_cp_family,
    "critical_path_by_rank": _chart_cp_rank,
    "stragglers_flags": _chart_straggler_flags,
    "stragglers_ranks": _chart_straggler_ranks,
    "prediction": _chart_prediction,
}


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


def _figure_html(fig: Any, div_id: str) -> str:
    import plotly.io as pio

    fig_json = _script_safe(pio.to_json(fig, validate=False, pretty=False))
    return (f'<div id="{div_id}" class="plotly-graph-div tc-chart"></div>\n'
            f"<script>(function(){{var f={fig_json};"
            f'Plotly.newPlot("{div_id}",f.data,f.layout,{_PLOTLY_CONFIG});}})();</script>')


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
    try:
        import plotly.graph_objects as go
        from plotly.offline import get_plotlyjs
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
                    divs = [_figure_html(fig, f"chart-{_slug(sid)}-{n_charts + i + 1}")
                            for i, fig in enumerate(figs)]
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
    plotly_js = "" if n_charts == 0 else (
        "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
        f"<script>{get_plotlyjs()}</script>\n")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_esc(title)}</title><style>{_CSS}</style>\n{plotly_js}</head>\n"
            f"<body>{header}\n<main>{''.join(body)}</main>\n"
            f"<script>{_SORT_JS}</script></body></html>\n")
