"""Edges collected while a graph is built: per batch, point ids ``src``/``dst`` (int64, or
int32 when the builder knows every id fits), two
lags in ns (``lag`` calibrated to the measurement, ``structural`` the typical latencies; a
batch's are held as int32 when its values fit, else int64) and
an :class:`~traincast.graph.model.EdgeKind` (one per batch); negative lags are raised to 0.
The joined columns come as arrays (:meth:`EdgeLists.take`) or with the calibrated lags as a
patch on the structural ones (:meth:`EdgeLists.take_patched`: they differ on few edges). And
:class:`PointWrites`, per-point values (anchors) collected as writes and laid out once; and
:func:`edges_into`, the edges of a batch into given points."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from traincast.graph.model import EdgeKind, lags_fit


class Deferred:
    """A batch of ``size`` edges (lag = structural lag) whose columns are written when the
    batches are joined, straight into the joined arrays: ``fill(src, dst, lag)`` gets the
    views of its place (``src``/``dst`` in the ids' type, ``lag`` int64, or int32 when
    every batch's lags fit it: ``narrow`` says the filler's do) and writes them (lags
    raised to 0 by the filler). A large batch is then never a batch of its own."""

    def __init__(self, size: int, fill: Callable[[np.ndarray, np.ndarray, np.ndarray], None],
                 *, narrow: bool = False) -> None:
        self.size = size
        self.fill = fill
        self.narrow = narrow


def _held(lags: np.ndarray) -> np.ndarray:
    """A batch's lags (int64, >= 0) as they are held until the join: int32 when every value
    fits (half the bytes while the build's batches pile up), else as given."""
    return lags.astype(np.int32) if lags_fit(lags, np.int32) else lags


class EdgeLists:
    """Edges with two lags each: ``lag`` calibrated to the measurement (exact) and
    ``structural`` (typical latencies); the edge set is the same in both modes."""

    def __init__(self, ids: type = np.int64) -> None:
        #: integer type the point ids are kept in (int32 when the caller knows they fit)
        self.ids = ids
        #: per batch: arrays, or the same :class:`Deferred` in all four lists
        self.src: list[np.ndarray | Deferred] = []
        self.dst: list[np.ndarray | Deferred] = []
        self.lag: list[np.ndarray | Deferred] = []
        self.structural: list[np.ndarray | Deferred] = []
        #: the EdgeKind of each batch
        self.kind: list[int] = []

    def add(self, src: np.ndarray, dst: np.ndarray, lag: np.ndarray, kind: EdgeKind,
            structural: np.ndarray | None = None, *, owned: bool = False) -> None:
        """Add a batch. ``owned``: ``lag`` is the caller's to give away (an int64 array
        no one else holds): raised to 0 in place and kept, not copied."""
        src = np.asarray(src, self.ids)
        if src.size == 0:
            return
        self.src.append(src)
        self.dst.append(np.asarray(dst, self.ids))
        if owned and isinstance(lag, np.ndarray) and lag.dtype == np.int64:
            exact = _held(np.maximum(lag, 0, out=lag))
        else:
            exact = _held(np.maximum(np.asarray(lag, np.int64), 0))
        self.lag.append(exact)
        self.structural.append(exact if structural is None else
                               _held(np.maximum(np.asarray(structural, np.int64), 0)))
        self.kind.append(int(kind))

    def add_deferred(self, batch: Deferred, kind: EdgeKind) -> None:
        """Add a batch written when the batches are joined (:class:`Deferred`; its lags are
        both the calibrated and the structural ones)."""
        if batch.size == 0:
            return
        for parts in (self.src, self.dst, self.lag, self.structural):
            parts.append(batch)
        self.kind.append(int(kind))

    def _kinds(self) -> np.ndarray:
        """int8[E]: the kind of every edge, batch by batch."""
        return np.repeat(np.array(self.kind, np.int8), [a.size for a in self.src])

    def size(self) -> int:
        """Edges added so far (the id the next batch's first edge gets once joined)."""
        return sum(a.size for a in self.src)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(src, dst, exact lag, structural lag, kind), the lists kept (a deferred batch is
        written again)."""
        return self._join(patched=False, keep=True)

    def take(self) -> tuple[np.ndarray, ...]:
        """:meth:`arrays`, emptying the lists as it goes, so a whole-graph column and its
        batches are never all held at once (the peak of the graph build); ``src``/``dst``
        come as :attr:`ids`."""
        return self._join(patched=False, keep=False)

    def take_patched(self) -> tuple[np.ndarray, ...]:
        """:meth:`take` with the calibrated lags as a patch on the structural ones: ``(src,
        dst, structural lag, index, values, kind)``, ``index`` (int64, ascending) the edges
        whose calibrated lag differs, ``values`` (int64) those lags; the whole calibrated
        column is never laid out (a batch added without ``structural`` has none). The
        structural lags are int32 when every batch's fit it (each array batch's values,
        each deferred batch's ``narrow``), else int64."""
        return self._join(patched=True, keep=False)

    def _join(self, *, patched: bool, keep: bool) -> tuple[np.ndarray, ...]:
        """The batches joined into whole columns, each batch copied into its place (and
        dropped unless ``keep``) or, deferred, written there."""
        kind = self._kinds()
        sizes = [a.size for a in self.src]
        total = int(sum(sizes))
        src, dst = np.empty(total, self.ids), np.empty(total, self.ids)
        narrow = patched and all(  # (into int32 straight: no int64 column narrowed after)
            b.narrow if isinstance(b, Deferred) else lags_fit(b, np.int32)
            for b in self.structural)
        structural = np.empty(total, np.int32 if narrow else np.int64)
        exact = None if patched else np.empty(total, np.int64)
        idx, val = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        deferred = []
        off = 0
        for i, size in enumerate(sizes):
            at = slice(off, off + size)
            batch = self.src[i]
            if isinstance(batch, Deferred):
                deferred.append((at, batch))
            else:
                src[at], dst[at], structural[at] = batch, self.dst[i], self.structural[i]
                ex, st = self.lag[i], self.structural[i]
                if exact is not None:
                    exact[at] = ex
                elif ex is not st:
                    d = np.flatnonzero(ex != st)
                    idx.append(d + off)
                    val.append(ex[d])
            if not keep:  # (a structural batch may alias its lag batch: both dropped)
                self.src[i] = self.dst[i] = self.lag[i] = self.structural[i] = None
            off += size
        for at, batch in deferred:
            batch.fill(src[at], dst[at], structural[at])
            if exact is not None:
                exact[at] = structural[at]
        if not keep:
            for parts in (self.src, self.dst, self.lag, self.structural, self.kind):
                parts.clear()
        if patched:
            return src, dst, structural, np.concatenate(idx), np.concatenate(val), kind
        return src, dst, exact, structural, kind


class PointWrites:
    """``points[idx] = values`` assignments (as on an int64 array, scalars broadcast)
    recorded in order and applied by :meth:`array`: a per-point column most of whose points
    keep the fill value is laid out once, at its final size, after the build's peak."""

    def __init__(self) -> None:
        self.writes: list[tuple[np.ndarray, np.ndarray | int]] = []

    def __setitem__(self, idx: np.ndarray, values: np.ndarray | int) -> None:
        self.writes.append((np.asarray(idx), values))

    def sparse(self, fill: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """(points ascending, values): what :meth:`array` holds other than ``fill``."""
        if not self.writes:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        idx = np.concatenate([i.ravel() for i, _ in self.writes]).astype(np.int64)
        val = np.concatenate([np.broadcast_to(np.asarray(v, np.int64), i.shape).ravel()
                              for i, v in self.writes])
        # the last write of each point wins: sort by point, ties in write order
        o = np.argsort(idx, kind="stable")
        idx, val = idx[o], val[o]
        last = np.r_[idx[1:] != idx[:-1], True] if idx.size else np.empty(0, bool)
        idx, val = idx[last], val[last]
        keep = val != fill
        return idx[keep], val[keep]

    def array(self, size: int, fill: int = -1) -> np.ndarray:
        """int64[size]: ``fill`` with every recorded write applied, in order."""
        out = np.full(size, fill, np.int64)
        for idx, values in self.writes:
            out[idx] = values
        return out


def edges_into(dst: np.ndarray, lo: int, points: np.ndarray) -> np.ndarray:
    """int64 per point of ``points``: ``lo +`` the position in ``dst`` of the edge into it
    (-1: none). ``dst`` holds each point at most once (a THREAD batch: the chains are
    disjoint); one pass over it with a mark per point, the few hits sorted."""
    out = np.full(points.size, -1, np.int64)
    if points.size == 0 or dst.size == 0:
        return out
    top = int(max(int(dst.max()), int(points.max()))) + 1
    mark = np.zeros(top, bool)
    mark[points] = True
    hit = np.flatnonzero(mark[dst])
    del mark
    at = dst[hit]
    o = np.argsort(at, kind="stable")
    at, hit = at[o], hit[o]
    pos = np.clip(np.searchsorted(at, points), 0, max(at.size - 1, 0))
    found = at[pos] == points if at.size else np.zeros(points.size, bool)
    out[found] = lo + hit[pos[found]]
    return out
