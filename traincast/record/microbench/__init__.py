"""Kernel microbenchmarks: time op families over sampled sizes on the device torch sees.

:func:`run_bench` measures the families of :mod:`traincast.costs.kernel_families` (gemm,
conv2d, embedding_bag, elementwise, reduction, layer_norm, softmax, attention, movement, memcpy,
optimizer; their size parameters, shapes and work are documented there) and the host overheads
of :func:`measure_overheads`, into a folder:

- ``<family>.jsonl`` -- one JSON object per measured point, appended as soon as the point is
  done, so an interrupted run keeps every finished point. Fields: ``key`` (hash of family, op,
  dtype, sizes, device, torch version and threads), ``family``, ``op``, ``dtype``, ``dist``
  (embedding_bag), ``sizes`` (``{name: int}``), ``device`` (``cpu``/``cuda``/``rocm``),
  ``device_name``, ``torch``, ``threads``, ``ts`` (ISO time), and per direction (``fwd``,
  ``bwd``; absent or null when not measured) the statistics of the per-call time in ns:
  ``median_ns``, ``q1_ns``, ``q3_ns``, ``iqr_ns``, ``mad_ns``, ``min_ns``, ``mean_ns``,
  ``repeats`` (samples, all passes) and ``inner`` (calls per sample); ``passes``. A point
  that failed (e.g. out of memory) has ``error`` instead and is not retried.
- ``meta.json`` -- ``schema`` (``traincast.microbench/1``), ``device``, ``device_name``,
  ``torch``, ``threads``, ``python``, ``platform``, ``created``/``updated`` (ISO UTC),
  ``seed``, ``quick``, ``points`` (measured points per family).
- ``overheads.json`` -- see :func:`measure_overheads`.

**Timing.** Points are measured in chunks of 8; each of ``passes`` passes (3; quick 1) visits
every point of the chunk once (tensors built again, same data), so a burst of load from other
processes spreads over many points instead of spoiling one. Per visit and direction:
``warmup`` calls, then ``ceil(repeats / passes)`` samples; a sample times ``inner``
back-to-back calls (``inner`` chosen from a probe call so a sample lasts at least
``min_sample_ns``, 200 µs (quick 50 µs), at most 1000 calls) and records the mean per call.
The statistics are over all samples of all passes: the median is the point's typical time,
the min its least disturbed one, the IQR and the MAD (median absolute deviation) its spread,
the noise floor of the fitted models. On CPU the clock is :func:`time.perf_counter_ns` around
the calls, with ``torch.set_num_threads(threads)`` (1 by default). On CUDA/ROCm CUDA events
are recorded around the calls of a sample and synchronised.
Backward directions time ``torch.autograd.grad(out, inputs, grad_out, retain_graph=True)``.

**Sizes** are drawn log-uniformly (integers; a few sizes from a small list) within per-family
ranges, with a per-family cap on FLOPs and bytes (:mod:`.points`), from a
``numpy`` generator seeded by ``seed`` and the family name: the same arguments give the same
points in the same order, which is what makes a re-run resume (points whose key is already in
the file are skipped). ``quick`` uses a small grid of small sizes.

**Not measured:** collectives (the communication model is calibrated from nccl-tests logs or
traces: ``traincast calibrate comm``).

torch is an optional dependency (``pip install 'traincast[record]'``), imported when a
benchmark runs (:mod:`.timing`); :class:`BenchSetupError` when it is missing.
"""
from traincast.record.microbench.overheads import measure_overheads
from traincast.record.microbench.points import family_points
from traincast.record.microbench.run import BenchResult, run_bench
from traincast.record.microbench.store import OVERHEADS_SCHEMA, SCHEMA, read_points
from traincast.record.microbench.timing import DEVICES, BenchSetupError

__all__ = ["DEVICES", "OVERHEADS_SCHEMA", "SCHEMA", "BenchResult", "BenchSetupError", "family_points",
           "measure_overheads", "read_points", "run_bench"]
