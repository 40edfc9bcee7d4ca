"""OTF2 traces (``readers/otf2.py``) through ``traincast.load``, analyze and predict.

Real files: ../shared/data/traces/otf2 (SOURCES.md: Pipit's 2-rank MPI ping-pong recorded with
Score-P, with and without PAPI counters). Expected values come from an independent walk over
the same files with the ``otf2`` package (Enter/Leave pairs, MpiSend/MpiRecv records).
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

import traincast
from traincast.cli import main
from traincast.errors import TraceFormatError
from traincast.graph.collectives import match_collectives
from traincast.trace.readers.otf2 import read_otf2
from traincast.trace.traceset import TraceSet

otf2 = pytest.importorskip("otf2")

PLAIN, PAPI = "ping-pong-otf2", "ping-pong-otf2-papi"


def _load(path: Path, **kw) -> TraceSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no ProfilerStep#N markers": expected for MPI
        return traincast.load(path, **kw)


@pytest.fixture(scope="module")
def otf2_dir(traces: Path) -> Path:
    d = traces / "otf2"
    if not (d / PLAIN / "traces.otf2").is_file():
        pytest.skip("OTF2 sample traces not available")
    return d


def _reference(anchor: Path) -> dict:
    """Independent read: per rank, the (region, start tick, end tick) of every Enter/Leave
    pair, and every message (kind, rank, peer, tag, bytes) in order."""
    regions: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    msgs: dict[int, list[tuple[str, int, int, int]]] = defaultdict(list)
    stacks: dict[int, list[tuple[str, int]]] = defaultdict(list)
    with otf2.reader.open(str(anchor)) as r:
        res = r.timer_resolution
        off = r.definitions.clock_properties.global_offset
        for loc, ev in r.events:
            rank = int(loc.group.name.split()[-1])
            if isinstance(ev, otf2.events.Enter):
                stacks[rank].append((ev.region.name, ev.time))
            elif isinstance(ev, otf2.events.Leave):
                name, t0 = stacks[rank].pop()
                regions[rank].append((name, t0, ev.time))
            elif isinstance(ev, otf2.events.MpiSend):
                msgs[rank].append(("send", ev.receiver, ev.msg_tag, ev.msg_length))
            elif isinstance(ev, otf2.events.MpiRecv):
                msgs[rank].append(("recv", ev.sender, ev.msg_tag, ev.msg_length))
    return {"regions": regions, "msgs": msgs, "res": res, "off": off}


@pytest.mark.parametrize("name", [PLAIN, PAPI])
def test_regions_match_independent_read(otf2_dir: Path, name: str) -> None:
    anchor = otf2_dir / name / "traces.otf2"
    ref = _reference(anchor)
    ts = _load(otf2_dir / name)  # the folder: the anchor file is discovered
    assert ts.rank_ids == [0, 1]
    assert ts.world_size == 2
    df = ts.to_pandas()
    for rank in (0, 1):
        mine = df[df["rank"] == rank]
        got = sorted(zip(mine["name"].astype(str), mine["ts"], mine["dur"], strict=True))
        res, off = ref["res"], ref["off"]
        want = sorted((n, (t0 - off) * 10**9 // res,
                       (t1 - off) * 10**9 // res - (t0 - off) * 10**9 // res)
                      for n, t0, t1 in ref["regions"][rank])
        assert got == want
        assert set(mine["pid"]) == {rank}
        assert set(mine["device"]) == {-1}
    kinds = dict(zip(df["name"].astype(str), df["kind"].astype(str), strict=False))
    assert kinds["MPI_Send"] == kinds["MPI_Recv"] == "collective"
    assert kinds["MPI_Init"] == kinds["MPI_Comm_rank"] == "runtime"
    assert kinds["int main(int, char**)"] == "cpu_op"


def test_messages_become_matched_send_recv_pairs(otf2_dir: Path) -> None:
    anchor = otf2_dir / PLAIN / "traces.otf2"
    ref = _reference(anchor)
    ts = _load(anchor)
    coll = ts.collectives.to_pandas()
    for rank in (0, 1):
        mine = coll[coll["rank"] == rank].sort_values("event")
        want = ref["msgs"][rank]
        assert len(mine) == len(want) == 16
        assert list(mine["collective"]) == [k for k, *_ in want]
        assert list(mine["in_bytes"]) == [n for *_, n in want]
        for pg, (k, peer, tag, _) in zip(mine["process_group"], want, strict=True):
            src, dst = (rank, peer) if k == "send" else (peer, rank)
            assert pg == f"mpi:MPI_COMM_WORLD:{src}->{dst}:t{tag}"
    m = match_collectives(ts)
    assert len(m.groups) == 16 and m.unmatched.size == 0
    t = m.table
    for _gid, g in t.groupby("group_id"):
        assert sorted(g["collective"]) == ["recv", "send"]
        assert g["in_bytes"].nunique() == 1
        assert sorted(g["rank"]) == [0, 1]
    # the receiver's MPI_Recv cannot end before the matching MPI_Send started
    ev = ts.to_pandas()
    for _gid, g in t.groupby("group_id"):
        send = g[g["collective"] == "send"]["event"].iloc[0]
        recv = g[g["collective"] == "recv"]["event"].iloc[0]
        assert ev["ts"].iloc[recv] + ev["dur"].iloc[recv] >= ev["ts"].iloc[send]


def test_replay_reproduces_and_network_what_if_moves_only_messages(otf2_dir: Path) -> None:
    ts = _load(otf2_dir / PLAIN)
    p = traincast.predict(ts)
    it = p.iterations
    err = np.abs(it["predicted_ns"] - it["measured_ns"]) / it["measured_ns"]
    assert err.max() < 1e-3
    # the Score-P recorder's own cost is not measured: unprofiled is the profiled step
    assert (it["unprofiled_ns"] == it["predicted_ns"]).all()
    assert any("Score-P/OTF2" in n for n in p.notes)
    fast = traincast.predict(ts, what_if=["intra_node_gbps=1000"])
    slow = traincast.predict(ts, what_if=["intra_node_gbps=0.1"])
    f, s = fast.iterations["predicted_ns"], slow.iterations["predicted_ns"]
    assert (f <= it["predicted_ns"] + 1000).all()
    # 0.1 GB/s: 2 x 16 messages of 16 KiB..2 MiB (4 MiB x 2 each way) take >= 80 ms more
    total = int(ts.collectives.to_pandas().query("collective == 'send'")["in_bytes"].sum())
    assert (s - it["predicted_ns"]).min() >= 0.8 * total / 0.1  # ns at 0.1 B/ns


def test_breakdown_counts_mpi_calls_not_as_compute(otf2_dir: Path) -> None:
    from traincast.analysis.breakdown import temporal_breakdown

    ts = _load(otf2_dir / PLAIN)
    bd = temporal_breakdown(ts)
    df = ts.to_pandas()
    for _, row in bd.iterrows():
        mine = df[df["rank"] == row["rank"]]
        init = int(mine[mine["name"] == "MPI_Init"]["dur"].iloc[0])
        comm = int(mine[mine["kind"] == "collective"]["dur"].sum())
        assert row["source"] == "host"
        assert row["memory_ns"] >= init  # MPI_Init and the other library calls: "other"
        assert row["comm_exposed_ns"] == comm  # messages are not overlapped by compute
        assert row["compute_ns"] + row["non_compute_ns"] + row["idle_ns"] == row["window_ns"]
        assert 0 < row["compute_ns"] < 0.05 * row["window_ns"]


def test_cli_analyze_and_predict(otf2_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(otf2_dir / PLAIN)
    assert main(["analyze", d]) == 0
    out = capsys.readouterr().out
    assert "library calls (MPI_Init...) 97.0%" in out
    assert main(["analyze", d, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    coll = data["tables"]["collectives"] if "tables" in data else data["collectives"]
    assert {r["collective"] for r in coll} == {"send", "recv"}
    assert main(["predict", d, "--format", "json"]) == 0
    pred = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in pred["ranks"]] == [0, 1]
    for r in pred["ranks"]:
        (it,) = r["iterations"]
        assert abs(it["predicted_ns"] - it["measured_ns"]) <= 1e-3 * it["measured_ns"]


def test_papi_metrics_are_counted_as_dropped(otf2_dir: Path) -> None:
    with pytest.warns(UserWarning, match=r"42 events dropped \(Metric x42"):
        ts = traincast.load(otf2_dir / PAPI)
    # one PAPI sample at each Enter and Leave: 21 regions x 2 on each rank
    for rank in (0, 1):
        assert ts.ranks[rank].decode_stats == {"dropped_events": {"Metric": 42}}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dst


def test_bad_otf2_input(otf2_dir: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    # an event file cut in half
    d = _copy(otf2_dir / PLAIN, tmp_path / "cut")
    evt = d / "traces" / "1.evt"
    evt.write_bytes(evt.read_bytes()[: evt.stat().st_size // 2])
    with pytest.raises(TraceFormatError, match="traces.otf2"):
        read_otf2(d / "traces.otf2")
    assert main(["analyze", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "traces.otf2" in err[0]
    # definitions missing
    d2 = _copy(otf2_dir / PLAIN, tmp_path / "nodef")
    (d2 / "traces.def").unlink()
    with pytest.raises(TraceFormatError, match="OTF2"):
        read_otf2(d2 / "traces.otf2")
    # not an OTF2 file at all
    fake = tmp_path / "fake" / "x.otf2"
    fake.parent.mkdir()
    fake.write_text('{"traceEvents": []}')
    with pytest.raises(TraceFormatError, match="x.otf2: not"):
        read_otf2(fake)


def test_missing_package_is_one_line(otf2_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "otf2", None)
    with pytest.raises(TraceFormatError, match=r"pip install 'traincast\[otf2\]'"):
        read_otf2(otf2_dir / PLAIN / "traces.otf2")


def test_events_per_kind(otf2_dir: Path) -> None:
    ts = _load(otf2_dir / PLAIN)
    kinds = Counter(ts.to_pandas()["kind"].astype(str))
    # 21 regions per rank: main, 4 MPI setup calls, 16 messages
    assert kinds == Counter({"collective": 32, "runtime": 8, "cpu_op": 2})
