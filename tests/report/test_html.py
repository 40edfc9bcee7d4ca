"""HTML report: offline, one plotly.js, every section, untrusted names escaped, size bounded,
sampling noted; real Chromium.

The Chromium tests need ``/usr/bin/chromium`` (Debian: ``apt-get install -y chromium``) and
skip when it is absent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("plotly", reason="the HTML report needs plotly")

import traincast  # noqa: E402
from traincast.cli import main  # noqa: E402
from traincast.report.html import MAX_TABLE_ROWS, render_html  # noqa: E402
from traincast.report.lanes import GANTT_RANKS, MAX_GANTT_EVENTS, MAX_RANKS  # noqa: E402

# payloads: each must show up as text and never run
XSS_SCRIPT = "<script>window.__pwned=1</script>"
XSS_IMG = '</script><img src=x onerror="window.__pwned=1">'
# variants whose effect a DOM dump can see if they ever ran
XSS_DOM_SCRIPT = "<script>document.documentElement.setAttribute('data-pwned','1')</script>"
XSS_DOM_IMG = ("</script><img src=x onerror=\"document.documentElement"
               ".setAttribute('data-pwned','2')\">")
XSS_TITLE = "<script>document.title='PWNED'</script>"
PAYLOADS = [XSS_SCRIPT, XSS_IMG, XSS_DOM_SCRIPT, XSS_DOM_IMG]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_JS_ERROR = re.compile(r"Uncaught|SyntaxError|ReferenceError|TypeError|RangeError")


# ---------------------------------------------------------------------------- inputs


def _dlrm_tables(traces: Path) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Real tables from the DLRM 8xV100 traces; optional analyses joined when they run."""
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    tables = traincast.analyze(ts, "breakdown,idle,prediction")
    notes = []
    for what in ("kernels", "collectives", "critical_path", "stragglers"):
        try:
            tables.update(traincast.analyze(ts, what))
        except Exception as exc:  # a module being written by others: skip that part
            notes.append(f"{what}: {type(exc).__name__}: {exc}")
    return tables, notes


def _synthetic_tables(names: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """Hand-made tables following the column contracts, untrusted names in the string cells."""
    names = names or ["fused_gemm_kernel", "ncclKernel_AllReduce", *PAYLOADS]
    rng = np.random.default_rng(0)
    ranks, iters = range(4), (10, 11)
    rows = []
    for it in iters:
        for r in ranks:
            c, e, m, i = (int(x) for x in rng.integers(1_000_000, 5_000_000, 4))
            w = c + e + m + i
            rows.append({"rank": r, "iteration": it, "start": 1_694_128_201_000_000_000 + it,
                         "end": 1_694_128_201_000_000_000 + it + w, "window_ns": w,
                         "compute_ns": c, "comm_ns": e + 100_000,
                         "comm_overlapped_ns": 100_000, "comm_exposed_ns": e, "memory_ns": m,
                         "non_compute_ns": e + m, "idle_ns": i, "compute_pct": 100 * c / w,
                         "non_compute_pct": 100 * (e + m) / w, "idle_pct": 100 * i / w,
                         "overlap_pct": 100 * 100_000 / (e + 100_000), "source": "device"})
    breakdown = pd.DataFrame(rows)
    by_rank = breakdown.groupby("rank", as_index=False).first().assign(iteration=-1)
    idle = pd.DataFrame([{"rank": r, "iteration": it, "idle_ns": 4_000_000, "host_ns": 2_000_000,
                          "data_loading_ns": 500_000, "peer_wait_ns": 1_000_000,
                          "stream_dep_ns": 300_000, "other_ns": 200_000,
                          "comm_wait_ns": 900_000, "gaps": 17}
                         for it in iters for r in ranks])
    fams = ["gemm", "comm", "elementwise", XSS_SCRIPT]
    op_breakdown = pd.DataFrame([{"rank": r, "op_family": f, "count": 10, "total_ns": 10**6 * (j + 1),
                                  "mean_ns": 10**5, "p50_ns": 10**5, "p90_ns": 2 * 10**5,
                                  "p99_ns": 3 * 10**5, "share_pct": 10.0 * (j + 1),
                                  "source": "device"}
                                 for r in ranks for j, f in enumerate(fams)])
    top_kernels = pd.DataFrame([{"name": n, "kind": "kernel", "op_family": "gemm", "count": 5 + j,
                                 "ranks": 4, "total_ns": 10**6 * (len(names) - j),
                                 "mean_ns": 10**5, "p50_ns": 10**5, "p90_ns": 10**5,
                                 "p99_ns": 10**5, "share_pct": 5.0}
                                for j, n in enumerate(names)])
    collectives = pd.DataFrame([{"collective": c, "process_group": "0", "group_size": 4,
                                 "size_bytes": s, "count": 8, "total_ns": 8 * 10**5,
                                 "mean_ns": 10**5, "mean_transfer_ns": 9 * 10**4,
                                 "algbw_gbps": s / 9e4, "busbw_gbps": 1.5 * s / 9e4,
                                 "arrival_skew_mean_ns": 1000, "arrival_skew_max_ns": 5000,
                                 "ranks": 4}
                                for c in ("all_reduce", "all_to_all", XSS_IMG)
                                for s in (1024, 1 << 20, 64 << 20)])
    path = []
    t = 1_694_128_201_000_000_000
    kinds = ["THREAD", "LAUNCH", "EXEC", "COLLECTIVE"]
    for k in range(40):
        d = 50_000 + 10_000 * (k % 7)
        path.append({"order": k, "rank": k % 3, "event": 1000 + k, "name": names[k % len(names)],
                     "kind": "kernel", "op_family": "gemm", "edge_kind": kinds[k % 4],
                     "start_ns": t, "end_ns": t + d, "dur_ns": d})
        t += d
    by_family = pd.DataFrame({"op_family": ["gemm", "comm", XSS_DOM_IMG],
                              "time_ns": [3_000_000, 1_000_000, 500_000],
                              "share_pct": [66.7, 22.2, 11.1]})
    by_rank_cp = pd.DataFrame({"rank": [0, 1, 2], "time_ns": [2_000_000, 1_500_000, 1_000_000],
                               "share_pct": [44.4, 33.3, 22.2]})
    flags = pd.DataFrame([{"rank": 2, "iteration": 10, "kind": "slow_compute", "score": 3.2,
                           "evidence": XSS_DOM_SCRIPT},
                          {"rank": 3, "iteration": 11, "kind": XSS_IMG, "score": 2.1,
                           "evidence": XSS_SCRIPT}])
    s_ranks = pd.DataFrame({"rank": list(ranks), "lateness_ns": [0, 100_000, 2_000_000, 50_000],
                            "flags": [0, 0, 1, 1]})
    imbalance = pd.DataFrame({"iteration": list(iters), "max_over_mean": [1.2, 1.1]})
    prediction = pd.DataFrame([{"rank": r, "iteration": it, "measured_ns": 14_000_000 + r,
                                "predicted_ns": 13_900_000, "error_pct": -0.7,
                                "compute_ns": 10**6, "exposed_comm_ns": 5 * 10**6,
                                "host_idle_ns": 7 * 10**6, "other_ns": 9 * 10**5}
                               for it in iters for r in ranks])
    return {"breakdown": breakdown, "breakdown_by_rank": by_rank, "idle": idle,
            "op_breakdown": op_breakdown, "top_kernels": top_kernels, "collectives": collectives,
            "critical_path": pd.DataFrame(path), "critical_path_by_family": by_family,
            "critical_path_by_rank": by_rank_cp, "stragglers_flags": flags,
            "stragglers_ranks": s_ranks, "stragglers_imbalance": imbalance,
            "prediction": prediction}


#: section id -> tables that put it on the page
SECTION_OF = {"breakdown": "breakdown", "breakdown_by_rank": "breakdown", "idle": "idle",
              "op_breakdown": "kernels", "top_kernels": "kernels", "collectives": "collectives",
              "critical_path": "critical_path", "critical_path_by_family": "critical_path",
              "critical_path_by_rank": "critical_path", "stragglers_flags": "stragglers",
              "stragglers_ranks": "stragglers", "stragglers_imbalance": "stragglers",
              "prediction": "prediction"}


# ---------------------------------------------------------------------------- helpers

_SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S | re.I)


def _scripts(doc: str) -> list[tuple[str, str]]:
    return _SCRIPT.findall(doc)


def _without_scripts(doc: str) -> str:
    return _SCRIPT.sub("", doc)


def _expand(f: dict) -> dict:
    """The page's ``tcPlot`` in Python: plotly's figure from the compact JSON."""
    tc = f.get("tc", {})
    strings = tc.get("s", [])

    def un(v: object) -> object:
        return [strings[i] for i in v["tcs"]] if isinstance(v, dict) and "tcs" in v else v

    for t in f["data"]:
        for k in ("x", "y", "text", "hovertext"):
            if k in t:
                t[k] = un(t[k])
        cd = t.get("customdata")
        if isinstance(cd, dict) and "tcc" in cd:
            cols = [t[c] if isinstance(c, str) else un(c) for c in cd["tcc"]]
            t["customdata"] = [list(r) for r in zip(*cols, strict=True)]
        elif cd is not None:
            t["customdata"] = un(cd)
    return f


def _figures(doc: str) -> dict[str, dict]:
    """Chart div id -> figure (plotly's data and layout), decoded from the page's scripts."""
    out = {}
    for m in re.finditer(r'<div id="(chart-[^"]+)" class="[^"]*"></div>\s*<script>'
                         r'tcPlot\("\1",(.*?),\{"responsive"', doc, re.S):
        out[m.group(1)] = _expand(json.loads(m.group(2)))
    return out


_LIBRARY = re.compile(r"/\*\*\s*\* plotly\.js (\(basic - minified\) )?v\d")


def _values(v: object) -> list:
    """A plotly data array: a list, or plotly's typed array ``{"dtype", "bdata"}``."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)  # type: ignore[call-overload]


def _check_offline_and_structure(doc: str, tables: dict[str, pd.DataFrame]) -> None:
    assert len(_LIBRARY.findall(doc)) == 1, "plotly.js must be inlined exactly once"
    assert "plotly.js (basic - minified) v" in doc  # bar and scatter only: the small bundle
    for attrs, _ in _scripts(doc):
        assert "src" not in attrs.lower(), f"external script: {attrs}"
    assert not re.search(r"<link\b[^>]*href=[\"']?https?:", doc, re.I)
    assert not re.search(r"<(img|iframe)\b[^>]*src=[\"']?https?:", doc, re.I)
    n_open = len(re.findall(r"<script\b", doc, re.I))
    assert n_open == len(re.findall(r"</script>", doc, re.I)) == len(_scripts(doc))
    for name, df in tables.items():
        if len(df) == 0:
            continue
        sec = SECTION_OF.get(name)
        if sec:
            assert f'id="sec-{sec}"' in doc, sec
        assert f'id="table-{name}"' in doc, name


def _chromium(page: Path, tmp_path: Path) -> tuple[str, str, float]:
    """Load ``page`` in headless Chromium; returns (DOM after scripts, stderr log, seconds)."""
    import time

    prof = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={prof}",
           "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()]
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, timeout=240, env=env)
    dt = time.perf_counter() - t
    out, err = (p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))
    assert p.returncode == 0, f"chromium exit {p.returncode}: {err[-2000:]}"
    return out, err, dt


def _js_errors(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "CONSOLE" in ln and _JS_ERROR.search(ln)]


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (Debian: apt-get install -y chromium)")


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> tuple[dict[str, pd.DataFrame], str]:
    tables, _ = _dlrm_tables(traces)
    return tables, render_html(tables, title="traincast analyze: dlrm_8xv100")


@pytest.fixture(scope="module")
def full() -> tuple[dict[str, pd.DataFrame], str]:
    tables = _synthetic_tables()
    return tables, render_html(tables, title=f"synthetic {XSS_TITLE}")


# ---------------------------------------------------------------------------- static tests


def test_dlrm_report_offline_with_all_sections(dlrm: tuple[dict[str, pd.DataFrame], str]
                                               ) -> None:
    tables, doc = dlrm
    assert {"breakdown", "breakdown_by_rank", "idle", "prediction"} <= set(tables)
    _check_offline_and_structure(doc, tables)
    figs = _figures(doc)
    sections = {SECTION_OF[n] for n in tables if n in SECTION_OF}
    for sec in sections:  # every section with a known table draws at least one chart
        assert any(k.startswith(f"chart-{sec}-") for k in figs), sec
    # the breakdown chart stacks compute / exposed comm / memory / idle in ms
    bd = next(f for k, f in figs.items() if k.startswith("chart-breakdown-"))
    assert [t["name"] for t in bd["data"] if t["type"] == "bar"] == [
        "compute", "exposed comm", "memory", "idle"]
    first = tables["breakdown"].sort_values(["iteration", "rank"]).iloc[0]
    assert _values(bd["data"][0]["y"])[0] == pytest.approx(first["compute_ns"] / 1e6, abs=1e-3)
    # every rank's row of every table (< 200 rows here) is in the HTML tables
    for name, df in tables.items():
        body = doc.split(f'id="table-{name}"', 1)[1].split("</table>", 1)[0]
        assert body.count("<tr>") == min(len(df), MAX_TABLE_ROWS) + 1, name
    assert len(doc.encode()) < 2_000_000
    assert 'class="note sampled"' not in doc  # 8 ranks, a few thousand events: all drawn


def test_synthetic_report_every_section(full: tuple[dict[str, pd.DataFrame], str]) -> None:
    tables, doc = full
    _check_offline_and_structure(doc, tables)
    figs = _figures(doc)
    for sec in set(SECTION_OF.values()):
        assert f'id="sec-{sec}"' in doc
        assert any(k.startswith(f"chart-{sec}-") for k in figs), sec
    # collectives: one trace per collective type, log x
    coll = next(f for k, f in figs.items() if k.startswith("chart-collectives-"))
    assert len(coll["data"]) == 3 and coll["layout"]["xaxis"]["type"] == "log"
    # critical path: one trace per edge kind, segments start at 0 ms relative to the path
    cp = next(f for k, f in figs.items() if k.startswith("chart-critical_path-"))
    assert sorted(t["name"] for t in cp["data"]) == ["COLLECTIVE", "EXEC", "LAUNCH", "THREAD"]
    assert min(min(_values(t["base"])) for t in cp["data"]) == 0
    # prediction: measured and predicted grouped, error on a second axis
    pr = next(f for k, f in figs.items() if k.startswith("chart-prediction-"))
    assert pr["layout"]["barmode"] == "group"
    assert [t["name"] for t in pr["data"]] == ["measured", "predicted", "error %"]
    # header lists tables and the generation time
    assert "generated " in doc and 'href="#table-stragglers_flags"' in doc


def test_missing_columns_empty_and_unexpected_tables() -> None:
    weird = pd.DataFrame({"a": [1, None, 3], 7: ["x", "<b>y</b>", None],
                          "lst": [[1, 2], {"k": "<i>"}, np.nan], "flag": [True, False, True],
                          "big": [2**62, -1, 0], "f": [np.inf, -np.inf, np.nan],
                          "when": pd.to_datetime(["2024-01-01", None, "2024-01-02"])})
    tables = {
        "breakdown": pd.DataFrame({"rank": [0, 1], "iteration": [1, 1]}),  # no time columns
        "collectives": pd.DataFrame({"collective": ["all_reduce"], "size_bytes": [1024]}),
        "critical_path": pd.DataFrame({"rank": [[0], [1]], "start_ns": [0, 5],
                                       "dur_ns": [5, 5], "edge_kind": ["A", "B"]}),
        "prediction": pd.DataFrame(),  # empty: skipped
        "diff": weird,
        "a table/with odd name": pd.DataFrame({"x": range(MAX_TABLE_ROWS + 50)}),
        "not_a_frame": [{"x": 1}, {"x": 2}],
    }
    doc = render_html(tables, title="odd")  # type: ignore[arg-type]
    assert 'id="sec-prediction"' not in doc and "prediction (empty, skipped)" in doc
    assert 'id="table-breakdown"' in doc and 'id="table-diff"' in doc
    assert 'id="table-a-table-with-odd-name"' in doc and 'id="table-not_a_frame"' in doc
    assert "&lt;b&gt;y&lt;/b&gt;" in doc and "<b>y</b>" not in doc
    assert f"first {MAX_TABLE_ROWS} of 250 rows" in doc
    assert str(2**62) in doc  # data-v keeps the exact integer
    # a table whose chart cannot be built still shows as a table, with a note
    assert "chart skipped: TypeError" in doc
    body = doc.split('id="table-critical_path"', 1)[1]
    assert body.count("<tr>") >= 3


def test_no_tables_no_plotly() -> None:
    doc = render_html({}, title="nothing")
    assert "<title>nothing</title>" in doc and "Plotly.newPlot" not in doc


def test_untrusted_names_are_escaped(full: tuple[dict[str, pd.DataFrame], str]) -> None:
    _, doc = full
    for p in PAYLOADS:
        assert p not in doc
    assert "<script>window.__pwned" not in doc
    assert "<img src=x" not in doc.lower() and "<img" not in doc.lower()
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in doc
    assert "&lt;/script&gt;&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;" in doc
    assert "<title>synthetic &lt;script&gt;document.title=&#x27;PWNED&#x27;&lt;/script&gt;" in doc
    # no script body holds a '</script' that could end it early; chart data has no '<' at all
    for _, body in _scripts(doc):
        assert "</script" not in body.lower()
        if body.startswith("tcPlot("):
            assert "<" not in body, body[:200]
    # the figure JSON still carries the names, HTML-escaped for plotly's label renderer
    figs = _figures(doc)
    top = next(f for k, f in figs.items() if "kernels" in k and f["data"][0].get("orientation"))
    labels = " ".join(top["data"][0]["y"])
    assert "<" not in labels and "&lt;…&gt;" in labels  # folded for the label, escaped
    hovers = " ".join(top["data"][0]["hovertext"])
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in hovers  # the full name
    flags = next(f for k, f in figs.items() if k.startswith("chart-stragglers-"))
    hover = " ".join(h for t in flags["data"] for h in t["hovertext"])
    assert "&lt;script&gt;document.documentElement" in hover


def test_cli_writes_html_report(traces: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from traincast.cli import app

    out = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["analyze", str(traces / "dlrm_8xv100" / "kineto"),
                                   "--what", "breakdown,idle,prediction", "--format", "html",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = out.read_text(encoding="utf-8")
    assert 'id="sec-breakdown"' in doc and 'id="sec-prediction"' in doc


# ---------------------------------------------------------------------------- browser tests


@needs_chromium
def test_chromium_renders_dlrm_report(dlrm: tuple[dict[str, pd.DataFrame], str],
                                      tmp_path: Path) -> None:
    _, doc = dlrm
    page = tmp_path / "dlrm.html"
    page.write_text(doc, encoding="utf-8")
    dom, log, _ = _chromium(page, tmp_path)
    assert not _js_errors(log), _js_errors(log)
    shown = _without_scripts(dom)
    ids = list(_figures(doc))
    assert ids
    for cid in ids:  # plotly ran: each chart div became a plot with its SVG
        m = re.search(rf'<div id="{cid}" class="([^"]*)"', shown)
        assert m and "js-plotly-plot" in m.group(1), cid
    assert shown.count('class="main-svg"') >= len(ids)


@needs_chromium
def test_chromium_untrusted_names_do_not_execute(full: tuple[dict[str, pd.DataFrame], str],
                                                 tmp_path: Path) -> None:
    _, doc = full
    page = tmp_path / "xss.html"
    page.write_text(doc, encoding="utf-8")
    dom, log, _ = _chromium(page, tmp_path)
    assert not _js_errors(log), _js_errors(log)
    shown = _without_scripts(dom)
    html_tag = re.search(r"<html\b[^>]*>", shown)
    assert html_tag and "data-pwned" not in html_tag.group(0)
    assert "<img" not in shown.lower()
    title = re.search(r"<title>(.*?)</title>", shown, re.S)
    assert title and "PWNED" in title.group(1) and title.group(1).startswith("synthetic ")
    assert "<title>PWNED</title>" not in shown
    # the names are on the page as text, in the HTML tables and in plotly's SVG labels
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in shown
    assert re.search(r"<text\b[^>]*>[^<]*&lt;/script&gt;&lt;img src=x", shown)
    for cid in _figures(doc):
        m = re.search(rf'<div id="{cid}" class="([^"]*)"', shown)
        assert m and "js-plotly-plot" in m.group(1), cid


def test_each_chart_once_ms_from_step_start_short_names(
        dlrm: tuple[dict[str, pd.DataFrame], str]) -> None:
    """Issue 18: the step-window chart once (breakdown and breakdown_by_rank draw the same
    per-rank chart on a one-step trace), the critical-path axis in ms from the step start
    (no epoch timestamp), kernel labels folded (template arguments as <…>) with the full name
    in the hover text."""
    tables, doc = dlrm
    figs = _figures(doc)
    titles = [f["layout"]["title"]["text"] for f in figs.values()]
    assert len(titles) == len(set(titles))
    assert sum("Step window" in t for t in titles) == 1
    cp = next(f for f in figs.values() if f["layout"]["title"]["text"].startswith(
        "Critical path over time"))
    assert cp["layout"]["xaxis"]["title"]["text"] == "ms from the step start"
    assert "t0 =" not in doc
    bases = [b for t in cp["data"] for b in _values(t["base"])]
    assert min(bases) >= 0 and max(bases) < 100  # ms within a ~16-ms step, not epoch ns
    top = next(f for f in figs.values() if f["layout"]["title"]["text"].startswith(
        "Top kernels"))
    labels = _values(top["data"][0]["y"])
    hovers = _values(top["data"][0]["hovertext"])
    templated = [(lab, hov) for lab, hov in zip(labels, hovers, strict=True)
                 if "&lt;…&gt;" in lab]
    assert templated  # DLRM's top kernels are templated (fbgemm, at::native)
    for lab, hov in templated:
        assert "&lt;…&gt;" not in hov and "&lt;" in hov  # the hover keeps the template
        assert len(lab) < len(hov)


@pytest.fixture(scope="module")
def timeline_report(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`traincast analyze DLRM --format html`: verdict first, then the step's timeline."""
    out = tmp_path_factory.mktemp("timeline") / "report.html"
    assert main(["analyze", str(traces / "dlrm_8xv100" / "kineto"), "--format", "html",
                 "--out", str(out)]) == 0
    return out


def test_report_opens_with_verdict_then_timeline(timeline_report: Path) -> None:
    doc = timeline_report.read_text(encoding="utf-8")
    v, t, b = (doc.find(f'id="sec-{s}"') for s in ("verdict", "timeline", "breakdown"))
    assert 0 < v < t < b
    assert "ms from the step start" in doc and "critical path in red" in doc
    assert "traincast predict " in doc  # the commands beside the gains


def test_report_size_on_8_ranks(timeline_report: Path) -> None:
    """The default report of the 8-rank DLRM set: under 2 MB (it was 7.3 MB with the full
    plotly.js, per-point hover text and a template per chart), plotly.js once, every section,
    every event of the step drawn (so no sampling note), no 17-digit floats."""
    raw = timeline_report.read_bytes()
    assert len(raw) < 2_000_000, len(raw)
    doc = raw.decode("utf-8")
    assert len(_LIBRARY.findall(doc)) == 1
    for sec in ("verdict", "timeline", "breakdown", "idle", "kernels", "collectives",
                "critical_path", "stragglers", "prediction"):
        assert f'id="sec-{sec}"' in doc, sec
    assert 'class="note sampled"' not in doc
    figs = _figures(doc)
    tl = figs["chart-timeline-1"]
    assert sum(len(_values(t["base"])) for t in tl["data"]) > 5000  # every event, not 5,000
    names = {c[0] for t in tl["data"] for c in t["customdata"]}
    assert any("ncclKernel" in n for n in names)  # hover names restored from the table
    for _, body in _scripts(doc):
        if body.startswith("tcPlot("):
            assert not re.search(r"\d\.\d{12,}", body), re.search(r"\d\.\d{12,}", body)


def _many_ranks(n_ranks: int = 40, per_lane: int = 140) -> dict[str, pd.DataFrame]:
    """A step timeline of ``n_ranks`` ranks x 2 streams x 2 sources (more events than a chart
    draws), its critical path on ranks 5 and 6, and per-rank tables of as many ranks."""
    rng = np.random.default_rng(1)
    rows = []
    for src in ("measured", "predicted"):
        for r in range(n_ranks):
            for st in (7, 20):
                start = np.sort(rng.uniform(0, 50, per_lane))
                for k, a in enumerate(start):
                    rows.append((src, r, st, f"rank {r} stream {st}", f"kernel_{k % 30}",
                                 "kernel", float(a), 0.01 + 0.001 * r, False))
    for k in range(50):
        rows.append(("critical path", 5 + k % 2, -1, f"rank {5 + k % 2} critical path",
                     f"kernel_{k}", "kernel", float(k), 1.0, True))
    tl = pd.DataFrame(rows, columns=["source", "rank", "stream", "lane", "name", "kind",
                                     "start_ms", "dur_ms", "critical"])
    bd = pd.DataFrame({"rank": range(n_ranks), "iteration": 1,
                       "compute_ns": [1_000_000 + 1000 * r for r in range(n_ranks)],
                       "comm_exposed_ns": 10_000, "memory_ns": 0, "idle_ns": 5_000})
    flags = pd.DataFrame({"rank": [r % n_ranks for r in range(700)], "iteration": 1,
                          "kind": "late", "score": np.arange(700.0), "evidence": "x"})
    return {"timeline": tl, "breakdown": bd, "stragglers_flags": flags}


def test_many_ranks_and_events_are_sampled_with_a_note() -> None:
    tables = _many_ranks()
    n_events = len(tables["timeline"])
    assert n_events > MAX_GANTT_EVENTS // 2
    doc = render_html(tables, title="many")
    notes = re.findall(r'<p class="note sampled">([^<]*)</p>', doc)
    tl_note = next(n for n in notes if "device busy time" in n)
    assert f"showing {GANTT_RANKS} of 40 ranks" in tl_note and "Full data:" in tl_note
    assert "r39, " in tl_note and "(slowest first)" in tl_note  # the busiest rank
    assert "r5, r6 (critical path first)" in tl_note
    assert "--timeline-out" in tl_note
    bd_note = next(n for n in notes if "by busy time" in n)
    assert f"showing {MAX_RANKS} of 40 ranks" in bd_note
    assert any("showing the 500 highest-scored of 700 flags" in n for n in notes)
    figs = _figures(doc)
    tl = figs["chart-timeline-1"]
    lanes = {y for t in tl["data"] for y in t["y"]}
    ranks = {int(y.split()[1]) for y in lanes}
    assert len(ranks) <= GANTT_RANKS and {5, 6, 39} <= ranks
    assert "(sampled: see the note)" in tl["layout"]["title"]["text"]
    bd = next(f for k, f in figs.items() if k.startswith("chart-breakdown-"))
    assert len(bd["data"][0]["x"]) == MAX_RANKS and "r39" in bd["data"][0]["x"]
    # the table under the chart keeps every row the analysis returned
    assert f"({n_events:,} rows)" in doc


def test_events_beyond_the_cap_keep_the_longest() -> None:
    tables = _many_ranks(n_ranks=4, per_lane=700)  # 4 ranks: all drawn, events capped
    doc = render_html({"timeline": tables["timeline"]}, title="long")
    n = len(tables["timeline"])
    assert n > MAX_GANTT_EVENTS
    assert f"showing the {MAX_GANTT_EVENTS:,} longest of {n:,} events" in doc
    tl = _figures(doc)["chart-timeline-1"]
    assert sum(len(t["base"]) for t in tl["data"]) == MAX_GANTT_EVENTS


def test_full_plotly_bundle_only_for_other_trace_types() -> None:
    from plotly.offline import get_plotlyjs

    from traincast.report.encode import plotly_js

    assert plotly_js({"bar", "scatter"}).lstrip().startswith("/**\n* plotly.js (basic")
    assert plotly_js({"bar", "heatmap"}) == get_plotlyjs()


def test_compact_json_round_trips() -> None:
    import plotly.graph_objects as go

    from traincast.report.encode import encode_figure

    names = [f"k&lt;{i % 3}&gt;" for i in range(20)]
    dur = [0.1 * i + 1 / 3 for i in range(20)]
    fig = go.Figure(go.Bar(x=np.array(dur), base=np.arange(20) / 7, y=[f"r{i % 2}" for i in
                                                                       range(20)],
                           customdata=np.array([[n, d] for n, d in zip(names, dur,
                                                                       strict=True)],
                                               dtype=object),
                           hovertext=["same"] * 20, orientation="h"))
    fig.update_layout(template="plotly_white", title_text="t")
    templates: list[str] = []
    text = encode_figure(fig, templates).decode()
    assert len(templates) == 1 and '"template"' not in text
    assert "0.3333333" not in text  # rounded: 6 significant digits of the largest value
    f = _expand(json.loads(text))
    t = f["data"][0]
    assert t["y"] == [f"r{i % 2}" for i in range(20)] and t["hovertext"] == ["same"] * 20
    assert [c[0] for c in t["customdata"]] == names
    assert [c[1] for c in t["customdata"]] == t["x"]  # the column shared with x
    assert t["x"] == pytest.approx(dur, abs=1e-4)
    assert _values(t["base"]) == pytest.approx(np.arange(20) / 7, abs=1e-5)
    encode_figure(fig, templates)
    assert len(templates) == 1  # the same template once per page


@needs_chromium
def test_chromium_renders_the_timeline(timeline_report: Path, tmp_path: Path) -> None:
    """The timeline renders: plotly turned its div into a plot with one bar group per trace,
    and a screenshot of the page is not blank."""
    dom, log, _ = _chromium(timeline_report, tmp_path)
    assert not _js_errors(log), _js_errors(log)
    shown = _without_scripts(dom)
    start = shown.find('id="sec-timeline"')
    sec = shown[start:shown.find("</section>", start)]
    assert "js-plotly-plot" in sec and sec.count('class="main-svg"') >= 1
    assert "rank 0 stream" in sec  # lane labels expanded from the page's string table
    assert sec.count('class="trace bars"') >= 4  # measured, predicted, critical path kinds
    shot = tmp_path / "shot.png"
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--window-size=1400,1600",
                    "--virtual-time-budget=15000", f"--user-data-dir={tmp_path / 'prof2'}",
                    f"--screenshot={shot}", timeline_report.as_uri()],
                   capture_output=True, timeout=240, env=env, check=True)
    png = shot.read_bytes()
    # a blank 1400x1600 page compresses to a few KB; the drawn report is hundreds of KB
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000, len(png)


def test_timestamps_in_ms_from_the_step_start(traces: Path) -> None:
    """Tables show start/end as ms from their step's start, never epoch ns (issue 15)."""
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    tables = traincast.analyze(ts, "breakdown")
    doc = render_html(tables, title="t")
    sec = doc[doc.find('id="table-breakdown"'):]
    sec = sec[:sec.find("</table>")]
    assert "start (ms from step start)" in sec
    cells = re.findall(r'<td class="num" data-v="(\d+)">([^<]*)</td>', sec)
    starts = sorted(float(txt.replace(",", "")) for raw, txt in cells
                    if raw.startswith("1694") and len(raw) == 19)
    assert starts and starts[0] == 0.0 and starts[-1] < 100  # ms, not 1.69e18
    assert "1,694,128" not in sec
