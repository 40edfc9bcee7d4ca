"""Compute cost model: a roofline with size-dependent efficiency, calibrated from a trace.

For every device the model predicts the time of an op from its :class:`Work`::

    ideal = max(flops / peak_flops[dtype], bytes / bandwidth)        # roofline time
    time  = ideal / eff(ideal)                                       # eff per op, family

i.e. ``time = max(flops/(peak·eff), bytes/(bw·eff))``: the roofline of Williams et al.
(CACM 2009) with an achieved fraction of peak that grows with problem size, as in the per-op
kernel models of Lin et al., "Towards Universal Performance Modeling for ML Training on
Multi-GPU Platforms" (arXiv 2404.12674, Sec. 4) and Calculon's (Isaev et al., SC'23)
size-dependent efficiency tables, here fitted instead of tabulated. The efficiency's argument
is the op's ideal (roofline) time, which puts compute-bound and memory-bound ops on one size
axis: whichever resource binds sets the size, and one efficiency scales both terms.

**Observations.** One per op: on a GPU trace, the summed duration of the device ops it launched
(kernels, memcpy, memset; :func:`~traincast.costs.ops.event_work` links them) against the op's
work; on a CPU-only trace, the op's own time (its duration minus the time of nested ops with
known work; ops spending more than half their time in such nested ops are wrappers, e.g.
``aten::linear`` around ``aten::addmm``, and are left out). See :func:`observations`.

**Fit.** ``log10 efficiency`` against ``log10 ideal ns``, least squares under two constraints
at once: efficiency never falls as ops grow, and neither does the predicted time, i.e.
``0 <= d log eff / d log ideal <= 1`` (small ops tend to a fixed latency, large ones to a fixed
fraction of peak). The fit is Dykstra's alternating projection between two isotonic
regressions (pool-adjacent-violators, as in scikit-learn's ``IsotonicRegression``). There is a
curve per device for all ops pooled, per family (``gemm``, ``elementwise``...; host<->device
copies form ``memcpy:host``), and per op (``gemm/aten::addmm``; for memcpy the transfer, e.g.
``memcpy/Memcpy HtoD (Pinned -> Device)``) when it was seen ``MIN_SAMPLES`` times at
``MIN_SIZES`` sizes. Prediction uses the most specific curve. Outside the sizes a curve was
fitted on it tends to its parent's (op -> family -> pooled) without letting predicted time fall;
beyond all observed sizes efficiency stays constant, so time grows in proportion to work.
Predictions are typical (log-mean) times: on a noisy host with a heavy tail of slow calls they
fall below the mean (see the ``bias`` column of :attr:`ComputeModel.cv`).

**Peaks.** When a device is in the hardware catalog (:mod:`traincast.costs.hardware`:
``load_catalog().match_device(name)`` giving ``peak_tflops`` per dtype and ``hbm_gbps``; a
failing catalog counts as not found), its datasheet peaks are used
(``source == "catalog"``); fp32 GEMM/conv/attention ops observed faster than the fp32 peak
ran on TF32 tensor cores and get the TF32 peak. Peaks may be given instead (``peak_flops=``,
``bandwidth=``). Otherwise (the CPU, an unknown GPU) the peaks are the highest FLOP/s and
bytes/s any op of the trace achieved on that device (``"empirical"``): ``eff·peak`` is then
simply the fitted achieved throughput. Host<->device copies use the host link's bandwidth,
the fastest such copy observed.

**What-ifs.** :meth:`ComputeModel.ratio` (another batch size or shape on the same device) and
:meth:`ComputeModel.retarget` (another GPU, from the ratio of peaks).

**Accuracy.** :attr:`ComputeModel.cv` holds the error on held-out ops by ``cv_folds``-fold
cross-validation grouped by work signature (an op shape never appears on both sides, so
repeated calls of one shape cannot flatter the score: it measures new shapes). ``events=``
fits on a subset of events; :func:`observations` of the others and :meth:`ComputeModel.score`
measure the error on data the fit never saw.
"""

from traincast.costs.compute.fit import fit_compute_model
from traincast.costs.compute.model import ComputeModel, Curve, DeviceModel, is_host_transfer
from traincast.costs.compute.observe import observations

__all__ = ["ComputeModel", "Curve", "DeviceModel", "fit_compute_model", "is_host_transfer",
           "observations"]
