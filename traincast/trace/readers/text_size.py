"""How much trace text a file holds, estimated from its size alone (no read, no numpy): what
decides, before anything is parsed, whether a load parses its files in worker processes and
with the compiled scanner (:mod:`traincast.trace.prestart` asks it before the command's
heavy imports)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["COMPILED_MIN_BYTES", "GZIP_RATIO", "estimated_text_bytes"]

#: trace text (bytes) from which a file is scanned by the compiled path when
#: :func:`~traincast.trace.readers.kineto.read_kineto` is not told (importing numba and its
#: cached kernels costs ~0.5 s once per process); ``TRAINCAST_COMPILED_MIN_BYTES`` overrides
#: it (0: always)
COMPILED_MIN_BYTES = 64 << 20

#: typical inflation of a gzipped Kineto trace (18x for the v100 HTA trace, 15x for DLRM)
GZIP_RATIO = 15


def estimated_text_bytes(f: Path) -> int:
    """Bytes of trace text in ``f``: its size, times :data:`GZIP_RATIO` when gzipped (0 when
    it cannot be stat'ed)."""
    try:
        n = f.stat().st_size
    except OSError:
        return 0
    return n * GZIP_RATIO if f.name.endswith(".gz") else n
