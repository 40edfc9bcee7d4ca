"""The collectives vocabulary: canonical names, message bytes and bus factors.

One home for what analysis (:mod:`traincast.analysis.collective_table`), the communication cost model
(:mod:`traincast.costs.comm`) and the what-ifs (:mod:`traincast.whatif.collectives`) say about a
collective. Definitions follow NVIDIA nccl-tests, ``doc/PERFORMANCE.md`` and the ``*GetBw``
functions in ``src/*.cu`` (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).

Names. :data:`COLLECTIVES` are traincast's canonical names (nccl-tests / c10d vocabulary);
:func:`normalise` maps the c10d/NCCL spellings (``_allgather_base``, ``allreduce``,
``alltoall``, ``reduce_scatter_tensor`` ...) to them.

Message size ``S`` (bytes) per call, as nccl-tests counts it (:func:`message_bytes`):
all_reduce, broadcast, reduce: the buffer (``in_bytes``); all_gather: the total output
(``out_bytes``, ``sendcount * n``); reduce_scatter: the total input (``in_bytes``,
``recvcount * n``); all_to_all: the bytes a rank sends in total (``in_bytes``,
``src/alltoall.cu``: ``count * nranks * typesize``); gather: ``in_bytes * n``; scatter:
``out_bytes * n`` (``src/gather.cu``, ``src/scatter.cu``); send: ``in_bytes``; recv:
``out_bytes`` (``src/sendrecv.cu``); barrier: 0 (no payload). 0 also means unknown.

Bus factor ``f(n)`` (:func:`bus_factor`), ``busbw = algbw * f(n)`` with ``algbw = S / t`` and
``n`` the process-group size: ``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for all_gather,
reduce_scatter, all_to_all, gather and scatter, ``1`` for broadcast, reduce, send and recv.
nccl-tests defines none for barrier or other names; what :func:`bus_factor` returns there is
the caller's policy (its ``undefined`` argument).
"""

from __future__ import annotations

import re

import numpy as np

from traincast.errors import ParameterError

__all__ = ["COLLECTIVES", "bus_factor", "check_collective", "message_bytes", "normalise"]

#: canonical collective names
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send",
    "recv", "gather", "scatter", "barrier")

#: c10d/NCCL spellings -> canonical name, first match wins (order matters: ``reduce_scatter``
#: before ``reduce``, ``all_gather`` before ``gather``)
_ALIASES = [
    (re.compile(r"all_?to_?all|alltoall"), "all_to_all"),
    (re.compile(r"reduce_?scatter"), "reduce_scatter"),
    (re.compile(r"all_?gather"), "all_gather"),
    (re.compile(r"all_?reduce"), "all_reduce"),
    (re.compile(r"broadcast"), "broadcast"),
    (re.compile(r"barrier"), "barrier"),
    (re.compile(r"send"), "send"),
    (re.compile(r"recv"), "recv"),
    (re.compile(r"^_?reduce"), "reduce"),
    (re.compile(r"gather"), "gather"),
    (re.compile(r"scatter"), "scatter"),
]

#: nccl-tests bus factor per collective: 2 = ``2(n-1)/n``, 1 = ``(n-1)/n``, 0 = ``1``
_FACTOR_KIND = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1,
                "gather": 1, "scatter": 1, "broadcast": 0, "reduce": 0, "send": 0, "recv": 0}

_UNDEFINED = ("raise", "nan")


def normalise(name: str) -> str:
    """c10d/NCCL spelling (``_allgather_base``, ``allreduce``) -> canonical name (the name
    lower-cased when it is none of :data:`COLLECTIVES`)."""
    low = name.lower()
    for rx, out in _ALIASES:
        if rx.search(low):
            return out
    return low


def check_collective(collective: str) -> str:
    """``collective`` itself if it is a canonical name.

    Raises:
        ParameterError: any other name.
    """
    if collective not in COLLECTIVES:
        raise ParameterError(f"unknown collective {collective!r} "
                             f"(known: {', '.join(COLLECTIVES)})")
    return collective


def message_bytes(collective: np.ndarray, in_bytes: np.ndarray, out_bytes: np.ndarray,
                  group_size: np.ndarray) -> np.ndarray:
    """nccl-tests message size ``S`` (int64 bytes) per call (module docstring); recv uses
    ``in_bytes`` when ``out_bytes`` is 0, unknown collectives their ``in_bytes``."""
    coll = np.asarray(collective, object)
    in_b = np.asarray(in_bytes, np.int64)
    out_b = np.asarray(out_bytes, np.int64)
    n = np.asarray(group_size, np.int64)
    s = in_b.copy()
    s = np.where(coll == "all_gather", out_b, s)
    s = np.where(coll == "recv", np.where(out_b > 0, out_b, in_b), s)
    s = np.where(coll == "gather", in_b * n, s)
    s = np.where(coll == "scatter", out_b * n, s)
    s = np.where(coll == "barrier", 0, s)
    return s.astype(np.int64)


def bus_factor(collective: str | np.ndarray, group_size: int | np.ndarray, *,
               undefined: str = "raise") -> float | np.ndarray:
    """nccl-tests busbw / algbw factor ``f(n)`` (module docstring), elementwise.

    Args:
        collective: a canonical name, or an array of them (one per group size).
        group_size: ``n``, a number or an array (broadcast against ``collective``).
        undefined: what a pair nccl-tests defines no factor for gets:

            - "raise" (the cost model's policy): barrier gets 0 (no payload, the time is
              the latency alone); an unknown name, or a group size that is < 1 or not
              finite, raises.
            - "nan" (the measurement tables' policy): NaN for barrier, unknown names and
              group sizes <= 0 (no busbw to report).

    Returns:
        float64 array of the broadcast shape; a float when both inputs are scalars.

    Raises:
        ParameterError: with ``undefined="raise"``: unknown collective, group size < 1 or
            not finite; an unknown ``undefined``.
    """
    if undefined not in _UNDEFINED:
        raise ParameterError(f"undefined must be one of {_UNDEFINED}, got {undefined!r}")
    scalar = np.ndim(collective) == 0 and np.ndim(group_size) == 0
    coll = np.asarray(collective, object)
    n = np.asarray(group_size, np.float64)
    if undefined == "raise":
        for name in ([collective] if scalar else sorted(set(coll.ravel().tolist()), key=str)):
            check_collective(name)
        if np.any(n < 1) or not np.all(np.isfinite(n)):
            raise ParameterError(f"group_size must be >= 1, got {group_size}")
    coll, n = np.broadcast_arrays(coll, n)
    out = np.full(n.shape, 0.0 if undefined == "raise" else np.nan)  # barrier
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, k in _FACTOR_KIND.items():
            m = coll == name
            if m.any():
                nm = n[m]
                out[m] = (2.0 * (nm - 1.0) / nm if k == 2 else (nm - 1.0) / nm if k == 1
                          else np.ones_like(nm))
    if undefined == "nan":
        out[n <= 0] = np.nan
    return float(out) if scalar else out
