"""Synthetic execution graphs: ops on per-rank streams, dependencies, collectives.

The DLRM planner (:mod:`traincast.plan.dlrm`) emits ops through a :class:`GraphBuilder`
(the transformer planner builds the same kind of graph with numpy, durations as slots:
:mod:`traincast.plan.template`); :meth:`GraphBuilder.run` turns them into an
:class:`~traincast.graph.model.ExecutionGraph` with the same edge kinds as a graph built from a
trace and evaluates it with the one simulator (:func:`traincast.simulate.engine.simulate`).

Semantics (the same as replay, DESIGN.md):

- Every op has a start and an end point; its duration is an ``EXEC`` edge.
- Ops on one ``(rank, stream)`` run in FIFO order (``STREAM`` edges, lag 0).
- ``after=`` adds ``end(dep) + lag -> start(op)`` edges (cross-stream or cross-rank
  dependencies: a pipeline receive, a gradient bucket becoming ready).
- A collective over member ops (one per participating rank) ends ``transfer`` ns after its
  last member starts: members' starts feed one barrier point (``ARRIVE``), which feeds each
  member's end with its transfer (``COLLECTIVE``), as in :mod:`traincast.graph.build`.

Times are integer ns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traincast.graph.model import EdgeKind, ExecutionGraph
from traincast.plan.spec import PlanError
from traincast.simulate.engine import simulate

#: bound of the summed op durations of one plan, ns (2^61 ns, 73 years): every simulated time
#: is at most this sum plus the lags, far from int64's 2^63
MAX_TOTAL_NS = 2**61

#: op categories: what an op's time counts as in the plan's breakdown
COMPUTE, COMM, P2P, HOST = "compute", "comm", "p2p", "host"


@dataclass
class PlanTimeline:
    """Simulated ops of a plan: one row per op with ``rank, stream, name, category, phase,
    microbatch, start_ns, end_ns, dur_ns`` (int64 ns), plus the graph that produced them."""

    ops: pd.DataFrame
    graph: ExecutionGraph

    @property
    def makespan_ns(self) -> int:
        return int(self.ops["end_ns"].max()) if len(self.ops) else 0


class GraphBuilder:
    """Accumulates ops and edges; cheap enough for thousands of layouts (plain lists)."""

    def __init__(self) -> None:
        self.rank: list[int] = []
        self.stream: list[str] = []
        self.name: list[str] = []
        self.category: list[str] = []
        self.phase: list[str] = []
        self.microbatch: list[int] = []
        self.dur: list[int] = []
        self._src: list[int] = []
        self._dst: list[int] = []
        self._lag: list[int] = []
        self._kind: list[int] = []
        self._last: dict[tuple[int, str], int] = {}
        self.collective_groups: list[list[int]] = []
        # (member point, collective index, lag, kind) of the barrier edges
        self._barrier: list[tuple[int, int, int, int]] = []
        self._total_ns = 0

    def __len__(self) -> int:
        return len(self.dur)

    def _checked(self, dur_ns: float, name: str) -> int:
        """``dur_ns`` rounded to int ns (>= 0); the sum of all durations so far bounds every
        simulated time, kept below ``MAX_TOTAL_NS`` so that no time overflows int64.

        Raises:
            PlanError: a non-finite duration, or sizes whose times exceed the bound."""
        f = float(dur_ns)
        if not math.isfinite(f) or f > MAX_TOTAL_NS:
            raise PlanError(f"op {name!r} would take {f / 8.64e13:.3g} days: the sizes are "
                            "beyond what the planner simulates")
        d = max(0, int(round(f)))
        self._total_ns += d
        if self._total_ns > MAX_TOTAL_NS:
            raise PlanError(f"the ops of this plan add up to more than "
                            f"{MAX_TOTAL_NS / 8.64e13:,.0f} days: the sizes are beyond what "
                            "the planner simulates")
        return d

    def _edge(self, s: int, d: int, lag: int, kind: EdgeKind) -> None:
        self._src.append(s)
        self._dst.append(d)
        self._lag.append(int(lag))
        self._kind.append(int(kind))

    def op(self, rank: int, stream: str, name: str, dur_ns: float, *,
           category: str = COMPUTE, phase: str = "", microbatch: int = -1,
           after: Iterable[int | tuple[int, float]] = ()) -> int:
        """Append an op to ``(rank, stream)`` and return its id.

        Args:
            dur_ns: duration (rounded to int ns, clamped at 0).
            category: ``compute``, ``comm`` or ``p2p`` (for the breakdown).
            phase: free label (``fwd``, ``bwd``, ``opt``...).
            after: op ids (or ``(id, lag_ns)``) whose end must precede this op's start.
        """
        i = len(self.dur)
        d = self._checked(dur_ns, name)
        self.rank.append(int(rank))
        self.stream.append(stream)
        self.name.append(name)
        self.category.append(category)
        self.phase.append(phase)
        self.microbatch.append(int(microbatch))
        self.dur.append(d)
        self._edge(2 * i, 2 * i + 1, d, EdgeKind.EXEC)
        key = (int(rank), stream)
        prev = self._last.get(key)
        if prev is not None:
            self._edge(2 * prev + 1, 2 * i, 0, EdgeKind.STREAM)
        self._last[key] = i
        for a in after:
            j, lag = (a if isinstance(a, tuple) else (a, 0))
            self._edge(2 * int(j) + 1, 2 * i, int(round(lag)), EdgeKind.CROSS_STREAM)
        return i

    def depend(self, before: int, after: int, lag_ns: float = 0) -> None:
        """``end(before) + lag <= start(after)``."""
        self._edge(2 * before + 1, 2 * after, int(round(lag_ns)), EdgeKind.CROSS_STREAM)

    def issued_by(self, host: int, first: int, last: int | None = None) -> None:
        """Device ops ``first..last`` are issued by host op ``host``: ``first`` cannot start
        before ``host`` starts, ``last`` cannot end before it ends (launch edges). With FIFO
        order on both sides a pass takes ``max(host issue time, device time)`` when neither
        waits on the other, as in replay."""
        self._edge(2 * host, 2 * first, 0, EdgeKind.LAUNCH)
        self._edge(2 * host + 1, 2 * (first if last is None else last) + 1, 0,
                   EdgeKind.LAUNCH)

    def collective(self, members: Sequence[int], transfer_ns: float | Sequence[float]) -> None:
        """Join member ops (created with :meth:`op`, one per rank) into one collective: each
        member ends ``transfer`` ns after the last member started. ``transfer_ns`` may be one
        value or one per member (uneven all_to_all)."""
        ms = [int(m) for m in members]
        tr = ([float(transfer_ns)] * len(ms) if np.isscalar(transfer_ns)
              else [float(t) for t in transfer_ns])  # type: ignore[union-attr]
        for m, t in zip(ms, tr, strict=True):
            self.dur[m] = max(self.dur[m], self._checked(t, self.name[m]))
        # one barrier point per collective (numbered after all ops' points in graph()):
        # members' starts feed it, it feeds their ends, 2m edges instead of m(m-1)
        k = len(self.collective_groups)
        for m, t in zip(ms, tr, strict=True):
            self._barrier.append((2 * m, k, 0, int(EdgeKind.ARRIVE)))
            self._barrier.append((2 * m + 1, k, int(round(t)), int(EdgeKind.COLLECTIVE)))
        self.collective_groups.append(ms)

    def graph(self) -> ExecutionGraph:
        """The execution graph of everything added so far (points start at time 0)."""
        n = len(self.dur)
        src = np.asarray(self._src, np.int64)
        dst = np.asarray(self._dst, np.int64)
        lag = np.asarray(self._lag, np.int64)
        kind = np.asarray(self._kind, np.int8)
        # EXEC lags follow the (possibly raised) durations of collective members
        ex = kind == int(EdgeKind.EXEC)
        lag[ex] = np.asarray(self.dur, np.int64)[src[ex] // 2]
        if self._barrier:
            b = np.asarray(self._barrier, np.int64)
            barrier = 2 * n + b[:, 1]
            arrive = b[:, 3] == int(EdgeKind.ARRIVE)
            src = np.concatenate([src, np.where(arrive, b[:, 0], barrier)])
            dst = np.concatenate([dst, np.where(arrive, barrier, b[:, 0])])
            lag = np.concatenate([lag, b[:, 2]])
            kind = np.concatenate([kind, b[:, 3].astype(np.int8)])
        n_pts = 2 * n + len(self.collective_groups)
        anchor = np.full(n_pts, -1, np.int64)
        anchor[0:2 * n:2] = 0  # nothing starts before time 0
        return ExecutionGraph(
            node_event=np.full(n, -1, np.int64),
            node_rank=np.asarray(self.rank, np.int32),
            measured=np.zeros(n_pts, np.int64),
            src=src, dst=dst, lag=lag, kind=kind, anchor=anchor,
            collective_groups=[np.asarray(g, np.int64) for g in self.collective_groups],
        )

    def run(self) -> PlanTimeline:
        """Simulate and return the timeline.

        Raises:
            CyclicGraphError: the workload emitted a dependency cycle (a planner bug).
        """
        g = self.graph()
        res = simulate(g)
        t = res.times
        ops = pd.DataFrame({
            "rank": np.asarray(self.rank, np.int32),
            "stream": pd.Categorical(self.stream),
            "name": self.name,
            "category": pd.Categorical(self.category),
            "phase": pd.Categorical(self.phase),
            "microbatch": np.asarray(self.microbatch, np.int32),
            "start_ns": t[0:2 * len(self.dur):2],
            "end_ns": t[1:2 * len(self.dur):2],
        })
        ops["dur_ns"] = ops["end_ns"] - ops["start_ns"]
        return PlanTimeline(ops, g)
