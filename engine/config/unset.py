"""``unset``: an overlay removes inherited fields, so the lower layer's default applies again.

Field-level overlay can change a value but not take one away: an overlay could not drop the
bundled rule's ``cooldown`` or a class's ``memoryQos`` without restating the whole entry. JSON merge
patch deletes with ``null``, but the Kubernetes API server prunes nulls from custom resources whose
schema does not declare ``nullable``, so a QoSPolicy CR would silently keep the field. qosd therefore
names the fields to remove, as a list every layer carries unchanged:
``{name: be-memory-evict, unset: [cooldown, then.evict.maxPerRound]}``.

Paths are dotted, relative to the entry (or to ``reclaim``/``pressure``/``cgroup``). They are removed
from what the lower documents built before this document's own fields apply, so a document can unset
a mapping and set one key of it afresh. A path that names no field the schema knows is an error; a
path the inherited entry lacks is a no-op (another profile's entry may have it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from engine.config.errors import Location, Problem
from engine.config.load import JsonPath
from engine.config.schema_check import did_you_mean
from engine.resources import load_schema

UNSET = "unset"
# Section -> schema definition of one of its entries (named sections) or of itself.
DEFINITIONS = {
    "classes": "class",
    "enhancements": "enhancement",
    "pools": "pool",
    "rules": "rule",
    "reclaim": "reclaim",
    "pressure": "pressure",
    "cgroup": None,  # defined inline under spec
}
NEVER = frozenset({"name", "enabled", UNSET})  # identity and switches are not fields to drop


@cache
def policy_schema() -> Mapping[str, Any]:
    """The QoSPolicy schema, read once (load_schema reads the file on every call)."""
    return load_schema("policy")


@cache
def _section_schema(section: str) -> Mapping[str, Any]:
    schema = policy_schema()
    name = DEFINITIONS[section]
    if name is None:
        found: Mapping[str, Any] = schema["$defs"]["spec"]["properties"][section]
        return found
    found = schema["$defs"][name]
    return found


def _resolve(node: Any) -> Any:
    defs = policy_schema()["$defs"]
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _children(node: Any) -> tuple[dict[str, Any], bool, set[str]]:
    """(properties a mapping at ``node`` may have, whether other keys are allowed too, the
    properties some alternative requires)."""
    node = _resolve(node)
    props: dict[str, Any] = {}
    required: set[str] = set()
    open_ended = False
    if not isinstance(node, Mapping):
        return props, True, required
    props.update(node.get("properties") or {})
    required.update(node.get("required") or ())
    extra = node.get("additionalProperties")
    if extra not in (None, False) or node.get("patternProperties"):
        open_ended = True
    for key in ("oneOf", "anyOf", "allOf"):
        for branch in node.get(key) or ():
            sub, more, needed = _children(branch)
            props.update(sub)
            required |= needed
            open_ended = open_ended or more
    if not props and "properties" not in node and not any(k in node for k in ("oneOf", "anyOf", "allOf")):
        open_ended = True  # a scalar or free-form value: nothing below it to check
    return props, open_ended, required


def path_problem(section: str, path: str) -> tuple[int, str, str] | None:
    """(index of the bad segment, message, hint) when ``path`` names no field of ``section``'s entries."""
    parts = path.split(".")
    if any(not p for p in parts):
        return 0, f"{path!r} is not a field path", "write dotted field names such as then.evict.cooldown"
    if parts[0] in NEVER:
        return 0, f"{parts[0]!r} cannot be unset", "use enabled: false to switch an entry off"
    node: Any = _section_schema(section)
    for i, part in enumerate(parts):
        props, open_ended, required = _children(node)
        if part in required and i == len(parts) - 1:
            where = ".".join(parts[:i])
            if not where:
                return i, f"{part!r} is required of every entry and cannot be unset", ""
            return i, f"{part!r} is required in {where} and cannot be unset", f"unset {where} as a whole"
        if part in props:
            node = props[part]
            continue
        if open_ended:
            return None
        hint = did_you_mean(part, props) or (f"fields here: {', '.join(sorted(props))}" if props else "")
        where = ".".join(parts[:i]) or "the entry"
        return i, f"{where} has no field {part!r} to unset", hint
    return None


def unset_problems(spec: Mapping[str, Any], locate: Callable[[JsonPath], Location]) -> list[Problem]:
    """Every ``unset`` path of a document's spec that names no field (located at the path)."""
    return [problem for _, problem in unset_findings(spec, locate)]


def unset_findings(
    spec: Mapping[str, Any], locate: Callable[[JsonPath], Location]
) -> list[tuple[JsonPath, Problem]]:
    """``unset_problems`` with the document path of each bad ``unset`` item, for taking it out."""
    out: list[tuple[JsonPath, Problem]] = []
    for section in DEFINITIONS:
        value = spec.get(section)
        if isinstance(value, list):
            places: list[tuple[JsonPath, Any]] = [((section, i), item) for i, item in enumerate(value)]
        else:
            places = [((section,), value)]
        for base, entry in places:
            paths = entry.get("unset") if isinstance(entry, Mapping) else None
            if not isinstance(paths, list):
                continue
            for k, path in enumerate(paths):
                found = path_problem(section, str(path))
                if found is not None:
                    _, message, hint = found
                    where: JsonPath = ("spec", *base, UNSET, k)
                    out.append((where, Problem(locate(where), message, hint)))
    return out


def unset_paths(data: dict[str, Any], paths: list[str]) -> list[tuple[str, ...]]:
    """Remove each dotted path from ``data`` in place; the paths that held a value (as tuples)."""
    removed = []
    for path in paths:
        parts = tuple(path.split("."))
        target: Any = data
        for part in parts[:-1]:
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict) and parts[-1] in target:
            del target[parts[-1]]
            removed.append(parts)
    return removed


def has_unset(spec: Mapping[str, Any]) -> bool:
    """Whether a document's spec removes any inherited field."""
    for section in DEFINITIONS:
        value = spec.get(section)
        entries = value if isinstance(value, list) else [value]
        if any(isinstance(e, Mapping) and e.get(UNSET) for e in entries):
            return True
    return False
