"""The package's floor plan, checked from its source (AST): imports only run down the layers
of the design (docs/design.md), no import cycles between folders or between modules, and
imports made inside function bodies are few and each says why.

Layers, low -> high: ``util``, ``errors``, ``version`` < ``trace`` < ``graph`` <
``simulate``, ``costs`` < ``whatif``, ``record`` < ``analysis`` < ``predict``, ``plan`` <
``report``, ``export`` < the package face (``traincast/__init__.py``) < ``cli``.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "traincast"

LAYER = {"util": 0, "errors": 0, "version": 0, "trace": 1, "graph": 2, "simulate": 3,
         "costs": 3, "whatif": 4, "record": 4, "analysis": 5, "predict": 6, "plan": 6,
         "report": 7, "export": 7, "__init__": 8, "cli": 9}
#: most imports inside function bodies allowed, as a share of all internal imports
MAX_INNER_SHARE = 0.10


@dataclass(frozen=True)
class Import:
    src: str  # importing module, dotted
    dst: str  # imported module, dotted (a name imported from a package counts as its module)
    inner: bool  # inside a function body
    line: int
    reason: bool  # a comment on the import's line or the line above


def _modname(p: Path) -> str:
    rel = p.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_modname(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(name: str, mods: dict[str, Path]) -> str:
    """The module a dotted import target lives in (``traincast.x.f`` -> ``traincast.x``)."""
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


@functools.cache
def _imports() -> list[Import]:
    mods = _modules()
    out = []
    for me, p in mods.items():
        src = p.read_text()
        lines = src.splitlines()
        tree = ast.parse(src)
        inner_nodes = {id(n) for f in ast.walk(tree)
                       if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f)}
        is_pkg = p.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = me.split(".")
                    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                if mod == "traincast" or mod.startswith("traincast."):
                    targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod
                               for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names
                           if a.name == "traincast" or a.name.startswith("traincast.")]
            for t in targets:
                ln = node.lineno
                here = lines[ln - 1]
                above = lines[ln - 2].strip() if ln >= 2 else ""
                reason = "#" in here or above.startswith("#")
                out.append(Import(me, _resolve(t, mods), id(node) in inner_nodes, ln, reason))
    return out


def _room(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_room_has_a_layer() -> None:
    rooms = {_room(m) for m in _modules()}
    assert rooms <= set(LAYER), f"folders or root modules without a layer: {rooms - set(LAYER)}"


def test_no_import_runs_up_the_layers() -> None:
    up = [f"{i.src}:{i.line} -> {i.dst}" for i in _imports()
          if LAYER.get(_room(i.dst), 0) > LAYER.get(_room(i.src), 0)]
    assert not up, "imports running up the layers:\n" + "\n".join(up)


def test_no_folders_import_each_other() -> None:
    edges = {(_room(i.src), _room(i.dst)) for i in _imports() if _room(i.src) != _room(i.dst)}
    cycles = sorted({tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges})
    assert not cycles, f"folders importing each other: {cycles}"


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_module_import_cycles() -> None:
    """Module-level imports (those run when a module is imported) form no cycle. A package's
    ``__init__`` importing its own submodules and being imported by them is a cycle too."""
    graph: dict[str, set[str]] = {m: set() for m in _modules()}
    for i in _imports():
        if not i.inner and i.dst != i.src:
            graph[i.src].add(i.dst)
    cycles = _sccs(graph)
    assert not cycles, "module import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_imports_inside_functions_are_few_and_say_why() -> None:
    imps = _imports()
    inner = [i for i in imps if i.inner]
    share = len(inner) / len(imps)
    silent = [f"{i.src}:{i.line} -> {i.dst}" for i in inner if not i.reason]
    assert not silent, ("imports inside functions without a reason (a comment on the line or "
                        "the line above):\n" + "\n".join(silent))
    assert share < MAX_INNER_SHARE, (f"{len(inner)} of {len(imps)} internal imports "
                                     f"({share:.0%}) are inside functions")


@pytest.mark.parametrize("limit", [700])
def test_no_module_is_huge(limit: int) -> None:
    """No module over ``limit`` lines (the design aims at ~600; the few between 600 and 700
    hold one concept each, named in docs/design.md)."""
    big = {m: p.read_text().count("\n") for m, p in _modules().items()}
    over = {m: n for m, n in big.items() if n > limit}
    assert not over, f"modules over {limit} lines: {over}"
