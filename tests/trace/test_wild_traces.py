"""Traces recorded in the wild (AMD TraceLens corpus: Hugging Face on H100, vLLM/SGLang on
MI300X, MI210, torch.compile): every file of ``../shared/data/traces/tracelens/wild`` loads
and replays within 1% of its measured steps. The cases come from the folder listing, so a
file dropped there is covered without code changes."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

#: as tests/conftest.py's SHARED_DATA (parametrisation needs it at import time)
WILD = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces" / "tracelens" / "wild"
FILES = sorted(p for p in WILD.glob("*.json*")) if WILD.is_dir() else []


@pytest.mark.parametrize("path", FILES or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"{WILD} absent"))], ids=lambda p: p.name.split(".json")[0] if p else "absent")
def test_wild_trace_loads_and_replays_within_1pct(path: Path) -> None:
    import traincast

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(path)
        pred = traincast.predict(ts)
    it = pred.iterations
    assert len(it) >= 1
    assert (it["measured_ns"] > 0).all()
    err = np.abs(it["error_pct"].to_numpy())
    assert err.max() < 1.0, it[["iteration", "measured_ns", "predicted_ns", "error_pct"]]
    # the measured window is the host's ProfilerStep#N when there is one, never its GPU copy
    meas = ts.iterations.to_pandas()
    ev = ts.events
    for mk in meas["marker_event"].tolist():
        if mk >= 0:
            assert ev.column("device")[mk].as_py() == -1
            assert ev.column("name")[mk].as_py().startswith("ProfilerStep#")


def test_string_sizes_are_coerced_and_counted() -> None:
    path = WILD / "inference_vllm_decode_full_graph_execution.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    import traincast

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = traincast.load(path)
    stats = ts.ranks[0].decode_stats
    assert stats["coerced"]["args.bytes"] == 9  # hipMemcpyWithStream "bytes": "256"
    assert not stats.get("dropped_events")
    assert any("tolerant decoding: 9 values coerced (args.bytes x9)" in w for w in ts.warnings)
    notes = traincast.predict(ts).to_dict()["notes"]
    assert any("args.bytes x9" in n for n in notes)


def test_python_stack_does_not_cut_the_step() -> None:
    """``ProfilerStep#6`` starts inside the Python frame ``_record_function_enter_new`` and
    outlives it (with_stack traces): the step must keep its measured length in the replay
    (it was replayed as 7 us of a 4.4 ms step)."""
    path = WILD / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    import traincast

    ts = traincast.load(path)
    it = traincast.predict(ts).iterations
    assert it["measured_ns"].iat[0] == 4_426_114
    assert abs(it["predicted_ns"].iat[0] - 4_426_114) < 0.01 * 4_426_114
