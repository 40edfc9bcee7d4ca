"""Which shared traces load and replay: traincast and HTA side by side over the whole corpus.

Every trace under ``../shared/data/traces`` (relative to the repository root) goes through

* traincast: ``ts = traincast.load(unit)`` then ``traincast.predict(ts).summary`` (replay
  MAPE), with ``TRAINCAST_CACHE_DIR=off`` so the parse cache does not hide parsing;
* HTA: ``hta.trace_analysis.TraceAnalysis(trace_dir=...)`` in HTA's own venv.

Each (unit, tool) pair runs in a fresh subprocess with a timeout, so one bad file cannot stop
the run. Seconds are those of the calls alone (traincast: ``load`` + ``predict``; HTA: the
``TraceAnalysis`` constructor), timed in the child after its imports. The script runs itself as the child (``--child``); its top level imports only the
standard library, so the same file runs under HTA's interpreter.

Units (decided by :func:`find_units`, no list of names):

* Kineto traces are ``*.json`` / ``*.json.gz`` files; execution traces (``*.et.json[.gz]``,
  ``et.json[.gz]``, anything in a folder named ``et``) are skipped, as is every other file
  (OTF2, notes, configs), each listed with the reason in the JSON.
* A folder whose Kineto files are all named ``rank-N...`` / ``rankN...`` / ``rank_N...``
  with distinct N (the per-rank layout of one job) is one unit, loaded as a folder
  (``traincast.load(DIR)``); every other Kineto file is its own unit (``traincast.load(FILE)``).
* Nsight Systems SQLite exports (``*.sqlite``) are units of their own, traincast only (HTA
  reads Kineto JSON only: "n/a").

HTA gets a temp folder of symlinks to the unit's files (it wants a folder, and takes every
``*.json``/``*.gz`` in it); it takes each file's rank from the first ``"rank": N`` in the text,
else rank 0.

Run: ``python benchmarks/corpus.py [--root PATH] [--only SUBSTR] [--no-hta] [--timeout S]
[--out benchmarks/results/corpus.json] [--markdown]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, check_hta, git_state, machine  # noqa: E402  (shared benchmark helpers)

DEFAULT_ROOT = REPO.parent / "shared" / "data" / "traces"
DEFAULT_HTA_VENV_PY = Path("/work/venvs/hta/bin/python")
DEFAULT_OUT = REPO / "benchmarks" / "results" / "corpus.json"

RESULT_TAG = "@@CORPUS_RESULT@@"
#: a replay within this MAPE (percent) counts as "replays within 1%"
MAPE_OK_PCT = 1.0

KINETO_SUFFIXES = (".json", ".json.gz")
NSYS_SUFFIXES = (".sqlite",)
_ET_NAME = re.compile(r"\.et\.json(\.gz)?$|(^|[-_.])et\.json(\.gz)?$", re.IGNORECASE)
#: per-rank file of one job: the name begins with rank-N / rankN / rank_N
_RANK_FILE = re.compile(r"^rank[-_]?(\d+)(?!\d)", re.IGNORECASE)


# --- units -----------------------------------------------------------------------------------

def _skip_reason(root: Path, f: Path) -> str | None:
    """Why ``f`` is not an input of its own (None: it is a Kineto or nsys trace)."""
    name = f.name
    if name.startswith("."):
        return "hidden file"
    if name.endswith(NSYS_SUFFIXES):
        return None
    if not name.endswith(KINETO_SUFFIXES):
        return "not a Kineto JSON or nsys SQLite file"
    if _ET_NAME.search(name) or "et" in f.relative_to(root).parts[:-1]:
        return "PyTorch execution trace (not a profiler trace)"
    return None


def find_units(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The units under ``root`` (see the module doc) and the files skipped, with reasons."""
    units: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for d, dirnames, filenames in os.walk(root):
        dirnames.sort()
        here = Path(d)
        kineto: list[Path] = []
        for name in sorted(filenames):
            f = here / name
            why = _skip_reason(root, f)
            if why:
                skipped.append({"path": str(f.relative_to(root)), "reason": why})
            elif name.endswith(NSYS_SUFFIXES):
                units.append({"unit": str(f.relative_to(root)), "path": str(f), "kind": "nsys",
                              "files": [str(f)], "bytes": f.stat().st_size})
            else:
                kineto.append(f)
        ranks = [_RANK_FILE.match(f.name) for f in kineto]
        if kineto and all(ranks) and len({int(m.group(1)) for m in ranks if m}) == len(kineto):
            units.append({"unit": str(here.relative_to(root)) + "/", "path": str(here),
                          "kind": "kineto-dir", "files": [str(f) for f in kineto],
                          "bytes": sum(f.stat().st_size for f in kineto)})
        else:
            units.extend({"unit": str(f.relative_to(root)), "path": str(f), "kind": "kineto",
                          "files": [str(f)], "bytes": f.stat().st_size} for f in kineto)
    units.sort(key=lambda u: u["unit"])
    return units, skipped


# --- children --------------------------------------------------------------------------------

def _as_count(v: Any) -> int | None:
    """An int from a count, a {key: count} mapping (summed) or a list of records (its length)."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    if isinstance(v, Mapping):
        parts = [_as_count(x) for x in v.values()]
        return sum(p for p in parts if p is not None) if any(p is not None for p in parts) \
            else None
    if isinstance(v, (list, tuple)):
        return sum(v) if all(isinstance(x, int) for x in v) else len(v)
    return None


def _decode_record(ts: Any) -> Any:
    """What the decoder recorded about coerced / dropped values, or None if this traincast
    records nothing: ``ts.meta["decode"]``, else ``ts.decode_stats``, else the per-rank
    ``RankInfo.decode_stats`` (``{"coerced": {field: n}, "dropped_fields": {..},
    "dropped_events": {reason: n}}``, {} when nothing) merged over ranks."""
    meta = getattr(ts, "meta", None)
    if isinstance(meta, Mapping) and meta.get("decode") is not None:
        return meta["decode"]
    if getattr(ts, "decode_stats", None) is not None:
        return ts.decode_stats
    ranks = getattr(ts, "ranks", None)
    per_rank = [getattr(info, "decode_stats", None) for info in
                (ranks.values() if isinstance(ranks, Mapping) else [])]
    per_rank = [d for d in per_rank if isinstance(d, Mapping)]
    if not per_rank:
        return None
    merged: dict[str, dict[str, int]] = {}
    for d in per_rank:
        for group, counts in d.items():
            into = merged.setdefault(str(group), {})
            items = counts.items() if isinstance(counts, Mapping) else [("", counts)]
            for key, n in items:
                into[str(key)] = into.get(str(key), 0) + (_as_count(n) or 0)
    return merged


def _decode_counts(ts: Any) -> tuple[int | None, int | None]:
    """(coerced, dropped) values counted by traincast's decoder, from whatever the TraceSet has
    (:func:`_decode_record`); (None, None) if it records nothing.

    ``coerced`` and ``dropped`` may be counts, per-field / per-rank mappings of counts (summed)
    or lists of records (counted); ``dropped`` adds up ``dropped``, ``dropped_fields`` and
    ``dropped_events``, whichever exist. An empty record counts 0.
    """
    decode = _decode_record(ts)
    if decode is None:
        return None, None

    def field(obj: Any, key: str) -> int | None:
        if isinstance(obj, Mapping):
            if key in obj:
                return _as_count(obj[key])
            per = [field(v, key) for v in obj.values()
                   if isinstance(v, Mapping) or hasattr(v, key)]  # keyed by rank
            per = [p for p in per if p is not None]
            return sum(per) if per else None
        return _as_count(getattr(obj, key, None))

    dropped = [field(decode, k) for k in ("dropped", "dropped_fields", "dropped_events")]
    return field(decode, "coerced") or 0, sum(d for d in dropped if d is not None)


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line, long bracketed lists (numpy array reprs) cut to ``[...]``."""
    line = re.sub(r"\[[^\[\]]{40,}\]", "[...]", " ".join(str(text).split()))
    return line if len(line) <= limit else line[: limit - 3] + "..."


def child_traincast(path: str) -> dict[str, Any]:
    """``traincast.load`` + ``predict`` of one unit (runs in the child process)."""
    import warnings

    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    import traincast
    from traincast.errors import TraincastError

    load, predict = traincast.load, traincast.predict  # imports the loader and the simulator
    out: dict[str, Any] = {"version": traincast.__version__, "import_s": time.perf_counter() - t0}
    stage = "load"
    try:
        t1 = time.perf_counter()
        ts = load(path)
        out["load_s"] = time.perf_counter() - t1
        out["loads"] = True
        out["events"] = int(ts.events.num_rows)
        out["ranks"] = len(ts.ranks)
        out["iterations"] = int(ts.iterations.num_rows)
        out["collectives"] = int(ts.collectives.num_rows)
        out["coerced"], out["dropped"] = _decode_counts(ts)
        rec = _decode_record(ts)
        if rec:
            try:
                out["decode"] = json.loads(json.dumps(rec, default=str))
            except (TypeError, ValueError):
                out["decode"] = repr(rec)
        out["load_warnings"] = [_one_line(w, 200) for w in ts.warnings]
        stage = "predict"
        t2 = time.perf_counter()
        pred = predict(ts)
        summary = pred.summary() if callable(pred.summary) else pred.summary
        out["predict_s"] = time.perf_counter() - t2
        out["replays"] = True
        out["mape_pct"] = float(summary["mape_pct"])
        out["max_ape_pct"] = float(summary["max_ape_pct"])
        out["replay_iterations"] = int(summary["iterations"])
    except Exception as e:  # noqa: BLE001  (recorded: a non-TraincastError is a traincast bug)
        out.setdefault("loads", False)
        out["replays"] = False
        out["failed_stage"] = stage
        out["error_type"] = type(e).__name__
        out["traincast_error"] = isinstance(e, TraincastError)
        msg = e.message if isinstance(e, TraincastError) else str(e)
        out["error"] = _one_line(f"{type(e).__name__}: {msg}")
    out["seconds"] = out.get("load_s", 0.0) + out.get("predict_s", 0.0)
    return out


def child_hta(files: list[str]) -> dict[str, Any]:
    """``TraceAnalysis(trace_dir=tmp)`` on symlinks to ``files`` (runs under HTA's python)."""
    import importlib.metadata
    import logging
    import traceback
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    out: dict[str, Any] = {"version": importlib.metadata.version("HolisticTraceAnalysis"),
                           "pandas": importlib.metadata.version("pandas"),
                           "import_s": time.perf_counter() - t0, "files": len(files)}
    tmp = Path(tempfile.mkdtemp(prefix="corpus_hta_"))
    try:
        for f in files:
            link = tmp / Path(f).name
            try:
                link.symlink_to(f)
            except OSError:
                shutil.copy2(f, link)
        t1 = time.perf_counter()
        try:
            a = TraceAnalysis(trace_dir=str(tmp))
            out["seconds"] = time.perf_counter() - t1
            traces = a.t.traces
            out["ranks"] = len(traces)
            out["rows"] = int(sum(len(df) for df in traces.values()))
            out["loads"] = out["rows"] > 0
            if not out["loads"]:
                out["error"] = "no rows (HTA returned an empty trace)"
        except Exception as e:  # noqa: BLE001  (any HTA failure is the result)
            out["seconds"] = time.perf_counter() - t1
            out["loads"] = False
            out["error_type"] = type(e).__name__
            out["error"] = _one_line(f"{type(e).__name__}: {e}")
            import hta

            base = os.path.dirname(os.path.dirname(os.path.abspath(hta.__file__)))
            frames = [f for f in traceback.extract_tb(e.__traceback__)
                      if os.path.abspath(f.filename).startswith(base + os.sep + "hta" + os.sep)]
            if frames:  # the last frame in HTA's own code
                f = frames[-1]
                out["where"] = f"{os.path.relpath(f.filename, base)}:{f.lineno} {f.name}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run_child(python: str, tool: str, unit: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one (tool, unit) in a fresh interpreter; its result, or ``loads: False`` + error."""
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    env["TRAINCAST_CACHE_DIR"] = "off"
    args = [unit["path"]] if tool == "traincast" else unit["files"]
    cmd = [python, str(Path(__file__).resolve()), "--child", tool, *args]
    t0 = time.perf_counter()
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                            cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"loads": False, "error": f"timed out after {timeout:.0f} s",
                "wall_s": time.perf_counter() - t0}
    for line in reversed(cp.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            r = json.loads(line[len(RESULT_TAG):])
            r["wall_s"] = time.perf_counter() - t0
            return r
    tail = (cp.stderr or cp.stdout).strip().splitlines()[-3:]
    return {"loads": False, "error": _one_line(f"child exit {cp.returncode}: " + " | ".join(tail)),
            "wall_s": time.perf_counter() - t0}


# --- report ----------------------------------------------------------------------------------



def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def row_cells(row: dict[str, Any], width: int) -> list[str]:
    """Table cells of one unit: unit, ranks/kind, MB, traincast loads, events, coerced,
    dropped, MAPE %, traincast s, HTA loads, HTA s."""
    tc, hta = row["traincast"], row.get("hta")

    def short(s: str) -> str:
        return s if len(s) <= width else s[: width - 3] + "..."

    if tc.get("loads"):
        tc_cell = "yes"
        if not tc.get("replays"):
            tc_cell = "yes; predict: " + short(tc.get("error", "failed"))
    else:
        tc_cell = short(tc.get("error", "failed"))
        if tc.get("traincast_error") is False:
            tc_cell = "CRASH " + tc_cell
    mape = tc.get("mape_pct") if tc.get("replays") else None
    if hta is None:
        hta_cell, hta_s = "n/a", "n/a"
    elif hta.get("skipped"):
        hta_cell, hta_s = "not run", "-"
    elif hta.get("loads"):
        n, files = hta.get("ranks", 0), hta.get("files", 1)
        hta_cell = "yes" if n >= files else f"partial: {n} of {files} files (rank clash)"
        hta_s = _num(hta.get("seconds"), ".2f")
    else:
        hta_cell, hta_s = short(hta.get("error", "failed")), _num(hta.get("seconds"), ".2f")
    kind = "nsys" if row["kind"] == "nsys" else (
        f"dir, {len(row['files'])} file(s)" if row["kind"] == "kineto-dir" else "file")
    return [row["unit"], kind, f"{row['bytes'] / 1e6:.2f}", tc_cell,
            _num(tc.get("events"), ","), _num(tc.get("coerced"), ","),
            _num(tc.get("dropped"), ","), _num(mape, ".3f"),
            _num(tc.get("seconds") if tc.get("loads") else None, ".2f"), hta_cell, hta_s]


COLUMNS = [("unit", "left"), ("unit is", "left"), ("MB", "right"), ("traincast loads", "left"),
           ("events", "right"), ("coerced", "right"), ("dropped", "right"),
           ("MAPE %", "right"), ("tc s", "right"), ("HTA loads", "left"), ("HTA s", "right")]


def summarize(rows: list[dict[str, Any]], hta_ran: bool) -> dict[str, Any]:
    tc_loads = sum(1 for r in rows if r["traincast"].get("loads"))
    replays = sum(1 for r in rows if r["traincast"].get("replays"))
    within = sum(1 for r in rows if r["traincast"].get("replays")
                 and r["traincast"]["mape_pct"] <= MAPE_OK_PCT)
    crashes = [r["unit"] for r in rows if r["traincast"].get("traincast_error") is False]
    kineto = [r for r in rows if r["kind"] != "nsys"]
    hta_rows = [r for r in kineto if r.get("hta") and not r["hta"].get("skipped")]
    hta_loads = sum(1 for r in hta_rows if r["hta"].get("loads"))
    s = {"units": len(rows), "kineto_units": len(kineto), "traincast_loads": tc_loads,
         "traincast_replays": replays, "replay_within_1pct": within,
         "traincast_non_traincast_errors": crashes,
         "hta_units": len(hta_rows) if hta_ran else None,
         "hta_loads": hta_loads if hta_ran else None}
    if hta_ran:
        s["hta_only"] = [r["unit"] for r in hta_rows
                         if r["hta"].get("loads") and not r["traincast"].get("loads")]
        s["traincast_only"] = [r["unit"] for r in hta_rows
                               if r["traincast"].get("loads") and not r["hta"].get("loads")]
    line = (f"{len(rows)} units: traincast loads {tc_loads}, replays {replays}, "
            f"{within} within {MAPE_OK_PCT:g}% MAPE")
    line += (f"; HTA loads {hta_loads} of {len(hta_rows)} Kineto units" if hta_ran
             else "; HTA not run")
    s["line"] = line
    return s


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |"
    align = "|" + "|".join("---:" if j == "right" else "---" for _, j in COLUMNS) + "|"
    body = []
    for r in rows:
        cells = [c.replace("|", "\\|") for c in row_cells(r, 90)]
        cells[0] = f"`{cells[0]}`"
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, align, *body])


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                    help="folder of traces, searched recursively (default: %(default)s)")
    ap.add_argument("--only", default=None, help="run only the units whose path holds SUBSTR")
    ap.add_argument("--no-hta", action="store_true", help="run traincast only")
    ap.add_argument("--hta-python", default=None,
                    help=f"interpreter with HolisticTraceAnalysis installed (default: "
                         f"{DEFAULT_HTA_VENV_PY} if it exists, else this interpreter)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds per (unit, tool) child process (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="JSON results (default: %(default)s)")
    ap.add_argument("--markdown", action="store_true",
                    help="also print the table as markdown (for benchmarks/README.md)")
    ap.add_argument("--child", choices=["traincast", "hta"], help=argparse.SUPPRESS)
    ap.add_argument("child_args", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:  # the per-unit measurement, in its own process
        res = (child_traincast(args.child_args[0]) if args.child == "traincast"
               else child_hta(args.child_args))
        sys.stdout.write("\n" + RESULT_TAG + json.dumps(res) + "\n")
        sys.stdout.flush()
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    root = args.root.resolve()
    if not root.is_dir():
        console.print(f"[red]no such folder: {root}[/red]")
        return 2
    units, skipped = find_units(root)
    if args.only:
        units = [u for u in units if args.only in u["unit"]]
    if not units:
        console.print(f"[red]no trace unit under {root}"
                      + (f" matching {args.only!r}" if args.only else "") + "[/red]")
        return 2

    notes: list[str] = []
    hta_py = args.hta_python or (str(DEFAULT_HTA_VENV_PY) if DEFAULT_HTA_VENV_PY.exists()
                                 else sys.executable)
    hta_version = None
    run_hta = not args.no_hta
    if run_hta:
        hta_version = check_hta(hta_py, console, notes, "running traincast only")
        run_hta = hta_version is not None
    commit = git_state()
    console.print(f"traincast at {commit}; {len(units)} units under {root} "
                  f"({len(skipped)} files skipped); timeout {args.timeout:g} s per child; "
                  f"load avg at start {os.getloadavg()[0]:.2f}")

    load_start = os.getloadavg()[0]
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for i, u in enumerate(units, 1):
        row = dict(u)
        row["traincast"] = run_child(sys.executable, "traincast", u, args.timeout)
        if u["kind"] == "nsys":
            row["hta"] = None  # HTA reads Kineto JSON only
        elif run_hta:
            row["hta"] = run_child(hta_py, "hta", u, args.timeout)
        else:
            row["hta"] = {"skipped": True}
        rows.append(row)
        tc = row["traincast"]
        tc_txt = (f"{tc.get('events', 0):,} events, MAPE {tc['mape_pct']:.3f}%"
                  if tc.get("replays") else tc.get("error", "failed"))
        h = row["hta"]
        h_txt = ("n/a" if h is None else "not run" if h.get("skipped")
                 else "ok" if h.get("loads") else h.get("error", "failed"))
        console.print(f"  [{i}/{len(units)}] {u['unit']}: traincast {_one_line(tc_txt, 100)}; "
                      f"HTA {_one_line(h_txt, 80)}", highlight=False)
    total_s = time.perf_counter() - t_start
    load_end = os.getloadavg()[0]

    table = Table(title=f"Corpus: {root} ({commit})")
    for col, just in COLUMNS:
        table.add_column(col, justify=just, overflow="fold")
    for r in rows:
        table.add_row(*row_cells(r, 60))
    console.print(table)
    console.print("traincast: load + predict in a fresh process (TRAINCAST_CACHE_DIR=off), "
                  "seconds = load + predict calls (imports excluded); coerced/dropped: decoder counts "
                  "('-': this traincast records none); MAPE over all (rank, step) rows. HTA: "
                  "TraceAnalysis(trace_dir=symlinks), seconds = that call. 'n/a': HTA does "
                  "not read nsys SQLite.")
    summ = summarize(rows, run_hta)
    console.print(f"[bold]{summ['line']}[/bold]")
    if summ["traincast_non_traincast_errors"]:
        console.print("[red]traincast raised something other than a TraincastError on: "
                      + ", ".join(summ["traincast_non_traincast_errors"]) + "[/red]")
    if run_hta:
        for key, what in (("hta_only", "HTA loads, traincast does not"),
                          ("traincast_only", "traincast loads, HTA does not")):
            if summ[key]:
                console.print(f"{what}: " + ", ".join(summ[key]))
        for r in rows:
            h = r.get("hta") or {}
            if h.get("error"):
                console.print(f"  HTA on {r['unit']}: {h['error']}"
                              + (f" (at {h['where']}; pandas {h.get('pandas')})"
                                 if h.get("where") else ""), highlight=False)
    console.print(f"total {total_s:.0f} s; load avg (1 min) {load_start:.2f} at start, "
                  f"{load_end:.2f} at end ({os.cpu_count()} CPUs)")
    if args.markdown:
        console.print(markdown(rows), markup=False, highlight=False, soft_wrap=True)

    doc = {
        "benchmark": "corpus",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "root": str(root), "only": args.only, "timeout_s": args.timeout,
        "machine": machine(), "git": commit,
        "loadavg_1min": {"start": load_start, "end": load_end}, "total_s": total_s,
        "traincast_python": sys.executable, "hta_python": hta_py if run_hta else None,
        "hta_version": hta_version, "mape_ok_pct": MAPE_OK_PCT,
        "summary": summ, "units": rows, "skipped": skipped, "notes": notes,
    }
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    write_json_atomic(out, doc)
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
