"""Step bounds and the predicted step window on real traces (traincast.predict.bounds,
traincast.simulate.timeline.step_windows)."""

from __future__ import annotations

import numpy as np

import traincast
from traincast.predict.prediction import BOUNDS_KEYS, predict

QWEN = "tracelens/wild/h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
HOST10 = ["speedup=kind:cpu_op=10", "speedup=kind:runtime=10"]


def test_qwen_host_speedup_step_covers_its_gpu_work(traces) -> None:
    """The issue's case: 43.1 ms of kernels serial on stream 7; a 10x faster host cannot
    end the step at the host's marker (27.3 ms) while its GPU work runs on."""
    ts = traincast.load(traces / QWEN)
    p = predict(ts, what_if=HOST10)
    row = p.iterations.iloc[0]
    assert 43.0e6 < row["device_bound_ns"] < 43.3e6  # the serial kernels of stream 7
    assert row["bound_ns"] == row["device_bound_ns"]
    assert row["bound_ns"] <= row["predicted_ns"] <= row["upper_bound_ns"]
    assert row["predicted_ns"] > 45e6  # the marker alone ends at 27.3 ms
    assert row["replay_ns"] == 47144968  # the replay is unchanged (marker window)
    item = p.to_dict()["ranks"][0]["iterations"][0]
    assert list(item["bounds_ns"]) == list(BOUNDS_KEYS)
    assert item["bounds_ns"]["bound"] == int(row["bound_ns"])
    assert item["bounds_ns"]["upper_bound"] == int(row["upper_bound_ns"])


def test_replay_keeps_marker_windows_and_has_bounds(traces) -> None:
    """Where the measured step covers its launched work, the replayed step is the marker's
    simulated window; every replayed step is within its bounds; added work is 0."""
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    p = predict(ts)
    it = p.iterations
    start, end = p.step_windows()
    mk = ts.iterations.column("marker_event").to_numpy()
    t = p.result.times
    np.testing.assert_array_equal(end - start, t[2 * mk + 1] - t[2 * mk])
    assert (it["added_ns"] == 0).all()
    assert (it["bound_ns"] <= it["predicted_ns"]).all()
    assert (it["predicted_ns"] <= it["upper_bound_ns"]).all()
    assert (it["host_bound_ns"] > 0).all() and (it["device_bound_ns"] > 0).all()


def test_host_speedup_steps_tile_at_the_device_pace(traces) -> None:
    """A 10x faster host on a100_2rank_nccl: the markers shrink to ~130 ms while each step's
    queued GPU work ends later; consecutive steps tile (one starts where the previous one's
    work ended), so steps stay near the device's period instead of growing step by step."""
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    p = predict(ts, what_if=HOST10)
    it = p.iterations
    assert (it["predicted_ns"] >= it["bound_ns"]).all()
    assert (it["predicted_ns"] <= it["upper_bound_ns"]).all()
    assert it["predicted_ns"].max() < 1.2 * it["predicted_ns"].min()
    start, end = p.step_windows()
    mk = ts.iterations.column("marker_event").to_numpy()
    own = p.result.times[2 * mk + 1] - p.result.times[2 * mk]  # each marker's simulated length
    for _, g in it.assign(start=start, end=end, own=own).groupby("rank"):
        g = g.sort_values("iteration")
        tiles = g["start"].to_numpy()[1:] >= g["end"].to_numpy()[:-1]
        # the documented exception: a step is never shorter than its own marker
        as_long_as_marker = (g["end"] - g["start"]).to_numpy()[1:] == g["own"].to_numpy()[1:]
        assert (tiles | as_long_as_marker).all()


def test_added_work_bounds_a_slower_device(traces) -> None:
    ts = traincast.load(traces / "hta/a100_2rank_nccl")
    p = predict(ts, what_if=["speedup=kind:device=0.5"])
    it = p.iterations
    assert (it["added_ns"] > 0).all()
    assert (it["predicted_ns"] <= it["upper_bound_ns"]).all()
    assert (it["device_bound_ns"] > predict(ts).iterations["device_bound_ns"]).all()
