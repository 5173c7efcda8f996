"""The fact names rule conditions may use, derived from the facts snapshot schema.

The facts schema is the one place where facts are defined: each ``$defs/*Facts`` object carries an
``x-qosd-scope`` and every leaf below it is a fact named ``<scope>.<path>`` (``class.<name>.<path>``
for class aggregates). Deriving the registry keeps the validator, the evaluator and the editor schema
from drifting apart.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from engine.resources import load_schema

Scope = Literal["node", "numa", "pod", "container", "class"]
ValueKind = Literal["number", "integer", "string", "boolean"]

SCOPES: tuple[Scope, ...] = ("node", "numa", "pod", "container", "class")
ITERATED_SCOPES: frozenset[str] = frozenset({"numa", "pod", "container"})


@dataclass(frozen=True)
class FactSpec:
    """What one fact is: its scope, value type, unit, and whether it has windowed aggregates."""

    name: str
    scope: Scope
    path: tuple[str, ...]
    kind: ValueKind
    series: bool
    unit: str = ""
    description: str = ""
    enum: tuple[str, ...] = ()

    @property
    def numeric(self) -> bool:
        return self.kind in ("number", "integer")


@dataclass(frozen=True)
class FactRef:
    """A fact name resolved against the registry; ``class_name`` is set for class.<name>.* facts."""

    spec: FactSpec
    class_name: str | None = None


class FactRegistry:
    """Lookup of fact names; built once per process from the facts schema."""

    def __init__(self, specs: list[FactSpec]):
        self.specs: dict[str, FactSpec] = {s.name: s for s in specs}

    def resolve(self, name: str) -> FactRef | None:
        parts = name.split(".")
        if parts[0] == "class":
            if len(parts) < 3:
                return None
            spec = self.specs.get("class.*." + ".".join(parts[2:]))
            return FactRef(spec, parts[1]) if spec else None
        spec = self.specs.get(name)
        return FactRef(spec) if spec else None

    def suggest(self, name: str, class_names: tuple[str, ...] = ()) -> list[str]:
        """Close matches for a misspelt fact, with class.* expanded to the policy's classes."""
        candidates: list[str] = []
        for n in self.specs:
            if n.startswith("class.*."):
                rest = n[len("class.*.") :]
                candidates.extend(f"class.{c}.{rest}" for c in class_names or ("<class>",))
            else:
                candidates.append(n)
        return difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)

    def names(self) -> list[str]:
        return sorted(self.specs)


def _deref(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target: Mapping[str, Any] = root["$defs"][ref[len("#/$defs/") :]]
        inherited = {k: v for k, v in target.items() if k != "description"}
        merged = {**inherited, **{k: v for k, v in schema.items() if k != "$ref"}}
        return merged
    return schema


def _walk(
    schema: Mapping[str, Any], root: Mapping[str, Any], scope: Scope, path: tuple[str, ...]
) -> list[FactSpec]:
    node = _deref(schema, root)
    prefix = "class.*" if scope == "class" else scope
    name = ".".join((prefix, *path))
    unit = str(node.get("x-qosd-unit", ""))
    description = str(node.get("description", ""))
    if node.get("x-qosd-series"):
        return [FactSpec(name, scope, path, "number", True, unit=unit, description=description)]
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        out: list[FactSpec] = []
        for key, sub in node["properties"].items():
            out.extend(_walk(sub, root, scope, (*path, key)))
        return out
    if kind in ("number", "integer", "string", "boolean"):
        enum = tuple(str(v) for v in node.get("enum", ()))
        return [FactSpec(name, scope, path, kind, False, enum=enum, unit=unit, description=description)]
    return []


@cache
def registry() -> FactRegistry:
    schema = load_schema("facts")
    specs: list[FactSpec] = []
    for definition in schema["$defs"].values():
        scope = definition.get("x-qosd-scope")
        if scope in SCOPES:
            specs.extend(_walk(definition, schema, scope, ()))
    return FactRegistry(specs)
