"""One reader per trace format, each returning :class:`~traincast.trace.readers.base.TraceFile`
records (or, for execution traces, :class:`~traincast.trace.readers.et.ExecutionTrace`):
:mod:`~traincast.trace.readers.kineto` (PyTorch profiler JSON), :mod:`~traincast.trace.readers.nsys`
(Nsight Systems SQLite), :mod:`~traincast.trace.readers.otf2` (OTF2), :mod:`~traincast.trace.readers.et`
(PyTorch execution traces). Readers know their format and nothing else; joining an execution
trace to a profiler trace is :mod:`traincast.trace.link`.
"""
