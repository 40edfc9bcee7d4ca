"""Work per event of a trace: each cpu op with recorded shapes gets its :class:`Work`
(:func:`traincast.costs.ops.registry.op_work`), and each device op (kernel, memcpy, memset) the
work of the cpu op that launched it (:func:`event_work`).

The launching op is found through the trace: device op -> ``correlation`` -> the runtime
call (``cudaLaunchKernel`` ...) -> the innermost shaped cpu op on the call's host thread that
encloses the call's midpoint; the nesting of shaped ops per thread is
:func:`traincast.graph.nesting.nest_parents` with ``overlap="sibling"``. Times in ns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import orjson

from traincast.costs.ops.base import Work
from traincast.costs.ops.registry import _family, _op_work
from traincast.graph.nesting import nest_parents
from traincast.trace import arrow as A
from traincast.trace.arrow import to_numpy
from traincast.trace.schema import GPU_WORK_KINDS, OP_FAMILIES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from traincast.trace.traceset import TraceSet



def _innermost(starts: np.ndarray, ends: np.ndarray, parent: np.ndarray,
               t: np.ndarray) -> np.ndarray:
    """Index of the innermost interval containing each ``t`` (-1 if none).

    Intervals are sorted by start and properly nested; ``parent`` is each one's enclosing
    interval (-1 for roots).
    """
    pos = np.searchsorted(starts, t, "right") - 1
    while True:
        ok = pos >= 0
        bad = np.zeros(pos.shape, bool)
        bad[ok] = ends[pos[ok]] < t[ok]
        if not bad.any():
            return pos
        pos[bad] = parent[pos[bad]]


@dataclass
class _Nesting:
    """Shaped cpu ops grouped per host thread: rows, and for each the enclosing shaped op."""

    rows: np.ndarray  # event rows of shaped cpu ops, grouped by thread, sorted by start
    parent: np.ndarray  # index into ``rows`` of the enclosing shaped op, -1 if none
    group_of: dict[tuple[int, int, int], tuple[int, int]]  # (rank, pid, tid) -> [lo, hi)


def nest_shaped_ops(rows: np.ndarray, rank: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                    ts: np.ndarray, dur: np.ndarray) -> _Nesting:
    """The event ``rows`` (shaped cpu ops) grouped per (rank, pid, tid), each group sorted by
    (start, -duration), with each op's enclosing op in the group
    (:func:`traincast.graph.nesting.nest_parents`, ``overlap="sibling"``: an op overlapping
    another without nesting, clock jitter, is its sibling). ``ts``/``dur`` in ns by row."""
    order = np.lexsort((-dur[rows], ts[rows], tid[rows], pid[rows], rank[rows]))
    rows = rows[order]
    parent = np.full(rows.size, -1, np.int64)
    group_of: dict[tuple[int, int, int], tuple[int, int]] = {}
    if rows.size:
        key = np.stack([rank[rows], pid[rows], tid[rows]], axis=1)
        change = np.ones(rows.size, bool)
        change[1:] = (key[1:] != key[:-1]).any(axis=1)
        bounds = np.flatnonzero(change).tolist() + [rows.size]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            r = rows[lo:hi]
            p = nest_parents(ts[r], ts[r] + dur[r], overlap="sibling")
            parent[lo:hi] = np.where(p >= 0, p + lo, -1)
            group_of[(int(rank[r[0]]), int(pid[r[0]]), int(tid[r[0]]))] = (lo, hi)
    return _Nesting(rows, parent, group_of)


def _nested(nest: _Nesting, s_index: np.ndarray, shaped: dict[str, np.ndarray],
            dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per shaped op (in ``shaped`` order): ``leaf`` (no shaped op nested in it has known,
    nonzero work: in ``aten::linear`` > ``aten::matmul`` > ``aten::mm`` only ``mm`` is a leaf)
    and ``nested_dur``, the summed duration of the outermost such nested ops (ns)."""
    n = nest.rows.size
    pos = s_index[nest.rows]  # nesting order -> shaped order
    work = (shaped["flops"][pos] + shaped["bytes"][pos] > 0) & shaped["known"][pos]
    # nearest ancestor with known work of every op with known work
    members = np.flatnonzero(work)
    anc = nest.parent[members].copy()
    todo = anc >= 0
    todo[todo] = ~work[anc[todo]]
    while todo.any():
        anc[todo] = nest.parent[anc[todo]]
        todo &= anc >= 0
        todo[todo] = ~work[anc[todo]]
    has = anc >= 0
    nested = np.zeros(n)
    np.add.at(nested, anc[has], dur[nest.rows[members[has]]].astype(np.float64))
    leaf = np.ones(n, bool)
    leaf[pos] = ~(nested > 0) & ~np.isin(np.arange(n), anc[has])
    nested_out = np.zeros(n)
    nested_out[pos] = nested
    return leaf, nested_out


def _col(ts: TraceSet, name: str) -> np.ndarray:
    return to_numpy(ts.events.column(name))


def _shaped_work(ts: TraceSet, cpu_rows: np.ndarray, name_idx: np.ndarray,
                 name_dict: list[str]) -> dict[str, np.ndarray]:
    """Work of the cpu ops in ``cpu_rows`` that have shapes (deduplicated by call signature)."""
    sh = ts.shapes
    ev_rows = to_numpy(sh.column("event")).astype(np.int64)
    keep = np.isin(ev_rows, cpu_rows)
    pos = np.flatnonzero(keep)
    dims = sh.column("input_dims").to_pylist()
    types = sh.column("input_types").to_pylist()
    conc = (sh.column("concrete_inputs").to_pylist()
            if "concrete_inputs" in sh.column_names else None)
    n = pos.size
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    known = np.zeros(n, bool)
    fam = np.empty(n, object)
    dtype = np.empty(n, object)
    cache: dict[tuple, Work] = {}
    rows = ev_rows[pos]
    names = name_idx[rows]
    for j, (i, code) in enumerate(zip(pos.tolist(), names.tolist(), strict=True)):
        c = conc[i] if conc is not None else None
        key = (code, dims[i], types[i], c)
        w = cache.get(key)
        if w is None:
            try:
                d = orjson.loads(dims[i]) if dims[i] else []
                t = orjson.loads(types[i]) if types[i] else []
                cc = orjson.loads(c) if c else None
            except orjson.JSONDecodeError:
                d, t, cc = None, None, None
            if isinstance(d, list) and isinstance(t, list):
                w = _op_work(name_dict[code], d, t, cc if isinstance(cc, list) else None)
            else:
                w = Work(0.0, 0.0, _family(name_dict[code]), False, "")
            cache[key] = w
        flops[j], nbytes[j], known[j], fam[j], dtype[j] = (w.flops, w.bytes, w.known, w.family,
                                                           w.dtype)
    return {"event": rows, "flops": flops, "bytes": nbytes, "known": known, "family": fam,
            "dtype": dtype}


def event_work(ts: TraceSet) -> pd.DataFrame:
    """Work of every cpu op with shapes and every device op (kernel, memcpy, memset) of ``ts``.

    Returns one row per such event, sorted by ``event`` (row of ``ts.events``), with columns
    ``event``, ``rank``, ``family``, ``flops``, ``bytes``, ``known``, ``source_event``,
    ``dtype``, ``leaf`` and ``nested_dur``:

    - a cpu op with recorded shapes (``ts.shapes``: record_shapes or the linked execution
      trace) gets its own :func:`op_work`; ``source_event`` is its own row. On CPU-only traces
      these are the ops that run.
    - a device op inherits the work of the cpu op that launched it: kernel -> ``correlation``
      -> the runtime call (``cudaLaunchKernel``...) -> the innermost cpu op with shapes on the
      runtime call's host thread that encloses the call's midpoint (``source_event``). When that
      op launched several device ops, its FLOPs and bytes are split among them in proportion to
      their measured durations (equal shares if all durations are 0), so the sums over a source
      op's device ops equal the op's work and the device ops' throughputs equal the op's. A
      memcpy/memset takes its bytes from the event itself when the reader kept them (an events
      column ``bytes``), else its share of the source op's. ``family`` is the source op's
      family when its work is known, except that memcpy/memset events are ``memcpy`` and a
      kernel launched by a copy op (a cast or strided copy run on the SMs) is
      ``elementwise``; when the work is unknown it is the event's own ``op_family``.
      ``source_event`` is -1 when no shaped op encloses the launch.

    Unknown ops have ``known=False`` and zero work. CPU ops nest (``aten::linear`` holds
    ``aten::addmm``; both carry the GEMM's work), so sum over device ops, or over cpu-op rows
    with ``leaf`` true (no nested shaped op with known nonzero work; always true for device
    ops), never over all rows. ``nested_dur`` (ns) is the time spent in the outermost nested
    ops with known work (0 for leaves), so ``dur - nested_dur`` is an op's own time.
    """
    import pandas as pd  # lazy: pandas costs ~0.15 s to import; op_work users do not need it

    ev = ts.events
    n_ev = ev.num_rows
    kind_idx, kind_dict = A.dictionary_parts(ev.column("kind"))
    name_idx, name_dict = A.dictionary_parts(ev.column("name"))
    fam_idx, fam_dict = A.dictionary_parts(ev.column("op_family"))
    rank = _col(ts, "rank").astype(np.int64)
    t0 = _col(ts, "ts")
    dur = _col(ts, "dur")
    pid = _col(ts, "pid")
    tid = _col(ts, "tid")
    corr = _col(ts, "correlation")

    def code(k: str) -> int:
        return kind_dict.index(k) if k in kind_dict else -99

    cpu_mask = kind_idx == code("cpu_op")
    cpu_rows = np.flatnonzero(cpu_mask)
    shaped = _shaped_work(ts, cpu_rows, name_idx, name_dict)
    s_rows = shaped["event"]
    order = np.argsort(s_rows, kind="stable")
    for k in shaped:
        shaped[k] = shaped[k][order]
    s_rows = shaped["event"]
    # row -> index into ``shaped`` (dense map; -1 where the event is not a shaped cpu op)
    s_index = np.full(n_ev, -1, np.int64)
    s_index[s_rows] = np.arange(s_rows.size)

    dev_mask = np.zeros(n_ev, bool)
    for k in GPU_WORK_KINDS:
        dev_mask |= kind_idx == code(k)
    dev_rows = np.flatnonzero(dev_mask)
    source = np.full(dev_rows.size, -1, np.int64)
    nest = nest_shaped_ops(s_rows, rank, pid, tid, t0, dur)
    leaf, nested_dur = _nested(nest, s_index, shaped, dur)
    if dev_rows.size and s_rows.size:
        rt_rows = np.flatnonzero((kind_idx == code("runtime")) & (corr >= 0))
        if rt_rows.size:
            rt_key = (rank[rt_rows] << 42) | corr[rt_rows]
            o = np.argsort(rt_key, kind="stable")
            rt_key, rt_rows = rt_key[o], rt_rows[o]
            d_key = (rank[dev_rows] << 42) | np.maximum(corr[dev_rows], 0)
            p = np.searchsorted(rt_key, d_key)
            p_ok = p < rt_key.size
            hit = np.zeros(dev_rows.size, bool)
            hit[p_ok] = rt_key[p[p_ok]] == d_key[p_ok]
            hit &= corr[dev_rows] >= 0
            launch = np.full(dev_rows.size, -1, np.int64)
            launch[hit] = rt_rows[p[hit]]
            lrows = launch[hit]
            src_hit = np.full(lrows.size, -1, np.int64)
            gkey = np.stack([rank[lrows], pid[lrows], tid[lrows]], axis=1)
            if lrows.size:
                uniq, inv = np.unique(gkey, axis=0, return_inverse=True)
                inv = inv.reshape(-1)
                for gi, (r_, p_, t_) in enumerate(uniq.tolist()):
                    span = nest.group_of.get((r_, p_, t_))
                    if span is None:
                        continue
                    lo, hi = span
                    sel = np.flatnonzero(inv == gi)
                    q = lrows[sel]
                    g_rows = nest.rows[lo:hi]
                    mid = t0[q] + dur[q] // 2
                    idx = _innermost(t0[g_rows], t0[g_rows] + dur[g_rows],
                                     np.where(nest.parent[lo:hi] >= 0,
                                              nest.parent[lo:hi] - lo, -1), mid)
                    src_hit[sel] = np.where(idx >= 0, g_rows[np.maximum(idx, 0)], -1)
            source[hit] = src_hit

    # split each source op's work over its device ops by duration
    d_flops = np.zeros(dev_rows.size)
    d_bytes = np.zeros(dev_rows.size)
    d_known = np.zeros(dev_rows.size, bool)
    d_fam = np.array([fam_dict[i] for i in fam_idx[dev_rows]], dtype=object)
    d_dtype = np.full(dev_rows.size, "", dtype=object)
    has = source >= 0
    if has.any():
        si = s_index[source[has]]
        w_dur = dur[dev_rows[has]].astype(np.float64)
        _, inv = np.unique(source[has], return_inverse=True)
        tot = np.bincount(inv, weights=w_dur)
        cnt = np.bincount(inv)
        share = np.where(tot[inv] > 0, w_dur / np.where(tot[inv] > 0, tot[inv], 1.0),
                         1.0 / cnt[inv])
        kn = shaped["known"][si]
        d_flops[has] = shaped["flops"][si] * share
        d_bytes[has] = shaped["bytes"][si] * share
        d_known[has] = kn
        src_fam = shaped["family"][si]
        cur = d_fam[has]
        d_fam[has] = np.where(kn, src_fam, cur)
        d_dtype[has] = shaped["dtype"][si]
    copy_kind = (kind_idx[dev_rows] == code("memcpy")) | (kind_idx[dev_rows] == code("memset"))
    # a copy op's kernel (a cast or strided copy on the SMs) is an elementwise kernel; only
    # the copy engines' memcpy/memset are "memcpy"
    d_fam[~copy_kind & d_known & (d_fam == "memcpy")] = "elementwise"
    d_fam[copy_kind] = "memcpy"
    d_flops[copy_kind & d_known] = 0.0
    if "bytes" in ev.column_names:
        ev_bytes = _col(ts, "bytes")[dev_rows]
        use = copy_kind & (ev_bytes >= 0)
        d_bytes[use] = ev_bytes[use]
        d_known[use] = True
        d_flops[use] = 0.0

    event = np.concatenate([s_rows, dev_rows])
    out = pd.DataFrame({
        "event": event.astype(np.int64),
        "rank": rank[event].astype(np.int32),
        "family": np.concatenate([shaped["family"], d_fam]),
        "flops": np.concatenate([shaped["flops"], d_flops]),
        "bytes": np.concatenate([shaped["bytes"], d_bytes]),
        "known": np.concatenate([shaped["known"], d_known]),
        "source_event": np.concatenate([s_rows, source]).astype(np.int64),
        "dtype": np.concatenate([shaped["dtype"], d_dtype]),
        "leaf": np.concatenate([leaf, np.ones(dev_rows.size, bool)]),
        "nested_dur": np.concatenate([nested_dur, np.zeros(dev_rows.size)]),
    })
    out = out.sort_values("event", kind="stable").reset_index(drop=True)
    out["family"] = pd.Categorical(out["family"], categories=list(OP_FAMILIES))
    return out
