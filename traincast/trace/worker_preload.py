"""Imported by the forkserver of a load's parse workers before it forks them
(:func:`traincast.trace.parse_server.preload_parse_workers`): the loader's modules and, for
a compiled parse, the scanner's kernels (:func:`~traincast.trace.readers.kineto_fast.warm`)
are loaded once there, and every parse worker forked from it starts with them, instead of
each worker importing them and loading the kernels on its own (a worker's start-up CPU,
twice on two workers, while the loading process hashes the files).

Importing this module anywhere else loads those kernels (numba) in that process. It never
raises: the forkserver would not start if a preloaded module raised.
"""

try:
    from traincast.trace import load as _load  # noqa: F401 - what a parse task imports
    from traincast.trace.readers.kineto_fast import warm

    warm()
except Exception:  # noqa: BLE001 - each worker then loads what it needs itself
    pass
