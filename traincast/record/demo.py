"""Record a real, short data-parallel training run on CPU: the demo workload.

:func:`record_demo` spawns ``world_size`` processes that form a ``gloo`` process group on
127.0.0.1, train a small model wrapped in ``DistributedDataParallel`` on synthetic data, and
profile ``warmup + active`` steps with the PyTorch profiler (CPU activity, shapes recorded)
plus an :class:`~torch.profiler.ExecutionTraceObserver`. For every rank ``r`` it writes, into
``out_dir``:

- ``rank-{r}.pt.trace.json.gz`` -- the Kineto Chrome-trace JSON (gzipped). Timestamps (``ts``)
  and durations (``dur``) are in microseconds, as Kineto writes them; the top-level
  ``distributedInfo`` object carries ``rank`` and ``world_size``; each of the ``active`` steps
  is wrapped in a ``ProfilerStep#N`` annotation (N counts from ``warmup``).
- ``rank-{r}.et.json.gz`` -- the PyTorch execution trace (ET) JSON (gzipped) of the same
  ``active`` steps; its nodes' ``rf_id`` match ``"Record function id"`` in the Kineto cpu_op args.

Before the profiler starts, each rank runs one step and then times ``timed_steps`` steps
without any profiler: the ground truth for the unprofiled step time that traincast predicts
(``unprofiled_ns``; the profiler's own cost per event slows the profiled steps down,
:mod:`traincast.record.overhead`). With ``separate_et=True`` the execution-trace observer,
which costs far more per event than Kineto, stays out of the Kineto window: it records one
extra step of its own after it, into ``et-step/rank-{r}.et.json.gz`` (a subfolder, since
that ET describes another step than the Kineto trace and cannot be linked to it).

When ``batch_size`` is given, it also writes ``.run.json`` (see :data:`RUN_FILE`): the run's
configuration (model and its dimensions, per-rank ``batch_size``, ``seq_len`` for the
transformer, world size, steps, seed, torch version, the ``profiler`` settings and the
unprofiled step time ``unprofiled_step_ns``: the median over ranks of each rank's median
timed step, with ``unprofiled_step_ns_per_rank``), written last, only after every rank
succeeded, so its presence marks a complete recording. The name is hidden on purpose: :func:`traincast.load` reads every non-hidden
``*.json`` file in a folder as a trace and would reject a ``run.json``.

Every file is written to a hidden temporary file in ``out_dir`` (``.rank-*.part``) and moved into
place with :func:`os.replace`, so an interrupted run never leaves a half-written file under a
final name. Each worker's stdout/stderr (progress lines of torch's C++ layers) go to a hidden
log that is shown if the worker fails and deleted at the end.

torch is an optional dependency (``pip install 'traincast[record]'``); this module imports it
only inside the functions that need it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from traincast.errors import ParameterError, TraincastError

__all__ = ["MAX_BATCH_SIZE", "MODELS", "RUN_FILE", "RecordError", "record_demo"]

#: Models :func:`record_demo` knows, by name.
MODELS: tuple[str, ...] = ("transformer", "mlp")

MAX_WORLD_SIZE = 8
MAX_STEPS = 1000
#: Largest per-rank batch size :func:`record_demo` accepts.
MAX_BATCH_SIZE = 4096
#: Name of the configuration file :func:`record_demo` writes when ``batch_size`` is given.
RUN_FILE = ".run.json"

# Seconds a collective may block before gloo gives up (a dead peer must not hang the run).
_COLLECTIVE_TIMEOUT_S = 120.0
# Seconds record_demo waits for all workers before it kills them and fails.
_RUN_TIMEOUT_S = 600.0

# Model sizes (chosen so that one step takes ~20-200 ms on one CPU thread).
_TRANSFORMER = {
    "vocab": 1000,
    "d_model": 256,
    "nhead": 4,
    "ffn": 1024,
    "layers": 2,
    "batch": 8,
    "seq": 64,
}
_MLP = {"d_in": 512, "hidden": 1024, "d_out": 16, "batch": 64}
# DDP bucket size in MiB: small, so that a step issues several all_reduce calls that overlap
# the backward pass, as in real runs.
_BUCKET_CAP_MB = 1.0


class RecordError(TraincastError, RuntimeError):
    """A recording cannot be made: torch is missing, or a worker process failed."""


def record_demo(
    out_dir: str | Path,
    *,
    world_size: int = 2,
    warmup: int = 3,
    active: int = 3,
    model: str = "transformer",
    seed: int = 0,
    batch_size: int | None = None,
    timed_steps: int = 5,
    separate_et: bool = False,
) -> Path:
    """Record a short DDP training run on CPU and write one Kineto trace and one ET per rank.

    Args:
        out_dir: folder to write into; created if missing. Existing files with the same names
            are replaced.
        world_size: number of processes (ranks), 1-8. Each uses one CPU thread.
        warmup: profiler warm-up steps (run, not recorded), >= 0.
        active: recorded training steps, >= 1.
        model: ``"transformer"`` (token embedding, 2-layer encoder with d_model 256, LM head;
            2.1M parameters, batch 8 x 64 tokens per rank) or ``"mlp"`` (3 linear layers,
            1.6M parameters, batch 64 x 512 per rank). DDP buckets of 1 MiB give several
            ``all_reduce`` calls per step (7 for the transformer). One step takes ~30-200 ms.
        seed: seed of the model initialisation and of the synthetic data (rank ``r`` draws its
            batches with ``seed + 1 + r``).
        batch_size: per-rank batch size, 1-4096: sequences of 64 tokens per rank for the
            transformer, samples per rank for the mlp. ``None`` keeps the model's default
            (8 for the transformer, 64 for the mlp) and writes exactly the files it always
            did; an explicit value (even the default one) also writes ``.run.json``
            (:data:`RUN_FILE`) with the configuration, after all ranks finished. Step time
            grows roughly linearly with it (transformer, one thread per rank: ~0.25 s per
            step at 8 on a busy 2-core machine).
        timed_steps: steps timed without the profiler before it starts, 0-1000 (their
            median is ``unprofiled_step_ns`` in ``.run.json``).
        separate_et: record the execution trace in one step of its own after the Kineto
            window (``et-step/``) instead of inside it.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`, holding ``rank-{r}.pt.trace.json.gz`` and
        ``rank-{r}.et.json.gz`` for ``r`` in ``0 .. world_size-1`` (and ``.run.json`` when
        ``batch_size`` is given). A stale ``.run.json`` from an earlier recording into the
        same folder is deleted before the workers start.

    Raises:
        ParameterError: an argument is out of range or ``model`` is unknown.
        RecordError: torch is not installed, or a worker failed (the message names the rank)
            or did not finish within 600 s.
    """
    _check_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    _check_int("warmup", warmup, 0, MAX_STEPS)
    _check_int("active", active, 1, MAX_STEPS)
    _check_int("seed", seed, 0, 2**63 - 1)
    if model not in MODELS:
        raise ParameterError(f"unknown model {model!r}; expected one of {', '.join(MODELS)}")
    if batch_size is not None:
        _check_int("batch_size", batch_size, 1, MAX_BATCH_SIZE)
    _check_int("timed_steps", timed_steps, 0, MAX_STEPS)
    batch = _default_batch(model) if batch_size is None else batch_size
    try:
        import torch.multiprocessing as mp
    except ImportError as exc:
        raise RecordError("torch is not installed: pip install 'traincast[record]'") from exc

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordError(f"cannot create output folder: {exc.strerror}", out) from exc
    try:  # a config left by an earlier recording would describe other traces
        (out / RUN_FILE).unlink(missing_ok=True)
    except OSError as exc:
        raise RecordError(f"cannot remove stale {RUN_FILE}: {exc.strerror}", out) from exc

    port = _free_port()
    args = (world_size, port, str(out.resolve()), warmup, active, model, seed, batch,
            timed_steps, separate_et)
    context = mp.start_processes(
        _worker, args=args, nprocs=world_size, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + _RUN_TIMEOUT_S
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise RecordError(
                    f"recording did not finish within {_RUN_TIMEOUT_S:.0f} s "
                    f"(world_size={world_size}, model={model})"
                )
    except mp.ProcessRaisedException as exc:
        raise RecordError(
            f"rank {exc.error_index} failed: {_last_line(str(exc))}\n{exc}"
            + _log_tail(out, exc.error_index)
        ) from exc
    except mp.ProcessExitedException as exc:
        raise RecordError(
            f"rank {exc.error_index} exited with code {exc.exit_code}"
            + (f" (signal {exc.signal_name})" if exc.signal_name else "")
            + _log_tail(out, exc.error_index)
        ) from exc
    finally:
        for proc in context.processes:
            if proc.is_alive():
                proc.kill()
                proc.join()
        for rank in range(world_size):
            _log_path(out, rank).unlink(missing_ok=True)
        for pid in context.pids():  # temporaries of a worker that died while writing
            for part in out.glob(f".rank-*.{pid}.part"):
                part.unlink(missing_ok=True)
        timings = _read_timings(out, world_size)
    if batch_size is not None:
        config = _run_config(world_size, warmup, active, model, seed, batch)
        config["profiler"] = {"activities": ["cpu"], "record_shapes": True,
                              "with_stack": False,
                              "execution_trace": "separate" if separate_et else "same"}
        config["unprofiled_steps"] = timed_steps
        if timings and all(timings):
            import statistics

            per_rank = [int(statistics.median(t)) for t in timings]
            config["unprofiled_step_ns"] = int(statistics.median(per_rank))
            config["unprofiled_step_ns_per_rank"] = per_rank
        _write_run_config(out, config)
    return out


def _timing_path(out: Path, rank: int) -> Path:
    """Where a worker leaves its unprofiled step times (hidden, read and deleted)."""
    return out / f".rank-{rank}.timing.part"


def _read_timings(out: Path, world_size: int) -> list[list[int]]:
    """Each rank's unprofiled step times (ns), [] for a rank that left none; the files are
    deleted."""
    timings = []
    for rank in range(world_size):
        p = _timing_path(out, rank)
        try:
            timings.append([int(x) for x in json.loads(p.read_text())])
        except (OSError, ValueError, TypeError):
            timings.append([])
        p.unlink(missing_ok=True)
    return timings


def _default_batch(model: str) -> int:
    """The per-rank batch size of ``model`` when none is given."""
    return int((_TRANSFORMER if model == "transformer" else _MLP)["batch"])


def _run_config(
    world_size: int, warmup: int, active: int, model: str, seed: int, batch: int
) -> dict[str, Any]:
    """The content of ``.run.json``: everything needed to redo or scale the recording."""
    import torch

    dims = {
        k: v for k, v in (_TRANSFORMER if model == "transformer" else _MLP).items() if k != "batch"
    }
    config: dict[str, Any] = {
        "format": 1,
        "model": model,
        "dims": dims,
        "batch_size": batch,
        "batch_unit": "sequences" if model == "transformer" else "samples",
        "world_size": world_size,
        "global_batch_size": batch * world_size,
        "warmup": warmup,
        "active": active,
        "seed": seed,
        "threads_per_rank": 1,
        "backend": "gloo",
        "bucket_cap_mb": _BUCKET_CAP_MB,
        "torch": str(torch.__version__),
    }
    if model == "transformer":  # tokens per sequence: batch x seq_len rows in flattened ops
        config["seq_len"] = dims["seq"]
    return config


def _write_run_config(out: Path, config: dict[str, Any]) -> None:
    """Write ``config`` to ``out/.run.json`` atomically (temporary file, then rename)."""
    final = out / RUN_FILE
    part = _part_path(final)
    try:
        part.write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
        os.replace(part, final)
    except OSError as exc:
        raise RecordError(f"cannot write {RUN_FILE}: {exc.strerror}", out) from exc
    finally:
        part.unlink(missing_ok=True)


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ParameterError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown error"


def _log_path(out: Path, rank: int) -> Path:
    """Where a worker's stdout/stderr go (torch's C++ layers print progress lines there)."""
    return out / f".rank-{rank}.log.part"


def _log_tail(out: Path, rank: int, lines: int = 20) -> str:
    """The last ``lines`` lines of a worker's log, as a message suffix ("" if empty)."""
    try:
        text = _log_path(out, rank).read_text(errors="replace").strip()
    except OSError:
        return ""
    if not text:
        return ""
    return f"\n-- last lines of rank {rank}'s output:\n" + "\n".join(text.splitlines()[-lines:])


def _part_path(final: Path) -> Path:
    """Hidden temporary name next to ``final`` (never matches ``rank-*`` globs)."""
    return final.with_name(f".{final.name}.{os.getpid()}.part")


def _gzip_into_place(plain: Path, final: Path) -> None:
    """Compress ``plain`` into ``final`` atomically, then delete ``plain``."""
    part = _part_path(final)
    try:
        with open(plain, "rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(part, final)
    finally:
        part.unlink(missing_ok=True)
        plain.unlink(missing_ok=True)


def _build_model(model: str, seed: int) -> tuple[Any, Any]:
    """The model (on CPU) and a loss function ``loss(model_output, target)``."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if model == "transformer":
        cfg = _TRANSFORMER

        class Encoder(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Embedding(cfg["vocab"], cfg["d_model"])
                layer = nn.TransformerEncoderLayer(
                    cfg["d_model"], cfg["nhead"], cfg["ffn"], dropout=0.0, batch_first=True
                )
                self.encoder = nn.TransformerEncoder(
                    layer, cfg["layers"], enable_nested_tensor=False
                )
                self.head = nn.Linear(cfg["d_model"], cfg["vocab"])

            def forward(self, tokens: torch.Tensor) -> torch.Tensor:
                return self.head(self.encoder(self.embed(tokens)))

        def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())

        return Encoder(), lm_loss
    cfg = _MLP
    net = nn.Sequential(
        nn.Linear(cfg["d_in"], cfg["hidden"]),
        nn.ReLU(),
        nn.Linear(cfg["hidden"], cfg["hidden"]),
        nn.ReLU(),
        nn.Linear(cfg["hidden"], cfg["d_out"]),
    )
    return net, nn.functional.cross_entropy


def _make_batches(
    model: str, steps: int, seed: int, batch: int | None = None
) -> list[tuple[Any, Any]]:
    """``steps`` synthetic (input, target) batches of ``batch`` rows (default: the model's)
    drawn with a fixed seed."""
    import torch

    if batch is None:
        batch = _default_batch(model)
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        if model == "transformer":
            cfg = _TRANSFORMER
            shape = (batch, cfg["seq"])
            batches.append(
                (
                    torch.randint(cfg["vocab"], shape, generator=gen),
                    torch.randint(cfg["vocab"], shape, generator=gen),
                )
            )
        else:
            cfg = _MLP
            batches.append(
                (
                    torch.randn(batch, cfg["d_in"], generator=gen),
                    torch.randint(cfg["d_out"], (batch,), generator=gen),
                )
            )
    return batches


def _worker(
    rank: int,
    world_size: int,
    port: int,
    out_dir: str,
    warmup: int,
    active: int,
    model: str,
    seed: int,
    batch: int,
    timed_steps: int = 0,
    separate_et: bool = False,
) -> None:
    """One rank: join the gloo group, time ``timed_steps`` unprofiled steps, train
    ``warmup + active`` steps under the profiler (and, with ``separate_et``, one step under
    the execution-trace observer alone)."""
    # Keep the C++ layers' progress lines (profiler, ET observer) off the caller's terminal;
    # record_demo shows the log's tail if this rank fails and deletes it afterwards.
    log_fd = os.open(_log_path(Path(out_dir), rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        # gloo binds to the interface the host name resolves to unless told otherwise; the
        # demo runs on one host, so loopback is always right (and works without DNS).
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    out = Path(out_dir)
    kineto_final = out / f"rank-{rank}.pt.trace.json.gz"
    et_final = out / f"rank-{rank}.et.json.gz"
    kineto_plain = _part_path(out / f"rank-{rank}.pt.trace.json")
    et_plain = _part_path(out / f"rank-{rank}.et.json")

    dist.init_process_group(
        backend="gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=_COLLECTIVE_TIMEOUT_S),
    )
    try:
        net, loss_fn = _build_model(model, seed)
        ddp = DistributedDataParallel(net, bucket_cap_mb=_BUCKET_CAP_MB)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        batches = _make_batches(model, warmup + active, seed + 1 + rank, batch)

        def train_step(inputs: Any, target: Any) -> None:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(inputs), target)
            loss.backward()
            optimizer.step()

        # unprofiled steps (ground truth for traincast's unprofiled_ns): one to warm up,
        # then ``timed_steps`` timed ones, on the same batches the profiled steps use
        times = []
        for i in range(timed_steps + 1 if timed_steps else 0):
            inputs, target = batches[i % len(batches)]
            t0 = time.perf_counter_ns()
            train_step(inputs, target)
            if i:
                times.append(time.perf_counter_ns() - t0)
        _timing_path(out, rank).write_text(json.dumps(times))

        def on_trace_ready(prof: profile) -> None:
            # Runs inside prof.step() while the process group is alive, so Kineto adds
            # distributedInfo (rank, world_size, backend) to the trace.
            prof.export_chrome_trace(str(kineto_plain))
            _gzip_into_place(kineto_plain, kineto_final)

        et = None if separate_et else ExecutionTraceObserver().register_callback(str(et_plain))
        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
            on_trace_ready=on_trace_ready,
            execution_trace_observer=et,
        ) as prof:
            for inputs, target in batches:
                train_step(inputs, target)
                prof.step()
        if et is None:  # the ET in a step of its own, outside the Kineto window
            et_final = out / "et-step" / f"rank-{rank}.et.json.gz"
            et_final.parent.mkdir(exist_ok=True)
            et = ExecutionTraceObserver().register_callback(str(et_plain))
            et.start()
            train_step(*batches[-1])
            et.stop()
        # Leaving the profiler unregisters the observer, which finalises the ET JSON.
        et.unregister_callback()
        _gzip_into_place(et_plain, et_final)
        dist.barrier()
    finally:
        kineto_plain.unlink(missing_ok=True)
        et_plain.unlink(missing_ok=True)
        dist.destroy_process_group()
