"""The events' execution-trace link columns (``traincast.trace.schema.LINK_COLUMNS``): read by
the load only, so dropping them (:func:`traincast.trace.traceset.drop_link_columns`, what the
``analyze`` and ``predict`` commands do) frees their memory and changes no result."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import traincast
from traincast.predict.verdict import VERDICT_ANALYSES, verdict
from traincast.trace.schema import LINK_COLUMNS
from traincast.trace.traceset import drop_link_columns


def test_drop_frees_the_link_columns_and_shares_the_rest(traces: Path) -> None:
    ts = traincast.load(traces / "hta" / "a100_2rank_nccl")
    before = ts.events
    held = sum(before.column(c).nbytes for c in LINK_COLUMNS)
    assert held > 0
    assert drop_link_columns(ts) == held
    assert not set(LINK_COLUMNS) & set(ts.events.column_names)
    assert ts.events.column_names == [c for c in before.column_names if c not in LINK_COLUMNS]
    for name in ts.events.column_names:  # the same buffers, not copies
        new, old = ts.events.column(name).chunks, before.column(name).chunks
        assert [c.buffers()[-1].address for c in new] == [c.buffers()[-1].address for c in old]
    assert drop_link_columns(ts) == 0  # nothing left to drop


@pytest.mark.filterwarnings("ignore:execution traces linked")
@pytest.mark.parametrize("case", ["dlrm_8xv100/kineto", "hta/a100_2rank_nccl"])
def test_replay_analyses_and_verdict_do_not_read_them(traces: Path, case: str) -> None:
    """Every table of the ``analyze`` command (the verdict with its analyses, and the
    critical path) and the prediction, with and without the columns: equal."""
    runs = []
    for drop in (False, True):
        ts = traincast.load(traces / case)
        if drop:
            drop_link_columns(ts)
        pred = traincast.predict(ts)
        tables = traincast.analyze(ts, (*VERDICT_ANALYSES, "critical_path", "prediction",
                                        "kernels", "collectives"), prediction=pred)
        tables = {**verdict(ts, tables, pred, case), **tables}
        runs.append((pred.iterations, tables))
    (s0, t0), (s1, t1) = runs
    pd.testing.assert_frame_equal(s0, s1)
    assert t0.keys() == t1.keys()
    for name in t0:
        pd.testing.assert_frame_equal(t0[name], t1[name], obj=name)


def test_linked_execution_traces_survive_the_drop(traces: Path) -> None:
    """The load links the execution traces (by rf_id or names) before anything drops the
    columns: the links stay."""
    base = traces / "dlrm_8xv100"
    ts = traincast.load(base / "kineto", et_dir=base / "et")
    links = ts.et_links
    assert links is not None and links.num_rows > 0
    drop_link_columns(ts)
    assert ts.et_links is links
    assert ts.et_links.num_rows > 0
