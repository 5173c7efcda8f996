"""The layout of ``engine/`` (DESIGN.md, "Layout"): no import cycle among its modules, and no module so
long that a newcomer cannot find a decision in it.

The import graph is built from the source (the AST of every ``engine/**/*.py``), not by importing it,
so a cycle is found even where it does not crash at import time. Every ``import``/``from ... import``
counts, at module level and inside functions alike: an import deferred into a function to dodge a
cycle at start-up (``engine.simulate`` importing ``engine.cli`` inside ``main``, which the CLI
imports) is still a cycle between the two modules' responsibilities. Only imports under
``if TYPE_CHECKING:`` are left out: they exist for the type checker and never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"

MAX_LINES = 600

# Modules allowed over MAX_LINES, each with why. An entry that is no longer over the limit (or no
# longer exists) fails the test, so the list only shrinks.
LONG_MODULES: Mapping[str, str] = {
    "engine/features/pools/strategy.py": "pool sizing and placement (Katalyst's generatePoolsAndIsolation) "
    "as one pass over the pools in their declared order; to be cut into sizing and placement",
    "engine/features/rules/durable.py": "the durable rule backend (one worker protocol: spawn, framing, "
    "timeouts, restart)",
    "engine/sources/collector.py": "the node collector's one tick of reads (what is pinned, refreshed, "
    "observed) as one state machine",
    "engine/sources/trace.py": "the trace format as one unit: schema-located reading, the tidal "
    "generator and the writers must agree field by field",
    "engine/kube/reflector.py": "list+watch with resourceVersion bookkeeping, backoff and relist as one "
    "state machine, as client-go's reflector",
    "engine/config/load.py": "the YAML loader with its marks (file:line:col of every value), limits and "
    "hostile-input guards, which share one node walker",
    "engine/kube/status.py": "QoSNodeStatus writer, QoSPolicy status aggregator and the leader lease "
    "that gates it, which share the status conditions they write",
}


# ---------------------------------------------------------------- the import graph


def module_name(path: Path, root: Path) -> str:
    """``engine.daemon.loop`` for root/engine/daemon/loop.py; a package is its ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import under ``node``, skipping the body of ``if TYPE_CHECKING:`` (not its ``else``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, ast.If) and _type_checking(child.test):
            for other in child.orelse:
                yield from _imports(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _imports(child)


def imported_modules(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The engine modules ``name`` imports: ``from a.b import c`` is ``a.b.c`` when that is a module,
    else ``a.b``; relative imports are resolved against the module's package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        for target in targets:
            # ``import engine.a.b`` names engine.a.b; keep the longest prefix that is an engine module
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package: Path = ENGINE) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports."""
    modules = {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path a -> ... -> a) per strongly connected component that has one
    (Tarjan's algorithm, iterative: the graph has a few hundred nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
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
                    components.append(sorted(component))
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: list[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest closed path through the component's first module (breadth-first inside it)."""
    members = set(component)
    start = component[0]
    parent: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start} in its own strongly connected component")


def test_engine_has_no_import_cycle() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles among engine modules (each a -> b means a imports b):\n" + "\n".join(
        "  " + " -> ".join(cycle) for cycle in cycles
    )


# The checker itself, on small trees whose answer is known: a test that cannot fail proves nothing.
@pytest.mark.parametrize(
    ("files", "cycles"),
    [
        ({"a.py": "import pkg.b\n", "b.py": "from pkg import a\n"}, [["pkg.a", "pkg.b", "pkg.a"]]),
        # deferred into a function: still a cycle (the cli <-> simulate case)
        (
            {"a.py": "from pkg.b import f\n", "b.py": "def f():\n    from pkg.a import g\n"},
            [["pkg.a", "pkg.b", "pkg.a"]],
        ),
        # only for the type checker: not a cycle
        (
            {
                "a.py": "from pkg.b import f\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import g\n",
            },
            [],
        ),
        # relative imports, and a three-module loop
        (
            {"a.py": "from . import b\n", "b.py": "from .c import x\n", "c.py": "from .a import y\n"},
            [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]],
        ),
        # a package's __init__ importing its own submodule, which imports a sibling: no cycle
        ({"__init__.py": "from pkg.a import x\n", "a.py": "from pkg.b import y\n", "b.py": "x = 1\n"}, []),
    ],
)
def test_the_cycle_finder(tmp_path: Path, files: dict[str, str], cycles: list[list[str]]) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name, text in files.items():
        (pkg / name).write_text(text)
    (pkg / "__init__.py").touch()
    assert find_cycles(import_graph(pkg)) == cycles


# ---------------------------------------------------------------- module length


def test_no_engine_module_is_over_the_line_limit() -> None:
    lengths = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in ENGINE.rglob("*.py")
    }
    too_long = sorted(
        f"{path}: {n} lines" for path, n in lengths.items() if n > MAX_LINES and path not in LONG_MODULES
    )
    assert not too_long, (
        f"engine modules over {MAX_LINES} lines; split each into a package of its parts (or, if it "
        "truly is one unit, add it to LONG_MODULES in tests/test_layout.py with why):\n  "
        + "\n  ".join(too_long)
    )
    stale = sorted(path for path in LONG_MODULES if lengths.get(path, 0) <= MAX_LINES)
    assert not stale, f"LONG_MODULES entries no longer over {MAX_LINES} lines (or gone); remove them: {stale}"
