"""CLI-level fuzzing (issue 14): what-if keys, plan flags and config files drawn by hypothesis,
run through ``traincast.cli.main`` in-process.

Every outcome must be one of: exit 0 with finite, non-negative predicted times, or exit 2 with
exactly one line on stderr (``traincast: error: ...``) and no traceback. Anything else (exit 1,
a traceback, a negative or overflowing time, several lines) fails the test with the argv that
caused it.
"""

from __future__ import annotations

import json
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traincast.cli import main

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces"
SMALL = SHARED / "hta" / "a100_2rank_nccl"

pytestmark = pytest.mark.skipif(not SMALL.is_dir(), reason="needs ../shared/data")

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# numbers as a user might type them, from sensible to hostile
_NUMBERS = st.one_of(
    st.integers(-10, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e-300", "1e300", "-0", "0", "nan", "inf", "-inf", "1e-7", "1e7",
                     "0x10", "1_000", "", " ", "3 4", "1e", "٣"]),
)
_TEXT = st.text(min_size=0, max_size=12)
_GPUS = st.sampled_from(["H100", "A100", "V100", "MI300X", "h100", "nope", ""])


def _what_if() -> st.SearchStrategy[str]:
    speedup_target = st.one_of(
        st.sampled_from(["family:gemm", "family:comm", "family:nope", "kind:device",
                         "kind:kernel", "kind:nope", "nccl.*", "(a+)+$", "(?=x)", "[", ""]),
        _TEXT)
    return st.one_of(
        st.builds(lambda t, v: f"speedup={t}={v}", speedup_target, _NUMBERS),
        st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
            ["batch_size", "world_size", "ranks_per_node", "intra_node_gbps",
             "inter_node_gbps", "batch_size_from"]), _NUMBERS),
        st.builds(lambda v: f"gpu={v}", _GPUS),
        st.builds(lambda v: f"overlap={v}", st.sampled_from(["ideal", "none", "", "x"])),
        st.builds(lambda v: f"comm_algorithm={v}", st.sampled_from(["ring", "tree", "x", ""])),
        st.builds(lambda k, v: f"{k}={v}", _TEXT, _TEXT),
    )


#: wall-clock bound of one CLI call, s: a call past it is a hang (fails the example)
CALL_SECONDS = 60


@contextmanager
def _bounded(argv: list[str]):
    def hang(signum, frame):  # noqa: ANN001
        raise TimeoutError(f"no answer in {CALL_SECONDS} s: {argv}")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(CALL_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _run(argv: list[str]) -> int:
    with _bounded(argv):
        return main(argv)


def _check(argv: list[str], rc: int, out: str, err: str) -> None:
    lines = [x for x in err.splitlines() if x.strip()]
    if rc == 2:
        assert "Traceback" not in err, (argv, err)
        if lines and lines[0].startswith("Usage:"):  # click's own usage error
            assert lines[-1].startswith("Error:"), (argv, err)
        else:
            assert len(lines) == 1 and lines[0].startswith("traincast: error:"), (argv, err)
        return
    assert rc == 0, (argv, rc, err[-2000:])


def _times_ok(doc: object) -> bool:
    """Every ``*_ns`` number in the JSON is finite and >= 0 (intervals and changes may be
    negative: ``change_ns``, ``error_pct`` are signed and not checked)."""
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("predicted_ns", "replay_ns", "unprofiled_ns", "measured_ns") and \
                        v is not None and not (isinstance(v, int | float) and 0 <= v < 2**62):
                    return False
                stack.append(v)
        elif isinstance(x, list):
            stack.extend(x)
    return True


@FUZZ
@given(items=st.lists(_what_if(), min_size=1, max_size=3))
def test_fuzz_what_if(items: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", str(SMALL), "--format", "json"]
    for it in items:
        argv += ["--what-if", it]
    rc = _run(argv)
    out, err = capsys.readouterr()
    _check(argv, rc, out, err)
    if rc == 0:
        assert _times_ok(json.loads(out)), (argv, out[:2000])


# powers of two pass the layout's divisibility checks (heads | hidden, tp | heads, ...), so
# the huge ones reach the simulator instead of stopping at the first check
_INTS = st.one_of(st.integers(-3, 10**13), st.integers(0, 44).map(lambda k: 2**k),
                  st.sampled_from([0, 1, 2, 8, 96, 2**20, 2**31]))
_FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(-300, 300).map(lambda k: 10.0**k),
                    st.sampled_from([1e-300, 1e300, 0.0, -1.0, 100.0]))

_PLAN_FLAGS = {
    "--layers": _INTS, "--hidden": _INTS, "--heads": _INTS, "--seq": _INTS, "--vocab": _INTS,
    "--ffn": _INTS, "--experts": _INTS, "--top-k": _INTS, "--gpus": _INTS, "--tp": _INTS,
    "--pp": _INTS, "--dp": _INTS, "--micro-batch": _INTS, "--global-batch": _INTS,
    "--gpus-per-node": _INTS, "--intra-node-gbps": _FLOATS, "--inter-node-gbps": _FLOATS,
    "--virtual-stages": _INTS, "--ep": _INTS,
}


@FUZZ
@given(changes=st.sets(st.sampled_from(sorted(_PLAN_FLAGS)), min_size=1, max_size=3).flatmap(
    lambda d: st.fixed_dictionaries({k: _PLAN_FLAGS[k] for k in d})))
def test_fuzz_plan_flags(changes: dict, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"--layers": 8, "--hidden": 1024, "--heads": 16, "--seq": 1024, "--gpus": 8,
            "--tp": 2, "--pp": 2, "--micro-batch": 1, "--global-batch": 16}
    base.update(changes)
    argv = ["plan", "transformer", "--node", "DGX-A100", "--format", "json"]
    for k, v in base.items():
        argv += [k, repr(v) if isinstance(v, float) else str(v)]
    rc = _run(argv)
    out, err = capsys.readouterr()
    _check(argv, rc, out, err)
    if rc == 0:
        doc = json.loads(out)
        t = doc.get("iteration_time_s", doc.get("plan", {}).get("iteration_time_s"))
        if t is not None:
            assert 0 <= t < 1e10, (argv, t)


_YAML_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**15, 10**15),
              st.floats(allow_nan=True, allow_infinity=True), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=8)
_KEYS = st.sampled_from(["tables", "dense_features", "bottom_mlp", "top_mlp", "batch",
                         "sharding", "system", "gpus", "rows", "dim", "pooling", "x"])


@FUZZ
@given(doc=st.one_of(
    st.dictionaries(_KEYS, _YAML_VALUE, max_size=5),
    st.fixed_dictionaries({"tables": st.lists(st.fixed_dictionaries(
        {"rows": _YAML_VALUE, "dim": _YAML_VALUE, "pooling": _YAML_VALUE}), max_size=3),
        "bottom_mlp": _YAML_VALUE, "top_mlp": _YAML_VALUE}),
    _YAML_VALUE),
    raw=st.sampled_from([None, "a: [1, 2", "- - - -", "a: !!python/object:os.system x",
                         "\x00\xff", "a: &x 1\nb: *x", "{" * 200, ": :"]))
def test_fuzz_dlrm_config(doc: object, raw: str | None, tmp_path_factory: pytest.TempPathFactory,
                          capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    cfg = tmp_path_factory.mktemp("cfg") / "dlrm.yaml"
    cfg.write_text(raw if raw is not None else yaml.safe_dump(doc, allow_unicode=True))
    argv = ["plan", "dlrm", "--config", str(cfg), "--gpus", "2", "--node", "DGX-A100",
            "--batch", "64", "--format", "json"]
    rc = _run(argv)
    out, err = capsys.readouterr()
    _check(argv, rc, out, err)
