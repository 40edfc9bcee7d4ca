"""Fuzz every trace reader with mutated real inputs and count what happens.

The fuzzers are those of ``tests/fuzz/test_fuzz_readers.py`` (``tests/fuzz/fuzz_engine.py``):
truncation, byte flips, deleted/duplicated chunks, gzip-level corruption, JSON-aware mutations
(wrong types, huge ints, NaN, deep nesting, removed keys), SQL-aware mutations of the Nsight
Systems exports and line-aware mutations of nccl-tests logs and vTrain CSVs, applied to the
real files of ``../shared/data`` (small ones, or the first events of big ones). Here the cases
are drawn from a seeded ``random.Random`` instead of hypothesis, so many more run.

Per reader it reports cases run, ``TraincastError`` count (the expected answer to bad input),
success count and failures: any other exception, or no answer within ``--timeout`` seconds.
Each failure's input is saved to ``--out`` (default ``benchmarks/results/fuzz-failures``) with
a ``.txt`` holding the case and the traceback. Exit code 1 if any case failed.

    python benchmarks/fuzz_readers.py                       # 2000 cases over all readers
    python benchmarks/fuzz_readers.py --cases 10000 --readers kineto,et --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fuzz"))
sys.path.insert(0, str(REPO))

import fuzz_engine as F  # noqa: E402

from benchmarks._common import git_state  # noqa: E402

#: share of the cases per reader (the JSON readers have the largest input space)
WEIGHTS = {"kineto": 0.3, "et": 0.2, "nsys": 0.2, "nccl_tests": 0.1, "vtrain_lut": 0.1,
           "vtrain": 0.1}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000, help="total cases (split by weight)")
    ap.add_argument("--readers", default=",".join(F.READERS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/fuzz-failures")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    readers = [r.strip() for r in args.readers.split(",") if r.strip()]
    unknown = set(readers) - set(F.READERS)
    if unknown:
        ap.error(f"unknown readers {sorted(unknown)} (known: {', '.join(F.READERS)})")
    total_w = sum(WEIGHTS[r] for r in readers)
    results = {}
    any_fail = False
    print(f"traincast {git_state()}; {args.cases} cases, seed {args.seed}, "
          f"timeout {args.timeout} s per case")
    print(f"{'reader':<12}{'seeds':>6}{'cases':>7}{'own err':>9}{'ok':>6}{'fail':>6}"
          f"{'timeout':>8}{'s/case':>8}")
    with tempfile.TemporaryDirectory(prefix="traincast-fuzz-") as tmp:
        for reader in readers:
            seeds = F.seeds(reader)
            if not seeds:
                print(f"{reader:<12} no seed files (shared data missing?)")
                continue
            n = max(1, round(args.cases * WEIGHTS[reader] / total_w))
            rng = random.Random(f"{args.seed}-{reader}")
            counts = {"ok": 0, "own": 0, "fail": 0, "timeout": 0}
            errors: dict[str, int] = {}
            failures = []
            t0 = time.perf_counter()
            for i in range(n):
                case = F.random_case(rng, reader)
                out = F.run_case(reader, case, Path(tmp) / reader, timeout=args.timeout)
                counts[out.status] += 1
                if out.status == "own":
                    cls = out.error.split(":", 1)[0]
                    errors[cls] = errors.get(cls, 0) + 1
                elif out.status in ("fail", "timeout"):
                    any_fail = True
                    args.out.mkdir(parents=True, exist_ok=True)
                    stem = f"{reader}-{args.seed}-{i}"
                    (args.out / f"{stem}-{out.name}").write_bytes(out.data)
                    (args.out / f"{stem}.txt").write_text(out.report())
                    failures.append({"case": i, "file": f"{stem}-{out.name}",
                                     "error": out.error.splitlines()[0][:300]})
            dt = time.perf_counter() - t0
            print(f"{reader:<12}{len(seeds):>6}{n:>7}{counts['own']:>9}{counts['ok']:>6}"
                  f"{counts['fail']:>6}{counts['timeout']:>8}{dt / n:>8.3f}")
            for f in failures[:10]:
                print(f"    case {f['case']}: {f['error']}  -> {args.out / f['file']}")
            results[reader] = {"seeds": len(seeds), "cases": n, **counts,
                               "own_errors_by_class": errors, "seconds": round(dt, 2),
                               "failures": failures}
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"git": git_state(), "seed": args.seed,
                                             "cases": args.cases, "readers": results},
                                            indent=1) + "\n")
    return 1 if any_fail else 0


if __name__ == "__main__":
    sys.exit(main())
