"""The compiled scanner's tables: pairs of shape texts kept across files, names interned in
its pass, arrays sized again for small events. Each case loads the same as the Python path."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import pytest

from traincast.trace.readers import kineto_fast, kineto_shapes
from traincast.trace.readers.kineto import KinetoFile, read_kineto

pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(kineto_fast.kernels() is None,
                                reason="compiled scanner unavailable")


def _trace(tmp_path: Path, events: list[str], name: str = "t.json.gz") -> Path:
    text = ('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},\n'
            '"traceEvents": [\n' + ",\n".join(events) + '\n], "traceName": "x"}')
    p = tmp_path / name
    p.write_bytes(gzip.compress(text.encode()))
    return p


def _same_both_ways(path: Path) -> KinetoFile:
    slow, fast = read_kineto(path, compiled=False), read_kineto(path, compiled=True)
    for f in dataclasses.fields(slow):
        x, y = getattr(slow, f.name), getattr(fast, f.name)
        if hasattr(x, "equals"):
            assert x.schema == y.schema and x.equals(y), f.name
        else:
            assert x == y, f.name
    return fast


def _op(i: int, dims: str, types: str | None = '["float"]') -> str:
    args = f'"External id": {i}, "Input Dims": {dims}'
    if types is not None:
        args += f', "Input type": {types}'
    return (f'{{"ph": "X", "cat": "cpu_op", "name": "op{i % 7}", "pid": 1, "tid": 1, '
            f'"ts": {10 * i}, "dur": 5, "args": {{{args}}}}}')


def test_pair_table_grows_across_files_and_loads_the_same(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(kineto_shapes, "_LOCAL", kineto_shapes.threading.local())
    wide = ", ".join(["[64, 128, 256]"] * 8)
    # 700 distinct pairs of ~130 bytes: more ids, slots and text than the first arrays hold;
    # odd ones repeat, some without types, one a shape list the checks refuse
    events = [_op(i, f"[[{i // 2}], {wide}]", None if i % 5 == 0 else '["float", "int"]')
              for i in range(1400)]
    events.append(_op(1400, '[[1], "not a shape"]'))
    fast = _same_both_ways(_trace(tmp_path, events))
    assert fast.shapes.num_rows == 1400
    table = kineto_shapes.pair_table(False)
    n = int(table.counts[0])
    assert n > 256 and table.table.size > 1024 and table.store.size > 64 << 10
    # a second file meets the same pairs: no new ids
    _same_both_ways(_trace(tmp_path, events[::-1], "u.json.gz"))
    assert kineto_shapes.pair_table(False) is table and int(table.counts[0]) == n
    # past its bound the table starts again at a file's first chunk
    monkeypatch.setattr(kineto_shapes, "_MAX_PAIRS", 10)
    _same_both_ways(_trace(tmp_path, events[:40], "v.json.gz"))
    assert kineto_shapes.pair_table(False) is not table


def test_names_with_escapes_absent_and_empty_intern_as_python(tmp_path: Path) -> None:
    names = ['"name": "a/b", ', '"name": "a\\/b", ', "", '"name": "", ', '"name": "a/b", ',
             '"name": "tab\\there", ']
    events = [f'{{"ph": "X", "cat": "cpu_op", {nm}"pid": 1, "tid": 1, "ts": {i}, "dur": 1}}'
              for i, nm in enumerate(names)]
    events.append('{"ph": "X", "name": "nocat", "pid": 1, "tid": 1, "ts": 9, "dur": 1}')
    events.append('{"ph": "X", "cat": "", "name": "emptycat", "pid": 1, "tid": 1, "ts": 9, '
                  '"dur": 1}')
    fast = _same_both_ways(_trace(tmp_path, events))
    assert fast.events.num_rows == 6  # cpu_op rows; no or empty category: not events


def test_many_small_events_size_the_arrays_again(tmp_path: Path) -> None:
    events = [f'{{"ph":"X","cat":"kernel","name":"k","ts":{i},"dur":1}}' for i in range(3000)]
    fast = _same_both_ways(_trace(tmp_path, events))
    assert fast.events.num_rows == 3000


def test_first_chunk_names_are_reused_by_the_next_file(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_fast, "_FIRSTS", {})
    events = [_op(i, "[[1]]") for i in range(20)]
    _same_both_ways(_trace(tmp_path, events))
    assert len(kineto_fast._FIRSTS) == 2  # cat and name dictionaries
    hits = []
    monkeypatch.setattr(kineto_fast, "_FIRSTS", _Spy(kineto_fast._FIRSTS, hits))
    _same_both_ways(_trace(tmp_path, events[::-1], "u.json.gz"))  # names in another order
    _same_both_ways(_trace(tmp_path, events, "v.json.gz"))
    assert hits == [True, False, True, True]  # (cat, name) per file
    escaped = [e.replace('"op3"', '"op\\/3"') for e in events]
    n = len(kineto_fast._FIRSTS)
    _same_both_ways(_trace(tmp_path, escaped, "w.json.gz"))
    assert len(kineto_fast._FIRSTS) == n  # categories known; names with an escape not kept


class _Spy(dict):
    def __init__(self, d: dict, hits: list[bool]) -> None:
        super().__init__(d)
        self.hits = hits

    def get(self, key, default=None):  # noqa: ANN001, ANN201 - dict's own signature
        self.hits.append(key in self)
        return super().get(key, default)
