"""A compiled (numba) scanner of Kineto ``traceEvents`` chunks into columns.

:func:`scan_chunk` reads one chunk as :mod:`traincast.trace.readers.jsonscan` cuts it (the
bytes ``[ {event}, {event}, ... ]``) and writes the fields of its complete events (``ph: "X"``)
straight into numpy arrays: no Python object per event. It is a strict validator: it accepts
only the JSON it fully understands (ASCII strings, the escapes ``\\" \\\\ \\/ \\b \\f \\n \\r
\\t``, integers of at most 18 digits where an integer is expected, decimal numbers that
convert exactly by Clinger's fast path -- mantissa below 2**53 and a power of ten of at most
22 -- no repeated known key, at most :data:`MAX_DEPTH` levels of nesting). On anything else it
returns a negative status and the caller decodes the chunk with the typed ``msgspec`` path of
:mod:`traincast.trace.readers.kineto`, which then gives the result (or the error) for it. So
this module never changes what a trace loads to, only how fast.

Output arrays (capacity ``cap`` rows, filled for the first ``n`` X events; see
:func:`scan_chunk`):

* ``spans`` int64[cap, 8]: byte ranges in the chunk of ``cat``, ``name`` (string contents,
  without quotes), ``Input Dims``, ``Input type`` (raw JSON values), -1 when absent;
* ``ints`` int64[cap, 7]: ``pid``, ``tid`` (default 0), ``External id``, ``correlation``,
  ``device``, ``stream`` (device and stream -1 outside int32), ``Record function id``
  (default -1); ``pid``, ``tid``, ``device``, ``stream`` may be texts without digits
  (-1, as the Python path reads them);
* ``flts`` float64[cap, 2]: ``ts``, ``dur`` in µs (NaN when absent);
* ``flags`` uint8[cap]: bit 0 ``cat`` holds an escape, bit 1 ``name`` does, bit 2 the event
  has arguments the caller decodes itself (collective and stream-wait arguments);
* ``codes`` int32[cap, 2]: ``cat`` and ``name`` interned by their raw bytes (an absent
  string as the empty one): codes 0, 1, ... in order of first appearance;
* ``firsts`` int64[cap, 2]: the row where each code of ``cat`` / ``name`` first appears;
* ``others`` int64[cap, 3]: (phase, start, end) of the ``B``/``E``/``M`` events, in order;
* ``evspan`` int64[cap, 2]: (start, end) of each X event (the caller re-decodes flagged ones).
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from traincast.trace.readers.jsonfast_ends import event_ends
from traincast.trace.readers.jsonfast_pairs import gather_pairs, intern_pairs
from traincast.util.numba_cache import quick_loads

__all__ = ["event_ends", "gather_pairs", "intern_pairs", "scan_chunk"]

MAX_DEPTH = 64

# statuses (negative: fall back to the typed Python decoder)
OK = 0
FAIL = -1
FULL = -2  # more events than ``cap`` (cannot happen with cap >= len(chunk) // 8 + 2)

_POW10 = np.array([10.0 ** k for k in range(23)], np.float64)
_TWO53 = 1 << 53
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xFF51AFD7ED558CCD)

# top-level keys
K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS = range(8)
_TOP = (b"ph", b"cat", b"name", b"pid", b"tid", b"ts", b"dur", b"args")
# argument keys: 0..4 int columns, 5..6 raw spans, 7..13 ints the caller re-decodes,
# 14..18 strings the caller re-decodes, 19 any value the caller re-decodes, 20 plain int
_ARGS = (b"External id", b"correlation", b"device", b"stream", b"Record function id",
         b"Input Dims", b"Input type",
         b"Group size", b"In msg nelems", b"Out msg nelems", b"Seq", b"wait_on_stream",
         b"wait_on_cuda_event_record_corr_id", b"bytes",
         b"Collective name", b"Process Group Name", b"dtype", b"name", b"labels",
         b"Process Group Ranks")
_N_ARGS = len(_ARGS)


def _table(keys: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray]:
    width = max(map(len, keys))
    tab = np.zeros((len(keys), width), np.uint8)
    lens = np.zeros(len(keys), np.int64)
    for i, k in enumerate(keys):
        tab[i, :len(k)] = np.frombuffer(k, np.uint8)
        lens[i] = len(k)
    return tab, lens


def _by_first(keys: tuple[bytes, ...]) -> np.ndarray:
    """int8[256, w]: the indices of the keys starting with each byte (-1 padded)."""
    width = max(sum(1 for k in keys if k[0] == c) for c in range(256))
    out = np.full((256, width), -1, np.int8)
    for i, k in enumerate(keys):
        row = out[k[0]]
        row[int(np.argmin(row >= 0))] = i
    return out


_TOP_TAB, _TOP_LEN = _table(_TOP)
_ARG_TAB, _ARG_LEN = _table(_ARGS)
_TOP_FIRST = _by_first(_TOP)
_ARG_FIRST = _by_first(_ARGS)
#: phases decoded into empty structs by the typed decoder (skipped): every letter but
#: B, E, M, X, plus ( and )
_SKIP_PH = np.zeros(256, np.bool_)
for _c in b"ACDFGHIJKLNOPQRSTUVWYZabcdefghijklmnopqrstuvwxyz()":
    _SKIP_PH[_c] = True


#: byte classes: 1 JSON whitespace; in strings 2 a plain character, 0 anything else
_WS = np.zeros(256, np.uint8)
for _c in b" \t\r\n":
    _WS[_c] = 1
_PLAIN = np.zeros(256, np.uint8)
_PLAIN[32:128] = 1
_PLAIN[34] = _PLAIN[92] = 0


@njit(cache=True, nogil=True, inline="always")
def _ws(b, i, n):  # pragma: no cover - compiled
    while i < n and _WS[b[i]]:
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _string(b, i, n):  # pragma: no cover - compiled
    """``b[i]`` is an opening quote: (offset past the closing quote or -1, has escape)."""
    i += 1
    esc = False
    while i < n:
        c = b[i]
        if _PLAIN[c]:
            i += 1
            continue
        if c == 34:
            return i + 1, esc
        if c == 92:
            if i + 1 >= n:
                return -1, esc
            d = b[i + 1]
            # \" \\ \/ \b \f \n \r \t (\u escapes go to the typed decoder)
            if d == 34 or d == 92 or d == 47 or d == 98 or d == 102 or d == 110 or \
                    d == 114 or d == 116:
                esc = True
                i += 2
                continue
            return -1, esc
        if c < 32 or c >= 128:
            return -1, esc
        i += 1
    return -1, esc


_L01 = np.uint64(0x0101010101010101)
_L20 = np.uint64(0x2020202020202020)
_H80 = np.uint64(0x8080808080808080)
_QQ = np.uint64(0x2222222222222222)  # "
_BB = np.uint64(0x5C5C5C5C5C5C5C5C)  # backslash


@njit(cache=True, nogil=True, inline="always")
def _load8(b, i):  # pragma: no cover - compiled
    """The 8 bytes ``b[i:i + 8]`` as a little-endian uint64 (``i + 8 <= b.size``)."""
    return (np.uint64(b[i]) | (np.uint64(b[i + 1]) << np.uint64(8))
            | (np.uint64(b[i + 2]) << np.uint64(16)) | (np.uint64(b[i + 3]) << np.uint64(24))
            | (np.uint64(b[i + 4]) << np.uint64(32)) | (np.uint64(b[i + 5]) << np.uint64(40))
            | (np.uint64(b[i + 6]) << np.uint64(48)) | (np.uint64(b[i + 7]) << np.uint64(56)))


@njit(cache=True, nogil=True, inline="always")
def _plain8(w):  # pragma: no cover - compiled
    """Whether the 8 bytes ``w`` are all plain string characters (no quote, backslash,
    control character or non-ASCII byte)."""
    q = w ^ _QQ
    e = w ^ _BB
    m = ((q - _L01) & ~q) | ((e - _L01) & ~e) | ((w - _L20) & ~w) | w
    return (m & _H80) == np.uint64(0)


@njit(cache=True, nogil=True, inline="always")
def _string_h(b, i, n):  # pragma: no cover - compiled
    """:func:`_string` and a hash of the string's raw bytes: 8 plain bytes at a time while it
    can, then a multiply-by-31 sum, finished by the length and the MurmurHash3 mix. The
    hash is a function of the raw bytes only (equal texts, equal hashes)."""
    i += 1
    s = i
    esc = False
    h = np.uint64(0)
    while i + 8 <= n:
        w = _load8(b, i)
        if not _plain8(w):
            break
        h = (h ^ w) * _MIX
        i += 8
    while i < n:
        c = b[i]
        if _PLAIN[c]:
            h = h * np.uint64(31) + np.uint64(c)
            i += 1
            continue
        if c == 34:
            h += np.uint64(i - s) * _GOLDEN
            h ^= h >> np.uint64(33)
            h *= _MIX
            h ^= h >> np.uint64(33)
            return i + 1, esc, h
        if c == 92:
            if i + 1 >= n:
                return -1, esc, h
            d = b[i + 1]
            if d == 34 or d == 92 or d == 47 or d == 98 or d == 102 or d == 110 or \
                    d == 114 or d == 116:
                esc = True
                h = (h * np.uint64(31) + np.uint64(c)) * np.uint64(31) + np.uint64(d)
                i += 2
                continue
            return -1, esc, h
        return -1, esc, h
    return -1, esc, h


@njit(cache=True, nogil=True)
def _number(b, i, n):  # pragma: no cover - compiled
    """A JSON number at ``b[i]``: (end or -1, is integer, mantissa, exponent of ten,
    negative, exact) where ``exact`` says mantissa < 2**53 and no digits were lost."""
    neg = False
    if i < n and b[i] == 45:
        neg = True
        i += 1
    if i >= n:
        return -1, False, 0, 0, neg, False
    m = 0
    nd = 0
    exact = True
    c = b[i]
    if c == 48:
        i += 1
    elif 49 <= c <= 57:
        while i < n and 48 <= b[i] <= 57:
            if nd < 18:
                m = m * 10 + (b[i] - 48)
            else:
                exact = False
            nd += 1
            i += 1
    else:
        return -1, False, 0, 0, neg, False
    is_int = True
    e10 = 0
    if i < n and b[i] == 46:
        is_int = False
        i += 1
        k = 0
        while i < n and 48 <= b[i] <= 57:
            if nd < 18:
                m = m * 10 + (b[i] - 48)
                e10 -= 1
            else:
                exact = False
            if m > 0:
                nd += 1
            k += 1
            i += 1
        if k == 0:
            return -1, False, 0, 0, neg, False
    if i < n and (b[i] == 101 or b[i] == 69):
        is_int = False
        i += 1
        eneg = False
        if i < n and (b[i] == 43 or b[i] == 45):
            eneg = b[i] == 45
            i += 1
        k = 0
        ev = 0
        while i < n and 48 <= b[i] <= 57:
            if ev < 100000:
                ev = ev * 10 + (b[i] - 48)
            k += 1
            i += 1
        if k == 0:
            return -1, False, 0, 0, neg, False
        e10 += -ev if eneg else ev
    if m >= _TWO53:
        exact = False
    return i, is_int, m, e10, neg, exact


@njit(cache=True, nogil=True)
def _literal(b, i, n):  # pragma: no cover - compiled
    """true / false / null at ``b[i]``: offset past it, or -1."""
    if b[i] == 116 and i + 4 <= n and b[i + 1] == 114 and b[i + 2] == 117 and b[i + 3] == 101:
        return i + 4
    if b[i] == 110 and i + 4 <= n and b[i + 1] == 117 and b[i + 2] == 108 and b[i + 3] == 108:
        return i + 4
    if (b[i] == 102 and i + 5 <= n and b[i + 1] == 97 and b[i + 2] == 108
            and b[i + 3] == 115 and b[i + 4] == 101):
        return i + 5
    return -1


@njit(cache=True, nogil=True)
def _key(b, i, n):  # pragma: no cover - compiled
    """A key and its colon at ``b[i]``: (key start, key end, offset of the value) or -1s."""
    if i >= n or b[i] != 34:
        return -1, -1, -1
    e, esc = _string(b, i, n)
    if e < 0 or esc:
        return -1, -1, -1
    j = _ws(b, e, n)
    if j >= n or b[j] != 58:
        return -1, -1, -1
    return i + 1, e - 1, _ws(b, j + 1, n)


@njit(cache=True, nogil=True, inline="always")
def _key_k(b, i, n, first, tab, lens):  # pragma: no cover - compiled
    """A key and its colon at ``b[i]``, looked up in ``tab`` (``first``: the candidates by
    first byte, :func:`_by_first`): (index of the key or -1, offset of the value or -1 when
    it is not a valid key without escapes followed by a colon). A known key is compared in
    place; any other is read by :func:`_string`."""
    if i >= n or b[i] != 34:
        return -1, -1
    s = i + 1
    k = -1
    e = -1
    if s < n:
        c = b[s]
        for m in range(first.shape[1]):
            j = first[c, m]
            if j < 0:
                break
            q = s + lens[j]
            if q < n and b[q] == 34:
                t = 1
                while t < lens[j] and b[s + t] == tab[j, t]:
                    t += 1
                if t == lens[j]:
                    k = j
                    e = q + 1
                    break
    if k < 0:
        e, esc = _string(b, i, n)
        if e < 0 or esc:
            return -1, -1
    if e < n and b[e] == 58:
        j = e + 1
    else:
        j = _ws(b, e, n)
        if j >= n or b[j] != 58:
            return -1, -1
        j += 1
    return k, _ws(b, j, n)


@njit(cache=True, nogil=True)
def _skip(b, i, n, stack):  # pragma: no cover - compiled
    """Skip one JSON value at ``b[i]``: offset past it, or -1 when it is not valid here."""
    depth = 0
    while True:
        i = _ws(b, i, n)
        if i >= n:
            return -1
        c = b[i]
        if c == 123 or c == 91:  # { [
            j = _ws(b, i + 1, n)
            if j >= n:
                return -1
            if (c == 123 and b[j] == 125) or (c == 91 and b[j] == 93):
                i = j + 1
            else:
                if depth >= stack.size:
                    return -1
                stack[depth] = c
                depth += 1
                if c == 123:
                    ks, ke, j = _key(b, j, n)
                    if ks < 0:
                        return -1
                i = j
                continue
        elif c == 34:
            i, esc = _string(b, i, n)
            if i < 0:
                return -1
        elif c == 45 or 48 <= c <= 57:
            i = _number(b, i, n)[0]
            if i < 0:
                return -1
        else:
            i = _literal(b, i, n)
            if i < 0:
                return -1
        # a value ended: close containers or go on to the next element
        while True:
            if depth == 0:
                return i
            i = _ws(b, i, n)
            if i >= n:
                return -1
            c = b[i]
            top = stack[depth - 1]
            if c == 44:  # ,
                i = _ws(b, i + 1, n)
                if top == 123:
                    ks, ke, i = _key(b, i, n)
                    if ks < 0:
                        return -1
                break
            if (c == 125 and top == 123) or (c == 93 and top == 91):
                depth -= 1
                i += 1
                continue
            return -1


@njit(cache=True, nogil=True, inline="always")
def _int(b, i, n):  # pragma: no cover - compiled
    """An integer literal (at most 18 digits) at ``b[i]``: (end or -1, value)."""
    if i >= n or not (b[i] == 45 or 48 <= b[i] <= 57):
        return -1, 0
    e, is_int, m, e10, neg, exact = _number(b, i, n)
    if e < 0 or not is_int or not exact or e - i > 19:
        return -1, 0
    return e, -m if neg else m


@njit(cache=True, nogil=True, inline="always")
def _int_or_text(b, i, n):  # pragma: no cover - compiled
    """An ``int | str`` field read as the Python path's ``_as_int``: an integer literal, or a
    text without any digit (``"Spans"``, ``""``: not a number, -1); (end or -1, value). A
    text with digits or escapes is left to the typed decoder."""
    if i < n and b[i] == 34:
        e, esc = _string(b, i, n)
        if e < 0 or esc:
            return -1, 0
        for j in range(i + 1, e - 1):
            if 48 <= b[j] <= 57:
                return -1, 0
        return e, -1
    return _int(b, i, n)


@njit(cache=True, nogil=True, inline="always")
def _float(b, i, n):  # pragma: no cover - compiled
    """A number at ``b[i]`` as float64, exactly rounded (Clinger): (end or -1, value)."""
    if i >= n or not (b[i] == 45 or 48 <= b[i] <= 57):
        return -1, 0.0
    e, is_int, m, e10, neg, exact = _number(b, i, n)
    if e < 0 or not exact or e10 > 22 or e10 < -22:
        return -1, 0.0
    v = float(m)
    if e10 > 0:
        v = v * _POW10[e10]
    elif e10 < 0:
        v = v / _POW10[-e10]
    return e, -v if neg else v


@njit(cache=True, nogil=True, inline="always")
def _intern(b, s, e, h, table, uh, spans, firsts, row, col, nu):  # pragma: no cover
    """Code of the text ``b[s:e]`` (hash ``h``, :func:`_string_h`) of column ``col`` (0 ``cat``, 1
    ``name``) in the open-addressing ``table`` (-1: free; ``uh`` the hash of each code,
    ``firsts`` its first row, whose span in ``spans`` holds its text; an absent span is the
    empty text), adding it as code ``nu`` first seen at ``row`` when new: (code, codes)."""
    mask = table.size - 1
    j = np.int64(h & np.uint64(mask))
    ln = e - s
    while True:
        c = table[j]
        if c < 0:
            table[j] = nu
            uh[nu] = h
            firsts[nu, col] = row
            return nu, nu + 1
        if uh[c] == h:
            r = firsts[c, col]
            rs = spans[r, 2 * col]
            rln = spans[r, 2 * col + 1] - rs if rs >= 0 else 0
            if rln == ln:
                k = 0
                while k < ln and b[s + k] == b[rs + k]:
                    k += 1
                if k == ln:
                    return c, nu
        j = (j + 1) & mask


@njit(cache=True, nogil=True)
def _rehash(table, uh, nu):  # pragma: no cover - compiled
    """A table of twice the size holding codes ``0 .. nu - 1`` (hashes ``uh``)."""
    out = np.full(2 * table.size, -1, np.int32)
    mask = out.size - 1
    for c in range(nu):
        j = np.int64(uh[c] & np.uint64(mask))
        while out[j] >= 0:
            j = (j + 1) & mask
        out[j] = c
    return out


@njit(cache=True, nogil=True)
def _args(b, i, n, stack, row, spans, ints):  # pragma: no cover - compiled
    """The ``args`` object at ``b[i]``: (end or -1, flagged for the caller)."""
    if i >= n or b[i] != 123:
        return -1, False
    i = _ws(b, i + 1, n)
    if i < n and b[i] == 125:
        return i + 1, False
    seen = 0
    special = False
    while True:
        k, i = _key_k(b, i, n, _ARG_FIRST, _ARG_TAB, _ARG_LEN)
        if i < 0 or i >= n:
            return -1, False
        if k >= 0:
            if seen & (1 << k):
                return -1, False
            seen |= 1 << k
        if k < 0 or k == 19:
            if k == 19:
                special = True
            i = _skip(b, i, n, stack)
        elif k <= 4 or k <= 13 and k >= 7:
            i, v = _int_or_text(b, i, n) if k == 2 or k == 3 else _int(b, i, n)
            if k <= 4:
                if (k == 2 or k == 3) and (v < -2147483648 or v > 2147483647):
                    v = -1
                ints[row, 2 + k] = v
            elif k != 13:  # collective and stream-wait numbers
                special = True
        elif k <= 6:
            s = i
            i = _skip(b, i, n, stack)
            spans[row, 4 + 2 * (k - 5)] = s
            spans[row, 5 + 2 * (k - 5)] = i
        else:  # strings
            if b[i] != 34:
                return -1, False
            i, esc = _string(b, i, n)
            if k <= 16:  # collective names and dtype (thread name / labels: not used)
                special = True
        if i < 0:
            return -1, False
        i = _ws(b, i, n)
        if i >= n:
            return -1, False
        if b[i] == 44:
            i = _ws(b, i + 1, n)
            continue
        if b[i] == 125:
            return i + 1, special
        return -1, False


@njit(cache=True, nogil=True)
def scan_chunk(b, start, spans, ints, flts, flags, codes, firsts, others, evspan,
               tail):  # pragma: no cover - compiled
    """Scan the chunk ``b`` (uint8): (status, X events, other events, end, distinct ``cat``
    texts, distinct ``name`` texts). Status 0 when the whole chunk was read, negative when
    the caller must decode it itself (:data:`FULL`: more rows than the arrays hold; the
    caller may scan again with larger ones). ``end`` is the
    offset of the array's closing ``]``; with ``tail`` false nothing but whitespace may
    follow it, with ``tail`` true anything may (the rest of the document). ``start`` >= 0:
    the array's elements begin there (its ``[`` is not in ``b``); -1: ``b`` starts with
    the ``[``."""
    n = b.size
    cap = flags.size
    stack = np.empty(MAX_DEPTH, np.uint8)
    nx = 0
    no = 0
    ncat = 0
    nname = 0
    tcat = np.full(1024, -1, np.int32)
    tname = np.full(1024, -1, np.int32)
    ucat = np.empty(cap, np.uint64)
    uname = np.empty(cap, np.uint64)
    if start >= 0:
        i = _ws(b, start, n)
    else:
        i = _ws(b, 0, n)
        if i >= n or b[i] != 91:
            return FAIL, 0, 0, -1, 0, 0
        i = _ws(b, i + 1, n)
    if i < n and b[i] == 93:
        return (OK if tail or _ws(b, i + 1, n) == n else FAIL), 0, 0, i, 0, 0
    nan = np.nan
    while True:
        if i >= n or b[i] != 123:
            return FAIL, nx, no, -1, 0, 0
        if nx >= cap or no >= cap:
            return FULL, nx, no, -1, 0, 0
        start = i
        row = nx
        for c in range(8):
            spans[row, c] = -1
        ints[row, 0] = 0
        ints[row, 1] = 0
        for c in range(2, 7):
            ints[row, c] = -1
        flts[row, 0] = nan
        flts[row, 1] = nan
        flag = 0
        ph = -1
        seen = 0
        hc = np.uint64(0)  # absent: the hash of the empty text
        hn = np.uint64(0)
        i = _ws(b, i + 1, n)
        if i >= n or b[i] == 125:
            return FAIL, nx, no, -1, 0, 0  # no "ph": not an event of the typed decoder
        while True:
            k, i = _key_k(b, i, n, _TOP_FIRST, _TOP_TAB, _TOP_LEN)
            if i < 0 or i >= n:
                return FAIL, nx, no, -1, 0, 0
            if k >= 0:
                if seen & (1 << k):
                    return FAIL, nx, no, -1, 0, 0
                seen |= 1 << k
            if k < 0:
                i = _skip(b, i, n, stack)
            elif k == K_PH:
                if b[i] != 34 or i + 2 >= n or b[i + 2] != 34 or b[i + 1] == 92:
                    return FAIL, nx, no, -1, 0, 0
                ph = b[i + 1]
                i += 3
            elif k == K_CAT or k == K_NAME:
                if b[i] != 34:
                    return FAIL, nx, no, -1, 0, 0
                s = i + 1
                i, esc, h = _string_h(b, i, n)
                if i < 0:
                    return FAIL, nx, no, -1, 0, 0
                c = 0 if k == K_CAT else 2
                spans[row, c] = s
                spans[row, c + 1] = i - 1
                if k == K_CAT:
                    hc = h
                else:
                    hn = h
                if esc:
                    flag |= 1 if k == K_CAT else 2
            elif k == K_PID or k == K_TID:
                i, v = _int_or_text(b, i, n)
                ints[row, k - K_PID] = v
            elif k == K_TS or k == K_DUR:
                i, f = _float(b, i, n)
                flts[row, k - K_TS] = f
            else:
                i, special = _args(b, i, n, stack, row, spans, ints)
                if special:
                    flag |= 4
            if i < 0:
                return FAIL, nx, no, -1, 0, 0
            i = _ws(b, i, n)
            if i >= n:
                return FAIL, nx, no, -1, 0, 0
            if b[i] == 44:
                i = _ws(b, i + 1, n)
                continue
            if b[i] == 125:
                i += 1
                break
            return FAIL, nx, no, -1, 0, 0
        if ph == 88:  # X
            s = max(spans[row, 0], 0)
            codes[row, 0], ncat = _intern(b, s, max(spans[row, 1], 0), hc, tcat, ucat, spans,
                                          firsts, row, 0, ncat)
            if 2 * ncat > tcat.size:
                tcat = _rehash(tcat, ucat, ncat)
            s = max(spans[row, 2], 0)
            codes[row, 1], nname = _intern(b, s, max(spans[row, 3], 0), hn, tname, uname,
                                           spans, firsts, row, 1, nname)
            if 2 * nname > tname.size:
                tname = _rehash(tname, uname, nname)
            flags[row] = flag
            evspan[row, 0] = start
            evspan[row, 1] = i
            nx += 1
        elif ph == 66 or ph == 69 or ph == 77:  # B E M
            others[no, 0] = ph
            others[no, 1] = start
            others[no, 2] = i
            no += 1
        elif ph < 0 or not _SKIP_PH[ph]:
            return FAIL, nx, no, -1, 0, 0
        i = _ws(b, i, n)
        if i >= n:
            return FAIL, nx, no, -1, 0, 0
        if b[i] == 44:
            i = _ws(b, i + 1, n)
            continue
        if b[i] == 93:
            return (OK if tail or _ws(b, i + 1, n) == n else FAIL), nx, no, i, ncat, nname
        return FAIL, nx, no, -1, 0, 0


# the kernels' cached machine code loads without numba's compiler set-up
quick_loads(sys.modules[__name__])
