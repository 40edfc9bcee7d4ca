"""benchmarks/make_scale_traces.py: 16 ranks cloned from the real DLRM 8x V100 set load as one
consistent run (every collective matched across all 16 ranks, clocks aligned per node)."""

from __future__ import annotations

import gzip
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

GENERATOR = Path(__file__).resolve().parents[1] / "benchmarks" / "make_scale_traces.py"


def _generator():
    spec = importlib.util.spec_from_file_location("make_scale_traces", GENERATOR)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_scale_traces", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def scale16(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    src = traces / "dlrm_8xv100" / "kineto"
    if not src.is_dir():
        pytest.skip(f"{src} not available")
    out = tmp_path_factory.mktemp("scale16")
    summary = _generator().generate(16, out, src, seed=3)
    assert summary["ranks"] == 16 and summary["source_ranks"] == 8
    return src, out


def test_files_are_rewritten_per_rank(scale16: tuple[Path, Path]) -> None:
    _, out = scale16
    files = sorted(out.glob("rank-*.pt.trace.json.gz"))
    assert len(files) == 16
    raw = gzip.decompress((out / "rank-9.pt.trace.json.gz").read_bytes())
    doc = orjson.loads(raw)
    assert doc["distributedInfo"]["rank"] == 9
    assert doc["distributedInfo"]["world_size"] == 16
    assert doc["host_name"] == "scale-node-1"
    # HTA takes a file's rank from the first line matching '"rank":\s+(\d+)' (Kineto's layout)
    rx = re.compile(rb'"rank":\s+(\d+)')
    first = next(line for line in raw.splitlines() if rx.search(line))
    assert rx.search(first).group(1) == b"9"
    pids = {e.get("pid") for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert pids == {1_000_009}


def test_sixteen_ranks_match_and_replay(scale16: tuple[Path, Path]) -> None:
    import traincast
    from traincast.graph.collectives import clock_offsets, match_collectives

    src, out = scale16
    ts = traincast.load(out)
    assert ts.rank_ids == list(range(16)) and ts.world_size == 16
    coll = ts.collectives.to_pandas()
    assert (coll["group_size"] == 16).all()
    assert sorted(coll.groupby("rank").size().unique()) == [8]  # 5 all_to_all + 3 all_reduce
    m = match_collectives(ts)
    assert len(m.groups) == 8 and all(g.size == 16 for g in m.groups)
    assert m.unmatched.size == 0
    # ranks 8..15 (node 1) are shifted by one clock offset, found back from the collectives
    off = clock_offsets(ts, m)
    node1 = np.array([off[r] for r in range(8, 16)])
    assert abs(node1.mean()) > 20_000 and np.ptp(node1) < 20_000
    pred = traincast.predict(ts)
    assert not any("replayed with measured durations" in n for n in pred.notes)
    assert pred.summary["iterations"] == 16
    # clones keep their source rank's step (within the jitter of the GPU compute ops)
    it = ts.iterations.to_pandas().set_index("rank")["dur"]
    src_it = traincast.load(src).iterations.to_pandas().set_index("rank")["dur"]
    for r in range(16):
        assert it[r] == pytest.approx(src_it[r % 8], rel=0.01)


def test_process_groups_are_remapped(tmp_path: Path) -> None:
    """World groups grow to all N ranks; sub-groups are copied per node (synthetic source with
    ``pg_config`` and ``Process Group Ranks`` args, which the real complete sets lack)."""
    gen = _generator()
    src = tmp_path / "src"
    src.mkdir()
    for r in range(2):
        doc = {"distributedInfo": {"backend": "nccl", "rank": r, "world_size": 2, "pg_config": [
                   {"pg_name": "0", "pg_size": 2, "ranks": [0, 1]},
                   {"pg_name": "1", "pg_size": 1, "ranks": [r]}]},
               "traceEvents": [
                   {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 77,
                    "tid": 1, "ts": 100, "dur": 5,
                    "args": {"Process Group Ranks": "[0, 1]", "Group size": 2}},
                   {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 110,
                    "dur": 10, "args": {"device": 0, "stream": 7, "correlation": 1}},
                   {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 121,
                    "dur": 10, "args": {"device": 0, "stream": 7, "correlation": 2}}]}
        (src / f"rank-{r}.json").write_bytes(orjson.dumps(doc))
    out = tmp_path / "out"
    gen.generate(6, out, src, seed=1, sigma=0.5)
    doc = orjson.loads(gzip.decompress((out / "rank-5.pt.trace.json.gz").read_bytes()))
    info = doc["distributedInfo"]
    assert (info["rank"], info["world_size"]) == (5, 6)
    assert info["pg_config"][0] == {"pg_name": "0", "pg_size": 6, "ranks": list(range(6))}
    assert info["pg_config"][1] == {"pg_name": "1", "pg_size": 1, "ranks": [5]}  # node 2
    ev = doc["traceEvents"]
    assert ev[0]["args"]["Process Group Ranks"] == str(list(range(6)))
    assert ev[0]["args"]["Group size"] == 6 and ev[0]["pid"] == 1_000_005
    # jitter (sigma 0.5) never makes a kernel run into the next one on its stream
    assert ev[1]["ts"] + ev[1]["dur"] <= ev[2]["ts"]
    assert gen.map_ranks([0, 1], 1, 2, 3) == [0, 1, 2]
    assert gen.map_ranks([1], 1, 2, 4) == [3]
    assert gen.map_ranks([0, 1], 1, 2, 3) == [0, 1, 2] and gen.map_ranks([1], 1, 2, 3) == []
