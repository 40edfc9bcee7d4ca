"""Refresh the example outputs of the documentation site's pages (docs/*.md).

A page shows a command in a fenced ``bash`` block (or a script in a ``python`` block) and its
real output in the ``text`` block(s) right after it: one ``text`` block per ``traincast``
command of the block, in order. This script runs each command again and writes what it printed
into those blocks, so a change of a command's output is one run away from the pages::

    python benchmarks/docs_examples.py                 # every page
    python benchmarks/docs_examples.py --only demo.md  # one page (and the pages it needs)
    python benchmarks/docs_examples.py --check         # list the pages whose output changed

Commands run in one scratch folder, pages in the order of :data:`ORDER` (the demo's recording
and the kernel models exist before the page that reads them); ``../shared/data/traces/`` is the
shared data beside the repository, ``examples/`` and the nccl-tests log of the calibration page
are copied in. Outputs are the terminal's at ``COLUMNS`` (100) columns, stdout and stderr
together (``python`` blocks: stdout only), trailing blanks and torch's ``USDT`` lines dropped,
the scratch folder's and the shared data's absolute paths written back as the page names them.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SHARED_TRACES = ROOT.parent / "shared" / "data" / "traces"
#: pages whose files later pages read come first
ORDER = ("demo.md", "calibrate.md")
COLUMNS = "100"
_FENCE = re.compile(r"^```(\w*)\s*$")
_DROP = re.compile(r"^USDT:")


def _blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(language, first line, closing line) of every fenced block."""
    out, start, lang = [], None, ""
    for i, line in enumerate(lines):
        m = _FENCE.match(line.strip())
        if not m:
            continue
        if start is None:
            start, lang = i, m.group(1)
        else:
            out.append((lang, start, i))
            start = None
    return out


def _jobs(lines: list[str]) -> list[tuple[str, str, list[tuple[int, int]]]]:
    """(kind, code, text blocks) per bash/python block followed by its output blocks."""
    blocks = _blocks(lines)
    jobs = []
    for k, (lang, start, end) in enumerate(blocks):
        if lang not in ("bash", "python"):
            continue
        texts = []
        prev_end = end
        for lang2, s2, e2 in blocks[k + 1:]:
            between = [x for x in lines[prev_end + 1:s2] if x.strip()]
            if lang2 != "text" or between:
                break
            texts.append((s2, e2))
            prev_end = e2
        if not texts:
            continue
        body = lines[start + 1:end]
        if lang == "python":
            jobs.append(("python", "\n".join(body), texts))
            continue
        cmds = [ln.partition(" #")[0].strip() for ln in body
                if ln.strip().startswith("traincast ")]
        if len(cmds) != len(texts):
            raise SystemExit(f"{len(cmds)} commands but {len(texts)} output blocks near line "
                             f"{start + 1}")
        for cmd, text in zip(cmds, texts, strict=True):
            jobs.append(("traincast", cmd, [text]))
    return jobs


def _clean(text: str, work: Path) -> str:
    lines = []
    for line in text.splitlines():
        if _DROP.match(line):
            continue
        line = line.replace(str(SHARED_TRACES), "../shared/data/traces")
        line = line.replace(f"{work}/", "").replace(str(work), ".")
        lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _run(kind: str, code: str, work: Path, env: dict[str, str]) -> str:
    code = code.replace("../shared/data/traces/", f"{SHARED_TRACES}/")
    if kind == "python":
        res = subprocess.run([sys.executable, "-c", code], cwd=work, env=env,
                             capture_output=True, text=True, check=False)
        out = res.stdout
    else:
        argv = [sys.executable, "-m", "traincast.cli", *shlex.split(code)[1:]]
        res = subprocess.run(argv, cwd=work, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, check=False)
        out = res.stdout
    if res.returncode != 0:
        print(f"  exit {res.returncode}: {code[:80]}\n{out}{res.stderr or ''}", file=sys.stderr)
    return _clean(out, work)


def refresh(pages: list[Path], check: bool) -> list[str]:
    """Run every page's commands; rewrite its output blocks (or, with ``check``, only list
    the pages whose output differs). Returns the names of the changed pages."""
    changed = []
    with tempfile.TemporaryDirectory(prefix="traincast-docs-") as tmp:
        work = Path(tmp).resolve()
        shutil.copytree(ROOT / "examples", work / "examples")
        shutil.copy(ROOT / "tests" / "costs" / "data" / "all_gather_perf_2gpu_bf16.log",
                    work / "all_gather_perf.log")
        env = dict(os.environ, COLUMNS=COLUMNS, TRAINCAST_CACHE_DIR=str(work / ".cache"),
                   PYTHONPATH=str(ROOT), NO_COLOR="1")
        for page in pages:
            lines = page.read_text().splitlines()
            jobs = _jobs(lines)
            if not jobs:
                continue
            print(f"{page.name}: {len(jobs)} example(s)", file=sys.stderr)
            replacements = []
            for kind, code, texts in jobs:
                out = _run(kind, code, work, env)
                s, e = texts[0]
                replacements.append((s, e, out.splitlines()))
            new = list(lines)
            for s, e, out in sorted(replacements, reverse=True):
                new[s + 1:e] = out
            if new != lines:
                changed.append(page.name)
                if not check:
                    page.write_text("\n".join(new) + "\n")
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="page name (repeatable)")
    ap.add_argument("--check", action="store_true", help="list changed pages, write nothing")
    args = ap.parse_args(argv)
    names = sorted(p.name for p in DOCS.glob("*.md"))
    order = [n for n in ORDER if n in names] + [n for n in names if n not in ORDER]
    if args.only:
        needed = set(args.only)
        if "from-et.md" in needed:
            needed |= {"demo.md", "calibrate.md"}
        order = [n for n in order if n in needed]
    changed = refresh([DOCS / n for n in order], args.check)
    print(("changed: " + ", ".join(changed)) if changed else "no change", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
