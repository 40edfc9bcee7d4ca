"""The simulator: execution graph plus durations -> point times.

:mod:`~traincast.simulate.engine` (``simulate``, ``simulate_batch``: the one engine for
replay, what-if and planning), :mod:`~traincast.simulate.replay` (``replay``: a measured
TraceSet's graph built and simulated, the :class:`~traincast.simulate.replay.Replay` that
analyses take), :mod:`~traincast.simulate.timeline` (simulated times back into the canonical
event schema) and :mod:`~traincast.simulate.numba_kernels` (the compiled loops).
"""
