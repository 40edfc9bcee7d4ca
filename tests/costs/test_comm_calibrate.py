"""Library side of `traincast calibrate comm`: gather, filter, fit and score."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traincast.costs.comm import calibrate
from traincast.costs.comm.calibrate import calibrate_comm, gather_samples
from traincast.errors import ParameterError, TraceFormatError

DATA = Path(__file__).resolve().parent / "data"


def test_calibrate_nccl_tests_log() -> None:
    fitted = calibrate_comm([DATA / "all_gather_perf_2gpu_bf16.log"], kind="alpha_beta")
    assert ("all_gather", "intra") in fitted.model.curves
    t = fitted.samples["time_ns"].to_numpy(float)
    assert fitted.predicted_ns.shape == t.shape
    assert fitted.mape == pytest.approx(float(np.mean(np.abs(fitted.predicted_ns - t) / t)))
    assert 0 <= fitted.mape < 1


def test_gather_filters_gpu(shared_data: Path) -> None:
    lut = shared_data / "measurements" / "vtrain" / "vtrain_allreduce_lut.csv"
    samples = gather_samples([lut], gpu="A100")
    assert len(samples) == 7168 and samples["gpu"].str.lower().eq("a100").all()
    with pytest.raises(ParameterError, match="mix GPUs"):
        gather_samples([lut])
    with pytest.raises(ParameterError, match="--gpu nope"):
        gather_samples([lut], gpu="nope")


def test_no_measurement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "empty.log"
    log.write_text("# nothing measured here\n")
    with pytest.raises(TraceFormatError):
        gather_samples([log])
    monkeypatch.setattr(calibrate, "read_nccl_tests_log", lambda path: pd.DataFrame())
    with pytest.raises(ParameterError, match="no collective measurement"):
        gather_samples([log])
