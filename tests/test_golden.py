"""Outputs stay identical: a sample of ``benchmarks/golden.py``'s outputs (predict, analyze
and what-if JSON, the Perfetto timeline and the measured-vs-predicted diff of a real 2-rank
A100 trace; every plan command; the HTA trace-diff pair) against the sha256 recorded before
the package was restructured (``tests/golden/digests.json``).

When a change is meant to alter an output, regenerate the file: ``python benchmarks/golden.py
dump OUT`` on the new code, then copy the listed keys' digests from ``OUT/digests.json`` (and
say in the changelog which outputs changed and why). The whole corpus (286 outputs) is
compared by ``python benchmarks/golden.py compare BEFORE AFTER``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIGESTS = ROOT / "tests" / "golden" / "digests.json"


def _golden_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("golden", ROOT / "benchmarks" / "golden.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return mod


def test_outputs_identical_to_the_recorded_digests(traces: Path, tmp_path: Path) -> None:
    expected = json.loads(DIGESTS.read_text())
    golden = _golden_module()
    got = {}
    for only in ("a100_2rank_nccl", "plan", "diff"):
        got.update(golden.dump(tmp_path / only, None, only, traces, keys=set(expected)))
    assert set(got) == set(expected), f"outputs not produced: {sorted(set(expected) - set(got))}"
    differ = sorted(k for k in expected if got[k] != expected[k])
    if differ:  # show the start of the first differing output
        first = (tmp_path / next(o for o in ("a100_2rank_nccl", "plan", "diff")
                                 if (tmp_path / o / (differ[0].replace("/", "__") + ".out")
                                     ).exists()) / (differ[0].replace("/", "__") + ".out"))
        pytest.fail(f"{len(differ)} outputs differ: {differ}; {first}:\n"
                    + first.read_text(errors="replace")[:2000])
