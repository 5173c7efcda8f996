"""Every public function of engine/features/ is called by the engine, not only by tests.

Issue 15 found ported code (headroom assemblers, a NUMA victim picker, a release chain, resctrl and
OOM-priority helpers) that only tests called: it looked like a capability and was none. This walks
the AST of engine/ and fails on any public function or method defined under engine/features/ whose
name nothing else in engine/ uses (as a name or an attribute; importing it is not using it). Name-based, so a name
shared with a live function elsewhere passes; it catches what matters, code no path reaches.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "engine"
FEATURES = ENGINE / "features"

# name -> why nothing in engine/ mentions it by name, yet it is reached
ALLOWED = {
    "worker_main": "the durable backend's child process runs it from a `python -c` command string",
    "compile_condition": "the condition compiler's one-condition entry: compile_rules shares its code "
    "generator (_function_src), and the hypothesis property tests drive the compiler through it",
    "last_plan": "ResctrlStep's read-only view of its cached plan, kept for the cache's tests",
}


def _definitions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """Public top-level functions and public methods of top-level classes."""
    out: list[tuple[str, ast.AST]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            out.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and not item.name.startswith("_"):
                    out.append((item.name, item))
    return out


def _mentions(node: ast.AST) -> Counter[str]:
    """Names and attributes under ``node`` (an import alone is no use)."""
    found: Counter[str] = Counter()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            found[n.id] += 1
        elif isinstance(n, ast.Attribute):
            found[n.attr] += 1
        stack.extend(ast.iter_child_nodes(n))
    return found


def unreached() -> list[str]:
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(ENGINE.rglob("*.py"))}
    definitions = [
        (path, name, node)
        for path, tree in trees.items()
        if FEATURES in path.parents
        for name, node in _definitions(tree)
    ]
    used: Counter[str] = Counter()
    for tree in trees.values():
        used += _mentions(tree)
    return sorted(
        f"{path.relative_to(ROOT)}:{node.lineno} {name}"  # type: ignore[attr-defined]
        for path, name, node in definitions
        # a function's own body is no caller (recursion)
        if used[name] - _mentions(node)[name] <= 0 and name not in ALLOWED
    )


def test_every_public_feature_function_is_reached_from_the_engine() -> None:
    missing = unreached()
    assert not missing, (
        "public functions in engine/features/ that nothing in engine/ calls (only tests do); wire "
        "each where a declared field needs it, or delete it and its tests:\n  " + "\n  ".join(missing)
    )


def test_the_allow_list_names_live_definitions() -> None:
    """An allow-list entry whose function was deleted or renamed would hide the next one."""
    defined = {
        name
        for path in FEATURES.rglob("*.py")
        for name, _ in _definitions(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert set(ALLOWED) <= defined, sorted(set(ALLOWED) - defined)
