"""Matching events through the dictionary (traincast.whatif.match) equals matching every
event's value one by one, on real traces and on dictionaries with unused or repeated values;
the speedups and notes built on it equal the per-event implementation they replace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import traincast
from traincast.errors import ParameterError
from traincast.trace.schema import GPU_WORK_KINDS
from traincast.trace.traceset import TraceSet
from traincast.whatif.apply import _largest_launcher
from traincast.whatif.match import event_values
from traincast.whatif.spec import parse_what_if
from traincast.whatif.speedup import closest_names, speedup_factors


@pytest.fixture(scope="module")
def dlrm(traces: Path) -> TraceSet:
    return traincast.load(traces / "dlrm_8xv100" / "kineto")


@pytest.fixture(scope="module")
def a100(traces: Path) -> TraceSet:
    return traincast.load(traces / "hta" / "a100_2rank_nccl")


def _per_event(ts: TraceSet, column: str) -> np.ndarray:
    return np.asarray(ts.events.column(column).to_pylist(), dtype=object)


def _old_speedup_factors(ts: TraceSet, what_if: list[str]) -> np.ndarray:
    """The per-event implementation the dictionary matching replaced (no error paths)."""
    what = parse_what_if(what_if)
    f = np.ones(ts.events.num_rows)
    names, fams, kinds = (_per_event(ts, c) for c in ("name", "op_family", "kind"))
    ranks = ts.column("rank")
    for sp in what.speedups:
        if sp.kinds:
            hit = np.isin(kinds, sp.kinds)
            if "kernel" in sp.kinds:
                hit &= fams != "comm"
        elif sp.family is not None:
            hit = fams == sp.family
        else:
            hit = np.array([bool(sp.pattern.search(n)) for n in names], bool)
        if sp.rank is not None:
            hit = hit & (ranks == sp.rank)
        f[hit] /= sp.factor
    return f


@pytest.mark.parametrize("column", ["name", "kind", "op_family"])
def test_codes_give_every_events_value(dlrm: TraceSet, a100: TraceSet, column: str) -> None:
    for ts in (dlrm, a100):
        v = event_values(ts, column)
        got = np.asarray(v.values, dtype=object)[v.codes]
        assert (got == _per_event(ts, column)).all()
        assert sorted(v.present()) == sorted(set(_per_event(ts, column).tolist()))
        assert event_values(ts, column) is v  # memoised on the TraceSet


@pytest.mark.parametrize("spec", [
    ["speedup=sgemm=5.971"], ["speedup=^aten::=2"], ["speedup=.*=1.5"],
    ["speedup=(?i)NCCL|gemm=3"], ["speedup=^Memcpy HtoD \\(=2"], ["speedup=^$|elementwise=2"],
    ["speedup=family:gemm=2", "speedup=family:elementwise=0.5"],
    ["speedup=kind:kernel=2"], ["speedup=kind:cpu_op=10", "speedup=kind:runtime=10"],
    ["speedup=kind:device=2"], ["speedup=rank:1:family:elementwise=1.355"],
    ["speedup=rank:0:volta=2", "speedup=sgemm=2"],
])
def test_speedups_equal_per_event_matching(dlrm: TraceSet, spec: list[str]) -> None:
    got = speedup_factors(dlrm, parse_what_if(spec))
    assert np.array_equal(got, _old_speedup_factors(dlrm, spec))


def test_regex_matching_no_event_names_the_closest(dlrm: TraceSet) -> None:
    names = sorted(set(_per_event(dlrm, "name").tolist()))
    with pytest.raises(ParameterError) as exc:
        speedup_factors(dlrm, parse_what_if(["speedup=volta_sgem_nope=2"]))
    near = closest_names("volta_sgem_nope", names)
    assert near and f"closest names: {'; '.join(near)})" in str(exc.value)
    notes: list[str] = []
    f = speedup_factors(dlrm, parse_what_if(["speedup=family:conv=2", "overlap=ideal"]), notes)
    assert (f == 1).all()
    fams = ", ".join(sorted(set(_per_event(dlrm, "op_family").tolist())))
    assert notes == [f"speedup family:conv=2: matches no event of the traces (op families "
                     f"present: {fams}): it changes nothing"]


def _with_name_dictionary(ts: TraceSet, names: pa.Array) -> TraceSet:
    ev = ts.events
    i = ev.schema.get_field_index("name")
    return TraceSet(ev.set_column(i, "name", names), ts.collectives, ts.shapes,
                    ts.iterations, ts.ranks)


def test_unused_and_repeated_dictionary_values(a100: TraceSet) -> None:
    """A dictionary may hold values no event has (rows taken out) or one value twice: the
    masks follow the values, the listing holds each present value once."""
    col = a100.events.column("name").combine_chunks()
    values = col.dictionary.to_pylist()
    codes = col.indices.to_numpy()
    # a second entry for the first event's name, used by every other event of that name;
    # an entry no event uses
    twice = values[codes[0]]
    extra = [*values, twice, "never_used_kernel_sgemm"]
    same = np.flatnonzero(codes == codes[0])[1::2]
    codes2 = codes.copy()
    codes2[same] = len(values)
    arr = pa.DictionaryArray.from_arrays(pa.array(codes2, pa.int32()), pa.array(extra))
    ts = _with_name_dictionary(a100, arr)
    v = event_values(ts, "name")
    assert "never_used_kernel_sgemm" not in v.present()
    assert v.present().count(twice) == 1
    assert np.array_equal(v.equals(twice), codes == codes[0])
    pat = parse_what_if([f"speedup=^{twice[:8]}=2"])
    assert np.array_equal(speedup_factors(ts, pat), speedup_factors(a100, pat))
    # several chunks with their own dictionaries: unified first
    half = a100.events.num_rows // 2
    chunked = pa.chunked_array([col.slice(0, half), col.slice(half)])
    assert np.array_equal(event_values(_with_name_dictionary(a100, chunked), "name").mask(
        lambda n: "nccl" in n), np.array(["nccl" in n for n in _per_event(a100, "name")]))


def test_empty_trace_matches_nothing(a100: TraceSet) -> None:
    ev = a100.events.slice(0, 0)
    ts = TraceSet(ev, a100.collectives.slice(0, 0), a100.shapes.slice(0, 0),
                  a100.iterations.slice(0, 0), a100.ranks)
    v = event_values(ts, "kind")
    assert v.codes.size == 0 and v.present() == [] and v.isin(GPU_WORK_KINDS).size == 0


def test_largest_launcher_equals_the_loop(dlrm: TraceSet) -> None:
    """The kept device time by launching op's name (batch what-if note): the sums in event
    order and the first-met name on ties, as the per-event loop had them."""
    rng = np.random.default_rng(3)
    n = dlrm.events.num_rows
    names = _per_event(dlrm, "name")
    for trial in range(3):
        src = rng.integers(-1, n, n)
        kept = rng.random(n) < 0.3
        dur = rng.integers(0, 5, n).astype(np.float64) * (trial + 1)  # many ties
        per: dict[str, float] = {}
        for r in np.flatnonzero(kept).tolist():
            who = names[src[r]] if src[r] >= 0 else "no launching op found"
            per[who] = per.get(who, 0.0) + dur[r]
        top = max(per, key=per.__getitem__)
        assert _largest_launcher(event_values(dlrm, "name"), src, kept, dur) == (top, per[top])
