"""Graph templates: a plan's execution graph with its op durations left as slots.

The layouts of one search share graph shapes: the same pipeline schedule, micro-batch count
and bucket layout give the same ops and edges, and only the durations differ (recomputation,
sequence parallelism, ZeRO 1 vs 2 change what a pass costs, not which passes exist). A
:class:`GraphTemplate` holds that shape once -- ops (rank, stream, category, phase, slot)
and edges with the same kinds and semantics as :class:`~traincast.plan.builder.GraphBuilder`
-- and each layout brings a vector of slot values (ns). :meth:`GraphTemplate.simulate` then
evaluates many layouts at once with the one simulator
(:func:`traincast.simulate.engine.simulate_batch`: the same max-plus recurrence over the same
graph, a lag vector per layout), and :meth:`GraphTemplate.metrics` computes the plan's
metrics (makespan, pipeline bubble, exposed communication, busy times of the critical stage)
for every layout with numpy; :func:`traincast.plan.api.plan` is the same path with a batch
of one.

Times are integer ns; a duration is rounded half to even and clamped at 0, as the builder
does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traincast.graph.model import ExecutionGraph
from traincast.plan.builder import COMM, COMPUTE, HOST, MAX_TOTAL_NS, PlanTimeline
from traincast.plan.spec import PlanError
from traincast.simulate.engine import simulate_batch
from traincast.trace.intervals import union_length

#: op streams, categories and phases, by code
STREAMS = ("host", "compute", "zero3", "dp")
CATEGORIES = (HOST, COMPUTE, COMM)
PHASES = ("host", "fwd", "bwd", "p2p", "zero3", "dp", "opt")


@dataclass
class GraphTemplate:
    """Ops and edges of a plan's graph; op ``i``'s duration is ``values[slot[i]]`` of the
    layout being simulated. Point ``2i`` is op ``i``'s start, ``2i + 1`` its end. Streams,
    categories and phases are codes into :data:`STREAMS`, :data:`CATEGORIES`,
    :data:`PHASES`; names are made on demand by ``names`` (only timelines and errors show
    them)."""

    rank: np.ndarray
    stream_code: np.ndarray
    category_code: np.ndarray
    phase_code: np.ndarray
    microbatch: np.ndarray
    slot: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray
    exec_op: np.ndarray
    n_slots: int
    names: Callable[[], list[str]]

    @property
    def stream(self) -> pd.Categorical:
        return pd.Categorical.from_codes(self.stream_code, categories=list(STREAMS))

    @property
    def category(self) -> pd.Categorical:
        return pd.Categorical.from_codes(self.category_code, categories=list(CATEGORIES))

    @property
    def phase(self) -> pd.Categorical:
        return pd.Categorical.from_codes(self.phase_code, categories=list(PHASES))

    @property
    def name(self) -> list[str]:
        return self.names()

    @property
    def n_ops(self) -> int:
        return int(self.slot.size)

    def durations(self, values: np.ndarray) -> np.ndarray:
        """int64[..., n_ops] op durations from slot values (float ns, ``[..., n_slots]``).

        Raises:
            PlanError: a non-finite duration, or one (or their sum) past ``MAX_TOTAL_NS``,
                naming the first such op.
        """
        v = np.asarray(values, np.float64)
        d = v[..., self.slot]
        bad = ~np.isfinite(d) | (d > MAX_TOTAL_NS)
        if bad.any():
            i = int(np.flatnonzero(bad.reshape(-1, self.n_ops).any(axis=0))[0])
            f = float(d.reshape(-1, self.n_ops)[:, i].max())
            raise PlanError(f"op {self.name[i]!r} would take {f / 8.64e13:.3g} days: the sizes "
                            "are beyond what the planner simulates")
        out = np.maximum(np.rint(d), 0).astype(np.int64)
        if (out.sum(axis=-1) > MAX_TOTAL_NS).any():
            raise PlanError(f"the ops of this plan add up to more than "
                            f"{MAX_TOTAL_NS / 8.64e13:,.0f} days: the sizes are beyond what "
                            "the planner simulates")
        return out

    def lags(self, dur: np.ndarray) -> np.ndarray:
        """int64[..., n_edges]: EXEC edges carry their op's duration, every other edge 0."""
        ex = self.exec_op >= 0
        out = np.zeros(dur.shape[:-1] + (self.src.size,), np.int64)
        out[..., ex] = dur[..., self.exec_op[ex]]
        return out

    def graph(self, dur: np.ndarray) -> ExecutionGraph:
        """The execution graph of one layout (``dur``: int64[n_ops])."""
        return self._graph(self.lags(dur))

    def _graph(self, lag: np.ndarray) -> ExecutionGraph:
        n = self.n_ops
        anchor = np.full(2 * n, -1, np.int64)
        anchor[0::2] = 0  # nothing starts before time 0
        return ExecutionGraph(
            node_event=np.full(n, -1, np.int64), node_rank=self.rank,
            measured=np.zeros(2 * n, np.int64), src=self.src, dst=self.dst,
            lag=lag, kind=self.kind, anchor=anchor)

    def simulate(self, dur: np.ndarray) -> np.ndarray:
        """int64[B, 2 n_ops] point times of ``B`` layouts (``dur``: int64[B, n_ops]), by
        :func:`~traincast.simulate.engine.simulate_batch` on this template's graph."""
        # a search simulates many small templates: the compiled kernel pays for its import
        return simulate_batch(self._graph(np.zeros(self.src.size, np.int64)), self.lags(dur),
                              jit=True)

    def timeline(self, times: np.ndarray, graph: ExecutionGraph) -> PlanTimeline:
        """The ops of one simulated layout as a :class:`PlanTimeline`."""
        n = self.n_ops
        ops = pd.DataFrame({
            "rank": self.rank, "stream": self.stream, "name": self.name,
            "category": self.category, "phase": self.phase, "microbatch": self.microbatch,
            "start_ns": times[0:2 * n:2], "end_ns": times[1:2 * n:2]})
        ops["dur_ns"] = ops["end_ns"] - ops["start_ns"]
        return PlanTimeline(ops, graph)

    def metrics(self, times: np.ndarray, pp: int) -> list[dict[str, float]]:
        """Per layout (``times``: int64[B, 2 n_ops]): ``makespan_ns``, ``bubble_frac`` (mean
        over the pipeline ranks of the time their fwd/bwd/p2p ops leave idle before the last
        of them ends, over the makespan), ``exposed_comm_ns`` (comm time not covered by
        compute), ``compute_ns``, ``tp_comm_ns`` (comm on the compute stream) and
        ``optimizer_ns``, the last four on the rank whose op ends last (the first such op)."""
        n = self.n_ops
        start = times[:, 0:2 * n:2]
        end = times[:, 1:2 * n:2]
        dur = end - start
        comp = self.category_code == CATEGORIES.index(COMPUTE)
        comm = self.category_code == CATEGORIES.index(COMM)
        on_compute = self.stream_code == STREAMS.index("compute")
        opt = self.phase_code == PHASES.index("opt")
        piped = on_compute & np.isin(self.phase_code, [PHASES.index(x)
                                                        for x in ("fwd", "bwd", "p2p")])
        piped_ranks = np.unique(self.rank[piped])
        out = []
        for b in range(times.shape[0]):
            e, d = end[b], dur[b]
            last = int(np.argmax(e))  # first op ending last, as DataFrame.idxmax
            T = float(e[last])
            mine = self.rank == self.rank[last]
            bubbles = []
            if pp > 1 and piped.any():
                flush = float(e[piped].max())
                sums = np.bincount(self.rank[piped], weights=d[piped].astype(np.float64),
                                   minlength=int(self.rank.max()) + 1)
                bubbles = [(flush - float(sums[r])) / T for r in piped_ranks]
            out.append({
                "makespan_ns": T,
                "bubble_frac": float(np.mean(bubbles)) if bubbles else 0.0,
                "exposed_comm_ns": _exposed(start[b], e, d, mine & comm, mine & comp),
                "compute_ns": float(d[mine & comp].sum()),
                "tp_comm_ns": float(d[mine & on_compute & comm].sum()),
                "optimizer_ns": float(d[mine & opt].sum()),
            })
        return out


def _exposed(start: np.ndarray, end: np.ndarray, dur: np.ndarray, comm: np.ndarray,
             comp: np.ndarray) -> float:
    """Time in ``comm`` ops (with a duration) not covered by ``comp`` ops (ns)."""
    c = comm & (dur > 0)
    if not c.any():
        return 0.0
    k = comp & (dur > 0)
    both = c | k
    return float(int(union_length(start[both], end[both]))
                 - int(union_length(start[k], end[k])))

