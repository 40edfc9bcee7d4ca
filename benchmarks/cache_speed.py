"""Wall time of ``traincast.load``: cold serial, cold parallel, cold + cache write, warm (cache hit).

Sets (``../shared/data/traces``, see its SOURCES.md):

* ``dlrm_8xv100``  the 8 DLRM ranks (8 x ~60 kB gzipped, ~0.9 MB of JSON each).
* ``v100_1rank``   ``hta/v100_2rank_allreduce`` (the one rank of it that is published: 3 MB
  gzipped, 54 MB of JSON, 123k traincast events).
* ``v100_2rank``   that file plus a copy claiming ``distributedInfo.rank = 0`` (made in a temp
  folder), so parallel parsing has two large files to share out.

Columns (median of ``--repeat`` runs, seconds):

* ``serial``      ``load(cache=False, executor="serial")``.
* ``process``     ``load(cache=False, executor="process", workers=W)`` with a fresh pool each
  run (:func:`traincast.util.executor.shutdown` first), i.e. including worker start-up.
* ``process_warm_pool``  the same with the pool kept from the previous run.
* ``cold_write``  ``load(cache=EMPTY_DIR)`` (default executor): parse + hash + write Parquet.
* ``warm``        ``load(cache=DIR)`` again: hash + read Parquet + assemble.

Run: ``python benchmarks/cache_speed.py [--repeat N] [--workers W]``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import traincast
from traincast.util.executor import shutdown

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"


def _timed(fn: Callable[[], object], repeat: int, before: Callable[[], None] | None = None
           ) -> float:
    out = []
    for _ in range(repeat):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _v100_pair(tmp: Path) -> Path:
    src = TRACES / "hta" / "v100_2rank_allreduce" / "rank-1.json.gz"
    d = tmp / "v100_2rank"
    d.mkdir()
    shutil.copy(src, d / "rank-1.json.gz")
    raw = gzip.decompress(src.read_bytes())
    old = b'"distributedInfo": {"backend": "nccl", "rank": 1,'
    assert raw.count(old) == 1
    (d / "rank-0.json.gz").write_bytes(
        gzip.compress(raw.replace(old, old.replace(b"1,", b"0,")), compresslevel=6))
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="traincast-cache-speed-"))
    try:
        sets = {"dlrm_8xv100": TRACES / "dlrm_8xv100" / "kineto",
                "v100_1rank": TRACES / "hta" / "v100_2rank_allreduce",
                "v100_2rank": _v100_pair(tmp)}
        print(f"cpus={os.cpu_count()} workers={args.workers} repeat={args.repeat} "
              f"(median seconds)")
        head = ("set", "files", "MB_gz", "serial", "process", "process_warm_pool",
                "cold_write", "warm", "cache_MB")
        print("{:<12} {:>5} {:>6} {:>7} {:>8} {:>18} {:>10} {:>6} {:>8}".format(*head))
        for name, src in sets.items():
            files = sorted(src.iterdir())
            mb = sum(f.stat().st_size for f in files) / 1e6
            serial = _timed(lambda src=src: traincast.load(src, cache=False, executor="serial"),
                            args.repeat)
            proc = _timed(lambda src=src: traincast.load(src, cache=False, executor="process",
                                                 workers=args.workers), args.repeat, shutdown)
            proc_warm = _timed(lambda src=src: traincast.load(src, cache=False, executor="process",
                                                      workers=args.workers), args.repeat)
            shutdown()
            root = tmp / f"cache-{name}"
            cold = _timed(lambda src=src, root=root: traincast.load(src, cache=root), args.repeat,
                          lambda root=root: shutil.rmtree(root, ignore_errors=True))
            warm = _timed(lambda src=src, root=root: traincast.load(src, cache=root), args.repeat)
            size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 1e6
            print(f"{name:<12} {len(files):>5} {mb:>6.1f} {serial:>7.3f} {proc:>8.3f} "
                  f"{proc_warm:>18.3f} {cold:>10.3f} {warm:>6.3f} {size:>8.2f}")
    finally:
        shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
