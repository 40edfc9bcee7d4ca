"""Build an N-rank Kineto trace set for scale tests by cloning the ranks of a real one.

Source (default ``../shared/data/traces/dlrm_8xv100/kineto``): the DLRM 8x V100 set, the only
real multi-rank set in ``../shared/data`` holding *every* rank of its run (the HTA sets hold one
or two ranks of larger jobs, so their collectives cannot be matched). Its 8 ranks each record
one step (``ProfilerStep#10``), 5 all_to_all + 3 all_reduce on the default (world) group, no
``pg_config`` and no process-group args, ~3,400 JSON events (~2,500 traincast events) per rank.

Clone ``r`` of ``N`` copies source rank ``s = r % S`` (``S`` source ranks) and lives on
"node" ``b = r // S``: every node is a copy of the source machine, so clone ``r`` keeps the GPU
(``pid``/``device`` ``s``) its source rank used. What is changed, per clone, and nothing else:

* ``distributedInfo.rank = r`` and ``distributedInfo.world_size = N``.
* ``distributedInfo.pg_config`` (when present): a group holding every source rank becomes a
  group of all ``N`` ranks (``ranks = [0..N-1]``, ``pg_size = N``); a sub-group (e.g. ranks
  ``[0, 1]`` of 8) becomes that sub-group on node ``b`` (``[b*S + 0, b*S + 1]``; when ``N``
  is not a multiple of ``S``, the last node's sub-groups lose their members beyond ``N``).
  ``Process Group Ranks`` / ``Group size`` in event args are rewritten by the same rule. So
  every collective on the world group has ``N`` members and every member issues the same calls
  in the same order (the source rank's), which is what ``traincast.graph.collectives`` needs to
  match them (per process group, per step, k-th call).
* ``host_name = "scale-node-<b>"`` (a top-level key Kineto writes on recent PyTorch; the source
  has none): ranks of one node share a clock, ranks of different nodes do not.
* The host process id (the integer ``pid`` not used by GPU events, 59812 etc. in the source)
  becomes ``1_000_000 + r``, in every event and metadata row that carries it. GPU pids (device
  ids) and all tids are kept.
* Clock: every timestamp (``ts`` of ``X``, ``i``, flow ``s``/``f`` and ``M`` rows) is shifted by
  a per-node offset drawn uniformly from ``[-clock_skew_us, +clock_skew_us]`` (node 0: 0). Within
  a node the source's own timing is kept, so a collective still ends on every member at the
  same instant up to the source's own few-µs spread, after the offset is removed (which is
  what ``traincast.graph.collectives.clock_offsets`` and HTA do).
* Jitter: the duration of every GPU compute op (``cat`` ``kernel`` not named ``nccl*``,
  ``gpu_memcpy``, ``gpu_memset``) is multiplied by a factor ``exp(sigma * z)``, ``z ~ N(0, 1)``
  (``--sigma``, default 0.02 = 2 %), then capped so that it ends before the next op on the same
  stream starts (never below its own duration: an op already overlapping the next keeps its
  end). Start times are not touched, so stream order, launch order and every collective's
  start and end are unchanged. Host ops, runtime calls and NCCL kernels keep their durations
  (their timing is what makes the collectives consistent).
* ``traceName`` gets ``.clone-<r>`` appended.

The random draws come from ``numpy.random.default_rng([seed, r])`` (clock offsets from
``[seed, node, 1]``), so a clone does not depend on ``N`` or on the other clones.

Files are written as ``rank-<r>.pt.trace.json.gz`` (gzip level ``--level``, default 6), one
event at a time through ``orjson``: memory is the parsed source (all ``S`` ranks, a few MB)
plus one output buffer, whatever ``N``.

Run: ``python benchmarks/make_scale_traces.py --ranks 1024 --out /tmp/scale_1024
[--source DIR] [--seed 0] [--sigma 0.02] [--clock-skew-us 5000]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "traces" / "dlrm_8xv100" / "kineto"
_RANK_RX = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
GPU_COMPUTE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
DEVICE_CATS = GPU_COMPUTE_CATS + ("gpu_user_annotation",)
HOST_PID_BASE = 1_000_000
#: events written per ``write`` call
CHUNK = 2048


@dataclass
class SourceRank:
    """One parsed source rank: header (everything but ``traceEvents``), events, and what the
    clones need precomputed from it."""

    rank: int
    path: Path
    header: dict[str, Any]
    events: list[dict[str, Any]]
    host_pids: set[Any]
    #: per event index: the room (µs) a compute op has before the next op on its stream
    room: dict[int, float]


def _source_files(src: Path) -> list[Path]:
    files = sorted(f for f in src.iterdir() if f.is_file() and not f.name.startswith(".")
                   and f.name.endswith((".json", ".json.gz")) and ".et." not in f.name)
    if not files:
        raise SystemExit(f"no Kineto trace (*.json[.gz]) in {src}")
    return files


def _read_json(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return orjson.loads(raw)


def _is_compute(e: dict[str, Any]) -> bool:
    cat = e.get("cat")
    if cat not in GPU_COMPUTE_CATS or e.get("ph") != "X":
        return False
    return not (cat == "kernel" and str(e.get("name", "")).lower().startswith("nccl"))


def load_source(src: Path) -> list[SourceRank]:
    """Parse every rank of the source set (ordered by rank) and precompute per-op room."""
    out: list[SourceRank] = []
    for f in _source_files(src):
        doc = _read_json(f)
        events = doc.pop("traceEvents")
        info = doc.get("distributedInfo") or {}
        rank = info.get("rank")
        if rank is None:
            m = _RANK_RX.search(f.name)
            rank = int(m.group(1)) if m else len(out)
        device_pids = {e.get("pid") for e in events if e.get("cat") in DEVICE_CATS}
        host_pids = {e.get("pid") for e in events
                     if isinstance(e.get("pid"), int) and e.get("pid") not in device_pids}
        # room before the next op on the same GPU stream (pid, tid), for every compute op
        by_stream: dict[tuple[Any, Any], list[int]] = {}
        for i, e in enumerate(events):
            if e.get("ph") == "X" and e.get("cat") in GPU_COMPUTE_CATS:
                by_stream.setdefault((e.get("pid"), e.get("tid")), []).append(i)
        room: dict[int, float] = {}
        for idx in by_stream.values():
            idx.sort(key=lambda i: (events[i]["ts"], -events[i].get("dur", 0)))
            for k, i in enumerate(idx):
                if not _is_compute(events[i]):
                    continue
                e = events[i]
                nxt = events[idx[k + 1]]["ts"] if k + 1 < len(idx) else math.inf
                room[i] = max(float(nxt) - float(e["ts"]), float(e.get("dur", 0)))
        out.append(SourceRank(int(rank), f, doc, events, host_pids, room))
    out.sort(key=lambda s: s.rank)
    ranks = [s.rank for s in out]
    sizes = {(s.header.get("distributedInfo") or {}).get("world_size") for s in out} - {None}
    if sizes and sizes != {len(out)}:
        raise SystemExit(f"source world size {sorted(sizes)} but {len(out)} rank files: the "
                         "set is not complete, its collectives could not be matched")
    if ranks != list(range(len(out))):
        raise SystemExit(f"source ranks {ranks} are not 0..{len(out) - 1}: the set is not "
                         "complete, its collectives could not be matched")
    return out


def map_ranks(ranks: list[int], node: int, n_source: int, world: int) -> list[int]:
    """Process-group membership of a source group, for a clone on ``node``."""
    rs = sorted({int(x) for x in ranks})
    if rs == list(range(n_source)):
        return list(range(world))
    return [node * n_source + x for x in rs if node * n_source + x < world]


def _ranks_value(v: Any) -> list[int] | None:
    """``Process Group Ranks`` as a list (it is a list or its text ``"[0, 1]"``)."""
    if isinstance(v, list):
        return [int(x) for x in v]
    if isinstance(v, str):
        try:
            parsed = orjson.loads(v)
        except orjson.JSONDecodeError:
            return None
        return [int(x) for x in parsed] if isinstance(parsed, list) else None
    return None


def clock_offset_us(seed: int, node: int, skew_us: float) -> int:
    if node == 0 or skew_us <= 0:
        return 0
    return int(np.random.default_rng([seed, node, 1]).uniform(-skew_us, skew_us))


def _num(x: float) -> float | int:
    """Whole numbers as ints (Kineto writes µs with up to 3 decimals)."""
    r = round(x, 3)
    return int(r) if r == int(r) else r


def clone_rank(src: SourceRank, r: int, world: int, n_source: int, *, seed: int,
               sigma: float, skew_us: float):
    """Yield the serialized pieces of clone ``r`` (header first, then event chunks)."""
    node = r // n_source
    rng = np.random.default_rng([seed, r])
    shift = clock_offset_us(seed, node, skew_us)
    new_pid = HOST_PID_BASE + r

    header = dict(src.header)
    info = dict(header.get("distributedInfo") or {})
    info["rank"] = r
    info["world_size"] = world
    if info.get("pg_config"):
        pgs = []
        for pg in info["pg_config"]:
            pg = dict(pg)
            rl = _ranks_value(pg.get("ranks"))
            if rl is not None:
                new = map_ranks(rl, node, n_source, world)
                pg["ranks"] = new
                if "pg_size" in pg:
                    pg["pg_size"] = len(new)
            pgs.append(pg)
        info["pg_config"] = pgs
    header["distributedInfo"] = info
    header["host_name"] = f"scale-node-{node}"
    if "traceName" in header:
        header["traceName"] = f"{header['traceName']}.clone-{r}"

    compute_idx = sorted(src.room)
    factors = np.exp(sigma * rng.standard_normal(len(compute_idx))) if sigma > 0 else None
    factor_of = dict(zip(compute_idx, factors.tolist(), strict=True)) if sigma > 0 else {}

    # Kineto's layout: header keys one per line with ": " separators, one event per line.
    # HTA finds a file's rank with the regex '"rank":\s+(\d+)' line by line, so the space
    # after the colon matters, and so do the newlines (else its scan reads the whole file).
    parts = ["{"]
    for k, v in header.items():
        parts.append(f"\n  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    parts.append('\n  "traceEvents": [\n')
    yield "".join(parts).encode()

    buf: list[bytes] = []
    first = True
    for i, e in enumerate(src.events):
        e2 = e
        pid = e.get("pid")
        if pid in src.host_pids or "ts" in e or i in factor_of:
            e2 = dict(e)
            if pid in src.host_pids:
                e2["pid"] = new_pid
                args = e2.get("args")
                if e2.get("ph") == "M" and e2.get("name") == "process_sort_index" and args:
                    e2["args"] = {**args, "sort_index": new_pid}
            if "ts" in e2 and shift:
                e2["ts"] = _num(float(e2["ts"]) + shift)
            f = factor_of.get(i)
            if f is not None and "dur" in e2:
                d = float(e["dur"])
                e2["dur"] = _num(max(0.0, min(d * f, src.room[i])))
            args = e2.get("args")
            if args and ("Process Group Ranks" in args or "Group size" in args):
                a = dict(args)
                rl = _ranks_value(a.get("Process Group Ranks"))
                if rl is not None:
                    new = map_ranks(rl, node, n_source, world)
                    a["Process Group Ranks"] = (new if isinstance(args["Process Group Ranks"],
                                                                   list) else str(new))
                    if "Group size" in a:
                        a["Group size"] = len(new)
                elif a.get("Group size") == n_source:
                    a["Group size"] = world
                e2["args"] = a
        buf.append((b"  " if first else b",\n  ") + orjson.dumps(e2))
        first = False
        if len(buf) >= CHUNK:
            yield b"".join(buf)
            buf.clear()
    buf.append(b"\n  ]\n}\n")
    yield b"".join(buf)


def generate(ranks: int, out: Path, source: Path = DEFAULT_SOURCE, *, seed: int = 0,
             sigma: float = 0.02, clock_skew_us: float = 5000.0, level: int = 6,
             progress: bool = False) -> dict[str, Any]:
    """Write ``ranks`` clone files into ``out``; returns a summary (files, bytes, seconds)."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    t0 = time.perf_counter()
    srcs = load_source(source)
    n_source = len(srcs)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank-*.pt.trace.json.gz"):  # a previous, larger set must not linger
        if int(_RANK_RX.search(old.name).group(1)) >= ranks:
            old.unlink()
    total = 0
    n_events = 0
    for r in range(ranks):
        src = srcs[r % n_source]
        path = out / f"rank-{r}.pt.trace.json.gz"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb",
                                                   compresslevel=level, mtime=0) as gz:
            for piece in clone_rank(src, r, ranks, n_source, seed=seed, sigma=sigma,
                                    skew_us=clock_skew_us):
                gz.write(piece)
        os.replace(tmp, path)
        total += path.stat().st_size
        n_events += len(src.events)
        if progress and (r + 1) % 64 == 0:
            print(f"  {r + 1}/{ranks} ranks, {total / 2**20:.1f} MiB", file=sys.stderr)
    return {"ranks": ranks, "source": str(source), "source_ranks": n_source,
            "json_events": n_events, "bytes_on_disk": total,
            "seconds": time.perf_counter() - t0, "seed": seed, "sigma": sigma,
            "clock_skew_us": clock_skew_us}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, required=True, help="number of ranks to write")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                    help=f"folder of a complete real trace set (default {DEFAULT_SOURCE})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sigma", type=float, default=0.02,
                    help="lognormal sigma of the GPU compute-op duration factor (default 0.02)")
    ap.add_argument("--clock-skew-us", type=float, default=5000.0,
                    help="per-node clock offsets are uniform in +-this (µs; default 5000)")
    ap.add_argument("--level", type=int, default=6, help="gzip level (default 6)")
    args = ap.parse_args(argv)
    if args.ranks < 1:
        ap.error("--ranks must be >= 1")
    if not args.source.is_dir():
        ap.error(f"--source {args.source} is not a folder")
    s = generate(args.ranks, args.out, args.source, seed=args.seed, sigma=args.sigma,
                 clock_skew_us=args.clock_skew_us, level=args.level, progress=True)
    print(f"wrote {s['ranks']} ranks ({s['json_events']:,} JSON events, "
          f"{s['bytes_on_disk'] / 2**20:.1f} MiB) to {args.out} in {s['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
