"""The package version, ``traincast.__version__`` (also part of the parse-cache key,
:mod:`traincast.trace.cache`, and of the producer field of exports)."""

__version__ = "0.1.0"
