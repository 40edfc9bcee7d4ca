"""Table-wise embedding sharders: which rank holds each embedding table.

The heuristics the seed paper compares its predictions on (Lin et al., arXiv 2404.12674,
Sec. 6.3, embedding-table sharding), as defined by DreamShard (Zha et al., NeurIPS 2022,
``dreamshard/sharders.py``): every table gets a *cost*, tables are taken in decreasing
``(cost, size, index)`` and each goes to the rank with the smallest summed cost (ties: the
smallest summed size) among the ranks where it still fits in memory.

=====================  =================================================================
sharder                cost of a table (``dim``: embedding dim, ``pooling``: lookups per
                       sample, ``rows``: rows, ``size``: bytes)
=====================  =================================================================
``naive``              none: table ``i`` on rank ``i mod R``
``random``             none: a uniformly random rank (seeded)
``dim_greedy``         ``dim``
``size_greedy``        ``size``
``lookup_greedy``      ``dim * pooling``
``size_lookup_greedy`` ``dim * pooling * log10(rows)``
=====================  =================================================================

:func:`rank_sharders` simulates each placement with :func:`traincast.plan.dlrm.plan_dlrm`
(table-wise sharding, the same graph and cost models as any plan) and ranks them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from traincast.plan.dlrm import plan_dlrm
from traincast.plan.dlrm_models import model_step
from traincast.plan.spec import (
    DTYPE_BYTES,
    DLRMSpec,
    Layout,
    PlanError,
    SystemSpec,
)

#: the sharders, in the order of the table above
SHARDERS = ("naive", "random", "dim_greedy", "size_greedy", "lookup_greedy",
            "size_lookup_greedy")


def _costs(model: DLRMSpec, sharder: str, itemsize: int) -> list[float]:
    out = []
    for t in model.tables:
        pooling = float(getattr(t, "pooling", 1.0) or 1.0)
        size = float(t.rows) * t.dim * itemsize
        out.append({"dim_greedy": float(t.dim), "size_greedy": size,
                    "lookup_greedy": t.dim * pooling,
                    "size_lookup_greedy": t.dim * pooling * math.log10(max(t.rows, 1))
                    }[sharder])
    return out


def place_tables(model: DLRMSpec, ranks: int, sharder: str, *, memory_bytes: float | None = None,
                 seed: int = 0) -> dict[int, int]:
    """Table index -> rank for ``sharder`` (module docstring) on ``ranks`` ranks.

    Args:
        memory_bytes: capacity per rank for the tables' weights (None: unlimited).

    Raises:
        PlanError: unknown sharder, no ranks, or a table that fits on no rank.
    """
    if sharder not in SHARDERS:
        raise PlanError(f"unknown sharder {sharder!r}; known: {', '.join(SHARDERS)}")
    if ranks < 1:
        raise PlanError(f"ranks must be >= 1, got {ranks}")
    n = len(model.tables)
    if sharder == "naive":
        return {i: i % ranks for i in range(n)}
    if sharder == "random":
        rng = np.random.default_rng(seed)
        return {i: int(rng.integers(ranks)) for i in range(n)}
    itemsize = DTYPE_BYTES[model.dtype]
    cost = _costs(model, sharder, itemsize)
    size = [float(t.rows) * t.dim * itemsize for t in model.tables]
    order = sorted(range(n), key=lambda i: (cost[i], size[i], i), reverse=True)
    cap = math.inf if memory_bytes is None else float(memory_bytes)
    sums = [0.0] * ranks
    used = [0.0] * ranks
    out: dict[int, int] = {}
    for i in order:
        fits = [r for r in range(ranks) if used[r] + size[i] <= cap]
        if not fits:
            raise PlanError(f"{sharder}: table {i} ({size[i] / 2**30:.3g} GiB) fits on no rank")
        r = min(fits, key=lambda r: (sums[r], used[r], r))
        out[i] = r
        sums[r] += cost[i]
        used[r] += size[i]
    return out


def rank_sharders(model: DLRMSpec, system: SystemSpec, batch: int, *,
                  sharders: Sequence[str] = SHARDERS, seed: int = 0,
                  **plan_kw: Any) -> pd.DataFrame:
    """Simulate every sharder's table-wise placement and rank them, fastest first.

    Returns one row per sharder: ``sharder, iteration_time_s, lookup_max_ms``
    (the slowest rank's lookups, forward + backward), ``lookup_imbalance`` (max / mean of the
    ranks' lookup time), ``a2a_ms`` (the pooled-embedding exchange, forward), ``fits``,
    ``placement`` (rank -> tables) and ``why`` (for the first row: what sets it apart from
    the runner-up).

    Raises:
        PlanError: bad model/system/batch or sharder.
    """
    rows = []
    mem = None
    cap = getattr(system, "gpu_memory_gib", None)
    if cap:
        mem = 0.9 * float(cap) * 2**30
    for name in sharders:
        placement = place_tables(model, system.gpus, name, memory_bytes=mem, seed=seed)
        res = plan_dlrm(model, system, Layout(dp=system.gpus, sharding=("table",)), batch,
                        placement=placement, **plan_kw)
        pr = res.per_rank
        look = (pr["lookup_fwd_ns"] + pr["lookup_bwd_ns"]).to_numpy(float) / 1e6
        by_rank: dict[int, list[int]] = {}
        for t, r in sorted(placement.items()):
            by_rank.setdefault(r, []).append(t)
        rows.append({"sharder": name, "iteration_time_s": res.iteration_time_s,
                     "lookup_max_ms": float(look.max()),
                     "lookup_imbalance": float(look.max() / look.mean()) if look.mean() else 1.0,
                     "a2a_ms": float(pr["a2a_fwd_ns"].max()) / 1e6, "fits": res.fits,
                     "placement": {r: by_rank.get(r, []) for r in range(system.gpus)}})
    df = pd.DataFrame(rows).sort_values(["fits", "iteration_time_s"], ascending=[False, True],
                                        kind="stable").reset_index(drop=True)
    df["why"] = ""
    if len(df) > 1:
        a, b = df.iloc[0], df.iloc[1]
        gap = 100 * (b["iteration_time_s"] / a["iteration_time_s"] - 1)
        parts = [f"{gap:.1f}% faster than {b['sharder']}" if gap >= 0.05 else
                 f"ties with {b['sharder']} (within 0.05%)"]
        if abs(a["lookup_max_ms"] - b["lookup_max_ms"]) > 1e-9:
            parts.append(f"slowest rank's lookups {a['lookup_max_ms']:.3g} vs "
                         f"{b['lookup_max_ms']:.3g} ms (imbalance {a['lookup_imbalance']:.2f} "
                         f"vs {b['lookup_imbalance']:.2f})")
        if abs(a["a2a_ms"] - b["a2a_ms"]) > 1e-9:
            parts.append(f"embedding exchange {a['a2a_ms']:.3g} vs {b['a2a_ms']:.3g} ms")
        df.at[0, "why"] = "; ".join(parts)
    return df


def pick_with_models(model: DLRMSpec, ranks: int, batch: int, models: Any, *,
                     sharders: Sequence[str] = SHARDERS, seed: int = 0) -> pd.DataFrame:
    """Each sharder's table-wise placement of ``model`` on ``ranks`` ranks priced by fitted
    kernel models (:func:`traincast.plan.dlrm_models.model_step`, no simulation of the
    collectives), fastest first.

    Returns one row per sharder: ``sharder``, ``placement`` (table -> rank), ``by_rank``
    (rank -> tables), ``max_cost_ns`` (the slowest rank's compute), ``costs_ns`` (per rank),
    ``lookups_max_ms`` (the slowest rank's lookups, forward + backward + update),
    ``lookup_imbalance`` (max / mean of the ranks' lookups) and ``why`` (first row: what sets
    it apart from the runner-up).

    Raises:
        PlanError: unknown sharder, a bad batch or placement (see ``model_step``).
    """
    rows = []
    for name in sharders:
        placement = place_tables(model, ranks, name, seed=seed)
        per = model_step(model, ranks, batch, placement, models)
        look = (per["lookups_ns"] + per["update_ns"]).to_numpy(float)
        by_rank: dict[int, list[int]] = {r: [] for r in range(ranks)}
        for t, r in sorted(placement.items()):
            by_rank[r].append(t)
        rows.append({"sharder": name, "placement": placement, "by_rank": by_rank,
                     "max_cost_ns": float(per["compute_ns"].max()),
                     "costs_ns": per["compute_ns"].tolist(),
                     "lookups_max_ms": float(look.max()) / 1e6,
                     "lookup_imbalance": float(look.max() / look.mean()) if look.mean() else 1.0})
    df = pd.DataFrame(rows).sort_values("max_cost_ns", kind="stable").reset_index(drop=True)
    df["why"] = ""
    if len(df) > 1:
        a, b = df.iloc[0], df.iloc[1]
        gap = 100 * (b["max_cost_ns"] / a["max_cost_ns"] - 1)
        why = (f"{gap:.1f}% less compute on the slowest rank than {b['sharder']}"
               if gap >= 0.05 else f"ties with {b['sharder']} (within 0.05%)")
        if abs(a["lookups_max_ms"] - b["lookups_max_ms"]) > 1e-12:
            why += (f"; slowest rank's embedding work {a['lookups_max_ms']:.3g} vs "
                    f"{b['lookups_max_ms']:.3g} ms (imbalance {a['lookup_imbalance']:.2f} vs "
                    f"{b['lookup_imbalance']:.2f})")
        df.at[0, "why"] = why
    return df
