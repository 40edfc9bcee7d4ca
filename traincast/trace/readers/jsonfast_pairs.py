"""Compiled (numba) kernels of the pair table of ``Input Dims`` / ``Input type`` texts.

The Kineto events of a job repeat a few hundred distinct (``Input Dims``, ``Input type``)
pairs of raw JSON texts in every file. :func:`intern_pairs` gives each pair of an event an
id in a table that lives across files (:class:`traincast.trace.readers.kineto_shapes.
PairTable` holds its arrays), so that the checks and the text of a pair are made once per
process, not once per file. :func:`gather_pairs` copies the texts of a list of ids one after
the other.

Table arrays (see :func:`intern_pairs`): ``table`` int64[2**k] (slot -> id, -1 free),
``hashes`` uint64[cap] (id -> hash), ``pos`` int64[cap, 3] (id -> start of the dims text,
start of the types text = end of the dims text, end of the types text, in ``store``),
``store`` uint8[size] (the texts), ``counts`` int64[3] (ids, bytes of ``store`` used, ids
placed in ``table``: fewer after the caller gave a new, larger ``table``).
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.util.numba_cache import quick_loads

_MIX = np.uint64(0xFF51AFD7ED558CCD)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, nogil=True)
def _hash(b, ds, de, ts, te):  # pragma: no cover - compiled
    """A hash of the texts ``b[ds:de]`` and ``b[ts:te]`` (multiply-by-31 sums, mixed)."""
    h = np.uint64(de - ds) * _GOLDEN
    for j in range(ds, de):
        h = h * np.uint64(31) + np.uint64(b[j])
    h = (h ^ (h >> np.uint64(33))) * _MIX + np.uint64(te - ts)
    for j in range(ts, te):
        h = h * np.uint64(31) + np.uint64(b[j])
    h = (h ^ (h >> np.uint64(33))) * _MIX
    return h ^ (h >> np.uint64(33))


@njit(cache=True, nogil=True)
def _place(table, hashes, g):  # pragma: no cover - compiled
    mask = table.size - 1
    j = np.int64(hashes[g] & np.uint64(mask))
    while table[j] >= 0:
        j = (j + 1) & mask
    table[j] = g


@njit(cache=True, nogil=True)
def intern_pairs(b, spans, rows, k0, gids, table, hashes, pos, store,
                 counts):  # pragma: no cover - compiled
    """Ids of the pairs of texts ``b[spans[r, 4]:spans[r, 5]]``, ``b[spans[r, 6]:spans[r,
    7]]`` (an absent span: the empty text) of the rows ``rows[k0:]`` into ``gids``, adding
    new pairs to the table (module docstring). Returns the ``k`` where it stopped: ``rows.
    size``, or the first row that needs more room (``hashes`` / ``pos`` full, ``store`` too
    small or ``table`` over half full): the caller grows them and calls again from ``k``."""
    for g in range(counts[2], counts[0]):  # ids not yet placed in a new table
        _place(table, hashes, g)
    counts[2] = counts[0]
    mask = table.size - 1
    for k in range(k0, rows.size):
        r = rows[k]
        ds, de = spans[r, 4], spans[r, 5]
        ts, te = spans[r, 6], spans[r, 7]
        if ds < 0:
            ds = de = 0
        if ts < 0:
            ts = te = 0
        ld, lt = de - ds, te - ts
        h = _hash(b, ds, de, ts, te)
        j = np.int64(h & np.uint64(mask))
        found = -1
        while table[j] >= 0:
            g = table[j]
            if hashes[g] == h and pos[g, 1] - pos[g, 0] == ld and pos[g, 2] - pos[g, 1] == lt:
                p = pos[g, 0]
                same = True
                for x in range(ld):
                    if store[p + x] != b[ds + x]:
                        same = False
                        break
                p = pos[g, 1]
                for x in range(lt if same else 0):
                    if store[p + x] != b[ts + x]:
                        same = False
                        break
                if same:
                    found = g
                    break
            j = (j + 1) & mask
        if found < 0:
            g = counts[0]
            u = counts[1]
            if g >= hashes.size or u + ld + lt > store.size or 2 * (g + 1) > table.size:
                return k
            store[u:u + ld] = b[ds:de]
            store[u + ld:u + ld + lt] = b[ts:te]
            pos[g, 0] = u
            pos[g, 1] = u + ld
            pos[g, 2] = u + ld + lt
            hashes[g] = h
            table[j] = g
            counts[0] = g + 1
            counts[1] = u + ld + lt
            counts[2] = g + 1
            found = g
        gids[k] = found
    return rows.size


@njit(cache=True, nogil=True)
def gather_pairs(store, pos, gids, which):  # pragma: no cover - compiled
    """The texts ``which`` (0 ``Input Dims``, 1 ``Input type``) of the ids ``gids`` one
    after the other, and their int64 offsets."""
    m = gids.size
    off = np.zeros(m + 1, np.int64)
    for k in range(m):
        g = gids[k]
        off[k + 1] = off[k] + pos[g, which + 1] - pos[g, which]
    out = np.empty(off[m], np.uint8)
    for k in range(m):
        g = gids[k]
        out[off[k]:off[k + 1]] = store[pos[g, which]:pos[g, which + 1]]
    return out, off


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
