"""Compact figure JSON for the HTML report, and the one plotly.js library it inlines.

:func:`encode_figure` turns a plotly figure into the JSON object the report's page script
:data:`RUNTIME_JS` (``tcPlot(id, f)``) expands back into plotly's ``data`` and ``layout``:

- floats rounded to :data:`SIGNIFICANT` significant digits of the largest value of their
  array (times drawn in ms keep at least µs resolution; no 17-digit floats);
- per-point string arrays (``x``, ``y``, ``text``, ``hovertext``, ``customdata``) with repeats
  are written as ``{"tcs": [index, ...]}`` into one string table per figure (``f.tc.s``);
  a two-dimensional ``customdata`` is written by column (``{"tcc": [column, ...]}``), a column
  equal to the trace's ``x`` as the string ``"x"``;
- the layout template (the same ~7 kB for every chart) is written once per page
  (``TC_TPL[f.tc.tpl]``).

:func:`plotly_js` picks the library: plotly.js's *basic* bundle (bar, pie and scatter traces,
1.2 MB, shipped in ``assets/`` with its MIT license ``plotly-basic.LICENSE.txt``) when every
trace is of those types, else the full bundle of the installed ``plotly`` package (4.8 MB).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

#: significant digits kept of each float array (relative to its largest magnitude)
SIGNIFICANT = 6
#: trace types of plotly.js's basic bundle
BASIC_TRACES = frozenset({"bar", "pie", "scatter"})
#: the basic bundle (plotly.js-basic-dist-min, the version of the full bundle it stands for)
BASIC_BUNDLE = Path(__file__).with_name("assets") / "plotly-basic.min.js"
#: trace keys whose per-point strings are written through the string table
_STRING_KEYS = ("x", "y", "text", "hovertext", "customdata")
#: shortest string array worth a table
_MIN_TABLE = 8

#: defines ``tcPlot(id, f)``: expands :func:`encode_figure`'s output and draws it
RUNTIME_JS = """
function tcPlot(id,f,cfg){var c=f.tc||{},s=c.s||[];
function u(v){return (v&&v.tcs)?v.tcs.map(function(i){return s[i];}):v;}
f.data.forEach(function(t){["x","y","text","hovertext"].forEach(function(k){
if(t[k]!==undefined){t[k]=u(t[k]);}});var d=t.customdata;
if(d&&d.tcc){var cols=d.tcc.map(function(v){return typeof v==="string"?t[v]:u(v);});
t.customdata=cols[0].map(function(_,i){return cols.map(function(col){return col[i];});});}
else if(d!==undefined){t.customdata=u(d);}});
if(c.tpl!==undefined){f.layout.template=TC_TPL[c.tpl];}
Plotly.newPlot(id,f.data,f.layout,cfg);}
"""


def plotly_js(trace_types: Iterable[str]) -> str:
    """The plotly.js source to inline: the basic bundle when it draws every type in
    ``trace_types`` (and is installed), else the full one of the ``plotly`` package."""
    if set(trace_types) <= BASIC_TRACES and BASIC_BUNDLE.is_file():
        return BASIC_BUNDLE.read_text(encoding="utf-8")
    from plotly.offline import get_plotlyjs  # lazy: reads the 4.8 MB bundle, rarely needed

    return get_plotlyjs()


def trace_types(fig: dict) -> set[str]:
    """The trace types of a figure dict (plotly's default is ``scatter``)."""
    return {str(t.get("type", "scatter")) for t in fig.get("data", ())}


def _round(a: np.ndarray) -> list:
    """Floats to :data:`SIGNIFICANT` digits of the largest finite magnitude (NaN/inf: None)."""
    a = a.astype("float64", copy=False)
    fin = np.isfinite(a)
    m = float(np.abs(a[fin]).max()) if fin.any() else 0.0
    dec = 0 if m == 0 else min(12, max(0, SIGNIFICANT - 1 - math.floor(math.log10(m))))
    r = np.round(a, dec)
    out = r.tolist()
    if not fin.all():
        out = [v if ok else None for v, ok in zip(out, fin.tolist(), strict=True)]
    return out


def _plain(v: Any) -> Any:
    """JSON-ready: numpy arrays and scalars to lists and Python numbers, floats rounded."""
    if isinstance(v, np.ndarray):
        if v.dtype.kind == "f":
            return _round(v)
        if v.dtype.kind in "iub":
            return v.tolist()
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, dict):
        if "bdata" in v and "dtype" in v:  # plotly's typed array (base64 of the raw values)
            a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
            if "shape" in v:
                a = a.reshape([int(n) for n in str(v["shape"]).split(",")])
            return _plain(a)
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, float) for x in v):
            return _round(np.asarray(v, dtype="float64"))
        return [_plain(x) for x in v]
    if isinstance(v, np.floating):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def encode(self, v: Any) -> Any:
        """A 1-D list of strings with repeats as ``{"tcs": [...]}``, anything else as is."""
        if (not isinstance(v, list) or len(v) < _MIN_TABLE
                or not all(isinstance(x, str) for x in v) or len(set(v)) == len(v)):
            return v
        return {"tcs": [self.index.setdefault(x, len(self.index)) for x in v]}


def _columns(trace: dict, rows: list, strings: _Strings) -> Any:
    """A 2-D customdata by column (see the module docstring); rows as is when ragged."""
    n = len(rows[0]) if rows and isinstance(rows[0], list) else 0
    if n == 0 or any(not isinstance(r, list) or len(r) != n for r in rows):
        return strings.encode(rows)
    cols = []
    for j in range(n):
        col = [r[j] for r in rows]
        if all(isinstance(v, (int, float)) or v is None for v in col):
            col = _round(np.asarray([np.nan if v is None else v for v in col], "float64"))
        cols.append("x" if col == trace.get("x") else strings.encode(col))
    return {"tcc": cols}


def encode_figure(fig: Any, templates: list[str]) -> bytes:
    """The JSON text (UTF-8) of ``fig`` (a plotly Figure or its dict) in the compact form
    :data:`RUNTIME_JS` expands; its layout template is appended to ``templates`` (JSON
    texts, shared by the page) unless already there."""
    d = fig if isinstance(fig, dict) else fig.to_plotly_json()
    strings = _Strings()
    data = []
    for t in d.get("data", ()):
        t = _plain(dict(t))
        for k in _STRING_KEYS:
            v = t.get(k)
            if k == "customdata" and isinstance(v, list) and v and isinstance(v[0], list):
                t[k] = _columns(t, v, strings)
            elif v is not None:
                t[k] = strings.encode(v)
        data.append(t)
    layout = _plain(dict(d.get("layout", {})))
    tc: dict[str, Any] = {}
    tpl = layout.pop("template", None)
    if tpl is not None:
        text = orjson.dumps(tpl).decode()
        if text not in templates:
            templates.append(text)
        tc["tpl"] = templates.index(text)
    if strings.index:
        tc["s"] = list(strings.index)
    out: dict[str, Any] = {"data": data, "layout": layout}
    if tc:
        out["tc"] = tc
    return orjson.dumps(out, default=_default)


def _default(v: Any) -> Any:
    """What orjson cannot write itself: via plotly's own encoder's rules where it can."""
    if hasattr(v, "tolist"):
        return _plain(v.tolist())
    if hasattr(v, "to_plotly_json"):
        return _plain(v.to_plotly_json())
    return str(v)
