"""Real multi-rank recordings on this CPU (gloo): collective traces for the communication
model (``traincast bench --collective-ranks``) and DDP training as the ground truth of
``predict --from-et --world-size``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traincast.cli import main
from traincast.errors import ParameterError

torch = pytest.importorskip("torch")

TINY_TF = {"kind": "transformer", "name": "tiny", "seed": 0, "layers": 1, "hidden": 32,
           "heads": 2, "ffn": 64, "seq": 8, "batch": 2, "classes": 4}


def test_record_collectives_and_fit(tmp_path: Path) -> None:
    from traincast.record.comm_bench import fit_comm_model, record_collectives

    d = record_collectives(tmp_path / "coll", world=2, sizes=(4096, 1 << 16, 1 << 20),
                           iters=2)
    traces = sorted(p.name for p in d.glob("rank-*.json"))
    assert traces == ["rank-0.json", "rank-1.json"]
    assert not [p for p in d.iterdir() if p.is_dir()]  # the temporary folder is gone
    model = fit_comm_model(d)
    t = [model.predict_ns("all_reduce", s, 2) for s in (4096, 1 << 20)]
    assert all(x > 0 for x in t) and t[1] >= t[0]


@pytest.mark.parametrize(("kw", "match"), [({"world": 1}, "at least 2 ranks"),
                                           ({"collectives": ("gossip",)}, "unknown"),
                                           ({"sizes": ()}, "sizes"), ({"iters": 0}, "iters"),
                                           ({"device": "tpu"}, "device")])
def test_record_collectives_rejects(tmp_path: Path, kw: dict, match: str) -> None:
    from traincast.record.comm_bench import record_collectives

    with pytest.raises(ParameterError, match=match):
        record_collectives(tmp_path / "x", **kw)


def test_bench_collective_ranks_writes_a_comm_model(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bench"
    assert main(["bench", "--quick", "--families", "elementwise", "--out", str(out),
                 "--no-overheads", "--no-progress", "--collective-ranks", "2",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["collectives"] and (out / "comm.json").is_file()
    from traincast.costs.comm import CommModel

    assert CommModel.from_json(out / "comm.json").predict_ns("all_reduce", 1 << 20, 2) > 0
    assert main(["bench", "--quick", "--out", str(out), "--collective-ranks", "1"]) == 2
