"""Every public name the README shows works as shown, after a bare ``import traincast``, and
plans derive their internal systems without tripping the limits meant for typed input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_names() -> list[str]:
    names = set(re.findall(r"\btraincast\.[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*",
                           README.read_text()))
    return sorted(n.rstrip(".") for n in names)


def test_readme_names_are_found() -> None:
    # the README shows these (a README that dropped all of them would make the next test empty)
    assert {"traincast.export.to_hatchet", "traincast.load", "traincast.plan"} <= set(
        _readme_names())


_RESOLVE = """
import importlib, sys
import traincast
parts = sys.argv[1].split(".")
obj, path = traincast, "traincast"
for i, part in enumerate(parts[1:], start=1):
    path += "." + part
    if not hasattr(obj, part) and i >= 2:
        # a module path below a subpackage (``traincast.costs.hardware``): imported as a user
        # imports it; the face and its subpackages must work as attributes (``i == 1``)
        importlib.import_module(path)
    obj = getattr(obj, part)
"""


@pytest.mark.parametrize("name", _readme_names())
def test_readme_name_resolves_after_bare_import(name: str) -> None:
    """``import traincast`` then the dotted name in a fresh process (no earlier import of this
    test session has bound a submodule): ``traincast.X`` and ``traincast.X.Y`` by attribute
    (``traincast.export.to_hatchet``), deeper module paths after importing them."""
    p = subprocess.run([sys.executable, "-c", _RESOLVE, name], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr.strip().splitlines()[-1]


def test_plan_stays_callable_after_its_submodules_load() -> None:
    """``traincast.plan(model, system, layout)`` works after ``traincast.plan_search`` (or any
    ``traincast.plan.*`` import) bound the package as the attribute ``plan``."""
    import traincast
    from traincast.plan.spec import Layout, SystemSpec, TransformerSpec

    assert traincast.plan_search is not None
    model = TransformerSpec(layers=4, hidden=1024, heads=16, seq=512, vocab=32000)
    system = SystemSpec(gpu="A100-80GB", gpus=8, gpus_per_node=8)
    layout = Layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=16)
    res = traincast.plan(model, system, layout)
    assert res.iteration_time_s > 0


@pytest.mark.parametrize("gpus,tp,pp,dp,gbs", [(1536, 8, 8, 24, 2304), (3072, 8, 8, 48, 4608),
                                              (16384, 8, 16, 128, 2048)])
def test_plans_past_1024_gpus(gpus: int, tp: int, pp: int, dp: int, gbs: int, capsys) -> None:
    """A 145.6B GPT on 1,536 / 3,072 / 16,384 A100s: the planner's own derived system (all the
    layout's GPUs in one "node" for the memory check) is not held to the typed-input limit of
    1,024 GPUs per node."""
    from traincast.cli import main

    rc = main(["plan", "transformer", "--layers", "80", "--hidden", "12288", "--heads", "96",
               "--seq", "2048", "--vocab", "51200", "--gpus", str(gpus), "--tp", str(tp),
               "--pp", str(pp), "--dp", str(dp), "--micro-batch", "1", "--global-batch",
               str(gbs), "--recompute", "full", "--gpu", "A100-80GB", "--format", "json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    out = json.loads(captured.out)
    assert out["iteration_time_s"] > 0 and out["memory_gib_per_gpu"] > 0
    assert out["layout"]["dp"] == dp
