"""Matching the nodes of a PyTorch execution trace (ET) to the Kineto host events of the same
rank: :func:`link_execution_trace` (by ``rf_id`` when both sides record it, else by op names in
order, per thread), with the score that refuses an ET of another run.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traincast.errors import ExecutionTraceMismatchError
from traincast.trace import arrow as A
from traincast.trace.readers.et import ExecutionTrace

__all__ = [
    "LINK_SCHEMA",
    "MAX_NAME_CONFLICT_FRACTION",
    "MIN_MATCH_SCORE",
    "link_execution_trace",
]

#: Arrow schema of the table returned by :func:`link_execution_trace`.
LINK_SCHEMA = pa.schema([pa.field("node_id", pa.int64()), pa.field("event", pa.int64())])

#: Below this match score (see :func:`link_execution_trace`) an ET and a Kineto trace are
#: declared to come from different runs. Measured on the samples: every same-run pair scores
#: 1.00 (dlrm ranks 0-7: 1672/1672 nodes; linear 928/928; HTA simple_add 36/36; a torch 2.13
#: ET in rf_id mode 112/112) except a gloo run at 0.95 (18/19, its process-group init node was
#: recorded before the profiler started); different runs score 0.08-0.17 (linear ET vs dlrm
#: Kineto, dlrm vs linear, HTA vs dlrm) and 0.46 for the worst case found, a small torch 2.13
#: MLP's ET against linear's (also MLP) Kineto trace, where a fragment of identical op names
#: aligns. 0.6 leaves room on both sides. Two runs of the same program with the same op
#: sequence (dlrm rank 0 ET vs rank 3 Kineto: 1.00) cannot be told apart by names and order.
MIN_MATCH_SCORE = 0.6

#: In rf_id mode, above this fraction of rf_id hits whose names differ, the pair is declared to
#: come from different runs (a same-run pair has equal names on every shared rf_id).
MAX_NAME_CONFLICT_FRACTION = 0.1

_LOOKAHEAD = 64  # order matching: how far either sequence may skip to resync (PARAM uses 20)
_CONFIRM = 3  # order matching: codes that must agree after a skip for it to count as confirmed
_NGRAM = 4  # order matching: n-gram length used to find where the ET sits in the Kineto thread
_MAX_VOTES = 2_000_000  # cap on n-gram votes per thread pair (subsample ET positions above it)

_ROOT_RE = re.compile(r"^\[pytorch\|profiler\|execution_(graph|trace)\|(process|thread)\]$")


def link_execution_trace(
    et: ExecutionTrace,
    events: pa.Table,
    *,
    path: str | Path | None = None,
    min_match_score: float = MIN_MATCH_SCORE,
) -> pa.Table:
    """Match ET nodes to the Kineto host events of the same rank.

    Args:
        et: the execution trace.
        events: Kineto events (row index = event row) with at least ``name``, ``kind``
            (string or dictionary), ``ts`` (int64 ns), ``tid``, ``external_id`` and ``rf_id``
            (int64; -1 or 0 = none). Optional ``dur`` (ns) and ``device`` are used if present.
        path: the Kineto file, named in errors (defaults to the ET file).
        min_match_score: see :data:`MIN_MATCH_SCORE`.

    Returns:
        :data:`LINK_SCHEMA` table ``(node_id, event)`` of matched pairs, sorted by node id, at
        most one event per node and one node per event. Its schema metadata holds ``method``
        (``rf_id``, ``order`` or ``none``), ``match_fraction`` (matched / candidate ET nodes)
        and ``score`` (the value checked against ``min_match_score``).

    Candidates are ET nodes other than the process/thread roots, and events of kind
    ``cpu_op``/``annotation`` on host threads: the categories an ET records (HTA
    ``hta/common/execution_trace.py`` ``EXECUTION_TRACE_SUPPORTED_EVENTS``).

    * ``rf_id`` mode, when candidate events and ET nodes both carry ``rf_id > 0`` (Kineto's
      ``Record function id``, written by newer PyTorch, e.g. 2.13): pairs share ``rf_id`` and
      ``name``, the join of Chakra's ``TraceLinker``. Score = matched / candidate ET nodes.
    * ``order`` mode otherwise: none of the dlrm, linear or HTA samples has ``Record function
      id``. As in PARAM ``train/compute/python/tools/trace_link.py`` ``exact_match`` (ET nodes
      by id vs Kineto cpu_op/user_annotation by ts, equal names within a +-20 window), ET nodes
      in id order are aligned with Kineto events in start order by name, but here per thread:
      ET threads are paired with Kineto threads by n-gram votes, the ET's place in a longer
      Kineto thread is the offset with most votes (for later threads, the well-voted offset
      whose start time fits the ET's global id order against threads already matched), and
      either side may skip up to 64 entries to resync. Score = matched / (candidate ET nodes
      + Kineto events spanned by the matches - matched): events inside the matched window
      that the ET lacks count against it, so a fragment of a similar model does not pass.
      HTA instead assumes ``External id == rf_id`` when their ranges overlap; that holds for
      the HTA sample (36/36) but not for dlrm (External id - rf_id is +1 then -683 on the main
      thread of rank 4, +234 on its autograd thread) or linear, so it is not used.

    When the Kineto trace holds several iterations and the ET one, and no ``rf_id`` exists,
    nothing tells which identical iteration the ET recorded: the best-voted one (earliest on
    ties) is taken, exact for names and shapes but maybe with a neighbour's timings. (linear:
    Kineto has 40 steps; the ET equals steps 2-40, not step 1, whose ``zero_grad`` had no
    gradients to zero; step 2 is linked, both threads, 928/928 nodes.)

    Raises:
        ExecutionTraceMismatchError: score below ``min_match_score`` or (rf_id mode) more
            than :data:`MAX_NAME_CONFLICT_FRACTION` of shared rf_ids naming different ops:
            the two files come from different runs.
    """
    where = path if path is not None else et.path
    et_name = Path(et.path).name if et.path else "the execution trace"
    names_et, node_ids, node_rf, node_tid = _et_candidates(et)
    n_cand = len(node_ids)
    if n_cand == 0:
        return _link_table([], [], "none", 1.0, 1.0)
    cand = _event_candidates(events)

    if (cand["rf_id"] > 0).any() and (node_rf > 0).any():
        method = "rf_id"
        pairs_node, pairs_ev, conflicts, hits = _match_rf(
            node_ids, names_et, node_rf, cand["row"], cand["name"], cand["rf_id"]
        )
        if hits and conflicts / hits > MAX_NAME_CONFLICT_FRACTION:
            raise ExecutionTraceMismatchError(
                f"{et_name} does not belong to this Kineto trace: {conflicts} of {hits} shared "
                "record-function ids name different ops",
                where,
            )
        score = len(pairs_node) / n_cand
    else:
        method = "order"
        pairs_node, pairs_ev, span = _match_order(node_ids, names_et, node_tid, cand)
        m = len(pairs_node)
        score = m / (n_cand + span - m) if m else 0.0

    frac = len(pairs_node) / n_cand
    if score < min_match_score:
        raise ExecutionTraceMismatchError(
            f"{et_name} does not belong to this Kineto trace: {len(pairs_node)} of {n_cand} "
            f"ET nodes match its host events by {method}, score {score:.2f} < "
            f"{min_match_score:.2f}",
            where,
        )
    return _link_table(pairs_node, pairs_ev, method, frac, score)


# --------------------------------------------------------------------------------------------
# Linking
# --------------------------------------------------------------------------------------------


def _et_candidates(et: ExecutionTrace) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    nodes = et.nodes
    names = nodes.column("name").to_pylist()
    keep = np.array([_ROOT_RE.match(s) is None for s in names], dtype=bool)
    ids = A.to_numpy(nodes.column("id"))[keep]
    rf = A.to_numpy(nodes.column("rf_id"))[keep]
    tid = A.to_numpy(nodes.column("tid"))[keep]
    kept_names = [s for s, k in zip(names, keep, strict=True) if k]
    return kept_names, ids, rf, tid


#: event kinds that an ET node can link to
_HOST_KINDS = frozenset(("cpu_op", "annotation"))


def _host_kind(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """bool[rows]: the ``kind`` (string or string dictionary) is a host kind (not null)."""
    arr = A.combined(col)
    if isinstance(arr, pa.DictionaryArray):
        values = A.take_strings(arr.dictionary, np.arange(len(arr.dictionary)))
        hit = np.array([v in _HOST_KINDS for v in values] + [False], bool)
        return hit[A.filled(arr.indices, -1)]  # a null row: the last, False
    return np.fromiter((v in _HOST_KINDS for v in A.take_strings(arr, np.arange(len(arr)))),
                       bool, len(arr))


def _event_candidates(events: pa.Table) -> dict[str, Any]:
    """Host events (``cpu_op`` / ``annotation`` kind, off device: ``device`` < 0 where the
    column exists): their rows and columns (nulls filled), read from the buffers (Arrow's
    compute functions import pandas)."""
    mask = _host_kind(events.column("kind"))
    if "device" in events.column_names:
        mask &= A.filled(events.column("device"), 0) < 0
    rows = np.flatnonzero(mask)

    def col(name: str, default: int) -> np.ndarray:
        if name not in events.column_names:
            return np.full(len(rows), default, dtype=np.int64)
        return A.filled(events.column(name), default)[rows].astype(np.int64)

    names = A.take_strings(events.column("name"), rows)
    return {
        "row": rows.astype(np.int64),
        "name": names,
        "ts": col("ts", 0),
        "dur": col("dur", 0),
        "tid": col("tid", -1),
        "external_id": col("external_id", -1),
        "rf_id": col("rf_id", -1),
    }


def _match_rf(
    node_ids: np.ndarray,
    names_et: list[str],
    node_rf: np.ndarray,
    ev_rows: np.ndarray,
    ev_names: list[str],
    ev_rf: np.ndarray,
) -> tuple[list[int], list[int], int, int]:
    by_rf: dict[int, list[int]] = defaultdict(list)
    for k, r in enumerate(ev_rf.tolist()):
        if r > 0:
            by_rf[r].append(k)
    used: set[int] = set()
    out_n: list[int] = []
    out_e: list[int] = []
    conflicts = hits = 0
    for nid, name, r in zip(node_ids.tolist(), names_et, node_rf.tolist(), strict=True):
        ks = by_rf.get(r) if r > 0 else None
        if not ks:
            continue
        hits += 1
        for k in ks:
            if k not in used and ev_names[k] == name:
                used.add(k)
                out_n.append(nid)
                out_e.append(int(ev_rows[k]))
                break
        else:
            conflicts += 1
    return out_n, out_e, conflicts, hits


def _ngram_hash(codes: np.ndarray, n: int) -> np.ndarray:
    """Hash of every window of ``n`` consecutive codes (wrapping uint64 arithmetic)."""
    m = len(codes) - n + 1
    if m <= 0 or n <= 0:
        return np.zeros(0, dtype=np.uint64)
    c = codes.astype(np.uint64)
    h = np.zeros(m, dtype=np.uint64)
    mult = np.uint64(1_000_003)
    for t in range(n):
        h = h * mult + c[t : t + m]
    return h


def _offset_votes(et_codes: np.ndarray, ev_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate offsets ``j - i`` (ET position i -> Kineto position j) and their n-gram votes.

    Every ET n-gram votes for each Kineto position holding the same n-gram; a repeated
    iteration in the Kineto thread shows up as several offsets with similar votes.
    """
    n = min(_NGRAM, len(et_codes))  # threads shorter than an n-gram vote with what they have
    he, hk = _ngram_hash(et_codes, n), _ngram_hash(ev_codes, n)
    empty = np.zeros(0, dtype=np.int64)
    if len(he) == 0 or len(hk) == 0:
        return empty, empty
    order = np.argsort(hk, kind="stable")
    hs = hk[order]
    lo = np.searchsorted(hs, he, "left")
    cnt = np.searchsorted(hs, he, "right") - lo
    pos = np.arange(len(he))
    total = int(cnt.sum())
    if total == 0:
        return empty, empty
    if total > _MAX_VOTES:
        step = int(np.ceil(total / _MAX_VOTES))
        pos, lo, cnt = pos[::step], lo[::step], cnt[::step]
        total = int(cnt.sum())
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt)
    kpos = order[starts + np.arange(total)]
    offsets = kpos - np.repeat(pos, cnt)
    vals, counts = np.unique(offsets, return_counts=True)
    return vals.astype(np.int64), counts.astype(np.int64)


def _align(a: list[int], b: list[int], start: int) -> list[tuple[int, int]]:
    """Greedy alignment of code sequences a (ET) and b (Kineto) from b[start]; (i, j) pairs.

    Equal codes match and both advance; two neighbours swapped match crosswise (events
    starting in the same microsecond). On a mismatch, the candidate resyncs are skipping
    Kineto events up to the next occurrence of ``a[i]`` or skipping ET nodes up to the next
    occurrence of ``b[j]`` (each within the look-ahead); a resync confirmed by the next
    ``_CONFIRM`` codes agreeing is preferred, then the shorter skip; with no resync both advance.
    """
    pairs: list[tuple[int, int]] = []
    na, nb = len(a), len(b)
    i, j = 0, max(0, start)
    look = _LOOKAHEAD
    conf = _CONFIRM
    while i < na and j < nb:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        ai, bj = a[i], b[j]
        if i + 1 < na and j + 1 < nb and a[i + 1] == bj and b[j + 1] == ai:
            pairs.append((i, j + 1))  # two events swapped within one timestamp
            pairs.append((i + 1, j))
            i += 2
            j += 2
            continue
        opts = []
        for d in range(1, min(look, nb - j)):
            if b[j + d] == ai:
                ok = a[i : i + conf] == b[j + d : j + d + conf]
                opts.append((not ok, d, 0))
                if ok:
                    break
        for d in range(1, min(look, na - i)):
            if a[i + d] == bj:
                ok = a[i + d : i + d + conf] == b[j : j + conf]
                opts.append((not ok, d, 1))
                if ok:
                    break
        if not opts:
            i += 1
            j += 1
            continue
        _, d, side = min(opts)
        if side == 0:
            j += d
        else:
            i += d
    return pairs


def _match_order(
    node_ids: np.ndarray,
    names_et: list[str],
    node_tid: np.ndarray,
    cand: dict[str, Any],
) -> tuple[list[int], list[int], int]:
    """Order-mode matching; returns (node ids, event rows, Kineto events spanned by matches)."""
    codes: dict[str, int] = {}
    et_codes = np.array([codes.setdefault(s, len(codes)) for s in names_et], dtype=np.int64)
    ev_codes = np.array([codes.setdefault(s, len(codes)) for s in cand["name"]], dtype=np.int64)
    ev_ts = cand["ts"]

    # Kineto host events per thread in start order. Within one microsecond the order is
    # ambiguous; the External id is assigned in start order per thread (parents before
    # children), so it breaks ties, then the longer event first.
    ev_tid = cand["tid"]
    order = np.lexsort((-cand["dur"], cand["external_id"], ev_ts, ev_tid))
    k_threads: dict[int, np.ndarray] = {}
    if len(order):
        cuts = np.flatnonzero(np.diff(ev_tid[order])) + 1
        for chunk in np.split(order, cuts):
            k_threads[int(ev_tid[chunk[0]])] = chunk
    # ET nodes per thread in id (= start) order; node_ids is sorted
    e_threads = {int(t): np.flatnonzero(node_tid == t) for t in np.unique(node_tid).tolist()}

    # pair ET threads with Kineto threads, best vote count first
    votes: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    scored = []
    for et_t, e_idx in e_threads.items():
        for k_t, k_idx in k_threads.items():
            vals, counts = _offset_votes(et_codes[e_idx], ev_codes[k_idx])
            if len(counts):
                votes[et_t, k_t] = (vals, counts)
                scored.append((int(counts.max()), len(e_idx), et_t, k_t))
    scored.sort(reverse=True)
    used_e: set[int] = set()
    used_k: set[int] = set()
    chosen: list[tuple[int, int]] = []
    for _, _, et_t, k_t in scored:
        if et_t not in used_e and k_t not in used_k:
            used_e.add(et_t)
            used_k.add(k_t)
            chosen.append((et_t, k_t))
    # largest ET thread first; later threads pick, among their well-voted offsets, the one
    # whose start time fits between the already matched nodes of neighbouring ids (ET ids are
    # the global start order, Kineto ts the start time): this keeps all threads on the same
    # iteration when the Kineto trace repeats it.
    chosen.sort(key=lambda p: -len(e_threads[p[0]]))
    m_ids: list[int] = []
    m_ts: list[int] = []
    out_n: list[int] = []
    out_e: list[int] = []
    span = 0
    for et_t, k_t in chosen:
        e_idx, k_idx = e_threads[et_t], k_threads[k_t]
        vals, counts = votes[et_t, k_t]
        good = counts >= max(1, counts.max() // 2)
        cvals, ccounts = vals[good], counts[good]
        if not m_ids:
            off = int(cvals[np.argmax(ccounts)])  # ties: earliest offset
        else:
            first_id = int(node_ids[e_idx[0]])
            ids_arr = np.asarray(m_ids)
            srt = np.argsort(ids_arr)
            ids_s, ts_s = ids_arr[srt], np.asarray(m_ts)[srt]
            p = int(np.searchsorted(ids_s, first_id))
            lo_ts = float(ts_s[:p].max()) if p > 0 else -np.inf
            hi_ts = float(ts_s[p:].min()) if p < len(ts_s) else np.inf
            t = ev_ts[k_idx[np.clip(cvals, 0, len(k_idx) - 1)]].astype(float)
            viol = np.maximum(0.0, np.maximum(lo_ts - t, t - hi_ts))
            near = np.minimum(np.abs(t - lo_ts), np.abs(hi_ts - t))
            fits = viol == viol.min()
            pool = fits & (ccounts >= 0.9 * ccounts[fits].max())
            best = np.flatnonzero(pool)[np.argmin(near[pool])]
            off = int(cvals[best])
        pairs = _align(et_codes[e_idx].tolist(), ev_codes[k_idx].tolist(), off)
        if not pairs:
            continue
        span += pairs[-1][1] - pairs[0][1] + 1
        pi, pj = np.asarray(pairs, np.int64).T
        nid = node_ids[e_idx[pi]].tolist()
        k = k_idx[pj]
        out_n += nid
        out_e += cand["row"][k].tolist()
        m_ids += nid
        m_ts += ev_ts[k].tolist()
    if out_n:
        srt = np.argsort(np.asarray(out_n), kind="stable")
        out_n = np.asarray(out_n)[srt].tolist()
        out_e = np.asarray(out_e)[srt].tolist()
    return out_n, out_e, span


def _link_table(
    nodes: list[int], evs: list[int], method: str, frac: float, score: float
) -> pa.Table:
    meta = {
        b"method": method.encode(),
        b"match_fraction": f"{frac:.6f}".encode(),
        b"score": f"{score:.6f}".encode(),
    }
    return pa.Table.from_arrays(
        [A.column(nodes, pa.int64()), A.column(evs, pa.int64())],
        schema=LINK_SCHEMA.with_metadata(meta),
    )
