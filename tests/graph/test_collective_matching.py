"""Cross-rank matching of collectives: by sequence number where recorded, else by order."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth_trace import Trace

import traincast
from traincast.errors import CollectiveMismatchError
from traincast.graph.collectives import match_collectives

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _rank(rank: int, seqs: list[int], names: list[str] | None = None) -> Trace:
    """One step; one all_reduce per seq, each issued by record_param_comms (with args)."""
    t = Trace(rank=rank, world_size=2, pid=100 + rank)
    names = names or ["allreduce"] * len(seqs)
    t.step(1, 0, 100 * len(seqs) + 50)
    for i, (seq, nm) in enumerate(zip(seqs, names, strict=True)):
        t0 = 10 + 100 * i
        t.host("record_param_comms", t0, 30, **{
            "Collective name": nm, "Process Group Name": "0", "Process Group Ranks": "[0, 1]",
            "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float", "Group size": 2,
            **({"Seq": seq} if seq >= 0 else {})})
        t.host(f"nccl:{'all_reduce' if nm == 'allreduce' else nm}", t0 + 5, 20,
               cat="user_annotation")
        t.launch("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", t0 + 10, 5, t0 + 20,
                 40, stream=13)
    return t


def test_match_by_recorded_sequence_number(tmp_path: Path) -> None:
    # rank 1's window caught one more call (seq 4) than rank 0's: seq matching still pairs
    # 5 with 5 and 6 with 6 and leaves seq 4 unmatched instead of shifting every pair
    _rank(0, [5, 6]).write(tmp_path)
    _rank(1, [4, 5, 6]).write(tmp_path)
    ts = traincast.load(tmp_path)
    m = match_collectives(ts)
    assert len(m.groups) == 2 and m.unmatched.size == 1
    tbl = ts.collectives.to_pandas()
    assert tbl["recorded_seq"].tolist() == [5, 6, 4, 5, 6]
    assert tbl["in_bytes"].tolist() == [4096] * 5
    for grp in m.groups:
        seqs = tbl.set_index("kernel_event").loc[grp, "recorded_seq"]
        assert seqs.nunique() == 1


def test_without_sequence_numbers_counts_must_agree(tmp_path: Path) -> None:
    _rank(0, [-1, -1]).write(tmp_path)
    _rank(1, [-1, -1, -1]).write(tmp_path)
    ts = traincast.load(tmp_path)
    with pytest.raises(CollectiveMismatchError, match="rank 0 has 2, rank 1 has 3"):
        match_collectives(ts)


def test_disagreeing_collectives_are_an_error(tmp_path: Path) -> None:
    _rank(0, [1, 2], ["allreduce", "allreduce"]).write(tmp_path)
    _rank(1, [1, 2], ["allreduce", "broadcast"]).write(tmp_path)
    with pytest.raises(CollectiveMismatchError, match="sequence number 2.*all_reduce, broadcast"):
        match_collectives(traincast.load(tmp_path))


def test_dlrm_collectives_match_on_all_eight_ranks() -> None:
    if not SHARED.is_dir():
        pytest.skip("shared data not available")
    ts = traincast.load(SHARED / "traces" / "dlrm_8xv100" / "kineto")
    m = match_collectives(ts)
    assert len(m.groups) == 8 and m.unmatched.size == 0
    rank = ts.column("rank")
    for g in m.groups:
        assert sorted(rank[g].tolist()) == list(range(8))
    kinds = m.table.groupby("group_id")["collective"].first().tolist()
    assert kinds.count("all_to_all") == 5 and kinds.count("all_reduce") == 3


def _skewed(folder: Path, skew_us: float, host: str | None) -> Path:
    """Two ranks, three all_reduces ending together; rank 1's clock reads ``skew_us`` later."""
    for rank in (0, 1):
        t = Trace(rank=rank, world_size=2, pid=100 + rank)
        t.host_name = host
        off = skew_us * rank
        t.step(1, off, 1000)
        for i in range(3):
            t0 = off + 10 + 300 * i
            t.host("nccl:all_reduce", t0, 20, cat="user_annotation")
            t.launch("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", t0 + 5, 5,
                     t0 + 20 + 10 * rank, 100 - 10 * rank, stream=13)
        t.write(folder)
    return folder


def test_clock_offsets_align_ranks_on_different_clocks(tmp_path: Path) -> None:
    from traincast.graph.collectives import clock_offsets

    ts = traincast.load(_skewed(tmp_path / "a", 5000.0, None))
    assert clock_offsets(ts, match_collectives(ts)) == {0: 0, 1: 5_000_000}
    # the same skew between ranks that recorded one host name is taken as real
    ts = traincast.load(_skewed(tmp_path / "b", 5000.0, "node0"))
    assert clock_offsets(ts, match_collectives(ts)) == {0: 0, 1: 0}
    # offsets within the jitter of collective end times are not clock skew
    ts = traincast.load(_skewed(tmp_path / "c", 0.01, None))
    assert clock_offsets(ts, match_collectives(ts)) == {0: 0, 1: 0}


def test_rank_list_keys_are_exact_set_keys(tmp_path: Path) -> None:
    import dataclasses

    import numpy as np
    import pyarrow as pa

    from traincast.graph.collectives import rank_list_keys

    _rank(0, [5, 6]).write(tmp_path)
    _rank(1, [5, 6]).write(tmp_path)
    ts = traincast.load(tmp_path)
    lists = [[0, 1], [1, 0], [0, 1, 2], [2, 1, 0], [1], [], [0, 1]]
    tbl = ts.collectives
    rows = pa.array(np.arange(len(lists)) % tbl.num_rows)
    tbl = tbl.take(rows)
    # one stored list per row, and a second copy of [0, 1] referenced by the last row:
    # equal contents in different stored lists get the same key
    i = tbl.schema.get_field_index("members")
    tbl = tbl.set_column(i, tbl.schema.field(i), pa.array(range(len(lists)), pa.int32()))
    stored = pa.table({"ranks": pa.array(lists, pa.list_(pa.int32()))})
    keys, complete, members = rank_list_keys(dataclasses.replace(ts, collectives=tbl,
                                                                 member_lists=stored))
    by_tuple = [tuple(sorted(x)) for x in lists]
    for a in range(len(lists)):
        for b in range(len(lists)):
            assert (keys[a] == keys[b]) == (by_tuple[a] == by_tuple[b])
        assert members[int(keys[a])] == by_tuple[a]
    # complete: every member loaded (ranks 0 and 1) and at least two of them
    assert complete.tolist() == [True, True, False, False, False, False, True]
    # a row referencing a list the TraceSet does not hold is refused, not misread
    from traincast.errors import CollectiveMismatchError

    with pytest.raises(CollectiveMismatchError, match="missing member list"):
        rank_list_keys(dataclasses.replace(ts, collectives=tbl, member_lists=stored.slice(0, 3)))
