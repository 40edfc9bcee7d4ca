"""The kernels the analyses load before their large arrays (on empty inputs, so that the
load's transient pages are not on top of them) are loaded for the very argument types the
analyses then call them with: no second variant is loaded or compiled later."""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import pytest

import traincast
from traincast.analysis import idle as I
from traincast.analysis.stragglers import compiled as C
from traincast.analysis.stragglers import lateness as S


def _spy(calls: list, fn):  # type: ignore[no-untyped-def]
    def wrapped(*args):  # type: ignore[no-untyped-def]
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        calls.append((all(a.size == 0 for a in arrays),
                      tuple(numba.typeof(a) for a in args)))
        return fn(*args)
    return wrapped


def _preloaded_types_used(calls: list) -> None:
    empty = {t for e, t in calls if e}
    used = {t for e, t in calls if not e}
    assert empty and used and used <= empty, (empty, used)


def test_blame_kernels_preloaded_for_their_types(traces: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    S.collective_lateness(ts)  # every kernel loaded (the lists filled)
    spies = {}
    for name in ("_CANDIDATES", "_MEDIANS", "_BLAME"):
        fn = getattr(C, name)[0]
        if fn is None:
            pytest.skip("no compiled kernels")
        spies[name] = []
        monkeypatch.setattr(C, name, [_spy(spies[name], fn)])
    monkeypatch.setattr(S, "_OP_MEDIANS", C._MEDIANS)  # the same dispatcher, spied
    S.collective_lateness(ts)
    for calls in spies.values():
        _preloaded_types_used(calls)


def test_gap_chains_preloaded_for_their_types(traces: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCAST_NUMBA_MIN_SIZE", "0")
    ts = traincast.load(traces / "dlrm_8xv100" / "kineto")
    pred = traincast.predict(ts)
    if I._exact_patch(pred.graph) is None or I._chains_kernel(None) is None:
        pytest.skip("the idle causes take the walk without a patch here")
    calls: list = []
    monkeypatch.setattr(I, "_CHAINS", [_spy(calls, I._CHAINS[0])])
    traincast.analyze(ts, "idle", prediction=pred)
    _preloaded_types_used(calls)
