"""Chrome-trace (Trace Event Format) export, for Perfetto and chrome://tracing.

Format: Google's "Trace Event Format" document (complete events ``ph: "X"`` with ``ts`` and
``dur`` in microseconds, ``M`` metadata events naming processes and threads). Each rank gets
one process per source (``rank R measured`` / ``rank R predicted``); host threads keep their
thread ids and GPU streams become threads named ``stream S``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from traincast.errors import OutputError
from traincast.trace.traceset import TraceSet
from traincast.util.fileio import atomic_write, refuse_inputs


def _events(ts: TraceSet, label: str, pid_base: int, origin: int) -> list[dict]:
    ev = ts.events
    rank = ev.column("rank").to_numpy()
    name = ev.column("name").to_pylist()
    kind = ev.column("kind").to_pylist()
    start = (ev.column("ts").to_numpy() - origin) / 1000.0
    dur = ev.column("dur").to_numpy() / 1000.0
    tid = ev.column("tid").to_numpy()
    stream = ev.column("stream").to_numpy()
    device = ev.column("device").to_numpy()
    it = ev.column("iteration").to_numpy()
    names = {(r, t): nm for r, info in ts.ranks.items()
             for (_, t), nm in info.threads.items()}
    out: list[dict] = []
    lanes: set[tuple[int, int, str]] = set()
    for r in np.unique(rank).tolist():
        out.append({"ph": "M", "name": "process_name", "pid": pid_base + r, "tid": 0,
                    "args": {"name": f"rank {r} {label}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid_base + r, "tid": 0,
                    "args": {"sort_index": 2 * r + (1 if label == "predicted" else 0)}})
    gpu = device >= 0
    lane = np.where(gpu, 1_000_000 + stream, tid)
    for i in range(ev.num_rows):
        pid = pid_base + int(rank[i])
        t = int(lane[i])
        if (pid, t, "") not in lanes:
            lanes.add((pid, t, ""))
            nm = (f"stream {int(stream[i])}" if gpu[i] else
                  names.get((int(rank[i]), int(tid[i])), f"thread {int(tid[i])}"))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": t,
                        "args": {"name": nm}})
        out.append({"ph": "X", "name": name[i], "cat": kind[i], "pid": pid, "tid": t,
                    "ts": round(float(start[i]), 3), "dur": round(float(dur[i]), 3),
                    "args": {"iteration": int(it[i])}})
    return out


def write_chrome_trace(path: str | Path, measured: TraceSet, predicted: TraceSet | None = None
                       ) -> Path:
    """Write measured (and predicted) events side by side to ``path`` (``.json[.gz]``).

    Times are µs from the earliest measured event. Written atomically (temporary file in the
    same folder, then renamed).

    Raises:
        OutputError: the folder does not exist or is not writable, or ``path`` is one of the
            measured run's trace files.
    """
    path = Path(path)
    refuse_inputs([path], [info.path for info in measured.ranks.values()])
    if not path.parent.is_dir():
        raise OutputError(f"output folder {path.parent} does not exist", path)
    origin = int(measured.events.column("ts").to_numpy().min()) if measured.events.num_rows \
        else 0
    events = _events(measured, "measured", 0, origin)
    if predicted is not None:
        p_origin = int(predicted.events.column("ts").to_numpy().min()) if \
            predicted.events.num_rows else 0
        events += _events(predicted, "predicted", 100_000, p_origin)
    data = orjson.dumps({"traceEvents": events, "displayTimeUnit": "ms",
                         "otherData": {"generator": "traincast"}})
    atomic_write(path, data)
    return path
