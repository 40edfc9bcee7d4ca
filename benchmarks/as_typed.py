"""The commands as a user types them: wall time and peak memory of ``traincast ...`` in a fresh
process, cold and warm parse cache, side by side with the anchors in the same run.

Anchors (each run in its own fresh processes, interleaved with traincast's, so background load
falls on all alike):

* **the previous release** of traincast: a git ref (``--anchor-ref``, default the commit of the
  last landed stop) checked out into a worktree under ``--work-dir`` and run as
  ``python -m traincast.cli`` with ``PYTHONPATH`` set to it (its own numba cache warms on its
  first run, as a user's would);
* **HTA** (HolisticTraceAnalysis, in its own venv, ``--hta-python``): what an HTA user types is a
  Python script, so one fresh process runs ``TraceAnalysis(trace_dir=DIR)`` and
  ``get_temporal_breakdown(visualize=False)`` (HTA has no parse cache: its cold and warm runs are
  the same).

Trace sets (``--sets``): ``8`` is the shared DLRM 8x V100 set
(``../shared/data/traces/dlrm_8xv100/kineto``); a number ``N`` above 8 is that set cloned to N
ranks by ``make_scale_traces.py`` into ``--work-dir/N`` (made when missing, kept).

Cases per set, each with this tree (``new``), the previous release (``old``) and, for the
analyses, HTA:

* ``analyze``: ``traincast analyze DIR`` (the default: verdict and opportunities);
* ``analyses``: ``traincast analyze DIR --what breakdown,idle,kernels,collectives,critical_path,stragglers``;
* ``predict``: ``traincast predict DIR``;
* ``html``: ``traincast analyze DIR --format html --out FILE`` (the report's size is reported);
* ``first`` (8 ranks only): ``traincast analyze DIR`` as the first run after an install: an
  empty numba cache (``NUMBA_CACHE_DIR`` set to a new folder) and an empty parse cache;
* ``demo`` (8 ranks only, when torch imports): ``traincast demo --out DIR`` first run (empty
  numba and parse caches) and warm.

Before anything is timed, each tree runs ``analyze`` once on the 8-rank set (its numba cache is
compiled, as after a user's first run). Cold: ``TRAINCAST_CACHE_DIR`` is a new empty folder (the files are parsed and the cache written).
Every timed run (HTA's too) starts with the trace files just read once, so in the page cache
(:func:`read_through`): what an eviction between runs would add is the disk's time, not the
command's. With ``--prime``, each timed cold run (HTA's too) follows an untimed run of the same
command with its own empty cache folder: its libraries and compiled kernels are in the page
cache too, whatever large run came before it (on a machine that reclaims cold page cache,
HTA's 1.7 GiB run pushes out the next command's libraries).
Warm: one unmeasured run primes a cache folder kept for that case; the measured runs hit it.
Standard output goes to a file (what a terminal would show is produced, not displayed). The
children run with ``PYTHONDONTWRITEBYTECODE`` unset, as a pip-installed package runs (its
bytecode compiled once), from a temporary folder (``python -m`` puts the working folder first
on ``sys.path``: run from a checkout it would import that checkout whatever ``PYTHONPATH`` says).

Measured per run: wall seconds from ``Popen`` to exit (interpreter start-up and imports
included: what the user waits for) and peak memory: the largest of the process's own
``ru_maxrss`` (exact, from ``wait4``, when above this script's own peak: Linux starts a spawned
child's ``ru_maxrss`` at its parent's), its ``VmHWM`` and the summed RSS of its process tree,
both sampled from ``/proc`` every 50 ms (worker processes included, found through
``/proc/PID/task/*/children``; a sampled lower bound). The median over
``--repeat`` runs is reported with the spread (min-max), and the ratio new / anchor of the medians.
Growth between two sizes: ``log(t2 / t1) / log(n2 / n1)`` with ``n`` the ranks (events grow with
the ranks in the clones), for time and memory.

Run: ``python benchmarks/as_typed.py --sets 8,1024 [--repeat 3] [--cases analyze,predict]
[--anchor-ref REF] [--hta-python /work/venvs/hta/bin/python] [--json-out FILE] [--md-out FILE]``.
Exit code 0 when it ran (a missed target is printed, not an error), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, git_state, hta_available, machine  # noqa: E402  (shared helpers)
from make_scale_traces import DEFAULT_SOURCE, generate  # noqa: E402

ANALYSES = "breakdown,idle,kernels,collectives,critical_path,stragglers"
CASES = ("analyze", "analyses", "predict", "html", "first", "demo")
DEFAULT_ANCHOR = "18856ef"  # main as the last landed stop left it (previous release)

HTA_CODE = (
    "import sys, warnings; warnings.filterwarnings('ignore')\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "a = TraceAnalysis(trace_dir=sys.argv[1])\n"
    "a.get_temporal_breakdown(visualize=False)\n")

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    """Child pids of ``pid`` from ``/proc/PID/task/*/children`` (no scan of all of /proc)."""
    out: list[int] = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def tree_rss(root: int) -> int:
    """Summed RSS (bytes) of ``root`` and its descendants, from /proc (0 if gone)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
        todo.extend(_children(pid))
    return total


def _hwm(pid: int) -> int:
    """``VmHWM`` (bytes) of ``pid``: the peak resident size of its memory since its exec (0
    if gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def run(argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One fresh process: wall s, peak bytes, exit code (stdout to a temporary file).

    The wall time ends when the child is reaped by a thread blocked in ``wait4`` (not at the
    next memory sample). The child's ``ru_maxrss`` starts at this process's own peak (Linux
    keeps the high-water mark of the memory an exec replaces, and the child is spawned from
    this one): when it is no higher than that, it says nothing and the samples decide (the
    summed RSS of the tree and the child's ``VmHWM``, every 50 ms)."""
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=tempfile.gettempdir(),
                             start_new_session=True)
        reaped: dict[str, Any] = {}
        done = threading.Event()

        def reap() -> None:
            _, status, usage = os.wait4(p.pid, 0)
            reaped.update(t=time.perf_counter(), status=status, ru=usage)
            done.set()

        threading.Thread(target=reap, daemon=True).start()
        peak, killed = 0, False
        while not done.wait(0.05):
            peak = max(peak, tree_rss(p.pid), _hwm(p.pid))
            if not killed and time.perf_counter() - t0 > timeout:
                os.killpg(p.pid, 9)
                killed = True
        wall = reaped["t"] - t0
        ru = reaped["ru"]
        rc: int | str = "timeout" if killed else os.waitstatus_to_exitcode(reaped["status"])
        p.returncode = rc if isinstance(rc, int) else -9  # reaped above
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-2:]
    if ru.ru_maxrss * 1024 > floor:
        peak = max(peak, ru.ru_maxrss * 1024)
    return {"wall_s": wall, "peak": peak, "rc": rc, "stderr_tail": tail}


class Version:
    """One traincast tree to run: ``python -m traincast.cli`` with PYTHONPATH at ``root``."""

    def __init__(self, label: str, root: Path, ref: str) -> None:
        self.label, self.root, self.ref = label, root, ref

    def argv(self, args: list[str]) -> list[str]:
        return [sys.executable, "-m", "traincast.cli", *args]

    def env(self, cache: Path | None, numba: Path | None = None) -> dict[str, str]:
        e = {**os.environ, "PYTHONPATH": str(self.root), "COLUMNS": "120"}
        # as after a pip install: bytecode is written once and reused (this machine's
        # environment sets PYTHONDONTWRITEBYTECODE, which would recompile ~130 modules per run)
        e.pop("PYTHONDONTWRITEBYTECODE", None)
        e["TRAINCAST_CACHE_DIR"] = str(cache) if cache else "off"
        if numba:
            e["NUMBA_CACHE_DIR"] = str(numba)
        return e


def anchor_tree(ref: str, work: Path) -> Path:
    """A worktree of ``ref`` under ``work`` (made once, reused)."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref],
                         capture_output=True, text=True, check=True).stdout.strip()
    d = work / f"anchor-{sha}"
    if not (d / "traincast").is_dir():
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(d), sha],
                       check=True, capture_output=True)
    return d


def trace_dir(n: int, work: Path) -> Path:
    if n == 8:
        return DEFAULT_SOURCE
    d = work / f"scale_{n}"
    if not (d / ".complete").exists():
        print(f"generating {n} ranks into {d} ...", flush=True)
        shutil.rmtree(d, ignore_errors=True)
        generate(n, d, seed=0)
        (d / ".complete").write_text("")
    return d


def read_through(d: Path) -> int:
    """Read every file under ``d`` once (bytes read): each timed run starts with the trace files
    in the page cache, whichever command ran before it. Without it a run's time depends on
    what the machine's memory manager evicted meanwhile (this VM runs DAMON page-out, which
    reclaims cold page cache between runs), not on the command."""
    n = 0
    for f in sorted(d.rglob("*")):
        if f.is_file():
            with f.open("rb") as fh:
                while block := fh.read(1 << 20):
                    n += len(block)
    return n


def case_args(case: str, d: Path, tmp: Path) -> list[str]:
    if case in ("analyze", "first"):
        return ["analyze", str(d)]
    if case == "analyses":
        return ["analyze", str(d), "--what", ANALYSES]
    if case == "predict":
        return ["predict", str(d)]
    if case == "html":
        return ["analyze", str(d), "--format", "html", "--out", str(tmp / "report.html")]
    if case == "demo":
        return ["demo", "--out", str(tmp / "demo")]
    raise ValueError(case)


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def measure(sets: list[int], cases: list[str], versions: list[Version], repeat: int,
            hta: str | None, work: Path, timeout: float,
            prime: bool = False) -> list[dict[str, Any]]:
    """The rows of the table. ``prime``: each timed cold run follows one untimed run of the
    same command (HTA's too) with its own empty cache folder, so the command's libraries,
    compiled kernels and files are in the page cache whatever ran before it."""
    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="as_typed-", dir=work))
    for v in versions:  # each tree's numba cache compiled once before anything is timed
        run(v.argv(["analyze", str(DEFAULT_SOURCE)]), v.env(None), timeout)
    try:
        for n in sets:
            d = trace_dir(n, work)
            for case in cases:
                if case in ("first", "demo") and n != 8:
                    continue
                modes = ["first", "warm"] if case in ("first", "demo") else ["cold", "warm"]
                if case == "first":
                    modes = ["first"]
                for mode in modes:
                    res: dict[str, list[dict[str, Any]]] = {v.label: [] for v in versions}
                    hta_runs: list[dict[str, Any]] = []
                    warm_cache = {v.label: tmp / f"warm-{v.label}-{n}-{case}" for v in versions}
                    if mode == "warm":
                        for v in versions:  # prime: parse cache and numba cache
                            run(v.argv(case_args(case, d, tmp)), v.env(warm_cache[v.label]),
                                timeout)
                    for _ in range(repeat):
                        for v in versions:
                            cache = (warm_cache[v.label] if mode == "warm" else
                                     Path(tempfile.mkdtemp(dir=tmp)))
                            numba = Path(tempfile.mkdtemp(dir=tmp)) if mode == "first" else None
                            read_through(d)
                            if prime and mode == "cold":
                                scratch = Path(tempfile.mkdtemp(dir=tmp))
                                run(v.argv(case_args(case, d, tmp)), v.env(scratch), timeout)
                                shutil.rmtree(scratch, ignore_errors=True)
                            r = run(v.argv(case_args(case, d, tmp)), v.env(cache, numba), timeout)
                            if case == "html" and (tmp / "report.html").exists():
                                r["html_bytes"] = (tmp / "report.html").stat().st_size
                            res[v.label].append(r)
                            if mode != "warm":
                                shutil.rmtree(cache, ignore_errors=True)
                            if numba:
                                shutil.rmtree(numba, ignore_errors=True)
                        if hta and case in ("analyze", "analyses") and mode == "cold":
                            if prime:
                                run([hta, "-c", HTA_CODE, str(d)],
                                    {**os.environ, "PYTHONPATH": ""}, timeout)
                            read_through(d)
                            hta_runs.append(run([hta, "-c", HTA_CODE, str(d)],
                                                {**os.environ, "PYTHONPATH": ""}, timeout))
                    row = {"ranks": n, "case": case, "mode": mode,
                           "command": "traincast " + " ".join(
                               case_args(case, Path("DIR"), Path("TMP")))}
                    for label, runs in [*res.items(), ("hta", hta_runs)]:
                        ok = [r for r in runs if r["rc"] == 0]
                        row[label] = {
                            "runs": runs, "ok": len(ok),
                            "wall_s": med([r["wall_s"] for r in ok]),
                            "wall_min": min((r["wall_s"] for r in ok), default=None),
                            "wall_max": max((r["wall_s"] for r in ok), default=None),
                            "peak_mib": med([r["peak"] / 2**20 for r in ok]),
                            "html_mb": med([r["html_bytes"] / 1e6 for r in ok
                                            if "html_bytes" in r]),
                        } if runs else None
                        for r in runs:
                            if r["rc"] != 0:
                                print(f"  {label} {case} {mode} {n}: exit {r['rc']}: "
                                      f"{' | '.join(r['stderr_tail'])}", flush=True)
                    rows.append(row)
                    print(line(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _fmt(c: dict[str, Any] | None) -> str:
    if not c or c["wall_s"] is None:
        return "n/a"
    spread = (f" ({c['wall_min']:.2f}-{c['wall_max']:.2f})"
              if c["wall_max"] is not None and c["wall_max"] != c["wall_min"] else "")
    html = f", {c['html_mb']:.2f} MB" if c.get("html_mb") else ""
    return f"{c['wall_s']:.2f} s{spread} / {c['peak_mib']:,.0f} MiB{html}"


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> str:
    if not a or not b or not a.get(key) or not b.get(key):
        return "-"
    return f"{a[key] / b[key]:.2f}"


def line(row: dict[str, Any]) -> str:
    return (f"{row['ranks']:>5} {row['case']:<9} {row['mode']:<5} new {_fmt(row.get('new'))}"
            f" | old {_fmt(row.get('old'))} | hta {_fmt(row.get('hta'))}")


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [f"Run {meta['date']} on {meta['machine']['cpus']} CPUs, "
           f"{meta['machine']['mem_gib']} GiB; new = `{meta['new']}`, old = `{meta['old']}`, "
           f"HTA {meta['hta'] or 'not run'}; median of {meta['repeat']} fresh processes "
           "(min-max), peak = process tree"
           + ("; each cold run after an untimed one of the same command" if meta.get("prime")
              else "") + ".", "",
           "| ranks | command | cache | traincast now | previous release | new/old time | "
           "HTA (load + temporal breakdown) | new/HTA time | new/HTA memory |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cmd = r["command"].replace("|", "\\|")
        out.append(f"| {r['ranks']:,} | `{cmd}` | {r['mode']} | {_fmt(r.get('new'))} | "
                   f"{_fmt(r.get('old'))} | {_ratio(r.get('new'), r.get('old'), 'wall_s')} | "
                   f"{_fmt(r.get('hta'))} | {_ratio(r.get('new'), r.get('hta'), 'wall_s')} | "
                   f"{_ratio(r.get('new'), r.get('hta'), 'peak_mib')} |")
    return "\n".join(out) + "\n"


def growth(rows: list[dict[str, Any]]) -> list[str]:
    """Exponents between consecutive sizes of each (case, mode), for ``new``."""
    lines = []
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["case"], r["mode"]), []).append(r)
    for (case, mode), rs in by.items():
        rs = sorted(rs, key=lambda r: r["ranks"])
        for a, b in zip(rs, rs[1:], strict=False):
            na, nb = a.get("new"), b.get("new")
            if not na or not nb or not na["wall_s"] or not nb["wall_s"]:
                continue
            k = math.log(b["ranks"] / a["ranks"])
            lines.append(f"{case} {mode} {a['ranks']}->{b['ranks']} ranks: time exponent "
                         f"{math.log(nb['wall_s'] / na['wall_s']) / k:.2f}, memory exponent "
                         f"{math.log(nb['peak_mib'] / na['peak_mib']) / k:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="8,1024", help="rank counts (8 = the shared set)")
    ap.add_argument("--cases", default="analyze,analyses,predict,html,first,demo")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--anchor-ref", default=DEFAULT_ANCHOR,
                    help="git ref of the previous release ('none' to skip)")
    ap.add_argument("--hta-python", default="/work/venvs/hta/bin/python",
                    help="interpreter with HTA ('none' to skip)")
    ap.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "as_typed")
    ap.add_argument("--timeout", type=float, default=900.0, help="per process, s")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--md-out", type=Path)
    ap.add_argument("--prime", action="store_true",
                    help="an untimed run of each command before each of its timed cold runs "
                         "(its libraries and files in the page cache, whatever ran before)")
    a = ap.parse_args(argv)
    try:
        sets = [int(x) for x in a.sets.split(",") if x]
    except ValueError:
        ap.error(f"--sets: numbers expected, got {a.sets!r}")
    cases = [c for c in a.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad or not sets or min(sets) < 8 or a.repeat < 1:
        ap.error(f"unknown cases {bad} (known: {', '.join(CASES)}), or sets/repeat out of range")
    a.work_dir.mkdir(parents=True, exist_ok=True)
    versions = [Version("new", REPO, git_state())]
    if a.anchor_ref != "none":
        versions.append(Version("old", anchor_tree(a.anchor_ref, a.work_dir), a.anchor_ref))
    hta = None
    if a.hta_python != "none":
        ok, msg = hta_available(a.hta_python)
        hta = a.hta_python if ok else None
        print(f"HTA: {msg}" if ok else f"HTA not run: {msg}", flush=True)
    if "demo" in cases:
        try:
            import torch  # noqa: F401  (the demo records a model with torch)
        except ImportError:
            print("torch not importable: the demo case is skipped", flush=True)
            cases.remove("demo")
    rows = measure(sets, cases, versions, a.repeat, hta, a.work_dir, a.timeout, a.prime)
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "new": versions[0].ref,
            "old": versions[1].ref if len(versions) > 1 else None,
            "hta": hta_available(hta)[1] if hta else None, "repeat": a.repeat,
            "prime": a.prime}
    md = markdown(rows, meta)
    gl = growth(rows)
    print("\n" + md + ("\n".join(gl) + "\n" if gl else ""))
    if a.md_out:
        a.md_out.write_text(md + ("\n" + "\n".join(f"- {g}" for g in gl) + "\n" if gl else ""))
    if a.json_out:
        a.json_out.write_text(json.dumps({"meta": meta, "rows": rows, "growth": gl}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
