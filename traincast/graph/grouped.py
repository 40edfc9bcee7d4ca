"""Statistics and searches over rows grouped by integer keys (rank, stream, thread, API
name), for the graph builder and its wait models: numpy calls whose count does not grow with
the number of groups."""

from __future__ import annotations

import numpy as np

_I16 = np.iinfo(np.int16)


def lexsort(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """``np.lexsort(keys)`` (last key primary, stable), the same permutation, faster.

    Integer keys are packed, primary first, into as few int64 composites as hold their
    spans (``key - min`` shifted by the bits of the keys after it; 63 bits per composite):
    the order of a composite is the lexicographic order of its keys. One composite is sorted
    by one stable argsort (a merge of the runs already in order); several are cut into
    16-bit digits and sorted by ``np.lexsort`` of the digits, each a radix sort. Other keys
    (floats, spans of 63 bits or more) go to ``np.lexsort``, keys that fit int16 (ranks,
    devices, streams) cast to it first (radix)."""
    packed = _packed(keys)
    if packed is None:
        return np.lexsort(tuple(_narrow(k) for k in keys))
    if len(packed) == 1:
        return np.argsort(packed[0][0], kind="stable")
    digits = []  # most significant first
    for c, bits in packed:
        for shift in range(((bits + 15) // 16 - 1) * 16, -1, -16):
            digits.append(((c >> shift) & 0xFFFF).astype(np.uint16))
    return np.lexsort(tuple(digits[::-1]))


def _packed(keys: tuple[np.ndarray, ...]) -> list[tuple[np.ndarray, int]] | None:
    """The integer ``keys`` (last primary) packed into int64 composites, primary first, each
    with its bits; None when a key is not an integer array, is empty or spans 2**62 or
    more."""
    out: list[tuple[np.ndarray, int]] = []
    cur: np.ndarray | None = None
    cur_bits = 0
    for k in keys[::-1]:
        if k.dtype.kind not in "iu" or k.size == 0:
            return None
        lo = int(k.min())
        bits = (int(k.max()) - lo).bit_length()
        if bits > 62:
            return None
        if cur is not None and cur_bits + bits <= 63:
            if bits:
                cur <<= bits
                cur |= _offset(k, lo)
                cur_bits += bits
            continue
        if cur is not None:
            out.append((cur, cur_bits))
        cur = _offset(k, lo)  # a fresh array
        cur_bits = bits
    if cur is None:
        return None
    out.append((cur, cur_bits))
    return out


def _offset(key: np.ndarray, lo: int) -> np.ndarray:
    """int64 ``key - lo`` (``lo`` its minimum; a fresh array)."""
    if key.dtype == np.uint64:
        return (key - np.uint64(lo)).astype(np.int64)
    return key.astype(np.int64) - lo


def _narrow(key: np.ndarray) -> np.ndarray:
    """``key`` as int16 when it is an integer array whose values all fit, else itself."""
    if key.dtype.kind not in "iu" or key.itemsize <= 2 or key.size == 0:
        return key
    if int(key.min()) < _I16.min or int(key.max()) > _I16.max:
        return key
    return key.astype(np.int16)


def runs(*keys: np.ndarray) -> np.ndarray:
    """bool per position of arrays sorted by ``keys``: the first of its run of equal keys."""
    n = keys[0].size
    new = np.zeros(n, bool)
    new[:1] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return new


def search_in_blocks(block: np.ndarray, value: np.ndarray, q_block: np.ndarray,
                     q_value: np.ndarray, side: str = "right") -> np.ndarray:
    """Per query, ``np.searchsorted(value[blk], q, side)`` within its block, as a position in
    the whole arrays (``block``/``value`` sorted by (block, value); ``block`` int64 ids):
    the block's start when every value is after the query. Blocks absent from ``block``
    give the position where they would start."""
    if value.size == 0 or q_value.size == 0:
        return np.searchsorted(block, q_block, "left")
    lo = int(min(value.min(), q_value.min()))
    span = int(max(value.max(), q_value.max())) - lo + 1
    top = int(max(block.max(), q_block.max())) + 2
    if span * top < (1 << 62):
        return np.searchsorted(block * span + (value - lo), q_block * span + (q_value - lo),
                               side)
    out = np.empty(q_value.size, np.int64)  # pragma: no cover - spans of centuries
    for b in np.unique(q_block).tolist():
        a0, a1 = np.searchsorted(block, [b, b + 1])
        mine = q_block == b
        out[mine] = a0 + np.searchsorted(value[a0:a1], q_value[mine], side)
    return out


def sorted_pairs(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(key, value)`` pairs sorted by key, then value (copies; int64 when packed): what ``o =
    lexsort((value, key))`` puts in order, for statistics that only read the sorted values
    of each key (equal pairs are interchangeable, so no stable permutation is needed).
    Integer pairs whose spans fit 63 bits are packed into one int64 and sorted in place."""
    if key.size and key.dtype.kind in "iu" and value.dtype.kind in "iu":
        k_lo, v_lo = int(key.min()), int(value.min())
        k_bits = (int(key.max()) - k_lo).bit_length()
        v_bits = (int(value.max()) - v_lo).bit_length()
        if k_bits + v_bits <= 63:
            c = _offset(key, k_lo)
            c <<= v_bits
            c |= _offset(value, v_lo)
            c.sort()
            v = c & ((1 << v_bits) - 1)
            v += v_lo
            c >>= v_bits
            c += k_lo
            return c, v
    o = lexsort((value, key))
    return key[o], value[o]


def group_median(key: np.ndarray, value: np.ndarray, sel: np.ndarray, default: int
                 ) -> np.ndarray:
    """int64 per element: ``int(np.median(value[sel & (key == k)]))`` of its key ``k``
    (``default`` where none of its key is selected)."""
    out = np.full(key.size, default, np.int64)
    v_key, v = key[sel], value[sel]
    if v.size == 0:
        return out
    v_key, v = sorted_pairs(v_key, v)
    keys, first, count = np.unique(v_key, return_index=True, return_counts=True)
    med = ((v[first + (count - 1) // 2].astype(np.float64)
            + v[first + count // 2].astype(np.float64)) / 2).astype(np.int64)
    pos = np.clip(np.searchsorted(keys, key), 0, keys.size - 1)
    found = keys[pos] == key
    out[found] = med[pos[found]]
    return out


def group_percentile10(key: np.ndarray, value: np.ndarray) -> dict[int, int]:
    """key -> ``int(np.percentile(value[key == k], 10))`` (numpy's default "linear" method,
    its interpolation formula included)."""
    k, v = sorted_pairs(key, value)
    v = v.astype(np.float64)
    keys, first, count = np.unique(k, return_index=True, return_counts=True)
    virtual = (count - 1) * 0.1
    prev = np.floor(virtual)
    gamma = virtual - prev
    a = v[first + prev.astype(np.int64)]
    b = v[first + np.minimum(prev.astype(np.int64) + 1, count - 1)]
    diff = b - a
    lerp = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    return dict(zip(keys.tolist(), [int(x) for x in lerp.tolist()], strict=True))


def pair_rows(left: tuple[np.ndarray, np.ndarray], right: tuple[np.ndarray, np.ndarray]
              ) -> tuple[np.ndarray, bool]:
    """For each integer pair of ``left`` (two equal-length key arrays, e.g. rank and
    iteration), the first row of ``right`` holding the same pair, -1 where none (int64[rows
    of left]): a left join's row index; and whether ``right`` holds a pair twice."""
    la, lb = (np.asarray(k, np.int64) for k in left)
    ra, rb = (np.asarray(k, np.int64) for k in right)
    out = np.full(la.size, -1, np.int64)
    if not ra.size or not la.size:
        return out, False
    a_lo, b_lo = min(int(la.min()), int(ra.min())), min(int(lb.min()), int(rb.min()))
    b_span = max(int(lb.max()), int(rb.max())) - b_lo + 1
    a_span = max(int(la.max()), int(ra.max())) - a_lo + 1
    if a_span * b_span >= 1 << 62:  # too far apart for one int64 key: a dict
        index: dict[tuple[int, int], int] = {}
        for j, k in enumerate(zip(ra.tolist(), rb.tolist(), strict=True)):
            index.setdefault(k, j)
        rows = np.fromiter((index.get(k, -1) for k in zip(la.tolist(), lb.tolist(),
                                                             strict=True)), np.int64, la.size)
        return rows, len(index) < ra.size
    r_key = (ra - a_lo) * b_span + (rb - b_lo)
    l_key = (la - a_lo) * b_span + (lb - b_lo)
    order = np.argsort(r_key, kind="stable")
    sk = r_key[order]
    pos = np.clip(np.searchsorted(sk, l_key), 0, sk.size - 1)
    hit = sk[pos] == l_key
    out[hit] = order[pos[hit]]
    return out, bool((np.diff(sk) == 0).any())
