"""``traincast.plan_search``: enumerate parallel layouts, prune what cannot run, simulate the
rest, rank them.

Space (each axis can be narrowed by the caller): every ``tp * pp * dp = gpus`` with ``tp``
dividing the heads and the FFN size and ``pp`` dividing the layers; micro-batch sizes that
divide ``global_batch / dp``; recomputation none/selective/full; sequence parallelism on/off
(only with ``tp > 1``); ZeRO 0-3 (only with ``dp > 1``); schedule 1F1B, and interleaved with
``v`` virtual stages when ``pp > 1``, ``pp * v`` divides the layers and the micro-batches are
a multiple of ``pp``.

Pruning, before any simulation: :func:`~traincast.plan.spec.check_fit` (invalid) and the
memory model (:mod:`traincast.plan.memory`: does not fit in the GPU). Survivors are simulated
with :func:`traincast.plan.api.plan`, in parallel through :func:`traincast.util.executor.map_tasks`
(local process pool by default, Ray with ``executor="ray"``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traincast.costs.comm import CommModel
from traincast.plan.api import plan, plan_result
from traincast.plan.costs import PlanCalibration, PlanCosts
from traincast.plan.memory import gpu_capacity_bytes
from traincast.plan.memory import transformer_memory_cached as transformer_memory
from traincast.plan.spec import Layout, PlanError, SystemSpec, TransformerSpec, check_fit
from traincast.plan.step import build_step_template, step_costs
from traincast.util.executor import map_tasks


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class SearchSpace:
    """Axes of the layout search (None: every valid value)."""

    tp: Sequence[int] | None = None
    pp: Sequence[int] | None = None
    micro_batch: Sequence[int] | None = None
    recompute: Sequence[str] = ("none", "selective", "full")
    sequence_parallel: Sequence[bool] = (False, True)
    zero: Sequence[int] = (0, 1, 2, 3)
    schedules: Sequence[str] = ("1f1b", "interleaved")
    virtual_stages: Sequence[int] = (2, 4)
    max_tp: int | None = None  # default: GPUs per node


def enumerate_layouts(model: TransformerSpec, system: SystemSpec, global_batch: int,
                      space: SearchSpace | None = None) -> tuple[list[Layout], int]:
    """Valid layouts of the space and the number of combinations rejected as invalid.

    Raises:
        PlanError: ``global_batch`` < 1.
    """
    if global_batch < 1:
        raise PlanError(f"global_batch must be >= 1, got {global_batch}")
    sp = space or SearchSpace()
    max_tp = sp.max_tp or system.gpus_per_node
    out: list[Layout] = []
    invalid = 0
    g = system.gpus
    for tp in sp.tp or _divisors(g):
        if tp > max_tp or g % tp:
            continue
        for pp in sp.pp or _divisors(g // tp):
            if (g // tp) % pp:
                continue
            dp = g // (tp * pp)
            if global_batch % dp:
                invalid += 1
                continue
            per_dp = global_batch // dp
            mbs = sp.micro_batch or _divisors(per_dp)
            for mb in mbs:
                if per_dp % mb:
                    continue
                m = per_dp // mb
                scheds: list[tuple[str, int]] = [("1f1b", 1)]
                if pp > 1 and "interleaved" in sp.schedules:
                    scheds += [("interleaved", v) for v in sp.virtual_stages]
                if "1f1b" not in sp.schedules:
                    scheds = [s for s in scheds if s[0] != "1f1b"]
                for (sched, v), rc, seqp, z in itertools.product(
                        scheds, sp.recompute, sp.sequence_parallel, sp.zero):
                    if seqp and tp == 1:
                        continue
                    if z and dp == 1:
                        continue
                    if sched == "interleaved" and m % pp:
                        invalid += 1
                        continue
                    try:
                        lay = Layout(tp=tp, pp=pp, dp=dp, micro_batch=mb,
                                     global_batch=global_batch, recompute=rc,
                                     sequence_parallel=seqp, zero=z, schedule=sched,
                                     virtual_stages=v)
                        check_fit(model, system, lay)
                    except PlanError:
                        invalid += 1
                        continue
                    out.append(lay)
    return out, invalid


def _row(r: Any, layout: Layout) -> dict[str, Any]:
    """One table row: every scalar of the plan JSON, the layout and the breakdown."""
    d = r.to_dict()
    row = {k: v for k, v in d.items() if not isinstance(v, dict | list)}
    row.update(d["layout"])
    row.update(d["breakdown_s"])
    row["describe"] = layout.describe()
    return row


def _evaluate(args: tuple[Any, ...]) -> dict[str, Any]:
    """Simulate one layout (top-level for process pools)."""
    model, system, layout, calibration, comm = args
    return _row(plan(model, system, layout, calibration=calibration, comm=comm), layout)


def _shape_key(lay: Layout) -> tuple:
    """Layouts that (nearly always) share a step graph: recomputation, sequence parallelism
    and ZeRO 1 vs 2 change durations only. :func:`_evaluate_group` splits a group further by
    the exact signature."""
    return (lay.tp, lay.pp, lay.dp, lay.micro_batch, lay.schedule, lay.virtual_stages,
            lay.zero >= 1, lay.zero == 3, lay.ep, lay.overlap_grad_reduce)


def _evaluate_group(args: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Simulate layouts that share a step graph together (top-level for process pools): one
    graph template, a duration vector per layout, one batched simulation
    (:mod:`traincast.plan.template`). Each row equals :func:`_evaluate`'s for its layout."""
    model, system, layouts, calibration, comm = args
    for lay in layouts:
        check_fit(model, system, lay)
    pc = PlanCosts.build(system, model.dtype, calibration, comm)
    scs = [step_costs(model, lay, pc) for lay in layouts]
    by_sig: dict[tuple, list[int]] = {}
    for i, sc in enumerate(scs):
        by_sig.setdefault(sc.signature(), []).append(i)
    rows: list[dict[str, Any] | None] = [None] * len(layouts)
    for members in by_sig.values():
        template, slots = build_step_template(scs[members[0]])
        values = np.stack([slots.values(scs[i]) for i in members])
        times = template.simulate(template.durations(values))
        pp = layouts[members[0]].pp
        for i, met in zip(members, template.metrics(times, pp), strict=True):
            r = plan_result(model, system, layouts[i], pc, scs[i], met, n_ops=template.n_ops)
            rows[i] = _row(r, layouts[i])
    return [r for r in rows if r is not None]


@dataclass
class SearchResult:
    """Ranked layouts (``table``, fastest first, with every metric of the plan JSON),
    what was pruned, and why the best wins."""

    table: pd.DataFrame
    enumerated: int
    invalid: int
    out_of_memory: int
    reasons: list[str] = field(default_factory=list)

    def top(self, k: int = 10) -> pd.DataFrame:
        return self.table.head(k)

    def to_dict(self, k: int = 10) -> dict[str, Any]:
        return {"enumerated": self.enumerated, "invalid": self.invalid,
                "out_of_memory": self.out_of_memory, "simulated": len(self.table),
                "top": self.top(k).to_dict(orient="records"), "reasons": self.reasons}


def component_diffs(best: pd.Series, other: pd.Series,
                    components: Iterable[tuple[str, str]]) -> list[str]:
    """``"<label> <best> vs <other>"`` (3 significant digits) for each ``(column, label)`` of
    ``components`` in which ``other`` is larger than ``best`` by more than 2% of its value and
    more than 1e-4: the components that make a runner-up slower."""
    diffs = []
    for col, label in components:
        a, b = float(best[col]), float(other[col])
        if b - a > 0.02 * max(abs(b), 1e-9) and b - a > 1e-4:
            diffs.append(f"{label} {a:.3g} vs {b:.3g}")
    return diffs


def _reasons(t: pd.DataFrame) -> list[str]:
    """Why the first row beats the runner-up and the best layout of other (tp, pp) shapes."""
    if t.empty:
        return []
    best = t.iloc[0]
    out = [f"best: {best['describe']}: {best['iteration_time_s']:.3f} s/step, "
           f"MFU {best['mfu_pct']:.1f}%, bubble {best['bubble_pct']:.1f}%, exposed comm "
           f"{best['exposed_comm_s']:.3f} s, {best['memory_gib_per_gpu']:.1f} GiB/GPU"]
    others = t.drop_duplicates(["tp", "pp"]).iloc[1:4]
    if len(t) > 1 and t.index[1] not in others.index:
        others = pd.concat([t.iloc[[1]], others])
    for _, o in others.iterrows():
        diffs = component_diffs(best, o, (("bubble_pct", "pipeline bubble %"),
                                          ("exposed_comm_s", "exposed comm s"),
                                          ("tp_comm_s", "tensor-parallel comm s"),
                                          ("compute_s", "compute s")))
        why = "; ".join(diffs) if diffs else "within 2% on every component"
        out.append(f"vs {o['describe']} ({o['iteration_time_s']:.3f} s, "
                   f"+{(o['iteration_time_s'] / best['iteration_time_s'] - 1) * 100:.1f}%): "
                   f"{why}")
    return out


def plan_search(model: TransformerSpec, system: SystemSpec, global_batch: int, *,
                space: SearchSpace | None = None, calibration: PlanCalibration | None = None,
                comm: CommModel | None = None, executor: str = "process",
                address: str | None = None, workers: int | None = None,
                progress: Callable[[int, int], None] | None = None,
                layouts: Iterable[Layout] | None = None) -> SearchResult:
    """Search layouts of ``model`` on ``system`` for one ``global_batch`` (see module
    docstring); the table is sorted by iteration time.

    Raises:
        PlanError: bad search parameters or nothing valid to search.
        ExecutorError: the executor failed (unknown name, Ray unreachable).
    """
    if layouts is None:
        cands, invalid = enumerate_layouts(model, system, global_batch, space)
    else:
        cands, invalid = list(layouts), 0
    if not cands:
        raise PlanError(f"no valid layout of {model.name} on {system.gpus} GPUs with global "
                        f"batch {global_batch} ({invalid} combinations invalid)")

    cap = gpu_capacity_bytes(system.gpu)
    fit: list[Layout] = []
    oom = 0
    for lay in cands:
        worst = max(transformer_memory(model, lay, cap, stage=s).total
                    for s in sorted({0, lay.pp - 1}))
        if worst <= cap:
            fit.append(lay)
        else:
            oom += 1
    # layouts sharing a step graph are simulated together (one template, a batch of duration
    # vectors); groups of similar size go to the workers
    groups: dict[tuple, list[int]] = {}
    for i, lay in enumerate(fit):
        groups.setdefault(_shape_key(lay), []).append(i)
    tasks = list(groups.values())
    sizes = np.cumsum([len(t) for t in tasks])

    def _progress(done: int, _total: int) -> None:
        if progress is not None:
            progress(int(sizes[min(done, len(tasks)) - 1]) if done else 0, len(fit))

    parts = map_tasks(_evaluate_group,
                      [(model, system, [fit[i] for i in t], calibration, comm) for t in tasks],
                      executor=executor, address=address, workers=workers,
                      progress=_progress) if fit else []
    rows: list[dict[str, Any]] = [{}] * len(fit)
    for t, part in zip(tasks, parts, strict=True):
        for i, row in zip(t, part, strict=True):
            rows[i] = row  # the candidates' order, as one layout at a time gives it
    table = pd.DataFrame(rows)
    if not table.empty:
        table = table.sort_values(["iteration_time_s", "memory_gib_per_gpu"],
                                  kind="stable").reset_index(drop=True)
    return SearchResult(table, len(cands) + invalid, invalid, oom, _reasons(table))
