"""Exceptions raised by traincast for bad input.

Every error names the offending file (when there is one) and the problem in one line; the CLI
prints ``str(exc)`` and exits with code 2. All derive from :class:`TraincastError`.
"""

from __future__ import annotations

from pathlib import Path


class TraincastWarning(UserWarning):
    """Something traincast had to guess or tolerate (e.g. no step markers, collective sizes
    that differ across ranks); the CLI prints each as ``traincast: warning: ...``."""


class TraincastError(Exception):
    """Base class of every error traincast raises on bad input or bad parameters."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class TraceFormatError(TraincastError):
    """A file is truncated, corrupt, not JSON, or not a trace of the expected kind."""


class InputTooLargeError(TraceFormatError):
    """A file inflates (gunzips) past the size or compression-ratio limit: a gzip bomb, or a
    trace larger than ``TRAINCAST_MAX_INFLATE_BYTES`` allows."""


class NotRegularFileError(TraceFormatError):
    """An input path is a FIFO, a device, a socket or a folder: only regular files are read
    (a FIFO would block forever, ``/dev/zero`` never ends)."""


class EmptyTraceDirError(TraincastError):
    """A folder holds no trace file."""


class RankError(TraincastError):
    """Rank of a trace unknown, duplicated, or world sizes disagree between files."""


class ExecutionTraceMismatchError(TraincastError):
    """A PyTorch execution trace does not belong to the Kineto trace it is paired with."""


class CollectiveMismatchError(TraincastError):
    """Collectives cannot be matched consistently across ranks."""


class IterationError(TraincastError):
    """Iterations cannot be identified (e.g. an annotation regex that matches nothing)."""


class ParameterError(TraincastError):
    """An argument is out of range or unknown."""


class OutputError(TraincastError):
    """An output file cannot be written."""
