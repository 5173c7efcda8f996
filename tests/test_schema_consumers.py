"""No silent config: everything the policy schema accepts is read by code that acts on it.

Issue 15 found fields the schema and the bundled rules declared and nothing used: evict ``killer``
and ``minNumaUsageRatio`` were compiled into the typed spec and never read again, and the effects
``cpu.numaShare``, ``cpu.alignBySocket`` and ``eviction.softEvictNotify`` were parsed into every
pod's classification and never looked at. A rule writer saw them accepted and believed them. Three
static checks over the AST of engine/ close each path by which that can happen again:

1. every property name in schemas/qospolicy.schema.json is read by the engine: a string constant
   used as a key (``m["k"]``, ``m.get("k")``, ``"k" in m``, a helper's argument) or in a table
   literal, outside the schema checker itself;
2. every field of every frozen spec dataclass (engine/features/*/spec.py, engine/config/policy.py)
   is read as an attribute somewhere in engine/ outside the functions that compile it, so a field
   compiled from YAML and then ignored fails here;
3. every enhancement effect the schema offers is read by a feature (not only typed by the compiler).

Name-based, like the reachability check: a name shared with live code passes. The failure message
names the property, field or effect and where it is declared.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "engine"
SCHEMA = ROOT / "schemas" / "qospolicy.schema.json"
# Modules whose reads of a key are not a consumer: they check documents, they do not act on them.
NOT_CONSUMERS = {ENGINE / "config" / "schema_check.py"}
SPEC_FILES = [*sorted((ENGINE / "features").glob("*/spec.py")), ENGINE / "config" / "policy.py"]
COMPILE_FUNCTIONS = ("compile", "of", "check", "_check")


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(ENGINE.rglob("*.py"))}


def _schema_properties() -> dict[str, str]:
    """Property name -> the JSON pointer of one place that declares it."""
    out: dict[str, str] = {}

    def walk(node: object, pointer: str) -> None:
        if isinstance(node, dict):
            for name in node.get("properties") or {}:
                out.setdefault(name, f"{pointer}/properties/{name}")
            for key, value in node.items():
                walk(value, f"{pointer}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{pointer}/{i}")

    walk(json.loads(SCHEMA.read_text(encoding="utf-8")), "#")
    return out


def _key_reads(tree: ast.AST) -> Iterator[str]:
    """String constants used as keys: subscripts, call arguments (``m.get("k")``, helpers that
    read a key), comparisons (``"k" in m``, ``kind == "k"``), and the elements and keys of table
    literals (dicts, tuples, sets, lists). Docstrings and messages are none of these."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            yield from _strings(node.slice)
        elif isinstance(node, ast.Call):  # m.get("k"), a helper's _duration(cfg, "k", ...)
            for arg in node.args:
                yield from _strings(arg)
        elif isinstance(node, ast.Compare):  # "k" in m, kind == "k"
            for operand in (node.left, *node.comparators):
                yield from _strings(operand)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    yield from _strings(key)
        elif isinstance(node, ast.Tuple | ast.Set | ast.List):
            for element in node.elts:
                yield from _strings(element)


def _strings(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Tuple):
        for element in node.elts:
            yield from _strings(element)


def test_every_schema_property_is_read_by_the_engine() -> None:
    read: Counter[str] = Counter()
    for path, tree in _trees().items():
        if path not in NOT_CONSUMERS:
            read.update(_key_reads(tree))
    unread = {name: where for name, where in _schema_properties().items() if not read[name]}
    assert not unread, (
        "schemas/qospolicy.schema.json accepts properties no engine code reads; wire each or "
        "delete it from the schema and the bundled rules:\n  "
        + "\n  ".join(f"{name} ({where})" for name, where in sorted(unread.items()))
    )


def _spec_fields() -> Iterator[tuple[Path, str, str, int]]:
    """(file, class, field, line) of every dataclass field set at construction (init=False fields are
    lookups derived from the others, not configuration)."""
    for path in SPEC_FILES:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.ClassDef) or not any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                continue
            for item in node.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                if "ClassVar" in ast.unparse(item.annotation):
                    continue
                if item.value is not None and "init=False" in ast.unparse(item.value):
                    continue
                yield path, node.name, item.target.id, item.lineno


def _attribute_reads(trees: dict[Path, ast.Module]) -> Counter[str]:
    """Attribute loads in engine/, leaving out the bodies of the spec files' compile functions
    (where a spec is built from raw YAML: reading a field there consumes nothing)."""
    reads: Counter[str] = Counter()
    for path, tree in trees.items():
        skip: set[int] = set()
        if path in SPEC_FILES:
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name.startswith(COMPILE_FUNCTIONS):
                    skip.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in skip:
                reads[node.attr] += 1
    return reads


def test_every_spec_field_is_read_outside_its_compile_function() -> None:
    reads = _attribute_reads(_trees())
    unread = [
        f"{path.relative_to(ROOT)}:{line} {cls}.{name}"
        for path, cls, name, line in _spec_fields()
        if not reads[name]
    ]
    assert not unread, (
        "typed spec fields compiled from the policy and read by nothing (the tick ignores them); "
        "wire each where the feature decides, or delete it with its schema property:\n  "
        + "\n  ".join(unread)
    )


def _effects_in_schema() -> set[str]:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    effect = schema["$defs"]["enhancement"]["properties"]["effect"]
    return set(effect["properties"]["set"]["enum"])


def test_every_enhancement_effect_is_read_by_a_feature() -> None:
    """An effect lands in each pod's classification (``effects``); a feature must look it up."""
    from engine.config.compile import EFFECT_TYPES

    effects = _effects_in_schema()
    assert effects == set(EFFECT_TYPES), "the schema's effect enum and the compiler's EFFECT_TYPES differ"
    used: Counter[str] = Counter()
    for path, tree in _trees().items():
        if path != ENGINE / "config" / "compile.py":
            used.update(
                n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
    unread = sorted(e for e in effects if not used[e])
    assert not unread, f"enhancement effects the schema offers and no feature reads: {unread}"
