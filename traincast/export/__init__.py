"""Exports of traces to other tools' formats (Hatchet)."""

from traincast.export.hatchet import to_hatchet

__all__ = ["to_hatchet"]
