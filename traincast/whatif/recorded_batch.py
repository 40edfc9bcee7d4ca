"""The batch size a trace was recorded with, read from the trace itself.

``--what-if batch_size=N`` needs the recorded batch ``B0``. It comes from the run's metadata
(``.run.json``), from ``batch_size_from``, or from the trace: the leading dimension of the
activation input of the model's first ops in the first step (the input of the first
``aten::linear``/``addmm``/``conv``/``embedding``/``layer_norm``...; for ``aten::addmm`` the
``mat1`` argument, for embeddings the index tensor). Activations keep the batch as their
leading dimension (``[B, features]``, ``[B, S, d]``, ``[B, C, H, W]``) unless the model
flattens it with other dimensions (video frames, ``[B*T, C, H, W]``; ``[B*S, d]``), so the
leading dimension is the batch or a multiple of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import orjson

from traincast.trace import arrow as A
from traincast.trace.traceset import TraceSet

#: op name -> position of its activation input
MODEL_OPS = {"aten::linear": 0, "aten::addmm": 1, "aten::mm": 0, "aten::matmul": 0,
             "aten::conv1d": 0, "aten::conv2d": 0, "aten::conv3d": 0,
             "aten::convolution": 0, "aten::embedding": 1, "aten::embedding_bag": 1,
             "aten::layer_norm": 0}
#: how many of the first model ops are looked at
FIRST_OPS = 6


@dataclass
class RecordedBatch:
    """``batch``: the leading dimension the model's first ops agree on; ``evidence``: the
    ops and input shapes it was read from; ``agree``: how many of them carry it; ``shapes``:
    those activation shapes (a sequence-first model, ``[S, B, d]``, has the batch second)."""

    batch: int
    evidence: str
    agree: int
    shapes: list[list[int]] = field(default_factory=list)

    def admits(self, batch: int) -> bool:
        """Whether ``batch`` can be the recorded batch: some dimension of the activations
        other than the last (the features) is a multiple of it -- the batch alone, flattened
        with sequence or frames, or second in a sequence-first layout."""
        return any(isinstance(d, int) and d > 0 and d % batch == 0
                   for sh in self.shapes for d in sh[:-1])


def infer_recorded_batch(ts: TraceSet) -> RecordedBatch | None:
    """The batch read from the first model ops of rank ``min`` in its first step, or None
    when the trace has no shapes or fewer than two of those ops agree on a leading
    dimension."""
    if ts.shapes.num_rows == 0:
        return None
    rows = A.to_numpy(ts.shapes.column("event"))
    ev = ts.events
    rank = A.to_numpy(ev.column("rank"))
    it = A.to_numpy(ev.column("iteration"))
    r0 = int(rank.min())
    on = (rank == r0) & (it >= 0)
    if not on.any():
        return None
    first_it = int(it[on].min())
    names = ev.column("name")
    dims_l = ts.shapes.column("input_dims").to_pylist()
    order = np.argsort(A.to_numpy(ev.column("ts"))[rows], kind="stable")
    found: list[tuple[str, list[int]]] = []
    for j in order.tolist():
        row = int(rows[j])
        if rank[row] != r0 or it[row] != first_it:
            continue
        name = names[row].as_py()
        pos = MODEL_OPS.get(name)
        if pos is None or not dims_l[j]:
            continue
        try:
            dims = orjson.loads(dims_l[j])
        except orjson.JSONDecodeError:
            continue
        if len(dims) <= pos or not isinstance(dims[pos], list) or not dims[pos]:
            continue
        lead = dims[pos][0]
        if isinstance(lead, int) and lead > 0:
            found.append((name, dims[pos]))
        if len(found) >= FIRST_OPS:
            break
    return agreed_batch(found, f"rank {r0} step {first_it}: ")


def agreed_batch(found: list[tuple[str, list[int]]], where: str = "") -> RecordedBatch | None:
    """The batch the first model ops agree on, from their ``(name, activation shape)`` in
    start order: the first op's leading dimension when at least two of them carry it, else
    None. Shared by traces (:func:`infer_recorded_batch`) and execution traces
    (:mod:`traincast.predict.from_et`)."""
    if not found:
        return None
    lead = found[0][1][0]
    agree = sum(1 for _, d in found if d[0] == lead)
    if agree < 2:
        return None
    shown = ", ".join(f"{n} {d}" for n, d in found[:3])
    return RecordedBatch(int(lead), where + shown, agree, [d for _, d in found])
