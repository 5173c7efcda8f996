"""Every quantity and duration in a schema-checked document, found by its schema and parsed with bounds.

A JSON Schema pattern says a quantity looks like ``1e9999999`` and a duration like ``99999999h``, but
not that the value is finite and in range; a value that passes the pattern and then overflows would
fail every tick instead of failing validation. So after the schema check, the document is walked
beside its schema: wherever the schema refers to the ``quantity`` or ``duration`` definition (or,
to a trace's ``offset``, or in facts to ``windowValues``, whose keys are durations), the value is parsed by
:mod:`engine.model.units`, which holds the bounds, and a value out of bounds becomes a located
problem. Fields added to a schema later are covered by the same walk, and the code that reads such a
value at run time can rely on it parsing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any, Literal

from engine.config.errors import Location, Problem
from engine.config.load import JsonPath
from engine.model.units import UnitError, duration_seconds, parse_duration, parse_quantity
from engine.resources import data_dir

Locator = Callable[[JsonPath, bool], Location]
Parser = Callable[[Any], float]

# definition name -> (what it types: the value itself or an object's keys, the parser with bounds)
UNIT_DEFS: Mapping[str, tuple[Literal["value", "keys", "text"], Parser]] = {
    "quantity": ("value", parse_quantity),
    "quantityText": ("text", parse_quantity),  # facts: the string form of a metric (numbers stay as they are)
    "duration": ("value", duration_seconds),
    "offset": ("value", duration_seconds),  # trace: time since the start, seconds or a duration
    "windowValues": ("keys", parse_duration),
}


@cache
def schema_file(name: str) -> Mapping[str, Any]:
    """A bundled schema by file name (``qospolicy.schema.json``); cached, never to be modified."""
    with (data_dir("schemas") / name).open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema


def unit_values(
    schema: Mapping[str, Any], data: Any, root: Mapping[str, Any] | None = None
) -> Iterator[tuple[JsonPath, bool, Parser, Any]]:
    """``(path, is_key, parser, value)`` for every value (or key) of ``data`` that ``schema`` types
    as a unit. ``data`` must already be valid against the schema. ``root`` is the schema node
    ``data`` stands at (default: the whole schema), e.g. ``schema["$defs"]["spec"]``."""
    yield from _walk(schema, schema if root is None else root, data, (), frozenset())


def unit_problems(
    schema: Mapping[str, Any], data: Any, locate: Locator, root: Mapping[str, Any] | None = None
) -> list[Problem]:
    """A located problem for each quantity or duration of ``data`` that does not parse within bounds."""
    return [problem for _, problem in unit_findings(schema, data, locate, root)]


def unit_findings(
    schema: Mapping[str, Any], data: Any, locate: Locator, root: Mapping[str, Any] | None = None
) -> list[tuple[JsonPath, Problem]]:
    """``unit_problems`` with the path of each value (or key) out of bounds, for taking it out."""
    found: list[tuple[JsonPath, Problem]] = []
    for path, is_key, parse, value in unit_values(schema, data, root):
        try:
            parse(value)
        except UnitError as exc:
            found.append((path, Problem(locate(path, is_key), str(exc), _HINTS[parse])))
    return found


_HINTS: Mapping[Parser, str] = {
    parse_quantity: "a quantity is a finite amount from 0 to 8Pi, e.g. 4, 500m, 300Mi or 5Gi",
    duration_seconds: "a duration is from 0 to 8760h, e.g. 500ms, 30s, 5m or 1h30m",
    parse_duration: "a window is from 0 to 8760h, e.g. 15s, 5m or 1h",
}


def _resolve(document: Mapping[str, Any], ref: str) -> tuple[Mapping[str, Any], str, Any]:
    """(the schema document the reference lands in, the definition's name, its body)."""
    file, _, pointer = ref.partition("#")
    target_doc = schema_file(file) if file else document
    node: Any = target_doc
    for part in pointer.strip("/").split("/") if pointer.strip("/") else ():
        node = node[part]
    name = pointer.rsplit("/", 1)[-1] if pointer.startswith("/$defs/") else ""
    return target_doc, name, node


def _walk(
    document: Mapping[str, Any], node: Any, data: Any, path: JsonPath, refs: frozenset[str]
) -> Iterator[tuple[JsonPath, bool, Parser, Any]]:
    if not isinstance(node, Mapping):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        target_doc, name, body = _resolve(document, ref)
        unit = UNIT_DEFS.get(name)
        if unit is not None:
            yield from _units(unit, data, path)
        # Keys typed as units may have typed values too; a definition reached again without moving
        # into the data is a loop.
        if (unit is None or unit[0] == "keys") and ref not in refs:
            yield from _walk(target_doc, body, data, path, refs | {ref})
    for keyword in ("oneOf", "anyOf", "allOf"):
        for branch in node.get(keyword) or ():
            yield from _walk(document, branch, data, path, refs)
    if isinstance(data, dict):
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        for key, value in data.items():
            sub = properties.get(key, extra)
            if isinstance(sub, Mapping):
                yield from _walk(document, sub, value, (*path, key), frozenset())
    elif isinstance(data, list):
        prefix = node.get("prefixItems") or ()
        items = node.get("items")
        for i, value in enumerate(data):
            sub = prefix[i] if i < len(prefix) else items
            if isinstance(sub, Mapping):
                yield from _walk(document, sub, value, (*path, i), frozenset())


def _units(
    unit: tuple[Literal["value", "keys", "text"], Parser], data: Any, path: JsonPath
) -> Iterator[tuple[JsonPath, bool, Parser, Any]]:
    what, parse = unit
    if what == "text":
        if isinstance(data, str):
            yield path, False, parse, data
    elif what == "keys":
        if isinstance(data, dict):
            for key in data:
                yield (*path, key), True, parse, str(key)
    elif isinstance(data, str | int | float) and not isinstance(data, bool):
        yield path, False, parse, data
