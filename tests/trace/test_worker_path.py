"""The parse worker's cheaper steps give what the general ones give: narrowing of one chunk,
shared name dictionaries, the rank part packed for pickling, memoised call lookups, the
spool file names."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A
from traincast.trace import collectives as C
from traincast.trace import load as load_mod
from traincast.trace import shipped
from traincast.trace.iterations import Steps
from traincast.trace.narrow import narrow_ids
from traincast.trace.rank_part import RankPart, pack_part, unpack_part, world_tuple
from traincast.trace.readers.kineto import read_kineto


def _table(**cols: np.ndarray) -> pa.Table:
    return pa.Table.from_arrays([A.from_numpy(v) for v in cols.values()], names=list(cols))


def test_one_chunk_narrowing_equals_the_checked_cast() -> None:
    lo, hi = -(2**31), 2**31 - 1
    t = _table(pid=np.array([lo, hi], np.int64), tid=np.array([hi + 1, 0], np.int64),
               correlation=np.array([lo - 1, 0], np.int64),
               external_id=np.array([1, 2], np.int64), rf_id=np.array([-1, 5], np.int64),
               dur=np.array([1, 2], np.int64))
    one = narrow_ids(t)
    sliced = narrow_ids(t.slice(0, 2))
    chunked = narrow_ids(pa.concat_tables([t.slice(0, 1), t.slice(1, 1)]))  # Arrow's cast
    for out in (one, sliced):
        assert out.schema == chunked.schema
        for name in out.column_names:
            assert out.column(name).to_pylist() == chunked.column(name).to_pylist(), name
            assert out.column(name).num_chunks == 1
    assert one.schema.field("pid").type == pa.int32()
    assert one.schema.field("tid").type == pa.int64()
    assert one.schema.field("correlation").type == pa.int64()
    assert narrow_ids(t.slice(0, 0)).schema.field("tid").type == pa.int32()


def test_shared_dictionary_parts_equal_dictionary_parts() -> None:
    a = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1], pa.int32()),
                                       pa.array(["x", "y"]))
    b = pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()), pa.array(["x", "y"]))
    c = pa.DictionaryArray.from_arrays(pa.array([1, 0], pa.int32()), pa.array(["x", "z"]))
    for arr in (a, b, c, pa.chunked_array([a]), pa.chunked_array([a, c])):
        codes, values = A.shared_dictionary_parts(arr)
        want_codes, want_values = A.dictionary_parts(arr)
        assert codes.tolist() == want_codes.tolist() and values == want_values
    va, vb = A.shared_dictionary_parts(a)[1], A.shared_dictionary_parts(b)[1]
    assert va is not vb and all(x is y for x, y in zip(va, vb, strict=True))
    va.append("changed")  # a caller's list is its own
    assert A.shared_dictionary_parts(b)[1] == ["x", "y"]
    ints = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array([7]))
    assert A.shared_dictionary_parts(ints)[1] == [7]


def _calls_state(part: RankPart) -> list[tuple[object, ...]]:
    return [tuple(vars(c).values()) for c in part.calls]


def test_packed_part_round_trips(dlrm3: Path) -> None:
    k = read_kineto(sorted(dlrm3.iterdir())[0])
    part = load_mod._worker_part(k, None, None)
    assert part is not None and part.calls
    back = unpack_part(pickle.loads(pickle.dumps(pack_part(part))))
    assert (back.rank, back.world, back.kind, back.events) == (part.rank, part.world, None,
                                                                None)
    for name in ("number", "start", "end", "marker_rows"):
        got, want = getattr(back.steps, name), getattr(part.steps, name)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
        got[:] = got  # writable, as made by find_steps
    assert back.steps.synthetic == part.steps.synthetic
    assert _calls_state(back) == _calls_state(part)
    # a call of the world travels as its size and comes back as the process's world tuple
    assert all(c.group_ranks is world_tuple(8) for c in back.calls
               if tuple(c.group_ranks) == tuple(range(8)))
    steps = Steps(np.zeros(1, np.int64), np.array([5]), np.array([9]), np.full(1, -1, np.int64),
                  synthetic=True)
    odd = RankPart(3, 0, None, steps,  # type: ignore[arg-type]
                   [C.CallRecord(1, -1, "all_reduce", "0", (0, 2), "float", 8, 8)],
                   np.array([1, 2], np.int32))
    again = unpack_part(pickle.loads(pickle.dumps(pack_part(odd))))
    assert again.steps.synthetic and again.kind.tolist() == [1, 2]
    assert again.calls == odd.calls and again.calls[0].group_ranks == (0, 2)


def test_shipped_part_equals_the_worker_part(dlrm3: Path, tmp_path: Path) -> None:
    k = read_kineto(sorted(dlrm3.iterdir())[1])
    part = load_mod._worker_part(k, None, None)
    back = pickle.loads(pickle.dumps(shipped.Shipped(k, part, str(tmp_path))))
    assert _calls_state(back.part) == _calls_state(part)
    assert back.part.events.equals(part.events)


def test_memoised_byte_counts_equal_the_plain_ones() -> None:
    for dims, types in (("[[2, 3]]", '["float"]'), ("[[[1], [4]]]", '["c10::Half"]'),
                        ("", ""), ("not json", "[]"), ("[[5]]", "")):
        assert C._nbytes_of(dims, types) == C._nbytes(dims, types)


def test_spool_names_are_unique_in_a_process() -> None:
    names = {shipped._spool_name() for _ in range(1000)}
    assert len(names) == 1000
