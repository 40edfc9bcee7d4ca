"""Readers for collective-communication measurements: nccl-tests logs and vTrain's table.

Both return one row per measured message size, with the columns
:meth:`traincast.costs.comm.CommModel.fit` takes (``collective``, ``size_bytes``,
``group_size``, ``time_ns``, ``ranks_per_node``) plus what the source reports besides.

nccl-tests output (https://github.com/NVIDIA/nccl-tests, ``src/common.cu``; real examples in
NVIDIA/nccl issues 583, 1435, 1530 and NVIDIA/nccl-tests issues 232, 389)::

    # nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007     (recent versions)
    # Collective test starting: all_reduce_perf                            (recent versions)
    # nThread 1 nGpus 1 minBytes 536870912 maxBytes 17179869184 step: 2(factor) ...
    #
    # Using devices
    #  Rank  0 Group  0 Pid 249104 on node1 device  0 [0000:00:05] NVIDIA B200
    #   Rank  0 Pid 1821213 on host device  0 [0x00] NVIDIA A100-SXM4-40GB   (older versions)
    #
    #                                    out-of-place                       in-place
    #       size    count   type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B) (elements)                               (us)  (GB/s)  (GB/s)            (us) ...
       536870912 134217728  float    sum      -1   1806.7  297.16  586.06      0   1835.9 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 745.53

Older versions have no ``root`` column and an ``error`` column (a float such as ``0e+00``)
instead of ``#wrong``; recent ones may print ``N/A`` there. ``size`` is nccl-tests' message
size ``S`` (:mod:`traincast.trace.comm_vocab`), ``time`` is in microseconds (the units line
says ``(us)``; a ``(ms)`` units line is honoured), bandwidths in GB/s (1e9 B/s).

How the reader gets what the table does not say:

- collective: the ``# Collective test starting: X_perf`` line, else the first ``X_perf``
  binary name in the file (the pasted command line), else the file name, else the
  ``collective=`` argument — which, when given, overrides all of them. ``alltoall`` is
  ``all_to_all``; ``sendrecv`` is ``send`` (bus factor 1, ``src/sendrecv.cu``).
- group size ``n``: the number of distinct ranks in the ``Rank N ... on HOST device D`` lines
  (all ranks are listed by rank 0, MPI runs included); without such lines ``nThread x nGpus``
  when that is > 1, else it is inferred from ``busbw / algbw`` of the row with the largest
  algbw (the nccl-tests bus factor is a function of ``n``; noted in ``attrs["notes"]``).
- ``ranks_per_node``: ranks / distinct hosts in the device lines (NaN when unknown).

A file may hold several runs one after another; each ``# nThread`` (or ``# Collective test
starting``) line starts a new section with its own collective, ranks and hosts.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from traincast.errors import ParameterError, TraceFormatError
from traincast.util.fileio import open_regular, read_regular

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: most bytes of one nccl-tests log (real ones hold kilobytes)
_MAX_LOG_BYTES = 64 << 20

#: nccl-tests binary stem -> traincast collective name (``src/*.cu`` of nccl-tests)
BINARY_COLLECTIVE = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "sendrecv": "send",
}

COLUMNS = ["collective", "size_bytes", "count", "dtype", "redop", "root", "group_size",
           "ranks_per_node", "time_ns", "algbw_gbps", "busbw_gbps", "wrong",
           "in_place_time_ns", "in_place_algbw_gbps", "in_place_busbw_gbps", "in_place_wrong",
           "section"]

_START = re.compile(r"Collective test starting:\s*(\w+?)_perf\b")
_HEADER = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_BINARY = re.compile(r"\b([a-z_]+?)_perf(?:_mpi)?\b")
_DEVICE = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_INT = re.compile(r"^\d+$")


@dataclass
class _Section:
    collective: str | None = None
    binary: str | None = None
    n_thread_gpus: int | None = None
    ranks: set[int] = field(default_factory=set)
    hosts: dict[str, set[int]] = field(default_factory=dict)
    columns: list[str] | None = None
    time_scale: float = 1e3  # table time unit -> ns (us by default)
    rows: list[dict] = field(default_factory=list)
    avg_busbw: float | None = None


def _collective_from_name(stem: str, path: Path) -> str:
    stem = stem.lower()
    if stem not in BINARY_COLLECTIVE:
        raise ParameterError(f"unsupported nccl-tests collective {stem!r} (known: "
                             f"{', '.join(sorted(BINARY_COLLECTIVE))})", path)
    return BINARY_COLLECTIVE[stem]


def _table_columns(line: str) -> list[str] | None:
    """Column names of a result-table header line, or None if ``line`` is not one."""
    toks = line.lstrip("#").split()
    if len(toks) < 6 or toks[0] != "size" or "time" not in toks or "algbw" not in toks:
        return None
    return toks


def _number(tok: str, what: str, lineno: int, path: Path) -> float:
    if tok in ("N/A", "n/a", "-"):
        return np.nan
    try:
        return float(tok)
    except ValueError:
        raise TraceFormatError(f"line {lineno}: {what} {tok!r} is not a number", path) from None


def _parse_row(toks: list[str], cols: list[str], scale: float, lineno: int,
               path: Path) -> dict:
    if len(toks) != len(cols):
        raise TraceFormatError(
            f"line {lineno}: result row has {len(toks)} fields, the table header has "
            f"{len(cols)} (truncated or malformed row)", path)
    if not _INT.match(toks[1]):
        raise TraceFormatError(f"line {lineno}: element count {toks[1]!r} is not an integer",
                               path)
    row: dict = {"size_bytes": int(toks[0]), "count": int(toks[1]), "dtype": toks[2],
                 "redop": None, "root": -1}
    times = [i for i, c in enumerate(cols) if c == "time"]
    if "redop" in cols:
        row["redop"] = toks[cols.index("redop")]
    if "root" in cols:
        root = _number(toks[cols.index("root")], "root", lineno, path)
        if not np.isfinite(root):
            raise TraceFormatError(f"line {lineno}: root {toks[cols.index('root')]!r} is not "
                                   "a rank", path)
        row["root"] = int(root)
    for prefix, start in zip(("", "in_place_"), times, strict=False):
        row[f"{prefix}time_ns"] = _number(toks[start], "time", lineno, path) * scale
        row[f"{prefix}algbw_gbps"] = _number(toks[start + 1], "algbw", lineno, path)
        row[f"{prefix}busbw_gbps"] = _number(toks[start + 2], "busbw", lineno, path)
        row[f"{prefix}wrong"] = (_number(toks[start + 3], "#wrong", lineno, path)
                                 if start + 3 < len(toks) else np.nan)
    return row


def _infer_group_size(collective: str, rows: list[dict]) -> int | None:
    """``n`` from busbw / algbw (nccl-tests bus factor), using the row with the largest
    algbw (the one least hurt by the 2-decimal rounding)."""
    best = max(rows, key=lambda r: r.get("algbw_gbps", 0) or 0)
    alg, bus = best.get("algbw_gbps", np.nan), best.get("busbw_gbps", np.nan)
    if not (alg and alg > 0.5 and np.isfinite(bus)):
        return None
    f = bus / alg
    if collective == "all_reduce":
        return int(round(2.0 / (2.0 - f))) if f < 1.99 else None
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return int(round(1.0 / (1.0 - f))) if f < 0.995 else None
    return None


def read_nccl_tests_log(path: str | Path, *, collective: str | None = None) -> pd.DataFrame:
    """Parse the stdout of one nccl-tests binary (``all_reduce_perf`` etc.).

    Args:
        path: the log file (plain text; NCCL INFO lines and other noise are skipped).
        collective: traincast collective name or nccl-tests binary stem; overrides what the
            file says (for logs without a ``Collective test starting`` line or command line).

    Returns:
        One row per result line: ``collective``, ``size_bytes`` (nccl-tests ``S``),
        ``count``, ``dtype``, ``redop`` (None in logs without it), ``root`` (-1 if none),
        ``group_size``, ``ranks_per_node`` (float, NaN if unknown), ``time_ns``,
        ``algbw_gbps``, ``busbw_gbps``, ``wrong`` (out-of-place), the same four prefixed
        ``in_place_``, and ``section`` (0-based run in the file). ``df.attrs``: ``source``
        (the path), ``avg_busbw_gbps`` (per section, from the ``Avg bus bandwidth`` line),
        ``notes``.

    Raises:
        TraceFormatError: unreadable file, no result table, a malformed or truncated result
            row, or a group size that cannot be determined.
        ParameterError: a collective nccl-tests has but traincast does not model
            (``hypercube``) or an unknown ``collective=``.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    p = Path(path)
    try:  # a FIFO or a device is refused (NotRegularFileError), not read forever
        text = read_regular(p, _MAX_LOG_BYTES).decode(errors="replace")
    except OSError as exc:
        raise TraceFormatError(f"cannot read nccl-tests log: {exc.strerror or exc}", p) from exc
    forced = _collective_from_name(collective, p) if collective is not None else None
    sections: list[_Section] = [_Section()]
    last_binary: str | None = None  # the latest ``X_perf`` seen (a pasted command line)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        cur = sections[-1]
        m = _START.search(line)
        if m:
            if cur.rows or cur.collective is not None:
                cur = _Section(binary=last_binary)
                sections.append(cur)
            cur.collective = _collective_from_name(m.group(1), p)
            continue
        m = _HEADER.search(line)
        if m:
            if cur.rows:
                cur = _Section(binary=last_binary)
                sections.append(cur)
            cur.n_thread_gpus = int(m.group(1)) * int(m.group(2))
            continue
        m = _DEVICE.search(line)
        if m:
            rank, host = int(m.group(1)), m.group(3)
            cur.ranks.add(rank)
            cur.hosts.setdefault(host, set()).add(rank)
            continue
        m = _AVG.search(line)
        if m:
            cur.avg_busbw = _number(m.group(1), "average bus bandwidth", lineno, p)
            continue
        cols = _table_columns(line)
        if cols is not None:
            cur.columns = cols
            continue
        if line.startswith("#"):
            if cur.columns is not None and "(ms)" in line:
                cur.time_scale = 1e6
            continue
        toks = line.split()
        if cur.columns is not None and _INT.match(toks[0]):
            cur.rows.append(_parse_row(toks, cur.columns, cur.time_scale, lineno, p))
            continue
        mb = _BINARY.search(line)
        if mb and mb.group(1).lower() in BINARY_COLLECTIVE:
            last_binary = mb.group(1).lower()
            if not cur.rows and cur.binary is None:
                cur.binary = last_binary
    sections = [s for s in sections if s.rows]
    if not sections:
        raise TraceFormatError("no nccl-tests result table (no 'size count type ... time "
                               "algbw busbw' header followed by result rows)", p)
    mb = _BINARY.search(p.name)
    name_guess = mb.group(1).lower() if mb and mb.group(1).lower() in BINARY_COLLECTIVE \
        else None
    notes: list[str] = []
    frames = []
    for i, s in enumerate(sections):
        coll = forced or s.collective
        if coll is None and (s.binary or name_guess):
            coll = _collective_from_name(s.binary or name_guess, p)
        if coll is None:
            raise TraceFormatError(
                "cannot tell which collective was measured (no 'Collective test starting' "
                "line, no *_perf binary name in the file or its name); pass collective=", p)
        if s.ranks:
            n = len(s.ranks)
        elif s.n_thread_gpus and s.n_thread_gpus > 1:
            n = s.n_thread_gpus
        else:
            n = _infer_group_size(coll, s.rows)
            if n is None:
                raise TraceFormatError(
                    f"section {i}: group size unknown (no 'Rank ... device' lines, nThread x "
                    f"nGpus is 1 and busbw/algbw does not determine it for {coll})", p)
            notes.append(f"section {i}: group size {n} inferred from busbw/algbw")
        if s.hosts:
            per_host = [len(r) for r in s.hosts.values()]
            rpn = float(max(per_host))
            if len(set(per_host)) > 1:
                notes.append(f"section {i}: hosts hold {sorted(per_host)} ranks; "
                             f"ranks_per_node is the largest")
        else:
            rpn = np.nan
        df = pd.DataFrame(s.rows)
        for c in COLUMNS:
            if c not in df.columns:
                df[c] = np.nan
        df["collective"] = coll
        df["group_size"] = n
        df["ranks_per_node"] = rpn
        df["section"] = i
        frames.append(df[COLUMNS])
    out = pd.concat(frames, ignore_index=True)
    try:
        out = out.astype({"size_bytes": "int64", "count": "int64", "root": "int64",
                          "group_size": "int64", "ranks_per_node": "float64",
                          "time_ns": "float64", "in_place_time_ns": "float64"})
    except (OverflowError, ValueError, TypeError) as exc:  # e.g. a size beyond int64
        raise TraceFormatError(f"a size, count or root out of range ({exc})", p) from None
    out.attrs["source"] = str(p)
    out.attrs["avg_busbw_gbps"] = [s.avg_busbw for s in sections]
    out.attrs["notes"] = notes
    return out


VTRAIN_COLUMNS = ["gpu", "num_gpus", "size_bytes", "count", "type", "oop_time_ns",
                  "oop_busbw_gbps", "ip_time_ns", "ip_busbw_gbps"]


def _snake(name: str) -> str:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.strip())
    name = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()
    return name.replace("g_bps", "gbps")


def read_vtrain_lut(path: str | Path) -> pd.DataFrame:
    """Read vTrain's all_reduce look-up table (``measurements/vtrain/vtrain_allreduce_lut.csv``).

    The first line is a ``# source: ...`` comment (kept in ``df.attrs["source"]``); the rest is
    CSV with nccl-tests-style out-of-place (``oop_``) and in-place (``ip_``) time (ns) and
    busbw (GB/s) per GPU type, GPU count (one node) and size. Column names are put in
    snake_case (``oop_busbw_GBps`` -> ``oop_busbw_gbps``). Added, for
    :meth:`~traincast.costs.comm.CommModel.fit`: ``collective`` ("all_reduce"),
    ``group_size`` (= ``num_gpus``), ``ranks_per_node`` (= ``num_gpus``: one node) and
    ``time_ns`` (= the out-of-place time, nccl-tests' primary column).

    Raises:
        TraceFormatError: unreadable file, no source line, or missing columns.
    """
    import pandas as pd  # lazy: ~0.3 s of start-up that traincast predict skips

    p = Path(path)
    try:
        with open_regular(p) as raw, io.TextIOWrapper(raw) as fh:
            first = fh.readline()
            df = pd.read_csv(fh)
    except OSError as exc:
        raise TraceFormatError(f"cannot read vTrain table: {exc.strerror or exc}", p) from exc
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"not a vTrain look-up table: {exc}", p) from exc
    if not first.startswith("#"):
        raise TraceFormatError("first line should be a '# source: ...' comment", p)
    df.columns = [_snake(c) for c in df.columns]
    missing = [c for c in VTRAIN_COLUMNS if c not in df.columns]
    if missing:
        raise TraceFormatError(f"missing columns {missing} (have {list(df.columns)})", p)
    bad = df[["num_gpus", "size_bytes", "oop_time_ns"]].isna().any(axis=1)
    if bad.any():
        raise TraceFormatError(f"{int(bad.sum())} rows with empty num_gpus/size/time", p)
    df["collective"] = "all_reduce"
    try:
        df["group_size"] = df["num_gpus"].astype("int64")
        df["ranks_per_node"] = df["num_gpus"].astype("float64")
        df["time_ns"] = df["oop_time_ns"].astype("float64")
    except (ValueError, TypeError, OverflowError) as exc:
        raise TraceFormatError(f"num_gpus or oop_time_ns is not a number ({exc})", p) from None
    df.attrs["source"] = first.lstrip("#").strip().removeprefix("source:").strip()
    df.attrs["path"] = str(p)
    return df
