"""Hostile and careless input (issue 14; first part): what-if parameters at and beyond the ends
of their ranges (class 2), alias bombs in config files (class 3), control characters in trace
names reaching the terminal (class 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traincast.cli import main

EDGES = [  # (value at the edge of the range, value beyond it)
    ("speedup=family:gemm=1e-6", "speedup=family:gemm=1e-7"),
    ("speedup=family:gemm=1e6", "speedup=family:gemm=1e7"),
    ("speedup=kind:device=1e-6", "speedup=kind:device=1e-300"),
    ("intra_node_gbps=1e-3", "intra_node_gbps=1e-300"),
    ("inter_node_gbps=1e6", "inter_node_gbps=1e300"),
    ("batch_size=1", "batch_size=0"),
    ("world_size=1024", "world_size=100000000"),
]


@pytest.mark.parametrize(("ok", "bad"), EDGES, ids=[e[0] for e in EDGES])
def test_what_if_edges(traces: Path, ok: str, bad: str, capsys) -> None:
    dlrm = str(traces / "dlrm_8xv100" / "kineto")
    rc = main(["predict", dlrm, "--what-if", ok, "--format", "json"])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    for rank in doc["ranks"]:
        for it in rank["iterations"]:
            for key in ("predicted_ns", "replay_ns", "unprofiled_ns"):
                assert 0 <= it[key] < 2**62, (ok, key, it[key])
    rc = main(["predict", dlrm, "--what-if", bad])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("traincast: error: --what-if")


def test_yaml_alias_bomb_refused_fast(tmp_path: Path, capsys) -> None:
    """A 1-KB "billion laughs" config: refused at its first alias, one line, exit 2."""
    import time

    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
        prev = name
    lines.append(f"layers: *{prev}")
    cfg = tmp_path / "lol.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    rc = main(["plan", "transformer", "--config", str(cfg), "--gpus", "8", "--node",
               "DGX-A100"])
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "YAML aliases are not allowed" in err[0]
    assert str(cfg) in err[0] and len(err[0]) < 300


def test_control_characters_do_not_reach_the_terminal(tmp_path: Path, capsys) -> None:
    evil = "\x1b[2J\x1b]52;c;cHduZWQ=\x07kernel"
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
               "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
               "tid": 1, "ts": 1, "dur": 4, "args": {"correlation": 7}},
              {"ph": "X", "cat": "kernel", "name": evil, "pid": 0, "tid": 7, "ts": 6,
               "dur": 50, "args": {"correlation": 7, "stream": 7, "device": 0}}]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    assert main(["analyze", str(trace), "--what", "kernels"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out  # shown, escaped
