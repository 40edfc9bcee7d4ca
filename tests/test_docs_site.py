"""The documentation site: ``mkdocs build --strict`` (mkdocs.yml at the repository root, the
API reference generated from the docstrings by mkdocstrings) builds into a temporary folder
with no warning, and every page of docs/ outside the notebooks is in it.

Skips only when mkdocs is not installed (the ``docs`` extra brings it with mkdocstrings).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install '.[docs]')")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                          "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)

    pages = [p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md")
             if "notebooks" not in p.parts]
    for page in pages:
        built = site / page.with_suffix("") / "index.html"
        if page.name == "index.md":
            built = site / page.parent / "index.html"
        assert built.is_file(), f"{page} was not built ({built})"
    # the API reference is generated, not empty
    api = (site / "api" / "analysis" / "index.html").read_text()
    assert "temporal_breakdown" in api
