"""Ranking DLRM sharding plans by simulated step time (:func:`search_sharding`), and why the
best one wins (:func:`why_best`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from traincast.costs.comm import CommModel
from traincast.costs.embedding import EmbeddingModel
from traincast.plan.costs import PlanCalibration
from traincast.plan.dlrm.step_model import plan_dlrm
from traincast.plan.search import component_diffs
from traincast.plan.spec import DTYPE_BYTES, SHARDINGS, DLRMSpec, Layout, PlanError, SystemSpec
from traincast.util.executor import map_tasks

# ------------------------------------------------------------------ search


def _evaluate(args: tuple[Any, ...]) -> dict[str, Any]:
    """Simulate one sharding plan (module level for process pools)."""
    (model, system, batch, name, sharding, calibration, comm, emb_model, optimizer,
     dense_optimizer) = args
    r = plan_dlrm(model, system, Layout(sharding=sharding), batch, calibration=calibration,
                  comm=comm, embedding_model=emb_model, optimizer=optimizer,
                  dense_optimizer=dense_optimizer)
    pr = r.per_rank
    return {
        "plan": name,
        "sharding": _describe(sharding),
        "iteration_time_s": r.iteration_time_s,
        "samples_per_s": r.samples_per_s,
        "exposed_comm_s": r.exposed_comm_s,
        "memory_gib_per_gpu": r.memory_gib_per_gpu,
        "fits": r.fits,
        "lookup_max_ms": float((pr["lookup_fwd_ns"] + pr["lookup_bwd_ns"]).max()) * 1e-6,
        "lookup_mean_ms": float((pr["lookup_fwd_ns"] + pr["lookup_bwd_ns"]).mean()) * 1e-6,
        "a2a_ms": (r.breakdown["a2a_fwd_s"] + r.breakdown["a2a_bwd_s"]
                   + r.breakdown["reduce_scatter_fwd_s"] + r.breakdown["all_gather_bwd_s"]
                   + r.breakdown["input_dist_s"]) * 1e3,
        "all_reduce_ms": r.breakdown["all_reduce_s"] * 1e3,
        "lookup_fwd_ns": [float(x) for x in pr["lookup_fwd_ns"]],
        "lookup_bwd_ns": [float(x) for x in pr["lookup_bwd_ns"]],
        "a2a_fwd_ns": [float(x) for x in pr["a2a_fwd_ns"]],
        "a2a_bwd_ns": [float(x) for x in pr["a2a_bwd_ns"]],
        "_sharding": tuple(sharding),
    }


def _describe(sharding: Sequence[str]) -> str:
    """``table`` when uniform, else ``data:5 table:21`` counts."""
    kinds = [k for k in SHARDINGS if k in sharding]
    if len(kinds) == 1:
        return kinds[0]
    return " ".join(f"{k}:{sum(1 for s in sharding if s == k)}" for k in kinds)


def default_candidates(model: DLRMSpec, thresholds: Sequence[float] = (2**20, 2**26)
                       ) -> list[tuple[str, tuple[str, ...]]]:
    """The uniform plans (all table/row/column/data-parallel) and mixes: tables under each
    size ``threshold`` (bytes, ``rows * dim * itemsize``) data parallel, the rest
    table-, row- or column-wise. Duplicates are dropped."""
    n = len(model.tables)
    e = DTYPE_BYTES[model.dtype]
    out: list[tuple[str, tuple[str, ...]]] = [(f"all-{k}", (k,) * n) for k in SHARDINGS]
    for th in thresholds:
        small = [t.rows * t.dim * e < th for t in model.tables]
        if not any(small) or all(small):
            continue
        for rest in ("table", "row", "column"):
            s = tuple("data" if sm else rest for sm in small)
            out.append((f"data<{_size(th)}+{rest}", s))
    seen: set[tuple[str, ...]] = set()
    uniq = []
    for name, s in out:
        if s not in seen:
            seen.add(s)
            uniq.append((name, s))
    return uniq


def _size(nbytes: float) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= k:
            return f"{nbytes / k:g}{unit}"
    return f"{nbytes:g}B"


def search_sharding(model: DLRMSpec, system: SystemSpec, batch: int, *,
                    candidates: Sequence[Sequence[str] | str] | Mapping[str, Sequence[str]]
                    | None = None, top_k: int | None = None, refine: bool = True,
                    executor: str = "process", workers: int | None = None,
                    calibration: PlanCalibration | None = None, comm: CommModel | None = None,
                    embedding_model: EmbeddingModel | None = None, optimizer: str = "sgd",
                    dense_optimizer: str = "sgd", address: str | None = None) -> pd.DataFrame:
    """Rank sharding plans of ``model`` on ``system`` by simulated step time.

    Candidates (default :func:`default_candidates`: all-table, all-row, all-column,
    all-data-parallel, and small-tables-data-parallel mixes) are simulated in parallel with
    :func:`traincast.util.executor.map_tasks` (``executor``, ``workers``, and ``address`` for a
    Ray cluster). With ``refine``, a greedy per-table improvement
    starts from the best fitting candidate: tables in decreasing size, each tries the other
    three shardings (simulated in parallel) and keeps the best if the step gets faster
    (``greedy`` row).

    Returns:
        One row per plan, fastest fitting plan first (plans that do not fit in memory
        last): ``plan, sharding, iteration_time_s, samples_per_s, exposed_comm_s,
        memory_gib_per_gpu, fits``, the per-rank lists ``lookup_fwd_ns, lookup_bwd_ns,
        a2a_fwd_ns, a2a_bwd_ns`` and their summaries ``lookup_max_ms, lookup_mean_ms,
        a2a_ms`` (all pooled-embedding and index exchanges), ``all_reduce_ms``; ``top_k``
        rows if given; ``per_table`` is the plan's sharding of each table.

    Raises:
        PlanError: bad model/system/batch, empty or malformed candidates.
        ExecutorError: the executor failed.
    """
    n = len(model.tables)
    if candidates is None:
        cands = default_candidates(model)
    else:
        items = candidates.items() if isinstance(candidates, Mapping) else (
            (None, c) for c in candidates)
        cands = []
        for name, c in items:
            s = (c,) if isinstance(c, str) else tuple(c)
            if len(s) == 1:
                s = s * n
            if len(s) != n or any(x not in SHARDINGS for x in s):
                raise PlanError(f"candidate {c!r}: give one of {', '.join(SHARDINGS)} or one "
                                f"per table ({n})")
            cands.append((str(name) if name is not None else _describe(s), s))
    if not cands:
        raise PlanError("no sharding candidates to search")
    # validate once, cheaply, in this process (errors name the bad field)
    plan_dlrm(model, system, Layout(sharding=cands[0][1]), batch, calibration=calibration,
              comm=comm, embedding_model=embedding_model, optimizer=optimizer,
              dense_optimizer=dense_optimizer)
    common = (calibration, comm, embedding_model, optimizer, dense_optimizer)

    def run(named: list[tuple[str, tuple[str, ...]]]) -> list[dict[str, Any]]:
        return map_tasks(_evaluate, [(model, system, batch, nm, s, *common) for nm, s in named],
                         executor=executor, workers=workers, address=address)

    rows = run(cands)
    if refine and rows:
        fitting = [r for r in rows if r["fits"] is not False] or rows
        best = min(fitting, key=lambda r: r["iteration_time_s"])
        cur, cur_t = list(best["_sharding"]), best["iteration_time_s"]
        e = DTYPE_BYTES[model.dtype]
        order = sorted(range(n), key=lambda i: -model.tables[i].rows * model.tables[i].dim * e)
        changed = False
        for i in order:
            alts = []
            for k in SHARDINGS:
                if k != cur[i]:
                    s = list(cur)
                    s[i] = k
                    alts.append((f"greedy t{i}={k}", tuple(s)))
            res = [r for r in run(alts) if r["fits"] is not False]
            if res:
                r = min(res, key=lambda x: x["iteration_time_s"])
                if r["iteration_time_s"] < cur_t * (1 - 1e-9):
                    cur, cur_t, changed = list(r["_sharding"]), r["iteration_time_s"], True
        if changed and tuple(cur) not in {r["_sharding"] for r in rows}:
            rows += run([("greedy", tuple(cur))])
    df = pd.DataFrame(rows)
    df["_oom"] = df["fits"].eq(False)
    df = df.sort_values(["_oom", "iteration_time_s", "memory_gib_per_gpu"],
                        kind="stable").reset_index(drop=True)
    df = df.drop(columns=["_oom"]).rename(columns={"_sharding": "per_table"})
    df["per_table"] = [list(s) for s in df["per_table"]]
    if top_k is not None:
        df = df.head(int(top_k))
    return df


def why_best(table: pd.DataFrame) -> list[str]:
    """One line per runner-up: how the best plan's lookup balance and exchanges compare."""
    if table.empty:
        return []
    b = table.iloc[0]
    out = [f"best: {b['plan']} ({b['sharding']}): {b['iteration_time_s'] * 1e3:.3f} ms/step, "
           f"lookup max/mean {b['lookup_max_ms']:.3f}/{b['lookup_mean_ms']:.3f} ms, "
           f"exchanges {b['a2a_ms']:.3f} ms, all_reduce {b['all_reduce_ms']:.3f} ms, "
           f"{b['memory_gib_per_gpu']:.2f} GiB/GPU"]
    for _, o in table.iloc[1:4].iterrows():
        diffs = component_diffs(b, o, (("lookup_max_ms", "slowest rank's lookups ms"),
                                       ("a2a_ms", "embedding exchanges ms"),
                                       ("all_reduce_ms", "gradient all_reduce ms")))
        why = "; ".join(diffs) if diffs else "no single component dominates"
        fit = "" if o["fits"] is not False else " (does not fit)"
        out.append(f"vs {o['plan']}{fit} ({o['iteration_time_s'] * 1e3:.3f} ms, "
                   f"+{(o['iteration_time_s'] / b['iteration_time_s'] - 1) * 100:.1f}%): {why}")
    return out
