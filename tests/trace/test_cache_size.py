"""The parse cache's size: capped, least recently used first; `traincast cache info|clear`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import traincast
from traincast.cli import main
from traincast.errors import ParameterError
from traincast.trace import cache as C
from traincast.trace.cache_size import info, max_bytes, trim


def _entries(root: Path) -> list[Path]:
    return sorted((root / f"v{C.CACHE_SCHEMA}").rglob("*.arrows"))


def test_cap_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, want in (("500M", 500 * 2**20), ("2G", 2 * 2**30), ("1.5k", 1536),
                       ("4096", 4096), ("off", None), ("0", None), ("3GiB", 3 * 2**30)):
        monkeypatch.setenv("TRAINCAST_CACHE_MAX", text)
        assert max_bytes() == want, text
    monkeypatch.setenv("TRAINCAST_CACHE_MAX", "lots")
    with pytest.raises(ParameterError, match="not a size"):
        max_bytes()


def test_trim_least_recently_used_first(traces: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    monkeypatch.setattr(C, "_trimmed", set())
    monkeypatch.setenv("TRAINCAST_CACHE_MAX", "off")
    for name in ("a100_2rank_nccl", "v100_2rank_allreduce"):
        traincast.load(traces / "hta" / name, cache=root)
    C.wait_for_writes()
    entries = _entries(root)
    assert len(entries) >= 4
    for k, f in enumerate(entries):  # oldest use first in list order
        os.utime(f, (1_000_000 + k, 1_000_000 + k))
    (root / "v1" / "ab").mkdir(parents=True)  # an older traincast's entries
    (root / "v1" / "ab" / "x.arrows").write_bytes(b"x" * 1000)
    sizes = [f.stat().st_size for f in entries]
    cap = sum(sizes) - sizes[0] - sizes[1] // 2  # the two oldest must go
    deleted, freed = trim(root, cap, C.CACHE_SCHEMA)
    assert not (root / "v1").exists()
    left = _entries(root)
    assert left == entries[2:] and deleted == 3 and freed == 1000 + sizes[0] + sizes[1]
    assert sum(f.stat().st_size for f in left) <= cap


def test_a_hit_marks_the_entry_used(traces: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    d = traces / "hta" / "a100_2rank_nccl"
    traincast.load(d, cache=root)
    C.wait_for_writes()
    for f in _entries(root):
        os.utime(f, (1_000_000, 1_000_000))
    traincast.load(d, cache=root)
    assert any(f.stat().st_mtime > 1_000_000 for f in _entries(root))


def test_cli_info_and_clear(traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cache"
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(root))
    monkeypatch.delenv("TRAINCAST_CACHE_MAX", raising=False)
    assert main(["cache", "info"]) == 0
    assert "empty" in capsys.readouterr().out
    traincast.load(traces / "hta" / "a100_2rank_nccl")
    C.wait_for_writes()
    assert main(["cache", "info", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["trace_entries"] >= 1 and d["job_entries"] == 1 and d["bytes"] > 0
    assert d["max_bytes"] == 2 * 2**30 and d == {**d, "folder": str(root)}
    assert main(["cache", "clear"]) == 0
    assert "freed" in capsys.readouterr().out and not root.exists()
    assert info(root, C.CACHE_SCHEMA)["bytes"] == 0


def test_bad_cap_is_one_line(traces: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINCAST_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TRAINCAST_CACHE_MAX", "1x")
    assert main(["predict", str(traces / "hta" / "a100_2rank_nccl")]) == 2
    assert "TRAINCAST_CACHE_MAX='1x': not a size" in capsys.readouterr().err
