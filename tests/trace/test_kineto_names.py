"""Facts of a name dictionary, memoised per distinct dictionary (equal to computing them)."""

from __future__ import annotations

import numpy as np
import pytest

from traincast.trace import arrow as A
from traincast.trace.families import classify_families
from traincast.trace.readers import kineto_names as N


def test_name_facts_equal_direct_and_are_shared_for_equal_dictionaries() -> None:
    names = ["ncclDevKernel_AllReduce", "aten::mm", "RCCL_x", "gemm", "nccl"]
    comm, fams, strings = N.name_facts(names)
    assert comm.tolist() == [True, False, True, False, True]
    assert np.array_equal(fams, classify_families(names))
    assert strings.equals(A.strings(names))
    again = N.name_facts(list(names))  # an equal dictionary, other list and strings
    assert again[0] is comm and again[1] is fams and again[2] is strings
    assert not comm.flags.writeable and not fams.flags.writeable
    assert N.name_facts([])[0].size == 0


def test_large_dictionaries_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(N, "_MAX_NAMES", 3)
    names = ["a", "b", "c", "d"]
    assert N.name_facts(names)[2] is not N.name_facts(names)[2]
    assert tuple(names) not in N._MEMO


def test_dictionary_array_matches_arrow_helper() -> None:
    codes = np.array([2, 0, 1, 2], np.int32)
    got = N.dictionary(codes, N.fixed_strings(("x", "y", "z")))
    assert got.equals(A.dictionary(codes, ["x", "y", "z"]))
