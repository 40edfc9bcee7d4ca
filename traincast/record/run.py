"""Record an unmodified training command: :func:`record_command` (``traincast record``).

The command (``python train.py ...``, ``torchrun --nproc-per-node N train.py ...``) runs in a
process group of its own with the environment of the caller plus:

- ``PYTHONPATH`` prefixed with a private temporary folder holding a copy of
  :mod:`traincast.record.inject.sitecustomize`, which every Python process of the command
  imports at start-up (it chains to any other ``sitecustomize``);
- ``TRAINCAST_RECORD``: the recording settings as JSON (see that module).

Each process that trains (its optimizer steps, or ``traincast.record.step()`` calls with
``marker="call"``) skips ``skip`` steps, times ``unprofiled`` steps without any profiler, then
profiles ``wait`` + ``warmup`` + ``active`` steps with the execution-trace observer over the
active ones, and writes ``rank-R.pt.trace.json.gz`` and ``rank-R.et.json.gz`` into ``out``
(the layout of :func:`traincast.record.record_demo`).

After the command ended, :data:`~traincast.record.demo.RUN_FILE` (``.run.json``) is written
last, atomically, whenever a rank reached the profiler: ``format`` 1, ``recorder``
``"traincast record"``, ``command`` (list of str), ``world_size``, ``ranks`` (recorded),
``device`` (``cpu`` or ``cuda``), ``devices`` (per rank: its device name), ``torch``,
``batch_size`` and ``global_batch_size`` (only when given), ``step_marker``, ``skip``,
``unprofiled_steps``, ``wait``, ``warmup``, ``active``, ``profiler`` (activities,
``record_shapes`` true, ``with_stack`` false, ``execution_trace`` ``"same"``),
``unprofiled_step_ns`` (median over ranks of each rank's median unprofiled step, int ns),
``unprofiled_step_ns_per_rank``, ``unprofiled_steps_ns`` (each rank's list, by rank as str),
``active_recorded`` (complete active steps per rank), ``complete`` (every recorded rank
recorded its whole window and the command exited with 0), ``partial`` (why not, or null),
``exit_code`` of the command, ``elapsed_s``.

SIGINT and SIGTERM sent to this process are forwarded to the command's process group (the
third SIGINT kills it with SIGKILL); the command is then waited for, and the folder holds
what the ranks exported (a rank exports at exit when at least one active step completed).

torch is needed by the recorded command, not by this module.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traincast.errors import ParameterError
from traincast.record.demo import RUN_FILE, RecordError
from traincast.record.demo import _write_run_config as _write_manifest  # one writer of .run.json

__all__ = ["MARKERS", "RecordResult", "record_command"]

#: Step markers: ``optimizer`` (each step() of the first optimizer that steps) or ``call``
#: (each ``traincast.record.step()`` call).
MARKERS: tuple[str, ...] = ("optimizer", "call")
_MAX_STEPS = 10_000
_INJECT = Path(__file__).resolve().parent / "inject" / "sitecustomize.py"
_ENV = "TRAINCAST_RECORD"


@dataclass
class RecordResult:
    """What :func:`record_command` left.

    Attributes:
        out: the folder.
        exit_code: the command's exit code (negative: killed by that signal).
        interrupted: SIGINT or SIGTERM was forwarded to the command.
        ranks: per recorded rank, its status (the injected module's status document).
        traces: the ``rank-R.pt.trace.json.gz`` files written.
        manifest: the ``.run.json`` content written, None when no rank reached the profiler.
        steps_needed: step ends a rank needs for a complete recording.
        messages: one-line findings (incomplete windows, ranks that recorded nothing).
    """

    out: Path
    exit_code: int
    interrupted: bool
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)
    traces: list[Path] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    steps_needed: int = 0
    messages: list[str] = field(default_factory=list)


def _check(name: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= _MAX_STEPS:
        raise ParameterError(f"--{name} must be an integer in [{lo}, {_MAX_STEPS}], got {value!r}")
    return value


def _clear(out: Path, overwrite: bool) -> None:
    """Create ``out``; refuse (or, with ``overwrite``, delete) an earlier recording in it."""
    if out.exists() and not out.is_dir():
        raise ParameterError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        old = [p for p in out.iterdir()
               if p.name == RUN_FILE or (p.name.startswith("rank-") and ".json" in p.name)
               or (p.name.startswith(".rank-") and p.name.endswith(".part"))]
    except OSError as exc:
        raise ParameterError(f"--out {out}: {exc.strerror}") from exc
    if old and not overwrite:
        raise ParameterError(f"--out {out} holds an earlier recording ({len(old)} files); "
                             "pass --overwrite or another --out")
    for p in old:
        p.unlink(missing_ok=True)


def _default_signals() -> None:
    """In the command's process before exec: SIGINT and SIGTERM at their defaults (a shell's
    background job starts with SIGINT ignored, and Python would keep ignoring it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _forwarder(proc: subprocess.Popen[bytes], state: dict[str, int]) -> Any:
    def forward(signum: int, frame: object) -> None:
        state["count"] = state.get("count", 0) + 1
        sig = signum
        if signum == signal.SIGINT and state["count"] >= 3:
            sig = signal.SIGKILL
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    return forward


def _read_statuses(out: Path) -> dict[int, dict[str, Any]]:
    """Each rank's status document (the last one written), the files deleted."""
    ranks: dict[int, dict[str, Any]] = {}
    for p in sorted(out.glob(".rank-*.status.part")):
        try:
            doc = json.loads(p.read_text())
            ranks[int(doc["rank"])] = doc
        except (OSError, ValueError, KeyError, TypeError):
            pass
        p.unlink(missing_ok=True)
    for p in out.glob(".rank-*.part"):  # temporaries of a process killed while writing
        p.unlink(missing_ok=True)
    return ranks


def record_command(
    command: list[str], out: str | Path, *, skip: int = 2, unprofiled: int = 5, wait: int = 1,
    warmup: int = 1, active: int = 3, batch_size: int | None = None,
    marker: str = "optimizer", overwrite: bool = False, echo: Any = None,
) -> RecordResult:
    """Run ``command`` and record it into ``out`` (module docstring).

    Args:
        command: the program and its arguments, run as given (no shell).
        out: the trace folder; created if missing. One holding an earlier recording
            (``rank-*`` traces or ``.run.json``) is refused unless ``overwrite``.
        skip: step ends before the unprofiled steps (>= 1: the first step holds start-up).
        unprofiled: steps timed without any profiler (>= 0).
        wait, warmup, active: the profiler's schedule (``active`` >= 1).
        batch_size: the per-rank batch size, recorded in the manifest (None: unknown).
        marker: ``"optimizer"`` or ``"call"`` (:data:`MARKERS`).
        overwrite: delete an earlier recording in ``out`` first.
        echo: called with each progress line (None: silent).

    Returns:
        A :class:`RecordResult`.

    Raises:
        ParameterError: a bad argument, an empty command, or ``out`` is unusable.
        RecordError: the command cannot be started (not found, not executable).
    """
    if not command:
        raise ParameterError("no command to record: traincast record [OPTIONS] -- COMMAND ...")
    _check("skip", skip, 1)
    _check("unprofiled", unprofiled, 0)
    _check("wait", wait, 0)
    _check("warmup", warmup, 0)
    _check("active", active, 1)
    if batch_size is not None:
        _check("batch-size", batch_size, 1)
    if marker not in MARKERS:
        raise ParameterError(f"--step-marker must be one of {', '.join(MARKERS)}, got {marker!r}")
    out = Path(out)
    _clear(out, overwrite)
    needed = skip + unprofiled + wait + warmup + active
    cfg = {"out": str(out.resolve()), "skip": skip, "unprofiled": unprofiled, "wait": wait,
           "warmup": warmup, "active": active, "marker": marker}
    inject = Path(tempfile.mkdtemp(prefix="traincast-record-"))
    started = time.time()
    try:
        shutil.copyfile(_INJECT, inject / "sitecustomize.py")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(inject)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env[_ENV] = json.dumps(cfg)
        if echo:
            echo(f"traincast: recording {shlex.join(command)} into {out}/; steps per rank: "
                 f"skip {skip}, unprofiled {unprofiled}, then profiler wait {wait}, warm-up "
                 f"{warmup}, active {active} ({needed} in all)")
        try:
            proc = subprocess.Popen(command, env=env, start_new_session=True,
                                    preexec_fn=_default_signals)
        except OSError as exc:
            raise RecordError(f"cannot run {command[0]!r}: {exc.strerror}") from exc
        state: dict[str, int] = {}
        forward = _forwarder(proc, state)
        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                try:
                    code = proc.wait()
                    break
                except InterruptedError:  # pragma: no cover - PEP 475 retries already
                    continue
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    finally:
        shutil.rmtree(inject, ignore_errors=True)
    res = RecordResult(out=out, exit_code=code, interrupted=bool(state), steps_needed=needed)
    res.ranks = _read_statuses(out)
    res.traces = sorted(out.glob("rank-*.pt.trace.json.gz"))
    _findings(res, active)
    if any(d.get("unprofiled_ns") or d.get("kineto") for d in res.ranks.values()):
        res.manifest = _manifest(res, command, cfg, batch_size, started)
        _write_manifest(out, res.manifest)
    return res


def _findings(res: RecordResult, active: int) -> None:
    """One-line messages about ranks that did not record their whole window."""
    if not res.ranks:
        res.messages.append(
            "no process of the command made a training step (no torch.optim optimizer step"
            " or traincast.record.step() call): nothing recorded")
        return
    world = max(int(d.get("world_size") or 1) for d in res.ranks.values())
    if len(res.ranks) < world:
        res.messages.append(f"{len(res.ranks)} of {world} ranks made a step here (the others "
                            "ran on other hosts, or failed before their first step)")
    for r, d in sorted(res.ranks.items()):
        got = int(d.get("active_recorded", 0))
        if d.get("complete"):
            continue
        why = {"interrupt": "interrupted", "sigterm": "terminated (SIGTERM)"}.get(
            d.get("ended") or "", "ended")
        steps = int(d.get("steps", 0))
        if got:
            res.messages.append(f"rank {r}: {why} after {steps} steps; {got} of {active} "
                                "active steps recorded")
        else:
            res.messages.append(
                f"rank {r}: {why} after {steps} of the {res.steps_needed} steps recording "
                "needs; no active step recorded (run more steps, or lower --skip, "
                "--unprofiled, --wait, --warmup, --active)")


def _manifest(res: RecordResult, command: list[str], cfg: dict[str, Any],
              batch_size: int | None, started: float) -> dict[str, Any]:
    """The content of ``.run.json`` (module docstring)."""
    ranks = res.ranks
    per_rank = {str(r): [int(x) for x in d.get("unprofiled_ns") or []]
                for r, d in sorted(ranks.items())}
    medians = [int(statistics.median(v)) for v in per_rank.values() if v]
    worlds = [int(d.get("world_size") or 1) for d in ranks.values()]
    world = max(worlds + [len(ranks)])
    first = ranks[min(ranks)]
    acts = sorted({a for d in ranks.values() for a in d.get("activities") or ["cpu"]})
    complete = all(d.get("complete") for d in ranks.values())
    if complete and res.exit_code == 0:
        partial = None
    elif res.interrupted:
        partial = "interrupted"
    elif not complete:
        partial = "the command ended before every rank recorded its window"
    else:
        partial = f"the command exited with code {res.exit_code}"
    doc: dict[str, Any] = {
        "format": 1,
        "recorder": "traincast record",
        "command": list(command),
        "world_size": world,
        "ranks": sorted(ranks),
        "device": "cuda" if any(d.get("device") == "cuda" for d in ranks.values()) else "cpu",
        "devices": {str(r): d.get("device_name", "cpu") for r, d in sorted(ranks.items())},
        "torch": first.get("torch", ""),
        "step_marker": cfg["marker"],
        "skip": cfg["skip"],
        "unprofiled_steps": cfg["unprofiled"],
        "wait": cfg["wait"],
        "warmup": cfg["warmup"],
        "active": cfg["active"],
        "profiler": {"activities": ["cpu"] + [a for a in acts if a != "cpu"],
                     "record_shapes": True, "with_stack": False, "execution_trace": "same"},
        "unprofiled_steps_ns": per_rank,
        "unprofiled_step_ns_per_rank": medians,
        "active_recorded": {str(r): int(d.get("active_recorded", 0))
                            for r, d in sorted(ranks.items())},
        "complete": partial is None,
        "partial": partial,
        "exit_code": res.exit_code,
        "elapsed_s": round(time.time() - started, 3),
    }
    if medians:
        doc["unprofiled_step_ns"] = int(statistics.median(medians))
    if batch_size is not None:
        doc["batch_size"] = batch_size
        doc["batch_unit"] = "samples"
        doc["global_batch_size"] = batch_size * world
    return doc



def step() -> None:
    """End a training step for ``traincast record --step-marker call`` (a no-op when the
    process is not being recorded)."""
    hook = sys.modules.get("_traincast_record")
    if hook is not None:
        hook.step()
