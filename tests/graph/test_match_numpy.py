"""Collective matching in numpy gives exactly what the pandas implementation it replaced
gave: the same groups (order, rows), unmatched calls, table, errors, size mismatches and
clock offsets. The reference (``_reference_match`` and friends) is that implementation,
kept here verbatim."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import traincast
from traincast.errors import CollectiveMismatchError, TraincastWarning
from traincast.graph import collectives as C
from traincast.graph.collectives import (
    SAME_CLOCK_NS,
    SYMMETRIC,
    clock_offsets,
    match_collectives,
    rank_list_keys,
    size_mismatches,
)
from traincast.trace.arrow import to_numpy
from traincast.trace.schema import COLLECTIVES_SCHEMA, MEMBER_LISTS_SCHEMA
from traincast.trace.traceset import RankInfo, TraceSet

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"

# ---------------------------------------------------------------- the pandas reference


def _reference_match(ts: TraceSet) -> tuple[list[np.ndarray], np.ndarray, pd.DataFrame]:
    df = ts.collectives.drop_columns(["members"]).to_pandas()
    if df.empty:
        df["exec_event"] = pd.Series(dtype="int64")
        df["step"] = pd.Series(dtype="int32")
        df["group_id"] = pd.Series(dtype="int64")
        df["ranks_key"] = pd.Series(dtype="int64")
        return [], np.empty(0, np.int64), df
    iteration = ts.events.column("iteration").to_numpy()
    df["exec_event"] = np.where(df["kernel_event"] >= 0, df["kernel_event"], df["event"])
    df["step"] = iteration[df["event"].to_numpy()]
    df["group_id"] = -1
    keys, complete, ranks_of = rank_list_keys(ts)
    df["complete"] = complete
    df["ranks_key"] = keys
    df = df.sort_values(["rank", "event"], kind="stable").reset_index(drop=True)
    df["ordinal"] = df.groupby(["rank", "process_group", "ranks_key", "step"]).cumcount()
    by_seq = (df.groupby("process_group")["recorded_seq"].transform("min") >= 0).to_numpy()
    groups: list[np.ndarray] = []
    members: list[np.ndarray] = []

    def add_group(g: pd.DataFrame, where: str) -> None:
        names = g["collective"].unique()
        if len(names) > 1 and not (len(g) == 2 and set(names) == {"send", "recv"}):
            raise CollectiveMismatchError(
                f"{where}: ranks disagree on the collective ({', '.join(sorted(names))})",
                ts.ranks[int(g["rank"].iloc[0])].path)
        members.append(g.index.to_numpy())
        groups.append(g["exec_event"].to_numpy(np.int64))

    seq_rows = df[by_seq & df["complete"].to_numpy()]
    for (pg, rk, seq), g in seq_rows.groupby(["process_group", "ranks_key", "recorded_seq"],
                                              sort=False):
        if g["rank"].nunique() == len(ranks_of[rk]) == len(g):
            add_group(g, f"process group {pg!r} sequence number {seq}")
    cand = df[~by_seq & df["complete"].to_numpy() & (df["step"] >= 0).to_numpy()]
    for (pg, rk, step), sub in cand.groupby(["process_group", "ranks_key", "step"],
                                             sort=False):
        ranks = ranks_of[rk]
        counts = sub.groupby("rank").size()
        if len(counts) != len(ranks) or counts.nunique() != 1:
            lo, hi = counts.idxmin(), counts.idxmax()
            missing = sorted(set(ranks) - set(counts.index))
            detail = (f"rank {missing[0]} has none" if missing else
                      f"rank {lo} has {counts[lo]}, rank {hi} has {counts[hi]}")
            raise CollectiveMismatchError(
                f"process group {pg!r} step {step}: ranks issued different numbers of "
                f"collectives ({detail})", ts.ranks[int(lo)].path)
        for ordinal, g in sub.groupby("ordinal", sort=True):
            add_group(g, f"process group {pg!r} step {step} call #{ordinal}")
    gid = np.full(len(df), -1, np.int64)
    for k, idx in enumerate(members):
        gid[idx] = k
    df["group_id"] = gid
    unmatched = df.loc[df["group_id"] < 0, "exec_event"].to_numpy(np.int64)
    return groups, unmatched, df.drop(columns=["complete", "ordinal"])


def _reference_size_mismatches(t: pd.DataFrame) -> pd.DataFrame:
    cols = ["group_id", "collective", "process_group", "step", "which", "rank_small",
            "bytes_small", "rank_large", "bytes_large"]
    if t.empty:
        return pd.DataFrame(columns=cols)
    t = t[(t["group_id"] >= 0) & t["collective"].isin(SYMMETRIC)]
    rows = []
    for which in ("in_bytes", "out_bytes"):
        v = t[t[which] >= 0]
        if v.empty:
            continue
        g = v.groupby("group_id")[which]
        lo, hi = g.transform("min"), g.transform("max")
        bad = v[(lo != hi).to_numpy()]
        for gid, sub in bad.groupby("group_id", sort=True):
            small, large = sub.loc[sub[which].idxmin()], sub.loc[sub[which].idxmax()]
            rows.append([int(gid), small["collective"], small["process_group"],
                         int(small["step"]), which, int(small["rank"]), int(small[which]),
                         int(large["rank"]), int(large[which])])
    out = pd.DataFrame(rows, columns=cols)
    return out.drop_duplicates("group_id").sort_values("group_id").reset_index(drop=True)


def _reference_offsets(ts: TraceSet, groups: list[np.ndarray]) -> dict[int, int]:
    ranks = ts.rank_ids
    offsets = {r: 0 for r in ranks}
    hosts = {info.host for info in ts.ranks.values()}
    if not groups or len(ranks) < 2 or (len(hosts) == 1 and "" not in hosts):
        return offsets
    rows = np.concatenate(groups)
    end = (to_numpy(ts.events.column("ts"))[rows].astype(np.int64)
           + to_numpy(ts.events.column("dur"))[rows])
    gid = np.repeat(np.arange(len(groups)), [g.size for g in groups])
    r_of = to_numpy(ts.events.column("rank"))[rows]
    ref = ranks[0]
    is_ref = r_of == ref
    ref_end = np.full(len(groups), np.iinfo(np.int64).min, np.int64)
    ref_end[gid[is_ref]] = end[is_ref]
    has = ref_end[gid] != np.iinfo(np.int64).min
    if not has.any():
        return offsets
    diff = end[has] - ref_end[gid[has]]
    med = pd.Series(diff).groupby(r_of[has]).median()
    if med.abs().max() <= SAME_CLOCK_NS:
        return offsets
    for r, v in med.items():
        offsets[int(r)] = int(v)
    return offsets


# ---------------------------------------------------------------- comparison


def _outcome(fn, ts: TraceSet):  # noqa: ANN001, ANN202
    try:
        return fn(ts), None
    except CollectiveMismatchError as exc:
        return None, (str(exc), exc.args)


def _assert_same(ts: TraceSet) -> C.MatchedCollectives | None:
    """The numpy and the pandas matching agree on ``ts`` (results or error); returns the
    numpy result (None when both refused)."""
    new, new_err = _outcome(C._match, ts)
    ref, ref_err = _outcome(_reference_match, ts)
    assert new_err == ref_err
    if ref is None:
        return None
    groups, unmatched, table = ref
    assert len(new.groups) == len(groups)
    for a, b in zip(new.groups, groups, strict=True):
        assert a.dtype == b.dtype == np.int64
        np.testing.assert_array_equal(a, b)
    assert new.unmatched.dtype == unmatched.dtype
    np.testing.assert_array_equal(new.unmatched, unmatched)
    pd.testing.assert_frame_equal(new.table, table, check_exact=True)
    assert list(new.table.dtypes) == list(table.dtypes)
    # the numpy columns are the table's rows
    cols = new.columns
    for name in ("rank", "event", "exec_event", "step", "group_id", "ranks_key"):
        np.testing.assert_array_equal(cols[name], table[name].to_numpy())
        assert not cols[name].flags.writeable
    for name in ("kernel_event", "issue_event", "in_bytes", "out_bytes"):
        np.testing.assert_array_equal(cols[name], table[name].fillna(-1).to_numpy(np.int64))
    for name, values in (("collective", new.collective_names),
                         ("process_group", new.process_group_names)):
        got = [values[k] if k >= 0 else None for k in cols[name].tolist()]
        assert got == [None if v is None or v is np.nan else v for v in table[name]]
    ref_bad = _reference_size_mismatches(table)
    pd.testing.assert_frame_equal(size_mismatches(new), ref_bad, check_exact=True)
    assert list(size_mismatches(new).dtypes) == list(ref_bad.dtypes)
    if "ts" in ts.events.column_names:
        assert clock_offsets(ts, new) == _reference_offsets(ts, groups)
    return new


# ---------------------------------------------------------------- real traces


def _shared_sets() -> list[Path]:
    if not SHARED.is_dir():
        return []
    # (every shared set whose collectives table has rows)
    hta = SHARED / "hta"
    sets = [SHARED / "dlrm_8xv100" / "kineto", hta / "a100_2rank_nccl",
            hta / "v100_2rank_allreduce", hta / "sampled_128rank_sendrecv",
            hta / "a100_16rank_5streams", hta / "edge" / "cpu_only_rank34.json.gz",
            hta / "edge" / "no_distributed_info.json.gz", hta / "trace_diff" / "control.json.gz",
            hta / "trace_diff" / "test.json.gz",
            SHARED / "tracelens" / "b200_8rank_rank0.json.gz",
            SHARED / "otf2" / "ping-pong-otf2", SHARED / "otf2" / "ping-pong-otf2-papi"]
    return [p for p in sets if p.exists()]


@pytest.mark.parametrize("path", _shared_sets(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_same_as_pandas_on_shared_traces(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ts = traincast.load(path)
        except ImportError as exc:  # (otf2 needs its package)
            pytest.skip(str(exc))
    if ts.collectives.num_rows == 0:
        pytest.skip("no collectives")
    _assert_same(ts)


def test_same_as_pandas_on_shared_traces_present() -> None:
    if not SHARED.is_dir():
        pytest.skip("shared data not available")
    assert _shared_sets(), "no shared trace set found"


# ---------------------------------------------------------------- synthetic sets


def _traceset(rows: list[dict], member_lists: list[list[int]], n_events: int,
              iteration: list[int | None], ranks: list[int], *,
              types: dict[str, pa.DataType] | None = None,
              hosts: dict[int, str] | None = None,
              times: tuple[list[int], list[int], list[int]] | None = None) -> TraceSet:
    """A TraceSet holding only what matching reads: the collectives ``rows`` (dicts of
    :data:`COLLECTIVES_SCHEMA` columns; defaults filled), the events' ``iteration`` (and
    rank/ts/dur for clock offsets)."""
    defaults = {"kernel_event": -1, "issue_event": -1, "collective": "all_reduce",
                "process_group": "0", "seq": 0, "recorded_seq": -1, "group_size": 2,
                "members": 0, "dtype": "Float", "in_bytes": 4, "out_bytes": 4}
    full = [{**defaults, **r} for r in rows]
    schema = COLLECTIVES_SCHEMA
    for name, t in (types or {}).items():
        schema = schema.set(schema.get_field_index(name), pa.field(name, t))
    coll = pa.Table.from_pylist(full, schema=schema) if full else schema.empty_table()
    ev = {"iteration": pa.array(iteration, pa.int32())}
    if times is not None:
        ev["rank"] = pa.array(times[0], pa.int32())
        ev["ts"] = pa.array(times[1], pa.int64())
        ev["dur"] = pa.array(times[2], pa.int64())
    assert len(iteration) == n_events
    return TraceSet(
        events=pa.table(ev), collectives=coll, shapes=pa.table({}),
        iterations=pa.table({}),
        ranks={r: RankInfo(rank=r, path=Path(f"rank-{r}.json"),
                           host=(hosts or {}).get(r, "")) for r in ranks},
        member_lists=pa.Table.from_pylist([{"ranks": m} for m in member_lists],
                                          schema=MEMBER_LISTS_SCHEMA))


def _job(rng: random.Random, *, seqs: bool, perturb: int,
         nulls: bool = False) -> TraceSet:
    """A random job: process groups over subsets of 2-4 ranks, each issuing calls per step
    in one order on every member (by sequence number or not), then ``perturb`` random
    changes (a dropped call, another name, a step, a null, a missing rank...)."""
    n_ranks = rng.randint(2, 4)
    world = list(range(n_ranks))
    lists = [world, world[:2], world[::-1], [0, n_ranks]]  # the last names an absent rank
    pgs = [("0", 0), ("1", 1), ("", 2), ("x", 3), ("0", 1)]
    per_rank: dict[int, list[dict]] = {r: [] for r in world}
    steps = rng.randint(1, 3)
    seq_of: dict[tuple[str, int], int] = {}
    names = ["all_reduce", "broadcast", "all_to_all", "all_gather"]
    for step in range(-1, steps):
        for pg, m in rng.sample(pgs, rng.randint(1, len(pgs))):
            for _ in range(rng.randint(1, 3)):
                name = rng.choice(names)
                s = seq_of.get((pg, m), rng.randint(0, 3)) if seqs and pg != "x" else -1
                seq_of[(pg, m)] = s + 1 if s >= 0 else -1
                size = rng.choice([4, 8, 4])
                for r in lists[m]:
                    if r in per_rank:
                        per_rank[r].append({"rank": r, "collective": name,
                                            "process_group": pg, "members": m,
                                            "recorded_seq": s, "step": step,
                                            "in_bytes": size, "out_bytes": size})
        if rng.random() < 0.5:  # a send/recv pair between ranks 0 and 1
            for r, nm in ((0, "send"), (1, "recv")):
                per_rank[r].append({"rank": r, "collective": nm, "process_group": "p2p",
                                    "members": 1, "recorded_seq": -1, "step": step})
    rows = [c for r in world for c in per_rank[r]]
    for _ in range(perturb):
        if not rows:
            break
        i = rng.randrange(len(rows))
        what = rng.randrange(9 if nulls else 7)
        if what == 0:
            rows.pop(i)
        elif what == 1:
            rows[i]["collective"] = rng.choice(names + ["send", "recv"])
        elif what == 2:
            rows[i]["step"] = rng.randint(-1, steps)
        elif what == 3:
            rows[i]["in_bytes"] = rng.choice([-1, 2, 16])
        elif what == 4:
            rows[i]["recorded_seq"] = rng.randint(-1, 5)
        elif what == 5:
            rows.append(dict(rows[i]))
        elif what == 6:
            rows[i]["out_bytes"] = rng.choice([-1, 2, 16])
        elif what == 7:
            rows[i]["process_group"] = None
        else:
            rows[i]["recorded_seq"] = None
    rng.shuffle(rows)  # the table's order is not the (rank, event) order
    n_events = len(rows) + 5
    events = rng.sample(range(n_events), len(rows))
    iteration = [rng.choice([-1, 7]) for _ in range(n_events)]
    rank_of = [0] * n_events
    t = [rng.randrange(10**6) for _ in range(n_events)]
    for row, e in zip(rows, events, strict=True):
        row["event"] = e
        iteration[e] = row.pop("step")
        rank_of[e] = row["rank"]
        if rng.random() < 0.5:
            row["kernel_event"] = rng.randrange(n_events)
        if rng.random() < 0.2:
            row["issue_event"] = rng.randrange(n_events)
    return _traceset(rows, lists, n_events, iteration, world,
                     hosts={r: f"h{r % 2}" for r in world},
                     times=(rank_of, t, [rng.randrange(10**4) for _ in range(n_events)]))


@pytest.mark.parametrize("seqs", [False, True])
def test_random_jobs_same_as_pandas(seqs: bool) -> None:
    rng = random.Random(7 + seqs)
    refused = 0
    for case in range(100):
        ts = _job(rng, seqs=seqs, perturb=case % 4)
        refused += _assert_same(ts) is None
    assert 0 < refused < 100  # both outcomes were exercised


def test_random_jobs_with_nulls_same_as_pandas() -> None:
    rng = random.Random(11)
    for case in range(80):
        _assert_same(_job(rng, seqs=case % 2 == 0, perturb=1 + case % 5, nulls=True))


def _pairs(rows: list[dict]) -> TraceSet:
    """Ranks 0 and 1 (members list 0), one event per row, all in step 0."""
    for i, r in enumerate(rows):
        r.setdefault("event", i)
    return _traceset(rows, [[0, 1]], len(rows), [0] * len(rows), [0, 1])


def test_sequence_numbers_pair_calls_across_windows() -> None:
    rows = [{"rank": 0, "recorded_seq": s} for s in (5, 6)]
    rows += [{"rank": 1, "recorded_seq": s} for s in (4, 5, 6)]
    m = _assert_same(_pairs(rows))
    assert [g.tolist() for g in m.groups] == [[0, 3], [1, 4]]
    assert m.unmatched.tolist() == [2]


def test_absent_peer_leaves_calls_unmatched() -> None:
    ts = _traceset([{"rank": 0, "event": 0, "members": 0}, {"rank": 0, "event": 1,
                                                            "members": 1}],
                   [[0, 1], [0]], 2, [0, 0], [0])
    m = _assert_same(ts)
    assert m.groups == [] and m.unmatched.tolist() == [0, 1]


def test_send_recv_pair_is_one_group() -> None:
    m = _assert_same(_pairs([{"rank": 0, "collective": "send"},
                             {"rank": 1, "collective": "recv"}]))
    assert [g.tolist() for g in m.groups] == [[0, 1]]


def test_send_recv_pair_passes_where_a_later_group_is_refused() -> None:
    rows = [{"rank": 0, "collective": "send"}, {"rank": 0, "collective": "all_reduce"},
            {"rank": 1, "collective": "recv"}, {"rank": 1, "collective": "broadcast"}]
    with pytest.raises(CollectiveMismatchError, match=r"call #1: .*\(all_reduce, broadcast\)"):
        C._match(_pairs(rows))
    _assert_same(_pairs(rows))


@pytest.mark.parametrize(("rows", "text"), [
    ([{"rank": 0}, {"rank": 0}, {"rank": 1}],
     "process group '0' step 0: ranks issued different numbers of collectives "
     "(rank 1 has 1, rank 0 has 2)"),
    ([{"rank": 0}],
     "process group '0' step 0: ranks issued different numbers of collectives "
     "(rank 1 has none)"),
    ([{"rank": 0, "collective": "all_reduce"}, {"rank": 1, "collective": "broadcast"}],
     "process group '0' step 0 call #0: ranks disagree on the collective "
     "(all_reduce, broadcast)"),
    ([{"rank": 0, "recorded_seq": 3}, {"rank": 1, "recorded_seq": 3, "collective": "reduce"}],
     "process group '0' sequence number 3: ranks disagree on the collective "
     "(all_reduce, reduce)"),
])
def test_mismatch_errors(rows: list[dict], text: str) -> None:
    with pytest.raises(CollectiveMismatchError) as exc:
        C._match(_pairs(rows))
    assert text in str(exc.value)
    _assert_same(_pairs(rows))


def test_null_process_group_and_sequence_numbers() -> None:
    rows = [{"rank": 0, "process_group": None}, {"rank": 1, "process_group": None},
            {"rank": 0, "process_group": "s", "recorded_seq": 1},
            {"rank": 1, "process_group": "s", "recorded_seq": None},
            {"rank": 0, "process_group": "s", "recorded_seq": 2},
            {"rank": 1, "process_group": "s", "recorded_seq": 2}]
    m = _assert_same(_pairs(rows))
    assert len(m.groups) == 1 and m.unmatched.size == 4


def test_null_step_prints_floats_as_pandas_did() -> None:
    # a null iteration makes the step column float (and, where a call has no step, the
    # ordinals too): the messages print them as floats, as the pandas groupby keys did
    rows = [{"rank": 0, "event": 0}, {"rank": 1, "event": 1, "collective": "broadcast"}]
    ts = _traceset(rows, [[0, 1]], 3, [0, 0, None], [0, 1])
    with pytest.raises(CollectiveMismatchError, match=r"step 0\.0 call #0:"):
        C._match(ts)
    _assert_same(ts)
    ts = _traceset(rows + [{"rank": 0, "event": 2}], [[0, 1]], 3, [0, 0, None], [0, 1])
    with pytest.raises(CollectiveMismatchError, match=r"step 0\.0 call #0\.0:"):
        C._match(ts)
    _assert_same(ts)


def test_dictionary_and_large_string_columns() -> None:
    rows = [{"rank": 0, "process_group": "a"}, {"rank": 1, "process_group": "a"},
            {"rank": 0, "process_group": "a\0"}, {"rank": 1, "process_group": "a\0"},
            {"rank": 0, "collective": "send", "process_group": "b"},
            {"rank": 1, "collective": "recv", "process_group": "b"}]
    for i, r in enumerate(rows):
        r["event"] = i
    for types in ({"process_group": pa.large_string()},
                  {"process_group": pa.dictionary(pa.int8(), pa.string()),
                   "collective": pa.dictionary(pa.int32(), pa.string())}):
        ts = _traceset([dict(r) for r in rows], [[0, 1]], 6, [0] * 6, [0, 1], types=types)
        m = C._match(ts)
        assert [g.tolist() for g in m.groups] == [[0, 1], [2, 3], [4, 5]]
        assert m.columns["event"][1] == 2  # (rows by rank, then event)
        assert m.process_group_names[m.columns["process_group"][1]] == "a\0"


def test_string_codes_of_a_sliced_chunked_column() -> None:
    arr = pa.chunked_array([pa.array(["x", "yy", None, ""]), pa.array(["yy", "x"])])
    codes, values = C._string_codes(arr.slice(1))
    assert [values[k] if k >= 0 else None for k in codes.tolist()] == ["yy", None, "", "yy",
                                                                       "x"]
    assert codes[0] == codes[3]
    for words in (["a", "a\0", "", "a", "\0"], ["process_group", "process_group\0", "p", "",
                                                  "process_group", "\0\0\0\0\0\0\0\0\0"]):
        codes, values = C._string_codes(pa.array(words))
        assert [values[k] for k in codes.tolist()] == words
        assert len(set(codes.tolist())) == len(set(words))


def test_empty_collectives_table() -> None:
    ts = _traceset([], [], 1, [0], [0, 1])
    m = _assert_same(ts)
    assert m.groups == [] and m.unmatched.size == 0 and m.table.empty
    assert all(v.size == 0 for v in m.columns.values())
    assert match_collectives(ts).size_mismatch.empty


def test_size_mismatch_warning_and_strict_error() -> None:
    rows = [{"rank": 0, "in_bytes": 8}, {"rank": 1, "in_bytes": 16},
            {"rank": 0, "out_bytes": 2}, {"rank": 1, "out_bytes": 4}]
    ts = _pairs(rows)
    with pytest.warns(TraincastWarning) as rec:
        m = match_collectives(ts)
    assert str(rec[0].message) == (
        "rank-0.json: all_reduce sizes differ across ranks (and 1 more calls): process group "
        "'0' step 0, rank 0 8 B, rank 1 16 B (in_bytes); matched anyway, each rank replayed "
        "with its own size (--strict: refuse)")
    assert m.size_mismatch["which"].tolist() == ["in_bytes", "out_bytes"]
    with pytest.raises(CollectiveMismatchError) as exc:
        match_collectives(ts, strict=True)
    assert str(exc.value) == "rank-0.json: " + (
        "all_reduce sizes differ across ranks (and 1 more calls): process group '0' step 0, "
        "rank 0 8 B, rank 1 16 B (in_bytes)")
    _assert_same(ts)


def test_clock_offsets_median_per_rank() -> None:
    # rank 1 ends 30 µs, 50 µs, 40 µs, 60 µs after rank 0: median 45 µs (mean of the middle
    # two, truncated as pandas' float median was)
    rows, rank_of, t, dur = [], [], [], []
    for k, lag in enumerate([30_001, 50_000, 40_000, 60_000]):
        for r in (0, 1):
            rows.append({"rank": r, "event": len(rank_of), "recorded_seq": k})
            rank_of.append(r)
            t.append(10**6 * k + (lag if r else 0))
            dur.append(10)
    ts = _traceset(rows, [[0, 1]], len(rank_of), [0] * len(rank_of), [0, 1],
                   hosts={0: "a", 1: "b"}, times=(rank_of, t, dur))
    m = _assert_same(ts)
    assert clock_offsets(ts, m) == {0: 0, 1: 45_000}


def test_dlrm_matches_without_pandas_columns() -> None:
    path = SHARED / "dlrm_8xv100" / "kineto"
    if not path.is_dir():
        pytest.skip("shared data not available")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(path)
    m = match_collectives(ts)
    assert "table" not in vars(m)  # the DataFrame is made only when read
    assert (m.columns["group_id"] >= 0).all()
