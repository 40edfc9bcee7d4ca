"""The columns a parse builds without pandas or Arrow's compute functions, against the
Arrow-compute code they replace (kept here as the reference): the ``shapes`` table of a
Kineto file (:func:`traincast.trace.readers.kineto_shapes.shapes_table`), ``pa.array``'s
conversions (:func:`traincast.trace.arrow.column`, the ET reader's columns), the link's host
event candidates and the shapes ordered by event, on every shared trace that has shapes or
an execution trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import traincast.trace.readers.kineto as K
import traincast.trace.readers.kineto_shapes as KS
from traincast.errors import TraceFormatError
from traincast.trace import arrow as A
from traincast.trace.link import match as M
from traincast.trace.link.pair import _by_event
from traincast.trace.readers.et import read_execution_trace

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
needs_data = pytest.mark.skipif(not (DATA / "dlrm_8xv100").is_dir(),
                                reason="shared trace data not available")


def _kineto_files() -> list[Path]:
    if not DATA.is_dir():
        return []
    skip = ("/et/", "et.json", "/nsys/", "/otf2/")
    return sorted(p for p in DATA.rglob("*.json*")
                  if p.is_file() and not any(s in str(p) for s in skip))


def _et_files() -> list[Path]:
    if not DATA.is_dir():
        return []
    return sorted([*DATA.glob("dlrm_8xv100/et/*.json.gz"), DATA / "linear_1x2080ti" / "et.json.gz",
                   DATA / "hta" / "et_simple_add" / "et.json.gz"])


def _outcome(fn: Any, *args: Any) -> Any:
    """The value of ``fn(*args)``, or (exception type, message) when it raises."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return type(exc), str(exc)


def _same(a: Any, b: Any) -> None:
    if isinstance(a, pa.Table | pa.Array):
        assert isinstance(b, type(a)) and a.schema == b.schema if isinstance(a, pa.Table) else (
            a.type == b.type), (a, b)
        assert a.equals(b)
    else:
        assert a == b


# ------------------------------------------------------------------- shapes_table (reference)


def _binary(data: np.ndarray, off: np.ndarray) -> pa.Array:
    n = off.size - 1
    if off[-1] < 2**31:
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(off.astype(np.int32)),
                                                      pa.py_buffer(data)])
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(off),
                                                        pa.py_buffer(data)])


def _ref_shapes_table(parts: list, old_to_new: np.ndarray) -> pa.Table:
    """shapes_table as it was: take / dictionary_encode / cast of binary arrays."""
    parts = [p for p in parts if p[0].size]
    if not parts:
        empty = pa.array([], pa.string())
        return pa.Table.from_arrays([A.from_numpy(np.empty(0, np.int64)), empty, empty],
                                    names=["event", "input_dims", "input_types"])
    pairs = [p for p in parts if isinstance(p, KS.PairPart)]
    if len(pairs) == len(parts) and all(p.table is pairs[0].table for p in pairs):
        got = KS._pairs_table(pairs, old_to_new)
        if got is not None:
            return got
    parts = [p.bytes_part() if isinstance(p, KS.PairPart) else p for p in parts]
    idx = np.concatenate([p[0] for p in parts])
    dims = _binary(*KS._concat(parts, 1))
    types = _binary(*KS._concat(parts, 3))
    order = np.argsort(idx, kind="stable")
    if (np.diff(order) < 0).any():
        take_o = A.from_numpy(order)
        idx, dims, types = idx[order], dims.take(take_o), types.take(take_o)
    new = old_to_new[idx]
    de, te = dims.dictionary_encode(), types.dictionary_encode()
    di = A.to_numpy(de.indices).astype(np.int64)
    ti = A.to_numpy(te.indices).astype(np.int64)
    nt = max(len(te.dictionary), 1)
    upairs, inv = np.unique(di * nt + ti, return_inverse=True)
    dvals, tvals = de.dictionary.to_pylist(), te.dictionary.to_pylist()
    verdict = np.array(KS._verdicts([(dvals[p // nt], tvals[p % nt])
                                     for p in upairs.tolist()]), bool)
    ok = verdict[inv.reshape(-1)]
    keep = np.flatnonzero(ok & (new >= 0))
    take = A.from_numpy(keep)
    try:
        as_text = [col.take(take).cast(pa.string()) for col in (dims, types)]
    except pa.ArrowInvalid:
        raise UnicodeDecodeError("utf-8", b"", 0, 1, "invalid UTF-8 in Input Dims or "
                                 "Input type") from None
    return pa.Table.from_arrays([A.from_numpy(new[keep]), *as_text],
                                names=["event", "input_dims", "input_types"])


def _check_shapes(parts: list, old_to_new: np.ndarray) -> None:
    got = _outcome(KS.shapes_table, parts, old_to_new)
    want = _outcome(_ref_shapes_table, parts, old_to_new)
    _same(got, want)


@needs_data
@pytest.mark.parametrize("compiled", [False, None], ids=["typed", "default"])
@pytest.mark.parametrize("path", _kineto_files(), ids=lambda p: str(p.relative_to(DATA)))
def test_shapes_table_as_arrow_compute_made_it(path: Path, compiled: bool | None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = KS.shapes_table

    def both(parts: list, old_to_new: np.ndarray) -> pa.Table:
        _check_shapes(parts, old_to_new)
        seen.append(1)
        return real(parts, old_to_new)

    monkeypatch.setattr(K, "shapes_table", both)
    try:
        K.read_kineto(path, compiled=compiled)
    except TraceFormatError:
        pytest.skip("not a Kineto trace")
    assert seen


def _part(rows: list[int], texts: list[tuple[bytes, bytes]]) -> KS.ShapePart:
    return KS.part_of_rows([(r, d, t) for r, (d, t) in zip(rows, texts, strict=True)])


def test_shapes_table_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows out of order (merged begin/end events), dropped events and texts, repeats, no
    row, and text that is not UTF-8 (the same error)."""
    good, other = (b"[[1, 2], []]", b'["float", "Scalar"]'), (b"[[3]]", b"")
    bad = (b"[1, [2]]", b"[]")
    o2n = np.array([0, -1, 1, 2, 3, 4, -1, 5], np.int64)
    _check_shapes([_part([0, 2, 5], [good, bad, other]), _part([1, 3, 4], [good, good, other])],
                  o2n)
    _check_shapes([_part([3, 4, 5], [good, other, good]), _part([0, 1, 2], [other, good, bad])],
                  o2n)
    _check_shapes([], o2n)
    _check_shapes([_part([], [])], o2n)
    _check_shapes([_part([1, 6], [good, other])], o2n)  # no row kept
    monkeypatch.setattr(KS, "shapes_ok", lambda d, t: True)
    _check_shapes([_part([0, 2], [(b"[[\xff\xfe]]", b""), good])], o2n)
    with pytest.raises(UnicodeDecodeError, match="invalid UTF-8 in Input Dims"):
        KS.shapes_table([_part([0, 2], [(b"[[\xff\xfe]]", b""), good])], o2n)


# ---------------------------------------------------------------------- column (pa.array)


@pytest.mark.parametrize(("values", "typ"), [
    ([1, -2, 2**63 - 1], pa.int64()), ([], pa.int64()), ([7, -1], pa.int32()),
    ([2**40], pa.int32()), ([2**70], pa.int64()), ([1, None], pa.int64()),
    ([1, True], pa.int64()), ([1.5, 2], pa.int64()), ([True, False, True], pa.bool_()),
    ([True, None], pa.bool_()), ([], pa.bool_()), (["a", "", "é€"], pa.string()),
    ([], pa.string()), (["a", None], pa.string()), (["\ud800"], pa.string()),
    (["a", 1], pa.string()), (["x"] * 3, pa.string()),
    ([[0, 1], [], [5]], pa.list_(pa.int32())), ([], pa.list_(pa.int32())),
    ([[2**40]], pa.list_(pa.int32())), ([[1], None], pa.list_(pa.int32())),
    ([[1.0]], pa.list_(pa.int32())),
], ids=repr)
def test_column_as_pa_array(values: list, typ: pa.DataType) -> None:
    _same(_outcome(A.column, values, typ), _outcome(pa.array, values, typ))


@needs_data
@pytest.mark.parametrize("path", _et_files(), ids=lambda p: str(p.relative_to(DATA)))
def test_et_columns_as_pa_array(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = A.column

    def both(values: list, typ: pa.DataType) -> pa.Array:
        got = real(values, typ)
        _same(got, pa.array(values, typ))
        calls.append(typ)
        return got

    monkeypatch.setattr(A, "column", both)
    et = read_execution_trace(path)
    # the comm_* columns convert the values of the comm nodes only (none: no call)
    comm = sum(name.startswith("comm_") for name in et.nodes.column_names)
    skipped = 0 if any(et.nodes.column("is_comm").to_pylist()) else comm
    assert len(calls) == et.nodes.num_columns + et.data_deps.num_columns - skipped


# ------------------------------------------------------------- link candidates (reference)


def _ref_event_candidates(events: pa.Table) -> dict[str, Any]:
    """match._event_candidates as it was (Arrow compute)."""
    def as_str(col: Any) -> pa.Array:
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return arr.cast(pa.string()) if pa.types.is_dictionary(arr.type) else arr

    kind = as_str(events.column("kind"))
    mask = pc.is_in(kind, value_set=pa.array(["cpu_op", "annotation"]))
    if "device" in events.column_names:
        mask = pc.and_(mask, pc.less(events.column("device"), 0))
    mask = pc.fill_null(mask, False)
    rows = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))
    take = pa.array(rows, pa.int64())

    def col(name: str, default: int) -> np.ndarray:
        if name not in events.column_names:
            return np.full(len(rows), default, dtype=np.int64)
        a = events.column(name).take(take)
        return np.asarray(pc.fill_null(a, default).to_numpy(), dtype=np.int64)

    return {"row": rows.astype(np.int64), "name": as_str(events.column("name").take(take)
                                                        ).to_pylist(),
            "ts": col("ts", 0), "dur": col("dur", 0), "tid": col("tid", -1),
            "external_id": col("external_id", -1), "rf_id": col("rf_id", -1)}


def _check_candidates(events: pa.Table) -> None:
    got, want = M._event_candidates(events), _ref_event_candidates(events)
    assert list(got) == list(want)
    for k, v in want.items():
        if k == "name":
            assert got[k] == v
        else:
            assert got[k].dtype == v.dtype and np.array_equal(got[k], v), k


def _linked_kineto() -> list[Path]:
    if not DATA.is_dir():
        return []
    return sorted([*DATA.glob("dlrm_8xv100/kineto/*.json.gz"),
                   DATA / "linear_1x2080ti" / "kineto.pt.trace.json.gz",
                   DATA / "hta" / "et_simple_add" / "kineto.json.gz"])


@needs_data
@pytest.mark.parametrize("path", _linked_kineto(), ids=lambda p: str(p.relative_to(DATA)))
def test_event_candidates_as_arrow_compute_made_them(path: Path) -> None:
    events = K.read_kineto(path).events
    _check_candidates(events)
    # nulls and a plain string kind, two chunks
    n = events.num_rows
    dev = A.to_numpy(events.column("device")).tolist()
    with_nulls = events.set_column(
        events.column_names.index("device"), "device",
        pa.array([None if i % 7 == 0 else d for i, d in enumerate(dev)], pa.int32()))
    kind = events.column("kind").combine_chunks().cast(pa.string())
    with_nulls = with_nulls.set_column(
        with_nulls.column_names.index("kind"), "kind",
        pa.chunked_array([kind.slice(0, n // 2), kind.slice(n // 2)]))
    _check_candidates(with_nulls)
    _check_candidates(with_nulls.drop_columns(["device", "rf_id"]))
    _check_candidates(events.slice(0, 0))


# ------------------------------------------------------------------------ shapes by event


def test_by_event_as_sort_by() -> None:
    shapes = pa.Table.from_arrays(
        [pa.array([5, 1, 3, 1, 0, 5], pa.int64()),
         pa.array(["[[1]]", "[[2]]", "[[3]]", "[[4]]", "[]", "[[6]]"], pa.string()),
         pa.array(["a", "b", "c", "d", "", "f"], pa.string())],
        schema=pa.schema([("event", pa.int64()), ("input_dims", pa.string()),
                          ("input_types", pa.string())]))
    both = pa.concat_tables([shapes.slice(0, 3), shapes.slice(3)])
    _same(_by_event(both), both.sort_by("event").combine_chunks())
    _same(_by_event(both.slice(0, 0)), both.slice(0, 0).sort_by("event").combine_chunks())
