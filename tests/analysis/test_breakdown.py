"""Temporal breakdown and idle attribution."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traincast
from traincast.analysis.breakdown import EventArrays, temporal_breakdown, window_breakdown
from traincast.analysis.idle import idle_attribution
from traincast.errors import ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from synth_trace import Trace  # noqa: E402

US = 1000


def _iv(*pairs: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    a = np.array(pairs, np.int64).reshape(-1, 2)
    return a[:, 0], a[:, 1]


def test_window_breakdown_exact() -> None:
    # compute [0,40) [60,80); comm [30,70); memory [85,95); window [0,100)
    b = window_breakdown(0, 100, {"compute": _iv((0, 40), (60, 80)), "comm": _iv((30, 70)),
                                  "other": _iv((85, 95))})
    assert b == {"compute": 60, "comm": 40, "comm_overlapped": 20, "exposed_comm": 20,
                 "other": 10, "idle": 10}
    assert b["compute"] + b["exposed_comm"] + b["other"] + b["idle"] == 100


# HTA 0.5.0 on the same files (TraceAnalysis(...).get_temporal_breakdown() and
# get_comm_comp_overlap(), run side by side by benchmarks/analyze_vs_hta.py):
# (idle %, compute %, non-compute %, comm/comp overlap %)
HTA = {
    "v100_2rank_allreduce": (46.08, 35.55, 18.37, 0.0),
    "a100_2rank_nccl": (77.78, 17.26, 4.97, 14.31),
    "a100_16rank_5streams": (69.44, 14.15, 16.41, 1.37),
}


@pytest.mark.parametrize("name", sorted(HTA))
def test_breakdown_within_one_point_of_hta(traces: Path, name: str) -> None:
    ts = traincast.load(traces / "hta" / name)
    row = temporal_breakdown(ts, per="rank").iloc[0]
    idle, comp, non, overlap = HTA[name]
    assert abs(row.idle_pct - idle) <= 1.0
    assert abs(row.compute_pct - comp) <= 1.0
    assert abs(row.non_compute_pct - non) <= 1.0
    assert abs(row.overlap_pct - overlap) <= 1.0
    assert row.compute_ns + row.non_compute_ns + row.idle_ns == row.window_ns


def test_per_iteration_windows_are_the_steps(traces: Path) -> None:
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    df = temporal_breakdown(ts)
    assert len(df) == 8 and (df["iteration"] == 10).all()
    assert df["window_ns"].tolist() == [v * US for v in
                                        (14455, 19901, 13017, 19313, 17979, 17797, 13091, 12509)]
    parts = df["compute_ns"] + df["non_compute_ns"] + df["idle_ns"]
    assert (parts == df["window_ns"]).all()
    assert (df["comm_overlapped_ns"] + df["comm_exposed_ns"] == df["comm_ns"]).all()


def test_cpu_only_ranks_use_the_host(demo_traces: Path) -> None:
    df = temporal_breakdown(traincast.load(demo_traces))
    assert (df["source"] == "host").all()
    # a recorded gloo run: how much of a step waits in the all_reduce moves with the machine's
    # load (42-96 % compute seen on a busy 2-core machine), but every step has both
    assert (df["comm_ns"] > 0).all() and (df["compute_pct"] > 20).all()


def test_breakdown_of_predicted_timeline(traces: Path) -> None:
    ts = traincast.load(traces / "hta" / "a100_2rank_nccl")
    m = temporal_breakdown(ts)
    p = temporal_breakdown(traincast.predict(ts).timeline)
    assert np.allclose(m["compute_pct"], p["compute_pct"], atol=0.5)


def test_bad_per() -> None:
    with pytest.raises(ParameterError):
        temporal_breakdown(None, per="node")  # type: ignore[arg-type]


def test_idle_causes_on_hand_built_trace(tmp_path: Path) -> None:
    t = Trace()
    t.step(1, 0, 1000)
    t.launch("volta_sgemm_128x64_nn", 10, 5, 20, 100)          # busy 20-120
    t.host("aten::python_overhead", 20, 280)                   # host busy until 300
    t.launch("vectorized_elementwise_kernel", 300, 5, 310, 100)  # launch-bound: idle 120-310
    # op on stream 9 waits for the one on stream 7 (ended 410): idle 410-420 is a stream dep.
    t.launch("volta_sgemm_64x64_nn", 320, 5, 420, 50, stream=9)
    t.host("cudaStreamWaitEvent", 315, 3, cat="cuda_runtime")
    t.host("cudaDeviceSynchronize", 330, 145, cat="cuda_runtime")
    ts = traincast.load(t.write(tmp_path))
    df = idle_attribution(ts)
    row = df.iloc[0]
    # host-bound: 0-20 (the first launch) and 120-310 (the host was busy in Python)
    assert row.host_ns == (20 + 190) * US
    assert row.stream_dep_ns == 10 * US
    assert row.idle_ns == row.host_ns + row.data_loading_ns + row.peer_wait_ns + \
        row.stream_dep_ns + row.other_ns
    # the tail after the last kernel (470-1000) is idle with no op ending it: "other"
    assert row.other_ns == 530 * US
    assert row.idle_ns == 750 * US and row.gaps == 4


def test_idle_in_a_data_loader_is_data_loading(tmp_path: Path) -> None:
    t = Trace()
    t.step(1, 0, 1000)
    t.launch("volta_sgemm_128x64_nn", 10, 5, 20, 100)  # busy 20-120
    # the host fetches the next batch; the launch at 300 is issued from inside the loader
    t.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 20, 290)
    t.launch("vectorized_elementwise_kernel", 300, 5, 310, 100)  # idle 120-310
    row = idle_attribution(traincast.load(t.write(tmp_path))).iloc[0]
    assert row.data_loading_ns == 190 * US
    assert row.host_ns == 20 * US  # 0-20: the first launch, outside any loader
    assert row.idle_ns == row.host_ns + row.data_loading_ns + row.peer_wait_ns + \
        row.stream_dep_ns + row.other_ns


def test_idle_attribution_on_real_traces(traces: Path) -> None:
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    df = idle_attribution(ts)
    assert len(df) == 8
    causes = df[["host_ns", "data_loading_ns", "peer_wait_ns", "stream_dep_ns", "other_ns"]]
    assert (causes.sum(axis=1) == df["idle_ns"]).all()
    bd = temporal_breakdown(ts).set_index("rank")
    # the idle the attribution splits is the breakdown's idle (same windows, same clock)
    assert np.allclose(df.set_index("rank")["idle_ns"], bd["idle_ns"], rtol=0.02)
    # DLRM's ranks spend ms in all_to_all/all_reduce waiting for the last rank to arrive
    assert (df["comm_wait_ns"] > 0).all()
    # the replay's graph carries the measurement-calibrated lags: reusing it (what
    # ``traincast.analyze`` does) gives the same attribution as a second, exact build
    pred = traincast.predict(ts)
    assert pred.graph.lag is not pred.graph.exact_lag  # structural replay lags
    pd.testing.assert_frame_equal(idle_attribution(ts, graph=pred.graph), df)


def test_event_arrays_take_keeps_the_masked_rows_of_every_column() -> None:
    n = 5
    a = EventArrays(rank=np.arange(n), start=np.arange(n) * 10, end=np.arange(n) * 10 + 5,
                    on_gpu=np.arange(n) % 2 == 0, tid=np.arange(n) + 100,
                    kernel=np.ones(n, bool), collective=np.zeros(n, bool),
                    memory=np.zeros(n, bool), host_work=np.zeros(n, bool),
                    runtime=np.zeros(n, bool), corr=None, iteration=np.arange(n) // 2)
    keep = np.array([True, False, True, True, False])
    b = a.take(keep)
    assert b.corr is None
    assert b.rank.tolist() == [0, 2, 3] and b.end.tolist() == [5, 25, 35]
    assert b.tid.tolist() == [100, 102, 103] and b.iteration.tolist() == [0, 1, 1]
    assert a.take(np.ones(n, bool)) is a
