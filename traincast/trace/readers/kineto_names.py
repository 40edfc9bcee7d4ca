"""Facts of a Kineto file's dictionary of event names, computed once per distinct dictionary.

The ranks of a job meet the same operators in the same order, so their files' ``name``
dictionaries are usually equal. :func:`name_facts` gives, for a dictionary (list of names),
whether each name is an NCCL/RCCL collective kernel (:data:`COMM_KERNEL`, bool array), its op
family (:func:`traincast.trace.families.classify_families`, int32 array) and the names as an
Arrow ``string`` array (:func:`traincast.trace.arrow.strings`), memoised for the last
:data:`_MAX_MEMO` distinct dictionaries of up to :data:`_MAX_NAMES` names in this process
(the arrays are read-only). :func:`dictionary` builds a ``dictionary<int32, string>`` array
from codes and such a ``string`` array; :func:`fixed_strings` memoises the ``string`` array
of a fixed vocabulary (kinds, op families).
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pyarrow as pa

from traincast.trace import arrow as A
from traincast.trace.families import classify_families

#: kernel names of NCCL / RCCL collectives (kind "collective")
COMM_KERNEL = re.compile(r"^(nccl|rccl|ncclDevKernel|ncclKernel)", re.IGNORECASE)

_MAX_MEMO = 64
_MAX_NAMES = 1 << 14
_MEMO: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, pa.Array]] = {}


def _facts(names: list[str]) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    comm = np.array([bool(COMM_KERNEL.match(s)) for s in names], bool)
    fams = classify_families(names)
    comm.flags.writeable = fams.flags.writeable = False
    return comm, fams, A.strings(names)


def name_facts(names: list[str]) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(collective kernel per name, op family index per name, names as Arrow strings)."""
    if len(names) > _MAX_NAMES:
        return _facts(names)
    key = tuple(names)
    got = _MEMO.get(key)
    if got is None:
        if len(_MEMO) >= _MAX_MEMO:
            _MEMO.clear()
        got = _MEMO[key] = _facts(names)
    return got


@functools.lru_cache(maxsize=16)
def fixed_strings(values: tuple[str, ...]) -> pa.Array:
    """:func:`traincast.trace.arrow.strings` of a fixed vocabulary, once."""
    return A.strings(values)


def dictionary(codes: np.ndarray, strings: pa.Array) -> pa.DictionaryArray:
    """A ``dictionary<int32, string>`` array from int32 codes into ``strings``."""
    return pa.DictionaryArray.from_arrays(A.from_numpy(codes.astype(np.int32, copy=False)),
                                          strings)
