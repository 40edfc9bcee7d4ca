"""A batch what-if says how much of the step it reaches (issue 27: 4096 -> 64 on
a100_16rank_5streams moved the step 1-3%)."""

from __future__ import annotations

import warnings
from pathlib import Path

import traincast
from traincast.whatif.apply import batch_factors
from traincast.whatif.spec import parse_what_if


def test_batch_note_names_what_keeps_its_time(traces: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(traces / "hta" / "a100_16rank_5streams")
    f, notes = batch_factors(ts, parse_what_if(["batch_size=64"]))
    assert f.max() <= 1.0  # a smaller batch makes no op longer
    reach = next(n for n in notes if " reaches " in n)
    assert reach.startswith("batch 4096 -> 64 reaches 9.03 ms of the 51.9 ms")
    assert "launched by CompiledFunctionBackward (a torch.compile region" in reach
    assert "host ops keep their time" in reach
