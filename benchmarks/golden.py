"""Golden outputs: every command's output on every shared trace set, to keep a refactor honest.

A structural change (modules moved, concepts merged) must leave every output identical. This
script runs the ``traincast`` CLI in-process (``traincast.cli.main``) over the whole shared
corpus and the inputs a session records for itself, and writes each command's output to a
file:

* per trace unit (``benchmarks/corpus.py``'s ``find_units``): ``predict --format json``;
  ``analyze --format json`` (the verdict, its simulated opportunities and every analysis
  table); ``predict`` under what-ifs (device 3x faster, host 10x faster, network 4x slower,
  ``gpu=H100``, ``overlap=ideal``); ``diff --vs-predicted``;
* the trace diff pair (``hta/trace_diff``), ``analyze --format html`` on a few sets (the
  generation timestamp and plotly's random element ids normalised), ``convert --to chrome``;
* plans: ``plan transformer`` (one layout and a search), ``plan dlrm`` from a config and from
  the DLRM trace;
* with ``--inputs DIR`` (made by ``make-inputs``: a recorded demo run, quick kernel models):
  ``predict --from-et`` on the demo's execution trace, alone and with ``--world-size 2``.

Run: ``python benchmarks/golden.py dump OUT [--inputs DIR] [--only SUBSTR]`` writes the
outputs and ``OUT/digests.json`` (sha256 per output);
``python benchmarks/golden.py compare A B [--subset]`` lists the outputs that differ between two dumps;
``python benchmarks/golden.py make-inputs DIR`` records the inputs (minutes; CPU torch).
Outputs are byte-compared: a dump made before a change and one made after must agree.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO  # noqa: E402  (shared benchmark helpers)
from corpus import DEFAULT_ROOT, find_units  # noqa: E402

EXAMPLES = REPO / "examples"

WHAT_IFS: dict[str, list[str]] = {
    "device3": ["--what-if", "speedup=kind:device=3"],
    "host10": ["--what-if", "speedup=kind:cpu_op=10", "--what-if", "speedup=kind:runtime=10"],
    "net_quarter": ["--what-if", "inter_node_gbps=50"],
    "gpu_h100": ["--what-if", "gpu=H100"],
    "overlap": ["--what-if", "overlap=ideal"],
}

#: sets whose HTML report is kept (each report is megabytes)
HTML_SETS = ("dlrm_8xv100", "a100_2rank_nccl", "h100_Qwen")

_NORMALISE = [
    # HTML report: generation time and plotly's random div ids
    (re.compile(rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?( ?UTC|Z|[+-]\d\d:?\d\d)?"),
     b"<time>"),
    (re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), b"<uuid>"),
]


def _normalise(data: bytes, tmp: str, root: str | None = None) -> bytes:
    data = data.replace(tmp.encode(), b"<tmp>")
    if root:  # suggested commands name the input: the same outputs wherever the traces lie
        data = data.replace(root.encode(), b"<traces>")
    for pat, rep in _NORMALISE:
        data = pat.sub(rep, data)
    return data


def _run(argv: list[str], tmp: str) -> tuple[int, bytes]:
    """Run the CLI in-process; exit code and stdout+stderr."""
    from traincast.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except Exception as e:  # a crash is an output too (it must stay the same)
            rc = -1
            err.write(f"crash: {type(e).__name__}: {e}\n")
    return rc, (out.getvalue() + "\n--stderr--\n" + err.getvalue()).encode()


class Dump:
    """Writes outputs under ``out``; ``keys``, when given, limits them to those keys."""

    def __init__(self, out: Path, keys: set[str] | None = None,
                 root: Path | None = None) -> None:
        self.out = out
        self.root = str(root) if root is not None else None
        self.keys = keys
        self.digests: dict[str, str] = {}
        out.mkdir(parents=True, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="golden-")

    def cmd(self, key: str, argv: list[str], out_file: bool = False, suffix: str = ".json",
            out_flag: str = "--out", written: Path | None = None) -> None:
        """Run ``argv`` (with ``OUT_FLAG FILE`` appended when ``out_file``) and keep its
        output, the file it wrote and every file under ``written``."""
        if self.keys is not None and key not in self.keys:
            return
        target = Path(self.tmp) / f"out{suffix}"
        if target.exists():
            target.unlink()
        full = [*argv, out_flag, str(target)] if out_file else argv
        rc, text = _run(full, self.tmp)
        data = b"rc=%d\n" % rc + text
        if out_file and target.exists():
            data += b"\n--file--\n" + target.read_bytes()
        if written is not None and written.exists():
            for f in sorted(p for p in written.rglob("*") if p.is_file()):
                data += f"\n--file {f.relative_to(written)}--\n".encode() + f.read_bytes()
                f.unlink()
        data = _normalise(data, self.tmp, self.root)
        path = self.out / (key.replace("/", "__") + ".out")
        path.write_bytes(data)
        self.digests[key] = hashlib.sha256(data).hexdigest()
        print(f"{key}: rc={rc} {len(data):,} B", flush=True)

    def hatchet(self, key: str, trace: Path) -> None:
        """``traincast.export.to_hatchet`` of ``trace`` (the GraphFrame's tree and dataframe)."""
        if self.keys is not None and key not in self.keys:
            return
        import traincast
        import traincast.export  # explicit: the code before a move may lack the lazy attribute

        gf = traincast.export.to_hatchet(traincast.load(trace))
        df = gf.dataframe.reset_index()
        df["node"] = df["node"].map(str)
        data = (gf.tree(metric_column="time (inc)").encode() + b"\n--dataframe--\n"
                + df.to_csv(index=False).encode())
        (self.out / (key.replace("/", "__") + ".out")).write_bytes(data)
        self.digests[key] = hashlib.sha256(data).hexdigest()
        print(f"{key}: {len(data):,} B", flush=True)

    def finish(self) -> None:
        (self.out / "digests.json").write_text(json.dumps(self.digests, indent=1, sort_keys=True))


def dump(out: Path, inputs: Path | None, only: str | None, root: Path,
         keys: set[str] | None = None) -> dict[str, str]:
    """Run the commands (units whose name holds ``only``; outputs in ``keys`` if given) and
    write their outputs under ``out``; the sha256 of each output by key."""
    d = Dump(out, keys, root)
    units, _ = find_units(root)
    for u in units:
        path = u["path"]
        name = str(Path(path).relative_to(root)) if Path(path).is_absolute() else str(path)
        if only and only not in name:
            continue
        d.cmd(f"{name}/predict", ["predict", str(path), "--format", "json"])
        d.cmd(f"{name}/analyze", ["analyze", str(path), "--format", "json"], out_file=True)
        for wname, args in WHAT_IFS.items():
            d.cmd(f"{name}/whatif_{wname}", ["predict", str(path), "--format", "json", *args])
        d.cmd(f"{name}/diff_vs_predicted",
              ["diff", str(path), "--vs-predicted", "--format", "json"], out_file=True)
        if any(s in name for s in HTML_SETS):
            d.cmd(f"{name}/report_html", ["analyze", str(path), "--format", "html"],
                  out_file=True, suffix=".html")
            d.cmd(f"{name}/timeline_out", ["predict", str(path), "--format", "json"],
                  out_file=True, out_flag="--timeline-out")
    if only is None or "diff" in only:
        td = root / "hta" / "trace_diff"
        d.cmd("trace_diff/by_name", ["diff", str(td / "control.json.gz"),
                                     str(td / "test.json.gz"), "--format", "json"], out_file=True)
        d.cmd("trace_diff/by_family", ["diff", str(td / "control.json.gz"),
                                       str(td / "test.json.gz"), "--by", "op_family",
                                       "--format", "json"], out_file=True)
    if only is None or "plan" in only:
        d.cmd("plan/transformer_one",
              ["plan", "transformer", "--layers", "96", "--hidden", "12288", "--heads", "96",
               "--seq", "2048", "--gpus", "1024", "--node", "DGX-A100", "--tp", "8", "--pp", "8",
               "--micro-batch", "1", "--global-batch", "1536", "--recompute", "selective",
               "--sequence-parallel", "--format", "json"])
        d.cmd("plan/transformer_search",
              ["plan", "transformer", "--config", str(EXAMPLES / "gpt.yaml"), "--search",
               "--global-batch", "512", "--format", "json"])
        d.cmd("plan/dlrm_search",
              ["plan", "dlrm", "--config", str(EXAMPLES / "dlrm.yaml"), "--gpus", "8",
               "--node", "DGX-A100", "--batch", "65536", "--search", "--format", "json"])
        d.cmd("plan/dlrm_sharders",
              ["plan", "dlrm", "--config", str(EXAMPLES / "dlrm.yaml"), "--gpus", "8",
               "--node", "DGX-A100", "--batch", "65536", "--sharders", "all", "--format", "json"])
        d.cmd("plan/dlrm_from_trace",
              ["plan", "dlrm", "--from-trace", str(root / "dlrm_8xv100"), "--fit-host",
               "--format", "json"])
    if inputs is not None and (only is None or "from_et" in only):
        et = sorted((inputs / "demo").rglob("*et*.json*"))[0]
        models = inputs / "models"
        common = ["--models", str(models), "--overheads", str(inputs / "bench" / "overheads.json"),
                  "--format", "json"]
        d.cmd("from_et/one", ["predict", "--from-et", str(et), *common])
        d.cmd("from_et/world2", ["predict", "--from-et", str(et), *common, "--world-size", "2",
                                 "--comm-model", str(inputs / "bench" / "comm.json")])
        if inputs.joinpath("demo").is_dir():
            d.cmd("demo/predict", ["predict", str(inputs / "demo"), "--format", "json"])
            d.cmd("demo/analyze", ["analyze", str(inputs / "demo"), "--format", "json"],
                  out_file=True)
            chakra = Path(d.tmp) / "chakra"
            d.cmd("demo/convert_chakra", ["convert", str(inputs / "demo"), "--to", "chakra",
                                          "--out", str(chakra / "run")], written=chakra)
            d.cmd("demo/kernels", ["analyze", str(inputs / "demo"), "--what", "kernels",
                                   "--format", "json"])
            d.hatchet("demo/hatchet", inputs / "demo")
    d.finish()
    return d.digests


def make_inputs(inputs: Path) -> None:
    """Record the session inputs: a demo run (traces + execution traces) and quick models."""
    from traincast.cli import main

    inputs.mkdir(parents=True, exist_ok=True)
    os.chdir(inputs)
    assert main(["demo"]) == 0
    Path("traincast-demo").rename("demo")
    assert main(["bench", "--out", "bench", "--quick", "--collective-ranks", "2"]) == 0
    assert main(["fit", "bench", "--out", "models"]) == 0


def compare(a: Path, b: Path, subset: bool = False) -> int:
    """Outputs that differ between dumps ``a`` and ``b`` (``subset``: only the keys of ``b``,
    for a partial dump made with ``--only``)."""
    da = json.loads((a / "digests.json").read_text())
    db = json.loads((b / "digests.json").read_text())
    bad = 0
    keys = set(db) if subset else set(da) | set(db)
    for k in sorted(keys):
        if da.get(k) != db.get(k):
            bad += 1
            print(f"DIFFERS: {k}" if k in da and k in db else f"ONLY IN ONE: {k}")
    print(f"{len(keys)} outputs, {bad} differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dump")
    p.add_argument("out", type=Path)
    p.add_argument("--inputs", type=Path)
    p.add_argument("--only")
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p = sub.add_parser("compare")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--subset", action="store_true", help="compare only the outputs of B")
    p = sub.add_parser("make-inputs")
    p.add_argument("dir", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        dump(args.out.resolve(), args.inputs.resolve() if args.inputs else None, args.only,
             args.root.resolve())
        return 0
    if args.cmd == "compare":
        return compare(args.a, args.b, args.subset)
    make_inputs(args.dir.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
