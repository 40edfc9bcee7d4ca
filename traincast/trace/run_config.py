"""The run configuration a recording writes beside its traces (``.run.json``: the batch size,
the profiler settings, the torch version; :func:`traincast.record.record_demo`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traincast.trace.traceset import TraceSet

__all__ = ["recorded_config"]


def recorded_config(ts: TraceSet) -> dict[str, Any]:
    """The run configuration ``record_demo`` writes beside the traces (``.run.json``; a
    plain ``run.json`` is read too), {} if absent or unreadable."""
    for info in ts.ranks.values():
        if info.path is not None:
            for name in (".run.json", "run.json"):
                p = Path(info.path).parent / name
                if p.is_file():
                    try:
                        return json.loads(p.read_text())
                    except (OSError, ValueError):
                        return {}
    return {}
