"""Chart builders of the HTML report and of :func:`traincast.report.figures.figures`.

:data:`CHARTS` maps an analysis table's name to a builder ``(go, df, tables) -> [Figure]``:
``go`` is ``plotly.graph_objects``, ``df`` the table, ``tables`` all tables of the report
(a chart may read a sibling table, e.g. the step starts of the timeline). A builder picks its
columns by name and returns no figure when the columns it needs are missing. Times are shown
in ms (columns in ns). Every string given to plotly is shortened and HTML-escaped
(:func:`_label`): plotly renders a subset of HTML in labels and decodes entities back to the
original text, and event names are untrusted.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from traincast.report.lanes import (
    GANTT_RANKS,
    MAX_FLAGS,
    MAX_GANTT_EVENTS,
    MAX_RANKS,
    longest,
    pick_ranks,
    ranks_note,
    sampled_note,
)
from traincast.report.tables import display_name

#: bars (rows) drawn per-iteration before a chart falls back to per-rank means
MAX_BARS = 1500
#: characters of a name shown in chart labels / hover text (tables show the full name)
LABEL_CHARS = 80
HOVER_CHARS = 200
#: characters of a kernel's full (templated) name in hover text
FULL_NAME_CHARS = 1000

_COLORS = {
    "compute": "#2ca02c", "exposed comm": "#d62728", "memory": "#9467bd", "idle": "#b0b0b0",
    "other": "#8c564b", "measured": "#1f77b4", "predicted": "#ff7f0e", "error": "#444444",
}
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
            "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363"]


def _label(v: Any, n: int = LABEL_CHARS) -> str:
    """A string for a plotly label: shortened, then escaped (plotly decodes entities)."""
    s = "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
    if len(s) > n:
        s = s[: n - 1] + "\u2026"
    return html.escape(s, quote=True)


def _val(v: Any) -> str:
    """A value for hover text: floats to 4 significant digits, anything else as a label."""
    if isinstance(v, (float, np.floating)) and math.isfinite(v):
        return f"{float(v):.4g}"
    return _label(v)


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


def _few_ranks(df: pd.DataFrame, score: pd.Series, by: str,
               words: tuple[str, str] = ("slowest", "fastest")) -> tuple[pd.DataFrame, str]:
    """``df``'s rows of at most :data:`~traincast.report.lanes.MAX_RANKS` representative
    ranks by ``score`` (per rank, see :func:`~traincast.report.lanes.pick_ranks`), and the
    note saying which (empty when all ranks are kept)."""
    ranks, roles = pick_ranks(score, MAX_RANKS, words=words)
    if not roles:
        return df, ""
    return df[df["rank"].isin(ranks)], ranks_note(len(ranks), len(score), roles, by)


def _noted(fig: Any, notes: list[str], full: str = "the table below (first rows) and "
           "--format json") -> Any:
    """``fig`` with the note on what it left out (``layout.meta.tc_note``, shown by the HTML
    report) and a title saying there is one."""
    note = sampled_note(notes, full)
    if note:
        fig.update_layout(meta={"tc_note": note},
                          title_text=f"{fig.layout.title.text} (sampled: see the note)")
    return fig


# ---------------------------------------------------------------------------- charts
# each chart function: (go, df, all tables) -> list of figures (possibly empty)

_Chart = Callable[[Any, pd.DataFrame, dict[str, pd.DataFrame]], list[Any]]


def _chart_breakdown(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    parts = [(c, n) for c, n in (("compute_ns", "compute"), ("comm_exposed_ns", "exposed comm"),
                                 ("memory_ns", "memory"), ("idle_ns", "idle"))
             if c in df.columns]
    if "rank" not in df.columns or not parts:
        return []
    busy = df[[c for c, n in parts if n != "idle"] or [parts[0][0]]].apply(_num).sum(axis=1)
    df, note = _few_ranks(df, busy.groupby(df["rank"]).mean(), "busy time")
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
    return [_noted(_layout(fig, f"Step window {what}: compute / exposed comm / memory / idle",
                           x=xt, y="ms", barmode="stack"), [note])]


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
    g, note = _few_ranks(g, g.set_index("rank")[causes].sum(axis=1), "idle time",
                         ("most idle", "least idle"))
    x = _rank_labels(g["rank"])
    fig = go.Figure()
    for i, c in enumerate(causes):
        fig.add_trace(_bar(go, x, _ms(g[c]), c[:-3].replace("_", " "),
                           _PALETTE[i % len(_PALETTE)]))
    ylab = f"ms per iteration (mean of {n_iter})" if n_iter > 1 else "ms"
    return [_noted(_layout(fig, "GPU idle time by cause, per rank", x="rank", y=ylab,
                           barmode="stack"), [note])]


def _chart_op_breakdown(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    fam = _first(df, "op_family", "family")
    val = _first(df, "share_pct", "total_ns")
    if "rank" not in df.columns or fam is None or val is None:
        return []
    data = df[["rank", fam]].copy()
    data["v"] = _num(df[val]) if val == "share_pct" else _ms(df[val])
    total = _num(df["total_ns"]) if "total_ns" in df.columns else data["v"]
    data, note = _few_ranks(data, total.groupby(df["rank"]).sum(), "device time",
                            ("most device time", "least device time"))
    pv = data.pivot_table(index="rank", columns=fam, values="v", aggfunc="sum", fill_value=0)
    pv = pv[pv.sum().sort_values(ascending=False).index]
    x = _rank_labels(pv.index)
    fig = go.Figure()
    for i, f in enumerate(pv.columns):
        fig.add_trace(_bar(go, x, pv[f].to_numpy(), str(f), _PALETTE[i % len(_PALETTE)]))
    ylab = "share of device time %" if val == "share_pct" else "ms"
    return [_noted(_layout(fig, "Op family share per rank", x="rank", y=ylab,
                           barmode="stack"), [note])]


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
                         else f"{c} {_val(v)}")
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
                             else f"{c} {_val(v)}")
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


def _rows(*cols: list) -> np.ndarray:
    """Per-point ``customdata`` rows from columns (an object array: plotly validates it
    faster than nested lists)."""
    out = np.empty((len(cols[0]), len(cols)), dtype=object)
    for j, c in enumerate(cols):
        out[:, j] = c
    return out


def _gantt_note(notes: list[str], full: str) -> tuple[str, dict[str, Any]]:
    """The title suffix and the ``layout.meta`` holding the note the HTML report shows."""
    note = sampled_note(notes, full)
    return (" (sampled: see the note)" if note else ""), ({"tc_note": note} if note else {})


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
    d = df.assign(_s=s, _d=dur).dropna(subset=["_s", "_d"])
    if d.empty:
        return []
    t0 = _step_start(d, tables, start)  # of the whole path, before any selection
    notes = []
    per_rank = d.groupby("rank")["_d"].sum()
    ranks, roles = pick_ranks(per_rank, GANTT_RANKS)
    if roles:
        d = d[d["rank"].isin(ranks)]
        notes.append(ranks_note(len(ranks), len(per_rank), roles, "time on the path"))
    n = len(d)
    d = longest(d, "_d", MAX_GANTT_EVENTS)
    if len(d) < n:
        notes.append(f"showing the {len(d):,} longest of {n:,} segments")
    suffix, meta = _gantt_note(notes, "the critical_path table (--format json), or "
                               "traincast analyze DIR --critical-path-out FILE.json (Perfetto)")
    # subtract before converting to float: epoch ns do not fit a float64 exactly
    d = d.assign(_rel=(d["_s"] - t0).astype("float64") / 1e6,
                 _dms=d["_d"].astype("float64") / 1e6)
    color_col = _first(d, "edge_kind", "category", "kind")
    try:
        ranks = sorted(d["rank"].unique())
    except TypeError:
        ranks = list(d["rank"].unique())
    fig = go.Figure()
    groups = d.groupby(color_col, sort=True, dropna=False) if color_col else [("path", d)]
    sub = [c for c in ("kind", "op_family") if c in d.columns]
    for i, (k, g) in enumerate(groups):
        # per point [name, kind · family, dur]; the rest of the hover text per trace
        names = ([_label(v, FULL_NAME_CHARS) for v in g["name"]] if "name" in g.columns
                 else [""] * len(g))
        kinds = ([" \u00b7 ".join(_label(v) for v in row) for row
                  in zip(*(g[c] for c in sub), strict=True)] if sub else [""] * len(g))
        extra = f"<br>{color_col} {_label(k)}" if color_col else ""
        fig.add_trace(go.Bar(
            base=g["_rel"].to_numpy(), x=g["_dms"].to_numpy(), y=_rank_labels(g["rank"]),
            orientation="h",
            name=_label(k), width=0.6, marker={"color": _PALETTE[i % len(_PALETTE)],
                                               "line": {"width": 0}},
            customdata=_rows(names, kinds, g["_dms"].tolist()),
            hovertemplate=("%{customdata[0]}<br>%{customdata[1]}" + extra
                           + "<br>%{y}, start %{base:.3f} ms, "
                           "dur %{customdata[2]:.4f} ms<extra></extra>")))
    fig.update_yaxes(categoryorder="array", categoryarray=_rank_labels(ranks),
                     autorange="reversed")
    fig = _layout(fig, f"Critical path over time, coloured by {color_col or 'segment'}{suffix}",
                  x="ms from the step start", y="rank",
                  barmode="overlay", height=max(300, 60 * len(ranks) + 160))
    fig.update_layout(meta=meta)
    return [fig]


def _chart_timeline(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    """Gantt of :func:`traincast.analysis.timeline.step_timeline`: one lane per rank and
    stream for each source (measured, predicted) and one per rank for the critical path;
    bars coloured by kind, critical-path events outlined; ms from the step start. Many ranks:
    :data:`~traincast.report.lanes.GANTT_RANKS` of them (the critical path's, the busiest,
    the median and the least busy); many events: the longest
    :data:`~traincast.report.lanes.MAX_GANTT_EVENTS`; a note says so."""
    if not _has(df, "source", "lane", "start_ms", "dur_ms"):
        return []
    d = df.dropna(subset=["start_ms", "dur_ms"])
    if d.empty:
        return []
    notes = []
    if "rank" in d.columns:
        meas = d[d["source"] == "measured"]
        busy = (meas if len(meas) else d).groupby("rank")["dur_ms"].sum()
        busy = busy.reindex(pd.Index(d["rank"].unique())).fillna(0.0)
        path = d[d["source"] == "critical path"].groupby("rank")["dur_ms"].sum()
        keep = list(path.sort_values(ascending=False).index[: GANTT_RANKS // 2])
        ranks, roles = pick_ranks(busy, GANTT_RANKS, keep=keep)
        if roles:
            d = d[d["rank"].isin(ranks)]
            notes.append(ranks_note(len(ranks), len(busy), roles, "device busy time"))
    n = len(d)
    d = longest(d, "dur_ms", MAX_GANTT_EVENTS)
    if len(d) < n:
        notes.append(f"showing the {len(d):,} longest of {n:,} events")
    suffix, meta = _gantt_note(notes, "traincast predict DIR --timeline-out FILE.json (the "
                               "predicted timeline, Perfetto), the traces themselves (measured)"
                               ", --critical-path-out FILE.json (the critical path)")
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
            line = ({"width": np.where(crit, 2, 0).tolist(), "color": "#d62728"}
                    if crit is not None and src != "critical path" else {"width": 0})
            dur = gk["dur_ms"].to_numpy(dtype="float64")
            fig.add_trace(go.Bar(
                base=gk["start_ms"].to_numpy(dtype="float64"), x=dur, y=gk["_y"].tolist(),
                orientation="h", name=_label(f"{src}: {kind}"), width=0.7,
                marker={"color": color, "line": line},
                customdata=_rows([_label(v, HOVER_CHARS) for v in gk["name"]], dur.tolist()),
                hovertemplate=(f"%{{customdata[0]}}<br>{_label(kind)} · {_label(src)}<br>"
                               "start %{base:.3f} ms, dur %{customdata[1]:.4f} ms"
                               "<extra></extra>")))
    fig.update_yaxes(categoryorder="array", categoryarray=order, autorange="reversed")
    fig = _layout(fig, "Device work per rank and stream, measured and predicted; critical "
                  f"path in red{suffix}", x="ms from the step start", barmode="overlay",
                  height=max(320, 22 * len(order) + 220))
    fig.update_layout(margin={"l": 60, "r": 30, "t": 160, "b": 50}, meta=meta)
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
    n = len(d)
    d = d.nlargest(MAX_FLAGS, "_v") if n > MAX_FLAGS else d
    note = f"showing the {len(d):,} highest-scored of {n:,} flags" if len(d) < n else ""
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
    return [_noted(_layout(fig, "Straggler flags: score per rank", x="rank", y="score"),
                   [note])]


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
    g, note = _few_ranks(g, g.set_index("rank")["_v"], str(val), ("latest", "least late"))
    is_ns = isinstance(val, str) and val.endswith("_ns")
    y = g["_v"] / 1e6 if is_ns else g["_v"]
    fig = go.Figure(_bar(go, _rank_labels(g["rank"]), y, str(val), "#d62728"))
    unit = "ms" if is_ns else str(val)
    return [_noted(_layout(fig, f"Lateness per rank ({val})", x="rank", y=unit), [note])]


def _chart_prediction(go: Any, df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[Any]:
    if not _has(df, "measured_ns", "predicted_ns") or "rank" not in df.columns:
        return []
    df, note = _few_ranks(df, _num(df["measured_ns"]).groupby(df["rank"]).mean(),
                          "measured step")
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
    return [_noted(_layout(fig, "Measured vs predicted step time", x=xt, y="ms",
                           barmode="group"), [note])]


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
