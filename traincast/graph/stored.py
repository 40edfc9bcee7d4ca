"""The execution graph of a cached job, kept in the parse cache beside the job's entry.

A load through the parse cache (:func:`traincast.trace.load.load`) gives a TraceSet marked
with its job key (:func:`traincast.trace.cache_key.job_of`: the job entry's key, or for a job
with execution traces the stat key of all its files); building its graph
(:func:`traincast.graph.build.build_graph`) then costs more than the load itself at scale
(~0.85 s of a 1,024-rank job's ~1.3 s of load and build, numba's import aside).
:func:`built_or_stored` reads the graph built before for the same job, options and graph code
instead; :func:`keep_later` stores a built one for the next process, with the simulator's
orders once the replay found them (``ExecutionGraph.structure``'s ``flat`` and ``has_in``, or
a small graph's order of its points; :func:`traincast.simulate.engine.simulate`), on a thread of its own (not a daemon: the process
finishes the file before it exits). :func:`traincast.simulate.replay.replay` does both.

File: ``<root>/v<CACHE_SCHEMA>/graphs/<key[:2]>/<key>-<code>-<e><w>.graph`` (``key`` the job
key, ``code`` :func:`graph_code_fingerprint`, ``e``/``w`` the ``exact``/``model_waits``
options as 0/1): :data:`MAGIC`, the header's length (8 bytes, little-endian), the header
(JSON: the job key, the code, the event count, the graph's non-array fields and one row per
array: name, dtype, shape, offset, bytes, writeable, CRC-32), then each array's bytes at a
64-byte aligned offset. The arrays are mapped copy-on-write (:class:`mmap.mmap`
``ACCESS_COPY``): nothing is read until used, pages come from the page cache without a copy,
and a write changes this process's copy only. The measured start and duration columns of the
graph's :class:`~traincast.graph.model.MeasuredPoints` are the events table's own, taken from
the loaded TraceSet (not stored twice). A file that is missing, of another code or job, short,
or whose CRC-32 does not match is not read (the graph is built again and the file rewritten).

What is stored is the builder's graph, field by field: replaying it gives the same times to
the nanosecond (tests compare every field on the shared traces). Graphs of jobs whose
collectives matched with size mismatches are not stored (the match warns, and a stored graph
would skip the match and its warning).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from isal import isal_zlib  # CRC-32 as zlib's, ~3x faster (ISA-L)

from traincast.graph.build import build_graph
from traincast.graph.collectives import has_size_mismatches, match_collectives
from traincast.graph.model import ExecutionGraph, LagPatch, MeasuredPoints, NodeRange, SparsePoints
from traincast.trace import cache as C
from traincast.trace.arrow import to_numpy
from traincast.trace.cache_key import CACHE_SCHEMA, job_of
from traincast.trace.traceset import TraceSet
from traincast.version import __version__

__all__ = ["GRAPH_SCHEMA", "MAGIC", "built_or_stored", "graph_code_fingerprint", "graph_file",
           "keep_later", "read_graph", "write_graph"]

log = logging.getLogger(__name__)

#: bump when the file layout or the meaning of a stored field changes
GRAPH_SCHEMA = 1
MAGIC = b"TCGRAPH\x01"
_ALIGN = 64


def _aligned(n: int) -> int:
    """``n`` bytes rounded up to the arrays' alignment (:data:`_ALIGN`)."""
    return -(-n // _ALIGN) * _ALIGN


def _data_start(header_bytes: int) -> int:
    """Offset of the first array in a file whose header is ``header_bytes`` long."""
    return _aligned(len(MAGIC) + 8 + header_bytes)
_PKG = Path(__file__).resolve().parent.parent
#: source files whose code decides the graph of a TraceSet and the simulator's edge order
#: stored with it (fingerprinted into the file name)
GRAPH_CODE = ("graph/*.py", "graph/waits/*.py", "trace/arrow.py", "trace/schema.py",
              "trace/traceset.py", "trace/link/*.py", "simulate/engine.py",
              "simulate/numba_kernels.py")


@lru_cache(maxsize=1)
def graph_code_fingerprint() -> str:
    """Version, :data:`GRAPH_SCHEMA` and the code of the graph builder and of the simulator's
    edge order (:data:`GRAPH_CODE`), hashed (20 hex digits)."""
    h = hashlib.blake2b(digest_size=10)
    h.update(f"{__version__}|{GRAPH_SCHEMA}".encode())
    for pattern in GRAPH_CODE:
        for f in sorted(_PKG.glob(pattern)):
            h.update(str(f.relative_to(_PKG)).encode())
            try:
                h.update(f.read_bytes())
            except OSError:  # pragma: no cover - a zipped install: the version decides
                pass
    return h.hexdigest()


def graph_file(root: Path, key: str, *, exact: bool, model_waits: bool) -> Path:
    """Where the graph of job key ``key`` built with these options by this code lies in the
    cache at ``root``."""
    return root / f"v{CACHE_SCHEMA}" / "graphs" / key[:2] / (
        f"{key}-{graph_code_fingerprint()}-{int(exact)}{int(model_waits)}.graph")


def built_or_stored(ts: TraceSet, *, exact: bool = False,
                    model_waits: bool = True) -> tuple[ExecutionGraph, bool]:
    """(:func:`~traincast.graph.build.build_graph` of ``ts``, whether it was read from the
    cache): read when ``ts`` is a cached job whose graph was stored before (module
    docstring), else built; :func:`keep_later` stores a built one for the next process.

    Raises:
        CollectiveMismatchError: as :func:`~traincast.graph.build.build_graph`.
    """
    where = job_of(ts)
    if where is not None:
        root, key = where
        path = graph_file(root, key, exact=exact, model_waits=model_waits)
        g = read_graph(path, ts, key)
        if g is not None:
            C.cache_size.touch(path)
            return g, True
    return build_graph(ts, exact=exact, model_waits=model_waits), False


def keep_later(ts: TraceSet, g: ExecutionGraph, *, exact: bool = False,
               model_waits: bool = True) -> threading.Thread | None:
    """Store ``g``, the graph :func:`~traincast.graph.build.build_graph` built of ``ts``
    with these options, for the next process, on a thread (not a daemon: finished before the
    process exits), with the simulator's edge order when it was found
    (:func:`traincast.simulate.engine.simulate` keeps it in ``g.structure``); the thread, or
    None when ``ts`` is not a cached job or its collectives matched with size mismatches
    (module docstring)."""
    where = job_of(ts)
    if where is None or has_size_mismatches(match_collectives(ts)):
        return None
    root, key = where
    path = graph_file(root, key, exact=exact, model_waits=model_waits)
    # the fields as they are now (the graph's users may assign new ones meanwhile)
    fields, extra = dict(g.__dict__), _structure_rows(g)

    def run() -> None:
        try:
            if write_graph(path, fields, ts, key, extra):
                C.trim_after_write(root)
        finally:
            C.drop_pending(path)

    t = threading.Thread(target=run, name="traincast-graph-write")
    C.add_pending(path, t)  # (the parse cache's clear and wait_for_writes wait for it)
    t.start()
    return t


def _structure_rows(g: ExecutionGraph) -> dict[str, np.ndarray]:
    """The arrays of the simulator's orders kept in ``g.structure`` for ``g``'s own edges
    (``flat``: the compiled path's edge order, ``flat_sig``: the reached points it is for,
    packed; ``has_in``: the points with an incoming edge; ``flat_points``: a small graph's
    topological order of its points, with its ``flat_points_sig``), those that are there."""
    out: dict[str, np.ndarray] = {}
    flat, has_in = g.structure.get("flat"), g.structure.get("has_in")
    if flat is not None and flat[0] is g.src and flat[1] is g.dst:
        out["structure.flat"] = flat[3]
        out["structure.flat_sig"] = np.frombuffer(flat[2], np.uint8)
    if has_in is not None and has_in[0] is g.src and has_in[1] is g.dst and \
            has_in[2] == g.n_points:
        out["structure.has_in"] = has_in[3]
    points = g.structure.get("flat_edges")  # a small graph's order (the uncompiled path)
    if points is not None and points[0] is g.src and points[1] is g.dst:
        out["structure.flat_points"] = points[4]
        out["structure.flat_points_sig"] = np.frombuffer(points[2], np.uint8)
    return out


def _array_rows(d: dict[str, Any], ts: TraceSet) -> tuple[dict[str, Any],
                                                         dict[str, np.ndarray]]:
    """The graph's fields ``d`` (its ``__dict__``) as (JSON-able values, arrays by name);
    raises ValueError for a field this file cannot hold."""
    meta: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {"node_rank": d["node_rank"], "src": d["src"],
                                     "dst": d["dst"], "lag": d["lag"], "kind": d["kind"],
                                     "unmatched_collectives": d["unmatched_collectives"]}
    node_event = d["_node_event"]
    if isinstance(node_event, NodeRange):
        meta["node_event"] = [int(node_event.size), np.dtype(node_event.dtype).str]
    else:
        arrays["node_event"] = node_event
    measured = d["_measured"]
    if isinstance(measured, MeasuredPoints):
        ev = ts.events
        if not (np.array_equal(measured.start, to_numpy(ev.column("ts"))) and
                np.array_equal(measured.dur, to_numpy(ev.column("dur")))):
            raise ValueError("measured points not of the events' columns")
        meta["measured"] = "points"
        for f in ("lo", "hi", "offset", "barrier"):
            arrays[f"measured.{f}"] = getattr(measured, f)
    else:
        arrays["measured"] = measured
    anchor = d["_anchor"]
    if isinstance(anchor, SparsePoints):
        meta["anchor"] = [int(anchor.size), int(anchor.fill)]
        arrays["anchor.index"], arrays["anchor.values"] = anchor.index, anchor.values
    else:
        arrays["anchor"] = anchor
    exact = d["_exact"]
    if exact is None:
        meta["exact"] = None
    elif exact is d["lag"]:
        meta["exact"] = "lag"
    elif isinstance(exact, LagPatch):
        meta["exact"] = "patch of lag" if exact.base is d["lag"] else "patch"
        if exact.base is not d["lag"]:
            arrays["exact.base"] = exact.base
        arrays["exact.index"], arrays["exact.values"] = exact.index, exact.values
    else:
        meta["exact"] = "array"
        arrays["exact"] = exact
    if d["thread_parent"] is not None:
        arrays["thread_parent"] = d["thread_parent"]
    groups = d["collective_groups"]
    types = {a.dtype.str for a in groups}
    if len(types) > 1:
        raise ValueError("collective groups of several types")
    meta["groups"] = [int(a.size) for a in groups]
    arrays["groups"] = (np.concatenate(groups) if groups else np.empty(0, np.int64))
    meta["clock_offset"] = [[int(r), int(o)] for r, o in d["clock_offset"].items()]
    meta["host_waits"] = [[int(r), str(c), int(a), int(b), int(w), str(t)]
                          for r, c, a, b, w, t in d["host_waits"]]
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray) or a.dtype.hasobject:
            raise ValueError(f"{name} is not a plain array")
    return meta, arrays


def write_graph(path: Path, g: ExecutionGraph | dict[str, Any], ts: TraceSet, key: str,
                extra: dict[str, np.ndarray] | None = None) -> bool:
    """Write ``g`` (the graph of ``ts``, job key ``key``, or a copy of its ``__dict__``) to
    ``path`` atomically (a temporary beside it, then :func:`os.replace`), with the arrays
    ``extra`` of its ``structure`` (:func:`keep_later`); False when it cannot be written
    (logged at debug level) or holds a field this file cannot (module docstring)."""
    try:
        meta, arrays = _array_rows(g if isinstance(g, dict) else dict(g.__dict__), ts)
    except ValueError as exc:
        log.debug("traincast cache: graph of %s not stored (%s)", key, exc)
        return False
    arrays.update(extra or {})
    rows, offset = [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        arrays[name] = a
        rows.append([name, a.dtype.str, list(a.shape), offset, int(a.nbytes),
                     bool(a.flags.writeable), isal_zlib.crc32(a) if a.nbytes else 0])
        offset += _aligned(a.nbytes)
    header = msgspec.json.encode({"schema": GRAPH_SCHEMA, "key": key,
                                  "code": graph_code_fingerprint(),
                                  "events": int(ts.events.num_rows), "meta": meta,
                                  "arrays": rows})
    start = _data_start(len(header))
    tmp = None
    try:
        fd, tmp = C.new_temporary(path, key)
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + len(header).to_bytes(8, "little") + header)
            fh.write(b"\0" * (start - fh.tell()))
            for a in arrays.values():
                fh.write(memoryview(a).cast("B") if a.nbytes else b"")
                fh.write(b"\0" * (-a.nbytes % _ALIGN))
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        log.debug("traincast cache: cannot write %s (%s)", path, exc)
        return False
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return True


def read_graph(path: Path, ts: TraceSet, key: str) -> ExecutionGraph | None:
    """The graph stored at ``path`` for ``ts`` (job key ``key``), its arrays mapped
    copy-on-write (module docstring); None when there is none, or it is of another job or
    code, or damaged (logged at debug level)."""
    try:
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError):  # missing, or empty (mmap refuses a length of 0)
        return None
    try:
        return _graph_of(mm, ts, key)
    except (ValueError, KeyError, TypeError, IndexError, msgspec.DecodeError) as exc:
        log.debug("traincast cache: ignoring unreadable graph %s (%s)", path, exc)
        return None


def _graph_of(mm: mmap.mmap, ts: TraceSet, key: str) -> ExecutionGraph:
    """The graph in the mapped file ``mm`` (see :func:`read_graph`); ValueError (or another
    of the errors it names) when it is not a graph of ``ts`` by this code."""
    if mm[:len(MAGIC)] != MAGIC:
        raise ValueError("not a graph file")
    n = int.from_bytes(mm[len(MAGIC):len(MAGIC) + 8], "little")
    head = msgspec.json.decode(mm[len(MAGIC) + 8:len(MAGIC) + 8 + n])
    if head["schema"] != GRAPH_SCHEMA or head["key"] != key or \
            head["code"] != graph_code_fingerprint() or head["events"] != ts.events.num_rows:
        raise ValueError("of another job or code")
    start = _data_start(n)
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, shape, offset, nbytes, writeable, crc in head["arrays"]:
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dt.itemsize != nbytes or start + offset + nbytes > len(mm):
            raise ValueError(f"{name}: short or inconsistent")
        a = np.frombuffer(mm, dt, count, start + offset).reshape(shape) if nbytes else \
            np.empty(shape, dt)
        if nbytes and isal_zlib.crc32(a) != crc:
            raise ValueError(f"{name}: CRC-32 mismatch")
        a.flags.writeable = bool(writeable)
        arrays[name] = a
    meta = head["meta"]
    if "node_event" in meta:
        size, dtype = meta["node_event"]
        node_event: Any = NodeRange(int(size), np.dtype(dtype).type)
    else:
        node_event = arrays["node_event"]
    if meta.get("measured") == "points":
        ev = ts.events
        measured: Any = MeasuredPoints(to_numpy(ev.column("ts")), to_numpy(ev.column("dur")),
                                       arrays["measured.lo"], arrays["measured.hi"],
                                       arrays["measured.offset"], arrays["measured.barrier"])
    else:
        measured = arrays["measured"]
    if "anchor" in meta:
        anchor: Any = SparsePoints(int(meta["anchor"][0]), arrays["anchor.index"],
                                   arrays["anchor.values"], int(meta["anchor"][1]))
    else:
        anchor = arrays["anchor"]
    lag = arrays["lag"]
    how = meta["exact"]
    exact: Any = None
    if how == "lag":
        exact = lag
    elif how in ("patch", "patch of lag"):
        exact = LagPatch(lag if how == "patch of lag" else arrays["exact.base"],
                         arrays["exact.index"], arrays["exact.values"])
    elif how == "array":
        exact = arrays["exact"]
    elif how is not None:
        raise ValueError(f"calibrated lags stored as {how!r}")
    sizes = meta["groups"]
    ends = np.cumsum(sizes, dtype=np.int64)
    flat = arrays["groups"]
    groups = [flat[e - s:e] for s, e in zip(sizes, ends.tolist(), strict=True)]
    g = ExecutionGraph(
        node_event, arrays["node_rank"], measured, arrays["src"], arrays["dst"], lag,
        arrays["kind"], anchor, groups, arrays["unmatched_collectives"],
        {int(r): int(o) for r, o in meta["clock_offset"]}, arrays.get("thread_parent"),
        exact, [tuple(w) for w in meta["host_waits"]])  # type: ignore[misc]
    if "structure.flat" in arrays:  # the simulator's edge order (engine._flat's entry)
        g.structure["flat"] = (g.src, g.dst, arrays["structure.flat_sig"].tobytes(),
                               arrays["structure.flat"])
    if "structure.has_in" in arrays:
        g.structure["has_in"] = (g.src, g.dst, g.n_points, arrays["structure.has_in"])
    if "structure.flat_points" in arrays:  # (engine._flat_edges takes the points' order)
        g.structure["flat_points"] = (g.src, g.dst,
                                      arrays["structure.flat_points_sig"].tobytes(),
                                      arrays["structure.flat_points"])
    return g
