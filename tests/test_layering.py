"""Imports go only downward, and no module imports itself back through others.

Layers, lowest first: the core (single modules under rltrace/, the catalog, the calibration data, the shipped
samples); what writes traces (collectors) and what makes them up (synth), each on its own; replay; analysis;
dashboards; the library API (``rltrace.api``); the CLI; the package's entry points. A module may import its own
layer's package or any layer below.

Every import counts, a function's too (only ``if TYPE_CHECKING:`` blocks are left out): with no cycle in that
graph, no import inside a function can exist to dodge one. The imports left inside functions load an optional
dependency (torch, Ray) or keep what a recorded job imports small.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("collectors", "synth"),
    ("replay",),
    ("analysis",),
    ("dashboards",),
    ("api",),
    ("cli",),
    ("entry",),
)
"""each tuple is one layer of packages that must not import one another"""
PACKAGES = {name for layer in LAYERS for name in layer}
ENTRY = {"rltrace", "rltrace.__main__"}
"""the package itself (its lazy public names) and ``python -m rltrace``"""


def package_of(module: str) -> str:
    """The layered package a module of ``rltrace`` belongs to."""
    if module in ENTRY:
        return "entry"
    part = module.split(".")[1]
    return part if part in PACKAGES else "core"


def layer_of(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def modules(root: Path, name: str) -> dict[str, Path]:
    """Every module of package ``name`` whose folder is ``root``, by dotted name."""
    found = {}
    for path in root.rglob("*.py"):
        parts = (name, *path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(tree: ast.AST, top: str) -> Iterator[str]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == top:
            yield from (f"{node.module}.{a.name}" for a in node.names)
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == top)
        yield from _imports(node, top)


def import_graph(root: Path, name: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name imported from a package counts as its module when it
    is one, else as the package)."""
    known = modules(root, name)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        targets = {t for t in _imports(ast.parse(path.read_text()), name) if t in known}
        # ``from a.b import c``: c when it is a module, else a.b (both are yielded; keep the deepest known one)
        graph[module] = {t for t in targets if t != module and not any(o.startswith(t + ".") for o in targets)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a higher layer, or of another package of the same layer."""
    bad = []
    for module, targets in graph.items():
        mine = package_of(module)
        for target in sorted(targets):
            theirs = package_of(target)
            if theirs != mine and layer_of(theirs) >= layer_of(mine):
                bad.append((module, target))
    return bad


def installed() -> dict[str, set[str]]:
    spec = importlib.util.find_spec("rltrace")
    assert spec is not None and spec.origin is not None
    return import_graph(Path(spec.origin).parent, "rltrace")


def test_the_installed_package_has_no_import_cycle() -> None:
    graph = installed()
    assert len(graph) > 200
    assert cycles(graph) == []


def test_the_installed_package_imports_only_downward() -> None:
    assert upward(installed()) == []


PLANTED = {
    "a cycle through a function's import": {
        "rltrace/replay/a.py": "from rltrace.replay import b\n",
        "rltrace/replay/b.py": "def f():\n    from rltrace.replay.a import x\n",
    },
    "a collector importing replay": {
        "rltrace/collectors/c.py": "from rltrace.replay.registry import Registry\n",
        "rltrace/replay/registry.py": "",
    },
    "synth importing a collector": {
        "rltrace/synth/s.py": "import rltrace.collectors.c\n",
        "rltrace/collectors/c.py": "",
    },
}


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_cycle_or_upward_import_is_caught(name: str, tmp_path: Path) -> None:
    for rel, text in {**PLANTED[name], "rltrace/__init__.py": "", "rltrace/replay/__init__.py": "",
                      "rltrace/collectors/__init__.py": "", "rltrace/synth/__init__.py": ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path / "rltrace", "rltrace")
    assert cycles(graph) or upward(graph)


def test_a_type_checking_import_does_not_count(tmp_path: Path) -> None:
    (tmp_path / "rltrace" / "replay").mkdir(parents=True)
    (tmp_path / "rltrace" / "__init__.py").write_text("")
    (tmp_path / "rltrace" / "replay" / "__init__.py").write_text("")
    (tmp_path / "rltrace" / "replay" / "a.py").write_text("from rltrace.replay import b\n")
    (tmp_path / "rltrace" / "replay" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rltrace.replay.a import x\n")
    graph = import_graph(tmp_path / "rltrace", "rltrace")
    assert cycles(graph) == [] and graph["rltrace.replay.b"] == set()


@pytest.mark.parametrize("module", ["kernels.py", "iteration_costs.py", "memory.py", "roofline.py"])
def test_the_roofline_stays_split_into_modules_under_250_lines(module: str) -> None:
    """The roofline is kernels, what an iteration adds to them, memory and the replay adapter: each read whole."""
    lines = len((Path(__file__).resolve().parents[1] / "replay" / "costmodels" / module).read_text().splitlines())
    assert lines < 250, f"replay/costmodels/{module} has {lines} lines: split it by concept"
