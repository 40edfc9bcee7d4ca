"""Random DLRM and Transformer configurations, recorded as real CPU training runs.

The validation set of the from-ET predictions, after Lin et al., "Towards Universal Performance Modeling
for ML Training on Multi-GPU Platforms" (arXiv 2404.12674), who validate on DLRMs with random
configurations and report the geometric mean of the absolute error. Here the models are
scaled down so that one training step takes roughly 1-30 ms on one CPU thread.

- :func:`random_dlrm_configs` / :func:`random_transformer_configs` -- deterministic lists of
  configuration dicts (same ``n`` and ``seed``, same list; the first ``k`` configs of a longer
  list are the configs of a shorter one).
- :func:`record_config` -- train one configuration and write, into a folder:

  - ``run.json`` -- the configuration, the unprofiled step timings (ns), torch version,
    threads, date (:func:`record_config` describes every field). Written last: its presence
    marks a complete recording.
  - ``et.json`` -- a PyTorch execution trace (``ExecutionTraceObserver``) of exactly one
    training step: ``zero_grad``, forward, loss, backward and ``optimizer.step()``, all
    inside ``torch.profiler.record_function(STEP_MARKER)``, i.e. an ET node named
    ``ProfilerStep#0`` whose subtree is the step (the marker :mod:`traincast.trace.iterations`
    recognises).
  - ``kineto.json`` -- a Kineto (``torch.profiler.profile``, CPU activity,
    ``record_shapes=True``) Chrome trace of one other step. The profiler runs one warm-up
    step first (``schedule(wait=0, warmup=1, active=1)``), so the trace holds one step,
    ``ProfilerStep#1``, written by ``profile.step()``.

  The two traces describe different steps (the ET observer costs far more per op than Kineto,
  so they are never active together) and are not linked: read the Kineto trace as a file,
  ``traincast.load(folder / "kineto.json")``, not the folder (which also holds ``run.json``
  and ``et.json``).
- :func:`record_set` -- record ``n`` configurations of one kind into ``<out_root>/<kind>-<i>/``,
  resumably.

**DLRM** (:func:`build_dlrm`): one ``nn.EmbeddingBag(rows, dim, mode="sum")`` per table (all
tables share ``dim``, as the dot interaction needs); bottom MLP ``13 -> bottom... -> dim``
and top MLP ``dim + T(T+1)/2 -> top... -> 1``, ``Linear`` + ``ReLU`` except after the last
layer; the **dot-product interaction** of the DLRM reference (facebookresearch/dlrm,
``interact_features`` with ``arch_interaction_op="dot"``): the bottom-MLP output and the ``T``
pooled embeddings are stacked into ``(B, T+1, dim)``, ``bmm`` with its transpose, the strictly
lower triangle (``T(T+1)/2`` values) concatenated with the bottom-MLP output.
``BCEWithLogitsLoss`` on random 0/1 labels; ``torch.optim.SGD`` (lr 0.01, no momentum).
With ``sparse=True`` in the configuration the tables produce sparse gradients (as the DLRM
reference does, so that SGD touches only the looked-up rows); otherwise dense ones, whose
zeroing and update cost grows with ``rows x dim``. Inputs: 13 dense features ``randn``;
per table ``batch x pooling`` int64 indices uniform in ``[0, rows)`` and offsets
``0, pooling, 2*pooling, ...`` (every bag has exactly ``pooling`` lookups).

**Transformer** (:func:`build_transformer`): ``nn.TransformerEncoder`` of ``layers``
``nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0, batch_first=True)`` on
``randn(batch, seq, hidden)`` inputs, plus a linear head to ``classes`` logits per token,
``CrossEntropyLoss`` on random labels; ``torch.optim.Adam`` (lr 1e-3). Dropout is 0 so the
step has no random ops.

Each model trains on 4 pre-built batches, cycled, so input generation is not timed. Every
configuration carries its own ``seed`` (parameters and data).

torch is an optional dependency (``pip install 'traincast[record]'``); it is imported only
inside the functions that need it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from traincast.errors import ParameterError
from traincast.record.quiet import quiet_fds

__all__ = ["KINDS", "RUN_FILE", "SCHEMA", "STEP_MARKER", "build_dlrm", "build_transformer",
           "random_configs", "random_dlrm_configs", "random_transformer_configs",
           "record_config", "record_set"]

#: format tag of run.json
SCHEMA = "traincast.random_run/1"
#: name of the annotation that wraps the one step of ``et.json``
STEP_MARKER = "ProfilerStep#0"
#: the file whose presence marks a complete recording
RUN_FILE = "run.json"
#: configuration kinds :func:`record_set` knows (a new kind goes last: the index seeds draws)
KINDS = ("dlrm", "transformer", "dlrm_wide")

# Bounds of the random draws (documented in the functions that use them).
DLRM_TABLES = (2, 8)
DLRM_ROWS = (1_000, 200_000)
DLRM_DIMS = (16, 32, 64)
DLRM_POOLING = (1, 40)
DLRM_DENSE = 13
DLRM_MLP_LAYERS = (1, 3)
DLRM_MLP_WIDTH = (64, 512)
DLRM_BATCHES = (32, 64, 128, 256)

# wide DLRMs: large tables (rows x dim), past the last-level cache up to 1 GiB of tables
WIDE_TABLES = (1, 4)
WIDE_ROWS = (100_000, 4_000_000)
WIDE_DIMS = (64, 128)
WIDE_TABLE_BYTES = 2**30        # all tables together, float32
WIDE_STEP_MS_RANGE = (2.0, 400.0)

TF_LAYERS = (1, 3)
TF_HIDDEN = (64, 128, 192, 256)
TF_HEADS = (2, 4, 8)
TF_SEQ = (32, 128)
TF_BATCHES = (4, 8, 16, 32)
TF_CLASSES = 64

#: estimated one-thread step time (ms) a drawn configuration must fall in, else it is redrawn
STEP_MS_RANGE = (1.0, 30.0)

# Rough one-thread costs of this kind of CPU, for the estimate that keeps the draws in
# STEP_MS_RANGE (not a model of anything; measured here within a factor of ~2).
_OP_NS = 12_000.0         # host cost of one eager aten op
_GEMM_FLOPS = 30e9        # FLOP/s of a float32 GEMM on one thread
_GATHER_BPS = 3e9         # bytes/s of embedding-bag gathers (random rows)
_STREAM_BPS = 12e9        # bytes/s of streaming elementwise work
_SPARSE_NS = 100.0        # extra ns per lookup of a sparse gradient (build, coalesce, add)
_N_BATCHES = 4            # pre-built batches each model cycles through


def _log_uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _mlp_widths(rng: np.random.Generator) -> list[int]:
    k = int(rng.integers(DLRM_MLP_LAYERS[0], DLRM_MLP_LAYERS[1] + 1))
    return [_log_uniform_int(rng, *DLRM_MLP_WIDTH) for _ in range(k)]


def estimate_step_ms(cfg: dict[str, Any]) -> float:
    """Rough one-thread step time of a configuration, ms (used only to keep the random draws
    in :data:`STEP_MS_RANGE`; it is no prediction)."""
    if cfg["kind"] == "dlrm":
        b, t, d = cfg["batch"], len(cfg["tables"]), cfg["dim"]
        widths = [DLRM_DENSE, *cfg["bottom_mlp"], d]
        n_int = t * (t + 1) // 2
        widths_top = [d + n_int, *cfg["top_mlp"], 1]
        pairs = list(zip(widths[:-1], widths[1:], strict=True)) + list(
            zip(widths_top[:-1], widths_top[1:], strict=True))
        flops = sum(6.0 * b * i * o for i, o in pairs) + 6.0 * b * (t + 1) ** 2 * d
        ns = flops / _GEMM_FLOPS * 1e9
        for tab in cfg["tables"]:
            look = b * tab["pooling"] * d * 4.0
            ns += 3 * look / _GATHER_BPS * 1e9
            if cfg["sparse"]:
                ns += b * tab["pooling"] * _SPARSE_NS
            else:  # dense gradient: zero, accumulate, SGD read+write
                ns += 4 * tab["rows"] * d * 4.0 / _STREAM_BPS * 1e9
        ops = 40 + 12 * len(pairs) + (14 if cfg["sparse"] else 8) * t
        return (ns + ops * _OP_NS) / 1e6
    if cfg["kind"] == "transformer":
        b, s, h, f = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["ffn"]
        tok = b * s
        per_layer = 2.0 * tok * (4 * h * h + 2 * h * f) + 4.0 * tok * s * h
        flops = 3.0 * (cfg["layers"] * per_layer + 2.0 * tok * h * cfg["classes"])
        params = cfg["layers"] * (4 * h * h + 2 * h * f) + h * cfg["classes"]
        elem = cfg["layers"] * tok * (12 * h + 3 * cfg["heads"] * s)
        ns = flops / _GEMM_FLOPS * 1e9 + (7 * params + 3 * elem) * 4.0 / _STREAM_BPS * 1e9
        ops = 60 + 110 * cfg["layers"]
        return (ns + ops * _OP_NS) / 1e6
    raise ParameterError(f"unknown configuration kind {cfg.get('kind')!r}")


def _draw_dlrm(rng: np.random.Generator) -> dict[str, Any]:
    n_tab = int(rng.integers(DLRM_TABLES[0], DLRM_TABLES[1] + 1))
    dim = int(rng.choice(DLRM_DIMS))
    tables = [{"rows": _log_uniform_int(rng, *DLRM_ROWS),
               "pooling": int(rng.integers(DLRM_POOLING[0], DLRM_POOLING[1] + 1))}
              for _ in range(n_tab)]
    return {"kind": "dlrm", "tables": tables, "dim": dim, "dense": DLRM_DENSE,
            "bottom_mlp": _mlp_widths(rng), "top_mlp": _mlp_widths(rng),
            "batch": int(rng.choice(DLRM_BATCHES)), "sparse": bool(rng.random() < 0.5)}


def _draw_dlrm_wide(rng: np.random.Generator) -> dict[str, Any]:
    for _ in range(1000):
        n_tab = int(rng.integers(WIDE_TABLES[0], WIDE_TABLES[1] + 1))
        dim = int(rng.choice(WIDE_DIMS))
        tables = [{"rows": _log_uniform_int(rng, *WIDE_ROWS),
                   "pooling": int(rng.integers(DLRM_POOLING[0], DLRM_POOLING[1] + 1))}
                  for _ in range(n_tab)]
        if sum(t["rows"] for t in tables) * dim * 4 <= WIDE_TABLE_BYTES:
            break
    return {"kind": "dlrm", "wide": True, "tables": tables, "dim": dim, "dense": DLRM_DENSE,
            "bottom_mlp": _mlp_widths(rng), "top_mlp": _mlp_widths(rng),
            "batch": int(rng.choice(DLRM_BATCHES)), "sparse": bool(rng.random() < 0.5)}


def _draw_transformer(rng: np.random.Generator) -> dict[str, Any]:
    hidden = int(rng.choice(TF_HIDDEN))
    return {"kind": "transformer",
            "layers": int(rng.integers(TF_LAYERS[0], TF_LAYERS[1] + 1)),
            "hidden": hidden, "heads": int(rng.choice(TF_HEADS)), "ffn": 4 * hidden,
            "seq": _log_uniform_int(rng, *TF_SEQ), "batch": int(rng.choice(TF_BATCHES)),
            "classes": TF_CLASSES}


def _draw(n: int, seed: int, kind: str,
          draw: Callable[[np.random.Generator], dict[str, Any]],
          ms_range: tuple[float, float] = STEP_MS_RANGE) -> list[dict[str, Any]]:
    if n < 0:
        raise ParameterError(f"n must be >= 0, got {n}")
    out = []
    for i in range(n):
        # one generator per config: config i does not depend on n
        rng = np.random.default_rng([int(seed), i, KINDS.index(kind)])
        for _ in range(1000):
            cfg = draw(rng)
            est = estimate_step_ms(cfg)
            if ms_range[0] <= est <= ms_range[1]:
                break
        cfg["estimated_step_ms"] = round(est, 3)
        cfg["seed"] = int(seed) * 1000 + i
        cfg["name"] = f"{kind}-{i}"
        out.append(cfg)
    return out


def random_dlrm_configs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` random mini-DLRM configurations, deterministic in ``(n, seed)``.

    Each dict has ``kind`` (``"dlrm"``), ``name`` (``dlrm-<i>``), ``seed`` (of the model
    and data), ``tables`` (2-8 dicts of ``rows``, log-uniform in 1e3-2e5, and ``pooling``,
    the lookups per bag, uniform in 1-40), ``dim`` (embedding width, one of 16/32/64),
    ``dense`` (13 dense features), ``bottom_mlp`` and ``top_mlp`` (1-3 hidden widths each,
    log-uniform in 64-512; the bottom MLP then projects to ``dim``, the top MLP to 1),
    ``batch`` (32/64/128/256), ``sparse`` (sparse embedding gradients, half of the draws) and
    ``estimated_step_ms`` (:func:`estimate_step_ms`). A draw whose estimate falls outside
    :data:`STEP_MS_RANGE` (1-30 ms on one thread) is drawn again.
    """
    return _draw(n, seed, "dlrm", _draw_dlrm)


def random_dlrm_wide_configs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` random DLRMs with wide tables, deterministic in ``(n, seed)``: as
    :func:`random_dlrm_configs` (``kind`` ``"dlrm"``, ``wide`` true, ``name``
    ``dlrm_wide-<i>``) but 1-4 tables of 1e5-4e6 rows (log-uniform) of width 64 or 128, all
    tables together at most :data:`WIDE_TABLE_BYTES` (1 GiB), so the tables and their dense
    gradients stream past the last-level cache; redrawn while the estimate falls outside
    :data:`WIDE_STEP_MS_RANGE` (2-400 ms).
    """
    return _draw(n, seed, "dlrm_wide", _draw_dlrm_wide, WIDE_STEP_MS_RANGE)


def random_transformer_configs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` random small Transformer-encoder configurations, deterministic in ``(n, seed)``.

    Each dict has ``kind`` (``"transformer"``), ``name``, ``seed``, ``layers`` (1-3),
    ``hidden`` (64/128/192/256), ``heads`` (2/4/8), ``ffn`` (4 x hidden), ``seq`` (tokens,
    log-uniform in 32-128), ``batch`` (4/8/16/32), ``classes`` (64) and
    ``estimated_step_ms``; redrawn like :func:`random_dlrm_configs`.
    """
    return _draw(n, seed, "transformer", _draw_transformer)


def random_configs(kind: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """:func:`random_dlrm_configs` or :func:`random_transformer_configs` by ``kind``."""
    if kind == "dlrm":
        return random_dlrm_configs(n, seed)
    if kind == "transformer":
        return random_transformer_configs(n, seed)
    if kind == "dlrm_wide":
        return random_dlrm_wide_configs(n, seed)
    raise ParameterError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")


def describe(cfg: dict[str, Any]) -> str:
    """One-line summary of a configuration."""
    if cfg["kind"] == "dlrm":
        rows = [t["rows"] for t in cfg["tables"]]
        pool = [t["pooling"] for t in cfg["tables"]]
        mb = sum(rows) * cfg["dim"] * 4 / 2**20
        wide = f" {mb:.0f}MB" if cfg.get("wide") else ""
        return (f"T{len(rows)} d{cfg['dim']} rows<={max(rows) / 1e3:.0f}k "
                f"L~{statistics.mean(pool):.0f} bot{'-'.join(map(str, cfg['bottom_mlp']))} "
                f"top{'-'.join(map(str, cfg['top_mlp']))} b{cfg['batch']}"
                f"{' sparse' if cfg['sparse'] else ''}{wide}")
    return (f"L{cfg['layers']} h{cfg['hidden']} nh{cfg['heads']} s{cfg['seq']} "
            f"b{cfg['batch']}")


def build_dlrm(cfg: dict[str, Any]) -> tuple[Any, Any, Any, list[Any]]:
    """(module, loss function, SGD optimizer, batches) of a DLRM configuration; each batch is
    ``((dense, [indices per table], [offsets per table]), labels)``."""
    import torch  # optional (traincast[record]) and slow to import: only when building
    from torch import nn

    torch.manual_seed(cfg["seed"])
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    dim, n_tab = cfg["dim"], len(cfg["tables"])

    def mlp(widths: list[int], last_relu: bool) -> nn.Sequential:
        layers: list[nn.Module] = []
        for k, (i, o) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            layers.append(nn.Linear(i, o))
            if last_relu or k < len(widths) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    class DLRM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tables = nn.ModuleList(
                nn.EmbeddingBag(t["rows"], dim, mode="sum", sparse=cfg["sparse"])
                for t in cfg["tables"])
            self.bottom = mlp([cfg["dense"], *cfg["bottom_mlp"], dim], last_relu=True)
            self.top = mlp([dim + n_tab * (n_tab + 1) // 2, *cfg["top_mlp"], 1],
                           last_relu=False)
            li, lj = torch.tril_indices(n_tab + 1, n_tab + 1, offset=-1)
            self.register_buffer("li", li, persistent=False)
            self.register_buffer("lj", lj, persistent=False)

        def forward(self, dense: Any, indices: list[Any], offsets: list[Any]) -> Any:
            x = self.bottom(dense)
            embs = [t(i, o) for t, i, o in zip(self.tables, indices, offsets, strict=True)]
            z = torch.stack([x, *embs], dim=1)
            inter = torch.bmm(z, z.transpose(1, 2))
            flat = inter[:, self.li, self.lj]
            return self.top(torch.cat([x, flat], dim=1)).squeeze(1)

    net = DLRM()
    batches = []
    b = cfg["batch"]
    for _ in range(_N_BATCHES):
        dense = torch.randn(b, cfg["dense"], generator=gen)
        idx = [torch.randint(t["rows"], (b * t["pooling"],), generator=gen)
               for t in cfg["tables"]]
        offs = [torch.arange(0, b * t["pooling"], t["pooling"]) for t in cfg["tables"]]
        y = torch.randint(2, (b,), generator=gen).float()
        batches.append(((dense, idx, offs), y))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    return net, nn.BCEWithLogitsLoss(), opt, batches


def build_transformer(cfg: dict[str, Any]) -> tuple[Any, Any, Any, list[Any]]:
    """(module, loss function, Adam optimizer, batches) of a Transformer configuration; each
    batch is ``((inputs,), labels)``."""
    import torch  # optional (traincast[record]) and slow to import: only when building
    from torch import nn

    torch.manual_seed(cfg["seed"])
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    h = cfg["hidden"]

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(h, cfg["heads"], cfg["ffn"], dropout=0.0,
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, cfg["layers"],
                                                 enable_nested_tensor=False)
            self.head = nn.Linear(h, cfg["classes"])

        def forward(self, x: Any) -> Any:
            return self.head(self.encoder(x)).reshape(-1, cfg["classes"])

    net = Encoder()
    ce = nn.CrossEntropyLoss()
    batches = [((torch.randn(cfg["batch"], cfg["seq"], h, generator=gen),),
                torch.randint(cfg["classes"], (cfg["batch"] * cfg["seq"],), generator=gen))
               for _ in range(_N_BATCHES)]
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    return net, ce, opt, batches


def _train_step_fn(cfg: dict[str, Any]) -> Callable[[int], None]:
    build = {"dlrm": build_dlrm, "transformer": build_transformer}.get(cfg.get("kind", ""))
    if build is None:
        raise ParameterError(f"unknown configuration kind {cfg.get('kind')!r}")
    net, loss_fn, opt, batches = build(cfg)
    return sgd_step_fn(net, loss_fn, opt, batches)


def sgd_step_fn(net: Any, loss_fn: Any, opt: Any, batches: list[Any]) -> Callable[[int], None]:
    """``step(i)``: one training step on ``batches[i % len(batches)]`` (``(inputs, target)``):
    gradients set to None, forward, loss, backward, optimizer step."""

    def step(i: int) -> None:
        inputs, target = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(*inputs), target).backward()
        opt.step()

    return step


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(text)
    os.replace(tmp, path)


def record_config(cfg: dict[str, Any], out_dir: str | Path, *, warmup: int = 5,
                  steps: int = 20, repeats: int = 3, threads: int = 1) -> dict[str, Any]:
    """Train one configuration on CPU, time it unprofiled, and trace one step of it.

    Order: ``torch.set_num_threads(threads)``; build the model; ``warmup`` untimed steps;
    ``repeats`` blocks of ``steps`` steps, each step timed alone with
    :func:`time.perf_counter_ns`; one step under the execution-trace observer
    (``et.json``, the step wrapped in ``record_function(STEP_MARKER)``, ``ProfilerStep#0``);
    one profiler warm-up step plus one step under Kineto (``kineto.json``, ``ProfilerStep#1``).
    Files are written under a hidden temporary name and moved into place; ``run.json`` last.

    Args:
        cfg: a configuration from :func:`random_dlrm_configs` or
            :func:`random_transformer_configs`.
        out_dir: folder to write into (created).
        warmup: untimed steps before the timed blocks.
        steps: timed steps per block (>= 1).
        repeats: timed blocks (>= 1).
        threads: torch intra-op threads.

    Returns:
        The contents of ``run.json``: ``schema``, ``config``, ``timing`` (``warmup``,
        ``steps``, ``repeats``, ``steps_ns``: per block the step times in ns,
        ``repeat_median_ns``: per block the median, ns, ``unprofiled_step_ns``: the median of
        all timed steps, ns, ``noise``: max/min of the block medians - 1, a fraction, the run's
        noise floor, ``min_step_ns``: the fastest timed step, ns (the one least disturbed by
        other processes), ``cpu_steps_ns`` / ``unprofiled_cpu_step_ns``: the same steps'
        CPU time of the training thread (``time.thread_time_ns``: user and system time, page
        faults included, time the thread waited for a core left out) and their median, ns,
        ``et_step_ns`` / ``kineto_step_ns``: wall time of the traced steps,
        ns, profiler cost included), ``files`` (``et``, ``kineto``), ``et_marker``
        (:data:`STEP_MARKER`), ``kineto_step`` (``ProfilerStep#1``), ``torch``, ``threads``,
        ``python``, ``platform``, ``date`` (ISO UTC), ``loadavg`` (the machine's 1-minute load
        average before and after the call; null where unknown) and ``record_s`` (wall time
        of the whole call, s).

    Raises:
        ParameterError: a bad argument or configuration kind.
        ImportError: torch is not installed.
    """
    for name, value, lo in (("warmup", warmup, 0), ("steps", steps, 1), ("repeats", repeats, 1),
                            ("threads", threads, 1)):
        if not isinstance(value, int) or value < lo:
            raise ParameterError(f"{name} must be an integer >= {lo}, got {value!r}")
    t_start = time.perf_counter()
    load_before = _loadavg()
    import torch  # optional (traincast[record]) and slow to import: only when recording
    from torch.profiler import (
        ExecutionTraceObserver,
        ProfilerActivity,
        profile,
        record_function,
        schedule,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        step = _train_step_fn(cfg)
        i = 0
        for _ in range(warmup):
            step(i)
            i += 1
        blocks: list[list[int]] = []
        cpu_blocks: list[list[int]] = []
        for _ in range(repeats):
            block, cpu_block = [], []
            for _ in range(steps):
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                step(i)
                block.append(time.perf_counter_ns() - t0)
                cpu_block.append(time.thread_time_ns() - c0)
                i += 1
            blocks.append(block)
            cpu_blocks.append(cpu_block)

        et_final, et_part = out / "et.json", out / ".et.json.part"
        with quiet_fds():
            obs = ExecutionTraceObserver().register_callback(str(et_part))
            try:
                obs.start()
                t0 = time.perf_counter_ns()
                with record_function(STEP_MARKER):
                    step(i)
                et_ns = time.perf_counter_ns() - t0
                obs.stop()
            finally:
                obs.unregister_callback()  # finalises the JSON
        os.replace(et_part, et_final)
        i += 1

        k_final, k_part = out / "kineto.json", out / ".kineto.json.part"
        kineto_ns = 0
        with quiet_fds(), profile(
                activities=[ProfilerActivity.CPU], record_shapes=True,
                schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
                on_trace_ready=lambda p: p.export_chrome_trace(str(k_part))) as prof:
            for _ in range(2):
                t0 = time.perf_counter_ns()
                step(i)
                kineto_ns = time.perf_counter_ns() - t0
                prof.step()
                i += 1
        os.replace(k_part, k_final)
    finally:
        torch.set_num_threads(prev_threads)

    medians = [int(statistics.median(b)) for b in blocks]
    run = {
        "schema": SCHEMA,
        "config": cfg,
        "timing": {
            "warmup": warmup, "steps": steps, "repeats": repeats, "steps_ns": blocks,
            "repeat_median_ns": medians,
            "unprofiled_step_ns": int(statistics.median([t for b in blocks for t in b])),
            "noise": max(medians) / min(medians) - 1,
            "min_step_ns": min(t for b in blocks for t in b),
            "cpu_steps_ns": cpu_blocks,
            "unprofiled_cpu_step_ns": int(statistics.median(
                [t for b in cpu_blocks for t in b])),
            "et_step_ns": et_ns, "kineto_step_ns": kineto_ns,
        },
        "files": {"et": et_final.name, "kineto": k_final.name},
        "et_marker": STEP_MARKER,
        "kineto_step": "ProfilerStep#1",
        "torch": str(torch.__version__),
        "threads": threads,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "loadavg": [load_before, _loadavg()],
        "record_s": round(time.perf_counter() - t_start, 3),
    }
    _write_atomic(out / RUN_FILE, json.dumps(run, indent=1) + "\n")
    return run


def record_set(kind: str, n: int, seed: int, out_root: str | Path, *, progress: bool = True,
               **record_kw: Any) -> list[dict[str, Any]]:
    """Record ``n`` configurations of ``kind`` (``dlrm`` or ``transformer``) drawn with
    ``seed`` into ``out_root/<kind>-<i>/`` (:func:`record_config`; ``record_kw`` goes to it).

    Resumable: a folder whose ``run.json`` exists is not recorded again (its ``run.json`` is
    returned as is), so an interrupted set continues where it stopped. A rich progress bar
    is shown on stderr when ``progress`` is true.

    Returns:
        The ``run.json`` contents of the ``n`` configurations, in order.
    """
    configs = random_configs(kind, n, seed)
    root = Path(out_root)
    runs: list[dict[str, Any]] = []
    bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=Console(stderr=True), disable=not progress)
    with bar:
        task = bar.add_task(f"recording {kind}", total=len(configs))
        for cfg in configs:
            folder = root / cfg["name"]
            run_file = folder / RUN_FILE
            bar.update(task, description=f"{cfg['name']}")
            if run_file.exists():
                runs.append(json.loads(run_file.read_text()))
            else:
                runs.append(record_config(cfg, folder, **record_kw))
            bar.advance(task)
    return runs
