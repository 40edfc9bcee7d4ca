"""Calibrating the communication model: measurements gathered from nccl-tests logs, vTrain's
all-reduce table or multi-rank traces, filtered, fitted and scored (the library side of
``traincast calibrate comm``).

Samples are frames with the columns :meth:`~traincast.costs.comm.model.CommModel.fit` takes
(``collective``, ``size_bytes`` = nccl-tests ``S`` in bytes, ``group_size``, ``time_ns``,
optional ``ranks_per_node``), from :func:`~traincast.costs.nccl_tests.read_nccl_tests_log`,
:func:`~traincast.costs.nccl_tests.read_vtrain_lut` or
:func:`~traincast.costs.comm.calls.samples_from_trace`.

Errors: :class:`~traincast.errors.ParameterError` when no source holds a measurement, the
measurements mix GPUs without ``gpu`` to choose one, ``gpu`` matches none, or columns are
missing; the readers' :class:`~traincast.errors.TraceFormatError` for unreadable files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from traincast.costs.comm.calls import samples_from_trace
from traincast.costs.comm.model import CommModel
from traincast.costs.nccl_tests import read_nccl_tests_log, read_vtrain_lut
from traincast.errors import ParameterError
from traincast.trace.load import load

__all__ = ["Calibration", "calibrate_comm", "gather_samples"]

#: columns every gathered sample frame must have
SAMPLE_COLUMNS = ["collective", "size_bytes", "group_size", "time_ns"]


@dataclass(frozen=True)
class Calibration:
    """A fitted model with the samples it was fitted on and its in-sample error.

    Attributes:
        model: the fitted :class:`~traincast.costs.comm.model.CommModel`.
        samples: the measurements used (after the ``gpu`` filter), one row each.
        predicted_ns: the model's time (ns) per sample row.
        mape: mean absolute percentage error over the samples, as a fraction (in-sample;
            benchmarks/comm_model_accuracy.py measures held-out error).
    """

    model: CommModel
    samples: pd.DataFrame
    predicted_ns: np.ndarray
    mape: float


def gather_samples(sources: Sequence[str | Path], *, gpu: str | None = None) -> pd.DataFrame:
    """Samples from each source, concatenated: a folder is a trace run
    (:func:`~traincast.costs.comm.calls.samples_from_trace`), a ``.csv`` vTrain's all-reduce table, anything else an
    nccl-tests log. Sources without a measurement are skipped.

    Args:
        sources: paths, in order.
        gpu: keep the measurements of this GPU (case-insensitive) when the samples have a
            ``gpu`` column (tables holding several GPUs, like vTrain's).

    Raises:
        ParameterError: no source holds a measurement; ``gpu`` matches none of the GPUs
            measured; several GPUs and no ``gpu``; a required column missing.
    """
    paths = [Path(s) for s in sources]
    frames = []
    for src in paths:
        if src.is_dir():
            frames.append(samples_from_trace(load(src)))
        elif src.suffix == ".csv":
            frames.append(read_vtrain_lut(src))
        else:
            frames.append(read_nccl_tests_log(src))
    frames = [f for f in frames if len(f)]
    if not frames:
        names = ", ".join(str(s) for s in paths)
        raise ParameterError(f"{names}: no collective measurement found (trace folders need "
                             "the collectives of at least 2 ranks, matched across ranks)")
    samples = pd.concat(frames, ignore_index=True)
    if "gpu" in samples.columns:
        gpus = sorted(samples["gpu"].dropna().astype(str).unique())
        if gpu is not None:
            samples = samples[samples["gpu"].astype(str).str.lower() == gpu.lower()]
            if samples.empty:
                raise ParameterError(f"--gpu {gpu}: the measurements have {', '.join(gpus)}")
        elif len(gpus) > 1:
            raise ParameterError(f"the measurements mix GPUs ({', '.join(gpus)}): choose one "
                                 "with --gpu")
    missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise ParameterError(f"measurements lack columns {missing}")
    return samples


def calibrate_comm(sources: Sequence[str | Path], *, kind: str = "sigmoid",
                   gpus_per_node: int | None = None, intra_gbps: float | None = None,
                   inter_gbps: float | None = None, gpu: str | None = None) -> Calibration:
    """Fit a :class:`~traincast.costs.comm.model.CommModel` to the measurements of
    ``sources`` (:func:`gather_samples`) and score it on them.

    Args:
        sources, gpu: as :func:`gather_samples`.
        kind, gpus_per_node, intra_gbps, inter_gbps: as
            :meth:`~traincast.costs.comm.model.CommModel.fit`.

    Raises:
        ParameterError: as :func:`gather_samples` and :meth:`CommModel.fit`.
    """
    samples = gather_samples(sources, gpu=gpu)
    model = CommModel.fit(samples, kind=kind, gpus_per_node=gpus_per_node,
                          intra_gbps=intra_gbps, inter_gbps=inter_gbps)
    pred = model.predict_frame(samples)
    t = samples["time_ns"].to_numpy(float)
    ape = np.abs(pred - t) / t
    return Calibration(model, samples, pred, float(np.mean(ape)))
