"""ET links through the parse cache: a second load reads the links instead of matching again;
a changed ET or Kineto file, or a damaged entry, links again; the TraceSet is the one an
uncached load gives."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

import traincast
from traincast.trace.link import cache_link


@pytest.fixture()
def two_ranks(traces: Path, tmp_path: Path) -> Path:
    """Ranks 0 and 1 of the DLRM set with their execution traces, in a folder of the test."""
    src = traces / "dlrm_8xv100"
    for sub, pattern in (("kineto", "rank-[01].pt.trace.json.gz"), ("et", "rank-[01].et.json.gz")):
        (tmp_path / sub).mkdir()
        for f in src.joinpath(sub).glob(pattern):
            shutil.copy(f, tmp_path / sub / f.name)
    return tmp_path


@pytest.fixture()
def links_made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ET files linked by matching (not read from the cache), in order."""
    made: list[str] = []
    real = cache_link.link_execution_trace

    def counting(et, events, **kw):  # noqa: ANN001, ANN003, ANN202 - the wrapped signature
        made.append(Path(et.path).name)
        return real(et, events, **kw)

    monkeypatch.setattr(cache_link, "link_execution_trace", counting)
    return made


def _load(d: Path, cache: Path | bool):
    return traincast.load(d / "kineto", et_dir=d / "et", cache=cache)


def _same(a, b) -> bool:
    return (a.et_links.equals(b.et_links) and a.shapes.equals(b.shapes)
            and sorted(a.et_nodes) == sorted(b.et_nodes)
            and all(a.ranks[r].et_path == b.ranks[r].et_path for r in a.ranks))


def _regzip(f: Path) -> None:
    """The same JSON, other gzip bytes (another compression level): another content key."""
    data = gzip.decompress(f.read_bytes())
    f.write_bytes(gzip.compress(data, compresslevel=1, mtime=0))


def test_second_load_reads_the_links(two_ranks: Path, tmp_path: Path,
                                     links_made: list[str]) -> None:
    fresh = _load(two_ranks, False)
    assert links_made == ["rank-0.et.json.gz", "rank-1.et.json.gz"]
    first = _load(two_ranks, tmp_path / "c")
    entries = list((tmp_path / "c").rglob("*.arrows"))
    assert sum("et-link" in e.parts for e in entries) == 2
    links_made.clear()
    second = _load(two_ranks, tmp_path / "c")  # hit: no matching
    assert links_made == []
    assert _same(fresh, first) and _same(fresh, second)


@pytest.mark.parametrize("changed", ["et/rank-1.et.json.gz", "kineto/rank-1.pt.trace.json.gz"])
def test_a_changed_file_links_again(two_ranks: Path, tmp_path: Path, links_made: list[str],
                                    changed: str) -> None:
    _load(two_ranks, tmp_path / "c")
    _regzip(two_ranks / changed)
    links_made.clear()
    ts = _load(two_ranks, tmp_path / "c")
    assert links_made == ["rank-1.et.json.gz"]  # rank 0's link is still a hit
    assert _same(ts, _load(two_ranks, False))


def test_a_damaged_entry_links_again(two_ranks: Path, tmp_path: Path,
                                     links_made: list[str]) -> None:
    fresh = _load(two_ranks, False)
    _load(two_ranks, tmp_path / "c")
    for e in (tmp_path / "c").rglob("*.arrows"):
        if "et-link" in e.parts:
            e.write_bytes(e.read_bytes()[:-30])
    links_made.clear()
    _drop_job_entries(tmp_path / "c")  # (a job entry holds the links: no linking at all)
    assert _same(fresh, _load(two_ranks, tmp_path / "c"))
    assert sorted(links_made) == ["rank-0.et.json.gz", "rank-1.et.json.gz"]
    links_made.clear()
    _drop_job_entries(tmp_path / "c")
    _load(two_ranks, tmp_path / "c")  # rewritten: a hit again
    assert links_made == []


def _drop_job_entries(cache: Path) -> None:
    from traincast.trace import cache as C

    C.wait_for_writes()
    shutil.rmtree(cache / f"v{C.CACHE_SCHEMA}" / "jobs", ignore_errors=True)


def test_an_entry_of_another_rank_is_not_read(two_ranks: Path) -> None:
    """The rank is part of the key: the same two files paired as another rank differ."""
    et = two_ranks / "et" / "rank-0.et.json.gz"
    kineto = two_ranks / "kineto" / "rank-0.pt.trace.json.gz"
    keys = {cache_link.link_key(et, kineto, r) for r in (0, 1)}
    assert len(keys) == 2 and None not in keys
    assert cache_link.link_key(et, None, 0) is None


def test_a_refused_pair_is_not_stored(two_ranks: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from traincast.errors import ExecutionTraceMismatchError

    def refuse(et, events, **kw):  # noqa: ANN001, ANN003, ANN202 - the wrapped signature
        raise ExecutionTraceMismatchError("does not belong to this Kineto trace", et.path)

    monkeypatch.setattr(cache_link, "link_execution_trace", refuse)
    for _ in range(2):  # refused again: nothing was stored the first time
        with pytest.raises(ExecutionTraceMismatchError):
            _load(two_ranks, tmp_path / "c")
    assert not [e for e in (tmp_path / "c").rglob("*.arrows") if "et-link" in e.parts]
