"""Host waits: what a host call waited for, kept apart from its own cost.

The models (one module each: :mod:`~traincast.graph.waits.queue`,
:mod:`~traincast.graph.waits.syncs`, :mod:`~traincast.graph.waits.polls`,
:mod:`~traincast.graph.waits.handoff`; the edge container
and thresholds in :mod:`~traincast.graph.waits.common`) run over all ranks at once; every
statistic is the rank's own (wake-up medians, intrinsic costs per API name, queue depths).

A host runtime call's measured duration is its *intrinsic* cost plus the time it waited for
something else. Replayed as a fixed duration, the wait pins the host to the measured step
whatever the GPU does. Each wait is modelled here as a dependency edge plus the call's own
cost (the principle of Lin et al., arXiv 2404.12674, Sec. 5: CPU overheads kept apart from
GPU time, intra-rank synchronization as edges):

* **Launch-queue back-pressure** (``QUEUE``). A launch returns only when its stream's queue
  of pending work has room: launch ``i`` on a stream ends after the ``i - Q``-th entry of that
  stream completes. ``Q`` is 1,024 entries per stream for CUDA (HTA,
  ``hta/configs/default_values.py::CUDA_MAX_LAUNCH_QUEUE_PER_STREAM`` and its "Augmented
  counters" documentation: "when the queue length on a stream is 1024 or larger new events
  cannot be scheduled on that stream and the CPU will stall"; the limit is not documented by
  NVIDIA). HIP has no documented limit either; the same default is assumed. When launches
  visibly block in the trace, ``Q`` is fitted: among depths up to the largest number of
  outstanding entries observed at a launch's return, the one at which most launches were
  woken by the completion of the entry ``Q`` places before them (the queue also holds
  entries the profiler does not show, such as event records, so the fit is usually a little
  below 1,024). A launch that found the queue full (entry ``i - Q`` not complete when it
  began) and returned more than :data:`QUEUE_WAKE_NS` after entry ``i - Q`` completed waited
  for a batch of entries to drain (the driver frees queue space in batches: a few launches
  block for several kernels, the next ones return at once): its edge comes from the last
  entry of its stream that completed before it returned, between ``i - Q`` and ``i``.
* **Blocking copies and syncs** (``SYNC``). ``cudaMemcpy``/``cudaMemcpyAsync`` (pageable
  host memory makes the async form synchronous) end after the copy they issued; a
  ``cudaDeviceSynchronize`` after the last op launched before it on every stream of the device;
  a ``cudaStreamSynchronize`` after the last op launched before it on the stream the thread
  last launched to (``.item()``, ``.cpu()``, ``nonzero``: copy then sync on the current stream);
  other blocking calls (event syncs, ``cudaFree``) after the GPU op that ended last before them
  when they ended within :data:`SYNC_WAKE_NS` of it.
* **Polling** (``SYNC``). A run of ``cudaEventQuery``/``cudaStreamQuery``/``hipEventQuery``
  calls on one thread that spans at least :data:`POLL_MIN_SPAN_NS` and ends shortly after a
  GPU op ends is one wait for that op: the thread's time inside the run is not work.

* **Autograd handoffs** (``SYNC`` between two host threads of a process,
  :mod:`~traincast.graph.waits.handoff`). On a GPU the autograd engine runs the backward on
  a device thread while the calling thread blocks, untraced: the caller's last point before
  its gap precedes the device thread's burst of ``autograd::engine::evaluate_function``
  events, whose end precedes the caller's resumption. The caller's gap is lowered to its own
  part (the latencies either side), the device thread's idle segment before the burst to 0;
  it runs on the threads' chains, after the nesting walk.

The edges exist whether or not the measured run waited (a slower GPU must make the host
wait where the measurement did not). A call that did wait (its dependency ended within the
wake-up window before it returned, and it lasted longer than its intrinsic cost) has the
THREAD segment into its end lowered to its intrinsic cost: the median duration of the calls
of the same name on the rank that did not wait, never its blocked duration.

Lags: ``exact`` is calibrated so that the measurement satisfies every edge and the binding
one with equality; ``structural`` uses the median wake-up latency of the waits observed.
"""

from __future__ import annotations

from traincast.graph.waits.common import (
    DEFAULT_QUEUE_DEPTH,
    POLL_MIN_CALLS,
    POLL_MIN_SPAN_NS,
    QUEUE_WAKE_NS,
    SYNC_WAKE_NS,
    WaitEdges,
)
from traincast.graph.waits.handoff import HANDOFF_MIN_GAP_NS, HANDOFF_WAKE_NS, handoffs
from traincast.graph.waits.polls import polls
from traincast.graph.waits.queue import launch_queue
from traincast.graph.waits.syncs import legacy_syncs, syncs

__all__ = ["DEFAULT_QUEUE_DEPTH", "HANDOFF_MIN_GAP_NS", "HANDOFF_WAKE_NS", "POLL_MIN_CALLS",
           "POLL_MIN_SPAN_NS", "QUEUE_WAKE_NS",
           "SYNC_WAKE_NS", "WaitEdges", "handoffs", "launch_queue", "legacy_syncs", "polls",
           "syncs"]
