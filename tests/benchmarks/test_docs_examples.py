"""benchmarks/docs_examples.py: every page's example outputs can be refreshed (one ``text``
block per command, found in order), and outputs are cleaned as the pages show them."""

from __future__ import annotations

from pathlib import Path

import docs_examples as de


def test_every_page_example_is_refreshable() -> None:
    jobs = {p.name: de._jobs(p.read_text().splitlines()) for p in sorted(de.DOCS.glob("*.md"))}
    # the capability pages each show at least one real output
    for page in ("analyze.md", "verdict.md", "predict.md", "from-et.md", "plan.md",
                 "calibrate.md", "diff.md", "convert.md", "report.md", "demo.md", "load.md"):
        assert jobs[page], f"{page} shows no example output"
    kinds = {kind for page in jobs.values() for kind, _, _ in page}
    assert kinds == {"traincast", "python"}
    bench = [code for _, code, _ in jobs["calibrate.md"]]
    assert bench[-2:] == ["traincast bench --out kernels --quick --no-progress",
                          "traincast fit kernels --out models"]


def test_jobs_pair_commands_with_their_outputs() -> None:
    lines = ["```bash", "traincast a x  # a comment", "traincast b y", "```", "",
             "```text", "old a", "```", "```text", "old b", "```", "prose", "```text", "z",
             "```"]
    assert de._jobs(lines) == [("traincast", "traincast a x", [(5, 7)]),
                               ("traincast", "traincast b y", [(8, 10)])]


def test_clean_writes_paths_back(tmp_path: Path) -> None:
    out = (f"USDT:2026 profiler_start\n\nread {de.SHARED_TRACES}/hta/x.json.gz   \n"
           f"wrote {tmp_path}/et/run.0.et\n\n")
    assert de._clean(out, tmp_path) == ("read ../shared/data/traces/hta/x.json.gz\n"
                                        "wrote et/run.0.et")
