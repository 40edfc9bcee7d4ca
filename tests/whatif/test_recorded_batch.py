"""The recorded batch is read from the trace, and a batch_size_from that contradicts it is
refused (issue 18: what-if inputs that cannot be wrong silently)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traincast
from traincast.cli import main
from traincast.errors import ParameterError
from traincast.whatif.recorded_batch import infer_recorded_batch


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> traincast.TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


def test_batch_read_from_first_ops(dlrm, traces: Path) -> None:
    got = infer_recorded_batch(dlrm)
    # the bottom MLP's first linear: [16, 13] (local batch 16 of the global 128, SOURCES.md)
    assert got is not None and got.batch == 16 and got.agree >= 2
    assert "aten::linear [16, 13]" in got.evidence
    bert = traincast.load(traces / "tracelens" / "wild" /
                          "h100_gaunernst_bert-small-uncased__1016001.json.gz")
    assert infer_recorded_batch(bert).batch == 1  # token ids [1, 141]
    # no shapes: nothing to read
    assert infer_recorded_batch(traincast.load(traces / "hta" / "v100_2rank_allreduce")) is None


def test_what_if_uses_and_checks_it(dlrm) -> None:
    pred = traincast.predict(dlrm, what_if=["batch_size=32"])
    assert any("recorded batch 16 read from the trace" in n for n in pred.notes)
    same = traincast.predict(dlrm, what_if=["batch_size=32", "batch_size_from=16"])
    assert (same.iterations["predicted_ns"] == pred.iterations["predicted_ns"]).all()
    with pytest.raises(ParameterError, match="batch_size_from=32 contradicts the trace"):
        traincast.predict(dlrm, what_if=["batch_size=64", "batch_size_from=32"])
    # a sequence-first model ([S, B, d]): the batch is not the leading dimension
    from traincast.whatif.recorded_batch import RecordedBatch

    seq_first = RecordedBatch(41, "aten::linear [41, 4, 192]", 2, [[41, 4, 192], [164, 192]])
    assert seq_first.admits(4) and not seq_first.admits(5)
    half = traincast.predict(dlrm, what_if=["batch_size=32", "batch_size_from=8"])
    assert any("16 = 2 x 8" in n for n in half.notes)  # accepted, but said


def test_cli_refuses_contradiction(traces: Path, capsys) -> None:
    rc = main(["predict", str(traces / "dlrm_8xv100" / "kineto"), "--what-if",
               "batch_size=64", "--what-if", "batch_size_from=32"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "contradicts the trace" in err[0]
